"""The wheel as a user installs it: built from the checkout, installed away from
it, run from a folder outside it. A source checkout reads its own slurm/ folder,
so only an installed copy shows whether the job templates ship in the wheel."""

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# What a clean clone holds that the build reads.
SOURCES = ("pyproject.toml", "README.md", "engine", "studies", "slurm")


def _pip(*args, cwd=None) -> str:
    """pip's output (stdout and stderr), once it succeeded."""
    out = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout + out.stderr


def _can_build_wheels() -> bool:
    """The build runs in this environment (no isolation, no network): setuptools
    builds wheels itself from 70.1 on, before that only with the wheel package."""
    try:
        major, minor = (int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    except importlib.metadata.PackageNotFoundError:
        return False
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, folder the wheel is installed into, the build's output): the
    dependencies are this environment's, only rollsweep itself comes from the wheel."""
    if not _can_build_wheels():
        pytest.skip("building a wheel needs setuptools >= 70.1 (the test extra) or the wheel package")
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.zarr"))
        else:
            shutil.copy2(ROOT / name, source / name)
    build = _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base / "dist"), str(source))
    (wheel,) = (base / "dist").glob("rollsweep-*.whl")
    _pip("install", "--no-deps", "-q", "--target", str(base / "site"), str(wheel))
    return wheel, base / "site", build


# The environment's editable install of the checkout answers imports of its
# packages (engine.solve, say) before the path is searched: without it, only
# the wheel's files can be imported.
WHEEL_ONLY = (
    "import sys; editable = lambda x: x.__module__.startswith('__editable__'); "
    "sys.meta_path[:] = [f for f in sys.meta_path if not editable(f)]; "
    "sys.path_hooks[:] = [h for h in sys.path_hooks if not editable(h)]; "
)


def _python(site: pathlib.Path, cwd: pathlib.Path, code: str, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-c", WHEEL_ONLY + code, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _rollsweep(site: pathlib.Path, cwd: pathlib.Path, *args) -> subprocess.CompletedProcess:
    return _python(site, cwd, "import engine.cli; sys.exit(engine.cli.main(sys.argv[1:]))", *args)


def test_wheel_ships_every_package_of_the_checkout(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = [p.relative_to(ROOT) for top in ("engine", "studies") for p in (ROOT / top).rglob("__init__.py")]
    assert packages and not [str(p) for p in packages if str(p) not in names]


def test_wheel_ships_job_templates_not_the_harness(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "engine/slurm_templates/array.sbatch" in names and "engine/slurm_templates/check.sbatch" in names
    assert not [n for n in names if n.endswith(("start-local-slurm.sh", "slurm.conf.example"))]
    assert any(n.startswith("studies/pingpong/demo/") and n.endswith(".toml") for n in names)


def test_wheel_ships_every_demo_and_data_file(installed):
    """The studies' demo sweeps and data, read through importlib.resources."""
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    files = [p.relative_to(ROOT).as_posix() for folder in ("demo", "data")
             for p in (ROOT / "studies").glob(f"*/{folder}/**/*.*") if "__pycache__" not in p.parts]
    assert files and not [f for f in files if f not in names]


# A build backend's warning, as Python prints it (`BuildBackendWarning: Package
# 'studies.bicycle.data' is absent from the packages configuration`, in a 40-line
# box); pip's own notes are "WARNING:", about this machine's index, not the build.
BACKEND_WARNING = re.compile(r"\w+Warning: .*")


def test_wheel_builds_without_warnings(installed):
    """`make demo`'s editable install runs the same build steps: each warning
    would be a box of lines in the set-up's output a new user reads."""
    _, _, build = installed
    assert not BACKEND_WARNING.findall(build), build[:3000]


def _found_only_through_pythonpath(names=("numpy", "jax", "diffrax", "xarray", "zarr", "dask", "distributed")):
    """Those of rollsweep's dependencies this interpreter finds only in PYTHONPATH's
    folders (where benchmarks/gpu_install.sh puts what a GPU machine lacks)."""
    given = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) not in given]
    return [n for n in names if importlib.machinery.PathFinder.find_spec(n, rest) is None]


ONLY_THROUGH_PYTHONPATH = _found_only_through_pythonpath()


@pytest.mark.skipif(bool(ONLY_THROUGH_PYTHONPATH),
                    reason="the installed wheel runs with PYTHONPATH = its folder alone, and this environment has "
                           f"{', '.join(ONLY_THROUGH_PYTHONPATH)} only through PYTHONPATH (benchmarks/gpu_install.sh)")
def test_installed_wheel_submits_dry_run_from_outside_the_checkout(installed, tmp_path):
    _, site, _ = installed
    probe = _python(site, tmp_path, "import engine.solve; print(engine.__file__); print(engine.solve.__file__)")
    assert probe.returncode == 0 and all(pathlib.Path(f).is_relative_to(site) for f in probe.stdout.split()), (
        probe.stdout + probe.stderr)
    config = tmp_path / "sweep.toml"
    config.write_text(f'study = "pingpong"\n[axes]\nspin_ratio = {{ linspace = [0.0, 3.0, 11] }}\n'
                      f'[run]\nshard_size = 4\nout = "{tmp_path / "cube.zarr"}"\n')
    out = _rollsweep(site, tmp_path, "submit", str(config), "--dry-run", "--gpus", "1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("#!/bin/bash\n") and "#SBATCH --array=0-2" in out.stdout
    assert "engine.cli work" in out.stdout and "--gres=gpu:1" in out.stdout
    assert not (tmp_path / "cube.zarr").exists()  # a dry run writes nothing
    studies = _rollsweep(site, tmp_path, "studies")
    assert studies.returncode == 0 and "pingpong:" in studies.stdout and "hoop:" in studies.stdout, studies.stderr

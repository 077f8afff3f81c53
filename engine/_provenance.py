"""Provenance attributes: what produced a cube, so it can be trusted later."""

import datetime
import functools
import hashlib
import importlib.metadata
import inspect
import pathlib
import subprocess

PACKAGES = ("rollsweep", "jax", "jaxlib", "diffrax", "equinox", "optimistix", "xarray", "zarr", "numpy", "dask")


# Both are fixed for the life of a process (it runs the code it imported):
# asked once, not at every store it creates (~15 ms).
@functools.cache
def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def versions() -> dict:
    return {name: package_version(name) for name in PACKAGES}


@functools.cache
def git_commit() -> str:
    """Commit of the rollsweep source tree, if it is a git checkout."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def study_folder(study) -> pathlib.Path | None:
    """The folder of the package whose code the study solves with: where its point
    function is defined (for a HybridPoint, the engine's class, where its `start`
    and `finish` are). None where no source file is found."""
    point = study.solve_point
    for fn in (point, getattr(point, "start", None), getattr(point, "finish", None)):
        module = inspect.getmodule(fn) if fn is not None else None
        if module is None or module.__name__.partition(".")[0] == __package__:
            continue
        try:
            return pathlib.Path(inspect.getsourcefile(module)).resolve().parent
        except TypeError:  # built in, or defined where no file is
            continue
    return None


def study_fingerprint(study) -> str:
    """A hash of the study package's files, code and data (see folder_digest): a
    cube made by other files of the same study version says so. The exported
    programs' keys (engine.solve.exported) hash the same files."""
    folder = study_folder(study)
    return "unknown" if folder is None else folder_digest(folder)


def folder_digest(folder: pathlib.Path, pattern: str = "*") -> str:
    """A hash of the files below `folder` matching `pattern`, by relative path and
    content. Left out: Python's byte-code caches, and cubes and their lock files
    (a sweep may write its cube into a study's folder while it runs)."""
    digest = hashlib.sha256()
    for file in sorted(folder.rglob(pattern)):
        relative = file.relative_to(folder)
        written = "__pycache__" in relative.parts or any(p.endswith((".zarr", ".zarr.lock")) for p in relative.parts)
        if file.is_file() and not written:
            digest.update(relative.as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def device() -> str:
    """The device this thread solves on (see engine.solve.device.device_name)."""
    from .solve.device import device_name

    return device_name()


def devices(platform: str | None = None) -> str:
    """Every device of `platform` (None: JAX's default backend) a run of this
    process spreads its shards over: "cpu:cpu", "gpu:NVIDIA H100 x4"."""
    from .solve.device import local_devices

    found = local_devices(platform)
    return f"{found[0].platform}:{found[0].device_kind}" + (f" x{len(found)}" if len(found) > 1 else "")


def provenance(sweep, platform: str | None) -> dict:
    """The cube's provenance attributes; `platform`: where the run solves (its
    plan's device; None: JAX's default backend)."""
    from . import __version__

    return {
        "title": f"rollsweep cube: {sweep.study.title}",
        "study": sweep.study.name,
        "study_version": sweep.study.version,
        "study_source": sweep.study.source,
        "study_fingerprint": study_fingerprint(sweep.study),
        "engine_version": __version__,
        "config": sweep.text,
        "config_file": sweep.file,
        "config_hash": sweep.config_hash,
        "axes": list(sweep.axis_names),
        "critical": [sweep.critical.axis, sweep.critical.output] if sweep.critical else [],
        "dtype": sweep.solver.dtype,
        "solver": sweep.solver.solver,
        "rtol": sweep.solver.rtol,
        "atol": sweep.solver.atol,
        "git_commit": git_commit(),
        "versions": dict(versions()),  # a copy: the cached one stays as found
        "device": devices(platform),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }

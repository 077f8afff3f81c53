"""A study author's path: the documented outside study packages (built and run
from docs/writing-a-study.md's own text), failures located in the study's code,
one point solved eagerly, re-runs after the study changed, solver defaults,
demo, summary, cache."""

import dataclasses
import importlib
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import engine.study.interface
from engine._jax_setup import cache_dir
from engine.cli.commands import _summary, main
from engine.cli.demo import run_demo
from engine.cube.markers import Markers
from engine.cube.store import Cube, open_cube
from engine.runner.execute import RunReport, run
from engine.sweep.config import ConfigError, load_sweep

from conftest import sweep_file

MODEL = '''
import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Status, Study


def _double(params):
    return 2 * params["{key}"]


def solve_point(params, settings):
    a = params["a"]
    ok = a <= {limit}
    status = jnp.where(ok, Status.SUCCESS, Status.SOLVER_FAILED).astype(jnp.int8)
    return PointResult(outputs={{"y": jnp.where(ok, _double(params), jnp.nan)}}, status=status)


STUDY = Study(
    name="toy", title="a toy", source="tests", version="1",
    parameters=(Parameter("a", "1", 0.5, Interval(0.0, 2.0, lower_open=True), "the input"),
                Parameter("b", "m", 1.0, Interval(0.0, 5.0), "a length")),
    outputs=(Output("y", "1", "twice a"),),
    solve_point=solve_point,
    solver_defaults={defaults},
)
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A study package `toy_study` in tmp_path, registered as "toy"; `toy(...)`
    (re)writes its code and reloads it."""
    package = tmp_path / "toy_study"
    package.mkdir()
    (package / "__init__.py").write_text("from ._model import STUDY as STUDY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def registered():
        return {"toy": lambda: sys.modules["toy_study._model"].STUDY}

    registered.cache_clear = lambda: None
    monkeypatch.setattr(engine.study.interface, "_registered", registered)

    def write(key="a", limit=10.0, defaults="{}"):
        (package / "_model.py").write_text(MODEL.format(key=key, limit=limit, defaults=defaults))
        importlib.invalidate_caches()
        if "toy_study._model" in sys.modules:
            importlib.reload(sys.modules["toy_study._model"])
        else:
            importlib.import_module("toy_study._model")
        return sys.modules["toy_study._model"].STUDY

    yield write
    for name in ("toy_study", "toy_study._model"):
        sys.modules.pop(name, None)


def toy_sweep(folder, solver="", points=6, study="toy"):
    return sweep_file(folder, f"""
        study = "{study}"
        [axes]
        a = {{ linspace = [0.25, 1.5, {points}] }}
        [solver]
        {solver}
        [run]
        shard_size = 2
        executor = "inline"
        out = "{folder / 'toy.zarr'}"
        """)



# 1. docs/writing-a-study.md: its packages build and its hybrid study runs, as written.

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
GUIDE = REPOSITORY / "docs" / "writing-a-study.md"


def _guide_blocks(language: str, containing: str, *pages: pathlib.Path) -> list[str]:
    """The fenced `language` blocks that contain `containing`, of the guide (or `pages`)."""
    text = "".join(page.read_text() for page in pages or (GUIDE,))
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)
    return [b for b in blocks if containing in b]


def test_guide_pyprojects_build_beside_a_results_folder(tmp_path):
    """A sweep run in a study's folder writes results/ beside its pyproject.toml:
    without an explicit package list, setuptools then found two top-level
    packages and `pip install -e .` failed. Built here as a wheel (the same
    discovery, no install)."""
    pyprojects = _guide_blocks("toml", "[project]", GUIDE, REPOSITORY / "README.md")
    assert len(pyprojects) >= 2  # the guide's and the README's
    for i, text in enumerate(pyprojects):
        name = re.search(r'^name = "(\w+)"', text, flags=re.M).group(1)
        folder = tmp_path / str(i) / name
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text("")
        (folder / "pyproject.toml").write_text(text)
        (folder / "results" / f"{name}.zarr").mkdir(parents=True)  # what a sweep run there leaves
        (folder / "results" / f"{name}.zarr" / "zarr.json").write_text("{}")
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                                "-w", str(tmp_path / "dist"), str(folder)], capture_output=True, text=True,
                               timeout=300)
        assert build.returncode == 0, f"{name}: {build.stderr[-1500:]}"


@pytest.fixture
def guide_hybrid_study(tmp_path, monkeypatch):
    """The guide's hybrid study package, written from its text into tmp_path (the
    current directory) and registered under its name."""
    (code,) = _guide_blocks("python", "HybridPoint(system, start, finish)")
    (tmp_path / "wallball").mkdir()
    (tmp_path / "wallball" / "__init__.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module("wallball")
    registered = {"wallball": lambda: module.STUDY}
    monkeypatch.setattr(engine.study.interface, "_registered", lambda: registered)
    yield module
    sys.modules.pop("wallball", None)


def test_guide_hybrid_study_runs_as_written(guide_hybrid_study, tmp_path):
    """Its sweep, run where the guide says the cube lands: the wall reached at
    distance / vx, the wall's reset not applied (the solve ends there), the
    first ground impact where the parabola meets the ground."""
    (text,) = _guide_blocks("toml", 'study = "wallball"')
    (tmp_path / "wallball.toml").write_text(text)
    report = run(load_sweep(tmp_path / "wallball.toml"), progress=False)
    assert report.failed_points == 0 and report.points_solved == 18, report
    ds = open_cube(tmp_path / "results" / "wallball.zarr").load()
    p = {name: ds.attrs[f"parameter.{name}"] for name in ("speed", "height", "distance")}
    angle = np.deg2rad(ds["angle"].values)[:, None]
    vx, vz = p["speed"] * np.cos(angle), p["speed"] * np.sin(angle)
    np.testing.assert_allclose(ds["wall_time"].values, p["distance"] / vx + 0 * ds["restitution"].values, rtol=1e-9)
    np.testing.assert_allclose(ds["wall_speed"].values, vx + 0 * ds["restitution"].values, rtol=1e-12)
    first = vx * (vz + np.sqrt(vz**2 + 2 * guide_hybrid_study.G * p["height"])) / guide_hybrid_study.G
    np.testing.assert_allclose(ds["impact_x"].isel(impact=0).values, first + 0 * ds["restitution"].values,
                               rtol=1e-9)
    assert ds["impact_x"].sizes["impact"] == guide_hybrid_study.IMPACTS

# 3. A failing shard names where in the study's code it raised; one point is solved eagerly.

def test_failed_shard_names_the_study_file_and_line(toy, tmp_path, capsys):
    toy(key="gravty")
    path = toy_sweep(tmp_path)
    assert main(["run", str(path), "--quiet"]) == 1
    errors = {f["error"] for f in Markers(tmp_path / "toy.zarr").failed()}
    line, caller = (next(i for i, text in enumerate(MODEL.splitlines(), 1) if code in text)
                    for code in ("return 2 * params", "ok, _double(params)"))
    assert errors == {f"KeyError: 'gravty' (toy_study/_model.py:{line} in _double; "
                      f"called from toy_study/_model.py:{caller} in solve_point)"}, errors
    capsys.readouterr()
    assert main(["status", str(tmp_path / "toy.zarr")]) == 1  # as run's: its shards raised
    assert f"KeyError: 'gravty' (toy_study/_model.py:{line} in _double" in capsys.readouterr().out


def test_point_solves_one_grid_point_eagerly(toy, tmp_path, capsys):
    toy(limit=1.0)
    path = toy_sweep(tmp_path)
    assert main(["point", str(path), "--at", "a=0.75", "b=2"]) == 0
    out = capsys.readouterr().out
    assert "  a                    0.75\n" in out and "  b                    2.0 m\n" in out
    assert "status      success (1)" in out and "  y                    1.5\n" in out
    assert main(["point", str(path), "--index", "5"]) == 0  # a = 1.5: past the limit
    out = capsys.readouterr().out
    assert "  a                    1.5\n" in out and "status      solver_failed" in out and "nan" in out
    assert not (tmp_path / "toy.zarr").exists()  # a point writes nothing


@pytest.mark.parametrize("args, reason", [
    (["--at", "b=1"], "--at: no value for the axes a"),
    (["--at", "a=3"], "--at a: 3.0 is outside the allowed range (0, 2]"),
    (["--at", "c=1"], "--at c: unknown parameter"),
    (["--index", "6"], "--index: 6 is outside the grid (0 to 5)"),
])
def test_point_refuses_a_point_off_the_study(toy, tmp_path, capsys, args, reason):
    toy()
    assert main(["point", str(toy_sweep(tmp_path)), *args]) == 2
    assert reason in capsys.readouterr().err


def test_point_shows_the_full_traceback_of_a_study_error(toy, tmp_path):
    toy(key="gravty")
    with pytest.raises(KeyError) as caught:
        main(["point", str(toy_sweep(tmp_path)), "--index", "0"])
    assert caught.traceback[-1].name == "_double"


@pytest.mark.slow
def test_point_lists_the_events_of_a_hybrid_study(small_sweep, capsys):
    assert main(["point", str(small_sweep()), "--at", "spin_ratio=1.5"]) == 0
    out = capsys.readouterr().out
    assert "events      2\n" in out and "slide -> slip_ends" in out and "roll -> stops" in out


# 4. A re-run after the study's code changed: the cube says so; --overwrite solves it with the fix.

def test_rerun_after_a_study_fix_says_so_and_overwrite_solves_it_with_the_fix(toy, tmp_path):
    toy(limit=1.0)
    sweep = load_sweep(toy_sweep(tmp_path))
    first = run(sweep, progress=False)
    assert first.failed_points == 2
    made_by = Cube(sweep.out).attrs["study_fingerprint"]
    assert run(sweep, progress=False).state == "complete"  # same code: nothing to do
    toy(limit=10.0)  # the fix
    sweep = load_sweep(toy_sweep(tmp_path))
    again = run(sweep, progress=False)
    assert again.state.startswith("complete; the study's code changed since this cube was solved ("), again
    assert again.shards_run == 0 and "--overwrite" in again.state and "\n" not in again.state
    fixed = run(sweep, progress=False, overwrite=True)
    assert fixed.state == "created" and fixed.failed_points == 0
    assert Cube(sweep.out).attrs["study_fingerprint"] not in (made_by, "unknown", "mixed")
    assert all(m["failed"] == 0 for m in Markers(sweep.out).read("grid").values())


def test_overwrite_starts_afresh_with_the_same_config(toy, tmp_path):
    toy()
    sweep = load_sweep(toy_sweep(tmp_path))
    run(sweep, progress=False)
    report = run(sweep, progress=False, overwrite=True)
    assert report.state == "created" and report.shards_run == 3


# 5. rollsweep demo goes on past a study without demo sweeps or figures.

def test_demo_skips_what_a_study_lacks(toy, tmp_path, capsys):
    study = toy()
    study.demo_configs["tiny"] = toy_sweep(tmp_path).read_text().replace(str(tmp_path / "toy.zarr"), "tiny.zarr")
    bare = dataclasses.replace(study, name="bare", demo_configs={})
    assert run_demo(tmp_path / "demo", studies={"bare": lambda: bare, "toy": lambda: study}) == []
    out = capsys.readouterr().out
    assert "bare: no demo sweeps; skipped" in out
    tiny = next(line for line in out.splitlines() if line.startswith("tiny: "))
    assert "study 'toy' declares no figures" in tiny and (tmp_path / "demo" / "tiny.zarr").exists()


# 6. A study's own solver defaults, under the sweep's [solver] table.

def test_study_solver_defaults_apply_unless_the_sweep_sets_them(toy, tmp_path):
    toy(defaults='{"max_segments": 200, "rtol": 1e-8}')
    assert load_sweep(toy_sweep(tmp_path)).solver.max_segments == 200
    sweep = load_sweep(toy_sweep(tmp_path, solver="max_segments = 3"))
    assert sweep.solver.max_segments == 3 and sweep.solver.rtol == 1e-8


def test_bad_study_solver_defaults_name_the_study(toy, tmp_path):
    toy(defaults='{"max_segments": 0}')
    with pytest.raises(ConfigError, match=r"study 'toy': solver_defaults.max_segments: must be a positive integer"):
        load_sweep(toy_sweep(tmp_path))


# 7. The summary keeps points solved apart from shards that raised.

def test_summary_rates_only_the_points_solved():
    report = RunReport("c.zarr", "created", shards_run=10, points_run=10_000, failed_points=3, seconds=2.0,
                       failed_shards=9, points_solved=1_000)
    line = _summary(report)
    assert "1,000 points solved in 2.00 s (500 points/s), 3 of them failed" in line
    assert "9 shards raised (9,000 points not solved)" in line


# 8. The compile cache lives in the user's cache folder, or where ROLLSWEEP_CACHE says.

def test_compile_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("ROLLSWEEP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "rollsweep" / "jax"
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
    monkeypatch.setenv("ROLLSWEEP_CACHE", "")
    assert cache_dir() is None


def test_progress_bar_says_compiling_until_a_shard_is_done(toy, tmp_path, capsys):
    toy()
    run(load_sweep(toy_sweep(tmp_path)), progress=True)
    err = capsys.readouterr().err
    assert "toy compiling, shards 0/3" in err and "toy shards 3/3" in err


# 9. rollsweep studies NAME; range errors without a stray unit or a numpy repr.

def test_studies_shows_one_study(toy, capsys):
    toy()
    assert main(["studies", "toy"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("toy: a toy") and "a length" in out and "twice a" in out
    assert main(["studies", "nope"]) == 2
    assert "unknown study 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("body, message", [
    ("[parameters]\nfriction = 2.5", "parameters.friction: 2.5 is outside the allowed range (0, 2]\n"),
    ("[parameters]\ndrag = 11.0", "parameters.drag: 11.0 is outside the allowed range [0, 10] 1/s\n"),
])
def test_range_errors_end_with_a_unit_only_where_there_is_one(tmp_path, capsys, body, message):
    path = sweep_file(tmp_path, f'study = "pingpong"\n{body}\n[axes]\nspin_ratio = {{ values = [1.0] }}\n'
                      f'[run]\nout = "{tmp_path / "c.zarr"}"\n')
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.endswith(message)


def test_axis_range_error_shows_a_plain_number(tmp_path, capsys):
    path = sweep_file(tmp_path, 'study = "pingpong"\n[axes]\ndrag = { linspace = [1.0, 12.0, 12] }\n'
                      f'[run]\nout = "{tmp_path / "c.zarr"}"\n')
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "value 11.0 (index 10) is outside the allowed range [0, 10] 1/s" in err and "np." not in err

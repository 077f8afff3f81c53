"""A cube is one identity: its config, how its shards are solved (solver,
points a call and at a time, device, packages) and the study's code that solved
each shard. A resume that would solve otherwise is refused in one line naming
the key, or solves as the cube was solved; writing down what the cube used is
no difference; a study whose code changed since shards were solved is refused
too (a cube holds one code's results), and --overwrite solves it all again.

Interruptions are simulated by dropping done markers of a finished cube (a
copy of one made once for the module): the shards are then pending, as a
killed run leaves them."""

import hashlib
import importlib
import json
import pathlib
import re
import shutil
import sys

import pytest

import engine.study.interface
from engine.cli.commands import main
from engine.cube.markers import GRID, Markers
from engine.cube.status_report import progress
from engine.cube.store import Cube, open_cube
from engine.cube.verify import examine
from engine.errors import StoreError
from engine.runner.cost import plan_for
from engine.runner.execute import inline_results, pending_shards, run
from engine.runner.tasks import Task
from engine.sweep.config import load_sweep

from conftest import cubes_identical, regime_grid, sweep_file

SHARD = 64  # the regime grid's 630 points in 11 shards
KEPT = 4  # shards left done by the "interruption"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Cubes of the regime grid run whole once: by default, and with batch_size = 7."""
    folder = tmp_path_factory.mktemp("made")
    cubes = {}
    for name, extra in (("default", ""), ("b7", "batch_size = 7")):
        sweep = regime_grid(folder, name, SHARD, run=extra)
        run(sweep, progress=False)
        cubes[name] = sweep.out
    return cubes


def interrupted(made_cube: pathlib.Path, folder: pathlib.Path, extra: str = ""):
    """A copy of `made_cube` with only its first KEPT shards done, and the sweep
    (its [run] table with `extra`) that resumes it."""
    sweep = regime_grid(folder, "resumed", SHARD, run=extra)
    shutil.copytree(made_cube, sweep.out)
    markers = Markers(sweep.out)
    for shard in sorted(markers.done(GRID))[KEPT:]:
        markers.drop_done(GRID, shard)
    return sweep


def marker_digest(path) -> str:
    """Every file of the cube's markers, by name and content."""
    digest = hashlib.sha256()
    for file in sorted((pathlib.Path(path) / "_rollsweep").rglob("*")):
        if file.is_file():
            digest.update(str(file).encode() + file.read_bytes())
    return digest.hexdigest()


def solved_with(path) -> list[dict]:
    return [marker["solved_with"] for marker in Markers(path).read(GRID).values()]


def loaded(path):
    return open_cube(path).load().drop_attrs()


# (a) a resume with another batch: refused in one line naming the key, or solved as the cube was

def test_a_resume_asking_for_another_batch_is_refused_in_one_line_naming_the_key(made, tmp_path):
    sweep = interrupted(made["default"], tmp_path, "batch_size = 7")
    before = marker_digest(sweep.out)
    with pytest.raises(StoreError) as refused:
        run(sweep, progress=False)
    message = str(refused.value)
    made_with = plan_for(regime_grid(tmp_path, "plain", SHARD))
    assert "\n" not in message and ": run.batch_size: this cube was solved with " in message, message
    assert f"{made_with.batch:,} points a call" in message and "this run asks for 7" in message, message
    assert marker_digest(sweep.out) == before  # refused before anything was written


def test_a_resume_leaving_the_batch_to_the_engine_solves_as_the_cube_was_solved(made, tmp_path):
    """A cube made with batch_size = 7, resumed by a sweep without it: its
    pending shards solved in calls of the cube's size, the cube bitwise that of
    an uninterrupted run."""
    sweep = interrupted(made["b7"], tmp_path)
    report = run(sweep, progress=False)
    assert report.state == "resumed" and report.shards_run == 11 - KEPT
    assert cubes_identical(loaded(sweep.out), loaded(made["b7"]))
    asked = plan_for(regime_grid(tmp_path, "seven", SHARD, run="batch_size = 7"))
    assert {(how["batch"], how["width"]) for how in solved_with(sweep.out)} == {(asked.batch, asked.width)}
    assert Markers(sweep.out).identity() == solved_with(made["b7"])[0]


@pytest.mark.parametrize("key, changed, named", [
    ("device", "cpu (sse4.2)", "device: this cube was solved on cpu (sse4.2)"),
    ("versions", {"jaxlib": "0.0.1"}, "jaxlib: this cube was solved with jaxlib 0.0.1"),
    ("solver", "lanes", "run.batch_solver: this cube was solved by the lanes solver"),
])
def test_a_cube_solved_otherwise_is_refused_naming_what_differs(made, tmp_path, key, changed, named):
    """The cube's identity says it was solved on another device, with another
    package or by another solver: a run here would mix its bits in."""
    sweep = interrupted(made["default"], tmp_path)
    identity = Markers(sweep.out).identity()
    identity[key] = identity[key] | changed if isinstance(changed, dict) else changed
    Markers(sweep.out).identity_path.write_text(json.dumps(identity))
    before = marker_digest(sweep.out)
    with pytest.raises(StoreError, match=re.escape(named)) as refused:
        run(sweep, progress=False)
    assert "\n" not in str(refused.value)
    assert marker_digest(sweep.out) == before and not pathlib.Path(f"{sweep.out}.lock").exists()


def test_a_complete_cube_is_reported_as_it_is_however_a_run_would_solve(made, tmp_path):
    """Nothing left to solve: no bits would be mixed in, so nothing is refused."""
    sweep = regime_grid(tmp_path, "complete", SHARD, run="batch_size = 7")
    shutil.copytree(made["default"], sweep.out)
    identity = Markers(sweep.out).identity() | {"device": "cpu (sse4.2)"}
    Markers(sweep.out).identity_path.write_text(json.dumps(identity))
    assert run(sweep, progress=False).state == "complete"
    assert Markers(sweep.out).identity() == identity


def test_a_worker_unlike_the_cube_records_its_shards_failed_in_one_line(made, tmp_path):
    """A SLURM array task (or a cluster's worker) plans on its own device: on a
    node unlike the one that solved the cube, its shards are recorded as failed
    with the reason, none solved."""
    sweep = interrupted(made["default"], tmp_path)
    identity = Markers(sweep.out).identity() | {"device": "cpu (sse4.2)"}
    Markers(sweep.out).identity_path.write_text(json.dumps(identity))
    cube = Cube(sweep.out, sweep)
    tasks = [Task(kind, (shard,), (points,)) for kind, shard, points in pending_shards(cube)]
    reports = list(inline_results(cube, plan_for(sweep), tasks, 1))
    assert sum(r["raised"] for r in reports) == len(tasks) == 11 - KEPT
    errors = {f["error"] for f in Markers(sweep.out).failed()}
    assert len(errors) == 1 and "device: this cube was solved on cpu (sse4.2)" in errors.pop()
    assert len(Markers(sweep.out).done(GRID)) == KEPT


def test_of_processes_recording_the_identity_at_once_the_first_wins(tmp_path):
    markers = Markers(tmp_path / "cube.zarr")
    markers.make_folders()
    assert markers.claim_identity({"solver": "lanes"}) == {"solver": "lanes"}
    assert markers.claim_identity({"solver": "vmapped"}) == {"solver": "lanes"}
    assert [p.name for p in markers.folder.iterdir() if p.is_file()] == ["identity.json"]


# (c) writing down what the cube used is no difference

@pytest.mark.parametrize("restated", ["batch_solver", "batch_solver and batch_size"])
def test_restating_what_the_cube_used_resumes_it(made, tmp_path, restated):
    default = plan_for(regime_grid(tmp_path, "plain", SHARD))
    extra = f'batch_solver = "{default.solver.name}"'
    if restated != "batch_solver":
        extra += f"\nbatch_size = {default.batch}"
    sweep = interrupted(made["default"], tmp_path, extra)
    report = run(sweep, progress=False)
    assert report.state == "resumed" and report.shards_run == 11 - KEPT
    assert cubes_identical(loaded(sweep.out), loaded(made["default"]))
    assert len({json.dumps(how, sort_keys=True) for how in solved_with(sweep.out)}) == 1
    assert main(["verify", str(sweep.out)]) == 0


def test_a_cube_made_naming_its_solver_resumes_without_the_name(made, tmp_path):
    default = plan_for(regime_grid(tmp_path, "plain", SHARD))
    named = regime_grid(tmp_path, "named", SHARD, run=f'batch_solver = "{default.solver.name}"')
    run(named, progress=False)
    sweep = interrupted(named.out, tmp_path)
    assert sweep.config_hash != named.config_hash  # the hash is of the file as written
    assert run(sweep, progress=False).shards_run == 11 - KEPT
    assert cubes_identical(loaded(sweep.out), loaded(made["default"]))


def test_another_config_is_refused_naming_the_key(made, tmp_path):
    sweep = interrupted(made["default"], tmp_path)
    other = load_sweep(sweep_file(tmp_path, sweep.text.replace("[run]", "[solver]\natol = 1e-9\n[run]"),
                                  name="other.toml"))
    before = marker_digest(sweep.out)
    with pytest.raises(StoreError, match=r"holds a cube of another config \(solver.atol differs; hash "):
        run(other, progress=False)
    assert marker_digest(sweep.out) == before and not pathlib.Path(f"{sweep.out}.lock").exists()


# A cube made before identities were recorded: no identity.json, markers without "code" or "solved_with".

def made_the_old_way(made_cube: pathlib.Path, folder: pathlib.Path, extra: str = ""):
    sweep = interrupted(made_cube, folder, extra)
    markers = Markers(sweep.out)
    markers.forget_identity()
    for shard, marker in markers.read(GRID).items():
        markers.mark_done(GRID, shard, {k: v for k, v in marker.items() if k not in ("code", "solved_with")})
    return sweep


def test_a_cube_made_the_old_way_resumes_as_its_own_config_solved_it(made, tmp_path):
    """Its config's batch_size = 7 stands for the identity it did not record:
    resumed without it, the pending shards are solved in its calls; asking
    for another batch is refused."""
    old = made_the_old_way(made["b7"], tmp_path)
    other = load_sweep(sweep_file(tmp_path, old.text.replace("[run]", "[run]\nbatch_size = 2048"),
                                  name="other.toml"))
    with pytest.raises(StoreError, match="run.batch_size: this cube was solved with 16 points a call"):
        run(other, progress=False)
    assert run(old, progress=False).shards_run == 11 - KEPT
    assert cubes_identical(loaded(old.out), loaded(made["b7"]))
    lines = progress(old.out).describe()
    made_by = Cube(made["b7"]).attrs["study_fingerprint"]
    assert f"code             {made_by[:12]}\n" in lines  # the old markers: the cube's code
    assert f"; {KEPT} with unrecorded" in lines  # and unknown how


# (b) the study's code changed: a resume refused, a complete cube reported as the older code's

MODEL = '''
import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Status, Study

FACTOR = {factor}


def solve_point(params, settings):
    a = params["a"]
    ok = a <= {limit}
    status = jnp.where(ok, Status.SUCCESS, Status.SOLVER_FAILED).astype(jnp.int8)
    return PointResult(outputs={{"y": jnp.where(ok, FACTOR * a, jnp.nan)}}, status=status)


STUDY = Study(
    name="scaled", title="a scaled input", source="tests", version="1",
    parameters=(Parameter("a", "1", 0.5, Interval(0.0, 2.0, lower_open=True), "the input"),),
    outputs=(Output("y", "1", "FACTOR a"),),
    solve_point=solve_point,
)
'''


@pytest.fixture
def scaled(tmp_path, monkeypatch):
    """A study package `scaled_study` in tmp_path, registered as "scaled";
    `scaled(factor, limit)` (re)writes its code and reloads it."""
    package = tmp_path / "scaled_study"
    package.mkdir()
    (package / "__init__.py").write_text("from ._model import STUDY as STUDY\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def registered():
        return {"scaled": lambda: sys.modules["scaled_study._model"].STUDY}

    registered.cache_clear = lambda: None
    monkeypatch.setattr(engine.study.interface, "_registered", registered)

    def write(factor, limit):
        (package / "_model.py").write_text(MODEL.format(factor=factor, limit=limit))
        importlib.invalidate_caches()
        if "scaled_study._model" in sys.modules:
            importlib.reload(sys.modules["scaled_study._model"])
        else:
            importlib.import_module("scaled_study._model")

    yield write
    for name in ("scaled_study", "scaled_study._model"):
        sys.modules.pop(name, None)


def scaled_sweep(folder):
    """8 points in 4 shards: a = 0.25 ... 1.5, the last three past 1.0."""
    return load_sweep(sweep_file(folder, f"""
        study = "scaled"
        [axes]
        a = {{ linspace = [0.25, 1.5, 8] }}
        [run]
        shard_size = 2
        out = "{folder / 'scaled.zarr'}"
        """, name="scaled.toml"))


def test_a_changed_study_is_refused_in_one_line_and_overwrite_solves_it_with_the_new_code(scaled, tmp_path):
    """Interrupted, then the study's code changed (a fix, a constant): the resume
    is refused in one line naming both codes, nothing is written and the store
    is free; --overwrite gives the cube an uninterrupted run of the new code
    gives, bit for bit, one code in every marker."""
    scaled(factor=2.0, limit=1.0)
    first = scaled_sweep(tmp_path)
    run(first, progress=False)
    code_a = Cube(first.out).attrs["study_fingerprint"]
    Markers(first.out).drop_done(GRID, 1)  # interrupted: shard 1 pending
    before = marker_digest(first.out)
    scaled(factor=3.0, limit=10.0)
    again = scaled_sweep(tmp_path)
    with pytest.raises(StoreError) as refused:
        run(again, progress=False)
    message = str(refused.value)
    assert "\n" not in message and "the study's code changed since this cube was solved" in message, message
    assert f"({code_a[:12]} -> " in message and "its 3 solved shards" in message and "--overwrite" in message
    assert marker_digest(first.out) == before and not pathlib.Path(f"{first.out}.lock").exists()
    assert run(again, overwrite=True, progress=False).state == "created"
    fresh = load_sweep(sweep_file(tmp_path, (tmp_path / "scaled.toml").read_text().replace(
        "scaled.zarr", "fresh.zarr"), name="fresh.toml"))
    run(fresh, progress=False)
    with open_cube(first.out) as overwritten, open_cube(fresh.out) as uninterrupted:
        assert cubes_identical(overwritten, uninterrupted)
    code_b = Cube(fresh.out).attrs["study_fingerprint"]
    assert code_b != code_a and {m["code"] for m in Markers(first.out).read(GRID).values()} == {code_b}


def test_a_cube_older_versions_solved_with_two_codes_is_reported_mixed_and_refused(scaled, tmp_path, capsys):
    """Older versions resumed a changed study's cube, solving only its failed
    shards with the new code: status and verify name such a cube's codes shard
    by shard, and a run that would solve more of it is refused."""
    scaled(factor=2.0, limit=1.0)
    sweep = scaled_sweep(tmp_path)
    run(sweep, progress=False)
    markers = Markers(sweep.out)
    code_a = Cube(sweep.out).attrs["study_fingerprint"]
    code_b = "b" * 64
    for shard in (1, 2, 3):  # as an older version left them
        markers.mark_done(GRID, shard, {**markers.read(GRID)[shard], "code": code_b})
    Cube(sweep.out).set_attribute("study_fingerprint", "mixed")
    said = f"3 shards solved by code {code_b[:12]}, 1 by code {code_a[:12]}"
    assert said in progress(sweep.out).describe()
    assert examine(sweep.out).summary() == f"sound, but mixed: {said}"
    assert main(["verify", str(sweep.out)]) == 0 and said in capsys.readouterr().out
    markers.drop_done(GRID, 0)
    with pytest.raises(StoreError, match="the study's code changed since this cube was solved"):
        run(scaled_sweep(tmp_path), progress=False)


def test_a_changed_study_that_solves_nothing_leaves_the_cube_its_code(scaled, tmp_path):
    """Every shard done: nothing is solved by the new code, the run says that
    the code changed, and the cube's attribute keeps naming the code that
    solved it all."""
    scaled(factor=2.0, limit=10.0)
    sweep = scaled_sweep(tmp_path)
    run(sweep, progress=False)
    made_by = Cube(sweep.out).attrs["study_fingerprint"]
    scaled(factor=3.0, limit=10.0)
    state = run(scaled_sweep(tmp_path), progress=False).state
    assert state.startswith(f"complete; the study's code changed since this cube was solved ({made_by[:12]} -> "), state
    assert Cube(sweep.out).attrs["study_fingerprint"] == made_by
    assert examine(sweep.out).summary() == "sound"

"""A run's program made ready ahead of its first call (engine.solve.evaluate.
load_ahead, started by engine.runner.ahead): lowered on the caller's thread,
compiled on a thread of its own. The first call must then find it in JAX's
caches (no second lowering or compile), give the bits it gives without it,
and a program that cannot be made must fail where it would without it: in the
first call, with its own error."""

import contextlib
import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import Interval, Output, Parameter, PointResult, Study
from engine.cube.store import open_cube
from engine.runner.ahead import load_ahead_of_run, load_programs
from engine.runner.execute import run
from engine.solve import make_plan
from engine.solve.evaluate import compiled, evaluate, load_ahead
from engine.sweep.config import load_sweep
from engine.sweep.settings import SolverSettings

from conftest import cubes_identical, regime_grid, sweep_file

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILED = "/jax/core/compile/backend_compile_duration"
# (event, the thread it happened on), recorded while a test listens (JAX keeps
# a listener for the session: one is registered, recording into the current list).
_listening: list[list] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kwargs: _listening and event in (LOWERED, COMPILED)
    and _listening[-1].append((event, threading.current_thread().name)))


@contextlib.contextmanager
def events():
    """The block's programs lowered and compiled, as (LOWERED or COMPILED, the thread's name)."""
    found: list = []
    _listening.append(found)
    try:
        yield found
    finally:
        _listening.remove(found)


def _drop(p, settings):
    """Fall then first bounce of a ball dropped from `height` (a closed form: quick to compile)."""
    fall = jnp.sqrt(2 * p["height"] / 9.81)
    return PointResult(outputs={"bounce": fall * (1 + 2 * p["restitution"])}, status=jnp.int8(1))


def _broken(p, settings):
    raise ValueError("this study's point function is broken")


PARAMETERS = (Parameter("height", "m", 1.0, Interval(0.0, 10.0), "drop height"),
              Parameter("restitution", "1", 0.5, Interval(0.0, 1.0), "restitution"))
DROP = Study(name="ahead_drop", title="a dropped ball", source="test", version="1", parameters=PARAMETERS,
             outputs=(Output("bounce", "s", "time of the second impact"),), solve_point=_drop)
_interrupt = threading.Event()


def _interrupted(p, settings):
    if _interrupt.is_set():  # (not while the plan is made: it traces the function too)
        raise KeyboardInterrupt
    return _drop(p, settings)


INTERRUPTED = Study(name="ahead_interrupted", title="Ctrl-C while tracing", source="test", version="1",
                    parameters=PARAMETERS, outputs=DROP.outputs, solve_point=_interrupted)
BROKEN = Study(name="ahead_broken", title="a broken study", source="test", version="1", parameters=PARAMETERS,
               outputs=(Output("bounce", "s", "never"),), solve_point=_broken)
SETTINGS = SolverSettings()
# 50 points: a swept height, a fixed restitution (a broadcast view, as a sweep passes it)
POINTS = {"height": np.linspace(0.1, 5.0, 50), "restitution": np.broadcast_to(np.float64(0.7), (50,))}


def _first(params: dict) -> dict:
    return {k: v[:1] for k, v in params.items()}


@pytest.fixture(autouse=True)
def _fresh_programs(fresh_compile_cache):
    """Caches of the test's own: what is lowered, compiled or loaded depends on
    nothing an earlier test or run left."""
    yield


def test_the_first_call_finds_the_program_made_ahead():
    plan = make_plan(DROP, points=50)
    thread = load_ahead(DROP, SETTINGS, _first(POINTS), plan=plan)
    assert isinstance(thread, threading.Thread) and thread.name == "rollsweep-compile"
    thread.join()
    with events() as seen:
        ahead = evaluate(DROP, SETTINGS, POINTS, plan=plan)
    assert seen == [], seen  # neither lowered nor compiled again
    compiled.cache_clear()
    without = evaluate(DROP, SETTINGS, POINTS, plan=plan)
    np.testing.assert_array_equal(ahead.outputs["bounce"], without.outputs["bounce"])
    exact = np.sqrt(2 * POINTS["height"] / 9.81) * 2.4
    np.testing.assert_allclose(ahead.outputs["bounce"], exact, rtol=1e-15)


def test_it_is_made_once():
    """A second load while the first compiles, or after, starts nothing."""
    plan = make_plan(DROP, points=50)
    first = load_ahead(DROP, SETTINGS, _first(POINTS), plan=plan)
    assert load_ahead(DROP, SETTINGS, _first(POINTS), plan=plan) is None  # being made
    first.join()
    assert load_ahead(DROP, SETTINGS, _first(POINTS), plan=plan) is None  # ready
    with events() as seen:
        evaluate(DROP, SETTINGS, POINTS, plan=plan)
    assert seen == [], seen


def test_a_program_that_cannot_be_made_fails_in_its_first_call():
    plan = make_plan(BROKEN, points=50)
    assert load_ahead(BROKEN, SETTINGS, _first(POINTS), plan=plan) is None  # nothing raised here
    with pytest.raises(ValueError, match="this study's point function is broken"):
        evaluate(BROKEN, SETTINGS, POINTS, plan=plan)


def test_an_interrupt_while_it_is_made_leaves_no_lock_behind(monkeypatch):
    """Ctrl-C while the program is traced: the interrupt goes on to the caller,
    and the program is not left looking 'being made' (every later call would
    wait for it for ever). (No stored programs: one an earlier run exported
    would be read, not traced.)"""
    monkeypatch.setenv("ROLLSWEEP_CACHE", "")
    plan = make_plan(INTERRUPTED, points=50)
    _interrupt.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            load_ahead(INTERRUPTED, SETTINGS, _first(POINTS), plan=plan)
    finally:
        _interrupt.clear()
    assert not compiled(INTERRUPTED, SETTINGS, ("bounce",), plan).started()
    result = evaluate(INTERRUPTED, SETTINGS, POINTS, plan=plan)  # made by its first call, as ever
    expected = evaluate(DROP, SETTINGS, POINTS, plan=plan).outputs["bounce"]
    np.testing.assert_array_equal(result.outputs["bounce"], expected)


@pytest.mark.parametrize("critical", [False, True], ids=["grid", "grid and critical"])
def test_a_runs_tasks_call_the_programs_compiled_ahead(critical, tmp_path, fresh_compile_cache):
    """engine.run of a fresh cube: its programs (the grid's; with [critical],
    the root search's too) lowered by the caller's thread and each compiled
    once, by a compile thread; the task threads only call them (their cube is
    tested everywhere else). The next process's run (its programs forgotten,
    the same cache) neither lowers nor compiles: the compile thread loads the
    executables the first kept (engine.solve.executables), the same bits.
    (The rebound regime map, whose programs compile in a second: what is
    loaded ahead does not depend on the study. Its outgoing angle rises
    through 50 degrees as the spin ratio goes from -0.5 to 0.5 at these
    incidences.)"""
    extra = ('[critical]\noutput = "out_angle"\naxis = "spin_ratio"\nbracket = [-0.5, 0.5]\ntarget = 50.0\n'
             'xtol = 1e-12' if critical else "")
    sweep = load_sweep(sweep_file(tmp_path, f"""
        study = "rebound_regime"
        [axes]
        incidence_angle = {{ linspace = [58.0, 62.0, 3] }}
        spin_ratio = {{ linspace = [-0.5, 0.5, 7] }}
        {extra}
        [run]
        shard_size = 5
        batch_size = 8
        executor = "inline"
        out = "{tmp_path / 'cube.zarr'}"
        """))
    with events() as seen:
        report = run(sweep, progress=False)
    assert report.failed_points == 0 and report.failed_shards == 0
    # (lowered twice where no earlier run exported it: once to export it, once to call it)
    assert {thread for event, thread in seen if event == LOWERED} == {"MainThread"}, seen
    assert [thread for event, thread in seen if event == COMPILED] == ["rollsweep-compile"] * (1 + critical), seen
    assert report.stages["program"] > 0
    assert len(list((fresh_compile_cache / "programs").glob("*.executable"))) == 1 + critical
    first = open_cube(sweep.out).load()
    compiled.cache_clear()
    with events() as seen:
        report = run(sweep, progress=False, overwrite=True)
    assert report.failed_points == 0 and report.failed_shards == 0
    assert seen == [], seen
    assert cubes_identical(first, open_cube(sweep.out).load())


def test_a_run_loads_ahead_only_what_it_will_solve_here(small_sweep, tmp_path):
    """A fresh cube solved inline: loaded ahead. Another executor (its workers
    load their own), a cube that exists and is resumed (it may have nothing
    left to solve), or a task too large for memory (the run refuses it): not.
    (The sweep loaded ahead is of a study whose program compiles in a second,
    the rebound regime map: what is loaded does not depend on the study.)"""
    too_large = load_sweep(small_sweep(axes="spin_ratio = { linspace = [0.0, 3.0, 1000] }\n"
                                            "drag = { linspace = [0.0, 1.0, 1000] }\n"
                                            "initial_speed = { linspace = [0.5, 1.0, 100] }", shard_size=10**7))
    too_large = dataclasses.replace(too_large, batch_size=10**7)
    huge = make_plan(too_large.study, points=10**8, batch=10**7)
    assert load_ahead_of_run(too_large, huge, "inline", overwrite=True) == []
    assert not compiled(too_large.study, too_large.solver, too_large.outputs, huge).started()
    sweep = regime_grid(tmp_path, "regime", shard_size=40, spins=3, run="batch_size = 8")
    plan = make_plan(sweep.study, points=90, batch=sweep.batch_size)
    assert load_ahead_of_run(sweep, plan, "local", overwrite=True) == []
    sweep.out.mkdir()
    assert load_ahead_of_run(sweep, plan, "inline", overwrite=False) == []
    threads = load_ahead_of_run(sweep, plan, "inline", overwrite=True)
    assert len(threads) == 1  # the grid's program: no [critical]
    threads[0].join()
    assert load_programs(sweep, plan) == []  # the program of the grid's tasks: that one

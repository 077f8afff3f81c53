"""A run's program made ready ahead of its first call (engine.solve.evaluate.
load_ahead, started by engine.runner.ahead): lowered on the caller's thread,
compiled on a thread of its own. The first call must then find it in JAX's
caches (no second lowering or compile), give the bits it gives without it,
and a program that cannot be made must fail where it would without it: in the
first call, with its own error."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import Interval, Output, Parameter, PointResult, Study
from engine.runner.ahead import load_ahead_of_run, load_grid_program
from engine.solve import make_plan
from engine.solve.evaluate import compiled, evaluate, load_ahead
from engine.sweep.config import load_sweep
from engine.sweep.settings import SolverSettings

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILED = "/jax/core/compile/backend_compile_duration"
_events: list[str] = []
jax.monitoring.register_event_duration_secs_listener(lambda event, seconds, **kwargs: _events.append(event))


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
BROKEN = Study(name="ahead_broken", title="a broken study", source="test", version="1", parameters=PARAMETERS,
               outputs=(Output("bounce", "s", "never"),), solve_point=_broken)
SETTINGS = SolverSettings()
# 50 points: a swept height, a fixed restitution (a broadcast view, as a sweep passes it)
POINTS = {"height": np.linspace(0.1, 5.0, 50), "restitution": np.broadcast_to(np.float64(0.7), (50,))}


def _first(params: dict) -> dict:
    return {k: v[:1] for k, v in params.items()}


@pytest.fixture(autouse=True)
def _fresh_programs():
    compiled.cache_clear()
    yield
    compiled.cache_clear()


def test_the_first_call_finds_the_program_made_ahead():
    plan = make_plan(DROP, points=50)
    thread = load_ahead(DROP, SETTINGS, _first(POINTS), plan=plan)
    assert isinstance(thread, threading.Thread) and thread.name == "rollsweep-compile"
    thread.join()
    _events.clear()
    ahead = evaluate(DROP, SETTINGS, POINTS, plan=plan)
    assert not {LOWERED, COMPILED} & set(_events), _events  # neither lowered nor compiled again
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
    _events.clear()
    evaluate(DROP, SETTINGS, POINTS, plan=plan)
    assert COMPILED not in _events


def test_a_program_that_cannot_be_made_fails_in_its_first_call():
    plan = make_plan(BROKEN, points=50)
    assert load_ahead(BROKEN, SETTINGS, _first(POINTS), plan=plan) is None  # nothing raised here
    with pytest.raises(ValueError, match="this study's point function is broken"):
        evaluate(BROKEN, SETTINGS, POINTS, plan=plan)


def test_a_run_loads_ahead_only_what_it_will_solve_here(small_sweep):
    """A fresh cube solved inline: loaded ahead. Another executor (its workers
    load their own), or a cube that exists and is resumed (it may have nothing
    left to solve): not."""
    sweep = load_sweep(small_sweep())
    plan = make_plan(sweep.study, points=23, batch=sweep.batch_size)
    assert load_ahead_of_run(sweep, plan, "local", overwrite=True) is None
    sweep.out.mkdir()
    assert load_ahead_of_run(sweep, plan, "inline", overwrite=False) is None
    thread = load_ahead_of_run(sweep, plan, "inline", overwrite=True)
    assert thread is not None
    thread.join()
    assert load_grid_program(sweep, plan) is None  # the program of the grid's tasks: that one

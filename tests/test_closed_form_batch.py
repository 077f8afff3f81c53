"""The vmapped solver's default batch on CPU: small (CPU_BATCH) where the point
function loops, since a batch's points run in lockstep; large
(CLOSED_FORM_BATCH) where it does not, since then nothing waits for the
slowest point and each call's fixed cost is spread over more points. A
study's own batch_size, and the sweep's, come first."""

import bouncing_ball
import jax
import jax.numpy as jnp
import nothing_to_solve
import numpy as np

from engine import PointResult, SolverSettings, Status
from engine.solve import evaluate, make_plan
from engine.solve.device import detect
from engine.solve.vmapped import CLOSED_FORM_BATCH, CPU_BATCH, loops


def _study_with(solve_point, batch_size=None):
    import dataclasses

    return dataclasses.replace(nothing_to_solve.STUDY, solve_point=solve_point, batch_size=batch_size)


def _looping(p, settings):
    total = jax.lax.fori_loop(0, 3, lambda i, x: x + p["a"], p["b"])  # a while loop
    return PointResult({"sum": total, "product": p["a"] * p["b"]}, jnp.int8(Status.SUCCESS))


def _branching_into_a_loop(p, settings):
    total = jax.lax.cond(p["a"] > 0, lambda: jax.lax.fori_loop(0, 2, lambda i, x: x * 2, p["b"]), lambda: p["b"])
    return PointResult({"sum": total, "product": p["a"] * p["b"]}, jnp.int8(Status.SUCCESS))


def _failing(p, settings):
    raise ValueError("a study bug")


def test_a_point_function_loops_where_its_program_has_a_loop_at_any_depth():
    assert not loops(nothing_to_solve.STUDY)
    assert loops(bouncing_ball.STUDY)  # a HybridPoint: its segments' loop
    assert loops(_study_with(_looping))
    assert loops(_study_with(_branching_into_a_loop))
    assert loops(_study_with(_failing))  # not traceable here: the safe batch


def test_the_default_cpu_batch_follows_the_loops_and_yields_to_the_study():
    cpu = detect("cpu")
    assert make_plan(nothing_to_solve.STUDY, cpu, solver="vmapped").batch == CLOSED_FORM_BATCH
    assert make_plan(_study_with(_looping), cpu, solver="vmapped").batch == CPU_BATCH
    assert make_plan(_study_with(nothing_to_solve.STUDY.solve_point, batch_size=512), cpu,
                     solver="vmapped").batch == 512


def test_a_closed_form_points_result_does_not_depend_on_the_batch():
    """The same bits in calls of the closed-form batch and of CPU_BATCH."""
    a, b = np.linspace(-3, 3, 1000), np.linspace(0.5, 7, 1000) ** 1.5
    columns = {"a": a, "b": b}
    settings = SolverSettings()
    results = [evaluate(nothing_to_solve.STUDY, settings, columns, batch_size=batch, solver="vmapped")
               for batch in (CPU_BATCH, CLOSED_FORM_BATCH)]
    for name in ("sum", "product"):
        np.testing.assert_array_equal(results[0].outputs[name], results[1].outputs[name])
    np.testing.assert_array_equal(results[1].outputs["sum"], a + b)

"""The event log a hybrid solve keeps: as long as max_segments (or the mode
graph's bound) where the study's finish reads it, one row where it does not,
so that a point's cost follows the events it takes, not the room reserved for
them. Results are the same either way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import HybridPoint, PointResult, SolverSettings
from engine.solve import evaluate, make_plan
from engine.solve.hybrid import reads_event_log, solution_shapes

SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=128)
Y0 = jax.ShapeDtypeStruct((2,), jnp.float64)
PARAMS = {"height": jax.ShapeDtypeStruct((), jnp.float64)}


def _finish_reading(read):
    def finish(p, sol, settings):
        return PointResult(outputs={"x": read(p, sol)}, status=sol.status, num_steps=sol.num_steps,
                           num_events=sol.num_events)
    return finish


@pytest.mark.parametrize("read, reads", [
    (lambda p, sol: sol.t, False),
    (lambda p, sol: sol.y[0] * p["height"] + sol.num_events, False),
    # An event array read and then discarded: the results do not depend on it.
    (lambda p, sol: sol.t + 0 * jnp.sum(sol.event_t) - 0 * jnp.sum(sol.event_t), True),
    (lambda p, sol: sol.event_t[0], True),
    (lambda p, sol: sol.event_y[-1, 1], True),
    (lambda p, sol: jnp.sum(sol.event_code == 0).astype(sol.t.dtype), True),
    (lambda p, sol: jax.lax.cond(sol.t > 1, lambda: sol.event_t[1], lambda: sol.t), True),
], ids=["end time", "end state and counts", "discarded by arithmetic", "first event time", "last event state",
        "event codes", "in a branch"])
def test_a_finish_reads_the_log_where_its_results_depend_on_it(read, reads):
    """`0 * x` still depends on x (NaN, inf): read backwards from the results, the
    program keeps it, and the log stays."""
    assert reads_event_log(_finish_reading(read), PARAMS, solution_shapes(Y0, 8), SETTINGS) == reads


def test_a_bouncing_ball_that_reads_no_log_keeps_one_row_and_the_same_results():
    """tests/bouncing_ball reads the end time and the impact count: one row,
    whatever max_segments; the results of 128 and 1024 segments bitwise equal
    and on the closed form's counts."""
    import bouncing_ball as ball

    point = ball.STUDY.solve_point
    params = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in ball.STUDY.parameters}
    for segments in (128, 1024):
        assert point.log_rows(params, Y0, SolverSettings(max_segments=segments)) == 1
    heights, restitutions = np.linspace(0.1, 10, 16), np.linspace(0.05, 0.9, 16)
    columns = {"height": heights, "restitution": restitutions, "min_speed": np.full(16, ball.MIN_SPEED)}
    for solver in ("lanes", "vmapped", "fused"):
        results = [evaluate(ball.STUDY, SolverSettings(rtol=1e-10, atol=1e-12, max_segments=m), columns,
                            plan=make_plan(ball.STUDY, solver=solver, points=16)) for m in (128, 1024)]
        for name in ("rest_time", "impacts"):
            np.testing.assert_array_equal(results[0].outputs[name], results[1].outputs[name], err_msg=solver)
        np.testing.assert_array_equal(results[0].outputs["impacts"], ball.closed_form(heights, restitutions)[1])


def test_a_finish_that_reads_the_log_keeps_every_row():
    """The rolling ball reads its first event's time and state: its log keeps
    the mode graph's rows (slide -> roll -> stop)."""
    from studies.pingpong import STUDY

    point: HybridPoint = STUDY.solve_point
    params = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in STUDY.parameters}
    y0 = jax.eval_shape(lambda p: point.start(p, SETTINGS).y0, params)
    rows = point.log_rows(params, y0, SETTINGS)
    assert rows == point.system.event_rows(SETTINGS.max_segments) and rows > 1

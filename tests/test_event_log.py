"""The event log a hybrid solve keeps: as long as max_segments (or the mode
graph's bound) where the study's finish reads it, one row where it does not,
so that a point's cost follows the events it takes, not the room reserved for
them. Results are the same either way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import HybridPoint, PointResult, SolverSettings, Status
from engine.solve import evaluate, make_plan
from engine.solve.hybrid import event_log_read, log_rows_read, solution_shapes

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
    assert bool(event_log_read(_finish_reading(read), PARAMS, solution_shapes(Y0, 8), SETTINGS)) == reads


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


@pytest.mark.parametrize("read, arrays", [
    (lambda p, sol: sol.t, set()),
    (lambda p, sol: sol.event_t[jnp.maximum(sol.num_events - 1, 0)], {"event_t"}),
    (lambda p, sol: sol.event_y[0, 1] + jnp.sum(sol.event_code), {"event_y", "event_code"}),
], ids=["none", "times", "states and codes"])
def test_a_finish_reads_the_arrays_of_the_log_its_results_depend_on(read, arrays):
    """Array by array: the lanes keep one row of an array no one reads."""
    assert event_log_read(_finish_reading(read), PARAMS, solution_shapes(Y0, 8), SETTINGS) == arrays


def _logged_columns(n):
    """Drop heights and restitutions with 1 to ~90 impacts a point, in no order,
    after 40 copies of one point (which end together, in one flush)."""
    import bouncing_ball as ball

    rng = np.random.default_rng(7)
    height, restitution = rng.uniform(0.1, 10, n), rng.uniform(0.05, 0.9, n)
    height[:40], restitution[:40] = 3.0, 0.6
    return {"height": height, "restitution": restitution, "min_speed": np.full(n, ball.MIN_SPEED)}


def _whole_log_finish(p, sol, settings):
    """A finish that reads every row of every array of the log: blank rows (past
    the point's events) must be NaN and -1, as in a log of the point's own."""
    finite = jnp.isfinite(sol.event_t)
    return PointResult(outputs={
        "logged": jnp.sum(finite).astype(sol.t.dtype),
        "blank_codes": jnp.sum(sol.event_code == -1).astype(sol.t.dtype),
        "sum_t": jnp.sum(jnp.where(finite, sol.event_t, 0.0)),
        "sum_speed": jnp.sum(jnp.where(jnp.isfinite(sol.event_y[:, 1]), jnp.abs(sol.event_y[:, 1]), 0.0)),
        "last": sol.event_t[jnp.maximum(sol.num_events - 1, 0)],
    }, status=sol.status, num_steps=sol.num_steps, num_events=sol.num_events)


def _solve_on_lanes(point, settings, columns, lanes):
    from engine.solve.lanes import solve_batch

    params = {k: jnp.asarray(v) for k, v in columns.items()}
    run = jax.jit(lambda p: solve_batch(point, p, settings, lanes,
                                        finish=lambda row, sol: point.finish(row, sol, settings)))
    return jax.tree_util.tree_map(np.asarray, run(params))


LONG_LOG_SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=128)


@pytest.fixture(scope="module")
def long_log():
    """The whole-log finish's point, its 160 columns and their per-point solve
    (each point's log its own), shared by the tests that solve them on lanes."""
    import bouncing_ball as ball

    point = HybridPoint(ball.SYSTEM, ball.STUDY.solve_point.start, _whole_log_finish)
    columns = _logged_columns(160)
    per_point = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(lambda p: point(p, LONG_LOG_SETTINGS)))(
        {k: jnp.asarray(v) for k, v in columns.items()}))
    return point, columns, per_point


def test_a_long_log_read_on_lanes_is_each_points_own(long_log):
    """With a log longer than the lanes keep per point, each lane keeps one and a
    point is finished as it ends: 64 lanes solve 160 points in turn (so their
    logs hold earlier points' rows), the first 40 of them copies of one point,
    32 of which end in one flush and are finished 16 at a time. Every point's log must read as its own: the same
    results, bit for bit, as the per-point solve, whose log is the point's
    alone."""
    import bouncing_ball as ball

    point, columns, per_point = long_log
    on_lanes = _solve_on_lanes(point, LONG_LOG_SETTINGS, columns, 64)
    exact_impacts = ball.closed_form(columns["height"], columns["restitution"])[1]
    np.testing.assert_array_equal(on_lanes.num_events, exact_impacts)
    np.testing.assert_array_equal(on_lanes.outputs["logged"], exact_impacts)
    np.testing.assert_array_equal(on_lanes.outputs["blank_codes"], 128 - exact_impacts)
    for name in ("last", "sum_t", "sum_speed"):
        np.testing.assert_allclose(on_lanes.outputs[name], per_point.outputs[name], rtol=1e-11, err_msg=name)
    np.testing.assert_array_equal(per_point.outputs["logged"], exact_impacts)


def test_finished_as_points_end_or_after_the_loop_alike(monkeypatch):
    """The rolling ball reads a short log (its mode graph's 2 rows): finished
    after the loop. Finished as its points end instead (as a long log is), on
    lanes that each solve several points, its results are the same bit for bit."""
    from engine.solve.lanes import batch
    from studies.pingpong import STUDY

    from conftest import PINGPONG_DEFAULTS

    q = np.linspace(0.0, 3.0, 80)
    columns = {k: np.full(q.size, v) for k, v in PINGPONG_DEFAULTS.items()} | {"spin_ratio": q}
    after_loop = _solve_on_lanes(STUDY.solve_point, SETTINGS, columns, 16)
    monkeypatch.setattr(batch, "KEPT_LOG_ROWS", 0)
    as_they_end = _solve_on_lanes(STUDY.solve_point, SETTINGS, columns, 16)
    for name, value in after_loop.outputs.items():
        np.testing.assert_array_equal(as_they_end.outputs[name], value, err_msg=name)
    np.testing.assert_array_equal(as_they_end.status, after_loop.status)
    np.testing.assert_array_equal(as_they_end.num_steps, after_loop.num_steps)


def test_the_lanes_memory_does_not_grow_with_the_points_log():
    """A finish that reads a long log: the compiled call's working memory grows
    with max_segments by a log a lane (of the array it reads), not a log a
    point (512 points on 32 lanes: 16 times more)."""
    import bouncing_ball as ball

    from engine.solve.lanes import solve_batch

    point = ball.LOGGED.solve_point
    n, lanes = 512, 32
    params = {"height": jnp.linspace(0.1, 10, n), "restitution": jnp.full(n, 0.5), "min_speed": jnp.full(n, 1e-3)}

    def working_bytes(segments):
        settings = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=segments)
        run = jax.jit(lambda p: solve_batch(point, p, settings, lanes,
                                            finish=lambda row, sol: point.finish(row, sol, settings).outputs))
        return run.lower(params).compile().memory_analysis().temp_size_in_bytes

    grown = working_bytes(1024) - working_bytes(128)
    a_lane_log = lanes * (1024 - 128) * 8  # event_t alone
    assert a_lane_log <= grown < 2 * a_lane_log


def test_a_finish_reading_event_times_keeps_them_alone_on_every_solver():
    """bouncing_ball.LOGGED reads its rest time from event_t alone: the log keeps
    that array's rows and one row of the others (the fused kernel then writes
    a quarter of the rows at each event). On every solver its rest time is the
    solution's end time bit for bit, as the study that reads sol.t has it."""
    import bouncing_ball as ball

    params = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in ball.STUDY.parameters}
    assert ball.LOGGED.solve_point.log_arrays(params, Y0, SETTINGS) == {"event_t": 128, "event_y": 1,
                                                                         "event_code": 1}
    heights, restitutions = np.linspace(0.1, 10, 16), np.linspace(0.05, 0.9, 16)
    columns = {"height": heights, "restitution": restitutions, "min_speed": np.full(16, ball.MIN_SPEED)}
    for solver in ("lanes", "vmapped", "fused"):
        logged, ends = (evaluate(study, SETTINGS, columns, plan=make_plan(study, solver=solver, points=16))
                        for study in (ball.LOGGED, ball.STUDY))
        np.testing.assert_array_equal(logged.outputs["rest_time"], ends.outputs["rest_time"], err_msg=solver)
        np.testing.assert_array_equal(logged.outputs["impacts"], ball.closed_form(heights, restitutions)[1])


# Finishes whose results change with the shape of a log array they do not read.
SHAPE_READS = {
    # The log's length read from an array whose values it never reads.
    "length of another array": lambda p, sol: jnp.max(
        jnp.where(jnp.arange(sol.event_code.shape[0]) < sol.num_events, sol.event_t, -jnp.inf)),
    # No array's values read at all: the result is the log's length, a constant.
    "length alone": lambda p, sol: jnp.asarray(sol.event_y.shape[0], sol.t.dtype),
    # A constant array the trace makes from the log's length (an operand by value, not a literal).
    "a constant array of its length": lambda p, sol: sol.t * jnp.sum(
        jnp.asarray(np.linspace(0.0, 1.0, sol.event_code.shape[0])[-1:])),
    # The same inside a jitted function: a constant of the program the operation holds.
    "the same in a jit": lambda p, sol: jax.jit(
        lambda t: t * jnp.sum(jnp.asarray(np.linspace(0.0, 1.0, sol.event_code.shape[0])[-1:])))(sol.t),
}
SHAPE_SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=24)


@pytest.mark.parametrize("name", SHAPE_READS)
def test_a_finish_that_reads_an_arrays_shape_keeps_every_row(name):
    """One row of an array the finish does not read would change its results
    when it reads that array's shape: every array then keeps the log's rows."""
    import bouncing_ball as ball

    params = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in ball.STUDY.parameters}
    assert log_rows_read(ball.SYSTEM, _finish_reading(SHAPE_READS[name]), params, Y0, SHAPE_SETTINGS) == dict.fromkeys(
        ("event_t", "event_y", "event_code"), 24)


def test_finishes_that_read_an_arrays_shape_agree_on_every_solver():
    """The finishes of the test above, one output each of one study (so one
    program a solver: every row is kept for all of them, as the test above
    checks for each alone): the lanes and the fused kernel agree with the
    per-point solve."""
    import dataclasses

    import bouncing_ball as ball

    def finish(p, sol, settings):
        return PointResult(outputs={f"x{i}": read(p, sol) for i, read in enumerate(SHAPE_READS.values())},
                           status=sol.status, num_steps=sol.num_steps, num_events=sol.num_events)

    outputs = tuple(dataclasses.replace(ball.STUDY.outputs[0], name=f"x{i}") for i in range(len(SHAPE_READS)))
    study = dataclasses.replace(ball.STUDY, name="bouncing_ball_shape", outputs=outputs,
                                solve_point=HybridPoint(ball.SYSTEM, ball.STUDY.solve_point.start, finish))
    columns = {"height": np.linspace(0.1, 10, 16), "restitution": np.full(16, 0.3),
               "min_speed": np.full(16, ball.MIN_SPEED)}
    results = {solver: evaluate(study, SHAPE_SETTINGS, columns, plan=make_plan(study, solver=solver, points=16))
               for solver in ("vmapped", "lanes", "fused")}
    np.testing.assert_array_equal(results["vmapped"].status, Status.SUCCESS)
    for solver in ("lanes", "fused"):
        np.testing.assert_array_equal(results[solver].status, results["vmapped"].status, err_msg=solver)
        for i, name in enumerate(SHAPE_READS):
            np.testing.assert_allclose(results[solver].outputs[f"x{i}"], results["vmapped"].outputs[f"x{i}"],
                                       rtol=1e-12, err_msg=f"{solver}: {name}")


@pytest.mark.parametrize("accelerator", [False, True], ids=["cpu", "accelerator"])
def test_a_long_log_read_on_lanes_with_padding(accelerator, long_log):
    """Finished as points end, a batch padded past `count` (its rows unsolved)
    and the accelerator's lanes (no whole vectors, no conditionals for XLA:CPU)
    give each real point its own log's results, as the per-point solve (the
    long log's columns and solve, shared: a log of 128 rows, longer than the
    lanes keep, 37 real rows of 160)."""
    from engine.solve.lanes import solve_batch

    settings = LONG_LOG_SETTINGS
    point, columns, per_point = long_log
    columns = {k: jnp.asarray(v) for k, v in columns.items()}
    run = jax.jit(lambda p, count: solve_batch(point, p, settings, 12, count, accelerator,
                                               finish=lambda row, sol: point.finish(row, sol, settings)))
    padded = jax.tree_util.tree_map(np.asarray, run(columns, 37))
    np.testing.assert_array_equal(padded.status[:37], per_point.status[:37])
    np.testing.assert_array_equal(padded.status[37:], Status.PENDING)
    for name in ("logged", "blank_codes"):
        np.testing.assert_array_equal(padded.outputs[name][:37], per_point.outputs[name][:37], err_msg=name)
    for name in ("last", "sum_t", "sum_speed"):
        np.testing.assert_allclose(padded.outputs[name][:37], per_point.outputs[name][:37], rtol=1e-11, err_msg=name)


def test_a_finish_closing_over_a_prng_key_keeps_its_log_and_runs():
    """A typed PRNG key among the finish's constants has no plain value to
    compare (it failed when the constants were compared as arrays): compared
    as itself, the one key both traces close over, so a finish that reads no
    log keeps one row, as any other."""
    import bouncing_ball as ball

    key = jax.random.key(0)
    finish = _finish_reading(lambda p, sol: sol.t + 0 * jax.random.uniform(key, dtype=sol.t.dtype))
    params = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in ball.STUDY.parameters}
    settings = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=24)
    assert log_rows_read(ball.SYSTEM, finish, params, Y0, settings) == dict.fromkeys(("event_t", "event_y",
                                                                                      "event_code"), 1)

"""The hybrid segment loop on systems with closed-form solutions."""

import collections
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lockstep_count import counting_loops, lockstep_iterations, lockstep_iterations_by_loop

from engine import HybridSystem, Mode, SolverSettings, Status, Transition
from engine.solve.base import VECTOR

from conftest import PINGPONG_DEFAULTS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import lockstep as lockstep_benchmark  # noqa: E402

G, H, E = 9.81, 1.0, 0.8  # gravity, drop height, coefficient of restitution


def _fall(t, y, p):
    return jnp.stack([y[1], -G * jnp.ones_like(y[1])])


def _bounce(t, y, p):
    return y.at[1].set(-E * y[1])


BALL = HybridSystem(
    (Mode("flight", _fall, (Transition("impact", lambda t, y, p: y[0], target=0, direction=False, reset=_bounce),)),)
)


def impact_times(n):
    """Dropped from rest at H: first impact at sqrt(2H/G), then flights of 2 E^k v1 / G."""
    v1 = np.sqrt(2 * G * H)
    flights = [np.sqrt(2 * H / G)] + [2 * E**k * v1 / G for k in range(1, n)]
    return np.cumsum(flights)


def test_bouncing_ball_event_times_and_segment_bound():
    settings = SolverSettings(solver="Dopri5", rtol=1e-12, atol=1e-14, max_segments=6)
    sol = jax.jit(lambda y0: BALL.solve(y0, 0, {}, settings))(jnp.array([H, 0.0]))
    # Each bounce is a new segment: the bound stops the (Zeno) motion, flagged.
    assert sol.status == Status.MAX_SEGMENTS
    assert int(sol.num_events) == 6
    np.testing.assert_allclose(np.asarray(sol.event_t), impact_times(6), rtol=0, atol=1e-12)
    # State before each reset: on the ground, moving down at E^k v1.
    speeds = np.sqrt(2 * G * H) * E ** np.arange(6)
    np.testing.assert_allclose(np.asarray(sol.event_y)[:, 1], -speeds, rtol=0, atol=1e-11)
    np.testing.assert_allclose(np.asarray(sol.event_y)[:, 0], 0.0, atol=1e-13)


def test_each_impact_is_located_in_at_most_two_re_steps():
    """Balls dropped from 16 heights, under vmap: each impact is located in at
    most two re-steps of the step that crossed, though a step may span a whole
    flight and more (a parabola is integrated exactly): the first iterate, the
    root of the cubic through the step's ends (here the parabola itself), is
    within one Newton update of the crossing."""
    for solver in ("Tsit5", "Dopri5"):
        settings = SolverSettings(solver=solver, rtol=1e-10, atol=1e-12, max_segments=6)
        loops = lockstep_iterations_by_loop(jax.vmap(lambda h, s=settings: BALL.solve(jnp.stack([h, 0.0]), 0, {}, s).t),
                                            jnp.linspace(0.1, 4.0, 16))
        assert loops["solve/hybrid.py:solve"] == 6
        assert loops["solve/hybrid.py:_locate"] <= 2 * 6, solver


def test_mode_without_transitions_ends_at_horizon():
    decay = HybridSystem((Mode("decay", lambda t, y, k: -k * y, ends_at_horizon=True),))
    sol = decay.solve(jnp.array([1.0]), 0, jnp.asarray(2.0), SolverSettings(t_max=1.0, rtol=1e-12, atol=1e-14))
    assert sol.status == Status.SUCCESS and int(sol.num_events) == 0
    assert abs(float(sol.y[0]) - np.exp(-2.0)) < 1e-12


def test_horizon_without_terminal_event_is_event_not_found():
    sol = BALL.solve(jnp.array([H, 0.0]), 0, {}, SolverSettings(t_max=0.1))  # lands at 0.45 s
    assert sol.status == Status.EVENT_NOT_FOUND


def test_event_log_is_as_long_as_the_mode_graph_allows():
    def stop(name, target):
        return Transition(name, lambda t, y, p: y[0], target=target)

    chain = HybridSystem(
        (
            Mode("a", _fall, (stop("to_b", 1), stop("ends", None))),
            Mode("b", _fall, (stop("to_c", 2),)),
            Mode("c", _fall, (stop("ends", None),)),
        )
    )
    assert chain.event_rows(8) == 3  # a -> b -> c -> end
    assert chain.event_rows(2) == 2  # never longer than max_segments
    assert BALL.event_rows(8) == 8  # a cycle (bounce back into flight): unbounded
    chosen = HybridSystem((Mode("a", _fall, (stop("ends", lambda t, y, p: -1),)),))
    assert chosen.event_rows(5) == 5  # the target depends on the state
    # The solution's log has that many rows.
    sol = chain.solve(jnp.array([H, 0.0]), 0, {}, SolverSettings(max_segments=8))
    assert sol.event_t.shape == (3,) and sol.event_y.shape == (3, 2)


def test_vmapped_lanes_that_finished_or_did_not_cross_cost_the_batch_nothing():
    """Under vmap every loop runs until its slowest lane is done. A ball that
    stops after 2 bounces, solved beside one that goes on for 6 along the same
    path, adds no lockstep iteration: a finished lane neither steps nor locates,
    and a transition no lane crossed is not searched for (the second one,
    which a step reaching 1 m below ground would cross too, and which is then
    located as well, for both lanes alike)."""
    ends = Transition("never", lambda t, y, p: y[0] + 1.0, target=None, direction=False)

    def after(t, y, p):  # the state before the reset: ends after `p` impacts
        return jnp.where(y[2] + 1 >= p, -1, 0)

    def fall(t, y, p):
        return jnp.stack([y[1], -G * jnp.ones_like(y[1]), jnp.zeros_like(y[1])])

    def bounce(t, y, p):
        return jnp.stack([jnp.zeros_like(y[0]), -E * y[1], y[2] + 1])

    ground = Transition("impact", lambda t, y, p: y[0], target=after, direction=False, reset=bounce)
    counted = HybridSystem((Mode("flight", fall, (ground, ends)),))
    settings = SolverSettings(solver="Dopri5", rtol=1e-12, atol=1e-14, max_segments=8)

    def solve(bounces):
        return jax.vmap(lambda b: counted.solve(jnp.array([H, 0.0, 0.0]), 0, b, settings).t)(bounces)

    # One program (the same width: a call's program differs with it), its loops
    # counted call by call, and the times read from the counted call itself.
    counts = collections.Counter()
    counted_solve = jax.jit(lambda b: solve(b))
    with counting_loops(counts):  # traced (and its loops counted) at its first call
        alone_times = jax.block_until_ready(counted_solve(jnp.array([6.0, 6.0])))
    jax.effects_barrier()
    alone = sum(counts.values())
    counts.clear()
    times = np.asarray(jax.block_until_ready(counted_solve(jnp.array([6.0, 2.0]))))
    jax.effects_barrier()
    beside = sum(counts.values())
    assert alone > 0 and beside == alone
    np.testing.assert_allclose(np.asarray(alone_times), impact_times(6)[[5, 5]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(times, impact_times(6)[[5, 1]], rtol=0, atol=1e-12)


@pytest.mark.cpu_only(reason="widths of XLA:CPU's vectors: a GPU has none (its batches are any width)")
def test_a_points_solution_does_not_depend_on_the_vmap_width():
    """Bitwise the same solution for each rolling-ball point (a state of five
    components) in batches of one, two and four whole vectors of lanes
    (engine.solve.base.VECTOR), the only widths the engine calls a compiled
    batch with. Other widths may round differently: XLA:CPU compiles a
    remainder that fills no vector to scalar code (jax 0.10: a batch of one;
    jax 0.12: any width that is not a multiple of 4, which changed the last
    digits of 40 of 48 final displacements at width 3)."""
    from studies.pingpong import STUDY

    settings = SolverSettings(rtol=1e-10, atol=1e-12)
    base = {p.name: jnp.asarray(PINGPONG_DEFAULTS.get(p.name, p.default)) for p in STUDY.parameters}
    solve = jax.jit(jax.vmap(lambda q: STUDY.solve_point({**base, "spin_ratio": q}, settings).outputs))
    ratios = jnp.linspace(0.2, 3.0, 4 * VECTOR)
    reference = solve(ratios)
    for width in (VECTOR, 2 * VECTOR):
        for start in range(0, 4 * VECTOR, width):
            part = solve(ratios[start : start + width])
            for name, values in part.items():
                np.testing.assert_array_equal(values, reference[name][start : start + width],
                                              err_msg=f"{name}, width {width}")


def test_a_condition_that_first_crosses_the_other_way_fires_where_it_crosses_its_way():
    """A ball thrown up from 1 m below a plane, which stops it when it comes
    down through it (a downcrossing): rising through the plane is not the
    crossing; coming down is, at (v + sqrt(v^2 - 2 G)) / G. The crossing test
    compares the condition at the ends of the step that crossed, not at the
    segment's start (where it is negative: no downcrossing from there)."""
    plane = HybridSystem((Mode("flight", _fall, (Transition("down", lambda t, y, p: y[0], target=None,
                                                             direction=False),)),))
    speeds = np.array([10.0, 30.0])
    for solver in ("Tsit5", "Dopri8"):
        sol = jax.jit(jax.vmap(lambda v, s=solver: plane.solve(jnp.stack([-1.0, v]), 0, {}, SolverSettings(solver=s))))(
            jnp.asarray(speeds))
        np.testing.assert_array_equal(sol.status, Status.SUCCESS)
        exact = (speeds + np.sqrt(speeds**2 - 2 * G)) / G
        # The event state is a re-step just past the crossing.
        assert np.all(np.asarray(sol.t) >= exact - 1e-15)
        np.testing.assert_allclose(np.asarray(sol.t), exact, rtol=0, atol=1e-13, err_msg=solver)


def test_vmapped_rolling_ball_takes_no_more_lockstep_iterations_than_plain_diffrax():
    """benchmarks/lockstep.py's call (256 rolling-ball points): the engine's
    vmapped solver against plain jit(vmap(diffeqsolve)) with events. Its steps
    are one loop iteration each (the tableau unrolled, engine.solve.tableau)
    where diffrax's take one a stage; each crossing is located in two re-steps
    from the step's start."""
    calls, exact = lockstep_benchmark.rolling_ball()
    engine, plain = calls
    engine_loops = collections.Counter()
    with counting_loops(engine_loops):
        x = np.asarray(jax.jit(engine.make())(*engine.args))
    jax.effects_barrier()
    assert sum(engine_loops.values()) <= lockstep_iterations(plain.make(), *plain.args)
    # Two transitions, each located in two re-steps by every point.
    assert engine_loops["solve/hybrid.py:_locate"] == 4
    np.testing.assert_allclose(x, exact, rtol=0, atol=1e-10)

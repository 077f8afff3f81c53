"""Refilling lanes (engine.solve.lanes) against the per-point hybrid solve and closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import HybridPoint, HybridSystem, Mode, PointResult, SolverSettings, Start, Status, Transition
from engine.solve import evaluate
from engine.solve.lanes import solve_batch
from studies.pingpong import STUDY

from conftest import PINGPONG_DEFAULTS

SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12)


def _columns(q):
    return {k: np.full(q.size, v) for k, v in PINGPONG_DEFAULTS.items()} | {"spin_ratio": q}


@pytest.mark.parametrize("lanes", [1, 3, 8])
def test_lanes_agree_with_the_per_point_solve(lanes):
    q = np.linspace(0.0, 3.0, 17)
    on_lanes = evaluate(STUDY, SETTINGS, _columns(q), batch_size=17, solver="lanes", width=lanes)
    per_point = evaluate(STUDY, SETTINGS, _columns(q), batch_size=17, solver="vmapped")
    np.testing.assert_array_equal(on_lanes.status, per_point.status)
    np.testing.assert_array_equal(on_lanes.num_events, per_point.num_events)
    # After an event the lanes go on with the controller's last step instead of a
    # fresh initial guess, so step sequences differ: both are within tolerance.
    for name, value in per_point.outputs.items():
        np.testing.assert_allclose(on_lanes.outputs[name], value, rtol=1e-9, atol=1e-11, err_msg=name)
    assert np.all(np.abs(on_lanes.num_steps - per_point.num_steps) <= 4)


def test_lanes_that_reach_crossings_together_take_turns_to_locate_them():
    """Identical points reach each crossing in the same step: every lane parks at
    once, but a flush locates at most a quarter of them; the rest wait for later
    flushes and must come out the same."""
    q = np.full(24, 1.3)
    on_lanes = evaluate(STUDY, SETTINGS, _columns(q), batch_size=24, solver="lanes", width=8)
    # (The per-point solve of test_lanes_agree_with_the_per_point_solve: one compiled program.)
    per_point = evaluate(STUDY, SETTINGS, _columns(q[:1]), batch_size=17, solver="vmapped")
    np.testing.assert_array_equal(on_lanes.status, Status.SUCCESS)
    np.testing.assert_array_equal(on_lanes.num_events, 2)
    for name, value in per_point.outputs.items():
        np.testing.assert_array_equal(on_lanes.outputs[name], on_lanes.outputs[name][0], err_msg=name)
        np.testing.assert_allclose(on_lanes.outputs[name][0], value[0], rtol=1e-9, atol=1e-11, err_msg=name)


def test_a_failing_point_does_not_hold_back_the_others():
    """One point runs out of steps; the other lanes keep taking points meanwhile."""
    q = np.linspace(0.2, 3.0, 40)
    columns = _columns(q)
    # Next to no rolling resistance: drag alone slows the rolling ball, which then
    # creeps on for thousands of seconds; with 200 steps allowed it runs out.
    columns["rolling_resistance"] = np.where(np.arange(q.size) == 5, 1e-300, columns["rolling_resistance"])
    settings = SolverSettings(rtol=1e-10, atol=1e-12, max_steps=200, t_max=1e6)
    result = evaluate(STUDY, settings, columns, batch_size=40, solver="lanes", width=4)
    assert result.status[5] == Status.MAX_STEPS and np.isnan(result.outputs["final_displacement"][5])
    others = np.arange(q.size) != 5
    assert np.all(result.status[others] == Status.SUCCESS)


def test_padding_past_count_is_not_solved_and_the_rest_is_unchanged():
    """A short last batch is padded to the compiled shape: the padding rows are
    not solved (no steps, still pending) and the real points come out exactly as
    in a batch of their own."""
    v = jnp.linspace(5.0, 20.0, 11)
    params = {"v": v, "g": jnp.full(v.shape, 9.81)}
    full, short = _on_four_lanes(params, 11), _on_four_lanes(params, 6)
    np.testing.assert_array_equal(np.asarray(short.t[:6]), np.asarray(full.t[:6]))
    np.testing.assert_array_equal(np.asarray(short.num_steps[:6]), np.asarray(full.num_steps[:6]))
    np.testing.assert_array_equal(np.asarray(short.status[6:]), Status.PENDING)
    np.testing.assert_array_equal(np.asarray(short.num_steps[6:]), 0)
    assert np.all(np.asarray(full.num_steps) > 0)


def test_blocks_of_padding_are_not_planned_and_event_logs_match():
    """A batch planned in blocks (64 points on 16 lanes: blocks of 16): blocks
    wholly past count are skipped, and the real points' solutions, their event
    logs included, come out exactly as when every point is real."""
    point = _projectile()
    v = jnp.linspace(5.0, 20.0, 64)
    params = {"v": v, "g": jnp.full(v.shape, 9.81)}
    solve = jax.jit(lambda p, count: solve_batch(point, p, SETTINGS, 16, count))
    full, short = solve(params, 64), solve(params, 20)
    for name in ("t", "y", "status", "num_steps", "num_events", "event_t", "event_y", "event_code"):
        np.testing.assert_array_equal(np.asarray(getattr(short, name)[:20]), np.asarray(getattr(full, name)[:20]),
                                      err_msg=name)
    np.testing.assert_array_equal(np.asarray(short.status[20:]), Status.PENDING)
    np.testing.assert_array_equal(np.asarray(full.status), Status.SUCCESS)
    assert np.all(np.isfinite(np.asarray(full.event_t[:, 0]))) and np.all(np.asarray(full.event_code[:, 0]) >= 0)
    assert np.all(np.isnan(np.asarray(full.event_t[:, 1:])))  # one event each: the rest of the log unused


def _projectile():
    """A ball thrown up from height 2, over a ledge at height 1 and a floor: two
    transitions in one mode. A parabola is integrated exactly, so steps grow long
    and one step often spans both crossings: the ledge's, earlier, must fire."""

    def fly(t, y, p):
        return jnp.stack([y[1], -p["g"] * jnp.ones_like(y[0])])

    system = HybridSystem((
        Mode("flight", fly, (
            Transition("floor", lambda t, y, p: y[0], target=None, direction=False),
            Transition("falls_below_wall", lambda t, y, p: y[0] - 1.0, target=None, direction=False),
        )),
    ))

    def start(p, settings):
        return Start(jnp.stack([2.0 * jnp.ones_like(p["v"]), p["v"]]), 0, p)

    def finish(p, sol, settings):
        return PointResult({"t": sol.t, "code": sol.event_code[0].astype(float)}, sol.status)

    return HybridPoint(system, start, finish)


# The projectile on 4 lanes, `count` of its points solved: one compiled program for
# the padding test and the crossings' (a whole batch: count = its length).
_PROJECTILE = _projectile()
_on_four_lanes = jax.jit(lambda p, count: solve_batch(_PROJECTILE, p, SETTINGS, 4, count))


def test_the_earliest_of_several_crossings_fires_at_its_closed_form_time():
    v = jnp.linspace(5.0, 20.0, 11)
    g = 9.81
    sol = _on_four_lanes({"v": v, "g": jnp.full(v.shape, g)}, v.size)
    # Down through height 1: 2 + v t - g t^2 / 2 = 1.
    expected = (v + jnp.sqrt(v**2 + 2 * g)) / g
    np.testing.assert_array_equal(np.asarray(sol.status), Status.SUCCESS)
    np.testing.assert_array_equal(np.asarray(sol.event_code[:, 0]), 1)
    np.testing.assert_allclose(np.asarray(sol.t), np.asarray(expected), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(sol.event_y[:, 0, 0]), 1.0, atol=1e-12)


def test_row_helpers_match_numpy_reductions():
    """The lanes' and the stepper's reductions over a few rows (written as row chains for XLA:CPU)
    agree with numpy's, ties and all-false columns included."""
    from engine.solve.lanes.rows import _all_rows, _any_rows, _argmin_rows, _first_true, _select
    from engine.solve.stepper import rms_rows

    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(4, 64)).astype(float)  # small integers: many ties
    x[:, :4] = np.inf  # columns with nothing finite
    flags = rng.random((3, 64)) < 0.3
    np.testing.assert_array_equal(_argmin_rows(jnp.asarray(x)), np.argmin(x, axis=0))
    np.testing.assert_array_equal(_first_true(jnp.asarray(flags)), np.argmax(flags, axis=0))
    np.testing.assert_array_equal(_any_rows(jnp.asarray(flags)), flags.any(axis=0))
    np.testing.assert_array_equal(_all_rows(jnp.asarray(flags)), flags.all(axis=0))
    np.testing.assert_allclose(rms_rows(jnp.asarray(x[:, 4:])), np.sqrt((x[:, 4:] ** 2).mean(axis=0)))
    choices = [np.full(64, 10.0), np.full(64, 20.0), np.full(64, 30.0)]
    np.testing.assert_array_equal(
        _select(list(jnp.asarray(flags)), [jnp.asarray(c) for c in choices], jnp.zeros(64)),
        np.select(list(flags), choices, 0.0),
    )


@pytest.mark.parametrize("dtype, span, tolerance", [(np.float64, 250, 1e-14), (np.float32, 30, 2e-6)])
def test_step_size_root_matches_the_power_it_replaces(dtype, span, tolerance):
    """The controller's (1 / error)^(1/5), without pow: to rounding over errors
    of 10^-span .. 10^span (x ** -0.2 itself is off by |ln x| 1e-17: -0.2 is
    rounded), and beyond them, up to the type's limits, far past
    where the step-size factor is clipped (to [0.2, 10]); 0, inf and NaN."""
    from engine.solve.stepper import inverse_root as _inverse_root

    x = np.logspace(-span, span, 4001).astype(dtype)
    got = np.asarray(_inverse_root(jnp.asarray(x), 5))
    np.testing.assert_allclose(got, x.astype(np.float64) ** -0.2, rtol=tolerance)
    info = np.finfo(dtype)
    tiny, huge = np.asarray(_inverse_root(jnp.asarray(np.array([info.tiny, info.max], dtype)), 5))
    assert tiny > 1e5 and huge < 1e-5
    edge = np.asarray(_inverse_root(jnp.asarray(np.array([0.0, np.inf, np.nan], dtype)), 5))
    assert edge[0] == np.inf and edge[1] == 0.0 and np.isnan(edge[2])
    assert np.asarray(_inverse_root(jnp.asarray(np.array([32.0, 1.0], dtype)), 5)).tolist() == [0.5, 1.0]

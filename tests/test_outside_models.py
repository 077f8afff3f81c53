"""Models a study author might write, beyond the shipped studies, solved on
every batch solver and checked against their closed forms.

Each is a `HybridPoint` study built here (as an outside package would build
it): a bouncing ball reset to the ground (the natural reset h -> 0, and
h -> |h|), a ball bouncing 120 times, motion the solver integrates exactly (so
its steps grow without bound), a block that slides to rest and sticks, and a
ball launched from the ground (its event condition starts at zero).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from engine import (
    HybridPoint,
    HybridSystem,
    Interval,
    Mode,
    Output,
    Parameter,
    PointResult,
    SolverSettings,
    Start,
    Status,
    Study,
    Transition,
)
from engine.solve import SOLVERS, evaluate, make_plan

G = 9.81
SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=128)
TOLERANCE = 1e-9  # the target: closed form to 1e-9


def _study(name, system, start, finish, parameters, outputs):
    point = HybridPoint(system, start, finish)
    return Study(name=name, title=name, source="test", version="1", parameters=tuple(parameters),
                 outputs=tuple(Output(o, "s", o) for o in outputs), solve_point=point)


def _param(name, default, lower, upper):
    return Parameter(name, "1", default, Interval(lower, upper), name)


# ---- a bouncing ball: y = (h, v, bounces); it ends after `bounces` impacts


def _ball(reset_height):
    def fall(t, y, p):
        return jnp.stack([y[1], -G * jnp.ones_like(y[1]), jnp.zeros_like(y[1])])

    def bounce(t, y, p):
        return jnp.stack([reset_height(y[0]), -p["restitution"] * y[1], y[2] + 1])

    def after(t, y, p):  # the state before the reset: the impact that ends the motion is the last
        return jnp.where(y[2] + 1 >= p["bounces"], -1, 0)

    ground = Transition("ground", lambda t, y, p: y[0], target=after, direction=False, reset=bounce)
    return HybridSystem((Mode("flight", fall, (ground,)),))


def _ball_study(name, reset_height, launched=False):
    def start(p, settings):
        y0 = jnp.stack([p["height"], p["speed"], jnp.zeros_like(p["height"])])
        return Start(y0, 0, p)

    def finish(p, sol, settings):
        return PointResult(outputs={"last_impact": sol.t, "impacts": sol.num_events.astype(sol.t.dtype)},
                           status=sol.status, num_steps=sol.num_steps, num_events=sol.num_events)

    parameters = [_param("height", 1.0, 0.0, 10.0), _param("speed", 0.0, -10.0, 10.0),
                  _param("restitution", 0.8, 0.0, 1.0), _param("bounces", 5.0, 1.0, 1000.0)]
    return _study(name, _ball(reset_height), start, finish, parameters, ["last_impact", "impacts"])


def impact_time(height, speed, restitution, bounces):
    """Time of the last of `bounces` impacts: the first at the root of
    h + v t - G t^2 / 2, then flights of 2 e^k v1 / G (v1 the first impact speed)."""
    v1 = np.sqrt(speed**2 + 2 * G * height)
    first = (speed + v1) / G
    k = np.arange(1, int(bounces))
    return first + np.sum(2 * restitution**k * v1 / G)


NATURAL = _ball_study("ball_natural_reset", lambda h: jnp.zeros_like(h))
ABSOLUTE = _ball_study("ball_absolute_reset", jnp.abs)


def _columns(study, **axes):
    n = max(len(np.atleast_1d(v)) for v in axes.values())
    columns = {p.name: np.full(n, p.default) for p in study.parameters}
    columns.update({k: np.broadcast_to(np.asarray(v, float), (n,)).copy() for k, v in axes.items()})
    return columns


def _solve(study, solver, columns, settings=SETTINGS):
    plan = make_plan(study, solver=solver, batch=32)
    return evaluate(study, settings, columns, plan=plan)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
@pytest.mark.parametrize("study", [NATURAL, ABSOLUTE], ids=lambda s: s.name)
def test_bouncing_ball_every_reset_every_solver(study, solver):
    """A ball reset to the ground after each impact (h -> 0 or h -> |h|) finds
    every next landing, however long the step over a flight: the flight is a
    parabola, integrated exactly, so the steps grow tenfold a step."""
    heights = np.array([0.1, 0.5, 1.0, 2.0, 5.0])
    restitution = np.array([0.3, 0.5, 0.8, 0.9, 0.6])
    result = _solve(study, solver, _columns(study, height=heights, restitution=restitution, bounces=8.0))
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.num_events, 8)
    expected = [impact_time(h, 0.0, e, 8) for h, e in zip(heights, restitution, strict=True)]
    np.testing.assert_allclose(result.outputs["last_impact"], expected, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_more_than_a_hundred_events_a_point(solver):
    restitution = np.array([0.95, 0.97])
    result = _solve(NATURAL, solver, _columns(NATURAL, restitution=restitution, bounces=120.0))
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.num_events, 120)
    expected = [impact_time(1.0, 0.0, e, 120) for e in restitution]
    np.testing.assert_allclose(result.outputs["last_impact"], expected, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_condition_that_starts_at_zero(solver):
    """Launched upward from the ground (h = 0 at t = 0): the root at the start is
    not an impact; the first is at 2 v / G. Launched downward from the ground:
    the ball is at a root moving down, which is also not a crossing, so it falls
    below ground until the horizon (t_max, SETTINGS' own: the same compiled
    program), which ends it unfound (no silent success)."""
    speeds = np.array([1.0, 3.0, 7.0])
    result = _solve(NATURAL, solver, _columns(NATURAL, height=0.0, speed=speeds, bounces=3.0))
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    expected = [impact_time(0.0, v, 0.8, 3) for v in speeds]
    np.testing.assert_allclose(result.outputs["last_impact"], expected, rtol=0, atol=TOLERANCE)
    down = _solve(NATURAL, solver, _columns(NATURAL, height=0.0, speed=-1.0, bounces=3.0))
    assert down.status[0] == Status.EVENT_NOT_FOUND and np.isnan(down.outputs["last_impact"][0])


# ---- a block sliding on a rough floor: y = (x, v); it sticks when v reaches 0


def _slide(t, y, p):
    return jnp.stack([y[1], -p["friction"] * G * jnp.ones_like(y[1])])


def _stuck(t, y, p):
    return jnp.zeros_like(y)


def _stick(t, y, p):
    return y.at[1].set(0.0)


BLOCK_SYSTEM = HybridSystem((
    Mode("slide", _slide, (Transition("stops", lambda t, y, p: y[1], target=1, direction=False, reset=_stick),)),
    Mode("stuck", _stuck, ends_at_horizon=True),
))


def _block_start(p, settings):
    return Start(jnp.stack([jnp.zeros_like(p["speed"]), p["speed"]]), 0, p, t_end=p["horizon"])


def _block_finish(p, sol, settings):
    return PointResult(outputs={"position": sol.y[0], "stop_time": sol.event_t[0]}, status=sol.status,
                       num_steps=sol.num_steps, num_events=sol.num_events)


BLOCK = _study("sliding_block", BLOCK_SYSTEM, _block_start, _block_finish,
               [_param("speed", 2.0, 0.0, 10.0), _param("friction", 0.4, 0.01, 2.0), _param("horizon", 10.0, 0.0, 100)],
               ["position", "stop_time"])


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_block_slides_to_rest_and_sticks(solver):
    """v0 - mu G t reaches zero at v0 / (mu G), after v0^2 / (2 mu G); then it stays."""
    speed = np.array([0.5, 2.0, 5.0, 9.0])
    friction = np.array([0.1, 0.4, 1.0, 2.0])
    result = _solve(BLOCK, solver, _columns(BLOCK, speed=speed, friction=friction))
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.num_events, 1)
    np.testing.assert_allclose(result.outputs["stop_time"], speed / (friction * G), rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(result.outputs["position"], speed**2 / (2 * friction * G), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_solvers_agree_point_for_point(solver):
    """Each solver against the vmapped one on a mixed batch (the lanes refill)."""
    heights = np.linspace(0.1, 4.0, 40)
    columns = _columns(NATURAL, height=heights, restitution=np.linspace(0.2, 0.9, 40), bounces=6.0)
    result = _solve(NATURAL, solver, columns)
    reference = _solve(NATURAL, "vmapped", columns)
    np.testing.assert_array_equal(result.status, reference.status)
    np.testing.assert_allclose(result.outputs["last_impact"], reference.outputs["last_impact"], rtol=0, atol=1e-10)

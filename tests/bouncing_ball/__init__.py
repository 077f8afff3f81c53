"""A ball dropped from rest that bounces until its impact speed falls below
`min_speed`: an outside study with tens of events a point, and its closed form.

Written as a study package outside rollsweep would be (only `engine`'s public
names), and registered the way such a package is, under the
`rollsweep.studies` entry point:

    [project.entry-points."rollsweep.studies"]
    bouncing_ball = "bouncing_ball:STUDY"
    bouncing_ball_logged = "bouncing_ball:LOGGED"

(benchmarks/bench_bounces.py writes the distribution's metadata that
`pip install -e` would, in a folder of its own, rather than install into the
shared environment).

The model: state (h, v), one mode (flight, h' = v, v' = -G), one transition
(the ground, h = 0 downward). At each impact the state before the reset is
looked at: an impact speed |v| below `min_speed` ends the motion there (target
None: the end), any other rebounds (v -> -e v, h -> 0). Outputs: the time of
the last impact (`rest_time`, the solution's end time sol.t) and the number
of impacts (`impacts`, the last one included). LOGGED is the same study with
the rest time read from the event log (sol.event_t) instead. On the benchmark
grid (heights 0.1-10 m, restitutions 0.05-0.9, 100 x 100, min_speed 1e-3
m/s) a point has 20.6 impacts on average and 92 at most (19.6 and 91
rebounds).
"""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from engine import (
    HybridPoint,
    HybridSystem,
    Interval,
    Mode,
    Output,
    Parameter,
    PointResult,
    Start,
    Study,
    Transition,
)

G = 9.81
MIN_SPEED = 1e-3  # m/s: the default; tens of impacts a point on the benchmark grid


def _fall(t, y, p):
    return jnp.stack([y[1], -G * jnp.ones_like(y[1])])


def _ground(t, y, p):
    return y[0]


def _after(t, y, p):
    """The state before the reset: an impact slower than min_speed is the last."""
    return jnp.where(jnp.abs(y[1]) < p["min_speed"], -1, 0)


def _bounce(t, y, p):
    return jnp.stack([jnp.zeros_like(y[0]), -p["restitution"] * y[1]])


SYSTEM = HybridSystem((
    Mode("flight", _fall, (Transition("ground", _ground, target=_after, direction=False, reset=_bounce),)),
))


def _start(p, settings):
    return Start(jnp.stack([p["height"], jnp.zeros_like(p["height"])]), 0, p)


def _finish(p, sol, settings):
    return PointResult(outputs={"rest_time": sol.t, "impacts": sol.num_events.astype(sol.t.dtype)},
                       status=sol.status, num_steps=sol.num_steps, num_events=sol.num_events)


STUDY = Study(
    name="bouncing_ball",
    title="A ball bouncing to rest",
    source="any textbook: impact speeds e^k sqrt(2 G h), flights 2 e^k sqrt(2 G h) / G",
    version="1",
    parameters=(
        Parameter("height", "m", 1.0, Interval(0.0, 100.0, lower_open=True), "drop height (from rest)"),
        Parameter("restitution", "1", 0.8, Interval(0.0, 1.0, upper_open=True), "coefficient of restitution"),
        Parameter("min_speed", "m/s", MIN_SPEED, Interval(0.0, 100.0, lower_open=True),
                  "an impact slower than this is the last"),
    ),
    outputs=(Output("rest_time", "s", "time of the last impact"),
             Output("impacts", "1", "ground contacts, the last one included")),
    solve_point=HybridPoint(SYSTEM, _start, _finish),
)


def _finish_from_log(p, sol, settings):
    """The time of the last impact read from the event log (the other way a
    user might write it): the solve then keeps every point's log of
    max_segments events, which costs with its length (bench_bounces.py)."""
    last = sol.event_t[jnp.maximum(sol.num_events - 1, 0)]
    return PointResult(outputs={"rest_time": last, "impacts": sol.num_events.astype(sol.t.dtype)},
                       status=sol.status, num_steps=sol.num_steps, num_events=sol.num_events)


# The same study, its rest time from the event log: registered beside STUDY as
# bouncing_ball_logged = "bouncing_ball:LOGGED"
LOGGED = dataclasses.replace(STUDY, name="bouncing_ball_logged", title="A ball bouncing to rest (from the event log)",
                             solve_point=HybridPoint(SYSTEM, _start, _finish_from_log))


def closed_form(height, restitution, min_speed=MIN_SPEED):
    """(rest_time, impacts) of each point, as float64 arrays.

    The k-th impact (k = 0, 1, ...) is at speed e^k v1, v1 = sqrt(2 G h); the
    impacts are those up to the first with e^k v1 < min_speed, so there are
    N = 1 + (the smallest such k). The first is at t1 = v1 / G, the flight
    after the k-th lasts 2 e^k v1 / G, so the last is at
        v1 / G (1 + 2 e (1 - e^(N-1)) / (1 - e))
    (a few ulp from the exact value: no sum of many terms)."""
    height, restitution, min_speed = np.broadcast_arrays(*(np.asarray(a, np.float64)
                                                           for a in (height, restitution, min_speed)))
    v1 = np.sqrt(2 * G * height)
    impacts = np.ones(height.shape)
    speed = v1.copy()
    going = speed >= min_speed
    while going.any():  # e^k v1 as the ball's speed is: multiplied by e at each impact
        speed = np.where(going, speed * restitution, speed)
        impacts += going
        going &= speed >= min_speed
    e = restitution
    rest = v1 / G * (1 + 2 * e * -np.expm1((impacts - 1) * np.log(e)) / (1 - e))
    return rest, impacts


def closed_form_margin(height, restitution, min_speed=MIN_SPEED) -> float:
    """The smallest |e^k v1 / min_speed - 1| over every point's impacts: how far
    each impact speed is from the stop rule's threshold (a point whose margin is
    below a solver's relative error could count one impact more or less)."""
    margin = math.inf
    for h, e, m in np.broadcast(height, restitution, min_speed):
        speed = math.sqrt(2 * G * h)
        while True:
            margin = min(margin, abs(speed / m - 1))
            if speed < m:
                break
            speed *= e
    return margin

"""Flight between bounces: where a serve or a return lands.

Point ball with gravity, quadratic drag and Magnus lift (the project's
specification, "Flight"): a = -g ez - kD |v| v + kM (w x v), with
kD = rho CD pi r^2 / (2 m), kM = rho CM pi r^3 / (2 m); spin is constant in
flight and changes only at bounces. State (x, y, z, vx, vy, vz, wx, wy, wz, n),
n the bounces so far on the near half (constant in flight).

Table top at z = 0 from x = 0 to 2.74 m, |y| <= 0.7625 m; net plane x = 1.37 m,
0.1525 m high. The ball is launched from the near half (x < 1.37) towards +x.
Events:
- the centre reaches z = r falling: on the near half inside the table, the
  first time, it bounces (the rebound model) and flies on; anywhere else the
  flight ends there (on the far half inside the table: in; outside the table:
  out; a second contact on the near half: a fault);
- the centre crosses the net plane lower than the net top plus r: net fault.
"""

import jax.numpy as jnp

from engine import (
    HybridPoint,
    HybridSystem,
    Interval,
    Mode,
    Output,
    Parameter,
    PointResult,
    Start,
    Status,
    Study,
    Transition,
    demo_configs,
)

from ._bounce import table_bounce
from ._figures import landing_figures
from ._fit import PAPER_FRICTION, PAPER_RESTITUTION, learned_coefficients

LENGTH, HALF_WIDTH, NET_X, NET_HEIGHT = 2.74, 0.7625, 1.37, 0.1525
FLIGHT = 0
TABLE, NET = 0, 1  # transition codes, in declaration order
IN, NET_FAULT, OUT, DOUBLE_BOUNCE = 1.0, 2.0, 3.0, 4.0


def _coefficients(p):
    """What the flight and the bounce read of a point's parameters: the drag and
    Magnus factors computed once per point rather than at every stage."""
    m, r = p["mass"], p["radius"]
    k_drag = p["air_density"] * p["drag_coefficient"] * jnp.pi * r**2 / (2 * m)
    k_magnus = p["air_density"] * p["magnus_coefficient"] * jnp.pi * r**3 / (2 * m)
    return {"k_drag": k_drag, "k_magnus": k_magnus, "gravity": p["gravity"], "radius": r,
            "restitution": p["restitution"], "friction": p["friction"], "model": p["model"]}


def _fly(t, y, c):
    # Component by component (no norm, cross product or scatter): the refilling
    # lanes run this on rows of lanes, where small vector ops cost extra passes.
    vx, vy, vz, wx, wy, wz = y[3], y[4], y[5], y[6], y[7], y[8]
    drag = c["k_drag"] * jnp.sqrt(vx * vx + vy * vy + vz * vz)
    k_magnus = c["k_magnus"]
    ax = -drag * vx + k_magnus * (wy * vz - wz * vy)
    ay = -drag * vy + k_magnus * (wz * vx - wx * vz)
    az = -drag * vz + k_magnus * (wx * vy - wy * vx) - c["gravity"]
    zero = jnp.zeros_like(vx)
    return jnp.stack([vx, vy, vz, ax, ay, az, zero, zero, zero, zero])


def _inside(y):
    return (y[0] >= 0) & (y[0] <= LENGTH) & (jnp.abs(y[1]) <= HALF_WIDTH)


def _own_half_bounce(y):
    """The serve's one bounce on the near half (a second one ends the flight)."""
    return _inside(y) & (y[0] < NET_X) & (y[9] == 0)


def _bounce(t, y, c):
    v, w, _ = table_bounce(y[3:6], y[6:9], c["restitution"], c["friction"], c["radius"], c["model"],
                           jnp.asarray(learned_coefficients(), y.dtype))
    return jnp.concatenate([y[:3], v, w, y[9:] + 1])


SYSTEM = HybridSystem((
    Mode("flight", _fly, (
        Transition("table_plane", lambda t, y, c: y[2] - c["radius"], direction=False,
                   target=lambda t, y, c: jnp.where(_own_half_bounce(y), FLIGHT, -1),
                   reset=lambda t, y, c: jnp.where(_own_half_bounce(y), _bounce(t, y, c), y)),
        Transition("net_plane", lambda t, y, c: y[0] - NET_X,
                   target=lambda t, y, c: jnp.where(y[2] < NET_HEIGHT + c["radius"], -1, FLIGHT)),
    )),
))


def launch_state(p):
    elevation, azimuth = jnp.radians(p["elevation"]), jnp.radians(p["azimuth"])
    speed = p["launch_speed"]
    v = speed * jnp.stack([jnp.cos(elevation) * jnp.cos(azimuth), jnp.cos(elevation) * jnp.sin(azimuth),
                           jnp.sin(elevation)])
    # Topspin for travel along +x is +wy (the bottom of the ball moves backward).
    w = jnp.stack([jnp.zeros_like(speed), p["topspin"], p["sidespin"]])
    return jnp.concatenate([jnp.stack([p["x0"], p["y0"], p["z0"]]), v, w, jnp.zeros_like(speed)[None]])


def _start(p, settings):
    return Start(launch_state(p).astype(jnp.dtype(settings.dtype)), FLIGHT, _coefficients(p))


def _finish(p, sol, settings):
    dtype = jnp.dtype(settings.dtype)
    codes, ys = sol.event_code, sol.event_y
    last = jnp.maximum(sol.num_events - 1, 0)
    nan = jnp.full((), jnp.nan, dtype)
    # The event log read entry by entry (a few): selects only, no index that
    # depends on the point and no argmax, so that a GPU kernel can evaluate it.
    end_code = codes[0]
    bounce, has_bounce = (nan, nan), jnp.asarray(False)
    crossing_height, crossed = nan, jnp.asarray(False)
    for k in reversed(range(codes.shape[0])):  # the earliest entry wins
        end_code = jnp.where(last == k, codes[k], end_code)
        bounced = (codes[k] == TABLE) & (k < last)
        bounce = tuple(jnp.where(bounced, ys[k, i], b) for i, b in enumerate(bounce))
        has_bounce |= bounced
        crossing_height = jnp.where(codes[k] == NET, ys[k, 2], crossing_height)
        crossed |= codes[k] == NET
    end = sol.y
    at_net = end_code == NET
    landed_far = (end_code == TABLE) & _inside(end) & (end[0] >= NET_X)
    landed_near = (end_code == TABLE) & _inside(end) & (end[0] < NET_X)
    outcome = jnp.where(at_net, NET_FAULT, jnp.where(landed_far, IN, jnp.where(landed_near, DOUBLE_BOUNCE, OUT)))
    outcome = outcome.astype(dtype)
    outputs = {
        "outcome": outcome,
        "lands_in": (outcome == IN).astype(dtype),
        "landing_x": jnp.where(at_net, nan, end[0]),
        "landing_y": jnp.where(at_net, nan, end[1]),
        "flight_time": sol.t,
        "bounce_x": jnp.where(has_bounce, bounce[0], nan),
        "bounce_y": jnp.where(has_bounce, bounce[1], nan),
        # Height above the net top where the centre crossed the net plane.
        "net_clearance": jnp.where(crossed, crossing_height - NET_HEIGHT - p["radius"], nan),
    }
    # A flight that reached the horizon without touching anything has no landing.
    no_event = (sol.status == Status.SUCCESS) & (sol.num_events == 0)
    status = jnp.where(no_event, jnp.int8(Status.EVENT_NOT_FOUND), sol.status)
    return PointResult(outputs, status, sol.num_steps, sol.num_events)


# Declared as start -> hybrid solve -> finish: on CPU the engine solves a batch
# on refilling lanes (engine.solve.lanes) rather than a vmap of the whole solve.
solve_landing = HybridPoint(SYSTEM, _start, _finish)


LANDING = Study(
    name="rebound_landing",
    title="where a served or returned ball lands: flight with drag and Magnus lift, bounces by the rebound model",
    source='Ren, Xu, Tan, "Rebound model ..." (bounce); flight model of the project\'s specification',
    version="2",
    parameters=(
        Parameter("x0", "m", -0.2, Interval(-5.0, NET_X, upper_open=True), "launch position x (table from 0 to 2.74)",
                  label="launch position $x_0$"),
        Parameter("y0", "m", 0.0, Interval(-3.0, 3.0), "launch position y", label="launch position $y_0$"),
        Parameter("z0", "m", 0.25, Interval(0.0, 3.0, lower_open=True), "launch height of the centre",
                  label="launch height $z_0$"),
        Parameter("launch_speed", "m/s", 9.0, Interval(0.0, 40.0, lower_open=True), "launch speed",
                  label="launch speed $v_0$"),
        Parameter("elevation", "deg", 5.0, Interval(-80.0, 80.0), "launch angle above horizontal", label="elevation"),
        Parameter("azimuth", "deg", 0.0, Interval(-60.0, 60.0), "launch direction from the +x axis", label="azimuth"),
        Parameter("topspin", "rad/s", 100.0, Interval(-1000.0, 1000.0), "spin about y (+: topspin, -: backspin)",
                  label=r"topspin $\omega_y$"),
        Parameter("sidespin", "rad/s", 0.0, Interval(-1000.0, 1000.0), "spin about z", label=r"sidespin $\omega_z$"),
        Parameter("mass", "kg", 0.0027, Interval(0.0, 0.1, lower_open=True), "ball mass", "m", label="mass $m$"),
        Parameter("gravity", "m/s^2", 9.81, Interval(0.0, 100.0), "gravitational acceleration", "g",
                  label="gravity $g$"),
        Parameter("air_density", "kg/m^3", 1.20, Interval(0.0, 10.0), "air density", "rho",
                  label=r"air density $\rho$"),
        Parameter("drag_coefficient", "1", 0.50, Interval(0.0, 5.0), "drag coefficient", "CD",
                  label=r"drag coefficient $C_D$"),
        Parameter("magnus_coefficient", "1", 1.0, Interval(0.0, 5.0), "Magnus (lift) coefficient", "CM",
                  label=r"Magnus coefficient $C_M$"),
        Parameter("restitution", "1", PAPER_RESTITUTION, Interval(0.0, 1.0, lower_open=True), "table restitution e",
                  label="restitution $e$"),
        Parameter("friction", "1", PAPER_FRICTION, Interval(0.0, 2.0), "table friction mu",
                  label=r"friction coefficient $\mu$"),
        Parameter("radius", "m", 0.02, Interval(0.0, 0.1, lower_open=True), "ball radius", "r", label="radius $r$"),
        Parameter("model", "1", 0.0, Interval(0.0, 2.0), "bounce model: 0 physical, 1 classical, 2 learned",
                  integer=True, label="bounce model"),
    ),
    outputs=(
        Output("outcome", "1", "1 in (far half), 2 net fault, 3 out (off the table), 4 second bounce on the near half",
               label="outcome"),
        Output("lands_in", "1", "1 if the ball lands on the far half of the table",
               label="lands in"),
        Output("landing_x", "m", "where the flight ends on the table plane, x (NaN: net fault)", optional=True,
               label="landing position $x$"),
        Output("landing_y", "m", "where the flight ends on the table plane, y (NaN: net fault)", optional=True,
               label="landing position $y$"),
        Output("flight_time", "s", "time from launch to the end of the flight", label="flight time"),
        Output("bounce_x", "m", "bounce on the near half, x (a serve; NaN: none)", optional=True,
               label="serve bounce position $x$"),
        Output("bounce_y", "m", "bounce on the near half, y (NaN: none)", optional=True,
               label="serve bounce position $y$"),
        Output("net_clearance", "m", "height of the ball above the net top at the net plane (NaN: not reached)",
               optional=True, label="net clearance"),
    ),
    solve_point=solve_landing,
    # A call costs in proportion to its batch as well as to its points (the
    # solutions' event logs): the landing map's shards of 4,096 points in calls
    # of the lanes' default 32,768 ran at half the rate of calls of 4,096
    # (77,763-point sweep end to end, inline, alternating runs).
    batch_size=4096,
    figures=landing_figures,
    demo_configs=demo_configs(__package__, "demo/landing"),
)

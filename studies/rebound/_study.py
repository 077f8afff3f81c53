"""Rebound studies: the bounce map, the regime map on derived axes, Table 1.

Source: Ren, Xu, Tan, "Rebound model between spinning table tennis ball and
table/racket" (seed 001), restated in the project's specification.
"""

import functools

import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Status, Study, demo_configs, vectormath
from engine.once import computed_once

from ._bounce import (
    angle_from_normal,
    critical_angle,
    incidence_angle,
    racket_bounce_components,
    rotation,
    table_bounce_components,
    to_racket,
)
from ._figures import bounce_figures, regime_figures, table1_figures
from ._fit import PAPER_FRICTION, PAPER_RESTITUTION, learned_coefficients, load_table1

SPEED = Interval(-50.0, 50.0)
SPIN = Interval(-1000.0, 1000.0)
ANGLE = Interval(-3.15, 3.15)


def _symbol(component: str) -> str:
    """A velocity or spin component in the paper's notation (mathtext): vx as v_x, wy as \\omega_y."""
    return f"{'v' if component[0] == 'v' else chr(92) + 'omega'}_{component[1]}"


def _surface_parameters():
    return (
        Parameter("restitution", "1", PAPER_RESTITUTION, Interval(0.0, 1.0, lower_open=True),
                  "coefficient of restitution e (seed's fit)", "e", label="restitution $e$"),
        Parameter("friction", "1", PAPER_FRICTION, Interval(0.0, 2.0), "friction coefficient mu (seed's fit)", "mu",
                  label=r"friction coefficient $\mu$"),
        Parameter("radius", "m", 0.02, Interval(0.0, 0.1, lower_open=True), "ball radius", "r", label="radius $r$"),
        Parameter("model", "1", 0.0, Interval(0.0, 2.0), "bounce model: 0 physical, 1 classical, 2 learned",
                  integer=True, label="bounce model"),
    )


def _bounce_outputs():
    def component(c):
        return Output(f"out_{c}", "m/s" if c[0] == "v" else "rad/s",
                      f"outgoing {'velocity' if c[0] == 'v' else 'spin'} {c[1]}", label=f"outgoing ${_symbol(c)}$")

    return tuple(component(c) for c in ("vx", "vy", "vz", "wx", "wy", "wz")) + (
        Output("regime", "1", "1 sliding (incidence >= critical angle), 0 rolling",
               label="regime (1: sliding)"),
        Output("incidence_angle", "deg", "angle between the contact point's incoming velocity and the normal",
               label=r"incidence angle $\alpha$"),
        Output("critical_angle", "deg", "critical friction angle arctan(5 (1 + e) mu / 2)",
               label=r"critical angle $\alpha_c$"),
        Output("out_speed", "m/s", "outgoing speed |Ve|", label="outgoing speed $|V_e|$"),
        Output("out_angle", "deg", "angle of the outgoing velocity (relative to the surface) from its normal",
               label="outgoing angle from the normal"),
    )


def _bounce(v, w, p, dtype, racket=None):
    """Outputs and status of one bounce, on components (see _bounce.py). racket:
    (velocity, T) of a moving, tilted racket; None: the table (T = identity, at rest)."""
    learned = jnp.asarray(learned_coefficients(), dtype)  # a constant: folded into the program
    e, mu, r = p["restitution"], p["friction"], p["radius"]
    if racket is None:
        v_local, w_local = v, w
        out_v, out_w, sliding = table_bounce_components(v, w, e, mu, r, p["model"], learned)
        out_local = out_v
    else:
        velocity, T = racket
        out_v, out_w, sliding = racket_bounce_components(v, w, e, mu, r, p["model"], learned, velocity, T)
        # Angles are racket-frame quantities: velocities relative to the racket.
        v_local = to_racket(T, tuple(v[i] - velocity[i] for i in range(3)))
        w_local = to_racket(T, w)
        out_local = to_racket(T, tuple(out_v[i] - velocity[i] for i in range(3)))
    outputs = {f"out_{c}{x}": vec[i] for c, vec in (("v", out_v), ("w", out_w)) for i, x in enumerate("xyz")}
    outputs |= {
        "regime": sliding.astype(dtype),
        "incidence_angle": jnp.degrees(incidence_angle(v_local, w_local, r)),
        "critical_angle": jnp.degrees(critical_angle(e, mu)).astype(dtype),
        "out_speed": jnp.sqrt(out_v[0] * out_v[0] + out_v[1] * out_v[1] + out_v[2] * out_v[2]),
        "out_angle": jnp.degrees(angle_from_normal(jnp.sqrt(out_local[0] * out_local[0] + out_local[1] * out_local[1]),
                                                   out_local[2])),
    }
    # Only a ball moving into the surface bounces.
    status = jnp.where(v_local[2] < 0, Status.SUCCESS, Status.OUT_OF_RANGE).astype(jnp.int8)
    return outputs, status


def solve_rebound(p, settings):
    dtype = jnp.dtype(settings.dtype)
    v = (p["vx"], p["vy"], p["vz"])
    w = (p["wx"], p["wy"], p["wz"])
    racket_velocity = (p["racket_vx"], p["racket_vy"], p["racket_vz"])
    T = rotation(p["racket_roll"], p["racket_pitch"], p["racket_yaw"])
    outputs, status = _bounce(v, w, p, dtype, racket=(racket_velocity, T))
    return PointResult(outputs, status)


def _incoming(speed, alpha, s, r):
    """Incoming (v, w), as components, with contact incidence angle alpha and spin ratio s = r wy / |v|.

    The slip u = vx - r wy >= 0 along x, |vz| = q and t = tan(alpha) = u / q
    with |v| = S and vx = u + s S give (q t + s S)^2 + q^2 = S^2, whose root
    q = S (R - s t) / (1 + t^2), R = sqrt(1 - s^2 + t^2), is the motion
    u = S (sin(alpha) sqrt(1 - s^2 cos^2(alpha)) - s sin^2(alpha)) of the
    angle's sine and cosine (one tangent costs about half what the two do); no
    such motion exists where R is imaginary or u < 0.
    """
    (t,) = computed_once((vectormath.tan(alpha),))  # else computed again in every loop reading it
    one_minus_s2 = (1 - s) * (1 + s)  # no cancellation as |s| -> 1, unlike 1 - s^2
    root = one_minus_s2 + t**2
    sqrt = jnp.sqrt(jnp.maximum(root, 0.0))
    # For s t > 0, R - s t cancels as s -> 1 (the ball rolls along the table,
    # vz = 0): there q = S (1 - s)(1 + s) / (R + s t), exact to rounding, and
    # exactly 0 at s = 1. One division either way.
    ahead = s * t > 0
    q = speed * (jnp.where(ahead, one_minus_s2, sqrt - s * t) / jnp.where(ahead, sqrt + s * t, 1 + t**2))
    u = q * t
    vz = -q
    exists = (root >= 0) & (u >= 0) & (vz < 0)
    zero = jnp.zeros_like(speed)
    return (u + s * speed, zero, vz), (zero, s * speed / r, zero), exists


def solve_regime(p, settings):
    dtype = jnp.dtype(settings.dtype)
    v, w, exists = _incoming(p["speed"], jnp.radians(p["incidence_angle"]), p["spin_ratio"], p["radius"])
    outputs, status = _bounce(v, w, p, dtype)
    outputs = {k: outputs[k] for k in ("out_vx", "out_vz", "out_wy", "out_speed", "out_angle", "regime",
                                       "critical_angle")}
    outputs |= {
        "in_vx": v[0], "in_vz": v[2], "in_wy": w[1],
        "out_spin_ratio": p["radius"] * outputs["out_wy"] / outputs["out_speed"],
    }
    status = jnp.where(exists, status, jnp.int8(Status.OUT_OF_RANGE))
    return PointResult(outputs, status)


@functools.cache
def _table1():
    """Table 1's measured bounces, read when a sweep first solves them (not with
    the study: listing or validating sweeps then loads no xarray)."""
    return load_table1()


def solve_table1(p, settings):
    """Prediction and error (measured - predicted) for one measured bounce."""
    dtype = jnp.dtype(settings.dtype)
    i = p["sample"].astype(int) - 1
    table = _table1()
    vi, wi = jnp.asarray(table["vi"].values, dtype)[i], jnp.asarray(table["wi"].values, dtype)[i]
    ve, we = jnp.asarray(table["ve"].values, dtype)[i], jnp.asarray(table["we"].values, dtype)[i]
    outputs, status = _bounce(vi, wi, p, dtype)
    errors = {f"error_{c}{x}": measured[j] - outputs[f"out_{c}{x}"]
              for c, measured in (("v", ve), ("w", we)) for j, x in enumerate("xyz")}
    return PointResult({k: outputs[k] for k in outputs if k.startswith("out_")} | errors | {
        "regime": outputs["regime"]}, status)


_DEMOS = demo_configs(__package__)
SOURCE = 'Ren, Xu, Tan, "Rebound model between spinning table tennis ball and table/racket"'

# The bounce is a closed-form map: calls of a few thousand points keep a call's
# arrays in cache. Regime map, 2^20 points, CPU time of the compiled calls on
# one core (2 runs): 11.0-11.2M points/s in calls of 4,096 points, 9.5 in calls
# of 8,192, 9.3-9.8 in calls of 16,384 (calls of 256: ~0.4M, the call overhead).
CLOSED_FORM_BATCH = 4096
# The regime map since (fewer libm calls, freed host memory kept between calls:
# engine.solve._host_memory): each call costs ~30 us beyond its points, so wider
# calls gain. 10^6 points through evaluate, one core, process CPU time (2 runs):
# 51-53 ns a point in calls of 4,096, 43-44 in 8,192, 39-45 in 16,384, 37-38 in
# 32,768 (numba, one thread: 42). On 2 idle cores, calls of 32,768 split the
# costliest kernels over both cores (XLA:CPU splits by bytes: at 16,384 they
# run on one), so one evaluate at a time gains (39.5-40.6M points/s against
# 31.7-32.3), but two evaluates at once, as shard threads run, lose (44.5-45.9M
# against 49.5-49.7). The config's shards (64,800 points) take four calls of
# 16,384, the last padded by 736 points.
REGIME_BATCH = 16384

REBOUND = Study(
    name="rebound",
    title="spinning ball bouncing on a table or a moving racket (impulse model)",
    source=SOURCE,
    version="3",
    parameters=tuple(
        Parameter(n, "m/s", d, SPEED, f"incoming velocity, {n[1]} (surface frame when no racket)", n,
                  label=f"incoming ${_symbol(n)}$")
        for n, d in (("vx", 0.92), ("vy", -2.89), ("vz", -2.46))
    ) + tuple(
        Parameter(n, "rad/s", d, SPIN, f"incoming spin, {n[1]}", n, label=f"incoming ${_symbol(n)}$")
        for n, d in (("wx", -35.44), ("wy", 4.13),
                                                                             ("wz", -7.29))
    ) + _surface_parameters() + tuple(
        Parameter(f"racket_v{x}", "m/s", 0.0, SPEED, f"racket velocity, {x} (world frame)",
                  label=f"racket velocity $V_{x}$") for x in "xyz"
    ) + tuple(
        Parameter(f"racket_{a}", "rad", 0.0, ANGLE, f"racket orientation: {a} (T = Rz(yaw) Ry(pitch) Rx(roll))",
                  label=f"racket {a}")
        for a in ("roll", "pitch", "yaw")
    ),
    outputs=_bounce_outputs(),
    solve_point=solve_rebound,
    figures=bounce_figures,
    demo_configs={name: _DEMOS[name] for name in ("rebound_spin", "rebound_uncertainty")},
    batch_size=CLOSED_FORM_BATCH,
)

REGIME = Study(
    name="rebound_regime",
    title="rebound regime map over incidence angle and spin ratio (derived axes)",
    source=SOURCE,
    version="4",
    parameters=(
        Parameter("speed", "m/s", 3.8, Interval(0.0, 50.0, lower_open=True), "incoming speed |Vi|",
                  label="incoming speed $|V_i|$"),
        Parameter("incidence_angle", "deg", 45.0, Interval(0.0, 90.0, upper_open=True),
                  "contact incidence angle alpha: cot(alpha) = |vz| / |u|", "alpha",
                  label=r"incidence angle $\alpha$"),
        Parameter("spin_ratio", "1", 0.0, Interval(-5.0, 5.0),
                  "r wy / |Vi| (positive: topspin for a ball moving along +x)", "s",
                  label=r"spin ratio $r\omega_y/|V_i|$"),
    ) + _surface_parameters(),
    outputs=tuple(o for o in _bounce_outputs() if o.name in ("out_vx", "out_vz", "out_wy", "out_speed", "out_angle",
                                                              "regime", "critical_angle")) + (
        Output("in_vx", "m/s", "incoming velocity x the axes stand for", label="incoming $v_x$"),
        Output("in_vz", "m/s", "incoming velocity z the axes stand for", label="incoming $v_z$"),
        Output("in_wy", "rad/s", "incoming spin y the axes stand for", label=r"incoming $\omega_y$"),
        Output("out_spin_ratio", "1", "outgoing r wy / |Ve|", label=r"outgoing spin ratio $r\omega_y/|V_e|$"),
    ),
    solve_point=solve_regime,
    figures=regime_figures,
    demo_configs={"rebound_regime": _DEMOS["rebound_regime"]},
    batch_size=REGIME_BATCH,
)

TABLE1 = Study(
    name="rebound_table1",
    title="the rebound models against the 12 measured bounces of Table 1",
    source=SOURCE + ", Tables 1 and 2",
    version="1",
    parameters=(Parameter("sample", "1", 1.0, Interval(1.0, 12.0), "Table 1 sample number", integer=True,
                          label="Table 1 sample"),)
    + _surface_parameters(),
    outputs=tuple(o for o in _bounce_outputs() if o.name.startswith("out_") and o.name[4] in "vw")
    + tuple(Output(f"error_{c}", "m/s" if c[0] == "v" else "rad/s", f"measured minus predicted outgoing {c}",
                   label=f"error in outgoing ${_symbol(c)}$")
            for c in ("vx", "vy", "vz", "wx", "wy", "wz"))
    + (Output("regime", "1", "1 sliding, 0 rolling", label="regime (1: sliding)"),),
    solve_point=solve_table1,
    figures=table1_figures,
    demo_configs={"rebound_table1": _DEMOS["rebound_table1"]},
)


"""Impulse models of a spinning ball bouncing on a table or a racket.

Ren, Xu, Tan, "Rebound model between spinning table tennis ball and
table/racket", as restated in the project's specification (the seed's eq. (4)
has a stray 1/r: the critical friction angle is arctan(5 (1 + e) mu / 2)).

Frame of the surface: x, y tangential, z the outward normal. Thin-shell ball,
I = (2/3) m r^2. The contact point sits at (0, 0, -r) from the centre, so its
tangential velocity (the slip) is u = (vx - r wy, vy + r wx).

Written component by component: a vector is anything indexable by 0, 1, 2
(an array or a tuple of scalars). Vmapped over a batch, every step is then one
elementwise loop that XLA fuses with the rest (3x3 products written as matrix
products became batched dot operations, each a pass over memory of its own),
and a caller whose components are constants (the regime map's vy = wx = wz = 0)
passes them as such. `table_bounce` and `racket_bounce` take and give arrays;
their `*_components` forms take and give tuples.
"""

import jax.numpy as jnp

from engine import vectormath
from engine.once import computed_once

PHYSICAL, CLASSICAL, LEARNED = 0, 1, 2
MODEL_NAMES = ("physical", "classical", "learned")


def _slip(v, w, r):
    return v[0] - r * w[1], v[1] + r * w[0]


def slip(v, w, r):
    return jnp.stack(_slip(v, w, r))


def critical_angle(e, mu):
    """phi = arctan(5 (1 + e) mu / 2), radians: sliding at incidence >= phi."""
    return jnp.arctan(2.5 * (1 + e) * mu)


def slides(speed, normal_speed, e, mu):
    """Whether the incidence angle arctan2(speed, normal_speed) (slip speed and
    normal speed, both >= 0) is at least the critical angle.

    Compared as tangents, speed >= normal_speed * 5 (1 + e) mu / 2 (tan rises
    on [0, pi/2], so their order is the angles'): the arctan2 and arctan of the
    angles themselves were the costliest operations of the regime map. At rest
    (both speeds 0) the incidence angle is arctan2(0, 0) = 0: sliding only
    without friction.
    """
    tan_critical = 2.5 * (1 + e) * mu
    return (speed >= normal_speed * tan_critical) & ((speed > 0) | (tan_critical == 0))


def _hypot(x, y):
    # sqrt(x^2 + y^2) as jnp.linalg.norm forms it (jnp.hypot rescales: other roundings).
    return jnp.sqrt(x * x + y * y)


def angle_from_normal(along, normal):
    """The angle arctan2(along, normal) of a velocity leaving the surface (along >= 0, normal > 0).

    Computed as arctan(along / normal), the arctangent by engine.vectormath
    (XLA:CPU calls glibc's scalar arctan2 or arctan a point at a time): the
    quotient adds at most a quarter of float resolution in radians. 0 at rest, as
    arctan2(0, 0); a velocity into the surface (normal < 0) is no bounce and
    gets no meaningful angle here.

    The quotient is kept in memory: fused with the arithmetic that forms it,
    the arctangent's loop saved its vector registers around every libm call
    (regime map: 12.7 ns a point, 8.1 apart).
    """
    (tangent,) = computed_once((jnp.where(along > 0, along / normal, 0.0),))
    return vectormath.arctan(tangent)


def incidence_angle(v, w, r):
    """Angle between the contact point's incoming velocity and the normal: cot = |vz| / |u|."""
    return jnp.arctan2(_hypot(*_slip(v, w, r)), jnp.abs(v[2]))


def table_bounce_components(v, w, e, mu, r, model, learned):
    """`table_bounce` on components: ((vx, vy, vz), (wx, wy, wz), sliding)."""
    ux, uy = _slip(v, w, r)
    speed = _hypot(ux, uy)
    sliding = slides(speed, jnp.abs(v[2]), e, mu)
    # The tangential impulse per unit mass is J = -scale u: sliding, friction
    # mu (1 + e) m |vz| against the slip for the whole impact; below the critical
    # angle none (physical) or -(2/5) m u, leaving zero contact slip (classical).
    moving = speed > 0
    friction = jnp.where(moving, (1 + e) * mu * jnp.abs(v[2]) / jnp.where(moving, speed, 1.0), 0.0)
    scale = jnp.where(sliding, friction, jnp.where(model == CLASSICAL, 0.4, 0.0))
    jx, jy = -scale * ux, -scale * uy
    # Angular impulse (0, 0, -r) x (Jx, Jy, 0) = (r Jy, -r Jx, 0), divided by I/m = (2/3) r^2.
    out_v = (v[0] + jx, v[1] + jy, -e * v[2])
    out_w = (w[0] + 1.5 / r * jy, w[1] + -1.5 / r * jx, w[2])
    fit_v, fit_w = learned_bounce_components(v, w, e, learned)
    is_learned = model == LEARNED
    out_v = tuple(jnp.where(is_learned, a, b) for a, b in zip(fit_v, out_v, strict=True))
    out_w = tuple(jnp.where(is_learned, a, b) for a, b in zip(fit_w, out_w, strict=True))
    return out_v, out_w, sliding


def table_bounce(v, w, e, mu, r, model, learned):
    """Outgoing (v, w) and regime (1 sliding, 0 rolling) for one impact.

    model: PHYSICAL (seed eq. (5): below the critical angle no tangential impulse),
    CLASSICAL (below it the ball leaves with zero contact slip: impulse -(2/5) m u)
    or LEARNED (linear least-squares maps, `learned` = LearnedModel coefficients).
    """
    out_v, out_w, sliding = table_bounce_components(v, w, e, mu, r, model, learned)
    return jnp.stack(out_v), jnp.stack(out_w), sliding


def learned_bounce_components(v, w, e, c):
    """Seed's learned linear model: normal as the physical one, tangential by
    least-squares maps with intercepts (c: 4 rows of 3 coefficients)."""
    out_v = (c[0, 0] * v[0] + c[0, 1] * w[1] + c[0, 2],
             c[1, 0] * v[1] + c[1, 1] * w[0] + c[1, 2],
             -e * v[2])
    out_w = (c[2, 0] * v[1] + c[2, 1] * w[0] + c[2, 2],
             c[3, 0] * v[0] + c[3, 1] * w[1] + c[3, 2],
             w[2])
    return out_v, out_w


def learned_bounce(v, w, e, c):
    out_v, out_w = learned_bounce_components(v, w, e, c)
    return jnp.stack(out_v), jnp.stack(out_w)


def _product(a, b):
    """a @ b of 3x3 matrices given as nested tuples."""
    return tuple(tuple(a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j] for j in range(3))
                 for i in range(3))


def rotation(roll, pitch, yaw):
    """Racket frame -> world: T = Rz(yaw) Ry(pitch) Rx(roll); racket normal = T e_z."""
    cr, sr, cp, sp, cy, sy = jnp.cos(roll), jnp.sin(roll), jnp.cos(pitch), jnp.sin(pitch), jnp.cos(yaw), jnp.sin(yaw)
    one, zero = jnp.ones_like(cr), jnp.zeros_like(cr)
    rx = ((one, zero, zero), (zero, cr, -sr), (zero, sr, cr))
    ry = ((cp, zero, sp), (zero, one, zero), (-sp, zero, cp))
    rz = ((cy, -sy, zero), (sy, cy, zero), (zero, zero, one))
    return jnp.stack([jnp.stack(row) for row in _product(_product(rz, ry), rx)])


def to_racket(T, x):
    """T.T @ x: world components in the racket's frame."""
    return tuple(T[0, i] * x[0] + T[1, i] * x[1] + T[2, i] * x[2] for i in range(3))


def to_world(T, x):
    """T @ x: racket-frame components in the world frame."""
    return tuple(T[i, 0] * x[0] + T[i, 1] * x[1] + T[i, 2] * x[2] for i in range(3))


def racket_bounce_components(v, w, e, mu, r, model, learned, racket_velocity, T):
    """`racket_bounce` on components."""
    v_local = to_racket(T, tuple(v[i] - racket_velocity[i] for i in range(3)))
    out_v, out_w, sliding = table_bounce_components(v_local, to_racket(T, w), e, mu, r, model, learned)
    out_v = tuple(racket_velocity[i] + x for i, x in enumerate(to_world(T, out_v)))
    return out_v, to_world(T, out_w), sliding


def racket_bounce(v, w, e, mu, r, model, learned, racket_velocity, T):
    """The table model in the racket's frame (its pose fixed during the impact)."""
    out_v, out_w, sliding = racket_bounce_components(v, w, e, mu, r, model, learned, racket_velocity, T)
    return jnp.stack(out_v), jnp.stack(out_w), sliding

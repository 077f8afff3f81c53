"""Impulse models of a spinning ball bouncing on a table or a racket.

Ren, Xu, Tan, "Rebound model between spinning table tennis ball and
table/racket", as restated in the project's specification (the seed's eq. (4)
has a stray 1/r: the critical friction angle is arctan(5 (1 + e) mu / 2)).

Frame of the surface: x, y tangential, z the outward normal. Thin-shell ball,
I = (2/3) m r^2. The contact point sits at (0, 0, -r) from the centre, so its
tangential velocity (the slip) is u = (vx - r wy, vy + r wx).
"""

import jax.numpy as jnp

PHYSICAL, CLASSICAL, LEARNED = 0, 1, 2
MODEL_NAMES = ("physical", "classical", "learned")


def slip(v, w, r):
    return jnp.stack([v[0] - r * w[1], v[1] + r * w[0]])


def critical_angle(e, mu):
    """phi = arctan(5 (1 + e) mu / 2), radians: sliding at incidence >= phi."""
    return jnp.arctan(2.5 * (1 + e) * mu)


def incidence_angle(v, w, r):
    """Angle between the contact point's incoming velocity and the normal: cot = |vz| / |u|."""
    return jnp.arctan2(jnp.linalg.norm(slip(v, w, r)), jnp.abs(v[2]))


def _tangential_impulse(v, w, r, impulse):
    """Apply a tangential impulse per unit mass J = (Jx, Jy) at the contact point."""
    # Angular impulse (0, 0, -r) x (Jx, Jy, 0) = (r Jy, -r Jx, 0), divided by I/m = (2/3) r^2.
    v_new = v.at[0].add(impulse[0]).at[1].add(impulse[1])
    w_new = w.at[0].add(1.5 / r * impulse[1]).at[1].add(-1.5 / r * impulse[0])
    return v_new, w_new


def sliding_bounce(v, w, e, mu, r):
    """Friction mu (1 + e) m |vz| against the slip for the whole impact."""
    u = slip(v, w, r)
    speed = jnp.linalg.norm(u)
    k = jnp.where(speed > 0, (1 + e) * mu * jnp.abs(v[2]) / jnp.where(speed > 0, speed, 1.0), 0.0)
    v_new, w_new = _tangential_impulse(v, w, r, -k * u)
    return v_new.at[2].set(-e * v[2]), w_new


def table_bounce(v, w, e, mu, r, model, learned):
    """Outgoing (v, w) and regime (1 sliding, 0 rolling) for one impact.

    model: PHYSICAL (seed eq. (5): below the critical angle no tangential impulse),
    CLASSICAL (below it the ball leaves with zero contact slip: impulse -(2/5) m u)
    or LEARNED (linear least-squares maps, `learned` = LearnedModel coefficients).
    """
    sliding = incidence_angle(v, w, r) >= critical_angle(e, mu)
    slide_v, slide_w = sliding_bounce(v, w, e, mu, r)
    roll_v, roll_w = v.at[2].set(-e * v[2]), w
    stick_v, stick_w = _tangential_impulse(v, w, r, -0.4 * slip(v, w, r))
    stick_v = stick_v.at[2].set(-e * v[2])
    below_v = jnp.where(model == CLASSICAL, stick_v, roll_v)
    below_w = jnp.where(model == CLASSICAL, stick_w, roll_w)
    out_v = jnp.where(sliding, slide_v, below_v)
    out_w = jnp.where(sliding, slide_w, below_w)
    learned_v, learned_w = learned_bounce(v, w, e, learned)
    out_v = jnp.where(model == LEARNED, learned_v, out_v)
    out_w = jnp.where(model == LEARNED, learned_w, out_w)
    return out_v, out_w, sliding


def learned_bounce(v, w, e, c):
    """Seed's learned linear model: normal as the physical one, tangential by
    least-squares maps with intercepts (c: 4 rows of 3 coefficients)."""
    out_v = jnp.stack([c[0, 0] * v[0] + c[0, 1] * w[1] + c[0, 2],
                       c[1, 0] * v[1] + c[1, 1] * w[0] + c[1, 2],
                       -e * v[2]])
    out_w = jnp.stack([c[2, 0] * v[1] + c[2, 1] * w[0] + c[2, 2],
                       c[3, 0] * v[0] + c[3, 1] * w[1] + c[3, 2],
                       w[2]])
    return out_v, out_w


def rotation(roll, pitch, yaw):
    """Racket frame -> world: T = Rz(yaw) Ry(pitch) Rx(roll); racket normal = T e_z."""
    cr, sr, cp, sp, cy, sy = jnp.cos(roll), jnp.sin(roll), jnp.cos(pitch), jnp.sin(pitch), jnp.cos(yaw), jnp.sin(yaw)
    one, zero = jnp.ones_like(cr), jnp.zeros_like(cr)
    rx = jnp.stack([jnp.stack([one, zero, zero]), jnp.stack([zero, cr, -sr]), jnp.stack([zero, sr, cr])])
    ry = jnp.stack([jnp.stack([cp, zero, sp]), jnp.stack([zero, one, zero]), jnp.stack([-sp, zero, cp])])
    rz = jnp.stack([jnp.stack([cy, -sy, zero]), jnp.stack([sy, cy, zero]), jnp.stack([zero, zero, one])])
    return rz @ ry @ rx


def racket_bounce(v, w, e, mu, r, model, learned, racket_velocity, T):
    """The table model in the racket's frame (its pose fixed during the impact)."""
    v_local, w_local = T.T @ (v - racket_velocity), T.T @ w
    out_v, out_w, sliding = table_bounce(v_local, w_local, e, mu, r, model, learned)
    return racket_velocity + T @ out_v, T @ out_w, sliding

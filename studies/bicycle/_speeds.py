"""Characteristic speeds of a design, from the characteristic quartic's
coefficients as polynomials in u = v^2 (`_polynomials`):

- capsize speed vc: a real root crosses zero, a0 = k00 + k02 u = 0: closed form.
- weave speed vw: the weave pair crosses the imaginary axis, where the
  Routh-Hurwitz determinant H = a3 a2 a1 - a3^2 a0 - a4 a1^2 turns positive
  with a1/a3 > 0. H = u (A u^2 + B u + C): closed form, the quadratic's
  upward root.
- double-root speed vd: two real roots merge into the weave pair, where the
  quartic's discriminant (a sextic in u) turns negative: its first sign change
  on a speed grid brackets the root, bisection narrows it, and Newton on
  p = p' = 0 polishes it to machine precision.

NaN where there is no such speed in (0, max_speed].
"""

import jax.numpy as jnp

from engine.once import computed_once

from ._polynomials import polyval, speed_polynomials
from ._quartic import closest_pair, ferrari, horner

GRID = 128  # bracketing resolution of the discriminant's first sign change over (0, max_speed]
BISECTIONS = 20  # a bracket of max_speed/128 down to ~4e-9 of max_speed: Newton's start
NEWTON = 4  # quadratic from there (the fold p = p' = 0 is a regular root in (v, s))


def _in_range(v, max_speed):
    return (v > 0) & (v <= max_speed)


def capsize_speed(matrices, g, max_speed):
    poly = speed_polynomials(matrices, g)
    u = -poly.k00 / poly.k02
    vc = jnp.sqrt(jnp.where(u > 0, u, jnp.nan))
    return jnp.where(vc <= max_speed, vc, jnp.nan)


def weave_speed(matrices, g, max_speed):
    """vw and the weave angular frequency there (eigenvalues +-i w)."""
    poly = speed_polynomials(matrices, g)
    A, B, C = poly.hurwitz()
    disc = B * B - 4 * A * C
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    # The root where A u^2 + B u + C turns positive, 2 A u + B = +sqrt(disc):
    # (-B + root) / (2A), written without cancellation (and valid for A = 0).
    u = jnp.where(B < 0, (-B + root) / (2 * A), 2 * C / (-B - root))
    v = jnp.sqrt(jnp.where((disc > 0) & (u > 0), u, jnp.nan))
    a = poly.coefficients(v)
    # On H = 0 two roots sum to zero: +-i w with w^2 = a1/a3 > 0, or, if a1/a3 < 0,
    # two real roots +-x: no weave crossing.
    w2 = a[1] / a[3]
    w = jnp.sqrt(jnp.where(w2 > 0, w2, jnp.nan))
    ok = _in_range(v, max_speed) & (w2 > 0)
    return jnp.where(ok, v, jnp.nan), jnp.where(ok, w, jnp.nan)


def _first_downward_crossing(f, max_speed):
    """Bracket and bisect the first change of f(v) from positive to not on (0, max_speed]."""
    nodes = jnp.arange(1, GRID + 1)
    speeds = max_speed * nodes / GRID
    positive = f(speeds) > 0
    # The first non-positive node after the first positive one: found by reductions
    # over the nodes, not by comparing the grid with itself shifted (which compiles
    # to a slow loop on a CPU).
    first_positive = jnp.argmax(positive)
    after = ~positive & (nodes > nodes[0] + first_positive)
    found = jnp.any(positive) & jnp.any(after)
    hi = max_speed * (jnp.argmax(after) + 1) / GRID
    lo = hi - max_speed / GRID
    for _ in range(BISECTIONS):  # unrolled: a loop on the device costs more than its body
        mid = (lo + hi) / 2
        below = f(mid) > 0  # mid is on the lower side of the crossing
        lo, hi = jnp.where(below, mid, lo), jnp.where(below, hi, mid)
    # The bracket's end computed once (engine.once): consumed by Newton's steps and
    # Ferrari, the unrolled chain of selects took jax 0.12's XLA:CPU minutes to compile.
    crossing, = computed_once((jnp.where(found, (lo + hi) / 2, jnp.nan),))
    return crossing


def double_root_speed(matrices, g, max_speed):
    """vd and the double real root there."""
    poly = speed_polynomials(matrices, g)
    disc = poly.discriminant()
    v0 = _first_downward_crossing(lambda v: polyval(disc, v * v), max_speed)
    safe_v0 = jnp.where(jnp.isfinite(v0), v0, 0.0)
    roots, _ = ferrari(poly.coefficients_at(safe_v0))
    # Start from the midpoint of the two closest roots: they are about to merge.
    s0, _, _ = closest_pair(roots)

    v, s = safe_v0, s0
    for _ in range(NEWTON):  # on p(s) = p'(s) = 0 in (v, s); derivatives written out, 2x2 by Cramer's rule
        a, da = poly.coefficients(v), poly.speed_derivatives(v)
        p, dp = horner(a, s)
        _, d2p = horner(jnp.stack([a[1], 2 * a[2], 3 * a[3], 4 * a[4]]), s)
        pv, dpv = horner(da, s)
        # jacobian [[p_v, p_s], [p'_v, p'_s]] with p_s = p' (= 0 at the solution) and p'_s = p''
        det = pv * d2p - dp * dpv
        ok = det != 0
        det = jnp.where(ok, det, 1.0)
        v, s = jnp.where(ok, v - (d2p * p - dp * dp) / det, v), jnp.where(ok, s - (pv * dp - dpv * p) / det, s)
    ok = jnp.isfinite(v0) & _in_range(v, max_speed)
    return jnp.where(ok, v, jnp.nan), jnp.where(ok, s, jnp.nan)

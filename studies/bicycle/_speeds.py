"""Characteristic speeds of a design, by root finding on the characteristic quartic.

With p(s) = a4 s^4 + a3 s^3 + a2 s^2 + a1 s + a0 (coefficients polynomial in v):

- capsize speed vc: a real root crosses zero, a0(v) = 0. Because K2 has a zero
  first column, a0 is linear in v^2: vc has a closed form.
- weave speed vw: the weave pair crosses the imaginary axis, where the
  Routh-Hurwitz determinant H = a3 a2 a1 - a3^2 a0 - a4 a1^2 turns positive.
- double-root speed vd: two real roots merge into the weave pair, where the
  quartic's discriminant turns negative.

vw and vd: the first sign change on a speed grid brackets the root, bisection
narrows it, and Newton on the defining equations (p(i w) = 0 for vw, p = p' = 0
for vd) polishes it to machine precision. NaN where there is no such speed in
(0, max_speed].
"""

import jax
import jax.numpy as jnp

from ._canonical import coefficients_from
from ._roots import cold_roots

GRID = 512  # bracketing resolution over (0, max_speed]
BISECTIONS = 40  # a bracket of max_speed/512 down to ~1e-14 relative
NEWTON = 4


def capsize_speed(matrices, g, max_speed):
    _, _, K0, K2 = matrices
    gK0 = g * K0
    # a0(u) = det(g K0 + u K2), u = v^2, linear in u since K2[:, 0] = 0.
    constant = gK0[0, 0] * gK0[1, 1] - gK0[0, 1] * gK0[1, 0]
    slope = gK0[0, 0] * K2[1, 1] - K2[0, 1] * gK0[1, 0]
    u = -constant / slope
    vc = jnp.sqrt(jnp.where(u > 0, u, jnp.nan))
    return jnp.where(vc <= max_speed, vc, jnp.nan)


def _hurwitz(a):
    return a[3] * a[2] * a[1] - a[3] ** 2 * a[0] - a[4] * a[1] ** 2


def _discriminant(a):
    e, d, c, b, a_ = a[0], a[1], a[2], a[3], a[4]
    return (
        256 * a_**3 * e**3 - 192 * a_**2 * b * d * e**2 - 128 * a_**2 * c**2 * e**2
        + 144 * a_**2 * c * d**2 * e - 27 * a_**2 * d**4 + 144 * a_ * b**2 * c * e**2
        - 6 * a_ * b**2 * d**2 * e - 80 * a_ * b * c**2 * d * e + 18 * a_ * b * c * d**3
        + 16 * a_ * c**4 * e - 4 * a_ * c**3 * d**2 - 27 * b**4 * e**2 + 18 * b**3 * c * d * e
        - 4 * b**3 * d**3 - 4 * b**2 * c**3 * e + b**2 * c**2 * d**2
    )


def _first_crossing(f, max_speed, upward):
    """Bracket and bisect the first sign change of f(v) on (0, max_speed]."""
    speeds = max_speed * jnp.arange(1, GRID + 1) / GRID
    values = jax.vmap(f)(speeds)
    positive = values > 0
    change = (positive[1:] & ~positive[:-1]) if upward else (~positive[1:] & positive[:-1])
    found = jnp.any(change)
    k = jnp.argmax(change)
    lo, hi = speeds[k], speeds[k + 1]

    def bisect(bracket, _):
        lo, hi = bracket
        mid = (lo + hi) / 2
        mid_positive = f(mid) > 0
        below = mid_positive != upward  # mid is on the lower side of the crossing
        return (jnp.where(below, mid, lo), jnp.where(below, hi, mid)), None

    (lo, hi), _ = jax.lax.scan(bisect, (lo, hi), None, length=BISECTIONS)
    return jnp.where(found, (lo + hi) / 2, jnp.nan)


def _newton2(residual, x):
    """A few Newton steps on a 2-equation system x = (v, second unknown)."""
    def step(x, _):
        r, jac = residual(x), jax.jacfwd(residual)(x)
        return x - jnp.linalg.solve(jac, r), None

    x, _ = jax.lax.scan(step, x, None, length=NEWTON)
    return x


def weave_speed(matrices, g, max_speed):
    """vw and the weave angular frequency there (eigenvalues +-i w)."""
    def coeffs(v):
        return coefficients_from(matrices, g, v)

    v0 = _first_crossing(lambda v: _hurwitz(coeffs(v)), max_speed, upward=True)
    a = coeffs(v0)
    w0 = jnp.sqrt(a[1] / a[3])  # on the Hurwitz boundary p(i w) = 0 with w^2 = a1/a3

    def residual(x):  # Re and Im of p(i w) at speed v
        v, w = x
        a = coeffs(v)
        return jnp.stack([a[0] - a[2] * w**2 + a[4] * w**4, a[1] * w - a[3] * w**3])

    v, w = _newton2(residual, jnp.stack([v0, w0]))
    ok = jnp.isfinite(v0) & (v > 0) & (v <= max_speed)
    return jnp.where(ok, v, jnp.nan), jnp.where(ok, w, jnp.nan)


def double_root_speed(matrices, g, max_speed):
    """vd and the double real root there."""
    def coeffs(v):
        return coefficients_from(matrices, g, v)

    v0 = _first_crossing(lambda v: _discriminant(coeffs(v)), max_speed, upward=False)
    safe_v0 = jnp.where(jnp.isfinite(v0), v0, 0.0)
    roots = cold_roots(coeffs(safe_v0).astype(complex))
    # Start from the midpoint of the two closest roots: they are about to merge.
    gaps = jnp.where(jnp.eye(4, dtype=bool), jnp.inf, jnp.abs(roots[:, None] - roots[None, :]))
    i, j = jnp.unravel_index(jnp.argmin(gaps), gaps.shape)
    s0 = ((roots[i] + roots[j]) / 2).real

    def residual(x):  # p(s) = p'(s) = 0 at speed v
        v, s = x
        a = coeffs(v)
        return jnp.stack([
            a[0] + a[1] * s + a[2] * s**2 + a[3] * s**3 + a[4] * s**4,
            a[1] + 2 * a[2] * s + 3 * a[3] * s**2 + 4 * a[4] * s**3,
        ])

    v, s = _newton2(residual, jnp.stack([safe_v0, s0]))
    ok = jnp.isfinite(v0) & (v > 0) & (v <= max_speed)
    return jnp.where(ok, v, jnp.nan), jnp.where(ok, s, jnp.nan)

"""The track z = p(x) and the reference motion by 1-D quadrature.

Seed's profile: p(x) = x^4 + a x^3 - b x^2 - a x - (1 - b). A rolling hoop
(J = M r^2) has kinetic energy M v^2, so M v^2 + M g z = E0: its speed depends
only on the height of its centre, which moves on the offset curve at distance
r above the track. Period and turning points are then 1-D integrals along that
curve, independent of any time stepping: every cube carries this reference.
"""

import jax
import jax.numpy as jnp
import numpy as np


def p(x, a, b):
    return x**4 + a * x**3 - b * x**2 - a * x - (1 - b)


def dp(x, a, b):
    return 4 * x**3 + 3 * a * x**2 - 2 * b * x - a


def d2p(x, a, b):
    return 12 * x**2 + 6 * a * x - 2 * b


def centre(xi, a, b, r):
    """Centre of the hoop touching the track at x = xi (on top of it)."""
    slope = dp(xi, a, b)
    norm = jnp.sqrt(1 + slope**2)
    return xi - r * slope / norm, p(xi, a, b) + r / norm


def curvature(xi, a, b):
    return d2p(xi, a, b) / (1 + dp(xi, a, b) ** 2) ** 1.5


def _turning_point(level, xi0, direction, a, b, r, grid=4096, span=4.0):
    """First xi from xi0 in `direction` where the centre height reaches `level`."""
    xs = xi0 + direction * span * jnp.arange(grid + 1) / grid
    heights = centre(xs, a, b, r)[1] - level
    above = heights >= 0
    k = jnp.argmax(above)  # first grid point at or above the level
    found = jnp.any(above)
    lo, hi = xs[jnp.maximum(k - 1, 0)], xs[k]

    def bisect(bracket, _):
        lo, hi = bracket
        mid = (lo + hi) / 2
        up = centre(mid, a, b, r)[1] >= level
        return (jnp.where(up, lo, mid), jnp.where(up, mid, hi)), None

    (lo, hi), _ = jax.lax.scan(bisect, (lo, hi), None, length=60)
    return jnp.where(found, (lo + hi) / 2, jnp.nan)


def reference(a, b, r, g, xi0, speed, nodes=96):
    """Period and the centre's extreme x by quadrature (Gauss-Chebyshev).

    Between the turning contact points xi_l < xi_r, T = 2 * integral of
    |dC/dxi| / v(xi) dxi with v = sqrt(E0/M - g Z(xi)); the 1/sqrt endpoint
    singularities are absorbed by xi = c + h cos(phi), which makes the
    integrand smooth and the rule converge exponentially.
    """
    level = centre(xi0, a, b, r)[1] + speed**2 / g  # E0/(M g): where the speed vanishes
    left = _turning_point(level, xi0, -1.0, a, b, r)
    right = _turning_point(level, xi0, 1.0, a, b, r)
    mid, half = (left + right) / 2, (right - left) / 2
    phi = (jnp.arange(nodes) + 0.5) * jnp.pi / nodes
    xi = mid + half * jnp.cos(phi)

    def arc_speed(x):
        dx, dz = jax.jvp(lambda s: centre(s, a, b, r), (x,), (jnp.ones_like(x),))[1]
        return jnp.sqrt(dx**2 + dz**2)

    v2 = g * (level - centre(xi, a, b, r)[1])
    # dxi = half sin(phi) dphi; v ~ sqrt(distance to the ends) cancels sin(phi).
    integrand = jax.vmap(arc_speed)(xi) * half * jnp.sin(phi) / jnp.sqrt(jnp.maximum(v2, 0.0))
    period = 2 * jnp.sum(integrand) * jnp.pi / nodes
    return period, centre(left, a, b, r)[0], centre(right, a, b, r)[0]


def admissible(a, b, r, g, xi0, speed):
    """numpy check, vectorised over points: the motion is periodic within |x| < 4
    and the hoop fits the track (curvature < 1/r) along all of it."""
    a, b, r, g, xi0, speed = (np.ravel(v).astype(float) for v in
                              np.broadcast_arrays(*(np.asarray(v, float) for v in (a, b, r, g, xi0, speed))))
    xs = np.linspace(-4.0, 4.0, 8001)
    ok = np.ones(a.size, bool)
    for k in range(a.size):
        heights = p(xs, a[k], b[k]) + r[k] / np.sqrt(1 + dp(xs, a[k], b[k]) ** 2)
        start_height = p(xi0[k], a[k], b[k]) + r[k] / np.sqrt(1 + dp(xi0[k], a[k], b[k]) ** 2)
        blocked = np.flatnonzero(heights > start_height + speed[k] ** 2 / g[k])
        s = np.argmin(np.abs(xs - xi0[k]))
        lo, hi = blocked[blocked < s], blocked[blocked > s]
        if not lo.size or not hi.size:
            ok[k] = False  # the hoop runs off to infinity: not periodic
            continue
        kappa = curvature(xs[lo[-1]:hi[0] + 1], a[k], b[k])
        ok[k] = bool(np.all(kappa * r[k] < 1.0))
    return ok

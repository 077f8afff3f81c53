"""The track z = p(x) and the reference motion by 1-D quadrature.

Seed's profile: p(x) = x^4 + a x^3 - b x^2 - a x - (1 - b). A rolling hoop
(J = M r^2) has kinetic energy M v^2, so M v^2 + M g z = E0: its speed depends
only on the height of its centre, which moves on the offset curve at distance
r above the track. Period and turning points are then 1-D integrals along that
curve, independent of any time stepping: every cube carries this reference.
"""

import math

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


# The track's samples where admissible() looks for the motion (|x| < 4).
TRACK = np.linspace(-4.0, 4.0, 8001)
# Points checked at once (a chunk's arrays: 64 points x at most 8001 samples x 8
# bytes, 4 MiB each): a grid of any size is checked in bounded memory.
CHUNK_POINTS = 64
# Samples on either side of the start where the motion's bounds are first looked
# for, then twice as far for the points whose bounds are not there. The hoop's
# turning points lie within 1.1 of its start on the tracks around the study's
# (a in [-0.5, 0.5], b in [-0.5, 1]: 90% within 0.98), so most points' heights
# are computed on 3,001 samples, not 8,001. 200 x 200 of those tracks, 2 cores:
# 2.3 s; on every sample 10 s; one point at a time (before) 49 s.
FIRST_REACH = 1500
# Where d2p * r is at most this, the hoop fits for certain: the curvature
# d2p / (1 + dp^2)^1.5 is at most d2p in size (the denominator is 1 or more, to
# within a few roundings of the power), so its product with r stays near 0.5 at
# most, below 1. Only the samples above it have their curvature computed.
_SURELY_FITS = 0.5


def admissible(a, b, r, g, xi0, speed):
    """numpy check, vectorised over points: the motion is periodic within |x| < 4
    and the hoop fits the track (curvature < 1/r) along all of it.

    Points are checked CHUNK_POINTS at a time, each chunk's track samples in one
    array. Every number is the one a check of one point at a time computes, bit
    for bit: the same numpy operations on the same values (an array's power,
    which is not a scalar's, on arrays; each point's energy level in scalars, as
    a point alone gets it): the same points are refused."""
    a, b, r, g, xi0, speed = (np.ravel(v).astype(float) for v in
                              np.broadcast_arrays(*(np.asarray(v, float) for v in (a, b, r, g, xi0, speed))))
    ok = np.empty(a.size, bool)
    for first in range(0, a.size, CHUNK_POINTS):
        chunk = slice(first, first + CHUNK_POINTS)
        ok[chunk] = _admissible_chunk(a[chunk], b[chunk], r[chunk], g[chunk], xi0[chunk], speed[chunk])
    return ok


def _admissible_chunk(a, b, r, g, xi0, speed):
    """admissible() on a few points: the track samples the centre cannot reach
    (blocked) nearest the start on either side bound the motion, and must
    exist (else the hoop runs off: not periodic); between them the curvature
    must stay below 1/r."""
    level = _energy_levels(a, b, r, g, xi0, speed)
    start = _nearest_samples(xi0)
    left, right = _motion_bounds(a, b, r, level, start)
    periodic = (left >= 0) & (right < TRACK.size)
    return periodic & _fits_between(a, b, r, left, right, periodic)


def _height(x, a, b, r, sqrt=np.sqrt):
    """Height of the hoop's centre when it touches the track at x (numpy arrays;
    floats with sqrt=math.sqrt, the same IEEE square root 15 times faster on one)."""
    return p(x, a, b) + r / sqrt(1 + dp(x, a, b) ** 2)


def _nearest_samples(x):
    """Per point, the sample of TRACK nearest x, the first of two as near:
    np.argmin(np.abs(TRACK - x)), looked for only around where x sorts in
    TRACK (the distances to the samples further off are larger by a sample's
    spacing, far above their rounding)."""
    around = np.clip(np.searchsorted(TRACK, x)[:, None] + np.arange(-2, 2), 0, TRACK.size - 1)
    return around[np.arange(x.size), np.argmin(np.abs(TRACK[around] - x[:, None]), axis=1)]


def _energy_levels(a, b, r, g, xi0, speed):
    """Per point, the height where the hoop's speed vanishes: its start height
    plus v^2 / g. Computed a point at a time in scalars (numpy's power of an
    array differs from a scalar's in the last bit: the level must be the one a
    point alone gets)."""
    return np.array([_height(x, a_, b_, r_, math.sqrt) + v**2 / g_ for a_, b_, r_, g_, x, v in
                     zip(*(c.tolist() for c in (a, b, r, g, xi0, speed)), strict=True)], float)


def _motion_bounds(a, b, r, level, start):
    """Per point, the last blocked sample before `start` and the first after it
    (-1 and TRACK.size where there is none): looked for on the samples within
    FIRST_REACH of the chunk's starts, then twice as far for the points not
    settled, and so on."""
    left, right = np.full(a.size, -1), np.full(a.size, TRACK.size)
    todo, reach = np.arange(a.size), FIRST_REACH
    while todo.size:
        s = start[todo]
        window = _samples(s.min() - reach, s.max() + reach)
        column = (slice(None), None)
        blocked = _height(TRACK[window][None, :], a[todo][column], b[todo][column], r[todo][column]) > \
            level[todo][column]
        sample = np.arange(window.start, window.stop)
        before, after = blocked & (sample < s[column]), blocked & (sample > s[column])
        found_left, found_right = before.any(axis=1), after.any(axis=1)
        left[todo] = np.where(found_left, window.stop - 1 - np.argmax(before[:, ::-1], axis=1), -1)
        right[todo] = np.where(found_right, window.start + np.argmax(after, axis=1), TRACK.size)
        settled = (found_left | (window.start == 0)) & (found_right | (window.stop == TRACK.size))
        todo, reach = todo[~settled], 2 * reach
    return left, right


def _samples(first: int, last: int) -> slice:
    """The samples of TRACK from `first` to `last`, within the track."""
    return slice(max(int(first), 0), min(int(last), TRACK.size - 1) + 1)


def _fits_between(a, b, r, left, right, periodic):
    """Per point, whether the curvature times r stays below 1 on the samples
    from `left` to `right` (True where not `periodic`: nothing to check)."""
    fits = np.ones(a.size, bool)
    rows = np.flatnonzero(periodic)
    if not rows.size:
        return fits
    window = _samples(left[rows].min(), right[rows].max())
    column = (slice(None), None)
    sample = np.arange(window.start, window.stop)
    between = (sample >= left[rows][column]) & (sample <= right[rows][column])
    # The curvature itself only where the hoop might not fit.
    row, at = np.nonzero(between & ~(d2p(TRACK[window][None, :], a[rows][column], b[rows][column]) *
                                     r[rows][column] <= _SURELY_FITS))
    point = rows[row]
    too_sharp = ~(curvature(TRACK[window][at], a[point], b[point]) * r[point] < 1.0)
    fits[point[too_sharp]] = False
    return fits

"""Event location: the rules every solver shares.

A transition fires when its condition changes sign over an accepted step, in
its declared direction (diffrax's rule, `crossed`). Its time is then found by
Newton iteration on re-steps of the same solver (each solver drives the
iteration on its own layout), from a first guess by the cubic through the
condition's values and slopes at the step's ends (`hermite_root`), by
safeguarded Newton updates (`newton_update`), and stops at rounding level
(`time_tolerance`).

A root at the start of a segment does not count (as in ode45 and DiffEqGPU): a
condition that starts at zero, or within rounding of it (an event state
lands just past its crossing), takes the sign it moves to (`start_value`). So a
ball reset to the ground going up finds its next landing, however long the
step that spans the flight.
"""

import jax.numpy as jnp

# A condition within this many time tolerances (times its slope) of zero at a
# segment's start is at a root there: a located crossing lies within a few
# tolerances of its time, and HybridSystem.solve accepts up to 1e3 of them.
_START_ROOT_TOLERANCES = 4096


def crossed(before, after, direction):
    """diffrax's rule for a sign change in the given direction (None: either)."""
    old, new = jnp.sign(before), jnp.sign(after)
    if direction is None:
        return old != new
    return (old <= 0) & (new > 0) if direction else (old > 0) & (new <= 0)


def time_tolerance(t0, t1):
    """Rounding level of a time in [t0, t1]: where locating a crossing stops."""
    return 4 * jnp.finfo(jnp.result_type(t0)).eps * jnp.maximum(jnp.abs(t0), jnp.abs(t1))


def start_value(value, slope, t):
    """A condition's value at a segment's start as the crossing test sees it.

    At a root (zero, or within rounding of zero for its slope) it is replaced by
    a value of the sign it moves to, so the root at the start is not a
    crossing and the next one, in the declared direction, is found. A
    condition at rest at zero keeps its value.
    """
    tiny = jnp.finfo(jnp.result_type(value)).tiny
    band = _START_ROOT_TOLERANCES * jnp.abs(slope) * jnp.maximum(time_tolerance(t, t), tiny)
    at_root = (value == 0) | (jnp.abs(value) <= band)
    return jnp.where(at_root & (slope != 0), jnp.sign(slope) * jnp.maximum(jnp.abs(value), tiny), value)


def newton_update(dt, value, slope, past, lo, hi, tol, finite):
    """One safeguarded Newton update of a crossing's time, from a re-step to the
    offset `dt` (any origin) where the condition has `value` and `slope` along the
    flow, and is `past` the crossing or short of it.

    The crossing lies in [lo, hi] (lo short of it, hi past it), narrowed by this
    re-step. A condition need not be monotone over a step (a ball rising then
    falling through a plane), so an update that leaves the bracket bisects it
    instead. An update aims `tol` past the crossing: an iterate that lands on the
    root itself is as likely short of it as past it (rounding), and one short of
    it needs more re-steps (measured on the rolling ball: half of all crossings
    took a third one). Converged: the crossing is within 2 tol of `dt`.
    Returns the new bracket, whether converged, and the next iterate.
    """
    lo = jnp.where(past, lo, dt)
    hi = jnp.where(past, dt, hi)
    raw = dt - value / jnp.where(slope != 0, slope, 1.0)
    converged = (finite & (jnp.abs(raw - dt) <= 2 * tol)) | (hi - lo <= tol)
    newton = jnp.where((raw > lo) & (raw < hi) & finite, jnp.minimum(raw + tol, hi), 0.5 * (lo + hi))
    return lo, hi, converged, newton


def _cubic(theta, a, u0, b, u1):
    """The cubic Hermite interpolant on [0, 1] and its slope at theta."""
    t2, t3 = theta * theta, theta * theta * theta
    value = (2 * t3 - 3 * t2 + 1) * a + (t3 - 2 * t2 + theta) * u0 + (3 * t2 - 2 * t3) * b + (t3 - t2) * u1
    slope = (6 * t2 - 6 * theta) * (a - b) + (3 * t2 - 4 * theta + 1) * u0 + (3 * t2 - 2 * theta) * u1
    return value, slope


def hermite_root(a, da, b, db, span, direction=None, samples=4, bisections=3, iterations=3):
    """The first crossing in [0, span], in `direction`, of the cubic through (0, a)
    and (span, b) with slopes da and db there.

    The cubic is sampled at `samples` points; the first sample interval whose
    ends cross (in the direction) is narrowed by bisection on the cubic and
    refined by Newton steps kept inside it. Sampling skips a root at the start that
    moves the wrong way (a ball reset to the ground going up: the cubic of its
    next flight has roots at both ends). Its error is O(span^4) against the
    secant's O(span^2); only a starting guess: the located crossing does not
    depend on it beyond rounding (the search is bracketed by re-steps). Each
    evaluation of the cubic is paid for every lane at every crossing: 4 samples
    and 3 bisections measured ~5% of the rolling ball's time against a plain
    secant start, 8 and 12 twice that.
    """
    u0, u1 = da * span, db * span  # slopes in the step's unit time
    lo, hi = jnp.zeros_like(span), jnp.ones_like(span)
    previous = a
    found = jnp.zeros(jnp.shape(span), bool)
    for k in range(1, samples + 1):
        theta = jnp.asarray(k / samples, span.dtype)
        value, _ = _cubic(theta, a, u0, b, u1)
        value = b if k == samples else value
        first = crossed(previous, value, direction) & ~found
        lo = jnp.where(first, (k - 1) / samples, lo)
        hi = jnp.where(first, theta, hi)
        found = found | first
        previous = value
    # The first point of the interval past the crossing, by bisection on the
    # cubic (a secant or Newton step from the interval's start could fall onto
    # a root at the start that moves the wrong way), then Newton steps kept in
    # the narrowed interval.
    for _ in range(bisections):
        mid = 0.5 * (lo + hi)
        value, _ = _cubic(mid, a, u0, b, u1)
        past = crossed(a, value, direction)
        lo, hi = jnp.where(past, lo, mid), jnp.where(past, mid, hi)
    theta = hi
    for _ in range(iterations):
        value, slope = _cubic(theta, a, u0, b, u1)
        step = value / jnp.where(slope != 0, slope, 1.0)
        theta = jnp.where(jnp.isfinite(step), jnp.clip(theta - step, lo, hi), theta)
    return span * theta

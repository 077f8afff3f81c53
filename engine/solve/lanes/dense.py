"""A step's dense output on lane-last arrays: the state at a time inside an
accepted step, from the step's start, end and stages, as diffrax's
interpolation of the same step (what SaveAt(ts) reads for the vmapped solver).

Tsit5 and Dopri5 are written out elementwise over the lanes (diffrax's
polynomials: a quartic in theta = (t - t0) / (t1 - t0) whose coefficients are
made once a step, each sample then Horner's rule; the stages added in order,
so a lane's sample rounds alike on whichever lane and at whichever width it
runs). Any other solver's interpolation is diffrax's own, vmapped over the
lanes.
"""

import functools
import operator

import jax.numpy as jnp
import numpy as np

from engine.solve.lanes.rows import _per_lane


def _theta(t0, t1, t):
    """(t - t0) / (t1 - t0), 0 on a step of length zero (diffrax's linear_rescale)."""
    same = t0 == t1
    return jnp.where(same, 0, t - t0) / jnp.where(same, 1, t1 - t0)


def _tsit5_weights(t):
    """diffrax's _Tsit5Interpolation.evaluate: the weights of the seven h k's."""
    return [
        -1.0530884977290216 * t * (t - 1.3299890189751412) * (t**2 - 1.4364028541716351 * t + 0.7139816917074209),
        0.1017 * t**2 * (t**2 - 2.1966568338249754 * t + 1.2949852507374631),
        2.490627285651252793 * t**2 * (t**2 - 2.38535645472061657 * t + 1.57803468208092486),
        -16.54810288924490272 * (t - 1.21712927295533244) * (t - 0.61620406037800089) * t**2,
        47.37952196281928122 * (t - 1.203071208372362603) * (t - 0.658047292653547382) * t**2,
        -34.87065786149660974 * (t - 1.2) * (t - 0.666666666666666667) * t**2,
        2.5 * (t - 1) * (t - 0.6) * t**2,
    ]


@functools.cache
def _tsit5_powers() -> np.ndarray:
    """The weights' polynomials (_tsit5_weights) by powers of theta:
    (stages, powers 1-4); they vanish at theta = 0."""
    points = np.linspace(0.0, 1.0, 5)
    weights = np.array(_tsit5_weights(points))  # (stages, points)
    vandermonde = np.vander(points, 5, increasing=True)
    return np.linalg.solve(vandermonde, weights.T).T[:, 1:]


def _tsit5_prepare(t0, t1, y0, y1, hk):
    """The step's quartic in theta, y0 + sum_d C_d theta^d: its coefficients
    once a step (each sample then costs Horner's rule), from diffrax's weights
    (the same polynomial; its roundings differ by a few units)."""
    del y1
    powers = _tsit5_powers()
    coefficients = []
    for d in range(powers.shape[1]):
        terms = [float(w) * k for w, k in zip(powers[:, d], hk, strict=True) if abs(w) > 1e-14]
        coefficients.append(functools.reduce(operator.add, terms) if terms else jnp.zeros_like(y0))
    return (t0, t1, [y0, *coefficients])


def _dopri5_prepare(t0, t1, y0, y1, hk):
    """diffrax's FourthOrderPolynomialInterpolation with Dopri5's midpoint
    weights: the quartic through y0, y1, the slopes at both ends and the
    midpoint, its coefficients (jnp.polyval's, lowest last)."""
    import diffrax

    c_mid = diffrax.Dopri5.interpolation_cls.c_mid
    mid = 0
    for c, k in zip(c_mid, hk, strict=True):
        if c != 0:
            mid = mid + float(c) * k
    y_mid = y0 + mid
    f0, f1 = hk[0], hk[-1]
    a = 2 * (f1 - f0) - 8 * (y1 + y0) + 16 * y_mid
    b = 5 * f0 - 3 * f1 + 18 * y0 + 14 * y1 - 32 * y_mid
    c = f1 - 4 * f0 - 11 * y0 - 5 * y1 + 16 * y_mid
    return (t0, t1, [y0, f0, c, b, a])


def _horner(prepared, t):
    """A prepared polynomial (lowest power first) at the times t, by Horner's rule."""
    t0, t1, coefficients = prepared
    theta = _theta(t0, t1, t)
    value = coefficients[-1]
    for coefficient in reversed(coefficients[:-1]):
        value = value * theta + coefficient
    return value


def _diffrax(solver: str):
    import diffrax

    cls = getattr(diffrax, solver).interpolation_cls

    def one(t0, t1, y0, y1, hk, t):
        return cls(t0=t0, t1=t1, y0=y0, y1=y1, k=hk).evaluate(t)

    def evaluate(prepared, t):
        return _per_lane(one)(*prepared, t)

    return (lambda t0, t1, y0, y1, hk: (t0, t1, y0, y1, jnp.stack(hk))), evaluate


# The solvers whose dense output is written out here, elementwise over lanes
# (any array of lanes: the fused kernel's lane vectors too); another solver's is
# diffrax's own, vmapped.
ELEMENTWISE = {"Tsit5": (_tsit5_prepare, _horner), "Dopri5": (_dopri5_prepare, _horner)}


def first_sample(times) -> int:
    """The first sample a point can write: sample times before every point's
    start (t = 0) are never written (NaN)."""
    return sum(1 for t in times if t < 0)


def sample_due(taken, k, last: int, at, t1, ends):
    """Whether sample k (its time `at`; `last` the last sample's index) is
    written after a step that ends at t1, where the step was `taken`: a time
    inside the step, or t1 itself where the point `ends` there (otherwise the
    next step's first, the state after a reset). The lanes' and the fused
    kernel's rule."""
    return taken & (k <= last) & ((at < t1) | (ends & (at == t1)))


def interpolation(solver: str):
    """(prepare, evaluate): prepare(t0, t1, y0, y1, stages) makes the dense
    output of the lanes' steps [t0, t1] from y0 to y1 with these stages (the
    vector field at each, a (components, lanes) array each), once a step;
    evaluate(prepared, t) the states at the times t (lanes,) inside them."""
    prepare, evaluate = ELEMENTWISE.get(solver) or _diffrax(solver)

    def prepare_steps(t0, t1, y0, y1, stages):
        h = t1 - t0
        return prepare(t0, t1, y0, y1, [h * k for k in stages])

    return prepare_steps, evaluate

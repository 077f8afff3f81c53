"""Reference labelling of the bicycle's modes by dense continuation in speed.

The study labels eigenvalues by the collisions of their branches
(studies/bicycle/_roots.py). This is the direct way it replaced, kept to test
it against: from v = 0, where the roots are labelled (weave: the two positive
real roots; capsize and caster: the negative ones, capsize the slower), 128
steps to v, each an Aberth-Ehrlich solve iterated to convergence from the
previous step's roots and matched to them.
"""

import itertools

import jax
import jax.numpy as jnp

from studies.bicycle._canonical import coefficients_from
from studies.bicycle._roots import _canonical_pair

MODES = ("weave", "weave_conjugate", "capsize", "caster")
CONTINUATION_STEPS = 128  # from v = 0 to v; roots move < 3% of their separation per step
COLD_ITERATIONS = 60  # at most, from the enclosing circle; a quartic needs ~15-30
WARM_NUDGE = 1e-2  # relative offset of a continuation step's starting values
_PERMUTATIONS = jnp.array(list(itertools.permutations(range(4))))


def _horner(coeffs, z):
    """p(z) and p'(z) for ascending real coefficients."""
    p, dp = jnp.zeros_like(z) + coeffs[-1], jnp.zeros_like(z)
    for a in coeffs[-2::-1]:
        dp = dp * z + p
        p = p * z + a
    return p, dp


def aberth(coeffs, z, iterations):
    """Refine all four roots at once; the mutual repulsion term keeps iterates
    from converging onto the same root (which plain Newton would allow). Stops
    once every update is at rounding level, after at most `iterations` (from the
    enclosing circle the benchmark design needs ~20 of the 60 allowed: under
    vmap a lane that has converged waits, unchanged, for the others)."""
    coeffs = coeffs / coeffs[-1]
    off_diagonal = ~jnp.eye(4, dtype=bool)
    tol = 8 * jnp.finfo(coeffs.real.dtype).eps

    def step(carry):
        z, k, _ = carry
        p, dp = _horner(coeffs, z)
        ratio = p / dp
        diff = jnp.where(off_diagonal, z[:, None] - z[None, :], 1.0)
        repulsion = jnp.sum(jnp.where(off_diagonal, 1.0 / diff, 0.0), axis=1)
        update = ratio / (1.0 - ratio * repulsion)
        # At an exact root p = 0: keep it (also avoids 0/0 where dp vanishes).
        update = jnp.where((p != 0) & jnp.isfinite(update), update, 0.0)
        return z - update, k + 1, jnp.all(jnp.abs(update) <= tol * (1.0 + jnp.abs(z)))

    def going(carry):
        _, k, converged = carry
        return ~converged & (k < iterations)

    z, _, _ = jax.lax.while_loop(going, step, (z, 0, jnp.asarray(False)))
    return z


def cold_roots(coeffs):
    """All four roots from scratch: start on a circle enclosing them (Cauchy bound)."""
    bound = 1.0 + jnp.max(jnp.abs(coeffs[:-1] / coeffs[-1]))
    angles = 2 * jnp.pi * jnp.arange(4) / 4 + 0.4  # off the real axis: real coefficients
    return aberth(coeffs, bound * jnp.exp(1j * angles), COLD_ITERATIONS)


def _match(previous, current):
    """Reorder `current` to the permutation closest to `previous`."""
    cost = jnp.sum(jnp.abs(current[_PERMUTATIONS] - previous[None, :]), axis=1)
    return current[_PERMUTATIONS[jnp.argmin(cost)]]


def tracked_eigenvalues(matrices, g, v):
    """Eigenvalues at speed v in MODES order, continued along [0, v]."""
    start = cold_roots(coefficients_from(matrices, g, jnp.zeros_like(v)).astype(complex))
    labelled = start[jnp.argsort(-start.real)]  # weave +, weave +, capsize -, caster -

    def step(z, k):
        # Each step starts from the previous step's roots, nudged off the real axis
        # (real iterates of a real polynomial stay real, and a real pair must be
        # able to become complex), and only *matches* the converged roots to the
        # previous ones: an iterate flung onto another branch near the double root
        # (where p' -> 0) changes which iterate holds a root, not the labels.
        speed = v * k / CONTINUATION_STEPS
        start = z + WARM_NUDGE * (1.0 + jnp.abs(z)) * jnp.exp(1j * (2 * jnp.pi * jnp.arange(4) / 4 + 0.4))
        roots = aberth(coefficients_from(matrices, g, speed).astype(complex), start, COLD_ITERATIONS)
        return _match(z, roots), None

    z, _ = jax.lax.scan(step, labelled, jnp.arange(1, CONTINUATION_STEPS + 1))
    return _canonical_pair(z)

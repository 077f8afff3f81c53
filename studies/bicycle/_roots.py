"""Eigenvalues as roots of the characteristic quartic: a path that runs anywhere.

JAX's non-symmetric `eig` needs LAPACK (CPU) or cusolver >= 11.7.1 / MAGMA on a
GPU. The roots of det(M s^2 + v C1 s + g K0 + v^2 K2) are the same eigenvalues
and need only elementwise arithmetic: the Aberth-Ehrlich iteration below runs
unchanged on any device and vmaps over speeds and designs.

Modes are tracked by continuation in speed from v = 0, where they are labelled
(weave: the two positive real roots that merge at the double-root speed;
capsize and caster: the negative ones, capsize the slower), so a label follows
its eigenvalue branch instead of a per-speed sort order.
"""

import itertools

import jax
import jax.numpy as jnp

from ._canonical import coefficients_from

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


def _canonical_pair(z):
    """Weave entries: for a conjugate pair, positive imaginary part first and
    exactly conjugate; for two real roots, the larger first, imaginary rounding
    dropped. The weave labels follow the two branches that are positive and real
    at v = 0; in the benchmark (and designs like it) they merge into the weave
    pair. In a design where one of them pairs with another branch instead, the
    entries stay as tracked: each is a root, never an average of two."""
    a, b = z[0], z[1]
    scale = 1.0 + jnp.abs(a) + jnp.abs(b)
    real_pair = (jnp.abs(a.imag) <= 1e-9 * scale) & (jnp.abs(b.imag) <= 1e-9 * scale)
    conjugate_pair = ~real_pair & (jnp.abs(a - jnp.conj(b)) <= 1e-6 * scale)
    swap = jnp.where(conjugate_pair, b.imag > a.imag, real_pair & (b.real > a.real))
    a, b = jnp.where(swap, b, a), jnp.where(swap, a, b)
    mean = (a + jnp.conj(b)) / 2
    a = jnp.select([conjugate_pair, real_pair], [mean, a.real + 0j], a)
    b = jnp.select([conjugate_pair, real_pair], [jnp.conj(mean), b.real + 0j], b)
    # Capsize and caster: as tracked, less the imaginary rounding residue a
    # converged real root keeps (~1e-55).
    others = z[2:]
    eps = jnp.finfo(others.real.dtype).eps
    others = jnp.where(jnp.abs(others.imag) <= 8 * eps * jnp.abs(others), others.real + 0j, others)
    return jnp.stack([a, b, others[0], others[1]])

"""Eigenvalues at a speed, each labelled with the mode whose branch it lies on.

The roots of det(M s^2 + v C1 s + g K0 + v^2 K2) are the eigenvalues of A(v);
they come from the closed-form quartic (`_quartic`), elementwise arithmetic
that runs on any device (JAX's non-symmetric `eig` needs LAPACK or a recent
cusolver).

Labels follow the eigenvalue branches from v = 0, where they are assigned
(four real roots: weave, weave_conjugate, capsize, caster in descending
order, as in Meijaard et al. 2007). Branches of a real quartic can only trade
places where two roots collide, and collisions are zeros of the discriminant,
a polynomial of degree six in v^2. Between collisions real roots keep their
order on the real line and a conjugate pair stays a pair, so the labels are a
permutation of the roots' canonical order (real roots descending, then pairs
by real part, +imag first), and each collision changes it in one of four
ways: two neighbouring real roots merge into a pair, a pair lands between
real roots and splits, two real roots merge next to an existing pair, or one
of two pairs lands. Which one, and where, is read off the roots at the
collision. So a point needs the discriminant's sign on a grid over (0, |v|]
(a few flops per node), one quartic per collision below |v| (most designs
have one or none) and the quartic at v: no continuation in small steps, and
the result depends on the point's own parameters alone.

Limitations, as of any labelling by branches: where two roots collide the
labels of the two are a convention; two collisions closer together than the
grid's spacing, |v| / EVENT_GRID, are not seen (a merge undone by a split of
the same two roots changes no label); and with no real root at all (two
pairs) the pairs are told apart by their real parts.
"""

import jax
import jax.numpy as jnp

from ._polynomials import polyval, speed_polynomials
from ._quartic import OTHERS, closed_form_roots, closest_pair, first_true, quartic_roots

MODES = ("weave", "weave_conjugate", "capsize", "caster")
EVENT_GRID = 64  # nodes over (0, |v|] bracketing the discriminant's sign changes
MAX_EVENTS = 6  # the discriminant is a sextic in v^2: at most six collisions
BISECTIONS = 24  # a bracket of |v|/64 narrowed ~1.7e7 times: the collision's roots are then well apart

# How a collision permutes the labels, as new_slots = slots[perm]; slots[i] is
# the label at position i of the canonical order (real roots descending, then
# pairs). j: how many of the other real roots lie above the colliding pair.
_MERGE_OF_FOUR_REAL = jnp.array([[2, 3, 0, 1], [0, 3, 1, 2], [0, 1, 2, 3]])  # by j
_SPLIT_INTO_FOUR_REAL = jnp.array([[2, 3, 0, 1], [0, 2, 3, 1], [0, 1, 2, 3]])  # by j
_KEEP, _SWAP_PAIRS = jnp.array([0, 1, 2, 3]), jnp.array([2, 3, 0, 1])
# Labels at v = 0+ by the number of real roots there. Two real and a pair (on the
# imaginary axis at v = 0): in descending real part weave, the pair, caster.
# int32 whether or not float64 (and with it int64) is on when the module is imported.
_INITIAL = {n: jnp.array(order, jnp.int32) for n, order in ((4, [0, 1, 2, 3]), (2, [0, 3, 1, 2]), (0, [0, 1, 2, 3]))}


def tracked_eigenvalues(matrices, g, v):
    """Eigenvalues at speed v in MODES order."""
    poly = speed_polynomials(matrices, g)
    speed = jnp.abs(v)  # (v, s) -> (-v, -s) is a symmetry: solve at |v|, mirror below
    slots, count, previous_slots, previous_count = _labels(poly, speed)
    roots, real = quartic_roots(poly.coefficients(speed))
    real_count = 2 * jnp.sum(real)
    # Just beside a collision the roots may show the structure of its other side.
    slots = jnp.where((real_count != count) & (real_count == previous_count), previous_slots, slots)
    # z[label] = canonical[position of label in slots]
    canonical = _canonical_order(roots, real)
    z = jnp.sum(jnp.where(slots[None, :] == jnp.arange(4)[:, None], canonical[None, :], 0), axis=1)
    # At -v the branch that starts at s0 is the negative of the one that starts at -s0,
    # and v = 0's descending order reverses.
    z = jnp.where(v < 0, -z[::-1], z)
    return _canonical_pair(z)


def _real_roots_at_rest(poly):
    """How many roots are real at v = 0, where the quartic is a quadratic in s^2."""
    a, b, c = poly.k40, poly.k20, poly.k00
    disc = b * b - 4 * a * c
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    nonnegative = ((-b + root) >= 0).astype(int) + ((-b - root) >= 0).astype(int)  # a = det M > 0
    return jnp.where(disc < 0, 0, 2 * nonnegative).astype(jnp.int32)


def _labels(poly, speed):
    """The label permutation at `speed` and its number of real roots, and both before
    the last collision below it."""
    disc = poly.discriminant()
    # Each cell's ends evaluated as two arrays: slicing one array of nodes into
    # neighbours (x[1:] vs x[:-1]) compiles to a slow loop on a CPU.
    u_lo = (speed * jnp.arange(EVENT_GRID) / EVENT_GRID) ** 2
    u_hi = (speed * jnp.arange(1, EVENT_GRID + 1) / EVENT_GRID) ** 2
    positive_lo = polyval(disc, u_lo) > 0
    change = positive_lo != (polyval(disc, u_hi) > 0)
    events = jnp.minimum(jnp.sum(change), MAX_EVENTS)

    count0 = _real_roots_at_rest(poly)
    slots0 = jnp.select([count0 == 4, count0 == 2], [_INITIAL[4], _INITIAL[2]], _INITIAL[0])

    def collide(state):
        i, pending, slots, count, _, _ = state
        # The next sign change, picked by a mask rather than an index: elementwise
        # selects and sums fuse into one loop; a gather per point does not.
        here = first_true(pending)
        lo, hi = jnp.sum(jnp.where(here, u_lo, 0.0)), jnp.sum(jnp.where(here, u_hi, 0.0))
        lo_positive = jnp.any(here & positive_lo)
        for _ in range(BISECTIONS):  # unrolled: a loop on the device costs more than its body
            mid = (lo + hi) / 2
            same = (polyval(disc, mid) > 0) == lo_positive
            lo, hi = jnp.where(same, mid, lo), jnp.where(same, hi, mid)
        new_slots, new_count = _collision(poly, jnp.sqrt((lo + hi) / 2), slots, count)
        # The loop's carry keeps its types: sums and selects of int32 give int64 under float64.
        return i + 1, pending & ~here, new_slots.astype(slots.dtype), new_count.astype(count.dtype), slots, count

    # A loop over the collisions that are there (most designs: one or none); a lane
    # with fewer waits unchanged, so its result does not depend on its neighbours.
    state = (0, change, slots0, count0, slots0, count0)
    _, _, slots, count, previous_slots, previous_count = jax.lax.while_loop(
        lambda s: s[0] < events, collide, state)
    return slots, count, previous_slots, previous_count


def _permute(x, perm):
    """x[perm] for 4-vectors, by comparisons (a gather per point is slow on a CPU)."""
    return jnp.sum(jnp.where(perm[:, None] == jnp.arange(4)[None, :], x[None, :], 0), axis=1)


def _collision(poly, speed, slots, count):
    """The labels after the collision at `speed`, from those before it."""
    z, _ = closed_form_roots(poly.coefficients(speed))
    # The colliding pair: the two closest roots; q: the other two.
    closest, double = closest_pair(z)
    q = [jnp.sum(jnp.where(closest, jnp.stack([z[OTHERS[k][m]] for k in range(6)]), 0.0)) for m in (0, 1)]
    q_real = (q[0].imag == 0) & (q[1].imag == 0)  # exact: the closed form makes real roots real
    above = (q[0].real > double).astype(int) + (q[1].real > double).astype(int)
    q_lower = q[0].real < double  # the other pair lies below the collision

    def by_above(table):
        return jnp.select([above == 0, above == 1], [table[0], table[1]], table[2])

    pair_order = jnp.where(q_lower, _KEEP, _SWAP_PAIRS)
    perm = jnp.select(
        [count == 4, count == 0, q_real],
        [by_above(_MERGE_OF_FOUR_REAL), pair_order, by_above(_SPLIT_INTO_FOUR_REAL)],  # 4 real: merge;
        pair_order,  # no real: a pair lands; two real beside a pair: the pair lands, or the two merge
    )
    new_count = jnp.select([count == 4, count == 0, q_real], [2, 2, 4], 0)
    return _permute(slots, perm), new_count


def _canonical_order(z, real):
    """Real roots descending, then conjugate pairs by descending real part, +imag first."""
    one, two = z[:2], z[2:]
    # Four real: sort descending (real parts; the imaginary parts are zero).
    four = _descending(z.real) + 0j
    # Two real: the real factor's roots, larger first, then the pair.
    reals, pair = jnp.where(real[0], one, two), jnp.where(real[0], two, one)
    hi, lo = jnp.maximum(reals[0].real, reals[1].real), jnp.minimum(reals[0].real, reals[1].real)
    two_real = jnp.stack([hi + 0j, lo + 0j, pair[0], pair[1]])
    # No real root: the pair with the larger real part first.
    none_real = jnp.where(one[0].real >= two[0].real, z, jnp.concatenate([two, one]))
    count = jnp.sum(real)
    return jnp.select([count == 2, count == 1], [four, two_real], none_real)


def _descending(x):
    """The four values sorted descending, by a sorting network (no sort call per point)."""
    x = list(x)
    for i, j in ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2)):
        x[i], x[j] = jnp.maximum(x[i], x[j]), jnp.minimum(x[i], x[j])
    return jnp.stack(x)


def _canonical_pair(z):
    """Weave entries: for a conjugate pair, positive imaginary part first; for two
    real roots, the larger first. The weave labels follow the two branches that
    are positive and real at v = 0; in the benchmark (and designs like it) they
    merge into the weave pair. In a design where one of them pairs with another
    branch instead, the entries stay as tracked. Capsize and caster: if they form
    a conjugate pair, capsize takes +imag (which of two roots that merged takes
    which label is a convention). Exact comparisons: the polished roots are
    exactly real or exact conjugate pairs (`_quartic.polish`)."""
    a, b, c, d = z[0], z[1], z[2], z[3]
    conjugate = (a.imag != 0) & (b == jnp.conj(a))
    both_real = (a.imag == 0) & (b.imag == 0)
    swap = jnp.where(conjugate, b.imag > a.imag, both_real & (b.real > a.real))
    a, b = jnp.where(swap, b, a), jnp.where(swap, a, b)
    swap = (c.imag != 0) & (d == jnp.conj(c)) & (d.imag > c.imag)
    c, d = jnp.where(swap, d, c), jnp.where(swap, c, d)
    return jnp.stack([a, b, c, d])

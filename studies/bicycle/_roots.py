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

A point's four roots, labels and permutations are handled as separate
scalars, and the grid's sign changes as the bits of two 32-bit words, so
that finding the next collision is a few integer operations: vmapped, the
loop over collisions holds no operation over the grid's nodes (each masked
reduction over the 64 nodes had been a kernel of its own, run once per
collision), and the rest is elementwise arithmetic that XLA fuses into few
loops. Measured (CPU time, batches of 4,096, the benchmark bicycle
from 0 to 10 m/s, one collision below most speeds): the labels from 0.41 to
0.19 microseconds a point.
"""

import jax
import jax.numpy as jnp
import numpy as np

from engine.once import computed_once

from ._polynomials import polyval, speed_polynomials
from ._quartic import closest_pair, ferrari, polished_roots

MODES = ("weave", "weave_conjugate", "capsize", "caster")
EVENT_GRID = 64  # nodes over (0, |v|] bracketing the discriminant's sign changes
MAX_EVENTS = 6  # the discriminant is a sextic in v^2: at most six collisions
BISECTIONS = 24  # a bracket of |v|/64 narrowed ~1.7e7 times: the collision's roots are then well apart
_WORD = 32  # the grid's signs and sign changes as bits of two 32-bit words (no 64-bit integers needed)
_BITS = np.uint32(1) << np.arange(_WORD, dtype=np.uint32)

# How a collision permutes the labels, as new_slots[i] = slots[perm[i]]; slots[i]
# is the label at position i of the canonical order (real roots descending, then
# pairs). Four permutations occur (by index: _PERMUTATIONS[case]).
_KEEP, _SWAP_PAIRS, _MERGE_BELOW, _SPLIT_BELOW = 0, 1, 2, 3
_PERMUTATIONS = ((0, 1, 2, 3), (2, 3, 0, 1), (0, 3, 1, 2), (0, 2, 3, 1))
# Labels at v = 0+ by the number of real roots there: four real, or none: in
# descending order; two real and a pair (on the imaginary axis at v = 0): in
# descending real part weave, the pair, caster (the permutation _MERGE_BELOW).


def tracked_eigenvalues(matrices, g, v):
    """Eigenvalues at speed v in MODES order."""
    poly = speed_polynomials(matrices, g)
    speed = jnp.abs(v)  # (v, s) -> (-v, -s) is a symmetry: solve at |v|, mirror below
    slots, count, previous_slots, previous_count = _labels(poly, speed)
    roots, real = polished_roots(poly.coefficients_at(speed))
    real_count = 2 * (real[0].astype(jnp.int32) + real[1].astype(jnp.int32))
    # Just beside a collision the roots may show the structure of its other side.
    use_previous = (real_count != count) & (real_count == previous_count)
    slots = [jnp.where(use_previous, before, after) for before, after in zip(previous_slots, slots, strict=True)]
    canonical = _canonical_order(roots, real)
    z = [_position_of(label, slots, canonical) for label in range(4)]
    # At -v the branch that starts at s0 is the negative of the one that starts at -s0,
    # and v = 0's descending order reverses.
    z = computed_once([jnp.where(v < 0, -z[3 - i], z[i]) for i in range(4)])
    return jnp.stack(_canonical_pair(z))


def _position_of(label, slots, values):
    """values[i] where slots[i] == label (slots is a permutation)."""
    out = values[3]
    for i in (2, 1, 0):
        out = jnp.where(slots[i] == label, values[i], out)
    return out


def _real_roots_at_rest(poly):
    """How many roots are real at v = 0, where the quartic is a quadratic in s^2."""
    a, b, c = poly.k40, poly.k20, poly.k00
    disc = b * b - 4 * a * c
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    nonnegative = ((-b + root) >= 0).astype(jnp.int32) + ((-b - root) >= 0).astype(jnp.int32)  # a = det M > 0
    return jnp.where(disc < 0, 0, 2 * nonnegative).astype(jnp.int32)


def _sign_changes(disc, speed):
    """The cells (k |v|, (k + 1) |v|] / EVENT_GRID, k < EVENT_GRID, across which the
    discriminant changes sign, as the bits k of two words (cells 0-31, 32-63), and
    its sign at u = 0."""
    positive_at_zero = disc[0] > 0
    signs = []  # bit j: the sign at node first + j
    for first in (1, 1 + _WORD):
        nodes = (speed * jnp.arange(first, first + _WORD) / EVENT_GRID) ** 2
        signs.append(jnp.sum(jnp.where(polyval(disc, nodes) > 0, _BITS, np.uint32(0)), dtype=jnp.uint32))
    low, high = signs
    # Cell k's ends are nodes k and k + 1: the signs shifted by one node, against themselves.
    changes_low = low ^ ((low << 1) | positive_at_zero.astype(jnp.uint32))
    changes_high = high ^ ((high << 1) | (low >> (_WORD - 1)))
    return changes_low, changes_high, positive_at_zero


def _labels(poly, speed):
    """The label permutation at `speed` and its number of real roots, and both before
    the last collision below it."""
    disc = poly.discriminant_coefficients()
    changes_low, changes_high, positive_at_zero = _sign_changes(disc, speed)
    found = jax.lax.population_count(changes_low) + jax.lax.population_count(changes_high)
    events = jnp.minimum(found.astype(jnp.int32), MAX_EVENTS)

    count0 = _real_roots_at_rest(poly)
    slots0 = tuple(jnp.where(count0 == 2, _PERMUTATIONS[_MERGE_BELOW][i], i).astype(jnp.int32) for i in range(4))

    def collide(state):
        i, low, high, positive, slots, count, _, _ = state
        # The lowest cell left: the lowest set bit of the two words; then cleared.
        in_low = low != 0
        word = jnp.where(in_low, low, high)
        lowest = word & (~word + np.uint32(1))
        cell = (_WORD - 1) - jax.lax.clz(lowest).astype(jnp.int32) + jnp.where(in_low, 0, _WORD)
        rest = word & (word - np.uint32(1))
        low, high = jnp.where(in_low, rest, low), jnp.where(in_low, high, rest)
        lo, hi = (speed * cell / EVENT_GRID) ** 2, (speed * (cell + 1) / EVENT_GRID) ** 2
        for _ in range(BISECTIONS):  # unrolled: a loop on the device costs more than its body
            mid = (lo + hi) / 2
            same = (polyval(disc, mid) > 0) == positive
            lo, hi = jnp.where(same, mid, lo), jnp.where(same, hi, mid)
        # Computed once (engine.once): the unrolled bisection feeding the quartic at the
        # collision took jax 0.12's XLA:CPU minutes to compile.
        collision, = computed_once((jnp.sqrt((lo + hi) / 2),))
        new_slots, new_count = _collision(poly, collision, slots, count)
        # No sign change between this cell and the next: its lower node has the other sign.
        return i + 1, low, high, ~positive, new_slots, new_count, slots, count

    # A loop over the collisions that are there (most designs: one or none); a lane
    # with fewer waits unchanged, so its result does not depend on its neighbours.
    state = (jnp.int32(0), changes_low, changes_high, positive_at_zero, slots0, count0, slots0, count0)
    _, _, _, _, slots, count, previous_slots, previous_count = jax.lax.while_loop(
        lambda s: s[0] < events, collide, state)
    return slots, count, previous_slots, previous_count


def _permute(slots, case):
    """slots permuted by _PERMUTATIONS[case], by selects."""
    out = []
    for i in range(4):
        value = slots[i]  # _KEEP
        for c in (_SWAP_PAIRS, _MERGE_BELOW, _SPLIT_BELOW):
            value = jnp.where(case == c, slots[_PERMUTATIONS[c][i]], value)
        out.append(value)
    return tuple(out)


def _collision(poly, speed, slots, count):
    """The labels after the collision at `speed`, from those before it."""
    z, _ = ferrari(poly.coefficients_at(speed))
    # The colliding pair: the two closest roots, merging at `double`; q: the other two.
    double, q0, q1 = closest_pair(z)
    q_real = (q0.imag == 0) & (q1.imag == 0)  # exact: the closed form makes real roots real
    above = (q0.real > double).astype(jnp.int32) + (q1.real > double).astype(jnp.int32)
    q_lower = q0.real < double  # the other pair lies below the collision

    # Four real roots merge into two and a pair; two real split from a pair into four:
    # by how many of the other two lie above the collision.
    merge = jnp.where(above == 0, _SWAP_PAIRS, jnp.where(above == 1, _MERGE_BELOW, _KEEP))
    split = jnp.where(above == 0, _SWAP_PAIRS, jnp.where(above == 1, _SPLIT_BELOW, _KEEP))
    # No real root: a pair lands; two real beside a pair: the pair lands, or the two merge.
    pair_order = jnp.where(q_lower, _KEEP, _SWAP_PAIRS)
    case = jnp.where(count == 4, merge, jnp.where(count == 0, pair_order, jnp.where(q_real, split, pair_order)))
    new_count = jnp.where((count == 4) | (count == 0), 2, jnp.where(q_real, 4, 0)).astype(jnp.int32)
    return _permute(slots, case), new_count


def _canonical_order(z, real):
    """Real roots descending, then conjugate pairs by descending real part, +imag first
    (z: the four roots of `ferrari`'s two factors, real: the factors' flags)."""
    # Four real: sorted descending (real parts; the imaginary parts are zero).
    four = [x + 0j for x in _descending([x.real for x in z])]
    # Two real: the real factor's roots, larger first, then the pair.
    first_real = real[0]
    reals = [jnp.where(first_real, z[i], z[2 + i]) for i in (0, 1)]
    pair = [jnp.where(first_real, z[2 + i], z[i]) for i in (0, 1)]
    hi, lo = jnp.maximum(reals[0].real, reals[1].real), jnp.minimum(reals[0].real, reals[1].real)
    two_real = [hi + 0j, lo + 0j, pair[0], pair[1]]
    # No real root: the pair with the larger real part first.
    keep = z[0].real >= z[2].real
    none_real = [jnp.where(keep, z[i], z[(i + 2) % 4]) for i in range(4)]
    count = real[0].astype(jnp.int32) + real[1].astype(jnp.int32)
    return computed_once([jnp.where(count == 2, a, jnp.where(count == 1, b, c))
                        for a, b, c in zip(four, two_real, none_real, strict=True)])


def _descending(x):
    """The four values sorted descending, by a sorting network (no sort call per point)."""
    x = list(x)
    for i, j in ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2)):
        x[i], x[j] = jnp.maximum(x[i], x[j]), jnp.minimum(x[i], x[j])
    return x


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
    # A real root's imaginary part +0, also where mirroring at -v made it -0.
    return tuple(jax.lax.complex(x.real, jnp.where(x.imag == 0, 0.0, x.imag)) for x in (a, b, c, d))

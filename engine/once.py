"""Values computed once per point, whatever XLA's fusion would do with them.

Vmapped, a study's per-point code is elementwise over the batch, and XLA:CPU
fuses an elementwise producer into each of its consumers and recomputes it
there; consumers of consumers multiply the recomputation. Measured: on the
bicycle's chain from a quartic's coefficients through its roots, their order
and their labels, 30 times the work (10 microseconds a point instead of 0.3);
on the rebound map a sine computed six times a point; the engine's range
check of a point's parameters once in every fusion that reads a parameter. An
optimization barrier does not stop it (XLA:CPU removes barriers before
fusing). A reduction does: it is the root of its own fusion, and its consumers
read its output buffer. So `computed_once` passes values through a reduction
over a stacked axis of two, the value and zero, by bitwise or: floats as their
bits, so every value comes back bitwise (NaN payloads, -0 included).

It also bounds XLA's compile time. An unrolled bisection is a chain of
selects, each step's bracket made from both ends of the step before; where its
result feeds more elementwise arithmetic, jax 0.12's XLA:CPU compile time grew
faster than exponentially with the steps (the bicycle's double-root speed:
5 bisection steps and one Newton step 1.9 s, 6 steps 44 s, its 20 steps and 4
no result in 15 minutes; jax 0.10: 1.4 s). The bisection's result passed
through `computed_once` compiles in 0.6 s on either JAX: end such a chain with it.

Why bitwise or and not a sum with -0 (which also returns floats bitwise):
XLA:CPU hands float sums to a library kernel (YNNPACK), which took 2.6 ns an
element where its own loop takes well under one. Measured on the rebound
regime map (16,384 points a call, one core): 296 us a call with sums, 199 with
bitwise or, the same results.
"""

import jax
import jax.numpy as jnp


def computed_once(values):
    """The values of the sequence `values` (scalars per point, of any dtypes),
    unchanged, as a tuple, each computed once: consumers read them instead of
    recomputing them."""
    values = tuple(jnp.asarray(x) for x in values)
    out = list(values)
    for dtype in {x.dtype for x in values}:
        where = [i for i, x in enumerate(values) if x.dtype == dtype]
        stacked = _as_bits(jnp.stack([values[i] for i in where]))
        zero = jnp.zeros((), stacked.dtype)
        reduced = jax.lax.reduce(jnp.stack([stacked, jnp.broadcast_to(zero, stacked.shape)]), zero,
                                 jax.lax.bitwise_or, (0,))
        reduced = _from_bits(reduced, dtype)
        for k, i in enumerate(where):
            out[i] = reduced[k]
    return tuple(out)


def _as_bits(x):
    """x as integers or booleans (bitwise or's operands): floats as unsigned
    integers of their width, complex numbers as pairs of them (a last axis)."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([x.real, x.imag], axis=-1)
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{x.dtype.itemsize * 8}"))
    return x


def _from_bits(bits, dtype):
    """The inverse of _as_bits, to `dtype`."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = jax.lax.bitcast_convert_type(bits, jnp.finfo(dtype).dtype)
        return jax.lax.complex(parts[..., 0], parts[..., 1])
    if jnp.issubdtype(dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(bits, dtype)
    return bits

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
read its output buffer. So `computed_once` passes values through a sum with
zero over a stacked axis, which returns them bitwise.
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
        stacked = jnp.stack([values[i] for i in where])
        if dtype == jnp.bool_:
            zero, add = False, jax.lax.bitwise_or
        else:
            zero, add = _negative_zero(dtype), jax.lax.add
        # Each value plus zero: a reduction over a stacked axis of two (the values, zeros).
        reduced = jax.lax.reduce(jnp.stack([stacked, jnp.full_like(stacked, zero)]), zero, add, (0,))
        for k, i in enumerate(where):
            out[i] = reduced[k]
    return tuple(out)


def _negative_zero(dtype):
    """-0, the identity of addition for every value (-0 and +0 included), as the
    sums' start and fill: they return their one value bitwise. 0 for integers."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return jnp.asarray(complex(-0.0, -0.0), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(-0.0, dtype)
    return jnp.zeros((), dtype)

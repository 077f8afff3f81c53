"""engine.once.computed_once: values pass through bitwise, and are computed once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.once import computed_once


def test_computed_once_returns_every_value_bitwise():
    """Signed zeros, NaN, infinities, subnormals, complex, integer and boolean
    values of every width pass through unchanged, vmapped as a study uses it and not."""
    nan_payload = np.array([0x7FF8_0000_0000_0123], np.uint64).view(np.float64)[0]
    x = jnp.array([0.0, -0.0, nan_payload, -np.nan, -np.inf, 1e-310])
    z = jnp.array([complex(-0.0, 0.0), complex(0.0, -0.0), 1 + 2j, complex(np.nan, 1), 3 - 0j, -1j])
    b = jnp.array([True, False, True, False, True, False])
    i = jnp.array([1, -2, 3, 0, 7, -(2**31)], jnp.int32)
    inputs = (x, z, b, i, -x, x.astype(jnp.float32), z.astype(jnp.complex64), x.astype(jnp.float16))
    for fn in (jax.vmap(lambda *values: computed_once(values)), lambda *values: computed_once(values)):
        out = jax.jit(fn)(*inputs)
        for before, after in zip(inputs, out, strict=True):
            before, after = np.asarray(before), np.asarray(after)
            assert after.dtype == before.dtype
            assert after.tobytes() == before.tobytes()


@pytest.mark.cpu_only(reason="counts the sines of the program as XLA:CPU optimises it, each consumer's fusion "
                              "recomputing it without computed_once; XLA:GPU fuses otherwise (a multi-output fusion "
                              "may compute it once either way)")
def test_a_value_computed_once_is_not_recomputed_in_its_consumers():
    """In the optimised program, the sine kept by computed_once is evaluated by
    one fusion, though three outputs read it (without it, XLA:CPU computes it in
    each)."""
    def sines(fn):
        text = jax.jit(jax.vmap(fn)).lower(jnp.ones(64)).compile().as_text()
        return text.count("sine(")

    def plain(a):
        s = jnp.sin(a)
        return s * 2, s + 1, jnp.exp(s)

    def once(a):
        (s,) = computed_once((jnp.sin(a),))
        return s * 2, s + 1, jnp.exp(s)

    assert sines(once) == 1 and sines(plain) > 1




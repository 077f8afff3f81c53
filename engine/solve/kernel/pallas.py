"""The kernel backend of the fused solver: Pallas on Triton, behind one seam.

Everything the fused solver needs from a kernel language is here: run a
function of lane vectors as a kernel over blocks of lanes, tell whether a
primitive can appear in it, and a loop condition that every lowering accepts.
Pallas' Triton backend is deprecated (since jax 0.11; its successors are
Mosaic GPU and jax-triton), so replacing it means replacing this module only.

On CPU the kernel runs in Pallas' interpret mode (plain XLA, the same
arithmetic); on a GPU it is lowered through Triton, whose float64
transcendental functions Mosaic GPU (the default GPU lowering since jax 0.9)
does not offer.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# The name of the custom call a Triton kernel lowers to (checked by the tests).
CUSTOM_CALL = "__gpu$xla.gpu.triton"


def compiles_for(platform: str) -> bool:
    """Whether kernels are compiled for this JAX platform (elsewhere they run
    in interpret mode: correct, and as fast as plain XLA of the same arithmetic)."""
    return platform == "gpu"


def supports(primitive) -> bool:
    """Whether the GPU lowering has a rule for `primitive`."""
    from jax._src.pallas.triton.lowering import triton_lowering_rules

    return primitive in triton_lowering_rules


def any_lane(mask):
    """Whether any lane of a boolean lane vector is set, as a scalar.

    jnp.any lowers to reduce_or, which the Triton lowering lacks."""
    return jnp.max(mask.astype(jnp.int32)) > 0


def block_call(
    kernel: Callable,
    inputs: Sequence[jax.Array],
    out_dtypes: Sequence,
    block: int,
    interpret: bool,
) -> list[jax.Array]:
    """kernel(*input_blocks) -> output_blocks over blocks of `block` lanes.

    inputs: 1-D arrays of one length, a whole number of blocks; the kernel sees
    one (block,) vector of each and returns one (block,) vector per output
    dtype. Blocks are independent (a lane's result depends on its own inputs
    alone), each a program of the grid.
    """
    n = inputs[0].shape[0]
    if n % block or block & (block - 1):
        raise ValueError(f"the fused kernel needs a power-of-two block dividing the batch, not {block} of {n}")
    spec = pl.BlockSpec((block,), lambda i: (i,))

    def body(*refs):
        ins, outs = refs[: len(inputs)], refs[len(inputs) :]
        results = kernel(*[ref[...] for ref in ins])
        for ref, value in zip(outs, results, strict=True):
            ref[...] = value.astype(ref.dtype)

    # One thread a lane: a block of 32 lanes is one warp.
    params = None if interpret else _compiler_params(warps=max(1, min(8, block // 32)))
    call = pl.pallas_call(
        body,
        out_shape=[jax.ShapeDtypeStruct((n,), dtype) for dtype in out_dtypes],
        grid=(n // block,),
        in_specs=[spec] * len(inputs),
        out_specs=[spec] * len(out_dtypes),
        interpret=interpret,
        compiler_params=params,
        name="fused_hybrid_solve",
    )
    return call(*inputs)


def _compiler_params(warps: int):
    from jax.experimental.pallas import triton as plt

    # One software-pipelining stage: the kernel is one long loop of arithmetic
    # on registers, with nothing to prefetch.
    return plt.CompilerParams(num_warps=warps, num_stages=1)

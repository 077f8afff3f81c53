"""A call's copies on an accelerator, made through the host's pinned memory.

Copies between a GPU and the host's pageable memory run at a fraction of the
bus's speed (one H100 machine, 2026-11-27: `jax.device_put` of 8 MB in 4.2 ms,
the copy back in 3.6 ms, about 2 GB/s), and each array is a copy of its own.
So on an accelerator, by default, the compiled call itself moves its results
into the host's page-locked memory (`results_pinned`: on the device's stream,
at the bus's speed). Measured on two H100 machines, 2026-11-27
(docs/performance.md): the fused solver's compiled calls with their copies
111-115M points/s at 1e6 against 22-26M copied out of device memory, 117-122M
against 69M at 1e7; a 1e8-point stream's solving 1.99 s against 2.27 s.
Two more steps, each its own switch until a GPU has
measured them (docs/performance.md):

- `inputs_pinned` ($ROLLSWEEP_PINNED_INPUTS=1): a call's varying columns are
  put in the host's pinned memory, and the call moves them onto the device
  itself, instead of being copied in from pageable memory. (Fixed parameters
  are made on the device once: engine.solve.evaluate._filled.)
- `results_packed` ($ROLLSWEEP_PACKED_RESULTS=1, with pinned results): the
  call's results (the selected outputs, status, steps, events) leave it as one
  buffer of bytes, one copy to the host instead of one per array, which the
  host reads as views (`unpacked`).

The bytes are moved, never converted: on the CPU every way gives the same
bits (tests/test_staging.py, by a stubbed GPU plan). On a GPU that is not yet
checked: XLA may fuse the packing with an output's last operations.
"""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from engine.solve.device import current_device

PINNED_RESULTS = "ROLLSWEEP_PINNED_RESULTS"
PINNED_INPUTS = "ROLLSWEEP_PINNED_INPUTS"
PACKED_RESULTS = "ROLLSWEEP_PACKED_RESULTS"


@dataclasses.dataclass(frozen=True)
class Staging:
    """Where a plan's calls take their inputs from and leave their results."""

    results_pinned: bool = False
    inputs_pinned: bool = False
    results_packed: bool = False

    @property
    def wraps(self) -> bool:
        """Whether the solver's program is called inside a program that moves its data."""
        return self.results_pinned or self.inputs_pinned


def _switch(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip()
    return default if value == "" else value != "0"


def staging_for(accelerator: bool) -> Staging:
    """The staging of a plan's calls: none on CPU (a call reads and writes the
    host's memory where it is); on an accelerator, results to pinned memory
    unless $ROLLSWEEP_PINNED_RESULTS is 0, inputs from it and results in one
    buffer where $ROLLSWEEP_PINNED_INPUTS / $ROLLSWEEP_PACKED_RESULTS are 1."""
    if not (accelerator and hasattr(jax, "memory") and hasattr(jax.memory, "Space")):
        return Staging()
    pinned = _switch(PINNED_RESULTS, True)
    return Staging(results_pinned=pinned, inputs_pinned=_switch(PINNED_INPUTS, False),
                   results_packed=pinned and _switch(PACKED_RESULTS, False))


@dataclasses.dataclass(frozen=True)
class Piece:
    """One result's place in a packed buffer: bytes offset:offset + nbytes."""

    index: int  # its place among the call's results (the selected outputs, status, steps, events)
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@functools.cache
def results_layout(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> tuple[Piece, ...]:
    """The packed buffer's pieces for results of these shapes and dtypes, widest
    items first, so that every piece starts at a multiple of its item's size
    (its view on the host is aligned)."""
    order = sorted(range(len(shapes)), key=lambda i: -np.dtype(dtypes[i]).itemsize)
    pieces, offset = [], 0
    for i in order:
        piece = Piece(i, offset, np.dtype(dtypes[i]), tuple(shapes[i]))
        pieces.append(piece)
        offset += piece.nbytes
    return tuple(pieces)


def call_results_layout(output_shapes: tuple[tuple[int, ...], ...], dtype: str, batch: int) -> tuple[Piece, ...]:
    """The layout of a batch function's results (engine.solve.base): each
    selected output (batch, *its shape) in `dtype`, then status (int8), steps
    and events (int32)."""
    shapes = tuple((batch, *shape) for shape in output_shapes) + ((batch,),) * 3
    dtypes = (np.dtype(dtype).name,) * len(output_shapes) + ("int8", "int32", "int32")
    return results_layout(shapes, dtypes)


def staged(program, staging: Staging, layout: tuple[Piece, ...] | None, order, names: tuple[str, ...]):
    """`program` (params, count) -> results, jitted inside a program that moves
    its inputs onto the device (those in pinned host memory; the rest are there
    already) and its results into pinned host memory, packed into one buffer of
    bytes laid out as `layout` where `staging.results_packed`. `order(results)`
    lists the results as `layout` numbers them, `names` names them so."""
    def call(args, count):
        if staging.inputs_pinned:
            args = jax.tree.map(lambda x: jax.device_put(x, jax.memory.Space.Device), args)
        results = program(args, count)
        if not staging.results_pinned:
            return results
        if not staging.results_packed:
            return jax.tree.map(lambda x: jax.device_put(x, jax.memory.Space.Host), results)
        leaves = order(results)
        for piece in layout:
            leaf = leaves[piece.index]
            if leaf.shape != piece.shape or leaf.dtype != piece.dtype:
                raise ValueError(f"{names[piece.index]!r} of a batch of {piece.shape[0]} points is "
                                 f"{leaf.dtype}{list(leaf.shape)}, not the {piece.dtype}{list(piece.shape)} its "
                                 "study declares (an output's dims)")
        packed = jnp.concatenate([jax.lax.bitcast_convert_type(leaves[p.index], jnp.uint8).reshape(-1)
                                  for p in layout])
        return jax.device_put(packed, jax.memory.Space.Host)

    return jax.jit(call)


def as_the_program_takes(args, staging: Staging):
    """A call's `args` as the solver's program inside it takes them: in the
    device's memory. Where they come in pinned host memory, their shapes and
    dtypes alone, so that the program exported for later processes
    (engine.solve.exported) does not take its inputs in pinned memory: JAX
    writes an argument's memory into the exported program, and a process of
    another staging reads the same program (its key names the arguments'
    shapes and dtypes)."""
    if not staging.inputs_pinned:
        return args
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), args)


def unpacked(buffer: np.ndarray, layout: tuple[Piece, ...]) -> list[np.ndarray]:
    """The results in a packed buffer (1-D uint8, on the host), as views of it,
    in the order `layout` numbers them."""
    results = [None] * len(layout)
    for piece in layout:
        results[piece.index] = buffer[piece.offset:piece.offset + piece.nbytes].view(piece.dtype).reshape(piece.shape)
    return results


def to_pinned(columns: dict) -> dict:
    """Host columns put in the pinned memory of this thread's device (each a
    copy on the host; the call moves it onto the device). By a sharding that
    names that memory: `jax.device_put` to `jax.memory.Space.Host` runs a program
    of its own instead, which copies a column onto the device and back (and is
    compiled in every process)."""
    return jax.device_put(columns, jax.sharding.SingleDeviceSharding(current_device(), memory_kind="pinned_host"))

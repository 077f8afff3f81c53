"""Grid to shards: each shard is one zarr chunk (a block of the grid)."""

import dataclasses
import math

import numpy as np


def chunk_shape(shape: tuple[int, ...], shard_size: int) -> tuple[int, ...]:
    """Largest block of at most `shard_size` points, filled from the last axis.

    Filling the last axis first keeps a shard's points contiguous along the
    fastest-varying axis, where neighbouring points have similar solve costs.
    """
    chunks, room = [], shard_size
    for n in reversed(shape):
        c = max(1, min(n, room))
        chunks.append(c)
        room //= c
    return tuple(reversed(chunks))


@dataclasses.dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(math.ceil(n / c) for n, c in zip(self.shape, self.chunks, strict=True))

    @property
    def n_shards(self) -> int:
        return math.prod(self.blocks)

    @property
    def n_points(self) -> int:
        return math.prod(self.shape)

    def region(self, shard: int) -> tuple[slice, ...]:
        index = np.unravel_index(shard, self.blocks) if self.shape else ()
        return tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, self.chunks, self.shape, strict=True)
        )

    def points(self, shard: int, axes_values) -> dict:
        """The shard's points as flat arrays, one per axis (C order over the block)."""
        region = self.region(shard)
        pieces = [values[s] for values, s in zip(axes_values, region, strict=True)]
        mesh = np.meshgrid(*pieces, indexing="ij") if pieces else []
        return [m.ravel() for m in mesh]

    def shard_points(self, shard: int) -> int:
        return math.prod(s.stop - s.start for s in self.region(shard))


def layouts(sweep) -> tuple[Layout, Layout | None]:
    """The grid layout and, with [critical], the layout over the other axes."""
    chunks = chunk_shape(sweep.shape, sweep.shard_size)
    grid = Layout(sweep.shape, chunks)
    if sweep.critical is None:
        return grid, None
    keep = [i for i, name in enumerate(sweep.axis_names) if name != sweep.critical.axis]
    return grid, Layout(tuple(sweep.shape[i] for i in keep), tuple(chunks[i] for i in keep))

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

    def points(self, shards, axes_values, empty=np.empty, length: int | None = None) -> list[np.ndarray]:
        """The points of `shards`, one after another, as flat arrays, one per axis
        (each shard's in C order over its block), made by `empty(shape, dtype)`.
        Written once into the arrays (no mesh per shard, then joined: two copies
        of every column). `length`: the arrays' length, where it is more than the
        points (room left after them, not written here)."""
        regions = [self.region(shard) for shard in shards]
        shapes = [tuple(s.stop - s.start for s in region) for region in regions]
        total = sum(map(math.prod, shapes))
        columns = [empty((max(total, length or 0),), np.asarray(values).dtype) for values in axes_values]
        offset = 0
        for region, shape in zip(regions, shapes, strict=True):
            size = math.prod(shape)
            for axis, (column, values) in enumerate(zip(columns, axes_values, strict=True)):
                along = [None] * len(shape)
                along[axis] = slice(None)  # this axis's values, broadcast over the block's other axes
                column[offset:offset + size].reshape(shape)[...] = np.asarray(values)[region[axis]][tuple(along)]
            offset += size
        return columns

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

"""A point's arrays as the fused kernel's columns: one column per element.

The kernel reads and writes 1-D columns, one point a lane. What crosses its
boundary (the parameters, a start computed before it, a solution finished
after it, the outputs) is a pytree of one point's small arrays, and each of
their elements travels as a column of its own: outside the kernel a batch
array of the leaf is cut into columns and put back together, inside it an
element is a lane vector (engine.solve.kernel.jaxpr's object arrays).
"""

import jax
import jax.numpy as jnp
import numpy as np

from engine.solve.kernel.jaxpr import Unfusable, from_list, lane_vector


def column_dtype(dtype):
    """The dtype a column of `dtype` travels in (small integers and booleans as
    int32, which every kernel backend loads and stores)."""
    dtype = jnp.dtype(dtype)
    small = dtype == jnp.dtype(bool) or (jnp.issubdtype(dtype, jnp.integer) and dtype.itemsize < 4)
    return jnp.dtype(jnp.int32) if small else dtype


class Columns:
    """How a pytree of one point's arrays travels as columns.

    example: the pytree, leaves with shape and dtype (arrays or
    jax.ShapeDtypeStruct). keep: for each leaf, whether it travels (a leaf
    left behind is read back as zeros: for parts a function never reads).
    what: names the pytree in an error.
    """

    def __init__(self, example, keep=None, what: str = "a kernel input"):
        leaves, self.tree = jax.tree_util.tree_flatten(example)
        self.shapes = [tuple(np.shape(leaf)) for leaf in leaves]
        self.leaf_dtypes = [jnp.dtype(leaf.dtype) for leaf in leaves]
        self.keep = [True] * len(leaves) if keep is None else list(keep)
        for dtype in self.leaf_dtypes:
            if jnp.issubdtype(dtype, jnp.complexfloating):
                raise Unfusable(f"{what} holds complex numbers, which a kernel column cannot carry")

    def _kept(self):
        return [(shape, dtype) for shape, dtype, keep in zip(self.shapes, self.leaf_dtypes, self.keep, strict=True)
                if keep]

    @property
    def dtypes(self) -> list:
        """The columns' dtypes, in order."""
        return [column_dtype(dtype) for shape, dtype in self._kept() for _ in range(int(np.prod(shape, dtype=int)))]

    def pack(self, batch) -> list[jax.Array]:
        """A batch of the pytree (every leaf with a leading axis of points) as columns."""
        columns = []
        for leaf, keep in zip(jax.tree_util.tree_leaves(batch), self.keep, strict=True):
            if keep:
                flat = jnp.reshape(leaf, (leaf.shape[0], -1)).astype(column_dtype(leaf.dtype))
                columns += [flat[:, i] for i in range(flat.shape[1])]
        return columns

    def unpack(self, columns, points: int):
        """The batch of the first `points` points back from its columns."""
        columns, leaves = iter(columns), []
        for shape, dtype, keep in zip(self.shapes, self.leaf_dtypes, self.keep, strict=True):
            size = int(np.prod(shape, dtype=int))
            if not keep:
                leaves.append(jnp.zeros((points,) + shape, dtype))
                continue
            parts = [next(columns)[:points] for _ in range(size)]
            flat = jnp.stack(parts, axis=-1) if parts else jnp.zeros((points, 0), dtype)
            leaves.append(flat.reshape((points,) + shape).astype(dtype))
        return jax.tree_util.tree_unflatten(self.tree, leaves)

    def on_lanes(self, vectors):
        """The pytree inside the kernel from its columns' lane vectors: each leaf
        an object array of lane vectors of its dtype."""
        vectors, leaves = iter(vectors), []
        for shape, dtype, keep in zip(self.shapes, self.leaf_dtypes, self.keep, strict=True):
            size = int(np.prod(shape, dtype=int))
            if not keep:
                leaves.append(from_list([np.zeros((), dtype)[()]] * size, shape))
                continue
            parts = [next(vectors) for _ in range(size)]
            leaves.append(from_list([(v != 0) if dtype == jnp.dtype(bool) else v.astype(dtype) for v in parts], shape))
        return jax.tree_util.tree_unflatten(self.tree, leaves)

    def lane_vectors(self, tree, lanes: int) -> list:
        """The pytree inside the kernel (leaves: object arrays of lane vectors
        and constants) as its columns' lane vectors."""
        out = []
        for leaf, dtype, keep in zip(jax.tree_util.tree_leaves(tree), self.leaf_dtypes, self.keep, strict=True):
            if keep:
                out += [lane_vector(e, dtype, lanes).astype(column_dtype(dtype)) for e in np.reshape(leaf, -1)]
        return out

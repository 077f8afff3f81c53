"""Classes of arrays that JAX traces through: frozen dataclasses, every field a
pytree child, as `equinox.Module` makes them.

The engine's own (a point's result, a hybrid solution, the lanes' state) are
made here rather than as equinox modules: a warm process that loads its
program from the cache traces nothing and then never imports equinox (0.09 s
of a 4,096-point run's 1.1 s on 2 cores). A study may still use equinox.
"""

import dataclasses

import jax


def pytree_dataclass(cls):
    """`cls` as a frozen dataclass registered with JAX, its fields (in the order
    declared) its children. Compared and hashed by identity, as its fields are
    arrays."""
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    return jax.tree_util.register_dataclass(cls, data_fields=[f.name for f in dataclasses.fields(cls)],
                                            meta_fields=[])


def replace(tree, **changes):
    """A copy of a pytree_dataclass with `changes` (field -> value)."""
    return dataclasses.replace(tree, **changes)

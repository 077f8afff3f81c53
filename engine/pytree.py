"""Classes of arrays that JAX traces through, as `equinox.Module` makes them:
every subclass of `PytreeDataclass` (and every subclass of those) a frozen
dataclass registered with JAX, its fields its children.

The engine's own (a point's result, a hybrid solution, the lanes' state) are
made here rather than as equinox modules: a warm process that loads its
program from the cache traces nothing and then never imports equinox (0.09 s
of a 4,096-point run's 1.1 s on 2 cores). A study may still use equinox.
"""

import dataclasses

import jax


class PytreeDataclass:
    """Base of a class of arrays. Its subclasses' fields are declared as a
    dataclass's; they are JAX's children in the order declared (what jit, vmap
    and the loops see), and instances are compared and hashed by identity (their
    fields are arrays). A subclass of a subclass (a study's own PointResult
    with a field more, say) is one too, as with equinox."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, eq=False)(cls)
        jax.tree_util.register_dataclass(cls, data_fields=[f.name for f in dataclasses.fields(cls)], meta_fields=[])


def replace(tree, **changes):
    """A copy of a PytreeDataclass with `changes` (field -> value)."""
    return dataclasses.replace(tree, **changes)

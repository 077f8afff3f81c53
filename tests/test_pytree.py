"""The engine's classes of arrays (engine.pytree) behave as the equinox modules
they replaced, for what a study author does with them: a PointResult made by
keyword or position with its defaults, traced through jit and vmap, changed
with equinox.tree_at, pickled (dask and SLURM send results), and subclassed
with a field more."""

import pickle

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from engine import PointResult
from engine.pytree import replace


def test_a_point_result_as_a_study_makes_one():
    by_keyword = PointResult(outputs={"x": jnp.float64(1.5)}, status=jnp.int8(1))
    by_position = PointResult({"x": jnp.float64(1.5)}, jnp.int8(1), jnp.int32(0), jnp.int32(0))
    for result in (by_keyword, by_position):
        assert int(result.num_steps) == 0 and int(result.num_events) == 0
    leaves, tree = jax.tree_util.tree_flatten(by_keyword)
    assert [float(v) for v in leaves] == [1.5, 1, 0, 0]  # the fields in the order declared
    assert jax.tree_util.tree_unflatten(tree, leaves).outputs["x"] == 1.5


def test_it_goes_through_jit_vmap_tree_at_and_pickle():
    @jax.jit
    def solve(x):
        return jax.vmap(lambda v: PointResult(outputs={"y": 2 * v}, status=jnp.int8(1), num_steps=jnp.int32(3)))(x)

    result = solve(jnp.arange(4.0))
    np.testing.assert_array_equal(result.outputs["y"], [0.0, 2.0, 4.0, 6.0])
    np.testing.assert_array_equal(result.num_steps, [3, 3, 3, 3])
    changed = eqx.tree_at(lambda r: r.status, result, jnp.zeros(4, jnp.int8))
    assert changed.status.sum() == 0 and result.status.sum() == 4  # frozen: a copy
    assert replace(result, num_events=jnp.ones(4, jnp.int32)).num_events.sum() == 4
    back = pickle.loads(pickle.dumps(jax.device_get(result)))
    np.testing.assert_array_equal(back.outputs["y"], result.outputs["y"])


def test_a_subclass_with_a_field_more_is_one_too():
    class Detailed(PointResult):
        extra: jax.Array = 0.0

    @jax.jit
    def make(x):
        return Detailed(outputs={"y": x}, status=jnp.int8(1), extra=x + 1)

    result = make(jnp.float64(2.0))
    assert isinstance(result, Detailed) and float(result.extra) == 3.0 and float(result.outputs["y"]) == 2.0
    assert len(jax.tree_util.tree_leaves(result)) == 5

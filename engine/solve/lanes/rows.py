"""Arithmetic over the lanes of lane-last arrays, written for XLA:CPU: rows
chained where a reduction over a short leading axis would run as a separate,
slower kernel, and decisions computed once."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from engine.solve.stepper import rows as _rows  # a (few, lanes) array's rows, as static slices


def _rows_of(x):
    """A lane-last array as a list of its rows (lanes,), in row-major order."""
    return [x[index] for index in np.ndindex(x.shape[:-1])]


def _from_rows(rows, shape):
    """The lane-last array of leading shape `shape` with these rows."""
    return jnp.stack(rows).reshape(tuple(shape) + rows[0].shape) if shape else rows[0]


def _choose(index, options):
    """options[index[l]][..., l] for every lane l (each option is computed)."""
    shape = options[0].shape[:-1]
    rows = [_rows_of(option) for option in options]
    chosen = rows[-1]
    for i in reversed(range(len(options) - 1)):
        chosen = [jnp.where(index == i, new, old) for new, old in zip(rows[i], chosen, strict=True)]
    return _from_rows(chosen, shape)


def _pick(values, index):
    """values[index[l], l] for every lane l of a few rows, as a masked sum: on
    CPU this fuses with its neighbours, where a gather would not."""
    return _sum_rows(jnp.where(jnp.arange(values.shape[0])[:, None] == index, values, jnp.zeros_like(values)))


def _sum_rows(x):
    """x.sum(axis=0) of a (few, lanes) array as a chain of row additions: XLA:CPU
    fuses those with the arithmetic around them, where a reduction over the short
    leading axis runs as a separate, several times slower, kernel."""
    return functools.reduce(jnp.add, _rows(x))


def _any_rows(x):
    """x.any(axis=0) of a (few, lanes) array, as _sum_rows."""
    return functools.reduce(jnp.logical_or, _rows(x))


def _all_rows(x):
    """x.all(axis=0) of a (few, lanes) array, as _sum_rows."""
    return functools.reduce(jnp.logical_and, _rows(x))


def _select(conditions, choices, default):
    """jnp.select, as a chain of `where`s (the first true condition wins):
    jnp.select finds the first true condition with an argmax over the stacked
    conditions, which XLA:CPU runs as a separate reduction kernel (in the
    rolling-ball step it cost as much as four Runge-Kutta stages)."""
    chosen = default
    for condition, choice in reversed(list(zip(conditions, choices, strict=True))):
        chosen = jnp.where(condition, choice, chosen)
    return chosen


def _first_true(x):
    """Index of the first true row of a (few, lanes) boolean array (0 where none,
    as argmax), without a reduction kernel (see _select)."""
    return _select(_rows(x), range(x.shape[0]), 0)


def _argmin_rows(x):
    """Index of the first smallest row of a (few, lanes) array, as _first_true."""
    best, index = x[0], jnp.zeros(x.shape[1:], jnp.int32)
    for i in range(1, x.shape[0]):
        smaller = x[i] < best
        best, index = jnp.where(smaller, x[i], best), jnp.where(smaller, i, index)
    return index


def _lane_last(x):
    """(lanes, ...) -> (..., lanes), assembled from its columns: XLA:CPU then
    keeps every later operation a contiguous loop over lanes (a transpose here
    leaves it looping over the few components, several times slower)."""
    if x.ndim == 1:
        return x
    columns = x.reshape(x.shape[0], -1)
    return jnp.stack([columns[:, i] for i in range(columns.shape[1])]).reshape(x.shape[1:] + x.shape[:1])


def _per_lane(fn):
    """fn of one lane, applied to every lane of lane-last arrays (lane-last results)."""
    vectorised = jax.vmap(fn, in_axes=-1, out_axes=0)
    return lambda *args: jax.tree_util.tree_map(_lane_last, vectorised(*args))


def _once(active, decisions):
    """The lanes' decisions, computed once, as the result of a conditional.

    Otherwise XLA:CPU fuses the whole chain of cheap per-lane logic that leads to
    them into each consumer and recomputes it for every component of every
    state-sized update (measured: more operations than the solver step itself).
    XLA:CPU removes optimization_barrier before fusion, so that cannot hold them.
    Exact: every decision is false in an inactive lane, and with no lane active
    the conditional returns all false.
    """
    return jax.lax.cond(
        jnp.any(active), lambda: decisions, lambda: tuple(jnp.zeros_like(x) for x in decisions)
    )

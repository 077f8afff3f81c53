"""A study's per-point function evaluated on lanes, one lane vector per component.

The fused kernel solves one point per lane, so a point's state vector of n
components becomes n lane vectors. Vmapping the point function would hold it
as an (n, lanes) array, and the studies build and index their small arrays
(`y[1]`, `jnp.stack([...])`, `y.at[3].set(...)`): stacks, slices and
scatters, which the GPU kernel lowering refuses. So the function is traced
once for one point (`jax.make_jaxpr`) and its jaxpr evaluated here, in the
manner of `jax.core.eval_jaxpr`, with every array of the point held as a numpy
object array of its elements, each element a lane vector (or a constant).
Reshaping, slicing, stacking and scattering then only rearrange elements at
trace time; what reaches the kernel is elementwise arithmetic on lane vectors.

Constants of the point function stay Python/numpy scalars, folded at trace
time where all operands are constants (a kernel may not capture array
constants). Gathers and scatters need constant indices (the studies' indices
are); a dynamic slice may be at the point's own index (a select per row).
Loops inside the point function are not supported. A matrix product
of a point's small arrays (`A @ y`, `jnp.einsum`) is expanded into sums of
products of elements, which suits the few components of a point's state.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core

import engine.solve.kernel.pallas as backend
from engine.solve.liveness import live_part


class Unfusable(ValueError):
    """A point function that cannot be evaluated on lanes (the reason says why)."""


# Primitives applied element by element (all operands have the result's shape);
# those the kernel backend cannot lower make a study unfusable (see _check).
_ELEMENTWISE = {
    getattr(lax, name + "_p")
    for name in (
        "abs acos acosh add and asin asinh atan atan2 atanh cbrt ceil clamp convert_element_type cos cosh digamma "
        "div eq erf erfc erf_inv exp exp2 expm1 floor ge gt integer_pow is_finite le lgamma log log1p logistic lt "
        "max min mul ne neg nextafter round "
        "not or pow rem rsqrt select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt "
        "square sub tan tanh xor"
    ).split()
}
# Reductions over a point's axes, folded element by element with this primitive.
_REDUCTIONS = {
    lax.reduce_sum_p: lax.add_p,
    lax.reduce_max_p: lax.max_p,
    lax.reduce_min_p: lax.min_p,
    lax.reduce_prod_p: lax.mul_p,
    lax.reduce_and_p: lax.and_p,
    lax.reduce_or_p: lax.or_p,
}
# Products and sums a matrix product (dot_general) is expanded into, by the
# result's dtype: booleans multiply as `and` and add as `or`.
_PRODUCT = {True: (lax.and_p, lax.or_p), False: (lax.mul_p, lax.add_p)}


def is_constant(element) -> bool:
    return isinstance(element, (np.generic, int, float, bool))


def constant(value, dtype):
    """A numpy scalar of `dtype`."""
    return np.asarray(value, dtype)[()]


def elements(value, shape=()) -> np.ndarray:
    """An object array of `shape` whose every element is `value`."""
    out = np.empty(shape, object)
    for index in np.ndindex(shape):
        out[index] = value
    return out


def from_list(values, shape) -> np.ndarray:
    """An object array of `shape` from a flat list of elements (row-major)."""
    out = np.empty(shape, object)
    for index, value in zip(np.ndindex(shape), values, strict=True):
        out[index] = value
    return out


def lane_vector(element, dtype, lanes: int):
    """An element as a lane vector of `dtype` (a constant is broadcast)."""
    if is_constant(element):
        return jnp.full((lanes,), element, dtype)
    return element if element.dtype == dtype else element.astype(dtype)


class LaneFunction:
    """fn traced once for one point; called on object arrays of lane vectors.

    example_args: the point's arguments (pytrees of arrays or
    jax.ShapeDtypeStruct) that fix the shapes and dtypes of the trace.
    """

    def __init__(self, fn: Callable, *example_args, name: str = ""):
        self.name = name or getattr(fn, "__name__", "function")
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*example_args)
        # Only what the result depends on is checked and evaluated: an output
        # left unread (say, one the sweep did not select) costs nothing and
        # cannot make the function unfusable.
        self.jaxpr, self.consts = closed.jaxpr.replace(eqns=live_part(closed.jaxpr)[0]), closed.consts
        self.in_tree = jax.tree_util.tree_structure(example_args)
        self.out_tree = jax.tree_util.tree_structure(shapes)
        _check(self.jaxpr, self.name)

    def __call__(self, *args, lanes: int):
        """args: as example_args, every leaf an object array (or a scalar
        element) of the leaf's shape. Returns the result's pytree, every leaf
        an object array of lane vectors and constants."""
        leaves = jax.tree_util.tree_leaves(args)
        jaxpr = self.jaxpr
        if len(leaves) != len(jaxpr.invars):
            raise ValueError(f"{self.name}: {len(leaves)} arguments for {len(jaxpr.invars)} inputs")
        values = []
        for leaf, var in zip(leaves, jaxpr.invars, strict=True):
            leaf = leaf if isinstance(leaf, np.ndarray) else elements(leaf, var.aval.shape)
            if leaf.shape != var.aval.shape:
                raise ValueError(f"{self.name}: an argument of shape {leaf.shape} for {var.aval.shape}")
            values.append(_cast(leaf, var.aval.dtype))
        consts = [_constant_elements(c) for c in self.consts]
        out = _evaluate(jaxpr, consts, values, lanes)
        return jax.tree_util.tree_unflatten(self.out_tree, out)


def read_leaves(fn: Callable, *example_args) -> list[bool]:
    """For each leaf of fn's arguments, whether its result depends on it (a
    leaf it never reads need not be computed for it)."""
    jaxpr = jax.make_jaxpr(fn)(*example_args).jaxpr
    _, read = live_part(jaxpr)
    return [v in read for v in jaxpr.invars]


def _cast(value: np.ndarray, dtype) -> np.ndarray:
    out = np.empty(value.shape, object)
    for index in np.ndindex(value.shape):
        e = value[index]
        if is_constant(e):
            out[index] = constant(e, dtype)
        else:
            out[index] = e if e.dtype == dtype else e.astype(dtype)
    return out


def _constant_elements(value) -> np.ndarray:
    array = np.asarray(value)
    return from_list([x for x in array.reshape(-1)], array.shape)


def subjaxprs(eqn):
    for param in eqn.params.values():
        for item in param if isinstance(param, (tuple, list)) else (param,):
            if isinstance(item, jex_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex_core.Jaxpr):
                yield item


def _check(jaxpr, name: str):
    """Every primitive is one this module evaluates and (if it reaches the
    kernel) the kernel backend lowers: fails before any kernel is built."""
    for eqn in jaxpr.eqns:
        prim = eqn.primitive
        if prim in _ELEMENTWISE or prim in _REDUCTIONS:
            # A reduction over a point's components becomes the operation it repeats.
            if not backend.supports(_REDUCTIONS.get(prim, prim)):
                raise Unfusable(f"{name} uses {prim.name}, which the GPU kernel backend cannot lower")
        elif prim is lax.dot_general_p:
            boolean = eqn.outvars[0].aval.dtype == np.dtype(bool)
            if not all(backend.supports(p) for p in _PRODUCT[boolean]):
                raise Unfusable(f"{name} uses {prim.name}, whose products the GPU kernel backend cannot lower")
        elif prim not in _STRUCTURAL and prim not in _CALLS and prim is not lax.cond_p:
            raise Unfusable(f"{name} uses {prim.name}, which the fused kernel cannot evaluate on lanes")
        for sub in subjaxprs(eqn):
            _check(sub, name)


def _evaluate(jaxpr, consts, args, lanes):
    env = {}

    def read(atom):
        if isinstance(atom, jex_core.Literal):
            return elements(constant(atom.val, atom.aval.dtype), atom.aval.shape)
        return env[atom]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        ins = [read(atom) for atom in eqn.invars]
        in_avals = [atom.aval for atom in eqn.invars]
        outs = _apply(eqn, ins, in_avals, lanes)
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(atom) for atom in jaxpr.outvars]


def _apply(eqn, ins, in_avals, lanes):
    prim, params = eqn.primitive, eqn.params
    if prim in _ELEMENTWISE:
        return [_elementwise(prim, params, ins, in_avals, eqn.outvars[0].aval, lanes)]
    if prim in _REDUCTIONS:
        return [_reduce(_REDUCTIONS[prim], ins[0], in_avals[0], params["axes"], lanes)]
    if prim is lax.dot_general_p:
        return [_dot_general(ins, params["dimension_numbers"], eqn.outvars[0].aval.dtype, lanes)]
    if prim in _STRUCTURAL:
        out = _STRUCTURAL[prim](ins, in_avals, params, eqn)
        outs = out if prim.multiple_results else [out]
        return [_as_elements(o, var.aval, prim) for o, var in zip(outs, eqn.outvars, strict=True)]
    if prim in _CALLS:
        closed = params[_CALLS[prim]]
        jaxpr, consts = (closed.jaxpr, closed.consts) if isinstance(closed, jex_core.ClosedJaxpr) else (closed, ())
        return _evaluate(jaxpr, [_constant_elements(c) for c in consts], ins, lanes)
    if prim is lax.cond_p:
        return _cond(params["branches"], ins, in_avals, lanes)
    raise Unfusable(f"{prim.name} cannot be evaluated on lanes")


def _bind(prim, params, elems, dtypes, lanes):
    """prim on one element of each operand: folded if all are constants."""
    if all(is_constant(e) for e in elems):
        with jax.ensure_compile_time_eval():
            result = prim.bind(*[jnp.asarray(e, d) for e, d in zip(elems, dtypes, strict=True)], **params)
        return np.asarray(result)[()]
    return prim.bind(*[lane_vector(e, d, lanes) for e, d in zip(elems, dtypes, strict=True)], **params)


def _elementwise(prim, params, ins, in_avals, out_aval, lanes):
    shape = out_aval.shape
    ins = [np.broadcast_to(x, shape) for x in ins]
    dtypes = [a.dtype for a in in_avals]
    out = np.empty(shape, object)
    for index in np.ndindex(shape):
        out[index] = _bind(prim, params, [x[index] for x in ins], dtypes, lanes)
    return out


def _reduce(combine, x, aval, axes, lanes):
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, kept + list(axes)).reshape([x.shape[d] for d in kept] + [-1])
    out = np.empty(moved.shape[:-1], object)
    for index in np.ndindex(out.shape):
        row = moved[index]
        acc = row[0]
        for e in row[1:]:
            acc = _bind(combine, {}, [acc, e], [aval.dtype, aval.dtype], lanes)
        out[index] = acc
    return out


def _dot_general(ins, dimension_numbers, dtype, lanes):
    """lax.dot_general of a point's arrays: each element of the result the sum,
    in order of the contracted index, of products of elements (in the result's
    dtype, as preferred_element_type asks)."""
    lhs, rhs = ins
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
    batch = [lhs.shape[d] for d in lhs_batch]
    contracted = int(np.prod([lhs.shape[d] for d in lhs_contract], dtype=int))
    # (batch..., free..., contracted) and (batch..., contracted, free...)
    lhs = np.transpose(lhs, [*lhs_batch, *lhs_free, *lhs_contract]).reshape(
        batch + [lhs.shape[d] for d in lhs_free] + [contracted])
    rhs = np.transpose(rhs, [*rhs_batch, *rhs_contract, *rhs_free]).reshape(
        batch + [contracted] + [rhs.shape[d] for d in rhs_free])
    multiply, add = _PRODUCT[np.dtype(dtype) == np.dtype(bool)]
    dtypes = [dtype, dtype]
    out = np.empty(batch + list(lhs.shape[len(batch):-1]) + list(rhs.shape[len(batch) + 1:]), object)
    for index in np.ndindex(out.shape):
        b = index[: len(batch)]
        i = index[len(batch): len(batch) + lhs.ndim - len(batch) - 1]
        j = index[len(batch) + len(i):]
        acc = constant(0, dtype)
        for k in range(contracted):
            term = _bind(multiply, {}, [lhs[b + i + (k,)], rhs[b + (k,) + j]], dtypes, lanes)
            acc = term if k == 0 else _bind(add, {}, [acc, term], dtypes, lanes)
        out[index] = acc
    return out


def _cond(branches, ins, in_avals, lanes):
    """lax.cond on lanes: every branch is evaluated and each lane takes its
    own branch's result (as vmap does)."""
    index, operands = ins[0], ins[1:]
    results = [_evaluate(b.jaxpr, [_constant_elements(c) for c in b.consts], operands, lanes) for b in branches]
    chosen = results[-1]
    (i,) = index.reshape(-1)
    if is_constant(i):
        return results[int(np.clip(i, 0, len(branches) - 1))]
    for k in reversed(range(len(branches) - 1)):
        which = lax.eq(lane_vector(i, in_avals[0].dtype, lanes), jnp.asarray(k, in_avals[0].dtype))
        merged = []
        for new, old, var in zip(results[k], chosen, branches[k].jaxpr.outvars, strict=True):
            out = np.empty(new.shape, object)
            for idx in np.ndindex(new.shape):
                a, b = lane_vector(new[idx], var.aval.dtype, lanes), lane_vector(old[idx], var.aval.dtype, lanes)
                out[idx] = lax.select(which, a, b)
            merged.append(out)
        chosen = merged
    return chosen


# ---- structural primitives: they rearrange elements, no kernel operation


def _as_elements(value, aval, prim) -> np.ndarray:
    """A structural rule's result as what every other rule reads: an object
    array of the output's shape. numpy hands back a bare element where an
    index picks one out of an object array (`np.take(x, 0)` of a vector, `x[0]`),
    and a rule on numeric values a numeric array: both are wrapped here, once
    for every structural primitive."""
    shape = tuple(aval.shape)
    if not isinstance(value, np.ndarray):  # a bare element (a lane vector or a constant)
        if shape != ():
            raise RuntimeError(f"the lane rule of {prim.name} gave one element for shape {shape}")
        return elements(value, ())
    if value.dtype != object:
        value = from_list([x for x in value.reshape(-1)], value.shape)
    if value.shape != shape:
        raise RuntimeError(f"the lane rule of {prim.name} gave shape {value.shape} for {shape}")
    return value


def _constant_indices(x, what):
    values = []
    for e in x.reshape(-1):
        if not is_constant(e):
            raise Unfusable(f"{what} with indices that depend on the point (only constant indices are supported)")
        values.append(e)
    return np.asarray(values).reshape(x.shape)


def _broadcast_in_dim(ins, avals, params, eqn):
    x = ins[0]
    shape = params["shape"]
    inter = [1] * len(shape)
    for src, dst in enumerate(params["broadcast_dimensions"]):
        inter[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(inter), shape).copy()


def _slice(ins, avals, params, eqn):
    strides = params["strides"] or (1,) * ins[0].ndim
    return ins[0][tuple(slice(s, e, k) for s, e, k in zip(params["start_indices"], params["limit_indices"], strides,
                                                           strict=True))]


# The most elements a dynamic slice at a point's own index may choose among
# (its candidate starts times its size): each element of the slice is a chain
# of that many selects.
_DYNAMIC_SLICE_CHOICES = 1 << 16


def _dynamic_slice(ins, avals, params, eqn):
    """x[start:start + size] on each axis, starts clamped as XLA's. A start
    that depends on the point (a finish reading its event log at its last
    event: `sol.event_t[sol.num_events - 1]`) picks, lane by lane, among every
    start the axis allows: a tree of selects, halving the candidates at each
    level (one select a candidate, a chain only as long as their bits)."""
    x, sizes = ins[0], params["slice_sizes"]
    starts = []
    for index, dim, size in zip(ins[1:], x.shape, sizes, strict=True):
        start = index.reshape(-1)[0]
        if not is_constant(start) and jnp.iinfo(start.dtype).max < dim:  # an int8 index compared with 150: widened
            start = start.astype(jnp.int32)
        starts.append(int(np.clip(start, 0, dim - size)) if is_constant(start) else jnp.clip(start, 0, dim - size))
    choices = int(np.prod([dim - size + 1 for s, dim, size in zip(starts, x.shape, sizes, strict=True)
                           if not isinstance(s, int)])) * int(np.prod(sizes))
    if choices > _DYNAMIC_SLICE_CHOICES:
        raise Unfusable(f"a dynamic slice of {tuple(sizes)} at indices that depend on the point, in an array of "
                        f"{x.shape}: too many elements to choose among in the kernel")
    dtype = eqn.outvars[0].aval.dtype

    def pick(axis, fixed):
        """The slice with the starts of axes before `axis` fixed (lane vectors chosen among)."""
        if axis == x.ndim:
            return x[tuple(slice(s, s + n) for s, n in zip(fixed, sizes, strict=True))]
        start = starts[axis]
        if isinstance(start, int):
            return pick(axis + 1, fixed + [start])

        def between(lo, hi):  # the slice for a start in [lo, hi)
            if hi - lo == 1:
                return pick(axis + 1, fixed + [lo])
            mid = (lo + hi) // 2
            low, high, below = between(lo, mid), between(mid, hi), start < mid
            out = np.empty(low.shape, object)
            for index in np.ndindex(low.shape):
                out[index] = jnp.where(below, low[index], high[index]).astype(dtype)
            return out

        return between(0, x.shape[axis] - sizes[axis] + 1)

    return pick(0, []).copy()


def _dynamic_update_slice(ins, avals, params, eqn):
    x, update, starts = ins[0].copy(), ins[1], [_constant_indices(i, "a dynamic update") for i in ins[2:]]
    starts = [int(np.clip(s, 0, d - n)) for s, d, n in zip(starts, x.shape, update.shape, strict=True)]
    x[tuple(slice(s, s + n) for s, n in zip(starts, update.shape, strict=True))] = update
    return x


def _source_map(prim, params, operand_shape, indices, update_shape=None):
    """Where each element of a gather's or scatter's result comes from, found by
    running the primitive on element numbers: k >= 1 is the operand's (k-1)th
    element, k <= -1 the update's (-k-1)th."""
    with jax.ensure_compile_time_eval():
        ids = jnp.arange(1, int(np.prod(operand_shape)) + 1, dtype=jnp.int32).reshape(operand_shape)
        if update_shape is None:
            return np.asarray(prim.bind(ids, jnp.asarray(indices), **params))
        updates = -jnp.arange(1, int(np.prod(update_shape)) + 1, dtype=jnp.int32).reshape(update_shape)
        return np.asarray(prim.bind(ids, jnp.asarray(indices), updates, **params))


def _by_source(sources, operand, update=None):
    flat_operand = operand.reshape(-1)
    flat_update = None if update is None else update.reshape(-1)
    out = np.empty(sources.shape, object)
    for index in np.ndindex(sources.shape):
        k = int(sources[index])
        if k == 0:
            raise Unfusable("an out-of-bounds gather (filled values are not supported)")
        out[index] = flat_operand[k - 1] if k > 0 else flat_update[-k - 1]
    return out


def _gather(ins, avals, params, eqn):
    operand, indices = ins
    params = dict(params, fill_value=0)
    return _by_source(_source_map(lax.gather_p, params, operand.shape, _constant_indices(indices, "a gather")),
                      operand)


def _scatter(ins, avals, params, eqn):
    operand, indices, update = ins
    if params.get("update_jaxpr") is not None:
        raise Unfusable("a scatter with a combining function")
    sources = _source_map(lax.scatter_p, params, operand.shape, _constant_indices(indices, "a scatter"),
                          update.shape)
    return _by_source(sources, operand, update)


def _scatter_add(ins, avals, params, eqn):
    """operand.at[indices].add(update), with constant indices: each update
    element's destination is found by scattering it alone (as a one)."""
    operand, indices, update = ins
    indices = _constant_indices(indices, "a scatter")
    out = operand.copy().reshape(-1)
    dtype = avals[0].dtype
    for k in range(update.size):
        # (Every array made in here: outside, under a trace, jnp.asarray gives a tracer.)
        with jax.ensure_compile_time_eval():
            one = jnp.zeros(update.size, dtype).at[k].set(1).reshape(update.shape)
            hits = np.asarray(lax.scatter_add_p.bind(jnp.zeros(operand.shape, dtype), jnp.asarray(indices), one,
                                                     **params))
        for position in np.flatnonzero(hits.reshape(-1)):
            out[position] = _bind(lax.add_p, {}, [out[position], update.reshape(-1)[k]], [dtype, dtype],
                                  _lanes_of([out[position], update.reshape(-1)[k]]))
    return out.reshape(operand.shape)


def _pad(ins, avals, params, eqn):
    """lax.pad: each element of the result is an operand's element or the padding value."""
    operand, padding = ins
    with jax.ensure_compile_time_eval():
        ids = jnp.arange(1, operand.size + 1, dtype=jnp.int32).reshape(operand.shape)
        sources = np.asarray(lax.pad(ids, jnp.int32(0), params["padding_config"]))
    flat, fill = operand.reshape(-1), padding[()]
    out = np.empty(sources.shape, object)
    for index in np.ndindex(sources.shape):
        k = int(sources[index])
        out[index] = flat[k - 1] if k else fill
    return out


def _lanes_of(elems):
    return next((e.shape[0] for e in elems if not is_constant(e)), 1)


def _iota(ins, avals, params, eqn):
    shape, dimension, dtype = params["shape"], params["dimension"], params["dtype"]
    values = np.broadcast_to(
        np.arange(shape[dimension], dtype=dtype).reshape([-1 if d == dimension else 1 for d in range(len(shape))]),
        shape,
    )
    return from_list([x for x in values.reshape(-1)], shape)


def _reshape(ins, avals, params, eqn):
    x = ins[0]
    if params.get("dimensions") is not None:  # lax.reshape(x, sizes, dimensions): transposed first
        x = np.transpose(x, params["dimensions"])
    return x.reshape(params["new_sizes"])


def _unstack(ins, avals, params, eqn):
    """lax.unstack (jnp.unstack; jax >= 0.11 traces `a, b = y` so): the slices
    along the axis, each an object array (`[i, ...]`: 0-d for a vector's element)."""
    x = np.moveaxis(ins[0], params["axis"], 0)
    return [x[i, ...].copy() for i in range(x.shape[0])]


def _split(ins, avals, params, eqn):
    bounds = np.cumsum(params["sizes"])[:-1]
    return [part.copy() for part in np.split(ins[0], bounds, axis=params["axis"])]


_STRUCTURAL = {
    lax.broadcast_in_dim_p: _broadcast_in_dim,
    lax.reshape_p: _reshape,
    lax.squeeze_p: lambda ins, avals, params, eqn: ins[0].reshape(eqn.outvars[0].aval.shape),
    lax.concatenate_p: lambda ins, avals, params, eqn: np.concatenate(ins, axis=params["dimension"]),
    lax.stack_p: lambda ins, avals, params, eqn: np.stack(ins, axis=params["axis"]),
    lax.unstack_p: _unstack,
    lax.split_p: _split,
    lax.transpose_p: lambda ins, avals, params, eqn: np.transpose(ins[0], params["permutation"]).copy(),
    lax.rev_p: lambda ins, avals, params, eqn: np.flip(ins[0], params["dimensions"]).copy(),
    lax.slice_p: _slice,
    lax.dynamic_slice_p: _dynamic_slice,
    lax.dynamic_update_slice_p: _dynamic_update_slice,
    lax.gather_p: _gather,
    lax.scatter_p: _scatter,
    lax.scatter_add_p: _scatter_add,
    lax.iota_p: _iota,
    lax.pad_p: _pad,
    lax.copy_p: lambda ins, avals, params, eqn: ins[0],
    lax.stop_gradient_p: lambda ins, avals, params, eqn: ins[0],
    lax.optimization_barrier_p: lambda ins, avals, params, eqn: list(ins),
}


def _calls():
    from jax._src import core as jax_core
    from jax._src import custom_derivatives, pjit

    return {
        pjit.jit_p: "jaxpr",
        jax_core.closed_call_p: "call_jaxpr",
        custom_derivatives.custom_jvp_call_p: "call_jaxpr",
        custom_derivatives.custom_vjp_call_p: "call_jaxpr",
    }


# Calls of a nested jaxpr (jit, custom derivatives): evaluated inline.
_CALLS = _calls()

"""The fused kernel's body for one study: the study's start, hybrid solve and
finish, traced for one point and replayed on lane vectors (engine.solve.kernel.jaxpr),
with each part that the kernel cannot take run outside it, and why."""


import jax
import jax.numpy as jnp

import engine.solve.kernel.pallas as backend
from engine.errors import PLEASE_REPORT
from engine.pytree import replace
from engine.solve.hybrid import HybridPoint, Start, solution_shapes
from engine.solve.kernel.columns import Columns
from engine.solve.kernel.jaxpr import LaneFunction, Unfusable, lane_vector, read_leaves, subjaxprs
from engine.solve.kernel.system import LaneSolve
from engine.solve.lanes.batch import samples_read
from engine.study.interface import PointResult
from engine.sweep.settings import SolverSettings


def cannot_lower(jaxpr) -> list[str]:
    """The primitives of a kernel's jaxpr that the GPU kernel backend has no rule for."""
    return sorted({p.name for p in _primitives(jaxpr) if not backend.supports(p)})


def _primitives(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn.primitive
        for sub in subjaxprs(eqn):
            yield from _primitives(sub)


def _in_kernel(fn, examples, name: str, lanes: int):
    """fn (of one point's `examples`) as a LaneFunction if it can run in the
    kernel: evaluated on lane vectors and lowered by the GPU kernel backend.
    Returns (the function or None, why not)."""
    try:
        function = LaneFunction(fn, *examples, name=name)
        inputs = Columns(examples, what=f"the {name}'s input")
        outputs = Columns(jax.eval_shape(fn, *examples), what=f"the {name}'s result")

        def on_lanes(*vectors):
            return outputs.lane_vectors(function(*inputs.on_lanes(vectors), lanes=lanes), lanes)

        lane = [jax.ShapeDtypeStruct((lanes,), dtype) for dtype in inputs.dtypes]
        missing = cannot_lower(jax.make_jaxpr(on_lanes)(*lane).jaxpr)
    except Unfusable as error:
        return None, str(error)
    except Exception as error:  # a failure of the check itself: the part runs outside, and says why
        return None, f"tracing the {name} for the kernel {unexpected(error)}"
    if missing:
        return None, f"{name} would use {', '.join(missing)}, which the GPU kernel backend cannot lower"
    return function, None


class KernelBody:
    """The fused kernel for one study, settings and selected outputs: its body
    (a function of one block's input lane vectors: `active`, then `inputs`'
    columns, returning the `out_dtypes` columns), and the XLA work around it
    (`inputs` before, `results` after).

    The kernel reads the parameters when its start or finish runs inside, the
    start's results when the start runs outside; it writes the selected outputs,
    status, steps and events when the finish runs inside, the solution's fields
    that the finish reads when it runs outside. `outside`: the parts that run
    outside, each with the reason it cannot run inside. Raises Unfusable when
    the hybrid system cannot be fused.
    """

    def __init__(self, point: HybridPoint, settings: SolverSettings, names, selected, lanes: int):
        self.dtype = dtype = jnp.dtype(settings.dtype)
        self.selected = tuple(selected)
        scalar = jax.ShapeDtypeStruct((), dtype)
        params = {name: scalar for name in names}

        def start(p):
            y0, mode, args, t_end = point.start(p, settings)
            horizon = settings.t_max if t_end is None else t_end
            return Start(jnp.asarray(y0, dtype), jnp.asarray(mode, jnp.int32), args, jnp.asarray(horizon, dtype))

        def finish(p, solution):
            return point.finish(p, solution, settings)

        def finish_selected(p, solution):  # what leaves the kernel: the selected outputs
            result = finish(p, solution)
            return PointResult({k: result.outputs[k] for k in self.selected}, result.status, result.num_steps,
                               result.num_events)

        self._start, self._finish = start, finish
        begins = jax.eval_shape(start, params)
        if begins.y0.ndim != 1:
            raise Unfusable(f"its state has shape {begins.y0.shape}, not a vector")
        rows = point.log_arrays(params, begins.y0, settings)  # one row of an array the finish does not read
        solution = solution_shapes(jax.ShapeDtypeStruct(begins.y0.shape, dtype), rows, len(settings.save_times))
        outputs = jax.eval_shape(finish, params, solution).outputs
        missing = [k for k in self.selected if k not in outputs]
        if missing:
            raise ValueError(f"the study's finish has no outputs {missing}")
        # The samples' components (and mode) the selected outputs read: the
        # kernel makes and writes only those (the lanes' rule, samples_read).
        read = samples_read(finish_selected, params, solution) if settings.save_times else None
        self.solve = LaneSolve(point.system, settings, begins.y0.shape[0], begins.args, rows, samples_read=read)

        self.lane_start, start_outside = _in_kernel(start, (params,), "start", lanes)
        self.lane_finish, finish_outside = _in_kernel(finish_selected, (params, solution), "finish", lanes)
        self.outside = {part: why for part, why in (("start", start_outside), ("finish", finish_outside)) if why}
        self.params = Columns(params, what="the parameters")
        self.begins = None if self.lane_start is not None else Columns(begins, what="the start's result")
        if self.lane_finish is not None:
            self.results = Columns(jax.eval_shape(finish_selected, params, solution))
        else:  # the solution's fields the finish reads (a field it never reads is not written)
            reads = read_leaves(finish_selected, params, solution)[len(params):]
            self.results = Columns(solution, keep=_not_times(solution, reads))
        self.reads_params = self.lane_start is not None or self.lane_finish is not None

    # ---- the XLA around the kernel (whole batches)

    @property
    def input_dtypes(self) -> list:
        """The dtypes of the kernel's input columns after `active`."""
        params = self.params.dtypes if self.reads_params else []
        return params + (self.begins.dtypes if self.begins is not None else [])

    @property
    def out_dtypes(self) -> list:
        return self.results.dtypes

    def inputs(self, params) -> list:
        """The kernel's input columns after `active`, for a batch of (safe) parameters."""
        columns = self.params.pack(params) if self.reads_params else []
        if self.begins is not None:
            columns += self.begins.pack(jax.vmap(self._start)(params))
        return columns

    def results_of(self, columns, params, points: int) -> PointResult:
        """The batch's results from the kernel's output columns (params: the
        batch's first `points` safe parameters)."""
        if self.lane_finish is not None:
            return self.results.unpack(columns, points)
        solution = self.results.unpack(columns, points)
        if solution.saved_t is not None:
            times = jnp.asarray(self.solve.times, self.dtype)
            solution = replace(solution, saved_t=jnp.broadcast_to(times, (points,) + times.shape))
        return jax.vmap(self._finish)(params, solution)

    # ---- the kernel's body (one block of lane vectors)

    def __call__(self, active, *columns, one_point: bool = False):
        """The outputs' lane vectors of a block. one_point: traced for one lane,
        as the generated C runs it (LaneSolve's event log as arrays)."""
        dtype = self.dtype
        lanes = active.shape[0]
        columns = list(columns)
        params = None
        if self.reads_params:
            params = self.params.on_lanes(columns[: len(self.params.dtypes)])
            columns = columns[len(self.params.dtypes):]
        if self.lane_start is not None:
            begins = self.lane_start(params, lanes=lanes)
        else:
            begins = self.begins.on_lanes(columns)
        solution = self.solve(
            active != 0,
            [lane_vector(e, dtype, lanes) for e in begins.y0.reshape(-1)],
            lane_vector(begins.mode[()], jnp.int32, lanes),
            begins.args,
            lane_vector(begins.t_end[()], dtype, lanes),
            one_point=one_point,
        )
        if self.lane_finish is None:
            return self.results.lane_vectors(solution, lanes)
        return self.results.lane_vectors(self.lane_finish(params, solution, lanes=lanes), lanes)


def _not_times(solution, keep: list) -> list:
    """`keep` (a flag for each leaf of the solution) with the sample times'
    unset: they are the sweep's, every point's the same, so the kernel does
    not write them out (KernelBody.results_of puts them back)."""
    if solution.saved_t is None:
        return keep
    flags = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(solution), keep)
    return jax.tree_util.tree_leaves(replace(flags, saved_t=False))


def unexpected(error: Exception) -> str:
    """The part of a reason naming an exception raised while checking a study
    (its message's first line: a reason is said on one line), marked as the
    engine's failure (a bug of the lane interpreter or a JAX it does not know
    yet), not a property of the study."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > 300:
        message = message[:300] + "..."
    return f"raised {type(error).__name__}: {message} {PLEASE_REPORT}"



"""The fused solver: a batch's whole hybrid solves in one GPU kernel.

One lane of a block solves one point: its hybrid solve (every adaptive step,
event location, reset and mode switch: engine.solve._fused_system) and, where
they can, the study's start before it and finish after it. On a GPU no step
is then a round trip to the host or to memory; on CPU the same kernel runs
in Pallas' interpret mode (that is how it is tested; on CPU the lanes solver
stays the default).

The kernel is not written per study: the study's own functions
(HybridPoint's start, system and finish) are traced for one point and
evaluated on lane vectors (engine.solve._lane_jaxpr). The system must run
in the kernel (else the study is not fused, and `unsupported` says why). A
start or a finish that cannot (a LAPACK solve, complex numbers, an argmax
over the event log, a primitive the GPU compiler lacks) runs outside the
kernel instead, as plain XLA vmapped over the batch: the start before it,
its results (state, mode, the system's arguments, horizon) passed in as one
column per element; the finish after it, on the solutions the kernel writes
out (the fields it reads, one column per element). Inside is cheaper (fewer
columns written and read), so a part runs outside only when it must. The
kernel language sits behind engine.solve._pallas_backend.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._jax_setup import float64_here
from .._study import PointResult
from . import _pallas_backend as backend
from ._fused_system import LaneSolve
from ._lane_columns import Columns
from ._lane_jaxpr import LaneFunction, Unfusable, lane_vector, read_leaves, subjaxprs
from .base import BatchSolver, Plan, masked, safe_params
from .device import Device
from .hybrid import HybridPoint, Start
from .kernel import choose as choose_kernel_backend
from .settings import SolverSettings
from .vmapped import POINT_BYTES as VMAPPED_POINT_BYTES
from .vmapped import memory_batch


def _cannot_lower(jaxpr) -> list[str]:
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
        missing = _cannot_lower(jax.make_jaxpr(on_lanes)(*lane).jaxpr)
    except Unfusable as error:
        return None, str(error)
    except Exception as error:  # a failure of the check itself: the part runs outside, and says why
        return None, f"tracing the {name} for the kernel {unexpected(error)}"
    if missing:
        return None, f"{name} would use {', '.join(missing)}, which the GPU kernel backend cannot lower"
    return function, None


class _Body:
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
        self.solve = LaneSolve(point.system, settings, begins.y0.shape[0], begins.args)
        solution = self.solve.solution_shapes()
        outputs = jax.eval_shape(finish, params, solution).outputs
        missing = [k for k in self.selected if k not in outputs]
        if missing:
            raise ValueError(f"the study's finish has no outputs {missing}")

        self.lane_start, start_outside = _in_kernel(start, (params,), "start", lanes)
        self.lane_finish, finish_outside = _in_kernel(finish_selected, (params, solution), "finish", lanes)
        self.outside = {part: why for part, why in (("start", start_outside), ("finish", finish_outside)) if why}
        self.params = Columns(params, what="the parameters")
        self.begins = None if self.lane_start is not None else Columns(begins, what="the start's result")
        if self.lane_finish is not None:
            self.results = Columns(jax.eval_shape(finish_selected, params, solution))
        else:  # the solution's fields the finish reads (a field it never reads is not written)
            reads = read_leaves(finish_selected, params, solution)[len(params):]
            self.results = Columns(solution, keep=reads)
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
        return jax.vmap(self._finish)(params, self.results.unpack(columns, points))

    # ---- the kernel's body (one block of lane vectors)

    def __call__(self, active, *columns):
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
        )
        if self.lane_finish is None:
            return self.results.lane_vectors(solution, lanes)
        return self.results.lane_vectors(self.lane_finish(params, solution, lanes=lanes), lanes)


def kernel_block(width: int) -> int:
    """Lanes per block: the plan's width rounded down to a power of two."""
    return 1 << (max(1, width).bit_length() - 1)


# Points of one call on CPU (interpret mode: tests and checks) when neither the
# sweep nor the study says.
CPU_BATCH = 256
# Lanes of a block on a GPU: one warp. A lane holds its whole solve in
# registers (float64 state, stages, event log), so small blocks; the GPU's
# occupancy comes from many blocks. (Not yet measured against other widths.)
GPU_BLOCK = 32
# Lanes of a block on CPU (interpret mode runs the blocks in turn).
CPU_BLOCK = 64
# Memory of one point of a call, a generous bound: its parameters, outputs
# and status in and out of the kernel (its working state lives in the kernel)
# and, where a start or finish runs outside the kernel, their XLA temporaries
# and the solution's columns, as a vmapped point's (bicycle_response: 3.2 KB
# of temporaries a point, measured on CPU).
POINT_BYTES = VMAPPED_POINT_BYTES


class FusedSolver(BatchSolver):
    """The whole hybrid solve of each point in one kernel (see the module's docstring)."""

    name = "fused"

    def __init__(self):
        self._checks: dict = {}

    def _check(self, study) -> "_Check":
        if not isinstance(study.solve_point, HybridPoint):
            return _Check("its point function is not declared as a HybridPoint")
        if study not in self._checks:
            self._checks[study] = _kernel_check(study)
        return self._checks[study]

    def unsupported(self, study) -> str | None:
        return self._check(study).reason

    def outside(self, study) -> dict[str, str]:
        """The parts of a fused study's point solve ("start", "finish") that
        run outside the kernel, as plain XLA around it, each with the reason it
        cannot run inside (with every output selected)."""
        return dict(self._check(study).outside)

    def default_batch(self, study, device: Device) -> int:
        if device.accelerator and device.memory:
            return memory_batch(device, POINT_BYTES)
        return study.batch_size or CPU_BATCH

    def default_width(self, batch: int, device: Device) -> int:
        return min(batch, GPU_BLOCK if device.accelerator else CPU_BLOCK)

    def working_bytes(self, plan: Plan) -> int:
        return plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)
        names = [p.name for p in study.parameters]
        block = kernel_block(plan.width)
        body = _Body(study.solve_point, settings, names, selected, block)
        interpret = not backend.compiles_for(plan.device.platform)
        # The kernel backend (engine.solve.kernel: Pallas, or the body generated
        # as C, one thread a point), chosen and built now: a failure falls back to Pallas.
        choice = choose_kernel_backend(body, plan.device.platform)

        def run(params, count=None):
            safe, admitted = jax.vmap(lambda p: safe_params(study, dtype, p))(params)
            n = next(iter(safe.values())).shape[0]
            count = n if count is None else jnp.minimum(count, n)
            padded = -(-n // block) * block
            active = (jnp.arange(padded) < count).astype(jnp.int32)
            # Padding lanes repeat the last point (solved, never active).
            inputs = body.inputs({k: jnp.pad(v, (0, padded - n), mode="edge") for k, v in safe.items()})
            out = choice.backend.block_call(body, [active] + inputs, body.out_dtypes, block, interpret)
            result = body.results_of(out, safe, n)
            return jax.vmap(lambda r, ok: masked(study, dtype, selected, r, ok))(result, admitted)

        run.kernel_backend = choice  # which backend runs the kernel, and why (benchmarks print it)
        return run


class _Check(NamedTuple):
    reason: str | None  # why the study cannot be fused (None: it can)
    outside: tuple[tuple[str, str], ...] = ()  # (part, why) of each part of its solve outside the kernel


# Ends a reason that is an unexpected failure of the fused check (a bug of the
# lane interpreter or a JAX it does not know yet), not a property of the study.
PLEASE_REPORT = "(please report this)"


def unexpected(error: Exception) -> str:
    """The part of a reason naming an exception raised while checking a study
    (its message's first line: a reason is said on one line)."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > 300:
        message = message[:300] + "..."
    return f"raised {type(error).__name__}: {message} {PLEASE_REPORT}"


def _kernel_check(study) -> _Check:
    """Whether the study's hybrid system makes a fused kernel, and where its
    start and finish run.

    The kernel body is traced for one block (cheap: nothing is compiled) and
    every primitive in it must have a rule in the kernel backend's GPU
    lowering. Its start and finish were placed (inside, or outside the kernel)
    before, so what fails here is the system's."""
    outputs = tuple(o.name for o in study.outputs)
    names = [p.name for p in study.parameters]
    try:
        with float64_here():  # traced as a run traces it (float64), whatever this process's setting
            body = _Body(study.solve_point, SolverSettings(), names, outputs, GPU_BLOCK)
            block = [jax.ShapeDtypeStruct((GPU_BLOCK,), dtype) for dtype in [jnp.int32] + body.input_dtypes]
            jaxpr = jax.make_jaxpr(body)(*block).jaxpr
        missing = _cannot_lower(jaxpr)
    except Unfusable as error:
        return _Check(f"its hybrid system cannot be fused into one kernel: {error}")
    except Exception as error:  # a failure of the check itself is a reason (the plan falls back), never a crash
        return _Check(f"tracing it for the kernel {unexpected(error)}")
    if missing:
        return _Check(f"its hybrid system's kernel would use {', '.join(missing)}, which the GPU kernel backend "
                      "cannot lower")
    return _Check(None, tuple(body.outside.items()))

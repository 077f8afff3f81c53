"""The fused solver: a batch's whole hybrid solves in one GPU kernel.

One lane of a block solves one point: its hybrid solve (every adaptive step,
event location, reset and mode switch: engine.solve.kernel.system) and, where
they can, the study's start before it and finish after it. On a GPU no step
is then a round trip to the host or to memory; on CPU the same kernel runs
in Pallas' interpret mode (that is how it is tested; on CPU the lanes solver
stays the default).

The kernel is not written per study: the study's own functions
(HybridPoint's start, system and finish) are traced for one point and
evaluated on lane vectors (engine.solve.kernel.jaxpr). The system must run
in the kernel (else the study is not fused, and `unsupported` says why). A
start or a finish that cannot (a LAPACK solve, complex numbers, an argmax
over the event log, a primitive the GPU compiler lacks) runs outside the
kernel instead, as plain XLA vmapped over the batch: the start before it,
its results (state, mode, the system's arguments, horizon) passed in as one
column per element; the finish after it, on the solutions the kernel writes
out (the fields it reads, one column per element). Where the sweep samples
times (`[save] times`), the kernel writes each point's states there from
inside its solve, after each accepted step (engine.solve.kernel.system._Samples,
the lanes solver's rules), and they leave it as columns like any field. Inside is cheaper (fewer
columns written and read), so a part runs outside only when it must. The
kernel language sits behind engine.solve.kernel.pallas.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from engine._jax_setup import float64_here
from engine.solve.base import BatchSolver, Plan, masked, safe_params
from engine.solve.device import Device
from engine.solve.hybrid import HybridPoint
from engine.solve.vmapped import POINT_BYTES as VMAPPED_POINT_BYTES
from engine.solve.vmapped import memory_batch
from engine.sweep.settings import SolverSettings


def kernel_block(width: int) -> int:
    """Lanes per block: the plan's width rounded down to a power of two."""
    return 1 << (max(1, width).bit_length() - 1)


# Points of one call on CPU when neither the sweep nor the study says (the
# host kernel, the CPU's kernel backend). Its calls cost little each, but a
# thread's points run in turn: measured (bouncing ball, 90,000 points, 2
# cores, `rollsweep run`'s own "solved in"), calls of 256 points 200-211k
# points/s, 1,024 257k, 4,096 267-269k.
CPU_BATCH = 4096
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

    def _check(self, study) -> "_Check":
        if not isinstance(study.solve_point, HybridPoint):
            return _Check("its point function is not declared as a HybridPoint")
        return _kernel_check(study)

    def unsupported(self, study) -> str | None:
        return self._check(study).reason

    def host_unsupported(self, study) -> str | None:
        """Why the study's kernel cannot be the generated C of the host backend
        (there it would run in Pallas's interpret mode); None where it can."""
        check = self._check(study)
        return check.reason or check.host

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
        # The kernel's modules (Pallas among them: 0.03 s) imported where a kernel
        # is made or checked: a CPU run of lanes never needs them.
        import engine.solve.kernel.pallas as backend
        import engine.solve.kernel.stored as stored
        from engine.solve.kernel.backends import choose as choose_kernel_backend
        from engine.solve.kernel.backends import default_backend, requested
        from engine.solve.kernel.body import KernelBody

        dtype = jnp.dtype(settings.dtype)
        names = [p.name for p in study.parameters]
        block = kernel_block(plan.width)
        body = KernelBody(study.solve_point, settings, names, selected, block)
        interpret = not backend.compiles_for(plan.device.platform)
        # The kernel backend (engine.solve.kernel: Pallas, or the body generated
        # as C, one thread a point), chosen and built now: a failure falls back to Pallas.
        source = stored.key(study, made="source", settings=repr(settings), selected=list(selected), block=block,
                            x64=jax.config.jax_enable_x64)
        choice = choose_kernel_backend(body, plan.device.platform, key=source)

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
        # A fallback (Pallas, where the backend asked for or the platform's own
        # could not be built) is not kept between processes: stored under the
        # program's key, a later process that could build the backend would get
        # the fallback's program (engine.solve.exported).
        run.stored_between_processes = choice.name == (requested() or default_backend(plan.device.platform))
        return run


class _Check(NamedTuple):
    reason: str | None  # why the study cannot be fused (None: it can)
    outside: tuple[tuple[str, str], ...] = ()  # (part, why) of each part of its solve outside the kernel
    host: str | None = None  # why its kernel cannot be generated as C for the host (None: it can)


@functools.cache  # a pure function of the study, asked by every plan: once per process
def _kernel_check(study) -> _Check:
    """`_traced_check`, read where an earlier process stored it
    (engine.solve.kernel.stored): a check that raised unexpectedly is not stored."""
    import engine.solve.kernel.stored as stored

    key = stored.key(study, made="check", block=GPU_BLOCK)
    found = stored.load(key, "check.json")
    if isinstance(found, dict):
        try:
            return _Check(found["reason"], tuple((part, why) for part, why in found["outside"]), found["host"])
        except (KeyError, TypeError, ValueError):
            pass  # not a check this engine wrote: traced again
    from engine.errors import PLEASE_REPORT

    check = _traced_check(study)
    if not (check.reason or "").endswith(PLEASE_REPORT):
        stored.store(key, "check.json", {"reason": check.reason, "outside": check.outside, "host": check.host})
    return check


def _traced_check(study) -> _Check:
    """Whether the study's hybrid system makes a fused kernel, and where its
    start and finish run.

    The kernel body is traced for one block (cheap: nothing is compiled) and
    every primitive in it must have a rule in the kernel backend's GPU
    lowering. Its start and finish were placed (inside, or outside the kernel)
    before, so what fails here is the system's."""
    from engine.solve.kernel.body import KernelBody, cannot_lower, unexpected
    from engine.solve.kernel.jaxpr import Unfusable

    # Traced without sample times (a sampled output reads them): whether the system
    # fuses does not depend on them; where a sampled sweep's finish runs is
    # decided as its kernel is made (KernelBody).
    outputs = tuple(o.name for o in study.outputs if not o.sampled)
    names = [p.name for p in study.parameters]
    try:
        with float64_here():  # traced as a run traces it (float64), whatever this process's setting
            body = KernelBody(study.solve_point, SolverSettings(), names, outputs, GPU_BLOCK)
            block = [jax.ShapeDtypeStruct((GPU_BLOCK,), dtype) for dtype in [jnp.int32] + body.input_dtypes]
            jaxpr = jax.make_jaxpr(body)(*block).jaxpr
        missing = cannot_lower(jaxpr)
    except Unfusable as error:
        return _Check(f"its hybrid system cannot be fused into one kernel: {error}")
    except Exception as error:  # a failure of the check itself is a reason (the plan falls back), never a crash
        return _Check(f"tracing it for the kernel {unexpected(error)}")
    if missing:
        return _Check(f"its hybrid system's kernel would use {', '.join(missing)}, which the GPU kernel backend "
                      "cannot lower")
    return _Check(None, tuple(body.outside.items()), _host_check(study, names, outputs))


def _host_check(study, names, outputs) -> str | None:
    """Why the kernel body, for one point, does not generate as C (the host
    backend's; a primitive without a C rule, an array written in place after
    it is read); None where it does. A sampled sweep's CPU default asks
    (engine.solve.plan), so that it never runs in Pallas's interpret mode."""
    from engine.solve.kernel.body import KernelBody, unexpected
    from engine.solve.kernel.c_source import KernelUnsupported
    from engine.solve.kernel.jaxpr import Unfusable
    from engine.solve.kernel.stored import kernel_source

    try:
        with float64_here():
            body = KernelBody(study.solve_point, SolverSettings(), names, outputs, 1)
        kernel_source(body, key=None)  # generated as the host backend generates it; not kept
    except (KernelUnsupported, Unfusable) as error:
        return str(error)
    except Exception as error:  # a failure of the check is a reason (the plan takes the lanes), never a crash
        return f"generating its C {unexpected(error)}"
    return None

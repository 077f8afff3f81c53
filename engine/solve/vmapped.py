"""The vmapped solver: `jax.vmap` of the study's per-point function.

Serves every study on every device. Points of a batch run in lockstep: a
loop inside the point function takes as many iterations as the batch's
slowest point, and padding rows are solved like real ones.
"""

import jax
import jax.numpy as jnp

from engine.solve.base import BatchSolver, Plan, masked, safe_params
from engine.solve.device import Device

# Points of one call on CPU when neither the sweep nor the study says: the
# points run in lockstep, so batches stay small.
CPU_BATCH = 256
# The same for a point function with no loop (a closed form): nothing runs in
# lockstep, and each call's fixed cost (~40-160 us) is spread over its points.
# A study of two parameters and two sums and products, 10^7 points, `rollsweep
# run` on 2 busy cores: calls of 256 solved 4.5M points/s (70% of the threads'
# time in 39,063 calls), of 65,536 17-19M; the rebound regime map's compiled
# calls on one core were fastest at 4,096-16,384 points.
CLOSED_FORM_BATCH = 16384
# Working memory of one vmapped point (solver stages, event log, loop carries
# of the studies' small states), a generous bound.
POINT_BYTES = 16 * 1024
# The share of an accelerator's memory one call's working set may plan on (the
# rest: the shard's arrays, XLA's buffers, other shards in flight).
DEVICE_SHARE = 4
# More points per call than this gain nothing on any device measured.
MAX_BATCH = 2**20


def memory_batch(device: Device, point_bytes: int) -> int:
    """Points whose working set fills an accelerator's share of memory."""
    return max(1, min(MAX_BATCH, device.memory // (DEVICE_SHARE * point_bytes)))


class VmappedSolver(BatchSolver):
    name = "vmapped"

    def default_batch(self, study, device: Device) -> int:
        if device.accelerator and device.memory:
            return memory_batch(device, POINT_BYTES)
        if study.batch_size:
            return study.batch_size
        return CPU_BATCH if loops(study) else CLOSED_FORM_BATCH

    def working_bytes(self, plan: Plan) -> int:
        return plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)

        def one(params):
            safe, admitted = safe_params(study, dtype, params)
            return masked(study, dtype, selected, study.solve_point(safe, settings), admitted)

        # Lockstep: every row of a batch is solved, padding included (count unused).
        return lambda params, count=None: jax.vmap(one)(params)


_LOOPS = ("while", "scan")


def loops(study) -> bool:
    """Whether the study's point function loops (a lax.while_loop or scan, as
    diffrax's solves do), read from its traced program; a study whose trace fails
    here counts as looping (the smaller batch is the safe one)."""
    from engine.solve.hybrid import HybridPoint
    from engine.sweep.settings import SolverSettings

    if isinstance(study.solve_point, HybridPoint):
        return True  # its segments' loop, without tracing it
    settings = SolverSettings()
    point = {p.name: jax.ShapeDtypeStruct((), jnp.dtype(settings.dtype)) for p in study.parameters}
    try:
        jaxpr = jax.make_jaxpr(lambda p: study.solve_point(p, settings))(point).jaxpr
    except Exception:  # noqa: BLE001 - any failure of the study's code is its own run's to report
        return True
    return _has_loop(jaxpr)


def _has_loop(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _LOOPS:
            return True
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns") and _has_loop(inner):
                    return True
    return False

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
        return study.batch_size or CPU_BATCH

    def working_bytes(self, plan: Plan) -> int:
        return plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)

        def one(params):
            safe, admitted = safe_params(study, dtype, params)
            return masked(study, dtype, selected, study.solve_point(safe, settings), admitted)

        # Lockstep: every row of a batch is solved, padding included (count unused).
        return lambda params, count=None: jax.vmap(one)(params)

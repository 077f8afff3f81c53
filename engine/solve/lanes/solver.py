"""The refilling lanes as a BatchSolver, and how large its calls are."""


import jax
import jax.numpy as jnp

from engine.solve.base import BatchSolver, Plan, masked, safe_params
from engine.solve.device import Device
from engine.solve.hybrid import HybridPoint
from engine.solve.lanes.batch import solve_batch
from engine.solve.vmapped import memory_batch

# Points of one call on CPU when neither the sweep nor the study says (a small sweep gets
# fewer, see engine.solve.plan). Large calls pay the drain of their last lanes
# less often: shards of 25,000 points measured 6% faster end to end in one call
# than in four calls of 8,192.
CPU_BATCH = 32768
# Lanes of a call: an eighth of its points, so each lane solves several in
# turn, up to MAX_LANES on CPU. Measured on CPU (rolling ball, compiled calls
# on 4 threads, 10-12 alternating runs, median points/s relative to 1,000
# lanes): calls of 25,000 points: 768: 0.99, 896: 0.95, 960: 0.98, 1,024:
# 0.87-0.88, 1,152: 0.97, 1,250: 0.99, 1,280: 0.97-1.01, 1,536: 0.87-0.91,
# 3,125 (an eighth): 0.89; calls of 8,192 points: 1,024: 0.995, 1,280: 1.01.
# (Why 1,024 and 1,536 lanes are slow on the larger calls only is not
# understood; 512 lanes on calls of 4,096 points are not.) Widths are whole
# vectors now (engine.solve.base.VECTOR); end to end, 200,000 points in shards
# of 25,000 (single runs, noisy): 800: 807k, 880: 661k, 960: 705k, 1,008:
# 696k, 1,104: 790k, 1,200: 822k and 822k, 1,296: 757k points/s.
POINTS_PER_LANE = 8
MAX_LANES = 1200
# Working memory of one lane (state, stages, event log, search) and of one
# point of a call (its start and its solution, kept until the call returns):
# generous bounds for the studies' small states.
LANE_BYTES = 16 * 1024
POINT_BYTES = 4 * 1024


class LanesSolver(BatchSolver):
    """Refilling lanes for studies declared as a HybridPoint (see the module's docstring)."""

    name = "lanes"

    def unsupported(self, study) -> str | None:
        if not isinstance(study.solve_point, HybridPoint):
            return "its point function is not declared as a HybridPoint"
        return None

    def default_batch(self, study, device: Device) -> int:
        if device.accelerator and device.memory:
            return memory_batch(device, LANE_BYTES // POINTS_PER_LANE + POINT_BYTES)
        return study.batch_size or CPU_BATCH

    def default_width(self, batch: int, device: Device) -> int:
        lanes = max(1, batch // POINTS_PER_LANE)
        return lanes if device.accelerator else min(MAX_LANES, lanes)

    def full_call(self, plan: Plan) -> int:
        """POINTS_PER_LANE points a lane: with fewer, a call's lanes spend much
        of it draining. The rolling ball, 100,000 points on 2 cores, 1,200
        lanes, `run()` in one process, three alternating rounds of 5 runs:
        tasks of 4,096 points 0.35-0.42 s (best of each round), 0.63-0.79 CPU
        seconds (median); tasks of 8,192: 0.32-0.34 s, 0.61-0.66."""
        return plan.width * POINTS_PER_LANE

    def working_bytes(self, plan: Plan) -> int:
        return plan.width * LANE_BYTES + plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)
        point = study.solve_point

        def finish(row, solution):
            p, admitted = row
            return masked(study, dtype, selected, point.finish(p, solution, settings), admitted)

        def run(params, count=None):
            safe, admitted = jax.vmap(lambda p: safe_params(study, dtype, p))(params)
            return solve_batch(point, safe, settings, plan.width, count, plan.device.accelerator, finish=finish,
                               inputs=(safe, admitted))

        return run

"""What a sweep will cost, estimated without running it, and the memory guard."""

import dataclasses
import math

import psutil

from ._config import ConfigError, Sweep
from ._hybrid import on_lanes
from ._layout import Layout, chunk_shape

# Bytes held per point while a shard is in flight: inputs and outputs on the
# device, their host copies, and the zarr encode buffers (three copies of 8 B each).
_COPIES = 3
# Working memory of one lane of a batched solve (solver stages, event log, loop
# carries), a generous bound for the studies' small states.
LANE_BYTES = 64 * 1024
# A study solved on refilling lanes also keeps, per point of a call, its start
# and its solution (state, event log) until the call returns: a generous bound.
POINT_BYTES = 4 * 1024
# Root-finding evaluations per critical point (Chandrupatla to 1e-12: ~10-40).
CRITICAL_EVALUATIONS = 40


@dataclasses.dataclass(frozen=True)
class Cost:
    points: int
    shards: int
    shard_points: int
    shard_bytes: int
    critical_points: int
    critical_shards: int
    memory_budget: int

    def describe(self) -> str:
        lines = [
            f"grid points      {self.points:,}",
            f"shards           {self.shards:,} of up to {self.shard_points:,} points",
            f"memory per shard {self.shard_bytes / 2**20:,.1f} MiB "
            f"(budget {self.memory_budget / 2**20:,.0f} MiB per worker)",
        ]
        if self.critical_points:
            lines.append(
                f"critical search  {self.critical_points:,} roots in {self.critical_shards:,} shards, "
                f"~{self.critical_points * CRITICAL_EVALUATIONS:,} extra point solves"
            )
        return "\n".join(lines)


def layouts(sweep: Sweep) -> tuple[Layout, Layout | None]:
    """The grid layout and, with [critical], the layout over the other axes."""
    chunks = chunk_shape(sweep.shape, sweep.shard_size)
    grid = Layout(sweep.shape, chunks)
    if sweep.critical is None:
        return grid, None
    keep = [i for i, name in enumerate(sweep.axis_names) if name != sweep.critical.axis]
    return grid, Layout(tuple(sweep.shape[i] for i in keep), tuple(chunks[i] for i in keep))


# Points of one compiled call when the sweep does not say: on CPU a vmapped point
# function runs them in lockstep, so batches stay small; a study solved on
# refilling lanes takes the whole shard in one call (its lanes are a fraction of
# it, see _evaluate). An accelerator takes as many as a share of its memory holds.
DEFAULT_BATCH = 256
# The share of an accelerator's memory one call's working set may plan on (the
# rest: the shard's arrays, XLA's buffers, other shards in flight).
DEVICE_SHARE = 4


def accelerator_memory() -> int | None:
    """Bytes the default JAX device may allocate, for an accelerator that reports
    it (GPUs do); None on CPU, where the host memory budget applies."""
    import jax

    device = jax.devices()[0]
    if device.platform == "cpu":
        return None
    return (device.memory_stats() or {}).get("bytes_limit")


def _device_lanes() -> int | None:
    """Lanes (or vmapped points) an accelerator's memory share holds."""
    memory = accelerator_memory()
    return None if memory is None else max(1, memory // (DEVICE_SHARE * LANE_BYTES))


def batch_size(sweep: Sweep) -> int:
    """Points of one compiled call: never more than a shard holds. One constant per
    sweep, so every shard (and the critical search) runs one compiled program."""
    shard_points = math.prod(layouts(sweep)[0].chunks)
    if sweep.batch_size is not None:
        return min(sweep.batch_size, shard_points)
    if on_lanes(sweep.study):
        return shard_points
    device_lanes = _device_lanes()
    if device_lanes is None:
        return min(sweep.study.batch_size or DEFAULT_BATCH, shard_points)
    return min(device_lanes, shard_points)


# Lanes of a study solved on refilling lanes: an eighth of the call's points, so
# each lane solves several in turn, up to MAX_LANES on CPU or what an
# accelerator's memory share holds. Measured on CPU (rolling ball, compiled calls
# on 4 threads, 10-12 alternating runs, median points/s relative to 1,000 lanes):
# calls of 25,000 points: 768: 0.99, 896: 0.95, 960: 0.98, 1,024: 0.87-0.88,
# 1,152: 0.97, 1,250: 0.99, 1,280: 0.97-1.01, 1,536: 0.87-0.91, 3,125 (an
# eighth): 0.89; calls of 8,192 points: 1,024: 0.995, 1,280: 1.01. (Why 1,024
# and 1,536 lanes are slow on the larger calls only is not understood; 512
# lanes on calls of 4,096 points are not.)
POINTS_PER_LANE = 8
MAX_LANES = 1000


def default_lanes(batch_size: int) -> int:
    device_lanes = _device_lanes()
    most = MAX_LANES if device_lanes is None else device_lanes
    return max(1, min(most, batch_size // POINTS_PER_LANE))


def working_bytes(sweep: Sweep) -> int:
    """Memory of one compiled call beyond the shard's own arrays."""
    batch = batch_size(sweep)
    if on_lanes(sweep.study):
        return default_lanes(batch) * LANE_BYTES + batch * POINT_BYTES
    return batch * LANE_BYTES


def estimate(sweep: Sweep, workers: int = 1) -> Cost:
    grid, critical = layouts(sweep)
    n_values = sum(math.prod(sweep.study.outputs_by_name[n].shape) for n in sweep.outputs) + len(sweep.axes) + 3
    shard_points = math.prod(grid.chunks)
    shard_bytes = shard_points * n_values * 8 * _COPIES + working_bytes(sweep)
    budget = psutil.virtual_memory().total // (2 * max(1, workers))
    return Cost(
        points=grid.n_points,
        shards=grid.n_shards,
        shard_points=shard_points,
        shard_bytes=shard_bytes,
        critical_points=critical.n_points if critical else 0,
        critical_shards=critical.n_shards if critical else 0,
        memory_budget=budget,
    )


def fits_in_memory(sweep: Sweep, workers: int) -> bool:
    """Whether `workers` of the sweep's shards at a time fit the host memory budget."""
    cost = estimate(sweep, workers)
    return cost.shard_bytes <= cost.memory_budget


def check_memory(sweep: Sweep, workers: int = 1) -> Cost:
    """Refuse a sweep whose shards (`workers` of them at once) would not fit in
    host memory, or whose compiled calls would not fit in the accelerator's."""
    cost = estimate(sweep, workers)
    memory = accelerator_memory()
    if memory is not None and working_bytes(sweep) * workers > memory:
        raise ConfigError(
            sweep.file,
            "run.batch_size",
            f"a compiled call needs ~{working_bytes(sweep) / 2**30:.1f} GiB of device memory, "
            f"{workers} at once, but the device has {memory / 2**30:.1f} GiB; lower batch_size",
        )
    if cost.shard_bytes > cost.memory_budget:
        batch_heavy = sweep.batch_size is not None and working_bytes(sweep) > cost.shard_bytes / 2
        key = "run.batch_size" if batch_heavy else "run.shard_size"
        raise ConfigError(
            sweep.file,
            key,
            f"a shard needs ~{cost.shard_bytes / 2**30:.1f} GiB but a worker may use "
            f"{cost.memory_budget / 2**30:.1f} GiB; lower {key.split('.')[1]}",
        )
    return cost

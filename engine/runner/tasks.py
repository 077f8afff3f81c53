"""Tasks: what one solving thread hands its device in one go.

A shard (one zarr chunk, its done marker and checksum) follows the sweep and
the study alone, so a store made on one machine resumes on another. A task
follows the device: pending shards taken in order and solved together, their
points concatenated into the compiled calls of the run's plan, so that a call
carries close to a full batch however small the shards are. Each shard of a
task still writes its own region and drops its own marker, and a point's
result depends on its parameters alone (every call has the plan's batch
shape), so the cube is the same bits whatever the grouping.

Measured before tasks, on one H200: a 1M-point sweep in shards of 4,096
points was 245 calls each padded to a 2^20-point batch, 64k points/s, against
14M points/s for the same kernel's compiled calls.
"""

import dataclasses
import math

# On CPU a task holds at most this many points (unless one shard or one call
# is larger): large enough that the store writes and the host work around a
# call are a small share of its time, small enough that progress moves and a
# killed run loses little.
CPU_TASK_POINTS = 1 << 17
# On CPU, tasks per thread at least (where the run has the points): points
# differ in cost, and a thread that finishes early takes another task.
TASKS_PER_THREAD = 4
# ... and at least this many where tasks are made larger to fill their calls.
MIN_TASKS_PER_THREAD = 2


@dataclasses.dataclass(frozen=True)
class Task:
    """Shards of one kind ("grid" or "critical") solved in one go."""

    kind: str
    shards: tuple[int, ...]
    sizes: tuple[int, ...]  # each shard's points

    @property
    def points(self) -> int:
        return sum(self.sizes)


# On an accelerator a task holds the shards that fill its calls best: each call
# has the plan's batch, the last one padded. One shard a call left most of a call
# idle where shards and calls do not match: the 1e8-point stream on one H100
# (shards of 1,040,000 points, calls of 972,960) made two calls a shard, the
# second 93% padding. A task takes the fewest calls whose padding is at most
# ACCELERATOR_PADDING of them, up to ACCELERATOR_TASK_CALLS calls and
# ACCELERATOR_TASK_POINTS points (its host memory: 2^22 points of the rolling
# ball's ten values a point, three copies of each, are 1 GB) and a thread's
# share of the run.
ACCELERATOR_PADDING = 0.1
ACCELERATOR_TASK_CALLS = 8
ACCELERATOR_TASK_POINTS = 1 << 22


def task_points(plan, points: int, threads: int, shard_points: int = 0) -> int:
    """Points a task aims at, for a run of `points` points on `threads` threads
    whose shards hold up to `shard_points` points each.

    On an accelerator whole shards filling whole calls of the plan's batch
    (accelerator_shards): the device is filled by each call, and a thread
    preparing or writing one task while the other's calls run keeps it busy. On
    CPU a share of the run that gives each thread TASKS_PER_THREAD tasks, so that
    every core works to the end, up to CPU_TASK_POINTS (or one call, if larger);
    but at least what fills a call of the plan's solver (BatchSolver.full_call),
    where every thread still gets MIN_TASKS_PER_THREAD tasks.
    """
    threads = max(1, threads)
    if plan.device.accelerator:
        if shard_points < 1:
            return plan.batch
        # At least one call's worth (a run of fewer points than two calls is not cut
        # into one-shard tasks, each a whole call mostly padding), at most the caps.
        most = max(shard_points, plan.batch, min(ACCELERATOR_TASK_CALLS * plan.batch, ACCELERATOR_TASK_POINTS,
                                                 math.ceil(points / threads)))
        return shard_points * accelerator_shards(plan.batch, shard_points, most)
    share = math.ceil(points / (TASKS_PER_THREAD * threads))
    share = max(share, min(plan.solver.full_call(plan), math.ceil(points / (MIN_TASKS_PER_THREAD * threads))))
    return max(1, min(share, max(plan.batch, CPU_TASK_POINTS)))


def accelerator_shards(batch: int, shard: int, most: int) -> int:
    """Shards of `shard` points a task holds on an accelerator (calls of `batch`
    points): as many as fit the fewest calls padded by at most
    ACCELERATOR_PADDING, else the least padded, holding at most `most` points
    (at least one shard)."""
    best, least = 1, 1 - shard / (math.ceil(shard / batch) * batch)  # one shard
    for calls in range(1, ACCELERATOR_TASK_CALLS + 1):
        shards = calls * batch // shard
        if shards < 1:
            continue
        if shards * shard > most:
            break
        padding = 1 - shards * shard / (calls * batch)
        if padding <= ACCELERATOR_PADDING:
            return shards
        if padding < least:
            best, least = shards, padding
    return best


def tasks_for(pending, plan, threads: int) -> list[Task]:
    """Pending shards, (kind, shard, points) in order, as the tasks a run of them
    solves on `threads` threads with `plan` (task_points, then group)."""
    sizes = [points for _, _, points in pending]
    return group(pending, task_points(plan, sum(sizes), threads, max(sizes, default=0)))


def group(pending, size: int) -> list[Task]:
    """Pending shards, (kind, shard, points) in order, as tasks of up to `size`
    points: consecutive shards of one kind, at least one shard a task."""
    tasks: list[Task] = []
    kind, shards, sizes, held = None, [], [], 0
    for k, shard, points in pending:
        if shards and (k != kind or held + points > size):
            tasks.append(Task(kind, tuple(shards), tuple(sizes)))
            shards, sizes, held = [], [], 0
        kind = k
        shards.append(shard)
        sizes.append(points)
        held += points  # kept, not summed again per shard: a run may have 10^6 shards
    if shards:
        tasks.append(Task(kind, tuple(shards), tuple(sizes)))
    return tasks

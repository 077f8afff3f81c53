"""How a run cuts its pending shards into tasks (engine.runner.tasks): on CPU a
share of the run per thread, made large enough to fill a call of the lanes
where every thread still gets two tasks; on an accelerator one call."""

import math

import pytest

from engine.runner.tasks import (
    ACCELERATOR_PADDING,
    ACCELERATOR_TASK_CALLS,
    CPU_TASK_POINTS,
    MIN_TASKS_PER_THREAD,
    TASKS_PER_THREAD,
    accelerator_shards,
    group,
    task_points,
)
from engine.solve import Device, make_plan
from engine.study.interface import load_study

CPU = Device(platform="cpu", count=1, memory=None, cores=2)
GPU = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)


def test_a_lanes_task_fills_its_call_where_the_run_has_the_points():
    pingpong = load_study("pingpong")
    plan = make_plan(pingpong, CPU, points=100_000)
    full = plan.solver.full_call(plan)
    assert full == plan.width * 8 > 100_000 // (TASKS_PER_THREAD * 4)
    assert task_points(plan, 100_000, 4) == full
    # A small run: still two tasks a thread, however little they fill a call.
    assert task_points(plan, 30_000, 4) == -(-30_000 // (MIN_TASKS_PER_THREAD * 4))
    # A large one: the thread's share, up to CPU_TASK_POINTS.
    assert task_points(plan, 400_000, 4) == 400_000 // (TASKS_PER_THREAD * 4)
    assert task_points(plan, 10**8, 4) == CPU_TASK_POINTS


def test_a_vmapped_task_is_the_threads_share():
    plan = make_plan(load_study("bicycle"), CPU, points=100_000)
    assert plan.solver.name == "vmapped"
    assert task_points(plan, 100_000, 4) == 100_000 // (TASKS_PER_THREAD * 4)


def test_an_accelerator_task_of_small_shards_is_one_call():
    plan = make_plan(load_study("rebound_regime"), GPU, points=10**7)
    assert task_points(plan, 10**7, 2) == plan.batch  # shard sizes unknown: one call
    shard = 32_768
    aim = task_points(plan, 10**7, 2, shard)
    assert aim == plan.batch // shard * shard  # the whole shards one call holds


@pytest.mark.parametrize("points", [10**5, 10**6, 2 * 10**6])
def test_an_accelerator_run_of_few_calls_is_not_cut_into_one_shard_tasks(points):
    """A run of fewer points than two calls a thread, shards of 32,768: each task
    still fills a call (the whole shards one call holds), not one shard padded
    to a whole call (1e6 points on a GPU: 31 calls instead of 2)."""
    plan = make_plan(load_study("pingpong"), GPU, points=points)
    shard = 32_768
    aim = task_points(plan, points, 2, shard)
    assert aim == plan.batch // shard * shard, (plan.batch, aim)
    tasks = group([("grid", i, shard) for i in range(-(-points // shard))], aim)
    assert len(tasks) == -(-points // aim)


def _padding(batch, shard, shards):
    return 1 - shards * shard / (math.ceil(shards * shard / batch) * batch)


@pytest.mark.parametrize("batch, shard", [(972_960, 1_040_000), (972_960, 600_000), (2**20, 3 * 2**18),
                                          (1000, 1001), (2**20, 2**20)])
def test_an_accelerator_task_holds_the_shards_that_fill_its_calls(batch, shard):
    """Shards larger than a call, or not dividing it: not one shard a task, its
    last call mostly padding (1e8 points on one H100: shards of 1,040,000 points,
    calls of 972,960, every second call 93% padding), but the fewest calls whose
    padding is at most ACCELERATOR_PADDING."""
    shards = accelerator_shards(batch, shard, most=10**12)
    candidates = [k for k in range(1, ACCELERATOR_TASK_CALLS * batch // shard + 1)
                  if math.ceil(k * shard / batch) <= ACCELERATOR_TASK_CALLS]
    least = min(_padding(batch, shard, k) for k in candidates)
    assert _padding(batch, shard, shards) <= max(ACCELERATOR_PADDING, least)  # (1000, 1001): 12% at best
    fewer = [k for k in range(1, shards) if _padding(batch, shard, k) <= ACCELERATOR_PADDING]
    calls = math.ceil(shards * shard / batch)
    assert all(math.ceil(k * shard / batch) >= calls for k in fewer)  # no fewer calls would do
    assert calls <= ACCELERATOR_TASK_CALLS


def test_an_accelerator_task_stays_within_its_threads_share():
    batch, shard = 972_960, 1_040_000
    assert accelerator_shards(batch, shard, most=shard) == 1
    assert accelerator_shards(batch, shard, most=2 * shard) == 2  # 3 calls, 29% padding: better than 47%
    plan = make_plan(load_study("pingpong"), GPU, points=10**8, batch=batch)
    assert task_points(plan, 10**8, 2, shard) == 4 * shard  # 5 calls, 14.5% padding: 2^22 points at most
    assert task_points(plan, 2 * shard, 2, shard) == shard  # each of the 2 threads a shard


def test_tasks_are_consecutive_shards_of_one_kind_up_to_the_aim():
    pending = [("grid", 0, 4096), ("grid", 1, 4096), ("grid", 2, 4096), ("grid", 3, 100), ("critical", 0, 10)]
    tasks = group(pending, 9600)
    assert [(t.kind, t.shards, t.points) for t in tasks] == [
        ("grid", (0, 1), 8192), ("grid", (2, 3), 4196), ("critical", (0,), 10)]
    assert [t.shards for t in group(pending[:1], 10)] == [(0,)]  # a shard larger than the aim is a task


@pytest.mark.parametrize("shape, shard_size, shards", [((7, 5, 3), 8, (0, 1, 5, 9)), ((10,), 4, (2, 0)),
                                                       ((6, 4), 24, (0,)), ((5, 9), 7, tuple(range(10)))])
def test_a_tasks_points_are_its_shards_blocks_one_after_another(shape, shard_size, shards):
    """Layout.points writes each shard's block (C order) into the task's columns in turn:
    the same values as a mesh of each shard's region, joined."""
    import numpy as np

    from engine.sweep.layout import Layout, chunk_shape

    layout = Layout(shape, chunk_shape(shape, shard_size))
    axes = [np.linspace(-1.0, 2.0, n) * (i + 1) for i, n in enumerate(shape)]
    expected = [[] for _ in shape]
    for shard in shards:
        region = layout.region(shard)
        mesh = np.meshgrid(*[a[s] for a, s in zip(axes, region, strict=True)], indexing="ij")
        for column, m in zip(expected, mesh, strict=True):
            column.append(m.ravel())
    for got, want in zip(layout.points(shards, axes), expected, strict=True):
        np.testing.assert_array_equal(got, np.concatenate(want))

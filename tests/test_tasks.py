"""How a run cuts its pending shards into tasks (engine.runner.tasks): on CPU a
share of the run per thread, made large enough to fill a call of the lanes
where every thread still gets two tasks; on an accelerator one call."""

from engine.runner.tasks import CPU_TASK_POINTS, MIN_TASKS_PER_THREAD, TASKS_PER_THREAD, group, task_points
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


def test_an_accelerator_task_is_one_call():
    plan = make_plan(load_study("rebound_regime"), GPU, points=10**7)
    assert task_points(plan, 10**7, 2) == plan.batch


def test_tasks_are_consecutive_shards_of_one_kind_up_to_the_aim():
    pending = [("grid", 0, 4096), ("grid", 1, 4096), ("grid", 2, 4096), ("grid", 3, 100), ("critical", 0, 10)]
    tasks = group(pending, 9600)
    assert [(t.kind, t.shards, t.points) for t in tasks] == [
        ("grid", (0, 1), 8192), ("grid", (2, 3), 4196), ("critical", (0,), 10)]
    assert [t.shards for t in group(pending[:1], 10)] == [(0,)]  # a shard larger than the aim is a task

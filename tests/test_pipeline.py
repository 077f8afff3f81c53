"""A run on an accelerator is a pipeline (engine.runner.pipeline): this thread
queues each task's calls, writer threads gather, write and mark. Taken here on
the CPU by a plan for a stubbed GPU: the same cube as task threads give, at
most `writers` + 1 tasks held, a study's error recorded shard by shard, and a
disk error stops the run with only whole shards marked done."""

import threading
import time

import pytest

import engine.runner.shard as shard
from engine.cube.markers import GRID
from engine.cube.store import Cube, open_cube
from engine.runner.execute import run
from engine.runner.pipeline import PIPELINE
from engine.solve import Device, make_plan

from conftest import cubes_identical, regime_grid

pytestmark = pytest.mark.cpu_only(reason="a stubbed GPU plan's calls run on the CPU")

GPU = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)
WRITERS = 2


def regime_sweep(tmp_path, name, shard_size=40):
    return regime_grid(tmp_path, name, shard_size)


def gpu_plan(sweep, batch=64):
    return make_plan(sweep.study, GPU, solver="vmapped", batch=batch)


def cube(sweep):
    return open_cube(sweep.out).load().drop_attrs()


def test_a_pipelined_run_writes_the_cube_task_threads_and_the_cpu_write(tmp_path, monkeypatch):
    where = {"start": set(), "finish": set()}
    start_task = shard.start_task

    def recorded(cube, plan, task):
        where["start"].add(threading.current_thread().name)
        finish = start_task(cube, plan, task)

        def finished():
            where["finish"].add(threading.current_thread().name.rsplit("_", 1)[0])
            return finish()

        return finished

    monkeypatch.setattr(shard, "start_task", recorded)
    piped = regime_sweep(tmp_path, "piped")
    report = run(piped, plan=gpu_plan(piped), workers=WRITERS, progress=False)
    assert report.shards_run == 21 and report.failed_shards == 0  # shards of 1 x 30 points
    assert where == {"start": {threading.current_thread().name}, "finish": {"rollsweep-writer"}}
    assert report.threads == WRITERS + 1

    monkeypatch.setenv(PIPELINE, "0")
    threads = regime_sweep(tmp_path, "threads")
    run(threads, plan=gpu_plan(threads), workers=WRITERS, progress=False)
    monkeypatch.delenv(PIPELINE)
    on_cpu = regime_sweep(tmp_path, "cpu")
    run(on_cpu, progress=False)
    assert cubes_identical(cube(piped), cube(threads))
    assert cubes_identical(cube(piped), cube(on_cpu))


def test_the_feeding_thread_holds_at_most_one_task_a_device_beyond_the_writers(tmp_path, monkeypatch):
    """Writers slower than the feeding: the feeding thread runs ahead until it
    holds one task more than the writers, and no further."""
    lock, held, most = threading.Lock(), [0], [0]
    start_task = shard.start_task

    def counted(cube, plan, task):
        finish = start_task(cube, plan, task)
        with lock:
            held[0] += 1
            most[0] = max(most[0], held[0])

        def finished():
            time.sleep(0.05)
            try:
                return finish()
            finally:
                with lock:
                    held[0] -= 1

        return finished

    monkeypatch.setattr(shard, "start_task", counted)
    sweep = regime_sweep(tmp_path, "held", shard_size=20)
    report = run(sweep, plan=gpu_plan(sweep), workers=WRITERS, progress=False)
    assert report.shards_run == 42 and held == [0]  # shards of 1 x 20 points
    assert most[0] == WRITERS + GPU.count


@pytest.mark.parametrize("half", ["start", "finish"])
def test_a_study_error_in_either_half_fails_only_the_shard_that_raises(tmp_path, monkeypatch, half):
    """A task whose calls raise when queued, or when gathered, is run again shard
    by shard (as task threads do): the shard holding the bad points is recorded
    failed, its neighbours are written."""
    start_grid_task = shard.start_grid_task
    bad = 5

    def failing(cube, plan, task):
        if half == "start" and bad in task.shards:
            raise RuntimeError("a study's bug, at its calls")
        finish = start_grid_task(cube, plan, task)

        def finished():
            if bad in task.shards:
                raise RuntimeError("a study's bug, in its results")
            return finish()

        return finished

    monkeypatch.setattr(shard, "start_grid_task", failing)
    sweep = regime_sweep(tmp_path, f"fails_{half}", shard_size=20)
    report = run(sweep, plan=gpu_plan(sweep), workers=WRITERS, progress=False)
    assert report.failed_shards == 1
    stored = Cube(sweep.out, sweep)
    assert sorted(stored.markers.done(GRID)) == [s for s in range(42) if s != bad]
    (failed,) = stored.markers.failed()
    assert failed["shard"] == bad and "a study's bug" in failed["error"]


@pytest.mark.parametrize("where", ["writing", "feeding"])
def test_a_disk_error_stops_the_run_and_a_second_run_completes_the_cube(tmp_path, monkeypatch, where):
    """An OSError in a writer (a full disk) or on the feeding thread (packing a
    task) stops the run once the tasks being written end: their shards are whole
    and marked, and the next run completes the cube."""
    calls = [0]
    write_regions, start_grid_task = Cube.write_regions, shard.start_grid_task

    def full_disk(self, regions):
        calls[0] += 1
        if calls[0] == 4:
            raise OSError(28, "No space left on device")
        return write_regions(self, regions)

    def failing_start(cube, plan, task):
        calls[0] += 1
        if calls[0] == 6:
            raise OSError(5, "Input/output error")
        return start_grid_task(cube, plan, task)

    if where == "writing":
        monkeypatch.setattr(Cube, "write_regions", full_disk)
    else:
        monkeypatch.setattr(shard, "start_grid_task", failing_start)
    sweep = regime_sweep(tmp_path, "disk", shard_size=20)
    with pytest.raises(OSError, match="No space left" if where == "writing" else "Input/output error"):
        run(sweep, plan=gpu_plan(sweep), workers=WRITERS, progress=False)
    done = Cube(sweep.out, sweep).markers.done(GRID)
    assert 0 < len(done) < 42
    monkeypatch.undo()
    report = run(sweep, plan=gpu_plan(sweep), workers=WRITERS, progress=False)
    assert report.state == "resumed" and report.shards_run == 42 - len(done)
    fresh = regime_sweep(tmp_path, "fresh", shard_size=20)
    run(fresh, progress=False)
    assert cubes_identical(cube(sweep), cube(fresh))
    assert len(Cube(sweep.out, sweep).markers.done(GRID)) == 42


def test_a_writer_queues_a_tasks_later_calls_into_arrays_of_earlier_tasks(tmp_path, monkeypatch):
    """Tasks of several calls (16 points a call): the feeding thread queues the
    first calls, the writer the rest as earlier ones end (as the first were:
    engine.solve.evaluate.Queued), into whole arrays that earlier tasks gave
    back, each poisoned when given back: the cube is the CPU plan's."""
    import engine.solve._host_memory as host_memory

    monkeypatch.setattr(host_memory, "MMAP_THRESHOLD", 64)
    host_memory.forget_reused_arrays()
    give_back, handed = host_memory._free.give_back, []

    def poisoned(arrays):
        for array in arrays:
            array.fill(7)
        handed.extend(arrays)
        give_back(arrays)

    monkeypatch.setattr(host_memory._free, "give_back", poisoned)
    piped = regime_sweep(tmp_path, "calls", shard_size=120)
    report = run(piped, plan=gpu_plan(piped, batch=16), workers=WRITERS, progress=False)
    assert report.failed_shards == 0 and len(handed) > 10
    on_cpu = regime_sweep(tmp_path, "calls_cpu", shard_size=120)
    run(on_cpu, progress=False)
    assert cubes_identical(cube(piped), cube(on_cpu))

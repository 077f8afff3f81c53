"""On an accelerator, a run as a pipeline: the device fed back to back, the writes beside it.

The run's own thread feeds: it packs each task's points and queues its calls on
a device (the machine's devices in turn), then hands the task to one of the
writer threads, which gathers the calls' results, writes the task's shards
(each chunk a job of the process's chunk writers, on every core:
engine.cube.chunks) and marks them done. The feeding thread never waits on
the disk, so while the writers write, the next task's calls are already on the
device's queue. At most `writers` tasks are being written and one more per
device is queued; what a run holds at once is what `in_flight` counts for the
memory check.

Nothing changes in what a task is or writes: each shard its own region, its
marker after its writes (a kill at any moment leaves only whole shards marked
done), a study's error recorded shard by shard (engine.runner.shard), a disk
error the run's. ROLLSWEEP_PIPELINE=0 runs an accelerator's tasks as a CPU's
are (each task whole on one of the task threads).
"""

import concurrent.futures
import os

from engine.runner.shard import start_or_record
from engine.solve.base import Plan
from engine.solve.device import Device, call_on, local_devices

PIPELINE = "ROLLSWEEP_PIPELINE"


def pipelined(device: Device) -> bool:
    """Whether a run on `device` (a Plan's) in this process is a pipeline: on
    an accelerator, unless $ROLLSWEEP_PIPELINE is 0."""
    return device.accelerator and os.environ.get(PIPELINE, "").strip() != "0"


def held(writers: int, device: Device) -> int:
    """Tasks a pipeline holds at once: one being written by each writer, one
    queued on each of the device's kind."""
    return writers + device.count


def pipelined_results(cube, plan: Plan, tasks, writers: int):
    """Each task's report as its shards are marked done (in the order they
    finish). `writers` threads write; this thread feeds. A task's writer works
    on the device its calls went to: the calls it queues as earlier ones end,
    a critical task's searches, a retry after a study's error, and the device
    its markers name."""
    devices = local_devices(plan.device.platform)
    most = held(writers, plan.device)
    pool = concurrent.futures.ThreadPoolExecutor(writers, thread_name_prefix="rollsweep-writer")
    running: set = set()
    try:
        for k, task in enumerate(tasks):
            while len(running) >= most:
                yield from _finished(running)
            device = devices[k % len(devices)] if len(devices) > 1 else None
            finish = call_on(device, start_or_record, cube, plan, task)
            running.add(pool.submit(call_on, device, finish))
        while running:
            yield from _finished(running)
    finally:
        # A disk error stops the run: the tasks queued are dropped, those being
        # written end first (their regions whole, or left pending for the next run).
        pool.shutdown(wait=True, cancel_futures=True)


def _finished(running: set):
    """The reports of the tasks that finished first (at least one, waited for)."""
    done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
    for future in done:
        running.discard(future)
        yield future.result()

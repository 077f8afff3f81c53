"""Where a run's time goes: seconds per stage, measured where the work is done.

A clock charges the time of the thread it runs on to one stage at a time. A
stage entered inside another pauses the outer one, so the stages of a clock
are exclusive and add up to the time it ran. Code deep in a layer (a copy to
the device in `engine.solve.evaluate`, a region written in `engine.cube`)
marks its stage with `stage(name)`; it is charged to the clock running on
its thread, if any, and costs nothing where none is (a notebook's
`evaluate`). A task runs under a clock of its own and reports its seconds
with its result, so the run adds up the work of its threads, dask workers
and array tasks alike.
"""

import contextlib
import os
import threading
import time

# A run's stages, in the order of its report: (name, what it holds).
RUN_STAGES = (
    ("start-up", "the interpreter's start and the imports, before the run was called"),
    ("planning", "the sweep read and planned, the runner's modules imported, memory checked, tasks made"),
    ("program", "the solver's program read or traced and lowered, or its kept executable found, ahead of the "
                "tasks; compiled or loaded beside the store"),
    ("store", "the cube made ready: created, or resumed and checked"),
    ("solving", "the tasks, from the first handed out to the last one's report"),
    ("closing", "after the last task: a [sensitivity] sweep's indices computed, the store released, the report "
                "made"),
)
# A task's stages: the solving stage's time on the threads (or workers) that ran tasks.
TASK_STAGES = (
    ("packing", "host work on a task's points: columns built, padded, outputs cut into shards"),
    ("compile", "the solver's program traced or loaded and compiled, and threads waiting for it"),
    ("copy in", "parameters' copies to the device issued"),
    ("device", "compiled calls (and their inputs' copies) running, from queued to finished"),
    ("copy out", "results copied back from the device"),
    ("writes", "the shards' regions written into the store"),
    ("markers", "the shards' done markers written"),
)
# The stage of a task's time that no inner stage claims.
TASK_DEFAULT = "packing"

_current = threading.local()


class Clock:
    """Exclusive seconds per stage of one thread's work: the innermost stage
    entered is charged until it is left or another is entered."""

    def __init__(self, default: str):
        self.seconds: dict[str, float] = {}
        self._stack = [default]
        self._since = time.perf_counter()

    def _charge(self) -> None:
        """The time since the last change charged to the innermost stage."""
        now = time.perf_counter()
        name = self._stack[-1]
        self.seconds[name] = self.seconds.get(name, 0.0) + (now - self._since)
        self._since = now

    def enter(self, name: str) -> None:
        self._charge()
        self._stack.append(name)

    def leave(self) -> None:
        self._charge()
        self._stack.pop()

    def stop(self) -> dict[str, float]:
        """The seconds so far, the running stage charged up to now."""
        self._charge()
        return dict(self.seconds)


def current() -> Clock | None:
    """The clock running on this thread, if any."""
    return getattr(_current, "clock", None)


@contextlib.contextmanager
def running(clock: Clock):
    """`clock` charged by this thread's stages for the block (the clock that ran
    before comes back after: a task run inside another's thread keeps its own)."""
    before = getattr(_current, "clock", None)
    _current.clock = clock
    try:
        yield clock
    finally:
        _current.clock = before


@contextlib.contextmanager
def stage(name: str):
    """The block's time charged to stage `name` of this thread's clock (if one runs)."""
    clock = getattr(_current, "clock", None)
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.leave()


def add(total: dict[str, float], seconds: dict[str, float]) -> dict[str, float]:
    """`total` with `seconds` added stage by stage (in place; returned)."""
    for name, value in seconds.items():
        total[name] = total.get(name, 0.0) + value
    return total


def seconds_since_start() -> float:
    """Seconds since this process started. On Linux from its start in clock ticks
    after boot (/proc/self/stat) against the clock since boot: psutil's creation
    time adds the boot time, which the system keeps in whole seconds."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, AttributeError, ValueError, IndexError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


def table(run: dict[str, float], tasks: dict[str, float], threads: int) -> str:
    """A run's stages (RUN_STAGES, seconds) as lines, the solving stage's split
    into the tasks' stages (TASK_STAGES and "waiting", in seconds of `threads`
    threads or workers, and as their share of those threads' time)."""
    whole = sum(run.values())
    lines = [f"where the time went: {whole:.2f} s in all"]
    thread_seconds = sum(tasks.values())
    for name, what in RUN_STAGES:
        if name not in run:
            continue
        lines.append(f"  {name:<10} {run[name]:7.3f} s  {what}")
        if name == "solving" and thread_seconds > 0:
            lines.append(f"    on {threads} thread{'s' * (threads != 1)} (thread-seconds, share of their time):")
            for task_stage, task_what in (*TASK_STAGES, ("waiting", "threads in no task: waiting for one, or idle")):
                value = tasks.get(task_stage, 0.0)
                lines.append(f"      {task_stage:<9} {value:7.3f} s {100 * value / thread_seconds:5.1f}%  {task_what}")
    return "\n".join(lines)

"""Running a sweep: prepare the store, schedule pending shards, show progress.

Executors: "inline" (this process, `workers` tasks at a time on threads),
"local" (an embedded dask LocalCluster, worker processes sized to the machine)
or an existing dask scheduler. One dask task is one task of shards
(engine.runner.tasks): contiguous pending shards that fill the plan's compiled
calls (on CPU a thread's share of the run), the plan made once per run (and
once per worker process) from the sweep and the device.
"""

import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import os
import threading
import time

import engine.stages as stages
from engine._jax_setup import SINGLE_THREAD_XLA, check_device, configure, task_settings
from engine.cube.lock import locked
from engine.cube.markers import CRITICAL, KINDS
from engine.cube.prepare import existing, identity_difference, prepare, solves_something
from engine.cube.store import Cube
from engine.errors import ConfigError, StoreError
from engine.runner.ahead import load_ahead_of_run
from engine.runner.cost import check_memory, fits_in_memory, plan_for
from engine.runner.pipeline import held, pipelined, pipelined_results
from engine.runner.progress import progress_bar
from engine.runner.shard import record_failure, run_or_record, solved_with
from engine.runner.tasks import Task, tasks_for
from engine.solve._host_memory import forget_reused_arrays
from engine.solve.base import Plan
from engine.solve.device import call_on, devices_name, local_devices
from engine.solve.device import detect as detect_device
from engine.sweep.config import Sweep

# An existing cluster (--scheduler). dask's own connect timeout, 30 s, is long to
# wait for a typo or a cluster that is down; a scheduler that answers does so in
# milliseconds. A run whose cluster has had no worker for LOST_AFTER seconds
# (all lost, or the scheduler gone) stops, keeping the shards done.
CONNECT_TIMEOUT = 2.0
LOST_AFTER = 30.0
_POLL = 0.05  # seconds between looks for finished shards while none is ready


class ClusterLost(ConnectionError):
    """The existing cluster lost every worker (or its scheduler) during a run."""


@dataclasses.dataclass(frozen=True)
class Scheduler:
    """An existing dask scheduler, reached once before anything is written."""

    address: str
    connect_timeout: float = CONNECT_TIMEOUT
    lost_after: float = LOST_AFTER


def reach(address: str, connect_timeout: float = CONNECT_TIMEOUT, lost_after: float = LOST_AFTER) -> Scheduler:
    """Check that a scheduler answers at `address`; ConfigError in one line if not."""
    from distributed.comm import connect

    from engine.cube.aio import sync

    async def probe():
        comm = await connect(address, timeout=connect_timeout)
        await comm.close()

    try:
        sync(probe())  # on a loop thread of its own: run() may be called from a notebook's loop
    except ValueError as err:  # dask's parser: no port, unknown scheme
        raise ConfigError("<command line>", "--scheduler",
                          f"{address!r} is not a dask scheduler address: {err}") from None
    except (OSError, TimeoutError):
        raise ConfigError("<command line>", "--scheduler", f"no dask scheduler answered at {address} within "
                          f"{connect_timeout:g} s (--connect-timeout); nothing was written") from None
    return Scheduler(address, connect_timeout, lost_after)


@dataclasses.dataclass(frozen=True)
class RunReport:
    path: str
    state: str  # "created", "resumed" or "complete" (with, after "; ", what a complete cube holds)
    shards_run: int
    points_run: int  # points of the shards run, solved or not
    failed_points: int  # points solved without success (a status code other than success)
    seconds: float
    failed_shards: int = 0  # shards that raised (recorded in the store; retried by the next run)
    points_solved: int | None = None  # points of the shards that did not raise (None: all of points_run)
    # Of shards_run and points_run, the critical search's: its shards and roots (a
    # root is a point of its layout), named as such where a run reports them.
    critical_shards: int = 0
    critical_roots: int = 0
    # Where the time went (engine.stages): the run's stages in seconds, from its start
    # (the caller's clock's, where one ran: the command line's counts its planning
    # too) to its report; the tasks' stages in seconds of the `threads` that ran
    # them, "waiting" their time in no task.
    stages: dict = dataclasses.field(default_factory=dict)
    task_stages: dict = dataclasses.field(default_factory=dict)
    threads: int = 1
    # A [sensitivity] sweep's analysis once every shard is done: its one line
    # (engine.cube.sensitivity.analyse); "" for other sweeps, or while shards remain.
    sensitivity: str = ""

    @property
    def solved(self) -> int:
        return self.points_run if self.points_solved is None else self.points_solved

    @property
    def rate(self) -> float:
        """Points solved per second: a shard that raised solved nothing."""
        return self.solved / self.seconds if self.seconds > 0 else float("nan")


def pending_shards(cube: Cube) -> list[tuple[str, int, int]]:
    """(kind, shard, points) of every shard without a done marker, grid first."""
    pending = []
    for kind in KINDS:
        layout = cube.layout(kind)
        if layout is None:
            continue
        done = cube.markers.done(kind)
        pending += [(kind, s, layout.shard_points(s)) for s in range(layout.n_shards) if s not in done]
    return pending


# Inline shard threads per core on CPU. A shard's thread also waits where its
# core could work: host-side steps between compiled calls, and the round trips of
# its store writes through zarr's event loop and the file system. A second thread
# per core fills those gaps. Measured (rolling ball, 200,000 points in shards of
# 8,192, 2 cores, 8 alternating runs, best / median points/s): 2 threads
# 463k / 431k, 4 threads 527k / 492k, 6 threads 521k / 511k.
THREADS_PER_CORE = 2
# On an accelerator the calls of a device share it and its memory (a call plans on
# 1/DEVICE_SHARE of it): two threads a device keep it busy while either does host
# work. More did not help: 1e8 rolling-ball points streamed into a cube on one
# H200 (16 cores), 9.05M points/s with 2 threads, 8.57M with 6.
ACCELERATOR_THREADS = 2


def default_workers(executor: str, sweep: Sweep | None = None, plan: Plan | None = None) -> int:
    """Inline: THREADS_PER_CORE threads per core (ACCELERATOR_THREADS per
    accelerator device), or one per core where `sweep`'s tasks would not fit in
    memory that many at a time; at least one per device. Local cluster: one worker
    process per device, which runs a task per core on threads. A compiled call
    releases the GIL, so threads of one process keep the cores busy and share one
    compiled program; each further process starts, imports and loads the program
    again. Measured on 2 cores, 300k-point pingpong sweep: one process with 1
    thread 26k points/s, with 2 threads 42k points/s. `plan`: the sweep's (made
    here where not given)."""
    if executor not in ("inline", "local"):
        return 1
    if sweep is not None and plan is None:
        plan = plan_for(sweep)
    device = plan.device if plan is not None else detect_device()
    if executor == "local":
        return device.count
    if device.accelerator:
        return ACCELERATOR_THREADS * device.count
    threads = THREADS_PER_CORE * device.cores
    if sweep is not None and not fits_in_memory(sweep, threads, plan):
        threads = device.cores  # large tasks: the extra threads would only cost memory
    return max(threads, device.count)  # at least a thread per device (CPU devices forced by XLA_FLAGS)


def worker_threads(workers: int, plan: Plan | None = None) -> int:
    """Threads of each local worker process: the cores shared out (on an
    accelerator, ACCELERATOR_THREADS: its calls share the one device)."""
    device = plan.device if plan is not None else detect_device()
    if device.accelerator:
        return ACCELERATOR_THREADS
    return max(1, device.cores // workers)


# Every device of the machine solves: each shard thread (inline) or worker process
# (local cluster) is pinned to one device, in turn. A compiled program gives the
# same bits on every device of a kind, so the cube does not depend on the spread.
_PINNED = threading.local()


def _pin_threads(devices):
    """A thread-pool initializer giving each new thread the next device, round robin."""
    turn = itertools.count()

    def pin():
        _PINNED.device = devices[next(turn) % len(devices)]

    return pin


def _on_pinned_device(fn, *args):
    """fn(*args) on this thread's pinned device (if any)."""
    return call_on(getattr(_PINNED, "device", None), fn, *args)


def _worker_device():
    """A local-cluster worker's device: worker i takes device i of those it sees
    (one, where the cluster gave it its own GPU). None elsewhere."""
    from distributed import get_worker

    try:
        name = get_worker().name
    except ValueError:  # not in a worker
        return None
    devices = local_devices()
    if len(devices) == 1 or isinstance(name, bool) or not isinstance(name, int):
        return None
    return devices[name % len(devices)]


def in_flight(executor: str, workers: int, plan: Plan | None = None) -> int:
    """Tasks solved at once (each needs its memory at the same time): inline on
    an accelerator, those being written and those queued (engine.runner.pipeline)."""
    if executor == "local":
        return workers * worker_threads(workers, plan)
    if executor == "inline":
        device = plan.device if plan is not None else detect_device()
        return held(workers, device) if pipelined(device) else workers
    return workers


def solving_threads(executor: str, workers: int, plan: Plan) -> int:
    """Threads (or worker processes' threads) that run tasks, whose time the
    run's report shares out: a pipeline's writers and its feeding thread."""
    if executor == "inline" and pipelined(plan.device):
        return workers + 1
    return in_flight(executor, workers, plan)


# The plan of each sweep a worker process solves, made at its first task there:
# one plan per solving process, from the worker's own device. By what of the
# sweep makes a plan: sweeps of one config hash may ask for other batches.
_WORKER_PLANS: dict[tuple, Plan] = {}


def _worker_plan(cube: Cube) -> Plan:
    """The worker's plan, pinned to the cube's identity at every task (a file
    read): a cluster's workers outlive a run, and the cube may have been made
    again since (--overwrite)."""
    sweep = cube.sweep
    key = (sweep.config_hash, sweep.batch_size, sweep.batch_solver)
    plan = _WORKER_PLANS.get(key)
    if plan is None:
        plan = _WORKER_PLANS[key] = plan_for(sweep)
    return pinned_plan(cube, plan)


# ---- a cube is solved one way (its identity: engine.cube.prepare)

def recorded_identity(cube: Cube) -> dict | None:
    """How the cube's shards are solved: its markers' identity; for a cube whose
    shards were solved before identities were recorded, the solver, points a
    call and at a time its own config gives on this device (what a run here
    used); None where nothing is recorded and no shard is done."""
    found = cube.markers.identity()
    if found is not None or not cube.markers.any_done():
        return found
    try:
        made = solved_with(plan_for(Cube(cube.path).sweep))  # the config it was made with, read back
    except Exception:  # noqa: BLE001 - it cannot be read back: nothing to hold the run to
        return None
    return {key: made[key] for key in ("solver", "batch", "width")}


def resolved_plan(cube: Cube, plan: Plan, recorded: dict | None) -> Plan:
    """`plan` (this process's) as the cube's identity `recorded` has it solve:
    with the points a call and at a time the cube was solved with where the
    sweep leaves them to the engine (another machine's choice can differ: a
    GPU's follows its memory). StoreError in one line naming the key where the
    two still differ (the device, a package's version, the solver, a batch the
    sweep asks for)."""
    if recorded is None:
        return plan
    sweep = cube.sweep
    if sweep.batch_size is None and recorded.get("solver") == plan.solver.name and "batch" in recorded:
        plan = dataclasses.replace(plan, batch=recorded["batch"], width=recorded.get("width", plan.width))
    difference = identity_difference(recorded, solved_with(plan), sweep)
    if difference:
        raise StoreError(f"{cube.path}: holds a cube of another config: {difference}")
    return plan


def pinned_plan(cube: Cube, plan: Plan) -> Plan:
    """The plan this process solves the cube's shards with: `plan` resolved
    against the cube's identity, recorded as the cube's where none is yet (of
    processes that start at once, SLURM array tasks, one records its own and
    the others are resolved against it)."""
    recorded = cube.markers.identity()
    if recorded is not None:
        return resolved_plan(cube, plan, recorded)
    plan = resolved_plan(cube, plan, recorded_identity(cube))  # a cube made before identities were recorded
    return resolved_plan(cube, plan, cube.markers.claim_identity(solved_with(plan)))


def _resumed_plan(sweep: Sweep, plan: Plan, overwrite: bool) -> Plan:
    """The run's plan resolved against the identity of the cube it resumes,
    before anything is compiled or written (a refusal leaves the store as it
    was); unchanged for a cube it creates, one without a shard done, or one
    it solves nothing of (complete: reported as it is)."""
    try:
        cube = existing(sweep, sweep.out, overwrite)
    except StoreError:
        return plan  # not this sweep's cube: refused where the store is prepared, under its lock
    if cube is None or not cube.markers.any_done() or not solves_something(cube):
        return plan
    return resolved_plan(cube, plan, recorded_identity(cube))


def _the_cube(cube: Cube) -> Cube:
    return cube


def solve_task(cube: Cube, task: Task) -> dict:
    """The dask task: `cube` is the run's (sent to each worker once, with the
    resolved sweep: never re-parsed; its arrays opened once per worker). The
    worker may be another user's (an existing cluster): its JAX settings are
    changed for this task's thread only while it runs."""
    with task_settings():
        check_device()
        return call_on(_worker_device(), run_or_record, cube, _worker_plan(cube), task)


@contextlib.contextmanager
def _quiet(name: str):
    """The named logger silenced for the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def dask_client(scheduler: Scheduler | None, workers: int, slurm=None, cube: Cube | None = None,
                plan: Plan | None = None):
    """A client of an existing scheduler, of SLURM worker jobs (`slurm`: Resources;
    their logs go to the cube's SLURM folder), or of an embedded local cluster."""
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler.address, timeout=scheduler.connect_timeout) as client:
            yield client
        return
    if slurm is not None:
        from engine.runner.slurm import jobqueue_cluster

        with jobqueue_cluster(slurm, cube.markers.slurm_folder) as cluster, Client(cluster) as client:
            # Keep `tasks` worker jobs alive: a job that dies (cancelled, node lost)
            # is replaced and its tasks are retried by dask.
            cluster.adapt(minimum_jobs=slurm.tasks, maximum_jobs=slurm.tasks)
            yield client
        return
    # Each task's calls keep XLA to one thread: the worker's threads already run a
    # task per core (XLA's own pool gained nothing in measurements, within noise).
    # The user's own XLA flags (forced host devices, say) go to the workers too.
    flags = " ".join(filter(None, (os.environ.get("XLA_FLAGS"), SINGLE_THREAD_XLA)))
    env = {"PYTHONUNBUFFERED": "1", "XLA_FLAGS": flags}
    # The run reports every failure in one line of its own; the cluster's logs
    # (worker and nanny tracebacks on Ctrl-C, disk errors) would bury it.
    cluster = LocalCluster(
        n_workers=0, threads_per_worker=worker_threads(workers, plan), processes=True, dashboard_address=None, env=env,
        silence_logs=logging.CRITICAL,
    )
    with _quiet("distributed"), cluster, Client(cluster) as client:
        for i in range(workers):  # worker i: device i (see _worker_device)
            (name, spec), = cluster.new_worker_spec().items()
            options = spec["options"] | {"env": env | _visible_gpu(i)}
            cluster.worker_spec[name] = spec | {"options": options}
        cluster.scale(workers)
        yield client


def _visible_gpu(worker: int) -> dict:
    """Environment giving a local worker one NVIDIA GPU of this process's, so that it
    neither sees nor reserves memory on the others (JAX reserves most of every
    GPU it sees); nothing on other devices, where it picks its device itself."""
    device = detect_device()
    if device.platform != "gpu" or device.count == 1:
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(d.id) for d in local_devices()]
    return {"CUDA_VISIBLE_DEVICES": ids[worker % len(ids)]}


def run(
    sweep: Sweep,
    *,
    executor: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    slurm: dict | None = None,
    connect_timeout: float | None = None,
    lost_after: float | None = None,
    plan: Plan | None = None,
) -> RunReport:
    """Run (or resume) a sweep. `slurm`: command-line SLURM settings (executor "slurm").
    `scheduler`: an existing cluster's address, reached before anything is written
    (`connect_timeout` s at most, default CONNECT_TIMEOUT); the run stops, keeping
    what is done, once that cluster has had no worker for `lost_after` s (LOST_AFTER).
    `plan`: the sweep's (engine.runner.cost.plan_for), where the caller made it
    already (the command line, which warns from it); made here otherwise.
    The report says where the time went (RunReport.stages), measured by the
    caller's clock where one runs on this thread, else by one of the run's."""
    clock = stages.current() or stages.Clock("planning")
    with stages.running(clock):
        try:
            report = _run(sweep, executor, workers, scheduler, overwrite, progress, slurm, connect_timeout,
                          lost_after, plan)
        finally:
            forget_reused_arrays()  # the tasks' large host arrays: a notebook's next sweep has others
        clock.leave()  # "closing" (entered once the tasks were done) ends with the report
    return dataclasses.replace(report, stages=clock.stop())


def _run(sweep, executor, workers, scheduler, overwrite, progress, slurm, connect_timeout, lost_after, plan
         ) -> RunReport:
    if scheduler and executor in ("inline", "slurm"):
        raise ConfigError("<command line>", "--scheduler", f"runs shards on an existing dask cluster; it cannot be "
                          f"combined with --executor {executor}")
    executor = sweep.run_executor(executor, scheduler)
    if scheduler:
        scheduler = reach(scheduler, connect_timeout or CONNECT_TIMEOUT, lost_after or LOST_AFTER)
    resources = None
    if executor == "slurm":
        from engine.runner.slurm import resolve

        resources = resolve(sweep.slurm, slurm or {}, sweep.file)
    configure()  # before the plan: the programs its check compiles come from the compile cache too
    plan = plan or plan_for(sweep)  # the run's one plan: this process's device, solver and batch
    # Where this process's plan is the one that solves (inline, or a local
    # cluster's workers on this machine), the cube's identity is settled here,
    # before anything is compiled or written; an existing cluster's or SLURM's
    # workers plan on their own devices, and each settles it as it starts.
    here = executor in ("inline", "local") and not scheduler
    if here:
        plan = _resumed_plan(sweep, plan, overwrite)
    workers = workers or sweep.workers or default_workers(executor, sweep, plan)
    check_memory(sweep, in_flight(executor, workers, plan), plan)
    load_ahead_of_run(sweep, plan, executor, overwrite)  # its compile overlaps the store's creation
    with stages.stage("store"):
        cube, state = prepare(sweep, sweep.out, overwrite=overwrite, devices=devices_name(plan.device.platform),
                              identity=solved_with(plan) if here else None)
    with locked(cube.path):
        report = _run_locked(cube, plan, state, executor, workers, scheduler, resources, progress)
        stages.current().enter("closing")  # the store released; left by run()
    return report


def _run_locked(cube: Cube, plan, state, executor, workers, scheduler, resources, progress) -> RunReport:
    sweep = cube.sweep
    pending = pending_shards(cube)
    points = sum(p for _, _, p in pending)
    critical = [p for kind, _, p in pending if kind == CRITICAL]
    tasks = tasks_for(pending, plan, in_flight(executor, workers, plan))
    failed, failed_shards, solved, shards_done = 0, 0, 0, 0
    name = sweep.study.name
    bar = progress_bar(
        total=points,
        unit="pt",
        unit_scale=True,
        disable=not progress or not pending,
        # Until a task finishes, the time goes into compiling the study (seconds,
        # unless the compile cache holds it): said, so a still bar is not taken for a hang.
        desc=f"{name} compiling, shards 0/{len(pending)}",
        dynamic_ncols=True,
    )
    threads = solving_threads(executor, workers, plan)
    task_seconds = {}
    solved_before = stages.current().seconds.get("solving", 0.0)
    with bar, stages.stage("solving"):
        for info in _results(cube, plan, tasks, executor, workers, scheduler, resources):
            shards_done += info["shards"]
            failed_shards += info["raised"]
            failed += info["failed"]
            solved += info["solved"]
            stages.add(task_seconds, info.get("stages", {}))
            bar.set_description(f"{name} shards {shards_done}/{len(pending)}" + (
                f", {failed_shards} raised" if failed_shards else "") + (
                # Its program compiles after the grid's (seconds, cold): said, as for the grid's.
                ", compiling the critical search" if critical and shards_done == len(pending) - len(critical)
                else ""))
            bar.update(info["points"])
    # The solving stage's own seconds (run() always runs a clock): a time taken
    # around it would also hold whatever delayed this thread on its way in or out
    # (another thread holding the GIL: the program's compile, engine.runner.ahead).
    seconds = stages.current().seconds["solving"] - solved_before
    analysis = _analysed(cube)
    # The tasks' threads (or workers) in no task: waiting for one, or idle at the end.
    task_seconds["waiting"] = max(0.0, threads * seconds - sum(task_seconds.values()))
    return RunReport(
        path=str(cube.path),
        state=state if pending or state.startswith("complete") else "complete",
        shards_run=len(pending),
        points_run=points,
        failed_points=failed,
        seconds=seconds,
        failed_shards=failed_shards,
        points_solved=solved,
        critical_shards=len(critical),
        critical_roots=sum(critical),
        task_stages=task_seconds,
        threads=threads,
        sensitivity=analysis,
    )


def _analysed(cube: Cube) -> str:
    """A [sensitivity] sweep's indices, once every shard is done, under the
    store's lock: computed here, by the run that finds the cube complete
    (whichever executor solved it), or found computed already."""
    if cube.sweep.sensitivity is None or pending_shards(cube):
        return ""
    from engine.cube.sensitivity import analyse

    with stages.stage("closing"):
        return analyse(cube)


def inline_results(cube: Cube, plan: Plan, tasks, threads: int):
    """Tasks on `threads` threads of this process. A compiled call releases the
    GIL, so the threads share one compiled program (no per-process start-up or
    compile) and keep every core busy. On an accelerator a pipeline: this thread
    feeds the devices, `threads` threads write (engine.runner.pipeline).
    `plan` is pinned to the cube's identity first (pinned_plan): where it cannot
    be, every task's shards are recorded as failed with that one line (a SLURM
    array task on a node unlike the others), and none is solved."""
    if not tasks:
        return
    try:
        plan = pinned_plan(cube, plan)
    except StoreError as refusal:
        for task in tasks:
            yield record_failure(cube, task, refusal)
        return
    if pipelined(plan.device):
        yield from pipelined_results(cube, plan, tasks, threads)
        return
    if threads == 1:
        for task in tasks:
            yield run_or_record(cube, plan, task)
        return
    devices = local_devices(plan.device.platform)
    pin = _pin_threads(devices) if len(devices) > 1 else None
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="rollsweep-task", initializer=pin)
    try:
        futures = [pool.submit(_on_pinned_device, run_or_record, cube, plan, task) for task in tasks]
        for future in concurrent.futures.as_completed(futures):
            yield future.result()
    finally:
        # A disk error stops the run: tasks not yet started are dropped (their
        # regions are untouched and they stay pending for the next run).
        pool.shutdown(wait=True, cancel_futures=True)


def _results(cube: Cube, plan: Plan, tasks: list[Task], executor: str, workers: int, scheduler: Scheduler | None,
             resources=None):
    if not tasks:
        return
    if executor == "inline":
        yield from inline_results(cube, plan, tasks, workers)
        return
    sweep = cube.sweep
    cube = Cube(cube.path.resolve(), sweep)  # as the workers will find it, wherever they run
    from distributed import as_completed

    with dask_client(scheduler, workers, resources, cube, plan) as client:
        # The cube (its path and resolved sweep) goes to the cluster once, not
        # with every task: as the result of a task (not scattered data), so that
        # dask makes it again if every worker holding it is lost.
        shared = client.submit(_the_cube, cube, key=f"rollsweep-{sweep.config_hash[:10]}-cube", pure=False)
        # On every worker before the tasks are placed: held by one alone, it drew
        # every task of a small sweep to that worker (dask prefers the worker that
        # holds a task's input), and one device of several did all the work. Not
        # on an existing cluster without workers: there the run must stay free to
        # stop when none comes (_watched), where replicate would wait for one.
        if scheduler is None or _has_workers(client):
            client.replicate([shared])
        futures = {
            client.submit(
                solve_task, shared, task,
                key=f"rollsweep-{sweep.config_hash[:10]}-{task.kind}-{task.shards[0]}-{len(task.shards)}", pure=False,
            ): task
            for task in tasks
        }
        # Results come with their futures, fetched as each finishes: a result
        # fetched afterwards could sit on a worker lost since, and wait for ever.
        finished = as_completed(futures, with_results=True, raise_errors=False)
        # dask retries a task whose worker died; one that raises, or kills
        # workers repeatedly (KilledWorker), is recorded as failed.
        for future, result in _watched(client, finished, scheduler) if scheduler else finished:
            if isinstance(result, dict):  # solve_task's report
                yield result
            elif future.status != "error":  # cancelled: the scheduler dropped it (lost, not failed)
                raise ClusterLost(None, "the cluster dropped the run's tasks", scheduler and scheduler.address)
            elif isinstance(future.exception(), OSError):
                raise future.exception()
            else:
                error = future.exception()
                if error.__traceback__ is None:  # the worker's traceback, for where in the study it raised
                    error = error.with_traceback(future.traceback())
                yield record_failure(cube, futures[future], error)


def _watched(client, pending, scheduler: Scheduler):
    """What `pending` (an as_completed) yields, on an existing cluster that may lose
    every worker: dask would wait for new ones for ever. After
    `scheduler.lost_after` s without a worker, ClusterLost (the shards done are in
    the store)."""
    seen = time.monotonic()
    while not pending.is_empty():
        batch = pending.next_batch(block=False)
        if batch:
            yield from batch
            continue
        if _has_workers(client):
            seen = time.monotonic()
        elif time.monotonic() - seen > scheduler.lost_after:
            raise ClusterLost(None, f"no dask worker for {scheduler.lost_after:g} s (--lost-after): the cluster is "
                              "lost", scheduler.address)
        time.sleep(_POLL)


def _has_workers(client) -> bool:
    try:
        return client.status == "running" and bool(client.nthreads())
    except (OSError, TimeoutError):  # the scheduler is gone
        return False

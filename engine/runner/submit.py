"""`rollsweep submit` (an sbatch job array over the pending shards) and
`rollsweep work` (what one array task runs)."""

import dataclasses
import os
import pathlib
import sys

import cloudpickle

from engine._jax_setup import DeviceError, check_device, configure
from engine.cube.lock import locked
from engine.cube.prepare import prepare
from engine.cube.store import Cube
from engine.runner.cost import check_memory, fits_in_memory, plan_for
from engine.runner.execute import default_workers, in_flight, inline_results, pending_shards
from engine.runner.shard import record_failure
from engine.runner.slurm import array_script, check_script, read_share, resolve, sbatch, write_share
from engine.runner.tasks import Task, tasks_for
from engine.solve.device import devices_name
from engine.sweep.config import Sweep


@dataclasses.dataclass(frozen=True)
class Submission:
    script: str
    array_job: str | None = None
    check_job: str | None = None
    tasks: int = 0
    shards: int = 0


def submit(sweep: Sweep, keywords: dict, dry_run: bool = False) -> Submission:
    resources = resolve(sweep.slurm, keywords, sweep.file)
    check_memory(sweep, 1)
    path = sweep.out.resolve()
    cube = Cube(path, sweep)
    folder = cube.markers.slurm_folder
    name = f"rollsweep-{sweep.study.name}-{sweep.config_hash[:8]}"
    pending = pending_shards(cube)
    if not pending:  # a complete cube: nothing to submit, with --dry-run too
        return Submission("", shards=0)
    tasks = min(resources.tasks, len(pending))
    if dry_run:  # nothing written: the script as it would be for the cube as it is
        return Submission(array_script(resources, path, folder / "share-<time>.json", name, tasks, folder),
                          tasks=tasks, shards=len(pending))
    # Asked of the cluster before anything is written: no controller, or a job it
    # would refuse, is one line and leaves no store behind.
    sbatch(array_script(resources, path, folder / "share.json", name, tasks, folder), os.getcwd(), "--test-only")
    with locked(path):  # the jobs write the store; this process only prepares it
        prepare(sweep, path, devices=devices_name())
    pending = pending_shards(cube)
    if not pending:
        return Submission("", shards=0)
    tasks = min(resources.tasks, len(pending))
    share = write_share(folder, pending, tasks)
    write_sweep(share, sweep)
    script = array_script(resources, path, share, name, tasks, folder)
    share.with_suffix(".sbatch").write_text(script)
    array_job = sbatch(script, os.getcwd())
    check_job = sbatch(check_script(resources, path, name, array_job, folder), os.getcwd())
    return Submission(script, array_job, check_job, tasks, len(pending))


def sweep_file(share) -> pathlib.Path:
    """Where a submission keeps the resolved sweep its array tasks solve: beside
    its share file."""
    return pathlib.Path(share).with_suffix(".sweep.pickle")


def write_sweep(share, sweep: Sweep) -> None:
    """The resolved sweep, as the submitting process parsed it (its
    parameter_file read there, once): the array tasks load it, never parse the
    sweep again. A registered study travels by name (engine.study.interface.Study)."""
    sweep_file(share).write_bytes(cloudpickle.dumps(sweep))


def read_sweep(share) -> Sweep:
    return cloudpickle.loads(sweep_file(share).read_bytes())


def work(store, task: int, share) -> int:
    """Compute this array task's shards that are not done yet, on every device
    and core the task was given (the inline executor's threads, each pinned to a
    device in turn), in tasks of shards as a run makes them. A shard that raises
    is recorded as failed (with its error) and the others still run. A job that
    asked for a GPU and has none records its first shard as failed and stops."""
    configure()
    mine = read_share(share, task)  # a missing share or a task past its end: one line (ConfigError)
    sweep = read_sweep(share)
    cube = Cube(store, sweep)
    done = {kind: cube.markers.done(kind) for kind in {kind for kind, _ in mine}}
    # Done already: a resubmission, or a task of an earlier submission.
    pending = [(kind, shard, cube.layout(kind).shard_points(shard)) for kind, shard in mine if shard not in done[kind]]
    if not pending:
        return 0
    try:
        check_device()
        plan = plan_for(sweep)  # this array task's one plan, from its own device (which may not start)
    except DeviceError as err:
        kind, shard, points = pending[0]
        record_failure(cube, Task(kind, (shard,), (points,)), err)
        print(f"rollsweep: error: {store}: {err}", file=sys.stderr)
        return 1
    threads = min(default_workers("inline", sweep, plan), len(pending))
    if not fits_in_memory(sweep, in_flight("inline", threads, plan), plan):
        threads = 1  # as the submission checked: a task at a time
    tasks = tasks_for(pending, plan, in_flight("inline", threads, plan))
    failures = sum(info["raised"] for info in inline_results(cube, plan, tasks, threads))
    return 1 if failures else 0

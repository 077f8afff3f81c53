"""`rollsweep submit` (an sbatch job array over the pending shards) and
`rollsweep work` (what one array task runs)."""

import dataclasses
import os
import pathlib
import sys

from ._config import Sweep
from ._cost import check_memory, layouts
from ._cube import CRITICAL, GRID, cube_sweep, done_shards, prepare, slurm_folder
from ._execute import pending_tasks
from ._jax_setup import DeviceError, check_device, configure
from ._lock import locked
from ._shard import record_failure, run_or_record
from ._slurm import array_script, check_script, read_share, resolve, sbatch, write_share


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
    folder = slurm_folder(path)
    name = f"rollsweep-{sweep.study.name}-{sweep.config_hash[:8]}"
    if dry_run:  # nothing written: the script as it would be for a fresh cube
        pending = pending_tasks(sweep, path)
        tasks = max(1, min(resources.tasks, len(pending)))
        script = array_script(resources, path, folder / "share-<time>.json", name, tasks, folder)
        return Submission(script, tasks=tasks, shards=len(pending))
    with locked(path):  # the jobs write the store; this process only prepares it
        prepare(sweep, path)
    pending = pending_tasks(sweep, path)
    if not pending:
        return Submission("", shards=0)
    tasks = min(resources.tasks, len(pending))
    share = write_share(folder, pending, tasks)
    script = array_script(resources, path, share, name, tasks, folder)
    share.with_suffix(".sbatch").write_text(script)
    array_job = sbatch(script, cwd=os.getcwd())
    check_job = sbatch(check_script(resources, path, name, array_job, folder), cwd=os.getcwd())
    return Submission(script, array_job, check_job, tasks, len(pending))


def work(store, task: int, share) -> int:
    """Compute this array task's shards that are not done yet. A shard that raises
    is recorded as failed (with its error) and the others still run. A job that
    asked for a GPU and has none records its first shard as failed and stops."""
    configure()
    store = pathlib.Path(store)
    sweep = cube_sweep(store)
    grid, critical = layouts(sweep)
    sizes = {GRID: grid, CRITICAL: critical}
    failures = 0
    for kind, shard in read_share(share, task):
        if shard in done_shards(store, kind):
            continue  # a resubmission, or another task got there first
        try:
            check_device()
        except DeviceError as err:
            record_failure(str(store), kind, shard, sizes[kind].shard_points(shard), err, sweep.study)
            print(f"rollsweep: error: {store}: {err}", file=sys.stderr)
            return 1
        info = run_or_record(sweep, str(store), kind, shard, sizes[kind].shard_points(shard))
        failures += "error" in info
    return 1 if failures else 0

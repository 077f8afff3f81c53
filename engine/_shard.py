"""One task = one shard: solve its points, write its region, mark it done.

Runs wherever the task lands (this process, a dask worker, a SLURM job); it
only needs the sweep and the store path.
"""

import functools
import os
import pathlib
import time
import traceback

import numpy as np

from ._config import Sweep
from ._cost import layouts, plan_for
from ._cube import CRITICAL, GRID, critical_name, mark_done, mark_failed, write_region
from ._provenance import device, study_folder
from ._status import Status
from .solve.critical import find_critical
from .solve.device import on_platform
from .solve.evaluate import evaluate


def _point_params(sweep: Sweep, names, columns, n) -> dict:
    # A fixed parameter is one value seen n times (a read-only view, not n copies:
    # a shard of 2^20 points wrote 8 MiB for each).
    params = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in sweep.parameters.items()}
    params.update(dict(zip(names, columns, strict=True)))
    return params


def run_grid_shard(sweep: Sweep, path, shard: int) -> dict:
    grid, _ = layouts(sweep)
    region = grid.region(shard)
    columns = grid.points(shard, [a.values for a in sweep.axes])
    n = grid.shard_points(shard)
    start = time.perf_counter()
    params = _point_params(sweep, sweep.axis_names, columns, n)
    result = evaluate(sweep.study, sweep.solver, params, outputs=sweep.outputs, plan=plan_for(sweep))
    shape = tuple(s.stop - s.start for s in region)
    values = {k: v.reshape(shape + v.shape[1:]) for k, v in result.outputs.items()}
    values["status"] = result.status.reshape(shape)
    values["num_steps"] = result.num_steps.reshape(shape)
    values["num_events"] = result.num_events.reshape(shape)
    digests = write_region(path, region, values)
    return _finish(path, GRID, shard, n, result.status, start, digests)


def run_critical_shard(sweep: Sweep, path, shard: int) -> dict:
    _, layout = layouts(sweep)
    c = sweep.critical
    other = [a for a in sweep.axes if a.name != c.axis]
    region = layout.region(shard)
    columns = layout.points(shard, [a.values for a in other])
    n = layout.shard_points(shard)
    base = _point_params(sweep, [a.name for a in other], columns, n)
    start = time.perf_counter()
    plan = plan_for(sweep)

    def output_at(x, index):
        params = {k: v[index] for k, v in base.items()}
        params[c.axis] = x
        result = evaluate(sweep.study, sweep.solver, params, outputs=(c.output,), plan=plan)
        return result.outputs[c.output], result.status

    roots, status = find_critical(output_at, c.bracket, c.target, c.xtol, n)
    shape = tuple(s.stop - s.start for s in region)
    name = critical_name(sweep)
    digests = write_region(path, region, {name: roots.reshape(shape), f"{name}_status": status.reshape(shape)})
    return _finish(path, CRITICAL, shard, n, status, start, digests)


def _finish(path, kind, shard, n, status, start, digests) -> dict:
    info = {
        "kind": kind,
        "shard": shard,
        "points": int(n),
        "failed": int(np.count_nonzero(status != Status.SUCCESS)),
        "seconds": round(time.perf_counter() - start, 6),
        "device": device(),
        "digests": digests,
    }
    mark_done(path, kind, shard, info)
    return info


def _on_its_platform(runner):
    """A shard solves, and names its device, on its plan's platform: on a GPU
    machine a small vmapped sweep's is the CPU (engine.solve.plan.solving_device)."""
    @functools.wraps(runner)
    def run(sweep: Sweep, path, shard: int) -> dict:
        with on_platform(plan_for(sweep).device.platform):
            return runner(sweep, path, shard)

    return run


RUNNERS = {GRID: _on_its_platform(run_grid_shard), CRITICAL: _on_its_platform(run_critical_shard)}


# Innermost frames in the study's code named with a shard's error: where it raised
# and where that was called from.
LOCATION_FRAMES = 3


def record_failure(path, kind: str, shard: int, points: int, err: Exception, study=None) -> dict:
    """A shard that raised: recorded in the store with its error and, given the
    study, where in the study's code it raised; the sweep goes on."""
    where = failure_location(err, study_folder(study)) if study is not None else ""
    message = f"{type(err).__name__}: {err}" + (f" ({where})" if where else "")
    mark_failed(path, kind, shard, message)
    return {"kind": kind, "shard": shard, "points": points, "failed": points, "error": message}


def failure_location(err: BaseException, folder: pathlib.Path | None) -> str:
    """`file:line in function` of the innermost traceback frames inside `folder`
    (the study's package), innermost first; "" where none is."""
    if folder is None:
        return ""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if pathlib.Path(f.filename).is_relative_to(folder)]
    named = [f"{_shown(f.filename)}:{f.lineno} in {f.name}" for f in reversed(frames[-LOCATION_FRAMES:])]
    return "; called from ".join(named)


def _shown(filename: str) -> str:
    """A path relative to the working folder where it lies below it (studies/x/_model.py)."""
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


def run_or_record(sweep: Sweep, path, kind: str, shard: int, points: int) -> dict:
    """Run one shard; a study error is recorded as a failed shard, while a disk
    error (full, read-only) propagates and stops the run: done shards are kept."""
    try:
        return RUNNERS[kind](sweep, path, shard)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - a study bug on some points must not stop the sweep
        return record_failure(path, kind, shard, points, err, sweep.study)

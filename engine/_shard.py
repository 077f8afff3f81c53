"""One task = one shard: solve its points, write its region, mark it done.

Runs wherever the task lands (this process, a dask worker, a SLURM job); it
only needs the sweep and the store path. Solving does not touch the store, so
a run creating a new store can solve its first shards meanwhile
(`store_ready` below).
"""

import concurrent.futures
import dataclasses
import time

import numpy as np

from ._config import Sweep
from ._cost import batch_size, layouts
from ._critical import find_critical
from ._cube import CRITICAL, GRID, critical_name, mark_done, mark_failed, write_region
from ._evaluate import evaluate
from ._provenance import device
from ._status import Status


@dataclasses.dataclass(frozen=True)
class Solved:
    """A shard's results, not yet written: its region of the cube, the arrays
    for that region (variable name -> values), and each point's status."""

    region: tuple[slice, ...]
    values: dict
    status: np.ndarray
    seconds: float


def _point_params(sweep: Sweep, names, columns, n) -> dict:
    params = {k: np.full(n, v) for k, v in sweep.parameters.items()}
    params.update(dict(zip(names, columns, strict=True)))
    return params


def _shape(region) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in region)


def solve_grid_shard(sweep: Sweep, shard: int) -> Solved:
    grid, _ = layouts(sweep)
    region = grid.region(shard)
    columns = grid.points(shard, [a.values for a in sweep.axes])
    start = time.perf_counter()
    params = _point_params(sweep, sweep.axis_names, columns, grid.shard_points(shard))
    result = evaluate(sweep.study, sweep.solver, params, batch_size(sweep), sweep.outputs)
    shape = _shape(region)
    values = {k: v.reshape(shape + v.shape[1:]) for k, v in result.outputs.items()}
    values["status"] = result.status.reshape(shape)
    values["num_steps"] = result.num_steps.reshape(shape)
    values["num_events"] = result.num_events.reshape(shape)
    return Solved(region, values, result.status, time.perf_counter() - start)


def solve_critical_shard(sweep: Sweep, shard: int) -> Solved:
    _, layout = layouts(sweep)
    c = sweep.critical
    other = [a for a in sweep.axes if a.name != c.axis]
    region = layout.region(shard)
    columns = layout.points(shard, [a.values for a in other])
    n = layout.shard_points(shard)
    base = _point_params(sweep, [a.name for a in other], columns, n)
    start = time.perf_counter()

    def output_at(x, index):
        params = {k: v[index] for k, v in base.items()}
        params[c.axis] = x
        result = evaluate(sweep.study, sweep.solver, params, batch_size(sweep), (c.output,))
        return result.outputs[c.output], result.status

    roots, status = find_critical(output_at, c.bracket, c.target, c.xtol, n)
    shape = _shape(region)
    name = critical_name(sweep)
    values = {name: roots.reshape(shape), f"{name}_status": status.reshape(shape)}
    return Solved(region, values, status, time.perf_counter() - start)


SOLVERS = {GRID: solve_grid_shard, CRITICAL: solve_critical_shard}


def store_shard(path, kind: str, shard: int, solved: Solved) -> dict:
    """Write a solved shard's region, then mark it done (the marker last: a shard
    interrupted while writing stays pending)."""
    start = time.perf_counter()
    write_region(path, solved.region, solved.values)
    info = {
        "kind": kind,
        "shard": shard,
        "points": int(solved.status.size),
        "failed": int(np.count_nonzero(solved.status != Status.SUCCESS)),
        "seconds": round(solved.seconds + time.perf_counter() - start, 6),  # solving and writing
        "device": device(),
    }
    mark_done(path, kind, shard, info)
    return info


def run_shard(sweep: Sweep, path, kind: str, shard: int) -> dict:
    return store_shard(path, kind, shard, SOLVERS[kind](sweep, shard))


def record_failure(path, kind: str, shard: int, points: int, err: Exception) -> dict:
    """A shard that raised: recorded in the store with its error; the sweep goes on."""
    mark_failed(path, kind, shard, f"{type(err).__name__}: {err}")
    return {"kind": kind, "shard": shard, "points": points, "failed": points, "error": str(err)}


def _caught(fn, *args):
    """fn(*args), or the exception it raised; a disk error (OSError) propagates."""
    try:
        return fn(*args)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - a study bug on some points must not stop the sweep
        return err


def run_or_record(
    sweep: Sweep, path, kind: str, shard: int, points: int, store_ready: concurrent.futures.Future | None = None
) -> dict | None:
    """Run one shard; a study error is recorded as a failed shard, while a disk
    error (full, read-only) propagates and stops the run: done shards are kept.

    store_ready: for a store still being created, a future that becomes True
    once it exists (and is this run's) or False if it will not: the shard is
    solved meanwhile and written (or its failure recorded) only once True; for
    False nothing is written and None is returned."""
    solved = _caught(SOLVERS[kind], sweep, shard)
    if store_ready is not None and not store_ready.result():
        return None
    info = solved if isinstance(solved, Exception) else _caught(store_shard, path, kind, shard, solved)
    return record_failure(path, kind, shard, points, info) if isinstance(info, Exception) else info

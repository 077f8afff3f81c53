"""One task (engine.runner.tasks): solve its shards' points together, write each
shard's region, mark each done.

Runs wherever the task lands (this process, a dask worker, a SLURM job); it
needs the cube (its store and sweep) and the plan of the process it runs in.
"""

import contextlib
import functools
import os
import pathlib
import time
import traceback

import numpy as np

import engine.stages as stages
from engine.cube.markers import CRITICAL, GRID
from engine.cube.provenance import identity
from engine.cube.store import Cube
from engine.cube.structure import coordinate_values, critical_name, shard_coordinates, writes_coordinates
from engine.runner.tasks import Task
from engine.solve._host_memory import reused_arrays
from engine.solve.base import Plan
from engine.solve.critical import find_critical
from engine.solve.device import device_name, local_devices, on_platform
from engine.solve.evaluate import call_room, evaluate, pad_last_call, queue_calls
from engine.study.source import code_fingerprint, instruction_set, study_folder
from engine.study.status import Status


def _by_shard(task: Task, arrays: dict) -> list[dict]:
    """A task's flat result arrays cut back into its shards' pieces."""
    offsets = np.cumsum((0,) + task.sizes)
    return [{k: v[a:b] for k, v in arrays.items()} for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _regions(layout, task: Task, arrays: dict) -> list:
    """Each shard's (region, its arrays shaped like the region) from a task's flat arrays."""
    regions = []
    for shard, values in zip(task.shards, _by_shard(task, arrays), strict=True):
        region = layout.region(shard)
        shape = tuple(s.stop - s.start for s in region)
        regions.append((region, {k: v.reshape(shape + v.shape[1:]) for k, v in values.items()}))
    return regions


def _with_coordinates(sweep, layout, task: Task, regions: list) -> list:
    """`regions` with a sampled design's coordinates (the sample index and the
    draws over the shard's rows) added to those of the shards that write
    them (engine.cube.structure.writes_coordinates): written with the
    shard's outputs, checksummed in its done marker."""
    names = shard_coordinates(sweep)
    if names:
        for shard, (region, values) in zip(task.shards, regions, strict=True):
            if writes_coordinates(layout, shard):
                values.update({name: coordinate_values(sweep, name, region[0]) for name in names})
    return regions


def run_grid_task(cube: Cube, plan: Plan, task: Task) -> dict:
    return start_grid_task(cube, plan, task)()


def start_grid_task(cube: Cube, plan: Plan, task: Task):
    """A grid task's points packed and its first calls queued on this thread's
    device; the function returned (to call once, on any thread) gathers their
    results, writes each shard's region, marks it done and reports."""
    sweep, grid = cube.sweep, cube.layout(GRID)
    # Its large arrays (columns, whole results) are earlier tasks', given back
    # once its shards are written (engine.solve._host_memory.reused_arrays).
    arrays = contextlib.ExitStack()
    empty = arrays.enter_context(reused_arrays())
    try:
        # Made with the last call's padding after the points: no call copies its columns.
        columns = grid.points(task.shards, [a.values for a in sweep.axes], empty, call_room(plan, task.points))
        pad_last_call(columns, task.points, plan.batch)
        start = time.perf_counter()
        params = sweep.point_params(sweep.axis_names, columns, task.points)
        queued = queue_calls(sweep.study, sweep.solver, params, outputs=sweep.outputs, plan=plan, empty=empty,
                             points=task.points)
    except BaseException:
        arrays.close()
        raise
    fed = time.perf_counter() - start

    def finish() -> dict:
        # The task's seconds (its markers') leave out any wait for this call (a
        # pipeline's writer to come free); its calls ran through some of it.
        begun = time.perf_counter()
        with arrays:
            result = queued.result()
            flat = dict(result.outputs, status=result.status, num_steps=result.num_steps,
                        num_events=result.num_events)
            regions = _with_coordinates(sweep, grid, task, _regions(grid, task, flat))
            return _finish(cube, plan, task, result.status, begun - fed, regions)

    return finish


def run_critical_task(cube: Cube, plan: Plan, task: Task) -> dict:
    sweep, layout = cube.sweep, cube.layout(CRITICAL)
    c = sweep.critical
    other = [a for a in sweep.axes if a.name != c.axis]
    columns = layout.points(task.shards, [a.values for a in other])
    base = sweep.point_params([a.name for a in other], columns, task.points)
    start = time.perf_counter()

    def output_at(x, index):
        params = {k: v[index] for k, v in base.items()}
        params[c.axis] = x
        result = evaluate(sweep.study, sweep.solver, params, outputs=(c.output,), plan=plan)
        return result.outputs[c.output], result.status

    # Each root's search reads its own point alone (find_critical), so shards
    # searched together find the roots they would find apart.
    roots, status = find_critical(output_at, c.bracket, c.target, c.xtol, task.points)
    name = critical_name(sweep)
    return _finish(cube, plan, task, status, start,
                   _regions(layout, task, {name: roots, f"{name}_status": status}))


@functools.cache
def _identity_device(platform: str) -> str:
    """A plan's device as a cube's identity names it: a CPU with the
    instruction set its programs are compiled for, an accelerator by its kind."""
    if platform == "cpu":
        return f"cpu ({instruction_set()})"
    return f"{platform}:{local_devices(platform)[0].device_kind}"


def solved_with(plan: Plan) -> dict:
    """How `plan` solves a cube's points: its identity (engine.cube.provenance.identity)."""
    kernel = None
    if plan.solver.name == "fused":  # the backend the kernel runs on (engine.solve.kernel.backends)
        from engine.solve.kernel.backends import default_backend, requested

        kernel = requested() or default_backend(plan.device.platform)
    return identity(plan.solver.name, plan.batch, plan.width, _identity_device(plan.device.platform), kernel)


def _finish(cube: Cube, plan: Plan, task: Task, status, start, regions) -> dict:
    """Each shard's region written, then each shard marked done (the digests of
    what it wrote, its points' failures, its share of the task's time, the
    study's code that solved it and how), and the task's report."""
    with stages.stage("writes"):
        digests = cube.write_regions(regions)
    seconds = time.perf_counter() - start
    solved_on = device_name()
    code, how = code_fingerprint(cube.sweep.study), solved_with(plan)
    failed = 0
    for shard, points, shard_status, shard_digests in zip(
            task.shards, task.sizes, _by_shard(task, {"status": status}), digests, strict=True):
        shard_failed = int(np.count_nonzero(shard_status["status"] != Status.SUCCESS))
        failed += shard_failed
        with stages.stage("markers"):
            cube.markers.mark_done(task.kind, shard, {
                "kind": task.kind,
                "shard": shard,
                "points": int(points),
                "failed": shard_failed,
                "seconds": round(seconds * points / task.points, 6),
                "device": solved_on,
                "code": code,
                "solved_with": how,
                "digests": shard_digests,
            })
    return _report(task, solved=task.points, failed=failed, seconds=round(seconds, 6), device=solved_on)


def _report(task: Task, solved: int, failed: int, raised: int = 0, **more) -> dict:
    """What a task tells the run: its shards and points; of them the points
    solved (in shards that did not raise) and those that failed (a status other
    than success); the shards that raised."""
    return {"kind": task.kind, "shards": len(task.shards), "points": task.points, "solved": solved,
            "failed": failed, "raised": raised, **more}


RUNNERS = {GRID: run_grid_task, CRITICAL: run_critical_task}


def run_task(cube: Cube, plan: Plan, task: Task) -> dict:
    """A task solved, and its device named, on its plan's platform: on a GPU
    machine a small vmapped sweep's is the CPU (engine.solve.plan.solving_device).
    Its report holds the seconds of each of its stages (engine.stages.TASK_STAGES)."""
    clock = stages.Clock(stages.TASK_DEFAULT)
    with stages.running(clock), on_platform(plan.device.platform):
        report = RUNNERS[task.kind](cube, plan, task)
    return report | {"stages": clock.stop()}


def start_task(cube: Cube, plan: Plan, task: Task):
    """run_task in two halves: a grid task's calls queued here, on this thread's
    device; the function returned (on any thread) gathers their results, writes
    and marks the shards, and reports, its stages those of both halves. A
    critical task (its root searches call the solver again and again) is run
    whole by the function returned."""
    if task.kind != GRID:
        return functools.partial(run_task, cube, plan, task)
    clock = stages.Clock(stages.TASK_DEFAULT)
    with stages.running(clock), on_platform(plan.device.platform):
        finish = start_grid_task(cube, plan, task)
    started = clock.stop()

    def finished() -> dict:
        clock = stages.Clock(stages.TASK_DEFAULT)
        with stages.running(clock), on_platform(plan.device.platform):
            report = finish()
        return report | {"stages": stages.add(clock.stop(), started)}

    return finished


# Innermost frames in the study's code named with a shard's error: where it raised
# and where that was called from.
LOCATION_FRAMES = 3


def record_failure(cube: Cube, task: Task, err: Exception) -> dict:
    """A task that raised: each of its shards recorded in the store with the
    error and where in the study's code it raised; the sweep goes on."""
    where = failure_location(err, study_folder(cube.sweep.study))
    message = f"{type(err).__name__}: {err}" + (f" ({where})" if where else "")
    for shard in task.shards:
        cube.markers.mark_failed(task.kind, shard, message)
    return _report(task, solved=0, failed=0, raised=len(task.shards), error=message)


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


def start_or_record(cube: Cube, plan: Plan, task: Task):
    """run_or_record in two halves (start_task): a study's error in either is
    handled as run_or_record handles one, by the function returned (a task of
    one shard recorded as failed, a larger one run again shard by shard); a disk
    error stops the run."""
    try:
        finish = start_task(cube, plan, task)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - as run_or_record: a study bug on some points must not stop the sweep
        return functools.partial(_shard_by_shard, cube, plan, task, err)

    def finish_or_record() -> dict:
        try:
            return finish()
        except OSError:
            raise
        except Exception as err:  # noqa: BLE001 - as above
            return _shard_by_shard(cube, plan, task, err)

    return finish_or_record


def run_or_record(cube: Cube, plan: Plan, task: Task) -> dict:
    """Run one task; a study error is recorded as failed shards, while a disk
    error (full, read-only) propagates and stops the run: done shards are kept.
    A task of several shards that raises is run again shard by shard, so that
    a study bug on some points costs only the shards that hold them."""
    try:
        return run_task(cube, plan, task)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - a study bug on some points must not stop the sweep
        return _shard_by_shard(cube, plan, task, err)


def _shard_by_shard(cube: Cube, plan: Plan, task: Task, err: Exception) -> dict:
    """A task that raised `err`: its one shard recorded as failed, or each of its
    shards run again alone (run_or_record), and their reports added up."""
    if len(task.shards) == 1:
        return record_failure(cube, task, err)
    reports = [run_or_record(cube, plan, Task(task.kind, (shard,), (points,)))
               for shard, points in zip(task.shards, task.sizes, strict=True)]
    errors = [r["error"] for r in reports if "error" in r]
    seconds = {}
    for r in reports:
        stages.add(seconds, r.get("stages", {}))
    return _report(task, solved=sum(r["solved"] for r in reports), failed=sum(r["failed"] for r in reports),
                   raised=sum(r["raised"] for r in reports), stages=seconds,
                   **({"error": errors[0]} if errors else {}))

"""What a sweep will cost, estimated without running it, and the memory guard."""

import dataclasses
import math

from engine.errors import ConfigError
from engine.runner.tasks import task_points
from engine.solve.allocation import memory_bytes
from engine.solve.base import Plan
from engine.solve.plan import make_plan
from engine.sweep.config import Sweep
from engine.sweep.layout import layouts

# Bytes held per point while a shard is in flight: inputs and outputs on the
# device, their host copies, and the zarr encode buffers (three copies of 8 B each).
_COPIES = 3
# Root-finding evaluations per critical point (Chandrupatla to 1e-12: ~10-40).
CRITICAL_EVALUATIONS = 40


@dataclasses.dataclass(frozen=True)
class Cost:
    points: int
    shards: int
    shard_points: int
    shard_bytes: int  # host memory of one task in flight (its shards' arrays; on CPU its calls too)
    task_points: int  # points a task aims at (engine.runner.tasks)
    critical_points: int
    critical_shards: int
    memory_budget: int
    call_bytes: int  # one compiled call's memory beyond the shard's arrays
    device_memory: int | None  # what one accelerator may allocate (None on CPU)

    def describe(self) -> str:
        lines = [
            f"grid points      {self.points:,}",
            f"grid shards      {self.shards:,} of up to {self.shard_points:,} points",
            f"tasks            of up to {self.task_points:,} points (shards solved together)",
            f"memory per task  {self.shard_bytes / 2**20:,.1f} MiB "
            f"(budget {self.memory_budget / 2**20:,.0f} MiB per worker)",
        ]
        if self.critical_points:
            lines.append(
                f"critical search  {self.critical_points:,} critical roots in {self.critical_shards:,} "
                f"critical-search shards, ~{self.critical_points * CRITICAL_EVALUATIONS:,} extra point solves"
            )
        return "\n".join(lines)


def plan_for(sweep: Sweep) -> Plan:
    """How this sweep's shards solve their points on this process's device: the
    sweep's batch solver and size, or the device's choices for a sweep of this
    many points (never the shard size: see engine.solve.plan.make_plan). A
    batch solver the engine lacks, or that cannot solve the study, is the
    sweep's error (`run.batch_solver`), raised before anything is written."""
    try:
        return make_plan(sweep.study, solver=sweep.batch_solver, batch=sweep.batch_size,
                         points=math.prod(sweep.shape), sampled=bool(sweep.save_times),
                         integrator=sweep.solver.solver)
    except ValueError as error:
        if sweep.batch_solver is None:
            raise
        raise ConfigError(sweep.file, "run.batch_solver", str(error)) from None


def estimate(sweep: Sweep, workers: int = 1, plan: Plan | None = None) -> Cost:
    """`workers`: tasks in flight at once; `plan`: the run's (made here where not given)."""
    grid, critical = layouts(sweep)
    plan = plan or plan_for(sweep)
    call_bytes = plan.solver.working_bytes(plan)
    n_values = sum(math.prod(sweep.output_shape(n)) for n in sweep.outputs) + len(sweep.axes) + 3
    shard_points = math.prod(grid.chunks)
    aim = task_points(plan, grid.n_points, workers, shard_points)
    # A task holds whole shards: at most its aim and one shard less, or one shard.
    held = max(shard_points, min(grid.n_points, aim + shard_points - 1))
    # A call's working memory is the host's on CPU, the device's on an accelerator
    # (checked against the device's memory in check_memory).
    shard_bytes = held * n_values * 8 * _COPIES + (0 if plan.device.accelerator else call_bytes)
    budget = memory_bytes() // (2 * max(1, workers))
    return Cost(
        points=grid.n_points,
        shards=grid.n_shards,
        shard_points=shard_points,
        shard_bytes=shard_bytes,
        task_points=aim,
        critical_points=critical.n_points if critical else 0,
        critical_shards=critical.n_shards if critical else 0,
        memory_budget=budget,
        call_bytes=call_bytes,
        device_memory=plan.device.memory,
    )


def fits_in_memory(sweep: Sweep, workers: int, plan: Plan | None = None) -> bool:
    """Whether `workers` of the sweep's tasks at a time fit the host memory budget."""
    cost = estimate(sweep, workers, plan)
    return cost.shard_bytes <= cost.memory_budget


def check_memory(sweep: Sweep, workers: int = 1, plan: Plan | None = None) -> Cost:
    """Refuse a sweep whose tasks (`workers` of them at once) would not fit in
    host memory, or whose compiled calls would not fit in the accelerator's."""
    plan = plan or plan_for(sweep)
    cost = estimate(sweep, workers, plan)
    memory = cost.device_memory
    # The calls in flight are spread over the plan's devices, each with its own memory.
    per_device = -(-workers // plan.device.count)
    if memory is not None and cost.call_bytes * per_device > memory:
        raise ConfigError(
            sweep.file,
            "run.batch_size",
            f"a compiled call needs ~{cost.call_bytes / 2**30:.1f} GiB of device memory, "
            f"{per_device} at once on a device, but the device has {memory / 2**30:.1f} GiB; lower batch_size",
        )
    if cost.shard_bytes > cost.memory_budget:
        batch_heavy = sweep.batch_size is not None and cost.call_bytes > cost.shard_bytes / 2
        key = "run.batch_size" if batch_heavy else "run.shard_size"
        raise ConfigError(
            sweep.file,
            key,
            f"a shard needs ~{cost.shard_bytes / 2**30:.1f} GiB but a worker may use "
            f"{cost.memory_budget / 2**30:.1f} GiB; lower {key.split('.')[1]}",
        )
    return cost


def compile_kind(sweep: Sweep, plan: Plan) -> str:
    """What a run's compile time is noted under (engine.solve.executables.COMPILE_TIMES)."""
    return f"{sweep.study.name}/{plan.solver.name}/{plan.device.platform}"


def describe_programs(sweep: Sweep, plan: Plan) -> str:
    """Whether a run of the sweep compiles its programs (cold) or loads them
    from the compile cache (warm), and what that is known from: the cache's
    files for the programs' keys, the time a cold run of this kind compiled in
    here before. No time of the solve itself: nothing measures it ahead."""
    from engine._jax_setup import usable_cache_dir
    from engine.solve.executables import compile_times

    if usable_cache_dir() is None:
        return "programs         to compile: no compile cache, every run compiles its programs"
    try:
        from engine.solve.evaluate import _in_settings_and_plan  # (its precision and platform, as a run's)

        kept = _in_settings_and_plan(_kept_programs)(sweep.study, sweep.solver, sweep, plan=plan)
    except Exception as err:  # noqa: BLE001 - a description: the run says what is wrong where it matters
        return f"programs         not known ({type(err).__name__}: a run compiles or loads them as it starts)"
    if all(state == "compiled" for state in kept):
        return "programs         kept (warm): their compiled executables load from the cache, nothing to compile"
    took = compile_times().get(compile_kind(sweep, plan))
    known = (f"about {took:g} s: what a cold run of {compile_kind(sweep, plan)} compiled in here last" if took
             else "its time not known here: no cold run of this study, solver and device noted yet")
    traced = "; their traced programs kept" if all(state != "none" for state in kept) else ""
    return f"programs         to compile (cold), {known}{traced}"


def program_calls(sweep: Sweep) -> list[tuple[dict, tuple[str, ...]]]:
    """One call's (parameters, outputs) of each program a run's tasks call: the
    grid's, and with [critical] the root search's (every parameter a column, the
    critical output alone), each of one point: its kinds of arguments, which
    key the program (engine.runner.ahead makes them ready from these)."""
    import numpy as np

    grid = sweep.point_params(sweep.axis_names, [np.asarray(axis.values[:1]) for axis in sweep.axes], 1,
                              kinds_only=True)
    calls = [(grid, sweep.outputs)]
    if sweep.critical is not None:
        c = sweep.critical
        calls.append(({k: np.array(v[:1]) for k, v in grid.items()} | {c.axis: np.array(c.bracket[:1], float)},
                      (c.output,)))
    return calls


def _kept_programs(study, settings, sweep: Sweep, *, plan: Plan) -> list[str]:
    """For each program a run calls (the grid's, with [critical] the root
    search's, as engine.runner.ahead makes them): "compiled" where its
    executable is kept, "traced" where only its exported program is, else
    "none". Keys as engine.solve.evaluate makes them, nothing traced."""
    import numpy as np

    from engine.solve import executables, exported
    from engine.solve.device import current_device
    from engine.solve.evaluate import _call_args, _fixed_and_columns, _put_for, _selected, staging_for

    staging = staging_for(plan.device.accelerator)
    states = []
    for params, outputs in program_calls(sweep):
        fixed, columns = _fixed_and_columns(study, params, plan.batch, settings.dtype)
        count = min(len(next(iter(params.values()))), plan.batch)
        args = (_call_args(columns, fixed, 0, count, plan.batch, _put_for(staging, plan.device.accelerator)),
                np.int32(count))
        key = exported.program_key(study, settings, _selected(study, outputs, settings), plan, args)
        single = plan.device.count == 1
        if single and executables.stored(executables.executable_key(key, current_device(), staging)):
            states.append("compiled")
        elif key is not None and exported.stored(key):
            states.append("traced")
        else:
            states.append("none")
    return states

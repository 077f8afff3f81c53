"""`rollsweep point`: one point of a sweep solved eagerly, to debug a study.

No compiled call: the study's code runs line by line (`jax.disable_jit`), so
an exception's traceback ends where the study raised and a `breakpoint()` or
`print` in the study works. A long solve (millions of steps, each a Python
loop's turn) takes minutes so: `solve_compiled` solves the same point through
one compiled program instead (its compile a few seconds, its solve the
compiled loop's).
"""

import dataclasses
import math

import numpy as np

from engine.errors import ConfigError
from engine.sweep.config import Sweep, _Checker, check_constraints, plain
from engine.sweep.samples import SAMPLE

WHERE = "<command line>"


@dataclasses.dataclass(frozen=True)
class PointReport:
    parameters: dict  # name -> value, every parameter of the study
    status: int
    num_steps: int
    num_events: int
    events: list  # (time, "mode -> transition") of a hybrid solve; None: not a hybrid study
    outputs: dict  # name -> numpy value


def select_point(sweep: Sweep, at: list[str], index: int | None) -> dict:
    """The parameters of one point: the sweep's fixed values, the axis values at
    grid `index` (C order of the axes), then the `--at name=value` pairs;
    checked as a sweep's grid is: each value in its range, and the study's
    constraints on them together."""
    params = dict(sweep.parameters)
    if index is not None:
        count = math.prod(sweep.shape)
        if not 0 <= index < count:
            raise ConfigError(WHERE, "--index", f"{index} is outside the grid (0 to {count - 1})")
        for axis, i in zip(sweep.axes, np.unravel_index(index, sweep.shape), strict=True):
            if sweep.samples is not None and axis.name == SAMPLE:  # a sampled design's point: its drawn values
                params |= {name: float(values[i]) for name, values in sweep.samples.draws.items()}
            else:
                params[axis.name] = float(axis.values[i])
    known = sweep.study.parameters_by_name
    check = _Checker(WHERE)
    keys = dict.fromkeys(sweep.axis_names, "--index")  # where each value not the sweep's came from
    keys |= dict.fromkeys(sweep.samples.parameters if sweep.samples else (), "--index")
    for pair in at:
        name, sep, text = pair.partition("=")
        key = f"--at {name}"
        if not sep:
            raise ConfigError(WHERE, f"--at {pair}", "must be name=value")
        if name not in known:
            raise ConfigError(WHERE, key, f"unknown parameter of study {sweep.study.name!r} "
                              f"(known: {', '.join(known)})")
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(WHERE, key, f"must be a number, got {text!r}") from None
        params[name] = check.value_in_range(key, value, known[name])
        keys[name] = key
    missing = [a for a in sweep.axis_names if not (sweep.samples and a == SAMPLE) and a not in params]
    missing += [a for a in (sweep.samples.parameters if sweep.samples else ()) if a not in params]
    if missing:
        raise ConfigError(WHERE, "--at", f"no value for the axes {', '.join(missing)}: give name=value for each, "
                          "or --index N")
    check_constraints(WHERE, sweep.study, params, keys=keys)
    return params


def solve_eagerly(study, params: dict, settings) -> PointReport:
    """`study.solve_point` on one point without compiling; for a HybridPoint, the
    hybrid solve is run by its parts so that its event log can be shown."""
    import jax

    with jax.disable_jit():
        result, solution = _solve(study, _arguments(params, settings), settings)
        return _report(study, params, result, solution)


def solve_compiled(study, params: dict, settings) -> PointReport:
    """The same solve as solve_eagerly's, traced once and compiled: one
    program of one point (a study's error is raised as it is traced, its
    traceback in the study's code as before; a value it prints is a tracer)."""
    import jax

    program = jax.jit(lambda args: _solve(study, args, settings))
    result, solution = program(_arguments(params, settings))
    return _report(study, params, result, solution)


def _arguments(params: dict, settings) -> dict:
    import jax.numpy as jnp

    return {k: jnp.asarray(v, settings.dtype) for k, v in params.items()}


def _solve(study, args: dict, settings) -> tuple:
    """(the point's result, its hybrid solution or None)."""
    from engine.solve.hybrid import HybridPoint

    point = study.solve_point
    if not isinstance(point, HybridPoint):
        return point(args, settings), None
    y0, mode, point_args, t_end = point.start(args, settings)
    solution = point.system.solve(y0, mode, point_args, settings, t_end)
    return point.finish(args, solution, settings), solution


def _report(study, params: dict, result, solution) -> PointReport:
    return PointReport(
        parameters=params,
        status=int(result.status),
        num_steps=int(result.num_steps),
        num_events=int(result.num_events),
        events=None if solution is None else _event_log(study.solve_point.system, solution),
        # In the study's order (a compiled program's dict comes back in its keys' order).
        outputs={k: np.asarray(result.outputs[k]) for k in sorted(result.outputs, key=_order(study))},
    )


def _order(study):
    order = {name: i for i, name in enumerate(study.outputs_by_name)}
    return lambda name: order.get(name, len(order))


def _event_log(system, solution) -> list:
    """(time, "mode -> transition") of each event the solution logged."""
    transitions = system.transitions
    rows = min(int(solution.num_events), len(solution.event_t))
    log = []
    for k in range(rows):
        mode, transition = transitions[int(solution.event_code[k])]
        log.append((float(solution.event_t[k]), f"{system.modes[mode].name} -> {transition.name}"))
    return log


def describe(study, report: PointReport) -> str:
    from engine.study.status import Status

    lines = [f"study       {study.name}", "parameters"]
    for name, value in report.parameters.items():
        lines.append(f"  {name:<20} {plain(value)}{study.parameter(name).unit_suffix}")
    lines.append(f"status      {Status(report.status).name.lower()} ({report.status})")
    lines.append(f"steps       {report.num_steps}")
    lines.append(f"events      {report.num_events}")
    lines += [f"  t = {plain(t):<22} {name}" for t, name in report.events or ()]
    lines.append("outputs")
    for name, value in report.outputs.items():
        shown = plain(value.item()) if value.ndim == 0 else np.array2string(value, precision=17)
        lines.append(f"  {name:<20} {shown}{study.outputs_by_name[name].unit_suffix}")
    return "\n".join(lines)

"""Batched evaluation of a study: jit(vmap(point function)) over fixed-size batches.

Every call uses the same batch shape (the last batch is padded), so one compiled
program serves every shard: results cannot depend on the shard size, and there
is a single compilation per worker. On refilling lanes the padding is not
solved (each call is told how many of its points are real).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._cost import default_lanes
from ._hybrid import on_lanes
from ._lanes import solve_batch
from ._solver import SolverSettings
from ._status import Status
from ._study import Study


@dataclasses.dataclass(frozen=True)
class Evaluation:
    outputs: dict  # name -> (n, *extra dims) float array
    status: np.ndarray  # (n,) int8
    num_steps: np.ndarray  # (n,) int32
    num_events: np.ndarray  # (n,) int32


def _in_range(study: Study, params):
    ok = jnp.asarray(True)
    for p in study.parameters:
        ok &= p.admitted(params[p.name], jnp)
    return ok


def _safe(study: Study, dtype, params):
    """The point's parameters, with an out-of-range point replaced by the defaults.

    An out-of-range point is solved at the defaults instead, so it cannot stall
    or poison its batch; its outputs are discarded by `_masked`.
    """
    params = {k: jnp.asarray(v, dtype) for k, v in params.items()}
    in_range = _in_range(study, params)
    return {p.name: jnp.where(in_range, params[p.name], p.default) for p in study.parameters}, in_range


def _masked(study: Study, dtype, selected: tuple[str, ...], result, in_range):
    """The engine's guarantees on one point's result: status, NaN where not a success."""
    required = [result.outputs[k] for k in selected if not study.outputs_by_name[k].optional]
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in required] or [True]))
    status = jnp.asarray(result.status, jnp.int8)
    status = jnp.where((status == Status.SUCCESS) & ~finite, jnp.int8(Status.NONFINITE), status)
    status = jnp.where(in_range, status, jnp.int8(Status.OUT_OF_RANGE))
    ok = status == Status.SUCCESS
    # Only the selected outputs leave the function: XLA drops the work of the rest.
    outputs = {k: jnp.where(ok, jnp.asarray(result.outputs[k], dtype), jnp.nan) for k in selected}
    return outputs, status, jnp.asarray(result.num_steps, jnp.int32), jnp.asarray(result.num_events, jnp.int32)


def _per_point(study: Study, settings: SolverSettings, selected: tuple[str, ...]):
    """One point at a time; the batch is `jax.vmap` of this."""
    dtype = jnp.dtype(settings.dtype)

    def run(params):
        safe, in_range = _safe(study, dtype, params)
        return _masked(study, dtype, selected, study.solve_point(safe, settings), in_range)

    # Lockstep: every row of a batch is solved, padding included (count unused).
    return lambda params, count=None: jax.vmap(run)(params)


def _on_lanes(study: Study, settings: SolverSettings, selected: tuple[str, ...], lanes: int):
    """A batch of a study declared as a HybridPoint, solved on refilling lanes."""
    dtype = jnp.dtype(settings.dtype)
    point = study.solve_point

    def run(params, count=None):
        safe, in_range = jax.vmap(lambda p: _safe(study, dtype, p))(params)
        solutions = solve_batch(point, safe, settings, lanes, count)
        results = jax.vmap(lambda p, sol: point.finish(p, sol, settings))(safe, solutions)
        return jax.vmap(lambda r, ok: _masked(study, dtype, selected, r, ok))(results, in_range)

    return run


@functools.cache
def compiled(study: Study, settings: SolverSettings, selected: tuple[str, ...], lanes: int):
    if on_lanes(study) and lanes > 0:
        return jax.jit(_on_lanes(study, settings, selected, lanes))
    return jax.jit(_per_point(study, settings, selected))


def evaluate(
    study: Study, settings: SolverSettings, params: dict, batch_size: int, outputs=None, lanes: int | None = None
) -> Evaluation:
    """Solve every point of `params` (name -> equal-length 1-D arrays).

    `outputs` names the outputs wanted (default: all the study declares).
    `lanes`: for a study declared as a HybridPoint, how many points are in
    flight at once (default: default_lanes(batch_size); 0: vmap the point
    function over the batch instead).
    """
    lanes = default_lanes(batch_size) if lanes is None else lanes
    selected = tuple(outputs) if outputs is not None else tuple(o.name for o in study.outputs)
    fn = compiled(study, settings, selected, lanes)
    n = len(next(iter(params.values())))
    names = [p.name for p in study.parameters]
    columns = {k: np.asarray(params[k], dtype=settings.dtype) for k in names}
    pieces = []
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        # Pad with copies of the batch's first point: same compiled shape every call.
        take = np.concatenate([np.arange(start, stop), np.full(batch_size - (stop - start), start)])
        batch = {k: v[take] for k, v in columns.items()}
        pieces.append((stop - start, fn(batch, np.int32(stop - start))))
    outs = {k: [] for k in selected}
    status, steps, events = [], [], []
    for count, (o, s, st, ev) in pieces:  # device -> host after all batches are queued
        for k in outs:
            outs[k].append(np.asarray(o[k])[:count])
        status.append(np.asarray(s)[:count])
        steps.append(np.asarray(st)[:count])
        events.append(np.asarray(ev)[:count])
    return Evaluation(
        outputs={k: np.concatenate(v) for k, v in outs.items()},
        status=np.concatenate(status),
        num_steps=np.concatenate(steps),
        num_events=np.concatenate(events),
    )

"""The solver seam: one contract for solving a batch of points.

A `BatchSolver` turns a study, its settings and a `Plan` into one compiled
function `(params, count) -> (outputs, status, num_steps, num_events)` over a
batch of fixed size (`plan.batch` points; the first `count` are real, the rest
padding). Implementations: `vmapped` (any study, any device) and `lanes`
(studies declared as a `HybridPoint`, refilling lanes on CPU). The engine
picks one per run in `engine.solve.plan`; nothing else branches on it.

The engine's guarantees on a point's result live here, shared by every
solver: a point outside its parameters' allowed ranges is solved at the
defaults and marked OUT_OF_RANGE, and a point that is not a success reads NaN.
"""

import abc
import dataclasses
from collections.abc import Callable
from typing import ClassVar

import jax.numpy as jnp

from engine.once import computed_once
from engine.solve.device import Device
from engine.study.status import Status

# Widths of every batch and loop on CPU are whole multiples of this. XLA:CPU
# runs an elementwise operation as a vector loop plus a scalar remainder, and
# the two can round differently (measured on the rolling ball: lane widths 4,
# 8, ..., 64 give bitwise equal points, widths 1, 2 and 3 differ in the last
# digits): with whole vectors only, a point rounds alike wherever it lies in a
# batch. 16 covers float32 on 512-bit vectors.
VECTOR = 16


def whole_vectors(n: int) -> int:
    """n rounded up to a whole number of vectors."""
    return -(-max(1, n) // VECTOR) * VECTOR


@dataclasses.dataclass(frozen=True)
class Plan:
    """How every shard of a run solves its points, made once per run.

    solver: the BatchSolver. batch: points per compiled call, the same
    for every shard, so one compiled program serves them all and a point's
    result never depends on how the grid was cut into shards. width: points
    in flight at once (the lanes; the whole batch for a vmapped solve).
    """

    solver: "BatchSolver"
    batch: int
    width: int
    device: Device

    def __post_init__(self):
        if self.batch < 1 or self.width < 1:
            raise ValueError(f"a plan needs batch >= 1 and width >= 1, not {self.batch} and {self.width}")


class BatchSolver(abc.ABC):
    """Solves fixed-size batches of one study's points. One instance per kind
    (engine.solve.plan.SOLVERS), held by the plans that use it."""

    name: ClassVar[str]

    def __repr__(self) -> str:
        return self.name

    def unsupported(self, study) -> str | None:
        """Why this solver cannot serve `study` (None: it can)."""
        return None

    @abc.abstractmethod
    def default_batch(self, study, device: Device) -> int:
        """Points per compiled call when the sweep does not say."""

    def default_width(self, batch: int, device: Device) -> int:
        """Points in flight in a call of `batch` points."""
        return batch

    def full_call(self, plan: Plan) -> int:
        """The fewest points a call needs to keep its work well filled (a run
        gives a task at least this many where it has the points)."""
        return 1

    @abc.abstractmethod
    def working_bytes(self, plan: Plan) -> int:
        """Memory of one compiled call beyond the shard's own arrays (a generous bound)."""

    @abc.abstractmethod
    def batch_function(self, study, settings, selected: tuple[str, ...], plan: Plan) -> Callable:
        """The (not yet jitted) function of (params, count) for batches of plan.batch points."""


def in_range(study, params):
    """Whether the point's parameters all lie in their allowed ranges (traced)."""
    ok = jnp.asarray(True)
    for p in study.parameters:
        ok &= p.admitted(params[p.name], jnp)
    return ok


def safe_params(study, dtype, params):
    """The point's parameters, with an out-of-range point replaced by the defaults.

    An out-of-range point is solved at the defaults instead, so it cannot stall
    or poison its batch; its outputs are discarded by `masked`.
    """
    params = {k: jnp.asarray(v, dtype) for k, v in params.items()}
    # Once: every fusion that reads a parameter would compute the range check
    # again (measured on the bicycle's capsize speed: 380 -> 165 ns a point).
    (ok,) = computed_once((in_range(study, params),))
    return {p.name: jnp.where(ok, params[p.name], p.default) for p in study.parameters}, ok


def masked(study, dtype, selected: tuple[str, ...], result, admitted):
    """The engine's guarantees on one point's result: status, NaN where not a success."""
    # A sampled output's NaN before a point's start and after its end are no failure.
    required = [result.outputs[k] for k in selected
                if not (study.outputs_by_name[k].optional or study.outputs_by_name[k].sampled)]
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in required] or [True]))
    status = jnp.asarray(result.status, jnp.int8)
    status = jnp.where((status == Status.SUCCESS) & ~finite, jnp.int8(Status.NONFINITE), status)
    status = jnp.where(admitted, status, jnp.int8(Status.OUT_OF_RANGE))
    ok = status == Status.SUCCESS
    # Only the selected outputs leave the function: XLA drops the work of the rest.
    outputs = {k: jnp.where(ok, jnp.asarray(result.outputs[k], dtype), jnp.nan) for k in selected}
    return outputs, status, jnp.asarray(result.num_steps, jnp.int32), jnp.asarray(result.num_events, jnp.int32)

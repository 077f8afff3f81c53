"""The lanes' state and its tuning: what every lane carries, what a lane
locating a crossing adds, and what is planned for each point before the loop."""


import jax

from engine.pytree import PytreeDataclass
from engine.study.status import Status

# Finished lanes wait for the write-out and refill until 1/_FLUSH_SHARE of all
# lanes are waiting. Measured (rolling ball, compiled calls of 8,192 points on
# 1,024 lanes, one thread, A/B in one process): flush at 1/2 and locate up to
# 1/2 of the lanes 338-343k points/s; 1/4 and 1/4 310-328k; 1/3 and 1/3 321k.
_FLUSH_SHARE = 2
# The last busy lanes of a batch continue in a loop this many times narrower.
_TAIL_SHARE = 16
# At most this share of the lanes locates crossings in one flush.
_LOCATE_SHARE = 2
# A flush finishes its finished lanes' points (where the finish runs as points
# end: engine.solve.lanes.batch._Batch) this share of the lanes at a time. The
# bouncing ball (tens of events a point) finishes 2% of the lanes a flush on
# average, 4% in 99 flushes of 100.
_FINISH_SHARE = 32
# A finish that reads an event log of at most this many rows runs after the
# loop, every point's log kept in the results; a longer one runs as points end.
KEPT_LOG_ROWS = 16
# Samples a lane writes in one pass of a step's sample loop (engine.solve.lanes.batch._Batch.sample).
# Measured (rolling ball, 201 samples, solve_batch of 8,192 points on 1,024 lanes): 1: 56-58k points/s,
# 2: 54-58k, 4: 52-54k, 8: 45k, 16: 40k (every pass evaluates them on every lane).
_SAMPLES_A_PASS = 2
# Newton re-steps allowed to locate one crossing (2 are typical).
_LOCATE_TRIES = 32
# Status of a lane without a point: anything but PENDING keeps it from stepping
# (its row is never written).
_IDLE = Status.SUCCESS
# A rejected step whose state is not finite is retried this much shorter.
_NONFINITE_SHRINK = 0.2


class _Lane(PytreeDataclass):
    """State of the lanes (every field has a trailing lane axis)."""

    point: jax.Array  # index into the batch; the batch size means "no point"
    # the lane's column of the lanes' event log (its place in the full width);
    # None where the log is kept a column a point (engine.solve.lanes.batch._Batch)
    slot: jax.Array | None
    t: jax.Array
    y: jax.Array
    f: jax.Array  # vector field at (t, y): the first stage of the next step
    g: jax.Array  # every transition's condition at (t, y) (inactive ones constant)
    mode: jax.Array
    args: object
    horizon: jax.Array
    h: jax.Array  # next regular step size
    steps: jax.Array  # regular steps (accepted and rejected) of the whole solve
    segment_steps: jax.Array
    status: jax.Array
    events: jax.Array  # events located so far (the event log is kept beside the lanes)
    # parked at a crossing inside the step [t, t + span], waiting to locate it
    locating: jax.Array
    span: jax.Array
    # where the sweep samples times ([save] times): the sample times of the
    # point handled so far (written, or before its start), an index into the
    # times; None without samples (no leaf)
    sampled: jax.Array | None = None


class _Search(PytreeDataclass):
    """Lanes locating a crossing inside the step [t, t + span] of `lane`: it lies
    in [t + lo, t + hi]."""

    lane: _Lane
    code: jax.Array  # the transition being located
    lo: jax.Array  # the largest offset known short of the crossing
    hi: jax.Array  # the smallest offset known past it
    dt: jax.Array  # current Newton iterate (offset from t)
    nudge: jax.Array
    creeping: jax.Array  # converged but short of the crossing: stepping forward
    tries: jax.Array
    located: jax.Array  # located and recorded: ends or goes on after the loop
    # where the sweep samples times: the step whose dense output the lane's
    # samples are read from after the search (the step taken again when no
    # crossing is found, or the re-step that ends at the located crossing)
    sample_step: "_Step | None" = None


class _Step(PytreeDataclass):
    """An accepted step of the lanes [t0, t1] from y0 to y1 with its stages
    (the vector field at each), for its dense output; `taken` where a lane
    took it."""

    t0: jax.Array
    t1: jax.Array
    y0: jax.Array
    y1: jax.Array
    stages: list
    taken: jax.Array


class _Plan(PytreeDataclass):
    """Per-point starting data, computed for the whole batch before the loop."""

    y: jax.Array
    f: jax.Array
    g: jax.Array
    mode: jax.Array
    args: object
    horizon: jax.Array
    h: jax.Array


def _end(lane: _Lane) -> dict:
    """The fields of a lane's HybridSolution written when its point finishes."""
    return {"t": lane.t, "y": lane.y, "mode": lane.mode, "status": lane.status, "num_steps": lane.steps,
            "num_events": lane.events}

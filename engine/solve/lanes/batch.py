"""One call's points on refilling lanes: the loop, its flushes and its tail."""


import jax
import jax.numpy as jnp

from engine.pytree import replace
from engine.solve.base import whole_vectors
from engine.solve.hybrid import HybridPoint, HybridSolution
from engine.solve.lanes.machine import _Machine, _plan_block, _planned
from engine.solve.lanes.state import (
    _FLUSH_SHARE,
    _IDLE,
    _LOCATE_SHARE,
    _TAIL_SHARE,
    _end,
    _Lane,
    _Plan,
    _Search,
)
from engine.study.status import Status
from engine.sweep.settings import SolverSettings


def solve_batch(
    point: HybridPoint, params: dict, settings: SolverSettings, lanes: int, count=None, accelerator: bool = False
) -> HybridSolution:
    """Solve every point of `params` (name -> (n,) array) on `lanes` refilling lanes.

    Returns the points' HybridSolutions stacked along a leading axis of length n.
    `count` (may be traced): only the first `count` points are solved, the rest
    are padding of a batch's fixed shape (their rows are left unsolved, status
    PENDING), so a short last batch costs what its points cost.
    """
    batch = _Batch(point, params, settings, lanes, count, accelerator)
    lane, next_point = batch.refill(batch.empty(), jnp.ones((batch.lanes,), bool), jnp.asarray(0, jnp.int32))
    results = batch.no_results()
    # The batch's last points run on fewer lanes: once no point is left to take
    # and at most 1/_TAIL_SHARE of the lanes are busy, those few are gathered into
    # a narrow loop, so one slow or failing point costs steps of a few lanes, not
    # of all of them, while it finishes alone.
    tail = min(batch.lanes, batch.whole(batch.lanes // _TAIL_SHARE))
    lane, results, next_point = batch.loop(
        lane, results, next_point,
        lambda lane, next_point: (next_point < batch.count) | (jnp.sum(batch.running(lane)) > tail),
    )
    results = batch.write(lane, results, batch.finished(lane))
    busy = jnp.nonzero(batch.running(lane), size=tail, fill_value=0)[0]
    narrow = _take(lane, busy)
    still_busy = jnp.arange(tail) < jnp.sum(batch.running(lane))
    # Lanes past the busy ones (copies of lane 0) idle.
    narrow = replace(
        narrow, point=jnp.where(still_busy, narrow.point, batch.n), status=jnp.where(still_busy, narrow.status, _IDLE)
    )
    _, results, _ = batch.loop(narrow, results, next_point, lambda lane, next_point: jnp.any(lane.point < batch.n))
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, -1, 0), results)


def _take(tree, index):
    """The lanes `index` of a tree of lane-last arrays."""
    return jax.tree_util.tree_map(lambda a: a[..., index], tree)


class _Batch:
    """One call's points on refilling lanes: the lanes' start, refill, flush
    (locate, write out, refill) and loop. A point n (the batch size) is "none"."""

    def __init__(self, point: HybridPoint, params: dict, settings: SolverSettings, lanes: int, count,
                 accelerator: bool):
        self.machine = _Machine(point.system, settings, accelerator)
        self.n = n = next(iter(params.values())).shape[0]
        # Every loop's width is whole vectors on CPU, so that a point rounds alike
        # on whichever lane and in whichever loop it runs (engine.solve.base.VECTOR).
        self.whole = whole_vectors if not accelerator else (lambda k: max(1, k))
        self.lanes = self.whole(lanes)
        self.count = n if count is None else jnp.minimum(count, n)
        # Every lane array keeps the lane axis last: a lane's state components are
        # then rows, contiguous across lanes, and XLA vectorises each operation over
        # lanes (with the lane axis first, ~3x slower per solver step on CPU).
        self.plan = _planned(self.machine, point, params, self.count,
                             _plan_block(n, self.lanes) if not accelerator else n)
        self.dtype = self.plan.y.dtype
        self.n_state = self.plan.y.shape[0]
        one_point = {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in params.items()}
        self.n_seg = point.log_rows(one_point, jax.ShapeDtypeStruct((self.n_state,), self.dtype), settings)

    def started(self, start: _Plan, point) -> _Lane:
        """Lanes at the start of the points `point`, from their rows of the plan."""
        size = point.shape[0]

        def full(value, dtype, *shape):
            return jnp.full((*shape, size), value, dtype)

        return _Lane(
            point=point,
            t=full(0, self.dtype),
            y=start.y,
            f=start.f,
            g=start.g,
            mode=start.mode,
            args=start.args,
            horizon=start.horizon,
            h=start.h,
            steps=full(0, jnp.int32),
            segment_steps=full(0, jnp.int32),
            status=full(Status.PENDING, jnp.int8),
            events=full(0, jnp.int32),
            locating=full(False, bool),
            span=full(0, self.dtype),
        )

    def empty(self) -> _Lane:
        """Before the first refill every lane is idle (point n, "none")."""
        n = self.n
        return self.started(_take(self.plan, jnp.minimum(jnp.arange(self.lanes), n - 1)),
                            jnp.full((self.lanes,), n, jnp.int32))

    def no_results(self) -> HybridSolution:
        """The solutions, points last. Events are written into their point's log as
        they are located, not carried by the lanes: refilling, gathering and
        putting back lanes then moves their state, not a log of max_segments
        states each (the landing map's log is 8 times its state)."""
        n, n_seg = self.n, self.n_seg
        return HybridSolution(
            **{k: jnp.zeros(a.shape[:-1] + (n,), a.dtype) for k, a in _end(self.empty()).items()},
            event_t=jnp.full((n_seg, n), jnp.nan, self.dtype),
            event_y=jnp.full((n_seg, self.n_state, n), jnp.nan, self.dtype),
            event_code=jnp.full((n_seg, n), -1, jnp.int32),
        )

    def refill(self, lane: _Lane, free, next_point):
        """Free lanes take the next points of the batch, in order."""
        n = self.n
        rank = jnp.cumsum(free) - 1
        new = next_point + rank
        takes = free & (new < self.count)

        def pick(new_value, old_value):
            return jnp.where(takes, new_value, old_value)

        lane = jax.tree_util.tree_map(pick, self.started(_take(self.plan, jnp.minimum(new, n - 1)), new), lane)
        # A free lane left without a point idles: it takes no more steps (its
        # start may be an unplanned row of padding) and is never written.
        idle = free & ~takes
        return replace(
            lane, point=jnp.where(idle, n, lane.point), status=jnp.where(idle, _IDLE, lane.status)
        ), next_point + jnp.sum(free)

    def running(self, lane):
        return (lane.status == Status.PENDING) & (lane.point < self.n)

    def finished(self, lane):
        return (lane.status != Status.PENDING) & (lane.point < self.n)

    def rows_of(self, lane, chosen):
        """The points' rows where `chosen`; elsewhere distinct rows past the end,
        which writes drop: every index is then unique. (Sent to one spare row, they
        made XLA:GPU serialise the scatter's colliding writes as atomics.)"""
        width = lane.point.shape[0]
        n = self.n
        return jnp.where(chosen & (lane.point < n), lane.point, n + jnp.arange(width, dtype=lane.point.dtype))

    def write(self, lane, results, finished):
        row = self.rows_of(lane, finished)
        return replace(results, **{
            k: getattr(results, k).at[..., row].set(value, mode="drop", unique_indices=True)
            for k, value in _end(lane).items()
        })

    def record(self, search: _Search, results):
        """The crossings located in this flush, into their points' event logs."""
        lane = search.lane
        row = self.rows_of(lane, search.located)
        k = jnp.clip(lane.events - 1, 0, self.n_seg - 1)

        def put(log, value):
            return log.at[k, ..., row].set(value, mode="drop", unique_indices=True)

        return replace(
            results,
            event_t=put(results.event_t, lane.t),
            event_y=results.event_y.at[k, :, row].set(lane.y.T, mode="drop", unique_indices=True),
            event_code=put(results.event_code, search.code),
        )

    def locate_parked(self, lane, results):
        """Lanes parked at a crossing locate it: up to 1/_LOCATE_SHARE of the lanes
        at a time (the rest wait for the next flush), gathered into a narrow loop of
        Newton re-steps, then put back."""
        machine = self.machine
        width = lane.point.shape[0]
        size = min(width, self.whole(width // _LOCATE_SHARE))
        parked = (lane.status == Status.PENDING) & lane.locating
        index = jnp.nonzero(parked, size=size, fill_value=0)[0]
        valid = jnp.arange(size) < jnp.sum(parked)
        search = machine.start_locating(_take(lane, index), valid)
        search = jax.lax.while_loop(
            lambda n: jnp.any((n.lane.status == Status.PENDING) & n.lane.locating), machine.locate, search
        )
        results = self.record(search, results)
        # Put back what locating changes; out-of-bounds indices (no lane) drop.
        back = jnp.where(valid, index, width)
        located = machine.events(search)
        changed = ("t", "y", "f", "g", "mode", "h", "segment_steps", "status", "events", "locating", "span")
        return replace(
            lane, **{k: getattr(lane, k).at[..., back].set(getattr(located, k), mode="drop") for k in changed}
        ), results

    def flush(self, lane, results, next_point):
        """Crossings located, finished lanes written out and, while points are
        left (the full width's loop), refilled."""
        lane, results = self.locate_parked(lane, results)
        finished = self.finished(lane)
        results = self.write(lane, results, finished)
        if lane.point.shape[0] == self.lanes:
            lane, next_point = self.refill(lane, finished | (lane.point >= self.n), next_point)
        else:  # the tail: no points are left to take
            lane = replace(lane, point=jnp.where(finished, self.n, lane.point))
        return lane, results, next_point

    def loop(self, lane, results, next_point, keep_going):
        """Step the lanes while keep_going(lane, next_point). A lane that finishes,
        or reaches a crossing, waits for the next flush: there crossings are
        located, finished lanes written out and refilled."""
        width = lane.point.shape[0]
        # A flush costs about as much as a step of every lane, so it waits until a
        # good share of the lanes is waiting (or none is stepping): waiting lanes
        # idle for a few steps, the flush runs a few times less often. Locating
        # crossings there, apart from the regular steps, keeps the every-step work
        # to a plain adaptive step: the locating logic costs more than the step.
        threshold = max(1, width // _FLUSH_SHARE)

        def body(carry):
            lane, results, next_point = carry
            lane = self.machine.regular(lane)
            mine = lane.point < self.n
            pending = lane.status == Status.PENDING
            waiting = jnp.sum(mine & (~pending | lane.locating))
            stepping = jnp.sum(mine & pending & ~lane.locating)
            return jax.lax.cond(
                (waiting >= threshold) | (stepping == 0),
                lambda: self.flush(lane, results, next_point),
                lambda: (lane, results, next_point),
            )

        return jax.lax.while_loop(lambda c: keep_going(c[0], c[2]), body, (lane, results, next_point))

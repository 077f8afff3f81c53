"""One call's points on refilling lanes: the loop, its flushes and its tail."""


import jax
import jax.numpy as jnp

from engine.pytree import PytreeDataclass, replace
from engine.solve.base import whole_vectors
from engine.solve.hybrid import EVENT_LOG, HybridPoint, HybridSolution, log_rows_read, solution_shapes
from engine.solve.lanes.dense import sample_due
from engine.solve.lanes.machine import _Machine, _plan_block, _planned
from engine.solve.lanes.state import (
    _FINISH_SHARE,
    _FLUSH_SHARE,
    _IDLE,
    _LOCATE_SHARE,
    _SAMPLES_A_PASS,
    _TAIL_SHARE,
    KEPT_LOG_ROWS,
    _end,
    _Lane,
    _Plan,
    _Search,
)
from engine.solve.liveness import live_part
from engine.study.status import Status
from engine.sweep.settings import SolverSettings


def solve_batch(
    point: HybridPoint, params: dict, settings: SolverSettings, lanes: int, count=None, accelerator: bool = False,
    finish=None, inputs=None,
):
    """Solve every point of `params` (name -> (n,) array) on `lanes` refilling lanes.

    Returns finish(row, solution) of every point, stacked along a leading axis
    of length n: `row` is the point's row of `inputs` (a tree of (n, ...)
    arrays; default `params`), `solution` its HybridSolution; the default
    finish returns the solution itself. `count` (may be traced): only the first
    `count` points are solved, the rest are padding of a batch's fixed shape
    (their rows are left unsolved: zeros, a solution's status PENDING), so a
    short last batch costs what its points cost.
    """
    batch = _Batch(point, params, settings, lanes, count, accelerator, finish, inputs)
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
    _, results, _ = batch.loop(narrow, results, next_point, lambda lane, next_point: jnp.any(lane.point < batch.n),
                               gathered=True)
    return batch.results_of(results)


# A log's rows past its point's events.
_BLANK = {"event_t": jnp.nan, "event_y": jnp.nan, "event_code": -1}


def _take(tree, index):
    """The lanes `index` of a tree of lane-last arrays."""
    return jax.tree_util.tree_map(lambda a: a[..., index], tree)


class _Results(PytreeDataclass):
    """What the loop writes: `out`, points last (the solutions' ends, or the
    finished results: see _Batch), and the event logs ({event_t: (rows,
    columns), event_y: (rows, state, columns), event_code: (rows, columns)},
    one column a log: a point's or a lane's)."""

    out: object
    log: dict
    # where the sweep samples times: the samples the finish reads (the state's
    # components it reads, then the mode as a float if it reads it: one write
    # a sample), {lanes: (lanes, times, kept)} a lane's as its point writes
    # them, and where the finish runs after the loop the points' copied out of
    # their lanes as they finish, points: (points, times, kept) with sampled:
    # (points,) the end of each point's written times; lanes or points first,
    # so a sample is contiguous; None without samples
    saved: dict | None = None


class _Batch:
    """One call's points on refilling lanes: the lanes' start, refill, flush
    (locate, write out, refill) and loop. A point n (the batch size) is "none".

    Where the finish reads an event log of at most KEPT_LOG_ROWS rows (or none),
    every point's log is kept in the results (a column a point), the ends of
    the solutions written out as points finish, and the finish run once on all
    points after the loop. A longer log is kept a column a lane instead, and a
    point's finish runs as it is written out, on its lane's column (its rows
    past the point's events blank): neither the memory of a call nor the work
    of a point then grows with max_segments (a ball bouncing tens of times to
    rest, its rest time read from the log, ran at half the speed with room for
    1,024 events as with 128: the results' log of every point was filled,
    transposed and read)."""

    def __init__(self, point: HybridPoint, params: dict, settings: SolverSettings, lanes: int, count,
                 accelerator: bool, finish=None, inputs=None):
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
        self.finish = finish or (lambda row, solution: solution)
        self.inputs = params if inputs is None else inputs
        self.rows = self.log_rows(point, settings)
        self.finish_at_end = max(self.rows.values()) <= KEPT_LOG_ROWS
        self.columns = n if self.finish_at_end else self.lanes  # of the event log
        if self.machine.times is not None:
            self.components, self.keep_mode = samples_read(self.finish, self.one_row(), self.solution_shape())

    def log_rows(self, point: HybridPoint, settings: SolverSettings) -> dict:
        """Rows kept of each array of the event log, for this batch's finish (log_rows_read)."""
        return log_rows_read(point.system, lambda row, solution, _: self.finish(row, solution), self.one_row(),
                             self.y_shape(), settings)

    def one_row(self):
        return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape[1:], v.dtype), self.inputs)

    def y_shape(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((self.n_state,), self.dtype)

    def solution_shape(self) -> HybridSolution:
        """One point's solution, as the finish gets it (shapes)."""
        return solution_shapes(self.y_shape(), self.rows, len(self.machine.times or ()))

    def started(self, start: _Plan, point, slot) -> _Lane:
        """Lanes `slot` at the start of the points `point`, from their rows of the plan."""
        size = point.shape[0]

        def full(value, dtype, *shape):
            return jnp.full((*shape, size), value, dtype)

        return _Lane(
            point=point,
            slot=slot,
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
            sampled=None if self.machine.times is None else full(self.machine.first_sample, jnp.int32),
        )

    def empty(self) -> _Lane:
        """Before the first refill every lane is idle (point n, "none")."""
        n = self.n
        lanes = jnp.arange(self.lanes)
        # A lane's slot only where the log or the samples are kept a column a
        # lane (None: no leaf, nothing carried, gathered or picked).
        slot = None if self.finish_at_end and self.machine.times is None else lanes
        return self.started(_take(self.plan, jnp.minimum(lanes, n - 1)), jnp.full((self.lanes,), n, jnp.int32), slot)

    def no_results(self) -> _Results:
        """Nothing written yet: the results points last, and blank event logs.
        Events are written into a log as they are located, not carried by the
        lanes: refilling, gathering and putting back lanes then moves their
        state, not a log of max_segments states each (the landing map's log is 8
        times its state)."""
        n, columns = self.n, self.columns
        times = self.machine.times
        blank = self.solution_shape()
        if self.finish_at_end:
            out = {k: jnp.zeros(a.shape[:-1] + (n,), a.dtype) for k, a in _end(self.empty()).items()}
        else:
            shapes = jax.eval_shape(self.finish, self.one_row(), blank)
            out = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape + (n,), a.dtype), shapes)
        saved = None
        if times is not None:
            kept = len(self.components) + self.keep_mode
            saved = {"lanes": jnp.full((self.lanes, len(times), kept), jnp.nan, self.dtype)}
            if self.finish_at_end:
                saved.update(points=jnp.full((n, len(times), kept), jnp.nan, self.dtype),
                             sampled=jnp.zeros((n,), jnp.int32))
        return _Results(out=out, log={
            name: jnp.full(getattr(blank, name).shape + (columns,), _BLANK[name], getattr(blank, name).dtype)
            for name in EVENT_LOG
        }, saved=saved)

    def saved_times(self, shape=()):
        return jnp.broadcast_to(jnp.asarray(self.machine.times, self.dtype), shape + (len(self.machine.times),))

    def results_of(self, results: _Results):
        """Every point's finished results, points first."""
        points_first = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, -1, 0), replace(results, saved=None))
        if not self.finish_at_end:
            return points_first.out
        saved = {} if results.saved is None else self.samples(results.saved["points"], results.saved["sampled"])
        solutions = HybridSolution(**points_first.out, **points_first.log, **saved)
        return jax.vmap(self.finish)(self.inputs, solutions)

    def samples(self, kept, sampled) -> dict:
        """A HybridSolution's samples, points or lanes first, from the kept ones
        (..., times, kept: the components the finish reads, then the mode) of
        which those before `sampled` (...) were written; the components it does
        not read NaN, as its mode where it does not read it."""
        index = jnp.arange(kept.shape[-2])
        written = (index >= self.machine.first_sample) & (index < sampled[..., None])
        unread = jnp.full(written.shape, jnp.nan, self.dtype)
        # A component at a time: the finish's read of one is then of its own
        # array, not of a (..., times, state) array made whole first.
        y = jnp.stack([jnp.where(written, kept[..., self.components.index(c)], jnp.nan) if c in self.components
                       else unread for c in range(self.n_state)], axis=-1)
        mode = jnp.where(written, kept[..., -1], -1).astype(jnp.int32) if self.keep_mode else \
            jnp.full(written.shape, -1, jnp.int32)
        return {"saved_t": self.saved_times(sampled.shape), "saved_y": y, "saved_mode": mode}

    def refill(self, lane: _Lane, free, next_point):
        """Free lanes take the next points of the batch, in order."""
        n = self.n
        rank = jnp.cumsum(free) - 1
        new = next_point + rank
        takes = free & (new < self.count)

        def pick(new_value, old_value):
            return jnp.where(takes, new_value, old_value)

        lane = jax.tree_util.tree_map(pick, self.started(_take(self.plan, jnp.minimum(new, n - 1)), new, lane.slot),
                                      lane)
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

    def write(self, lane, results: _Results, finished, gathered=False) -> _Results:
        """The finished lanes' points written out: the ends of their solutions
        (finished after the loop), or their finished results. `gathered`: the
        lanes are some of the full width's, gathered (the tail), not all of
        them in their places."""
        if not self.finish_at_end:
            return replace(results, out=self.finish_lanes(lane, results, finished))
        row = self.rows_of(lane, finished)
        saved = results.saved
        if saved is not None:
            # The finished points' samples copied out of their lanes' columns (the
            # full width's lanes are in their slots: no gather).
            kept = saved["lanes"][lane.slot] if gathered else saved["lanes"]
            saved = {
                "lanes": saved["lanes"],
                "points": saved["points"].at[row].set(kept, mode="drop", unique_indices=True),
                "sampled": saved["sampled"].at[row].set(lane.sampled, mode="drop", unique_indices=True),
            }
        return replace(results, out={
            k: results.out[k].at[..., row].set(value, mode="drop", unique_indices=True)
            for k, value in _end(lane).items()
        }, saved=saved)

    def finish_lanes(self, lane, results: _Results, finished):
        """The finish of each finished lane's point, into the results: the lanes
        gathered a few at a time (a flush finishes a few percent of them), so a
        finish that reads the whole log reads it for those lanes only."""
        width = lane.point.shape[0]
        size = min(width, self.whole(width // _FINISH_SHARE))

        def some(carry):
            out, left = carry
            index = jnp.nonzero(left, size=size, fill_value=0)[0]
            valid = jnp.arange(size) < jnp.sum(left)
            chosen = _take(lane, index)
            rows = jax.tree_util.tree_map(lambda a: a[jnp.minimum(chosen.point, self.n - 1)], self.inputs)
            values = jax.vmap(self.finish, in_axes=(0, -1), out_axes=-1)(rows, self.solution(chosen, results))
            row = self.rows_of(chosen, valid)
            out = jax.tree_util.tree_map(
                lambda a, value: a.at[..., row].set(value, mode="drop", unique_indices=True), out, values
            )
            return out, left.at[jnp.where(valid, index, width)].set(False, mode="drop")

        out, _ = jax.lax.while_loop(lambda carry: jnp.any(carry[1]), some, (results.out, finished))
        return out

    def solution(self, lane, results: _Results) -> HybridSolution:
        """The lanes' solutions, lanes last, each event log its lane's column with
        the rows past the point's events blank, as a log of the point's own
        would be (the rows hold earlier points' events); so the samples, past
        those the point wrote."""
        log = results.log

        def column(name):
            kept = log[name][..., lane.slot]
            used = jnp.expand_dims(jnp.arange(kept.shape[0])[:, None] < lane.events, tuple(range(1, kept.ndim - 1)))
            return jnp.where(used, kept, _BLANK[name])

        saved = {}
        if results.saved is not None:
            saved = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, -1),
                                           self.samples(results.saved["lanes"][lane.slot], lane.sampled))
        return HybridSolution(**_end(lane), **{name: column(name) for name in EVENT_LOG}, **saved)

    def sample(self, lane: _Lane, step, ends, y_end, mode, results: _Results):
        """The lanes' samples in the steps they took (`step.taken`): at the
        sample times in [t0, t1) from the step's dense output, and at t1 itself
        the final state `y_end` where the point `ends` there. A lane writes its
        samples in order, up to _SAMPLES_A_PASS a pass (the loop runs as many
        passes as the lane with the most samples in its step needs)."""
        times = jnp.asarray(self.machine.times, self.dtype)
        last = times.shape[0] - 1
        prepare, evaluate = self.machine.interpolate
        width = lane.slot.shape[0]
        ahead = jnp.arange(_SAMPLES_A_PASS, dtype=jnp.int32)[:, None]
        spare = self.lanes + jnp.arange(_SAMPLES_A_PASS * width, dtype=lane.slot.dtype).reshape(-1, width)
        first, last_kept = (self.components[0], self.components[-1] + 1) if self.components else (0, 0)
        # a slice where the kept components are consecutive (a gather otherwise)
        components = slice(first, last_kept) if self.components == tuple(range(first, last_kept)) else \
            list(self.components)
        mode = [mode.astype(self.dtype)[None]] if self.keep_mode else []

        def due(sampled):
            return sample_due(step.taken, sampled, last, times[jnp.minimum(sampled, last)], step.t1, ends)

        # once a step, of the components kept only (each is its own arithmetic)
        dense = prepare(step.t0, step.t1, step.y0[components], step.y1[components],
                        [k[components] for k in step.stages])
        y_end = y_end[components]

        def one(carry):
            saved, sampled = carry
            rows = jnp.minimum(sampled + ahead, last)  # (samples, lanes)
            writes = due(sampled + ahead)  # true for a lane's first few (the times are sorted)
            at = times[rows]
            at_end = ends & (at == step.t1)
            y = jnp.stack([jnp.concatenate([jnp.where(at_end[j], y_end, evaluate(dense, at[j])), *mode])
                           for j in range(_SAMPLES_A_PASS)])
            column = jnp.where(writes & (lane.point < self.n), lane.slot, spare)
            return (saved.at[column, rows].set(jnp.swapaxes(y, 1, 2), mode="drop", unique_indices=True),
                    sampled + jnp.sum(writes, axis=0, dtype=sampled.dtype))

        kept, sampled = jax.lax.while_loop(lambda c: jnp.any(due(c[1])), one, (results.saved["lanes"], lane.sampled))
        return replace(lane, sampled=sampled), replace(results, saved={**results.saved, "lanes": kept})

    def record(self, search: _Search, results: _Results) -> _Results:
        """The crossings located in this flush, into their logs: the point's, or
        the lane's (see _Batch)."""
        lane = search.lane
        own = lane.point if self.finish_at_end else lane.slot
        column = jnp.where(search.located & (lane.point < self.n), own,
                           self.columns + jnp.arange(own.shape[0], dtype=own.dtype))
        values = {"event_t": lane.t, "event_y": lane.y.T, "event_code": search.code}

        def put(name):
            k = jnp.clip(lane.events - 1, 0, self.rows[name] - 1)
            return results.log[name].at[k, ..., column].set(values[name], mode="drop", unique_indices=True)

        return replace(results, log={name: put(name) for name in EVENT_LOG})

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
        if machine.times is not None:
            # The samples in the step taken or up to the located crossing; at it
            # too where the point ends there (the state after a reset is the next
            # step's first).
            step = replace(search.sample_step, taken=search.sample_step.taken & valid)
            ends = step.taken & search.located & (located.status != Status.PENDING)
            located, results = self.sample(located, step, ends, located.y, search.lane.mode, results)
            changed += ("sampled",)
        return replace(
            lane, **{k: getattr(lane, k).at[..., back].set(getattr(located, k), mode="drop") for k in changed}
        ), results

    def flush(self, lane, results, next_point, gathered=False):
        """Crossings located, finished lanes written out and, while points are
        left (the full width's loop), refilled."""
        lane, results = self.locate_parked(lane, results)
        finished = self.finished(lane)
        results = self.write(lane, results, finished, gathered)
        if lane.point.shape[0] == self.lanes:
            lane, next_point = self.refill(lane, finished | (lane.point >= self.n), next_point)
        else:  # the tail: no points are left to take
            lane = replace(lane, point=jnp.where(finished, self.n, lane.point))
        return lane, results, next_point

    def loop(self, lane, results, next_point, keep_going, gathered=False):
        """Step the lanes while keep_going(lane, next_point). A lane that finishes,
        or reaches a crossing, waits for the next flush: there crossings are
        located, finished lanes written out and refilled. `gathered`: see write."""
        width = lane.point.shape[0]
        # A flush costs about as much as a step of every lane, so it waits until a
        # good share of the lanes is waiting (or none is stepping): waiting lanes
        # idle for a few steps, the flush runs a few times less often. Locating
        # crossings there, apart from the regular steps, keeps the every-step work
        # to a plain adaptive step: the locating logic costs more than the step.
        threshold = max(1, width // _FLUSH_SHARE)

        def body(carry):
            lane, results, next_point = carry
            if self.machine.times is None:
                lane = self.machine.regular(lane)
            else:
                lane, step = self.machine.regular(lane)
                ends = step.taken & (lane.status != Status.PENDING)
                lane, results = self.sample(lane, step, ends, lane.y, lane.mode, results)
            mine = lane.point < self.n
            pending = lane.status == Status.PENDING
            waiting = jnp.sum(mine & (~pending | lane.locating))
            stepping = jnp.sum(mine & pending & ~lane.locating)
            return jax.lax.cond(
                (waiting >= threshold) | (stepping == 0),
                lambda: self.flush(lane, results, next_point, gathered),
                lambda: (lane, results, next_point),
            )

        return jax.lax.while_loop(lambda c: keep_going(c[0], c[2]), body, (lane, results, next_point))


def samples_read(finish, row, solution: HybridSolution) -> tuple[tuple[int, ...], bool]:
    """The state's components whose samples finish(row, solution) reads, and
    whether it reads their modes: its traced program read backwards from its
    results. A component is read where a static slice of saved_y on its last
    axis is; any other use of saved_y (or saved_y returned) reads them all. A
    finish that reads neither still keeps the modes (one array to write)."""
    def of_samples(row, solution, saved_y, saved_mode):
        return finish(row, replace(solution, saved_y=saved_y, saved_mode=saved_mode))

    closed = jax.make_jaxpr(of_samples)(row, solution, solution.saved_y, solution.saved_mode)
    jaxpr = closed.jaxpr
    y, mode = jaxpr.invars[-2:]
    every = tuple(range(solution.saved_y.shape[-1]))
    equations, variables = live_part(jaxpr)
    read = set(every) if y in jaxpr.outvars else set()
    for eqn in equations:
        if y not in eqn.invars:
            continue
        strides = eqn.params.get("strides") or ()
        if eqn.primitive.name == "slice" and eqn.invars == [y] and all(s == 1 for s in strides):
            read.update(range(eqn.params["start_indices"][-1], eqn.params["limit_indices"][-1]))
        else:
            read.update(every)
    components = tuple(sorted(read))
    return components, mode in variables or not components

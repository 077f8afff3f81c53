"""The hybrid solve of a block of lanes inside the fused kernel.

One lane solves one point: every adaptive Runge-Kutta step (the settings'
Butcher tableau and the arithmetic of diffrax's PIDController, as the lanes
solver), event detection and location (the rules of engine.solve.locate: the
first crossing in the declared direction, a root at a segment's start not a
crossing, the cubic's root then Newton re-steps as on the lanes), resets and
mode switches, from the lane's start (state, mode, arguments, horizon) to
its HybridSolution, and, where the sweep samples times, its states there
(_Samples). The system's functions (vector fields, conditions,
targets, resets) are traced for one point and evaluated on lane vectors
(engine.solve.kernel.jaxpr), so a state of n components is n lane vectors and
everything here is elementwise.

The lanes of a block run in lockstep: the block's loop lasts as long as its
slowest lane, and a finished lane is masked. Each iteration every lane takes
one Runge-Kutta step, either a regular adaptive step or, while it locates a
crossing, a re-step from the step's start to the current Newton iterate: the
step, the costly part, is shared; the decisions are masked selects.

Against the lanes solver: the same rules and arithmetic, except that locating
starts from the step that detected the crossing (the lanes take it again, with
the same result) and the step-size factor is a `pow` (the lanes' bit-level
root is an XLA:CPU work-around); the tests compare the two point for point,
steps included.
"""

import functools

import jax
import jax.numpy as jnp

import engine.solve.kernel.pallas as backend
from engine.solve import stepper
from engine.solve.hybrid import _INACTIVE, EVENT_LOG, HybridSolution, HybridSystem
from engine.solve.kernel.jaxpr import LaneFunction, Unfusable, constant, from_list, lane_vector
from engine.solve.lanes.dense import ELEMENTWISE, first_sample, interpolation, sample_due
from engine.solve.lanes.state import _LOCATE_TRIES, _NONFINITE_SHRINK
from engine.solve.locate import crossed, hermite_root, newton_update, start_value, time_tolerance
from engine.solve.solver_constants import solver_constants
from engine.solve.stepper import Components, Controller, chained
from engine.study.status import Status
from engine.sweep.settings import SolverSettings


def _pick(options, index):
    """options[index[l]] for every lane l of a list of lane vectors (all computed)."""
    chosen = options[-1]
    for i in reversed(range(len(options) - 1)):
        chosen = jnp.where(index == i, options[i], chosen)
    return chosen


def _pick_state(options, index):
    """_pick on lists of components."""
    return [_pick(list(parts), index) for parts in zip(*options, strict=True)]


def _select(conditions, choices, default):
    """The first true condition's choice, lane by lane (as jnp.select)."""
    chosen = default
    for condition, choice in reversed(list(zip(conditions, choices, strict=True))):
        chosen = jnp.where(condition, choice, chosen)
    return chosen


def _all(vectors):
    return functools.reduce(jnp.logical_and, vectors)


def _any(vectors):
    return functools.reduce(jnp.logical_or, vectors)


# An array of the event log (or of the samples) longer than this many rows is
# a C array in the generated kernel (see _Rows); a shorter one stays scalars,
# which a GPU keeps in registers (the H100 figures of the shipped studies,
# whose logs have at most 8 rows, were measured so).
SCALAR_LOG_ROWS = 16


class _Rows:
    """Arrays of rows that a block's loop carries and writes a row at a time:
    the event log (EVENT_LOG: an event's time, code and state) and the
    samples (a sample time's state and mode). `layout`: name -> (rows, width:
    the components of a row, 0 for a single value; dtype, blank value).

    On a block of lanes (Pallas), a list of lane vectors a row (a list of
    `width` of them where width > 0), and the k-th row written by a select on
    every row (per lane, k differs). Traced for one point (one_point: the
    generated C, one thread a point), an array of more than SCALAR_LOG_ROWS
    rows is written in place at its own row: no work and no carried copy per
    step proportional to its rows (a log of 1,024 rows carried as scalars did
    not even compile). Its rows are then read out once, after the loop, as
    lane vectors (what the finish reads)."""

    def __init__(self, layout: dict, lanes: int, one_point: bool):
        self.layout, self.lanes = layout, lanes
        self.rows = {name: rows for name, (rows, *_) in layout.items()}
        self.arrays = {name: one_point and count > SCALAR_LOG_ROWS for name, count in self.rows.items()}

    def _row_of(self, name, k):
        """The row the k-th write takes: k, the last row once they are full."""
        return jnp.minimum(k, self.rows[name] - 1)

    def blank(self) -> dict:
        """The arrays before any write (name -> its rows), each row its blank value."""
        def blank(name, rows, width, dtype, value):
            width = (width,) if width else ()
            if self.arrays[name]:
                return jax.lax.full((rows, *width), value, dtype)
            row = jnp.full((self.lanes,), value, dtype)
            return [[row] * width[0] if width else row for _ in range(rows)]

        return {name: blank(name, *spec) for name, spec in self.layout.items()}

    def write(self, arrays: dict, where, k, values: dict) -> dict:
        """The arrays with row k of each lane written where `where`: values,
        name -> the row's lane vectors (one, or its `width` components)."""
        def write(name, array, values):
            wide = self.layout[name][1] > 0
            if self.arrays[name]:  # one lane, and this runs only where it writes
                row = self._row_of(name, k[0])
                if not wide:
                    return jax.lax.dynamic_update_slice(array, values[0], (row,))
                for j, value in enumerate(values):
                    array = jax.lax.dynamic_update_slice(array, value.reshape(1, 1), (row, jnp.int32(j)))
                return array
            row = self._row_of(name, k)
            written = [where & (row == r) for r in range(self.rows[name])]
            if not wide:
                return [jnp.where(w, values[0], v) for w, v in zip(written, array, strict=True)]
            return [[jnp.where(w, a, b) for a, b in zip(values, old, strict=True)]
                    for w, old in zip(written, array, strict=True)]

        return {name: write(name, array, values[name]) for name, array in arrays.items()}

    def rows_of(self, arrays: dict) -> dict:
        """The arrays' rows as lane vectors (a wide array's: rows of its width)."""
        def rows(name, array):
            if not self.arrays[name]:
                return array
            count, width = self.rows[name], self.layout[name][1]
            if not width:
                return [jax.lax.slice_in_dim(array, r, r + 1) for r in range(count)]
            return [[jax.lax.slice(array, (r, j), (r + 1, j + 1)).reshape(1) for j in range(width)]
                    for r in range(count)]

        return {name: rows(name, array) for name, array in arrays.items()}


def _event_log(rows: dict, n_state: int, dtype, lanes: int, one_point: bool) -> _Rows:
    """A block's event log (EVENT_LOG, rows[name] rows each): NaN times and
    states and code -1 before any event; the k-th event is row k."""
    return _Rows({"event_t": (rows["event_t"], 0, dtype, jnp.nan), "event_code": (rows["event_code"], 0, jnp.int32, -1),
                  "event_y": (rows["event_y"], n_state, dtype, jnp.nan)}, lanes, one_point)


class _Samples:
    """A block's samples at the sweep's times (`[save] times`), written as the
    lanes' steps pass them, by the lanes solver's rules (_Batch.sample): after
    a step [t0, t1] (a regular step, or the re-step to a located crossing),
    the states at the sample times in [t0, t1) from the step's dense output
    (engine.solve.lanes.dense: the same polynomial, component by component);
    at t1 itself the final state where the point ends there. A sample at an
    event the motion goes on from is then the next segment's first (the state
    after the reset); the times after the end stay NaN (mode -1).

    The loop carries each lane's next sample (`sampled`) and its time
    (`next_at`), so a step without a sample due costs one comparison; the
    dense output is made once a step that has some."""

    def __init__(self, times, solver: str, n_state: int, dtype, lanes: int, one_point: bool, read=None):
        if solver not in ELEMENTWISE:
            raise Unfusable(f"the kernel writes samples from the dense output of {' and '.join(ELEMENTWISE)}, "
                            f"not of {solver}")
        self.times, self.dtype, self.lanes, self.one_point = times, dtype, lanes, one_point
        self.last = len(times) - 1
        self.n_state = n_state
        # Only the components (and the mode) the finish reads are made and
        # written (read: the lanes' samples_read; None: all): each costs its
        # quartic once a step and its Horner and store a sample, which the C
        # compiler cannot drop (stores to an array at a running index).
        self.components, self.keep_mode = read or (tuple(range(n_state)), True)
        layout = {}
        if self.components:
            layout["saved_y"] = (len(times), len(self.components), dtype, jnp.nan)
        if self.keep_mode:
            layout["saved_mode"] = (len(times), 0, jnp.int32, -1)
        self.rows = _Rows(layout, lanes, one_point)
        self.prepare, self.evaluate = interpolation(solver)

    def _table(self):
        """The times as one point reads them (the generated C): an array, written
        once before the loop and carried by it unchanged (JAX makes it the
        loop's constant, which the C generator lets branches read), where there
        are more than SCALAR_LOG_ROWS (a select over every time's literal would
        cost each sample that many operations); None where the times are
        literals selected (_time_at). A Pallas kernel cannot hold an array
        constant, nor gather at each lane's own index: selects there."""
        if not (self.one_point and len(self.times) > SCALAR_LOG_ROWS):
            return None
        table = jax.lax.full((len(self.times),), 0, self.dtype)
        for k, t in enumerate(self.times):
            table = jax.lax.dynamic_update_slice(table, jnp.full((1,), t, self.dtype), (jnp.int32(k),))
        return table

    def _time_at(self, k, table):
        """The sample time k of each lane (k past the last: the last)."""
        k = jnp.minimum(k, self.last)
        if table is not None:
            return jax.lax.dynamic_slice(table, (k[0],), (1,))
        return _pick([constant(t, self.dtype) for t in self.times], k)

    def start(self) -> dict:
        """The loop's samples before any step."""
        k, table = jnp.full((self.lanes,), first_sample(self.times), jnp.int32), self._table()
        return {"samples": self.rows.blank(), "sampled": k, "next_at": self._time_at(k, table), "times": table}

    def after_step(self, s, taken, ends, t0, t1, y0, y1, stages, mode) -> dict:
        """The loop's samples after the lanes' step [t0, t1] from y0 to y1, with
        the vector field at each of its `stages`, in `mode`, where `taken`; the
        point `ends` at t1 (its final state y1)."""
        def due(k, at):
            return sample_due(taken, k, self.last, at, t1, ends)

        kept = self.components
        y0, y1 = [y0[c] for c in kept], [y1[c] for c in kept]
        stages = [[k[c] for c in kept] for k in stages]

        def write():
            dense = [self.prepare(t0, t1, a, b, list(ks)) for a, b, *ks in zip(y0, y1, *stages, strict=True)]

            def one(carry):
                samples, k, at, table = carry
                writes = due(k, at)
                y = [jnp.where(ends & (at == t1), end, self.evaluate(d, at)) for d, end in zip(dense, y1, strict=True)]
                values = {"saved_y": y, "saved_mode": [mode]}
                samples = self.rows.write(samples, writes, k, {name: values[name] for name in samples})
                k = k + writes
                return samples, k, jnp.where(writes, self._time_at(k, table), at), table

            return jax.lax.while_loop(lambda c: backend.any_lane(due(c[1], c[2])), one, carry)

        carry = (s["samples"], s["sampled"], s["next_at"], s["times"])
        samples, k, at, table = jax.lax.cond(backend.any_lane(due(s["sampled"], s["next_at"])), write, lambda: carry)
        return {"samples": samples, "sampled": k, "next_at": at, "times": table}

    def solution(self, final: dict) -> dict:
        """The solution's samples (HybridSolution's saved_t, saved_y, saved_mode);
        a component or mode the finish does not read NaN or -1, as the lanes'."""
        rows = self.rows.rows_of(final["samples"])
        count = len(self.times)
        nan, none = jnp.full((self.lanes,), jnp.nan, self.dtype), jnp.full((self.lanes,), -1, jnp.int32)
        y = [[nan] * self.n_state for _ in range(count)]
        for r, row in enumerate(rows.get("saved_y", [])):
            for c, value in zip(self.components, row, strict=True):
                y[r][c] = value
        return {"saved_t": from_list([constant(t, self.dtype) for t in self.times], (count,)),
                "saved_y": from_list([v for row in y for v in row], (count, self.n_state)),
                "saved_mode": from_list(rows.get("saved_mode", [none] * count), (count,))}


class LaneSolve:
    """The hybrid solve of `system` on a block's lanes, for states of n_state
    components and the system's arguments shaped as `args` (a pytree of
    jax.ShapeDtypeStruct). Calling it solves a block (see __call__)."""

    def __init__(self, system: HybridSystem, settings: SolverSettings, n_state: int, args, rows: dict | None = None,
                 samples_read=None):
        self.settings = settings
        self.dtype = dtype = jnp.dtype(settings.dtype)
        self.n_state = n_state
        scalar = jax.ShapeDtypeStruct((), dtype)
        state = jax.ShapeDtypeStruct((n_state,), dtype)
        self.fields = [LaneFunction(m.vector_field, scalar, state, args, name=f"mode {m.name}") for m in system.modes]
        transitions = system.transitions
        self.sources = [source for source, _ in transitions]
        self.directions = [tr.direction for _, tr in transitions]

        def with_slope(condition):
            def value_and_slope(t, y, f, a):
                return jax.jvp(lambda t, y: condition(t, y, a), (t, y), (jnp.ones_like(t), f))

            return value_and_slope

        self.condition_slopes = [
            LaneFunction(with_slope(tr.condition), scalar, state, state, args, name=f"transition {tr.name}")
            for _, tr in transitions
        ]
        names_of = [tr.name for _, tr in transitions] or ["none"]
        self.targets = [LaneFunction(f, scalar, state, args, name=f"target of {k}")
                        for f, k in zip(system.targets(), names_of, strict=True)]
        self.resets = [LaneFunction(f, scalar, state, args, name=f"reset of {k}")
                       for f, k in zip(system.resets(), names_of, strict=True)]
        self.ends_at_horizon = [m.ends_at_horizon for m in system.modes]
        # Rows of each array of the event log (HybridPoint.log_arrays: one where no one reads it).
        self.rows = rows or dict.fromkeys(EVENT_LOG, system.event_rows(settings.max_segments))

        self.tableau = solver_constants(settings.solver).tableau
        self.controller = Controller.of(settings)
        # The sweep's sample times, sorted; None without samples (and then no
        # sample code is traced: the kernel of a sweep without [save] is the same).
        self.times = tuple(settings.save_times) or None
        # The sample components and whether the mode the finish reads (the
        # lanes' samples_read: (components, keep_mode)); None: all of them.
        self.samples_read = samples_read

    # ---- the study's functions on lane vectors

    def _vectors(self, value, dtype, lanes):
        return [lane_vector(e, dtype, lanes) for e in value.reshape(-1)]

    def field(self, t, y, mode, args):
        """The vector field of each lane's mode (every mode's is computed)."""
        lanes = t.shape[0]
        fields = [self._vectors(fn(from_list([t], ()), from_list(y, (self.n_state,)), args, lanes=lanes), self.dtype,
                                lanes) for fn in self.fields]
        return _pick_state(fields, mode) if len(fields) > 1 else fields[0]

    def conditions(self, t, y, f, mode, args):
        """Every transition's condition and its slope along f; a transition not
        leaving a lane's mode is inactive there (constant, slope 0)."""
        lanes = t.shape[0]
        if not self.condition_slopes:
            return [jnp.full((lanes,), _INACTIVE, self.dtype)], [jnp.zeros((lanes,), self.dtype)]
        values, slopes = [], []
        for fn, source in zip(self.condition_slopes, self.sources, strict=True):
            value, slope = fn(from_list([t], ()), from_list(y, (self.n_state,)), from_list(f, (self.n_state,)), args,
                              lanes=lanes)
            active = mode == source
            values.append(jnp.where(active, lane_vector(value[()], self.dtype, lanes), _INACTIVE))
            slopes.append(jnp.where(active, lane_vector(slope[()], self.dtype, lanes), 0.0))
        return values, slopes

    def crossed(self, before, after):
        directions = self.directions or [None]
        return [crossed(b, a, d) for b, a, d in zip(before, after, directions, strict=True)]

    def _field(self, mode, args):
        """The vector field as the stepper calls it: of Components, to Components."""
        return lambda t, y: Components(self.field(t, list(y), mode, args))

    def step(self, t0, t1, y0, f0, mode, args, stages=False):
        """One Runge-Kutta step (engine.solve.stepper.step) on lane vectors: new
        state, error estimate, and the vector field at the new state (and, given
        `stages`, at every stage: the step's dense output)."""
        y1, error, f1, ks = stepper.step(self.tableau, self._field(mode, args), t0, t1, Components(y0), Components(f0),
                                         combine=chained)
        return (list(y1), list(error), list(f1)) + ((ks,) if stages else ())

    def adapt(self, t0, t1, y0, y1, y_error):
        """Accept the step?, and the next step's size (Controller.adapt)."""
        keep, next_t0, next_t1 = self.controller.adapt(t0, t1, Components(y0), Components(y1), Components(y_error))
        return keep, next_t1 - next_t0

    def first_step(self, t0, y0, f0, mode, args, horizon):
        """The initial step-size guess of a segment (Controller.first_step)."""
        return self.controller.first_step(self._field(mode, args), t0, Components(y0), Components(f0), horizon)

    def segment_start(self, t, y, mode, args, horizon):
        """First stage, conditions (a root at the start is not a crossing: start_value),
        their slopes, and the first step size of a segment starting at (t, y)."""
        f = self.field(t, y, mode, args)
        g, dg = self.conditions(t, y, f, mode, args)
        return f, [start_value(v, s, t) for v, s in zip(g, dg, strict=True)], dg, self.first_step(
            t, y, f, mode, args, horizon)

    def event(self, code, t, y, mode, args, horizon):
        """The transition `code` fired at (t, y): its target, the reset state and
        the next segment's start."""
        lanes = t.shape[0]
        t_, y_ = from_list([t], ()), from_list(y, (self.n_state,))
        target = _pick([lane_vector(fn(t_, y_, args, lanes=lanes)[()], jnp.int32, lanes) for fn in self.targets], code)
        y_next = _pick_state([self._vectors(fn(t_, y_, args, lanes=lanes), self.dtype, lanes) for fn in self.resets],
                             code)
        next_mode = jnp.where(target >= 0, target, mode)
        return (target, y_next, next_mode) + tuple(self.segment_start(t, y_next, next_mode, args, horizon))

    # ---- the loop

    def __call__(self, active, y0, mode0, args, horizon, one_point: bool = False) -> HybridSolution:
        """Solve every active lane (active: a boolean lane vector) from its
        start: y0 (n_state lane vectors), mode0 and horizon (lane vectors),
        args (the arguments' pytree, leaves object arrays of lane vectors and
        constants). Returns the lanes' solutions, each field an object array
        of lane vectors.

        one_point: traced for one lane as the generated C (one thread a
        point) runs it, with the event log held as arrays (see _Rows)."""
        dtype = self.dtype
        lanes = active.shape[0]
        if one_point and lanes != 1:
            raise ValueError(f"a solve traced for one point has one lane, not {lanes}")
        log = _event_log(self.rows, self.n_state, dtype, lanes, one_point)
        samples = None if self.times is None else _Samples(self.times, self.settings.solver, self.n_state, dtype, lanes,
                                                           one_point, self.samples_read)
        t0 = jnp.zeros((lanes,), dtype)
        f0, g0, dg0, h0 = self.segment_start(t0, y0, mode0, args, horizon)

        def full(value, dt):
            return jnp.full((lanes,), value, dt)

        zero = full(0, jnp.int32)
        init = dict(
            t=t0, y=y0, f=f0, g=g0, dg=dg0, mode=mode0, h=h0, steps=zero, segment_steps=zero,
            status=full(int(Status.PENDING), jnp.int32), events=zero, log=log.blank(),
            locating=full(False, bool), span=t0, code=zero, lo=t0, hi=t0, dt=t0, nudge=t0,
            creeping=full(False, bool), tries=zero,
        )
        if samples is not None:
            init.update(samples.start())

        def running(s):
            return backend.any_lane((s["status"] == Status.PENDING) & active)

        final = jax.lax.while_loop(running, functools.partial(self.iteration, active, args, horizon, log, samples),
                                   init)
        rows = log.rows_of(final["log"])
        solution = HybridSolution(
            t=from_list([final["t"]], ()), y=from_list(final["y"], (self.n_state,)),
            mode=from_list([final["mode"]], ()),
            status=from_list([final["status"]], ()), num_steps=from_list([final["steps"]], ()),
            num_events=from_list([final["events"]], ()), event_t=from_list(rows["event_t"], (self.rows["event_t"],)),
            event_y=from_list([v for row in rows["event_y"] for v in row], (self.rows["event_y"], self.n_state)),
            event_code=from_list(rows["event_code"], (self.rows["event_code"],)),
            **({} if samples is None else samples.solution(final)),
        )
        return solution

    def iteration(self, active, args, horizon, log, samples, s):
        """One Runge-Kutta step of every running lane: a regular adaptive step, or
        a re-step of a lane locating a crossing (the rules of lanes.py: a step that
        crossed a condition parks the lane to locate it; its Newton re-steps)."""
        settings = self.settings
        pending = (s["status"] == Status.PENDING) & active
        locating = pending & s["locating"]
        stepping = pending & ~s["locating"]
        t, y, f, mode = s["t"], s["y"], s["f"], s["mode"]
        to_horizon = horizon - t
        clipped = stepping & (s["h"] >= to_horizon)
        span = jnp.where(clipped, to_horizon, s["h"])
        t1 = jnp.where(s["locating"], t + s["dt"], jnp.where(clipped, horizon, t + span))
        y1, y_error, f1, *stages = self.step(t, t1, y, f, mode, args, stages=samples is not None)
        g1, dg1 = self.conditions(t1, y1, f1, mode, args)
        finite = _all([jnp.isfinite(v) for v in y1])
        crossings = self.crossed(s["g"], g1)

        # ---- a regular step: taken, rejected, or parked at a crossing
        keep, h_adapted = self.adapt(t, t1, y, y1, y_error)
        keep = keep & finite
        h_next = jnp.where(finite, h_adapted, _NONFINITE_SHRINK * span)
        detect = stepping & keep & _any(crossings)
        moves = stepping & keep & ~detect
        at_horizon = moves & clipped
        segment_steps = s["segment_steps"] + stepping
        out_of_steps = stepping & ~detect & ~at_horizon & (segment_steps >= settings.max_steps)
        ends = _pick([jnp.asarray(e) for e in self.ends_at_horizon], mode) if len(self.ends_at_horizon) > 1 else (
            jnp.asarray(self.ends_at_horizon[0]))
        status = _select(
            [at_horizon & ends, at_horizon, out_of_steps],
            [int(Status.SUCCESS), int(Status.EVENT_NOT_FOUND), int(Status.MAX_STEPS)],
            s["status"],
        )
        # Locating starts from the cubic's root of the earliest crossed condition
        # (lanes' start_locating, with the step just taken): computed only in an
        # iteration where some lane detected a crossing (a few in a hundred).
        parked_span = t1 - t

        def earliest_root():
            roots = [jnp.where(c, hermite_root(a, da, b, db, parked_span, d), jnp.inf)
                     for c, a, da, b, db, d in zip(crossings, s["g"], s["dg"], g1, dg1, self.directions or [None],
                                                   strict=True)]
            first, best = jnp.zeros_like(mode), roots[0]
            for j in range(1, len(roots)):
                smaller = roots[j] < best
                first, best = jnp.where(smaller, j, first), jnp.where(smaller, roots[j], best)
            return first, best

        first, best = jax.lax.cond(backend.any_lane(detect), earliest_root,
                                   lambda: (jnp.zeros_like(mode), jnp.zeros_like(t)))

        # ---- a re-step of a lane locating its crossing (lanes' _Machine.locate)
        code, dt, lo, hi = s["code"], s["dt"], s["lo"], s["hi"]
        tol = time_tolerance(t, t + s["span"])
        value, slope = _pick(g1, code), _pick(dg1, code)
        past = _pick(crossings, code) & (dt > 0)
        lo, hi, converged, newton = newton_update(dt, value, slope, past, lo, hi, tol, finite)
        settled = converged | s["creeping"]
        others = [c & (code != j) for j, c in enumerate(crossings)]
        switch = locating & settled & past & _any(others)
        other = _select(others, list(range(len(others))), 0)
        g_other, g1_other = _pick(s["g"], other), _pick(g1, other)
        located = locating & settled & past & ~switch
        creep = locating & settled & ~past
        tries = s["tries"] + locating
        lost = locating & ~located & (tries >= _LOCATE_TRIES)

        # ---- the event: recorded, then the solve ends or goes on in the next mode.
        # Its work (targets, resets, the next segment's start, the event log's
        # row) is done only in an iteration where some lane located a crossing:
        # one point a thread (the generated C), only at its own events.
        def fired():
            return self.event(code, t1, y1, mode, args, horizon) + (
                log.write(s["log"], located, s["events"], {"event_t": [t1], "event_code": [code], "event_y": y1}),)

        def quiet():
            return (jnp.full_like(mode, -1), y1, mode, f1, g1, dg1, s["h"], s["log"])

        target, y_next, next_mode, f_next, g_next, dg_next, h_first, written = jax.lax.cond(
            backend.any_lane(located), fired, quiet)
        reset_finite = _all([jnp.isfinite(v) for v in y_next])
        goes_on = located & (target >= 0) & reset_finite & (s["events"] + 1 < settings.max_segments)
        status = _select(
            [located & (target < 0), located & ~reset_finite, located & ~goes_on, lost],
            [int(Status.SUCCESS), int(Status.NONFINITE), int(Status.MAX_SEGMENTS), int(Status.SOLVER_FAILED)],
            status,
        )
        step_on = locating & ~switch & ~creep

        def state(regular, on, after, before):
            """A state's components: after a regular step, going on after an
            event, at an event that ends the solve (None: unchanged), or as before."""
            after = before if after is None else after
            return [jnp.where(moves, a, jnp.where(goes_on, b, jnp.where(located, c, d)))
                    for a, b, c, d in zip(regular, on, after, before, strict=True)]

        zero = jnp.zeros_like(t)
        carry = dict(
            t=jnp.where(moves | located, t1, t),
            y=state(y1, y_next, y1, y),
            f=state(f1, f_next, None, f),
            g=state(g1, g_next, None, s["g"]),
            dg=state(dg1, dg_next, None, s["dg"]),
            mode=jnp.where(goes_on, next_mode, mode),
            h=jnp.where(stepping, h_next, jnp.where(goes_on, h_first, s["h"])),
            steps=s["steps"] + stepping,
            segment_steps=jnp.where(goes_on, 0, segment_steps),
            status=status,
            events=s["events"] + located,
            log=written,
            locating=(s["locating"] & ~located & ~lost) | detect,
            span=jnp.where(detect, parked_span, jnp.where(switch, dt, s["span"])),
            code=jnp.where(detect, first, jnp.where(switch, other, code)),
            dt=jnp.where(detect, best, _select(
                [switch, creep, step_on],
                [dt * g_other / jnp.where(g_other == g1_other, 1.0, g_other - g1_other),
                 jnp.minimum(dt + s["nudge"], hi), newton],
                dt,
            )),
            lo=jnp.where(detect | switch, zero, jnp.where(locating, lo, s["lo"])),
            hi=jnp.where(detect, parked_span, jnp.where(switch, dt, jnp.where(locating, hi, s["hi"]))),
            nudge=jnp.where(detect, jnp.maximum(time_tolerance(t, t1), 1e-300), jnp.where(
                creep, 4 * s["nudge"], jnp.where(switch, jnp.maximum(tol, 1e-300), s["nudge"]))),
            creeping=jnp.where(detect, False, jnp.where(locating, creep, s["creeping"])),
            tries=jnp.where(detect | switch, 0, jnp.where(locating, tries, s["tries"])),
        )
        if samples is not None:  # the step taken: a regular one, or the re-step to a located crossing
            taken = moves | located
            carry.update(samples.after_step(s, taken, taken & (status != Status.PENDING), t, t1, y, y1, stages[0],
                                            mode))
        return carry


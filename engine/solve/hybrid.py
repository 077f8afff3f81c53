"""Hybrid (piecewise-smooth) motion: modes, transitions and the segment loop.

A study declares modes (vector fields) and transitions (event functions, state
maps, next mode); the engine integrates segment after segment inside a bounded
`lax.while_loop`, so the whole solve stays vmappable.

Steps. Each segment is a `diffeqsolve` with the settings' solver, its stages
unrolled (engine.solve.tableau.Unrolled): under vmap a loop iteration costs the
whole batch, and diffrax's own explicit solvers take one per stage.

Event location. diffrax locates an event's time on the step interpolant, and
returns the interpolated state there. For high-order solvers taking long steps
that state is off by ~1e-8, far above the solver tolerance. So we let diffrax
only *detect* the event (an `Event` without root finder stops at the end of the
step in which the sign changed), then find the event time by Newton iteration
on re-steps of the same tableau from that step's exact start, which the
solver's state keeps (engine.solve.locate's rules, as every solver). A re-step
is no longer than the accepted step, so the event state is exact to solver
tolerance.
"""

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from engine.pytree import PytreeDataclass
from engine.solve.liveness import live_part
from engine.solve.locate import crossed, hermite_root, newton_update, start_value, time_tolerance
from engine.solve.solver_constants import solver_constants
from engine.solve.stepper import step as unrolled_step
from engine.study.status import Status
from engine.sweep.settings import SolverSettings

if TYPE_CHECKING:  # diffrax is imported where a solve is traced (below), not with a study's module
    import diffrax

    from engine.solve.tableau import LastStep

# Inactive event functions return this constant: it never changes sign.
_INACTIVE = 1.0
# Re-steps allowed to locate an event inside its step (2-3 are typical: every
# crossing of the rolling-ball sweep took 2, a bouncing ball's impacts 3).
_NEWTON_ITERATIONS = 64
# Newton steps on the cubic for the first iterate (hermite_root's default is 3).
# A bouncing ball's step may span many flights (the parabola is integrated
# exactly) and the cubic is then exact, but 3 steps left the root of a flight
# 1/100 of the step long a few % off: 3 re-steps an impact instead of 2
# (lockstep iterations of 40 bouncing balls, 6 impacts: 46 with 3, 40 with 5,
# 39 with 8; the rolling-ball sweep: 49 with 3 and with 5).
_GUESS_ITERATIONS = 5


def _identity(t, y, params):
    return y


def _target_function(target):
    """A transition's target as a function of the event state (negative: end)."""
    if callable(target):
        return lambda t, y, p: jnp.asarray(target(t, y, p), jnp.int32)
    index = -1 if target is None else target
    return lambda t, y, p: jnp.asarray(index, jnp.int32)


@dataclasses.dataclass(frozen=True)
class Transition:
    """Leave the current mode when `condition(t, y, args)` crosses zero.

    direction: None (either way), True (upcrossing) or False (downcrossing).
    target: index of the next mode, or None to end the solve (terminal event), or
        a function `(t, y, args) -> index` (negative: end) of the state at the
        event, before the reset: e.g. a ball that reaches the table plane
        bounces inside the table and ends its flight outside it.
    reset: state map `(t, y, args) -> y` applied at the event; identity if None.
    """

    name: str
    condition: Callable
    target: int | None | Callable
    direction: bool | None = None
    reset: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Mode:
    """One smooth phase of motion. If `ends_at_horizon`, reaching `t_max` is a success."""

    name: str
    vector_field: Callable
    transitions: tuple[Transition, ...] = ()
    ends_at_horizon: bool = False


class HybridSolution(PytreeDataclass):
    """Outcome of one hybrid solve (one parameter point).

    event_t[k], event_y[k], event_code[k]: time, state (before the reset) and
    index (into `HybridSystem.transitions`) of the k-th event; NaN/-1 if unused.

    saved_t, saved_y, saved_mode: the settings' sample times (`[save] times`),
    the state and the mode there; at an event's time the state after its
    reset; NaN and -1 at the times before the solve starts and after it ends.
    None where the settings sample no times.
    """

    t: jax.Array
    y: jax.Array
    mode: jax.Array
    status: jax.Array
    num_steps: jax.Array
    num_events: jax.Array
    event_t: jax.Array
    event_y: jax.Array
    event_code: jax.Array
    saved_t: jax.Array | None = None
    saved_y: jax.Array | None = None
    saved_mode: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class HybridSystem:
    modes: tuple[Mode, ...]

    @property
    def transitions(self) -> tuple[tuple[int, Transition], ...]:
        """Every transition with the index of the mode it leaves, in a fixed order."""
        return tuple((m, tr) for m, mode in enumerate(self.modes) for tr in mode.transitions)

    def targets(self) -> list[Callable]:
        """Each transition's target as a function of the event state, for lax.switch."""
        # (A placeholder keeps lax.switch well-formed when nothing can fire.)
        return [_target_function(tr.target) for _, tr in self.transitions] or [_target_function(None)]

    def resets(self) -> list[Callable]:
        """Each transition's state map (identity if none), for lax.switch."""
        return [(tr.reset if tr.reset is not None else _identity) for _, tr in self.transitions] or [_identity]

    def event_rows(self, max_segments: int) -> int:
        """Rows of a solution's event log: max_segments, or fewer when the mode
        graph bounds the events of any solve (every target a fixed mode or the
        end, no cycle): then its longest path. The log is carried and written at
        every step of the lanes, so a short one is measurably cheaper."""
        longest: dict[int, int | None] = {}

        def events_from(mode: int, visiting: frozenset) -> int | None:
            if mode in visiting:
                return None  # a cycle: the graph does not bound the events
            if mode not in longest:
                counts = []
                for tr in self.modes[mode].transitions:
                    if callable(tr.target):
                        return None  # the next mode depends on the state
                    after = 0 if tr.target is None else events_from(tr.target, visiting | {mode})
                    if after is None:
                        return None
                    counts.append(1 + after)
                longest[mode] = max(counts, default=0)
            return longest[mode]

        bounds = [events_from(m, frozenset()) for m in range(len(self.modes))]
        if any(b is None for b in bounds):
            return max_segments
        return max(1, min(max_segments, max(bounds)))

    def _vector_field(self, t, y, args):
        mode, params = args[:2]
        return jax.lax.switch(mode, [m.vector_field for m in self.modes], t, y, params)

    def _event(self) -> "diffrax.Event":
        import diffrax

        def gated(j, source, condition):
            def cond_fn(t, y, args, *, t0, **kwargs):
                # At the segment's start, the value the crossing test sees
                # (args[2], see start_values): a root there is not a crossing.
                mode, params, starts = args
                value = condition(t, y, params)
                value = jnp.where(t == t0, starts[j].astype(value.dtype), value)
                return jnp.where(mode == source, value, jnp.asarray(_INACTIVE, value.dtype))

            return cond_fn

        conds = [gated(j, m, tr.condition) for j, (m, tr) in enumerate(self.transitions)]
        directions = [tr.direction for _, tr in self.transitions]
        return diffrax.Event(conds, direction=directions)

    @staticmethod
    def _save_at(times, t0, t1) -> "diffrax.SaveAt":
        """A segment's saves: its end and the solver's state there; and where
        the settings sample `times`, those within its span [t0, t1] (the others
        clipped to its ends and not kept: saved_in_segment)."""
        import diffrax

        if times is None:
            return diffrax.SaveAt(t1=True, solver_state=True)
        return diffrax.SaveAt(subs=(diffrax.SubSaveAt(t1=True), diffrax.SubSaveAt(ts=jnp.clip(times, t0, t1))),
                              solver_state=True)

    def start_values(self, t, y, mode, params):
        """Every transition's condition at a segment's start, as the crossing
        test sees it (engine.solve.locate.start_value); inactive ones constant."""
        flow = self._vector_field(t, y, (mode, params))
        values = []
        for source, tr in self.transitions:
            value, slope = jax.jvp(lambda t, y, c=tr.condition: c(t, y, params), (t, y), (jnp.ones_like(t), flow))
            value = start_value(value, slope, t)
            values.append(jnp.where(mode == source, value, jnp.asarray(_INACTIVE, value.dtype)))
        return jnp.stack(values) if values else jnp.zeros((0,), y.dtype)

    def _locate(self, j, step: "LastStep", g0, t1, y1, g1, mode, params, settings, wanted):
        """Transition j's crossing inside the step that started at `step` (its
        time, state and vector field: a LastStep) and ended at (t1, y1), where
        `wanted`: its offset dt from the step's start, whether it was located, and
        the state there. g0, g1: the condition at the step's ends as the crossing test saw
        them. A lane not `wanted` takes no iteration, so under vmap a batch pays
        the locating of the transitions some lane crossed, and no other.

        engine.solve.locate's rules, driven as the lanes drive them: the first
        iterate is the root of the cubic through the condition's values and slopes
        at the step's ends (hermite_root), then Newton updates (newton_update) on
        dt -> condition(restep(dt)), where restep is one step of the solver's
        tableau (engine.solve.stepper.step) from the step's exact start: always from the same
        exact point, so no error accumulates between iterates, and the state at
        the located time is that re-step's, exact to solver tolerance like any
        step's end (no final re-step). The slope along the flow at an iterate
        comes from the re-step's last stage (no differentiation through the step).
        """
        condition, direction = self.transitions[j][1].condition, self.transitions[j][1].direction
        tableau = solver_constants(settings.solver).tableau
        args = (mode, params)
        t0, y0, f0 = step.t_start, step.y_start, step.f_start

        def field(t, y):
            return self._vector_field(t, y, args)

        def slope(t, y, f):
            return jax.jvp(lambda t, y: condition(t, y, params), (t, y), (jnp.ones_like(t), f))[1]

        span = t1 - t0
        tol = time_tolerance(t0, t1)
        first = hermite_root(g0, slope(t0, y0, f0), g1, slope(t1, y1, step.f), span, direction,
                             iterations=_GUESS_ITERATIONS)

        def restep(carry):
            dt, lo, hi, nudge, creeping, tries, searching, located, y_at = carry
            y, _, f, _ = unrolled_step(tableau, field, t0, t0 + dt, y0, f0)
            value, dg = jax.jvp(lambda t, y: condition(t, y, params), (t0 + dt, y), (jnp.ones_like(t0), f))
            finite = jnp.all(jnp.isfinite(y))
            # A re-step of length zero is the step's start, where a root does not count.
            past = crossed(g0, value, direction) & (dt > 0)
            lo_, hi_, converged, newton = newton_update(dt, value, dg, past, lo, hi, tol, finite)
            settled = converged | creeping
            found = searching & settled & past
            # Converged but still on the near side (rounding): step forward, by
            # growing nudges and no more Newton updates, until past.
            creep = searching & settled & ~past
            tries = tries + searching
            lost = searching & ~found & (tries >= _NEWTON_ITERATIONS)
            step_on = searching & ~found
            return (
                jnp.where(step_on, jnp.where(creep, jnp.minimum(dt + nudge, hi_), newton), dt),
                jnp.where(searching, lo_, lo),
                jnp.where(searching, hi_, hi),
                jnp.where(creep, 4 * nudge, nudge),
                jnp.where(searching, creep, creeping),
                tries,
                searching & ~found & ~lost,
                located | found,
                jnp.where(found, y, y_at),
            )

        zero = jnp.zeros_like(t0)
        init = (first, zero, span, jnp.maximum(tol, 1e-300), jnp.asarray(False), jnp.asarray(0, jnp.int32), wanted,
                jnp.asarray(False), y0)
        dt, *_, located, y_at = jax.lax.while_loop(lambda c: c[6], restep, _batched_like(y0, init))
        return dt, located, y_at

    def _earliest(self, c: "HybridSolution", starts, t_end, y_end, step, event_mask, params, settings, running):
        """The transition that fired first inside the segment's last step (which
        started at `step`, a LastStep, and ended at (t_end, y_end)).

        diffrax stops at the step where some condition changed sign, but reports
        only the first *declared* one. Several can cross within one long step (a
        parabola is integrated exactly: one step may span a whole flight, net and
        table both). Each condition that crossed in that step (diffrax's test on
        its values at the step's ends; at the segment's start, the value the test
        saw there) is located, and the earliest wins, with the state its search
        ended at.
        """
        reported = jax.tree_util.tree_leaves(event_mask)
        times, states, oks = [], [], []
        for j, (source, tr) in enumerate(self.transitions):
            before = jnp.where(step.t_start == c.t, starts[j], tr.condition(step.t_start, step.y_start, params))
            after = tr.condition(t_end, y_end, params)
            crossed_j = crossed(before, after, tr.direction) & (c.mode == source)
            candidate = (crossed_j | reported[j]) & running
            dt_j, ok_j, y_j = self._locate(j, step, before, t_end, y_end, after, c.mode, params, settings, candidate)
            candidate = candidate & ok_j
            times.append(jnp.where(candidate, step.t_start + dt_j, jnp.inf))
            states.append(y_j)
            oks.append(candidate)
        code = jnp.argmin(jnp.stack(times))
        found = jnp.stack(oks)[code]
        y_ev = jnp.where(found, jnp.stack(states)[code], y_end)
        return code, jnp.stack(times)[code], y_ev, found & jnp.all(jnp.isfinite(y_ev))

    def solve(self, y0, mode0, params, settings: SolverSettings, t_end=None, rows: int | None = None
              ) -> HybridSolution:
        """Solve from t = 0 to the first terminal event, or to t_end (default:
        settings.t_max; may differ per point). `rows`: of the event log
        (default: event_rows; HybridPoint.log_rows keeps one where no one reads it)."""
        dtype = y0.dtype
        n_state = y0.shape[0]
        n_seg = settings.max_segments
        rows = self.event_rows(n_seg) if rows is None else rows
        transitions = self.transitions
        targets, resets = self.targets(), self.resets()
        ends_at_horizon = jnp.array([m.ends_at_horizon for m in self.modes])
        import diffrax  # here, not at import: a study's module loads without it (rollsweep validate)

        from engine.solve.tableau import Unrolled

        term = diffrax.ODETerm(self._vector_field)
        horizon = jnp.asarray(settings.t_max if t_end is None else t_end, dtype)
        event = self._event() if transitions else None
        solver = Unrolled(settings.make_solver())
        controller = settings.make_controller()
        times = jnp.asarray(settings.save_times, dtype) if settings.save_times else None

        def body(carry):
            c, finished = carry  # the solution so far (the loop's state) and whether it is finished
            # Under vmap the loop runs until every lane is finished, and runs its
            # body on the finished ones too (their results are discarded): they
            # solve no further (t1 = t0: no step) and locate nothing, so they
            # cost the batch no lockstep iterations.
            running = ~finished
            starts = self.start_values(c.t, c.y, c.mode, params)
            t1 = jnp.where(running, horizon, c.t)
            with _span_checked_here(times is not None):
                sol = diffrax.diffeqsolve(
                    term,
                    solver,
                    t0=c.t,
                    t1=t1,
                    dt0=None,
                    y0=c.y,
                    args=(c.mode, params, starts),
                    saveat=self._save_at(times, c.t, t1),
                    stepsize_controller=controller,
                    event=event,
                    max_steps=settings.max_steps,
                    throw=False,
                )
            # The end's save first, then the samples (two saves of their own:
            # in one, the end is written after the samples saved, not last).
            t_end, y_end = (sol.ts, sol.ys) if times is None else (sol.ts[0], sol.ys[0])
            t_end, y_end = t_end[-1], y_end[-1]
            steps = c.num_steps + sol.stats["num_steps"]
            fired = sol.result == diffrax.RESULTS.event_occurred
            if event is not None:
                code, t_ev, y_ev, located = self._earliest(
                    c, starts, t_end, y_end, sol.solver_state, sol.event_mask, params, settings, running
                )
            else:  # no transitions anywhere: nothing can fire
                code, t_ev, y_ev, located = jnp.asarray(0), t_end, y_end, jnp.asarray(False)
            target = jax.lax.switch(code, targets, t_ev, y_ev, params)
            y_next = jax.lax.switch(code, resets, t_ev, y_ev, params)
            k = jnp.minimum(c.num_events, rows - 1)

            reached_horizon = sol.result == diffrax.RESULTS.successful
            status = jnp.select(
                [
                    fired & ~located,
                    fired,
                    reached_horizon & ends_at_horizon[c.mode],
                    reached_horizon,
                    sol.result == diffrax.RESULTS.max_steps_reached,
                ],
                [Status.SOLVER_FAILED, Status.SUCCESS, Status.SUCCESS, Status.EVENT_NOT_FOUND, Status.MAX_STEPS],
                Status.SOLVER_FAILED,
            ).astype(jnp.int8)
            finite = jnp.all(jnp.isfinite(jnp.where(fired, y_next, y_end)))
            status = jnp.where(finite, status, jnp.int8(Status.NONFINITE))
            continue_ = fired & located & (target >= 0) & finite
            done = ~continue_
            # Out of segments while the motion still goes on.
            too_many = continue_ & (c.num_events + 1 >= n_seg)
            status = jnp.where(too_many, jnp.int8(Status.MAX_SEGMENTS), status)
            done = done | too_many

            def record(arr, value):
                # Row k alone, not a `where` over the whole log. (Under vmap the
                # loop still selects its whole state, the log included, every
                # segment: the lanes keep the log out of the loop's state.)
                return arr.at[k].set(jnp.where(fired, value, arr[k]))

            t_next = jnp.where(fired, t_ev, t_end)
            y_final = jnp.where(fired & (target >= 0), y_next, jnp.where(fired, y_ev, y_end))
            saved = {}
            if times is not None:
                saved = saved_in_segment(c, times, sol.ys[1], running, t_next, y_final, ends=done)
            return HybridSolution(
                t=t_next,
                y=y_final,
                mode=jnp.where(continue_, target, c.mode).astype(c.mode.dtype),
                status=status,
                num_steps=steps,
                num_events=c.num_events + fired.astype(c.num_events.dtype),
                event_t=record(c.event_t, t_ev),
                event_y=record(c.event_y, y_ev),
                event_code=record(c.event_code, code.astype(c.event_code.dtype)),
                **saved,
            ), done

        init = HybridSolution(
            t=jnp.asarray(0.0, dtype),
            y=y0,
            mode=jnp.asarray(mode0, jnp.int32),
            status=jnp.int8(Status.PENDING),
            num_steps=jnp.asarray(0, jnp.int32),
            num_events=jnp.asarray(0, jnp.int32),
            event_t=jnp.full((rows,), jnp.nan, dtype),
            event_y=jnp.full((rows, n_state), jnp.nan, dtype),
            event_code=jnp.full((rows,), -1, jnp.int32),
            **({} if times is None else {"saved_t": times, "saved_y": jnp.full((len(times), n_state), jnp.nan, dtype),
                                         "saved_mode": jnp.full((len(times),), -1, jnp.int32)}),
        )
        solution, _ = jax.lax.while_loop(lambda carry: ~carry[1], body, _batched_like(y0, (init, jnp.asarray(False))))
        return solution


def _batched_like(anchor, carry):
    """`carry`, each value batched wherever `anchor` is (under jax.vmap), for a
    while loop's first carry. vmap batches a loop's carry by a fixed point: it
    batches the body again each time an unbatched value of the carry comes out
    batched (a counter that starts at 0, a log that starts NaN), and a loop
    inside the body is batched again with it. A carry batched from the start
    settles in one pass: the vmapped solve traces in 25-40% less time (the
    rolling ball 1.27 -> 0.95 s, with samples 1.7 -> 1.1 s, the hoop's
    adaptive run 2.9 -> 2.4 s). The select of a value with itself changes no
    value: the results are the same bits (benchmarks/results_snapshot.py)."""
    always = jnp.isnan(anchor.ravel()[0]) | True
    return jax.tree_util.tree_map(lambda value: jnp.where(always, value, value), carry)


def saved_in_segment(c: HybridSolution, times, ys, running, t_stop, y_stop, ends) -> dict:
    """The samples a segment adds to the solution `c` (which holds the earlier
    segments'): its states at the sample times in [c.t, t_stop), where it
    started at c.t and stopped at t_stop (an event's time, or its end); and at
    t_stop itself where the solve `ends` there, its final state `y_stop`. A
    sample at an event the motion goes on from is the next segment's first,
    the state after the reset. `ys`: the segment's states at the times clipped
    to its span, each from the dense output of the step it falls in (the
    solver's interpolant, as diffrax's SaveAt(ts) reads it)."""
    inside = running & (times >= c.t) & (times < t_stop)
    at_end = running & ends & (times == t_stop)
    keep = inside | at_end
    y = jnp.where(at_end[:, None], y_stop, ys)
    return {
        "saved_t": c.saved_t,
        "saved_y": jnp.where(keep[:, None], y, c.saved_y),
        "saved_mode": jnp.where(keep, c.mode, c.saved_mode),
    }


@contextlib.contextmanager
def _span_checked_here(sampling: bool):
    """diffrax checks that SaveAt's times lie within the solve's [t0, t1] with
    equinox's error_if: on traced bounds, a host callback, and a program that
    holds one cannot be exported (jax.export), so a sampled sweep's program
    was compiled again by every process. The times a segment saves are clipped
    into its span (HybridSystem._save_at): the check cannot fail, and is traced
    off here. (Equinox reads the setting as it traces; where it has moved, the
    check stays and the program is only not kept.)"""
    import equinox._errors as errors

    setting = getattr(errors, "EQX_ON_ERROR", None)
    if not sampling or setting is None:
        yield
        return
    errors.EQX_ON_ERROR = "off"
    try:
        yield
    finally:
        errors.EQX_ON_ERROR = setting


class Start(NamedTuple):
    """Where one point's hybrid solve begins: state, mode, the arguments every
    vector field, condition and reset receives, and the horizon (None: t_max)."""

    y0: jax.Array
    mode: Any
    args: Any
    t_end: Any = None


@dataclasses.dataclass(frozen=True)
class HybridPoint:
    """A study's point function written as start -> hybrid solve -> finish.

    Calling it is the plain per-point solve. Declared this way (as a study's
    `solve_point`), it also lets the engine solve a whole batch on lanes that
    take a new point as soon as they finish one (engine.solve.lanes), instead of
    vmapping the point function, where every lane waits for the slowest.

    start(params, settings) -> Start
    finish(params, solution: HybridSolution, settings) -> PointResult
    """

    system: HybridSystem
    start: Callable
    finish: Callable

    def __call__(self, params, settings: SolverSettings):
        y0, mode, args, t_end = self.start(params, settings)
        rows = self.log_rows(params, y0, settings)
        return self.finish(params, self.system.solve(y0, mode, args, settings, t_end, rows), settings)

    def log_rows(self, params, y0, settings: SolverSettings) -> int:
        """Rows of the event log a solve keeps for this point function: the
        system's (engine.solve.hybrid.HybridSystem.event_rows), or one where
        `finish` reads none of the log (most studies read the end state and the
        counts). The log is written at every event and carried through the
        solve, so its size, not the events taken, had set the cost: a ball
        bouncing to rest, tens of impacts a point, on the lanes at 19k points/s
        with max_segments = 1024 and 45k with 128; with one row 86-124k either
        way (2 busy cores; the same results). `params` and `y0`: one point's
        (arrays or their shapes)."""
        return max(self.log_arrays(params, y0, settings).values())

    def log_arrays(self, params, y0, settings: SolverSettings) -> dict:
        """Rows kept of each array of the event log (log_rows_read of this
        point's finish): the fused kernel keeps an array no one reads as one row."""
        return log_rows_read(self.system, self.finish, params, y0, settings)


def solution_shapes(y0, rows: int | dict, times: int = 0) -> HybridSolution:
    """The shapes and dtypes of one point's solution, for a state like `y0`, an
    event log of `rows` rows (or of rows[name] rows, array by array) and
    `times` sample times (none: no samples)."""
    dtype, n = y0.dtype, y0.shape[0]
    rows = rows if isinstance(rows, dict) else dict.fromkeys(EVENT_LOG, rows)
    saved = {} if not times else {
        "saved_t": jax.ShapeDtypeStruct((times,), dtype), "saved_y": jax.ShapeDtypeStruct((times, n), dtype),
        "saved_mode": jax.ShapeDtypeStruct((times,), jnp.int32)}
    return HybridSolution(
        t=jax.ShapeDtypeStruct((), dtype), y=jax.ShapeDtypeStruct((n,), dtype),
        mode=jax.ShapeDtypeStruct((), jnp.int32), status=jax.ShapeDtypeStruct((), jnp.int8),
        num_steps=jax.ShapeDtypeStruct((), jnp.int32), num_events=jax.ShapeDtypeStruct((), jnp.int32),
        event_t=jax.ShapeDtypeStruct((rows["event_t"],), dtype),
        event_y=jax.ShapeDtypeStruct((rows["event_y"], n), dtype),
        event_code=jax.ShapeDtypeStruct((rows["event_code"],), jnp.int32),
        **saved,
    )


def log_rows_read(system: HybridSystem, finish, params, y0, settings: SolverSettings) -> dict:
    """Rows kept of each array of the event log (name -> rows) for
    finish(params, solution, settings): the system's
    (HybridSystem.event_rows) where the finish reads the array, one where it
    does not; every array's where the finish's results would change with the
    shape of an array it does not read (`len(sol.event_code)` as the log's
    length, say). `params` and `y0`: one point's (arrays or their shapes)."""
    rows = system.event_rows(settings.max_segments)
    full = dict.fromkeys(EVENT_LOG, rows)
    if rows == 1:
        return full
    times = len(settings.save_times)
    program = _finish_program(finish, params, solution_shapes(y0, full, times), settings)  # traced once, read twice
    read = _log_read(*program)
    kept = {name: rows if name in read else 1 for name in EVENT_LOG}
    if kept != full and (_results_program(*_finish_program(finish, params, solution_shapes(y0, kept, times),
                                                           settings))
                         != _results_program(*program)):
        return full
    return kept


def event_log_read(finish, params, solution: HybridSolution, settings: SolverSettings) -> frozenset[str]:
    """The arrays of the solution's event log (of event_t, event_y,
    event_code) on which finish(params, solution, settings)'s results depend:
    its traced program read backwards from its results. An operation with side
    effects counts as reading all its inputs."""
    return _log_read(*_finish_program(finish, params, solution, settings))


def _log_read(jaxpr, live, _consts) -> frozenset[str]:
    """The log arrays among a finish's program's inputs (_finish_program) that its results depend on."""
    log_inputs = jaxpr.invars[-len(EVENT_LOG):]
    return frozenset(name for name, v in zip(EVENT_LOG, log_inputs, strict=True) if v in live)


def _finish_program(finish, params, solution: HybridSolution, settings: SolverSettings):
    """finish(params, solution, settings) traced, the log's arrays its last
    three inputs; the variables its results depend on; and the values of its
    constants (arrays the trace made, a np.linspace of the log's length say)."""
    def finish_of_log(p, sol, *log):
        return finish(p, dataclasses.replace(sol, **dict(zip(EVENT_LOG, log, strict=True))), settings)

    # Shapes, not values: `params` may be a vmapped trace's.
    shapes = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)),
                                    (params, solution, *(getattr(solution, k) for k in EVENT_LOG)))
    closed = jax.make_jaxpr(finish_of_log)(*shapes)
    jaxpr = closed.jaxpr
    _, read = live_part(jaxpr)
    return jaxpr, read, dict(zip(jaxpr.constvars, closed.consts, strict=True))


def _results_program(jaxpr, live, consts) -> tuple:
    """What a finish's program (_finish_program) computes toward its results,
    comparable across traces: each such operation's primitive, parameters,
    constant operands (literals and arrays, by value) and result shapes, and
    the results, constants by value. (A constant operand: a finish's output of
    the log's length, masked by the engine, is a select of that constant.)"""
    def value(v):
        if hasattr(v, "val"):
            return str(v.val)
        return _constant(consts[v]) if v in consts else None

    operations = tuple((eqn.primitive.name, str(eqn.params), _inner_constants(eqn.params),
                        tuple(value(v) for v in eqn.invars), tuple(str(v.aval) for v in eqn.outvars))
                       for eqn in jaxpr.eqns if eqn.effects or any(v in live for v in eqn.outvars))
    return operations, tuple(value(v) or str(v.aval) for v in jaxpr.outvars)


def _constant(value) -> str:
    """A trace's constant by value; one that is no plain array (a typed PRNG
    key) by identity, which no other trace's equals: every row is then kept."""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not comparable by value: never equal
        return f"<{type(value).__name__} at {id(value)}>"
    return f"{array.dtype.str}{array.shape}:{hashlib.sha256(array.tobytes()).hexdigest()}"


def _inner_constants(params) -> tuple:
    """The constants of the programs an operation holds (a jit's, a cond's
    branches'), by value: their parameters print only their shapes."""
    found = []
    for param in params.values():
        for item in param if isinstance(param, (tuple, list)) else (param,):
            inner = getattr(item, "jaxpr", item)  # a closed program's, or a program
            consts, eqns = getattr(item, "consts", ()), getattr(inner, "eqns", ())
            found += [_constant(c) for c in consts] if isinstance(consts, list | tuple) else []
            for eqn in eqns if isinstance(eqns, list | tuple) else ():
                found += _inner_constants(eqn.params)
    return tuple(found)


# A solution's event log: what HybridPoint.log_rows keeps only where a finish reads it.
EVENT_LOG = ("event_t", "event_y", "event_code")


"""The fused solver: a batch's whole hybrid solves in one GPU kernel.

One lane of a block solves one point from start to finish: the study's start,
every adaptive Runge-Kutta step (the settings' Butcher tableau and the
arithmetic of diffrax's PIDController, as the lanes solver), event detection
and location (the rules of engine.solve.locate: the first crossing in the
declared direction, a root at a segment's start not a crossing, the cubic's
root then Newton re-steps as on the lanes), resets and mode switches, and the
study's finish. Nothing leaves the kernel but the selected outputs and the
status, so on a GPU no step is a round trip to the host or to memory; on
CPU the same kernel runs in Pallas' interpret mode (that is how it is tested;
on CPU the lanes solver stays the default).

The kernel is not written per study: the study's own functions
(HybridPoint's start, system and finish) are traced for one point and
evaluated on lane vectors (engine.solve._lane_jaxpr), so a state of n
components is n lane vectors and everything in the kernel is elementwise.
The kernel language sits behind engine.solve._pallas_backend.

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
from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .._jax_setup import float64_here
from .._status import Status
from . import _pallas_backend as backend
from ._lane_jaxpr import LaneFunction, Unfusable, from_list, lane_vector, subjaxprs
from .base import BatchSolver, Plan, masked, safe_params
from .device import Device
from .hybrid import _INACTIVE, HybridPoint, HybridSolution
from .lanes import _LOCATE_TRIES, _NONFINITE_SHRINK
from .locate import crossed, hermite_root, start_value, time_tolerance
from .settings import SolverSettings
from .vmapped import memory_batch


class _Result(NamedTuple):
    """A batch's results as `masked` reads them (a pytree, unlike a study's finish)."""

    outputs: dict
    status: jax.Array
    num_steps: jax.Array
    num_events: jax.Array


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


def _sum(vectors):
    return functools.reduce(jnp.add, vectors)


def _rms(vectors):
    """settings.rms_norm over a state's components."""
    return jnp.sqrt(_sum([v * v for v in vectors]) / len(vectors))


class _Kernel:
    """The body of the fused kernel for one study, settings and selected outputs:
    a function of one block's input lane vectors (active, then the parameters)
    returning its output lane vectors (the selected outputs, status, steps, events)."""

    def __init__(self, point: HybridPoint, settings: SolverSettings, names, selected):
        self.settings = settings
        self.dtype = dtype = jnp.dtype(settings.dtype)
        self.names = tuple(names)
        self.selected = tuple(selected)
        system = point.system
        scalar = jax.ShapeDtypeStruct((), dtype)
        params = {name: scalar for name in names}

        def start(p):
            y0, mode, args, t_end = point.start(p, settings)
            horizon = settings.t_max if t_end is None else t_end
            return jnp.asarray(y0, dtype), jnp.asarray(mode, jnp.int32), args, jnp.asarray(horizon, dtype)

        self.start = LaneFunction(start, params, name="start")
        y0, _, args, _ = jax.eval_shape(start, params)
        if y0.ndim != 1:
            raise Unfusable(f"its state has shape {y0.shape}, not a vector")
        self.n_state = n = y0.shape[0]
        state = jax.ShapeDtypeStruct((n,), dtype)
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
        self.rows = rows = system.event_rows(settings.max_segments)
        solution = HybridSolution(
            t=scalar, y=state, mode=jax.ShapeDtypeStruct((), jnp.int32), status=jax.ShapeDtypeStruct((), jnp.int8),
            num_steps=jax.ShapeDtypeStruct((), jnp.int32), num_events=jax.ShapeDtypeStruct((), jnp.int32),
            event_t=jax.ShapeDtypeStruct((rows,), dtype), event_y=jax.ShapeDtypeStruct((rows, n), dtype),
            event_code=jax.ShapeDtypeStruct((rows,), jnp.int32),
        )
        self.finish = LaneFunction(lambda p, sol: point.finish(p, sol, settings), params, solution, name="finish")
        result = jax.eval_shape(lambda p, sol: point.finish(p, sol, settings), params, solution)
        missing = [k for k in self.selected if k not in result.outputs]
        if missing:
            raise ValueError(f"the study's finish has no outputs {missing}")
        self.output_shapes = {k: result.outputs[k].shape for k in self.selected}
        self.output_dtypes = {k: result.outputs[k].dtype for k in self.selected}

        solver = settings.make_solver()
        self.tableau = solver.tableau
        controller = settings.make_controller()
        # Integral control only, as SolverSettings.make_controller sets up (and the lanes solver assumes).
        assert controller.pcoeff == controller.dcoeff == 0 and controller.dtmin is None and controller.dtmax is None
        self.error_order = float(solver.error_order(diffrax.ODETerm(system._vector_field)))
        self.exponent = float(controller.icoeff) / self.error_order
        self.rtol, self.atol = float(controller.rtol), float(controller.atol)
        self.safety, self.factormin, self.factormax = (
            float(controller.safety), float(controller.factormin), float(controller.factormax))

    # ---- kernel inputs and outputs

    @property
    def out_dtypes(self):
        dtypes = []
        for k in self.selected:
            dtypes += [_column_dtype(self.output_dtypes[k])] * int(np.prod(self.output_shapes[k], dtype=int))
        return dtypes + [jnp.int32] * 3

    def unpack(self, columns, n: int) -> _Result:
        """The kernel's output columns as a batch of n results."""
        columns = [c[:n] for c in columns]
        outputs, at = {}, 0
        for k in self.selected:
            shape = self.output_shapes[k]
            size = int(np.prod(shape, dtype=int))
            part = jnp.stack(columns[at: at + size], axis=-1) if size else jnp.zeros((n, 0))
            outputs[k] = part.reshape((n,) + shape).astype(self.output_dtypes[k])
            at += size
        status, steps, events = columns[at:]
        return _Result(outputs, status.astype(jnp.int8), steps, events)

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

    def step(self, t0, t1, y0, f0, mode, args):
        """One explicit Runge-Kutta step of the tableau (coefficients as Python
        floats), as the lanes' _Machine.step: new state, error estimate, and the
        vector field at the new state."""
        tableau = self.tableau
        h = t1 - t0

        def combine(weights, ks):
            terms = [(float(w), k) for w, k in zip(weights, ks, strict=True) if w != 0]
            if not terms:
                return [jnp.zeros_like(t0)] * self.n_state
            return [_sum([w * k[i] for w, k in terms]) for i in range(self.n_state)]

        ks = [f0]
        for c, a in zip(tableau.c, tableau.a_lower, strict=True):
            increment = combine(a, ks)
            ks.append(self.field(t0 + float(c) * h, [y + h * d for y, d in zip(y0, increment, strict=True)], mode,
                                 args))
        y1 = [y + h * d for y, d in zip(y0, combine(tableau.b_sol, ks), strict=True)]
        error = [h * e for e in combine(tableau.b_error, ks)]
        f1 = ks[-1] if tableau.fsal else self.field(t1, y1, mode, args)
        return y1, error, f1

    def adapt(self, t0, t1, y0, y1, y_error):
        """diffrax's PIDController.adapt_step_size (integral control), lane-wise:
        accept the step?, and the next step's size."""
        nan = _any([jnp.isnan(y) for y in y1])
        scaled = [e / (self.atol + jnp.maximum(jnp.abs(a), jnp.abs(jnp.where(nan, a, b))) * self.rtol)
                  for e, a, b in zip(y_error, y0, y1, strict=True)]
        scaled_error = _rms(scaled)
        keep = scaled_error < 1
        factor = jnp.clip(
            self.safety * jnp.power(scaled_error, -self.exponent),
            min=jnp.where(keep, 1.0, self.factormin),
            max=jnp.where(keep, self.factormax, self.safety),
        )
        next_t0 = jnp.where(keep, t1, t0)
        return keep, (next_t0 + (t1 - t0) * factor) - next_t0

    def first_step(self, t0, y0, f0, mode, args, horizon):
        """diffrax's initial step-size guess (PIDController.init with dt0=None),
        as every segment of diffeqsolve starts, clipped to the horizon."""
        scale = [self.atol + jnp.abs(y) * self.rtol for y in y0]
        d0 = _rms([y / s for y, s in zip(y0, scale, strict=True)])
        d1 = _rms([f / s for f, s in zip(f0, scale, strict=True)])
        small = (d0 < 1e-5) | (d1 < 1e-5)
        h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1.0, d1)))
        f1 = self.field(t0 + h0, [y + h0 * f for y, f in zip(y0, f0, strict=True)], mode, args)
        d2 = _rms([(b - a) / s for a, b, s in zip(f0, f1, scale, strict=True)]) / h0
        max_d = jnp.maximum(d1, d2)
        h1 = jnp.where(max_d <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), jnp.power(0.01 / max_d, 1 / self.error_order))
        t1 = t0 + jnp.minimum(100 * h0, h1)
        return jnp.minimum(t1 - t0, horizon - t0)

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

    # ---- the kernel

    def __call__(self, active, *columns):
        dtype = self.dtype
        lanes = active.shape[0]
        active = active != 0
        params = {name: from_list([c.astype(dtype)], ()) for name, c in zip(self.names, columns, strict=True)}
        y0, mode0, args, horizon = self.start(params, lanes=lanes)
        y0 = self._vectors(y0, dtype, lanes)
        mode0 = lane_vector(mode0[()], jnp.int32, lanes)
        horizon = lane_vector(horizon[()], dtype, lanes)
        t0 = jnp.zeros((lanes,), dtype)
        f0, g0, dg0, h0 = self.segment_start(t0, y0, mode0, args, horizon)

        def full(value, dt):
            return jnp.full((lanes,), value, dt)

        nan, zero = full(jnp.nan, dtype), full(0, jnp.int32)
        init = dict(
            t=t0, y=y0, f=f0, g=g0, dg=dg0, mode=mode0, h=h0, steps=zero, segment_steps=zero,
            status=full(int(Status.PENDING), jnp.int32), events=zero,
            event_t=[nan] * self.rows, event_code=[full(-1, jnp.int32)] * self.rows,
            event_y=[[nan] * self.n_state for _ in range(self.rows)],
            locating=full(False, bool), span=t0, code=zero, lo=t0, hi=t0, dt=t0, nudge=t0,
            creeping=full(False, bool), tries=zero,
        )

        def running(s):
            return backend.any_lane((s["status"] == Status.PENDING) & active)

        final = jax.lax.while_loop(running, functools.partial(self.iteration, active, args, horizon), init)
        solution = HybridSolution(
            t=from_list([final["t"]], ()), y=from_list(final["y"], (self.n_state,)),
            mode=from_list([final["mode"]], ()),
            status=from_list([final["status"]], ()), num_steps=from_list([final["steps"]], ()),
            num_events=from_list([final["events"]], ()), event_t=from_list(final["event_t"], (self.rows,)),
            event_y=from_list([v for row in final["event_y"] for v in row], (self.rows, self.n_state)),
            event_code=from_list(final["event_code"], (self.rows,)),
        )
        result = self.finish(params, solution, lanes=lanes)
        out = []
        for k in self.selected:
            column = _column_dtype(self.output_dtypes[k])
            out += [lane_vector(e, self.output_dtypes[k], lanes).astype(column) for e in result.outputs[k].reshape(-1)]
        return out + [lane_vector(x[()], jnp.int32, lanes) for x in (result.status, result.num_steps,
                                                                       result.num_events)]

    def iteration(self, active, args, horizon, s):
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
        y1, y_error, f1 = self.step(t, t1, y, f, mode, args)
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
        lo = jnp.where(past, lo, dt)
        hi = jnp.where(past, dt, hi)
        raw = dt - value / jnp.where(slope != 0, slope, 1.0)
        converged = (finite & (jnp.abs(raw - dt) <= 2 * tol)) | (hi - lo <= tol)
        newton = jnp.where((raw > lo) & (raw < hi) & finite, jnp.minimum(raw + tol, hi), 0.5 * (lo + hi))
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
        # Its work (targets, resets, the next segment's start) is done only in an
        # iteration where some lane located a crossing.
        def fired():
            return self.event(code, t1, y1, mode, args, horizon)

        def quiet():
            return (jnp.full_like(mode, -1), y1, mode, f1, g1, dg1, s["h"])

        target, y_next, next_mode, f_next, g_next, dg_next, h_first = jax.lax.cond(
            backend.any_lane(located), fired, quiet)
        reset_finite = _all([jnp.isfinite(v) for v in y_next])
        goes_on = located & (target >= 0) & reset_finite & (s["events"] + 1 < settings.max_segments)
        status = _select(
            [located & (target < 0), located & ~reset_finite, located & ~goes_on, lost],
            [int(Status.SUCCESS), int(Status.NONFINITE), int(Status.MAX_SEGMENTS), int(Status.SOLVER_FAILED)],
            status,
        )
        step_on = locating & ~switch & ~creep
        k = jnp.minimum(s["events"], self.rows - 1)
        logged = [located & (k == r) for r in range(self.rows)]

        def state(regular, on, after, before):
            """A state's components: after a regular step, going on after an
            event, at an event that ends the solve (None: unchanged), or as before."""
            after = before if after is None else after
            return [jnp.where(moves, a, jnp.where(goes_on, b, jnp.where(located, c, d)))
                    for a, b, c, d in zip(regular, on, after, before, strict=True)]

        zero = jnp.zeros_like(t)
        return dict(
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
            event_t=[jnp.where(w, t1, v) for w, v in zip(logged, s["event_t"], strict=True)],
            event_code=[jnp.where(w, code, v) for w, v in zip(logged, s["event_code"], strict=True)],
            event_y=[[jnp.where(w, a, b) for a, b in zip(y1, row, strict=True)]
                     for w, row in zip(logged, s["event_y"], strict=True)],
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


def _column_dtype(dtype):
    """The dtype a kernel writes an output of `dtype` as (small integers and
    booleans as int32, which every kernel backend stores)."""
    dtype = jnp.dtype(dtype)
    small = dtype == jnp.dtype(bool) or (jnp.issubdtype(dtype, jnp.integer) and dtype.itemsize < 4)
    return jnp.int32 if small else dtype


def kernel_block(width: int) -> int:
    """Lanes per block: the plan's width rounded down to a power of two."""
    return 1 << (max(1, width).bit_length() - 1)


# Points of one call on CPU (interpret mode: tests and checks) when neither the
# sweep nor the study says.
CPU_BATCH = 256
# Lanes of a block on a GPU: one warp. A lane holds its whole solve in
# registers (float64 state, stages, event log), so small blocks; the GPU's
# occupancy comes from many blocks. (Not yet measured against other widths.)
GPU_BLOCK = 32
# Lanes of a block on CPU (interpret mode runs the blocks in turn).
CPU_BLOCK = 64
# Memory of one point of a call: its parameters, outputs and status in and out
# of the kernel (its working state lives in the kernel), a generous bound.
POINT_BYTES = 2 * 1024


class FusedSolver(BatchSolver):
    """The whole hybrid solve of each point in one kernel (see the module's docstring)."""

    name = "fused"

    def __init__(self):
        self._reasons: dict = {}

    def unsupported(self, study) -> str | None:
        if not isinstance(study.solve_point, HybridPoint):
            return "its point function is not declared as a HybridPoint"
        if study not in self._reasons:
            self._reasons[study] = _kernel_check(study)
        return self._reasons[study]

    def default_batch(self, study, device: Device) -> int:
        if device.accelerator and device.memory:
            return memory_batch(device, POINT_BYTES)
        return study.batch_size or CPU_BATCH

    def default_width(self, batch: int, device: Device) -> int:
        return min(batch, GPU_BLOCK if device.accelerator else CPU_BLOCK)

    def working_bytes(self, plan: Plan) -> int:
        return plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)
        names = [p.name for p in study.parameters]
        kernel = _Kernel(study.solve_point, settings, names, selected)
        block = kernel_block(plan.width)
        interpret = not backend.compiles_for(plan.device.platform)

        def run(params, count=None):
            safe, admitted = jax.vmap(lambda p: safe_params(study, dtype, p))(params)
            n = next(iter(safe.values())).shape[0]
            count = n if count is None else jnp.minimum(count, n)
            padded = -(-n // block) * block
            active = (jnp.arange(padded) < count).astype(jnp.int32)
            columns = [jnp.pad(safe[name], (0, padded - n), mode="edge") for name in names]
            out = backend.block_call(kernel, [active] + columns, kernel.out_dtypes, block, interpret)
            result = kernel.unpack(out, n)
            return jax.vmap(lambda r, ok: masked(study, dtype, selected, r, ok))(result, admitted)

        return run


def _kernel_check(study) -> str | None:
    """Why the study's functions cannot make a fused kernel (None: they can).

    The kernel body is traced for one block (cheap: nothing is compiled) and
    every primitive in it must have a rule in the kernel backend's GPU lowering."""
    outputs = tuple(o.name for o in study.outputs)
    try:
        with float64_here():  # traced as a run traces it (float64), whatever this process's setting
            kernel = _Kernel(study.solve_point, SolverSettings(), [p.name for p in study.parameters], outputs)
            block = [jax.ShapeDtypeStruct((GPU_BLOCK,), jnp.int32)] + [
                jax.ShapeDtypeStruct((GPU_BLOCK,), kernel.dtype) for _ in study.parameters]
            jaxpr = jax.make_jaxpr(kernel)(*block).jaxpr
    except Unfusable as error:
        return f"it cannot be fused into one kernel: {error}"
    missing = sorted({p.name for p in _primitives(jaxpr) if not backend.supports(p)})
    if missing:
        return f"its kernel would use {', '.join(missing)}, which the GPU kernel backend cannot lower"
    return None


def _primitives(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn.primitive
        for sub in subjaxprs(eqn):
            yield from _primitives(sub)

"""Lanes that refill: many hybrid solves in one loop, without lockstep waste.

`jax.vmap` of a per-point solve runs every point of a batch in lockstep: the
batch takes as many loop iterations as its slowest point, and lanes that
finished early idle (a third of all lane-steps on the rolling-ball sweep, and
one point that never converges stalls the whole batch). Here one
`lax.while_loop` advances `lanes` solves by one solver step per iteration; a
lane that finishes writes its solution and takes the next point of the batch at
once, so every lane works until the batch runs out of points.

Each iteration, every running lane takes one regular adaptive step (the
solver's Butcher tableau and the arithmetic of diffrax's `PIDController`, on
all lanes at once). A lane whose step crossed a transition's condition does not
take it but parks. Parked and finished lanes wait for a flush, which runs when
half of the lanes wait: the parked ones, gathered into a narrow loop,
locate their crossings; finished ones are written out and take new points.
Locating is a Newton iteration on the crossing time by re-steps from the same
(exact) step start, the slope along the flow coming from the vector field at
the iterate; the first iterate is the root of the cubic through the
condition's values and slopes at the step's ends (one re-step of the whole
step gives the end's), and two Newton re-steps, each aimed a rounding tolerance
past the crossing, locate it to rounding. The event state is an
exact solver step: accurate to solver tolerance, like the state at any step end
(HybridSystem.solve locates the same way, by re-steps). Keeping the locating
logic out of the every-step loop keeps that loop to a plain adaptive step: the
logic costs more than the step itself.

The solution of each point is the same `HybridSolution` that HybridSystem.solve
returns, and the tests compare the two. One difference: a step whose state is
not finite is rejected and shrunk (up to `max_steps`) rather than taken as a
failed solve.

Layout: every lane array has the lane axis last (a state vector is a
(components, lanes) array), and the step is written on whole lanes rather than
as `jax.vmap` of a one-lane step. XLA:CPU then runs each operation as a
contiguous, vectorised loop over lanes; vmap would put the lane axis first and
loop over lanes with the few components innermost. Together with the
work-arounds for XLA:CPU's fusion noted in the code (`_lane_last`, `_once`,
`_sum_rows`), this made a solver step of the rolling-ball sweep ~3x cheaper
(benchmarks/bench_pingpong.py).
"""

import functools

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from engine.solve import stepper
from engine.solve.base import VECTOR, BatchSolver, Plan, masked, safe_params, whole_vectors
from engine.solve.device import Device
from engine.solve.hybrid import _INACTIVE, HybridPoint, HybridSolution, HybridSystem
from engine.solve.locate import crossed, hermite_root, newton_update, start_value, time_tolerance
from engine.solve.stepper import Controller, chained, inverse_root
from engine.solve.vmapped import memory_batch
from engine.study.status import Status
from engine.sweep.settings import SolverSettings

# Finished lanes wait for the write-out and refill until 1/_FLUSH_SHARE of all
# lanes are waiting. Measured (rolling ball, compiled calls of 8,192 points on
# 1,024 lanes, one thread, A/B in one process): flush at 1/2 and locate up to
# 1/2 of the lanes 338-343k points/s; 1/4 and 1/4 310-328k; 1/3 and 1/3 321k.
_FLUSH_SHARE = 2
# The last busy lanes of a batch continue in a loop this many times narrower.
_TAIL_SHARE = 16
# At most this share of the lanes locates crossings in one flush.
_LOCATE_SHARE = 2
# Newton re-steps allowed to locate one crossing (2 are typical).
_LOCATE_TRIES = 32
# Status of a lane without a point: anything but PENDING keeps it from stepping
# (its row is never written).
_IDLE = Status.SUCCESS
# A rejected step whose state is not finite is retried this much shorter.
_NONFINITE_SHRINK = 0.2


class _Lane(eqx.Module):
    """State of the lanes (every field has a trailing lane axis)."""

    point: jax.Array  # index into the batch; the batch size means "no point"
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
    events: jax.Array  # events located so far (the event log lives in the results)
    # parked at a crossing inside the step [t, t + span], waiting to locate it
    locating: jax.Array
    span: jax.Array


class _Search(eqx.Module):
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


class _Plan(eqx.Module):
    """Per-point starting data, computed for the whole batch before the loop."""

    y: jax.Array
    f: jax.Array
    g: jax.Array
    mode: jax.Array
    args: object
    horizon: jax.Array
    h: jax.Array


def _rows_of(x):
    """A lane-last array as a list of its rows (lanes,), in row-major order."""
    return [x[index] for index in np.ndindex(x.shape[:-1])]


def _from_rows(rows, shape):
    """The lane-last array of leading shape `shape` with these rows."""
    return jnp.stack(rows).reshape(tuple(shape) + rows[0].shape) if shape else rows[0]


def _choose(index, options):
    """options[index[l]][..., l] for every lane l (each option is computed)."""
    shape = options[0].shape[:-1]
    rows = [_rows_of(option) for option in options]
    chosen = rows[-1]
    for i in reversed(range(len(options) - 1)):
        chosen = [jnp.where(index == i, new, old) for new, old in zip(rows[i], chosen, strict=True)]
    return _from_rows(chosen, shape)


def _pick(values, index):
    """values[index[l], l] for every lane l of a few rows, as a masked sum: on
    CPU this fuses with its neighbours, where a gather would not."""
    return _sum_rows(jnp.where(jnp.arange(values.shape[0])[:, None] == index, values, jnp.zeros_like(values)))


def _rows(x):
    """The rows of a (few, lanes) array, as static slices."""
    return [x[i] for i in range(x.shape[0])]


def _sum_rows(x):
    """x.sum(axis=0) of a (few, lanes) array as a chain of row additions: XLA:CPU
    fuses those with the arithmetic around them, where a reduction over the short
    leading axis runs as a separate, several times slower, kernel."""
    return functools.reduce(jnp.add, _rows(x))


def _any_rows(x):
    """x.any(axis=0) of a (few, lanes) array, as _sum_rows."""
    return functools.reduce(jnp.logical_or, _rows(x))


def _all_rows(x):
    """x.all(axis=0) of a (few, lanes) array, as _sum_rows."""
    return functools.reduce(jnp.logical_and, _rows(x))


def _select(conditions, choices, default):
    """jnp.select, as a chain of `where`s (the first true condition wins):
    jnp.select finds the first true condition with an argmax over the stacked
    conditions, which XLA:CPU runs as a separate reduction kernel (in the
    rolling-ball step it cost as much as four Runge-Kutta stages)."""
    chosen = default
    for condition, choice in reversed(list(zip(conditions, choices, strict=True))):
        chosen = jnp.where(condition, choice, chosen)
    return chosen


def _first_true(x):
    """Index of the first true row of a (few, lanes) boolean array (0 where none,
    as argmax), without a reduction kernel (see _select)."""
    return _select(_rows(x), range(x.shape[0]), 0)


def _argmin_rows(x):
    """Index of the first smallest row of a (few, lanes) array, as _first_true."""
    best, index = x[0], jnp.zeros(x.shape[1:], jnp.int32)
    for i in range(1, x.shape[0]):
        smaller = x[i] < best
        best, index = jnp.where(smaller, x[i], best), jnp.where(smaller, i, index)
    return index


def _lane_last(x):
    """(lanes, ...) -> (..., lanes), assembled from its columns: XLA:CPU then
    keeps every later operation a contiguous loop over lanes (a transpose here
    leaves it looping over the few components, several times slower)."""
    if x.ndim == 1:
        return x
    columns = x.reshape(x.shape[0], -1)
    return jnp.stack([columns[:, i] for i in range(columns.shape[1])]).reshape(x.shape[1:] + x.shape[:1])


def _per_lane(fn):
    """fn of one lane, applied to every lane of lane-last arrays (lane-last results)."""
    vectorised = jax.vmap(fn, in_axes=-1, out_axes=0)
    return lambda *args: jax.tree_util.tree_map(_lane_last, vectorised(*args))


class _Machine:
    """One solver step of every lane, on lane-last arrays.

    The arithmetic is written on whole lanes (a lane's scalar is a row of
    lanes, its state vector a (components, lanes) array, and numpy broadcasting
    lines the lane axes up); only the study's own functions are vmapped, one
    lane at a time. Under `jax.vmap` of a per-lane step, every operation that
    mixes a lane's scalar with its state vector moves the lane axis first, and
    XLA:CPU then loops over lanes with the few components innermost: ~3x slower
    per step.
    """

    def __init__(self, system: HybridSystem, settings: SolverSettings, accelerator: bool = False):
        self.system = system
        self.settings = settings
        self.accelerator = accelerator
        self.transitions = system.transitions
        self.tableau = settings.make_solver().tableau
        self.controller = Controller.of(settings)
        self.root = self.controller.root
        self.pid = settings.make_controller()
        self.term = diffrax.ODETerm(system._vector_field)
        self.directions = [tr.direction for _, tr in self.transitions]
        self.targets = [_per_lane(target) for target in system.targets()]
        self.resets = [_per_lane(reset) for reset in system.resets()]
        self.fields = [_per_lane(mode.vector_field) for mode in system.modes]
        self.ends_at_horizon = jnp.array([m.ends_at_horizon for m in system.modes])

    def step(self, t0, t1, y0, f0, mode, args):
        """One Runge-Kutta step (engine.solve.stepper.step) on whole lanes: the
        new state, the embedded error estimate, and the vector field there."""
        y1, error, f1, _ = stepper.step(self.tableau, lambda t, y: self.field(t, y, mode, args), t0, t1, y0, f0,
                                        combine=chained)
        return y1, error, f1

    def adapt(self, t0, t1, y0, y1, y_error):
        """Accept the step [t0, t1]?, and the next step's (t0, t1), lane-wise
        (Controller.adapt; diffrax's own, vmapped, moves the lane axis first: see
        _Machine), its fractional power by the bit-level root."""
        return self.controller.adapt(t0, t1, y0, y1, y_error, power=lambda x: inverse_root(x, self.root))

    def once(self, active, decisions):
        """_once on CPU; on an accelerator the decisions as they are (its
        conditional would cost a round trip to the host every iteration, for a
        work-around of XLA:CPU's fusion)."""
        return decisions if self.accelerator else _once(active, decisions)

    def field(self, t, y, mode, args):
        """The vector field of each lane's mode (every mode's is computed, as
        `lax.switch` under vmap would)."""
        return _choose(mode, [field(t, y, args) for field in self.fields])

    def conditions(self, t, y, mode, args, flow=None):
        """Every transition's condition at (t, y), (transitions, lanes); a
        transition not leaving a lane's mode is inactive there (constant). Given
        the flow f at (t, y), also each condition's slope along it."""
        if not self.transitions:
            inactive = jnp.full((1,) + t.shape, _INACTIVE, y.dtype)
            return inactive if flow is None else (inactive, jnp.zeros_like(inactive))
        values, slopes = [], []
        for source, tr in self.transitions:
            active = mode == source
            if flow is None:
                value = _per_lane(tr.condition)(t, y, args)
            else:
                value, slope = _per_lane(
                    lambda t, y, f, args, condition=tr.condition: jax.jvp(
                        lambda t, y: condition(t, y, args), (t, y), (jnp.ones_like(t), f)
                    )
                )(t, y, flow, args)
                slopes.append(jnp.where(active, slope, 0))
            values.append(jnp.where(active, value, _INACTIVE))
        values = jnp.stack(values).astype(y.dtype)
        return values if flow is None else (values, jnp.stack(slopes).astype(y.dtype))

    def crossed(self, before, after):
        """Which transitions' conditions changed sign, per lane: (transitions, lanes)."""
        if not self.transitions:
            return jnp.zeros(before.shape, bool)
        return jnp.stack([crossed(before[j], after[j], d) for j, d in enumerate(self.directions)])

    def first_step(self, t, y, mode, args, horizon):
        """diffrax's own initial step-size guess for a segment starting at (t, y),
        per lane (as `diffeqsolve` with dt0=None makes at every segment's start).
        Controller.first_step is the same arithmetic written out, but diffrax
        evaluates the vector field inside a two-iteration scan, which XLA:CPU
        compiles to other roundings (outputs 1e-16 to 5e-13 apart, measured):
        calling diffrax's keeps the lanes' results bit for bit those of earlier
        versions."""

        def one(t, y, mode, args, horizon):
            t1, _ = self.pid.init(self.term, t, horizon, y, None, (mode, args), lambda term, t, y, a: term.vf(t, y, a),
                                  self.controller.error_order)
            return jnp.minimum(t1 - t, horizon - t)

        return _per_lane(one)(t, y, mode, args, horizon)

    def segment_start(self, t, y, mode, args):
        """First stage and conditions at a segment's start: a root there does not
        count as a crossing (engine.solve.locate.start_value)."""
        f = self.field(t, y, mode, args)
        g, dg = self.conditions(t, y, mode, args, flow=f)
        return f, start_value(g, dg, t)

    def plan(self, start: HybridPoint, params) -> _Plan:
        """Start of every point (params: name -> (points,)): state, first stage,
        conditions, first step size; points last."""
        settings = self.settings

        def one(params):
            y0, mode, args, t_end = start.start(params, settings)
            horizon = jnp.asarray(settings.t_max if t_end is None else t_end, y0.dtype)
            return y0, jnp.asarray(mode, jnp.int32), args, horizon

        y0, mode, args, horizon = _per_lane(one)(params)
        t0 = jnp.zeros_like(horizon)
        f, g = self.segment_start(t0, y0, mode, args)
        h = self.first_step(t0, y0, mode, args, horizon)
        return _Plan(y0, f, g, mode, args, horizon, h)

    def regular(self, s: _Lane) -> _Lane:
        """One adaptive step of every running lane that is not locating a
        crossing. A step in which a transition's condition changed sign is not
        taken: the lane starts locating the crossing (see `locate`)."""
        settings = self.settings
        stepping = (s.status == Status.PENDING) & ~s.locating
        to_horizon = s.horizon - s.t
        clipped = stepping & (s.h >= to_horizon)
        span = jnp.where(clipped, to_horizon, s.h)
        t1 = jnp.where(clipped, s.horizon, s.t + span)
        y1, y_error, f1 = self.step(s.t, t1, s.y, s.f, s.mode, s.args)
        g1 = self.conditions(t1, y1, s.mode, s.args)
        finite = _all_rows(jnp.isfinite(y1))
        crossed = self.crossed(s.g, g1)
        keep, next_t0, next_t1 = self.adapt(s.t, t1, s.y, y1, y_error)
        keep = keep & finite
        h_next = jnp.where(finite, next_t1 - next_t0, _NONFINITE_SHRINK * span)
        detect = stepping & keep & _any_rows(crossed)
        moves = stepping & keep & ~detect
        at_horizon = moves & clipped
        segment_steps = s.segment_steps + stepping
        out_of_steps = stepping & ~detect & ~at_horizon & (segment_steps >= settings.max_steps)
        moves, detect = self.once(stepping, (moves, detect))
        status = _select(
            [at_horizon & self.ends_at_horizon[s.mode], at_horizon, out_of_steps],
            [Status.SUCCESS, Status.EVENT_NOT_FOUND, Status.MAX_STEPS],
            s.status,
        ).astype(jnp.int8)
        # A lane that reached a crossing keeps the step's span and waits: the
        # crossing is located in the next flush (start_locating, locate).
        return _replace(
            s,
            t=jnp.where(moves, t1, s.t),
            y=jnp.where(moves, y1, s.y),
            f=jnp.where(moves, f1, s.f),
            g=jnp.where(moves, g1, s.g),
            h=jnp.where(stepping, h_next, s.h),
            steps=s.steps + stepping,
            segment_steps=segment_steps,
            status=status,
            locating=s.locating | detect,
            span=jnp.where(detect, t1 - s.t, s.span),
        )

    def start_locating(self, s: _Lane, active) -> _Search:
        """Lanes parked at a crossing, where `active`, start locating it: the step
        over [t, t + span] is taken again (the same arithmetic, the same result) for
        the conditions at its end; the first Newton iterate is the root of the
        earliest crossed condition's cubic interpolant over the step."""
        t1 = s.t + s.span
        y1, _, f1 = self.step(s.t, t1, s.y, s.f, s.mode, s.args)
        g1, dg1 = self.conditions(t1, y1, s.mode, s.args, flow=f1)
        _, dg0 = self.conditions(s.t, s.y, s.mode, s.args, flow=s.f)
        crossed = self.crossed(s.g, g1)
        roots = jnp.stack(
            [hermite_root(s.g[j], dg0[j], g1[j], dg1[j], s.span, d) for j, d in enumerate(self.directions or [None])]
        )
        first = _argmin_rows(jnp.where(crossed, roots, jnp.inf))
        # Should rounding differ from the first time and nothing cross, the step
        # (accepted then) is taken.
        found = _any_rows(crossed)
        starts = active & s.locating & found
        taken = active & s.locating & ~found
        lane = _replace(
            s,
            t=jnp.where(taken, t1, s.t),
            y=jnp.where(taken, y1, s.y),
            f=jnp.where(taken, f1, s.f),
            g=jnp.where(taken, g1, s.g),
            locating=starts,
        )
        return _Search(
            lane=lane,
            code=first.astype(jnp.int32),
            lo=jnp.zeros_like(s.span),
            hi=s.span,
            dt=_pick(roots, first),
            nudge=jnp.maximum(time_tolerance(s.t, t1), 1e-300),
            creeping=jnp.zeros(s.t.shape, bool),
            tries=jnp.zeros(s.t.shape, jnp.int32),
            located=jnp.zeros(s.t.shape, bool),
        )

    def locate(self, search: _Search) -> _Search:
        """One re-step of every lane locating a crossing: from the step start (t, y)
        to the current Newton iterate t + dt for the crossing time. A located
        crossing is recorded, the lane moved to it (see `events`)."""
        s, n = search.lane, search  # the lanes, and the Newton search in them
        locating = (s.status == Status.PENDING) & s.locating
        t1 = s.t + n.dt
        y1, _, f1 = self.step(s.t, t1, s.y, s.f, s.mode, s.args)
        g1, dg1 = self.conditions(t1, y1, s.mode, s.args, flow=f1)
        finite = _all_rows(jnp.isfinite(y1))
        crossed = self.crossed(s.g, g1)

        tol = time_tolerance(s.t, s.t + s.span)
        value, slope = _pick(g1, n.code), _pick(dg1, n.code)
        # A re-step of length zero is the step's start, where a root does not count.
        past = _pick(crossed, n.code).astype(bool) & (n.dt > 0)
        lo, hi, converged, newton = newton_update(n.dt, value, slope, past, n.lo, n.hi, tol, finite)
        settled = converged | n.creeping
        others = crossed & (jnp.arange(crossed.shape[0])[:, None] != n.code)
        # Converged onto the crossing but a transition declared elsewhere crossed
        # before it: that one fires first; locate it inside [t, t + dt].
        switch = locating & settled & past & _any_rows(others)
        other = _first_true(others)
        g_other, g1_other = _pick(s.g, other), _pick(g1, other)
        located = locating & settled & past & ~switch
        # Converged but still on the near side (rounding): step forward, by growing
        # nudges and no more Newton updates, until past.
        creep = locating & settled & ~past
        tries = n.tries + locating
        lost = locating & ~located & (tries >= _LOCATE_TRIES)

        # ---- the event: record it; the lane ends or goes on after the loop (events)
        located, switch, creep, lost = self.once(locating, (located, switch, creep, lost))
        status = jnp.where(lost, jnp.int8(Status.SOLVER_FAILED), s.status)
        step_on = locating & ~switch & ~creep  # a Newton update
        lane = _replace(
            s,
            t=jnp.where(located, t1, s.t),
            y=jnp.where(located, y1, s.y),
            status=status,
            events=s.events + located,
            locating=s.locating & ~located & ~lost,
            span=jnp.where(switch, n.dt, s.span),
        )
        return _Search(
            lane=lane,
            code=jnp.where(switch, other, n.code).astype(n.code.dtype),
            dt=_select(
                [switch, creep, step_on],
                [
                    n.dt * g_other / jnp.where(g_other == g1_other, 1.0, g_other - g1_other),
                    jnp.minimum(n.dt + n.nudge, hi),
                    newton,
                ],
                n.dt,
            ),
            lo=jnp.where(switch, 0.0, jnp.where(locating, lo, n.lo)),
            hi=jnp.where(switch, n.dt, jnp.where(locating, hi, n.hi)),
            nudge=jnp.where(creep, 4 * n.nudge, jnp.where(switch, jnp.maximum(tol, 1e-300), n.nudge)),
            creeping=jnp.where(locating, creep, n.creeping),
            tries=jnp.where(switch, 0, tries).astype(n.tries.dtype),
            located=n.located | located,
        )

    def events(self, search: _Search) -> _Lane:
        """Lanes that located a crossing (at their (t, y), recorded) end there or go
        on in the next mode: its state (reset), first stage, conditions and first
        step. Once per flush, after the Newton loop, rather than at every re-step
        of it (on the landing map that work cost as much as the re-step)."""
        settings = self.settings
        s, located, code = search.lane, search.located, search.code
        t1, y1 = s.t, s.y
        target = _choose(code, [target(t1, y1, s.args) for target in self.targets])
        y_next = _choose(code, [reset(t1, y1, s.args) for reset in self.resets])
        next_mode = jnp.where(target >= 0, target, s.mode).astype(s.mode.dtype)
        f_next, g_next = self.segment_start(t1, y_next, next_mode, s.args)
        # A new segment starts with a fresh step-size guess, as diffrax's does.
        # Going on with the last proposed step saved ~5% of the rolling ball's
        # time but lost accuracy over many events (a ball's 120th impact 5e-9
        # late instead of within 1e-9: the long steps an exactly integrated
        # flight grows carry over to the next).
        h_next = self.first_step(t1, y_next, next_mode, s.args, s.horizon)
        reset_finite = _all_rows(jnp.isfinite(y_next))
        goes_on = located & (target >= 0) & reset_finite & (s.events < settings.max_segments)
        (goes_on,) = self.once(located, (goes_on,))
        status = _select(
            [located & (target < 0), located & ~reset_finite, located & ~goes_on],
            [Status.SUCCESS, Status.NONFINITE, Status.MAX_SEGMENTS],
            s.status,
        ).astype(jnp.int8)
        return _replace(
            s,
            y=jnp.where(goes_on, y_next, s.y),
            f=jnp.where(goes_on, f_next, s.f),
            g=jnp.where(goes_on, g_next, s.g),
            mode=jnp.where(goes_on, next_mode, s.mode),
            h=jnp.where(goes_on, h_next, s.h),
            segment_steps=jnp.where(goes_on, 0, s.segment_steps),
            status=status,
        )


def _once(active, decisions):
    """The lanes' decisions, computed once, as the result of a conditional.

    Otherwise XLA:CPU fuses the whole chain of cheap per-lane logic that leads to
    them into each consumer and recomputes it for every component of every
    state-sized update (measured: more operations than the solver step itself).
    XLA:CPU removes optimization_barrier before fusion, so that cannot hold them.
    Exact: every decision is false in an inactive lane, and with no lane active
    the conditional returns all false.
    """
    return jax.lax.cond(
        jnp.any(active), lambda: decisions, lambda: tuple(jnp.zeros_like(x) for x in decisions)
    )


def _plan_block(n: int, lanes: int) -> int:
    """Points planned together: the largest whole number of vectors up to the
    lanes' width that divides the batch (the batch itself if none does)."""
    for block in range(min(n, lanes) // VECTOR * VECTOR, 0, -VECTOR):
        if n % block == 0:
            return block
    return n


def _planned(machine: "_Machine", point: HybridPoint, params, count, block: int) -> _Plan:
    """machine.plan of every point of the batch, a block of points at a time;
    blocks wholly past `count` (padding) are not planned (zeros). A short batch
    (a small shard in a call of the run's batch size) then costs what its
    points cost: planning a start (field, conditions' slopes, first step size)
    costs a few solver steps per point."""
    n = next(iter(params.values())).shape[0]
    if block >= n:
        return machine.plan(point, params)
    blocks = {k: v.reshape((n // block, block) + v.shape[1:]) for k, v in params.items()}
    shapes = jax.eval_shape(lambda p: machine.plan(point, p), {k: v[0] for k, v in blocks.items()})

    def one(index_and_params):
        index, part = index_and_params
        return jax.lax.cond(
            index * block < count,
            lambda: machine.plan(point, part),
            lambda: jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes),
        )

    planned = jax.lax.map(one, (jnp.arange(n // block), blocks))
    # (blocks, ..., block) -> (..., blocks * block): points last, in order.
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, -2).reshape(a.shape[1:-1] + (n,)), planned)


def _replace_solution(solution: HybridSolution, **changes) -> HybridSolution:
    return eqx.tree_at(lambda s: tuple(getattr(s, k) for k in changes), solution, tuple(changes.values()))


def _replace(lane: _Lane, **changes) -> _Lane:
    return eqx.tree_at(lambda lane_: tuple(getattr(lane_, k) for k in changes), lane, tuple(changes.values()))


def _end(lane: _Lane) -> dict:
    """The fields of a lane's HybridSolution written when its point finishes."""
    return {"t": lane.t, "y": lane.y, "mode": lane.mode, "status": lane.status, "num_steps": lane.steps,
            "num_events": lane.events}


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
    narrow = _replace(
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
        self.n_seg, self.n_state = point.system.event_rows(settings.max_segments), self.plan.y.shape[0]

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
        return _replace(
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
        return _replace_solution(results, **{
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

        return _replace_solution(
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
        return _replace(
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
            lane = eqx.tree_at(lambda lane_: lane_.point, lane, jnp.where(finished, self.n, lane.point))
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


# Points of one call on CPU when neither the sweep nor the study says (a small sweep gets
# fewer, see engine.solve.plan). Large calls pay the drain of their last lanes
# less often: shards of 25,000 points measured 6% faster end to end in one call
# than in four calls of 8,192.
CPU_BATCH = 32768
# Lanes of a call: an eighth of its points, so each lane solves several in
# turn, up to MAX_LANES on CPU. Measured on CPU (rolling ball, compiled calls
# on 4 threads, 10-12 alternating runs, median points/s relative to 1,000
# lanes): calls of 25,000 points: 768: 0.99, 896: 0.95, 960: 0.98, 1,024:
# 0.87-0.88, 1,152: 0.97, 1,250: 0.99, 1,280: 0.97-1.01, 1,536: 0.87-0.91,
# 3,125 (an eighth): 0.89; calls of 8,192 points: 1,024: 0.995, 1,280: 1.01.
# (Why 1,024 and 1,536 lanes are slow on the larger calls only is not
# understood; 512 lanes on calls of 4,096 points are not.) Widths are whole
# vectors now (engine.solve.base.VECTOR); end to end, 200,000 points in shards
# of 25,000 (single runs, noisy): 800: 807k, 880: 661k, 960: 705k, 1,008:
# 696k, 1,104: 790k, 1,200: 822k and 822k, 1,296: 757k points/s.
POINTS_PER_LANE = 8
MAX_LANES = 1200
# Working memory of one lane (state, stages, event log, search) and of one
# point of a call (its start and its solution, kept until the call returns):
# generous bounds for the studies' small states.
LANE_BYTES = 16 * 1024
POINT_BYTES = 4 * 1024


class LanesSolver(BatchSolver):
    """Refilling lanes for studies declared as a HybridPoint (see the module's docstring)."""

    name = "lanes"

    def unsupported(self, study) -> str | None:
        if not isinstance(study.solve_point, HybridPoint):
            return "its point function is not declared as a HybridPoint"
        return None

    def default_batch(self, study, device: Device) -> int:
        if device.accelerator and device.memory:
            return memory_batch(device, LANE_BYTES // POINTS_PER_LANE + POINT_BYTES)
        return study.batch_size or CPU_BATCH

    def default_width(self, batch: int, device: Device) -> int:
        lanes = max(1, batch // POINTS_PER_LANE)
        return lanes if device.accelerator else min(MAX_LANES, lanes)

    def working_bytes(self, plan: Plan) -> int:
        return plan.width * LANE_BYTES + plan.batch * POINT_BYTES

    def batch_function(self, study, settings, selected, plan):
        dtype = jnp.dtype(settings.dtype)
        point = study.solve_point

        def run(params, count=None):
            safe, admitted = jax.vmap(lambda p: safe_params(study, dtype, p))(params)
            solutions = solve_batch(point, safe, settings, plan.width, count, plan.device.accelerator)
            results = jax.vmap(lambda p, sol: point.finish(p, sol, settings))(safe, solutions)
            return jax.vmap(lambda r, ok: masked(study, dtype, selected, r, ok))(results, admitted)

        return run

"""One solver step of every lane (`_Machine`): regular adaptive steps, the
locating of crossings by Newton re-steps, events and resets; and each point's
start, planned before the loop."""


import jax
import jax.numpy as jnp

from engine.pytree import replace
from engine.solve import stepper
from engine.solve.base import VECTOR
from engine.solve.hybrid import _INACTIVE, HybridPoint, HybridSystem
from engine.solve.lanes.dense import first_sample, interpolation
from engine.solve.lanes.rows import (
    _all_rows,
    _any_rows,
    _argmin_rows,
    _choose,
    _first_true,
    _once,
    _per_lane,
    _pick,
    _select,
)
from engine.solve.lanes.state import _LOCATE_TRIES, _NONFINITE_SHRINK, _Lane, _Plan, _Search, _Step
from engine.solve.locate import crossed, hermite_root, newton_update, start_value, time_tolerance
from engine.solve.solver_constants import solver_constants
from engine.solve.stepper import Controller, chained, inverse_root
from engine.study.status import Status
from engine.sweep.settings import SolverSettings


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
        self.tableau = solver_constants(settings.solver).tableau
        self.controller = Controller.of(settings)
        self.root = self.controller.root
        self.pid = settings.make_controller()
        import diffrax  # here, where a solve is traced: not with the plan (rollsweep validate)

        self.term = diffrax.ODETerm(system._vector_field)
        self.directions = [tr.direction for _, tr in self.transitions]
        self.targets = [_per_lane(target) for target in system.targets()]
        self.resets = [_per_lane(reset) for reset in system.resets()]
        self.fields = [_per_lane(mode.vector_field) for mode in system.modes]
        self.ends_at_horizon = jnp.array([m.ends_at_horizon for m in system.modes])
        # The sweep's sample times ([save] times), sorted; None without samples.
        self.times = tuple(settings.save_times) or None
        self.first_sample = first_sample(settings.save_times)
        self.interpolate = interpolation(settings.solver) if self.times else None

    def step(self, t0, t1, y0, f0, mode, args, stages=False):
        """One Runge-Kutta step (engine.solve.stepper.step) on whole lanes: the
        new state, the embedded error estimate, and the vector field there (and,
        given `stages`, the vector field at every stage, for the step's dense
        output)."""
        y1, error, f1, ks = stepper.step(self.tableau, lambda t, y: self.field(t, y, mode, args), t0, t1, y0, f0,
                                         combine=chained)
        return (y1, error, f1, ks) if stages else (y1, error, f1)

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

    def regular(self, s: _Lane):
        """One adaptive step of every running lane that is not locating a
        crossing. A step in which a transition's condition changed sign is not
        taken: the lane starts locating the crossing (see `locate`). Where the
        sweep samples times, also the step (_Step), taken where a lane moved."""
        settings = self.settings
        stepping = (s.status == Status.PENDING) & ~s.locating
        to_horizon = s.horizon - s.t
        clipped = stepping & (s.h >= to_horizon)
        span = jnp.where(clipped, to_horizon, s.h)
        t1 = jnp.where(clipped, s.horizon, s.t + span)
        y1, y_error, f1, *stages = self.step(s.t, t1, s.y, s.f, s.mode, s.args, stages=self.times is not None)
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
        lane = replace(
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
        if self.times is None:
            return lane
        return lane, _Step(t0=s.t, t1=t1, y0=s.y, y1=y1, stages=stages[0], taken=moves)

    def start_locating(self, s: _Lane, active) -> _Search:
        """Lanes parked at a crossing, where `active`, start locating it: the step
        over [t, t + span] is taken again (the same arithmetic, the same result) for
        the conditions at its end; the first Newton iterate is the root of the
        earliest crossed condition's cubic interpolant over the step."""
        t1 = s.t + s.span
        y1, _, f1, *stages = self.step(s.t, t1, s.y, s.f, s.mode, s.args, stages=self.times is not None)
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
        lane = replace(
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
            # the taken step's samples; a located crossing's re-step replaces it
            sample_step=None if self.times is None else _Step(t0=s.t, t1=t1, y0=s.y, y1=y1, stages=stages[0],
                                                              taken=taken),
        )

    def locate(self, search: _Search) -> _Search:
        """One re-step of every lane locating a crossing: from the step start (t, y)
        to the current Newton iterate t + dt for the crossing time. A located
        crossing is recorded, the lane moved to it (see `events`)."""
        s, n = search.lane, search  # the lanes, and the Newton search in them
        locating = (s.status == Status.PENDING) & s.locating
        t1 = s.t + n.dt
        y1, _, f1, *stages = self.step(s.t, t1, s.y, s.f, s.mode, s.args, stages=self.times is not None)
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
        lane = replace(
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
            sample_step=None if self.times is None else jax.tree_util.tree_map(
                lambda new, old: jnp.where(located, new, old),
                _Step(t0=s.t, t1=t1, y0=s.y, y1=y1, stages=stages[0], taken=located | n.sample_step.taken),
                n.sample_step),
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
        return replace(
            s,
            y=jnp.where(goes_on, y_next, s.y),
            f=jnp.where(goes_on, f_next, s.f),
            g=jnp.where(goes_on, g_next, s.g),
            mode=jnp.where(goes_on, next_mode, s.mode),
            h=jnp.where(goes_on, h_next, s.h),
            segment_steps=jnp.where(goes_on, 0, s.segment_steps),
            status=status,
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

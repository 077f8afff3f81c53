"""Running the hoop: the seed's fixed-step RK2, with every output reduced on the fly.

Runs of 1e6-1e7 steps per point store no trajectory: the loop carries the
state, running maxima and the turning-point bookkeeping, and the states at the
sweep's sample times (`[save] times`, SolverSettings.save_times) where it
samples any: see `run_fixed`.
"""

import jax
import jax.numpy as jnp

from ._model import Contact, contact, field, initial_state, reference_energy, residuals, vector_field, with_reciprocals

# The fixed-step run goes in this many segments, each starting from sin and cos
# of alpha themselves (run_fixed). (Until the sweep's sample times, the
# segments' ends were also the times of a 101-sample residual history.)
SEGMENTS = 100
STEADY = 0.85  # "steady state": the last 15% of the run
# Heun steps written out in one iteration of the step loop: XLA's cost per loop
# iteration is paid once for this many steps.
UNROLL = 8
# Largest increment of alpha (rad) in one stage of a step for which sin and cos
# of the new alpha follow from the old ones by angle addition (below).
TURN_LIMIT = 1 / 16


def turned(at: Contact, d):
    """sin and cos of alpha + d from those of alpha (at), for |d| <= TURN_LIMIT.

    sin d and cos d by their Taylor series to d^9 and d^10 (the next terms are
    below 1e-21 there): only products and sums, which XLA vectorises over a
    batch's points, where sin and cos of every stage cost most of a step.
    """
    d2 = d * d
    sin_d = d * (1 - d2 / 6 * (1 - d2 / 20 * (1 - d2 / 42 * (1 - d2 / 72))))
    cos_d = 1 - d2 / 2 * (1 - d2 / 12 * (1 - d2 / 30 * (1 - d2 / 56 * (1 - d2 / 90))))
    return at.sin * cos_d + at.cos * sin_d, at.cos * cos_d - at.sin * sin_d


def heun_step(X, at_X, q, energy0, h, series):
    """Explicit trapezoidal rule (Heun): the explicit second-order Runge-Kutta.

    X and the new state are tuples of seven; at_X is X's Contact, and the new
    state's Contact comes with the result (the next step starts from it), with
    the largest increment of alpha in the step's two stages. series: sin and cos
    of alpha by `turned` (valid while that increment is at most TURN_LIMIT),
    else by sin and cos themselves.
    """
    k1 = field(X, q, at_X)
    d_mid = tuple(h * k for k in k1)
    X_mid = tuple(x + d for x, d in zip(X, d_mid, strict=True))
    k2 = field(X_mid, q, contact(X_mid, q, energy0, turned(at_X, d_mid[6]) if series else None))
    dX = tuple(h / 2 * (a + b) for a, b in zip(k1, k2, strict=True))
    X_new = tuple(x + d for x, d in zip(X, dX, strict=True))
    at_new = contact(X_new, q, energy0, turned(at_X, dX[6]) if series else None)
    return X_new, at_new, jnp.maximum(jnp.abs(d_mid[6]), jnp.abs(dX[6]))


def run_fixed(q, times=None):
    """The fixed-step run, outputs reduced on the fly.

    The steps run in SEGMENTS segments, segment j ending after step
    max(j, ceil(j n / SEGMENTS)) (at most n). Each segment starts from sin and
    cos of alpha itself and carries them on by angle addition (`turned`), so
    that their rounding cannot accumulate over more than a segment (~1e-14 in
    2,400 steps). A point whose alpha moved by more than TURN_LIMIT in a stage
    of the segment runs the segment again from its start with sin and cos
    every stage. Within a segment, UNROLL steps per loop iteration, then the
    remaining steps one at a time. All of it is per point: a point takes
    exactly its own steps whatever its batch's others do.

    times: the sweep's sample times (an array, increasing) or None. The state
    at sample time t is one Heun step of length t - k h from the state after
    step k = floor(t / h) (the step the time falls in; a time on a step's end
    is that step's state, to rounding): the RK2 solution at t itself, to the
    method's own order, with its residuals those of a state the run could
    have reached. (Interpolating the step's ends linearly would put an error
    of up to h^2 |X''| / 8 into every sample, residuals included: estimated
    ~1e-9 in the energy f2 at h = 1e-5, as large as the steady residuals the
    samples are to show; not measured.)
    The side step is discarded: the run goes on from step k's end, taking the
    steps it takes without samples, so every other output is the same (to
    rounding: XLA compiles the loops anew around the pauses; measured bit for
    bit in calls of 8 points, 9e-11 relative in a residual maximum of an
    800,000-step run in calls of one). A sweep without samples runs the loops
    as before samples existed: its cube is unchanged bit for bit. Samples
    after the run's end (t > n h) are NaN.
    """
    dtype = q["step"].dtype
    energy0 = reference_energy(q)
    X0 = tuple(initial_state(q))
    q = with_reciprocals(q)
    h = q["step"]
    adaptive = h == 0  # these lanes run run_adaptive instead: no fixed steps
    h_safe = jnp.where(adaptive, 1.0, h)
    n = jnp.where(adaptive, 0, jnp.maximum(jnp.round(q["duration"] / h_safe), 1)).astype(jnp.int64)
    steady_from = jnp.floor(STEADY * n).astype(jnp.int64)
    at0 = contact(X0, q, energy0)

    carry0 = dict(
        X=X0, at=at0, k=jnp.asarray(0, jnp.int64), steady_max=(jnp.zeros((), dtype),) * 4,
        energy_max=jnp.abs(at0.f[1]), x_min=X0[0], x_max=X0[0], right_turns=jnp.asarray(0, jnp.int64),
        first_turn=(jnp.asarray(0, jnp.int64), X0[3], X0[3]), last_turn=(jnp.asarray(0, jnp.int64), X0[3], X0[3]),
        turn_max=jnp.zeros((), dtype),
    )
    if times is not None:
        count = times.shape[0]
        # The step each sample time falls in (n + 1: never, after the run's end,
        # beyond a billionth of a step of rounding), and the side step's length.
        k_at = jnp.minimum(jnp.floor(times / h_safe), n).astype(jnp.int64)
        reached = ~adaptive & (times <= n * h + 1e-9 * h)
        k_at = jnp.where(reached, k_at, n + 1)
        side = times - k_at * h
        carry0 |= dict(next=jnp.asarray(0, jnp.int64), samples=jnp.full((count, 7), jnp.nan, dtype))

    def step(c, series):
        X, k = c["X"], c["k"] + 1
        X_new, at_new, turn_by = heun_step(X, c["at"], q, energy0, h, series)
        a = tuple(jnp.abs(f) for f in at_new.f)
        # A right turning point: x' changes sign from + to -; its time (turn_time)
        # from the step and x' at its ends, at the end of the run.
        turn = (X[3] > 0) & (X_new[3] <= 0)
        at_turn = (k, X[3], X_new[3])
        first = turn & (c["right_turns"] == 0)
        steady = k > steady_from
        return c | dict(
            X=X_new, at=at_new, k=k,
            steady_max=tuple(jnp.where(steady, jnp.maximum(m, f), m) for m, f in zip(c["steady_max"], a, strict=True)),
            energy_max=jnp.maximum(c["energy_max"], a[1]),
            x_min=jnp.minimum(c["x_min"], X_new[0]), x_max=jnp.maximum(c["x_max"], X_new[0]),
            right_turns=c["right_turns"] + turn,
            first_turn=tuple(jnp.where(first, a, b) for a, b in zip(at_turn, c["first_turn"], strict=True)),
            last_turn=tuple(jnp.where(turn, a, b) for a, b in zip(at_turn, c["last_turn"], strict=True)),
            turn_max=jnp.maximum(c["turn_max"], turn_by),
        )

    def series_steps(c, stop):
        # Whole blocks of UNROLL steps, then single steps up to `stop`: no step is masked.
        def block(c):
            return jax.lax.fori_loop(0, UNROLL, lambda _, c: step(c, True), c, unroll=True)

        c = jax.lax.while_loop(lambda c: c["k"] + UNROLL <= stop, block, c)
        return jax.lax.while_loop(lambda c: c["k"] < stop, lambda c: step(c, True), c)

    def exact_steps(c, stop):
        return jax.lax.while_loop(lambda c: c["k"] < stop, lambda c: step(c, False), c)

    def sampled(c):
        """c with the samples whose times fall in its step (k_at == k) written."""
        def due(c):
            return (c["next"] < count) & (k_at[jnp.minimum(c["next"], count - 1)] == c["k"])

        def write(c):
            j = c["next"]
            X_at, _, _ = heun_step(c["X"], contact(c["X"], q, energy0), q, energy0, side[j], False)
            return c | dict(samples=c["samples"].at[j].set(jnp.stack(X_at)), next=j + 1)

        return jax.lax.while_loop(due, write, c)

    def advance(c, stop, steps, go=True):
        """`steps` up to `stop` (where `go`), pausing at each step a sample time falls in."""
        def leg(c):
            c = sampled(c)
            upcoming = jnp.where(c["next"] < count, k_at[jnp.minimum(c["next"], count - 1)], stop)
            return steps(c, jnp.clip(upcoming, c["k"] + 1, stop))

        return jax.lax.while_loop(lambda c: go & (c["k"] < stop), leg, c)

    def segment(j, c):
        stop = jnp.minimum(jnp.maximum(j, (j * n + SEGMENTS - 1) // SEGMENTS), n)  # max(j, ceil(j n / SEGMENTS))
        start = c | dict(at=contact(c["X"], q, energy0), turn_max=jnp.zeros((), dtype))
        c = series_steps(start, stop) if times is None else advance(start, stop, series_steps)
        again = c["turn_max"] > TURN_LIMIT
        c = jax.tree_util.tree_map(lambda a, b: jnp.where(again, a, b), start, c)
        if times is None:
            return jax.lax.while_loop(lambda c: again & (c["k"] < stop), lambda c: step(c, False), c)
        return advance(c, stop, exact_steps, again)

    c = jax.lax.fori_loop(1, SEGMENTS + 1, segment, carry0)
    if times is not None:
        c = sampled(c)  # those in the last step's end

    def turn_time(k, xd_before, xd_after):  # linear interpolation of x' in step k
        return (k - 1) * h + h * xd_before / (xd_before - xd_after)

    period = jnp.where(c["right_turns"] >= 2,
                       (turn_time(*c["last_turn"]) - turn_time(*c["first_turn"])) / (c["right_turns"] - 1), jnp.nan)
    return dict(
        max_residual_f=jnp.stack(c["steady_max"]), period=period, turn_left_x=c["x_min"],
        turn_right_x=c["x_max"], energy_error=c["energy_max"], X=jnp.stack(c["X"]), steps=n, status=jnp.int8(1),
        **({} if times is None else {"samples": c["samples"]}),
    )


def run_adaptive(q, settings):
    """diffrax's adaptive solver ([solver] of the sweep) on the engine's hybrid loop.

    Turning points (x' = 0) are non-terminal events, so period and turning
    positions are exact to the solver tolerance. max_residual and energy_error
    are the residuals at those events and at the end (no per-step loop here):
    max_residual those in the last 15% of the run. The states at the sweep's
    sample times (`samples`, where it samples any) are the engine's
    (HybridSolution.saved_y): each read from the dense output of the step the
    time falls in, NaN after the run's end. The samples change no step.
    """
    from engine import HybridSystem, Mode, Transition

    energy0 = reference_energy(q)

    def field(t, X, args):
        return vector_field(X, args, energy0)

    system = HybridSystem((Mode("rolling", field, (
        Transition("right_turn", lambda t, X, args: X[3], target=0, direction=False),
        Transition("left_turn", lambda t, X, args: X[3], target=0, direction=True),
    ), ends_at_horizon=True),))
    sol = system.solve(initial_state(q), 0, q, settings, t_end=q["duration"])
    right = sol.event_code == 0
    left = sol.event_code == 1
    count = jnp.sum(right)
    times = jnp.where(right, sol.event_t, jnp.nan)
    period = jnp.where(count >= 2, (jnp.nanmax(times) - jnp.nanmin(times)) / jnp.maximum(count - 1, 1), jnp.nan)
    samples = jnp.concatenate([sol.event_y, sol.y[None]])
    sample_t = jnp.concatenate([sol.event_t, sol.t[None]])
    f = jnp.abs(jax.vmap(lambda X: residuals(X, q, energy0))(jnp.nan_to_num(samples)))
    steady = (sample_t >= STEADY * q["duration"])[:, None] & jnp.isfinite(samples[:, :1])
    x_extremes = jnp.concatenate([jnp.where(left | right, sol.event_y[:, 0], jnp.nan), sol.y[:1]])
    return dict(
        max_residual_f=jnp.max(jnp.where(steady, f, 0.0), axis=0),
        period=period,
        turn_left_x=jnp.nanmin(x_extremes),
        turn_right_x=jnp.nanmax(x_extremes),
        energy_error=jnp.max(jnp.where(jnp.isfinite(samples[:, :1]), f, 0.0), axis=0)[1],
        X=sol.y,
        steps=sol.num_steps.astype(jnp.int64),
        status=sol.status,
        **({"samples": sol.saved_y} if settings.save_times else {}),
    )

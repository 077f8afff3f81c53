"""Running the hoop: the seed's fixed-step RK2, with every output reduced on the fly.

Runs of 1e6-1e7 steps per point store no trajectory: the loop carries the
state, running maxima and the turning-point bookkeeping, and a fixed number of
residual samples for transient plots.
"""

import jax
import jax.numpy as jnp

from ._model import initial_state, reference_energy, residuals, vector_field

HISTORY = 100  # residual samples over the run (time-series output)
STEADY = 0.85  # "steady state": the last 15% of the run


def heun_step(X, q, energy0, h):
    """Explicit trapezoidal rule (Heun): the explicit second-order Runge-Kutta."""
    k1 = vector_field(X, q, energy0)
    k2 = vector_field(X + h * k1, q, energy0)
    return X + h / 2 * (k1 + k2)


def run_fixed(q):
    dtype = q["step"].dtype
    energy0 = reference_energy(q)
    X0 = initial_state(q)
    h = q["step"]
    adaptive = h == 0  # these lanes run run_adaptive instead: no fixed steps
    n = jnp.where(adaptive, 0, jnp.maximum(jnp.round(q["duration"] / jnp.where(adaptive, 1.0, h)), 1)).astype(jnp.int64)
    steady_from = jnp.floor(STEADY * n).astype(jnp.int64)
    f0 = jnp.abs(residuals(X0, q, energy0))
    history = jnp.full((HISTORY + 1, 4), jnp.nan, dtype).at[0].set(residuals(X0, q, energy0))
    inf = jnp.asarray(jnp.inf, dtype)

    carry0 = dict(
        X=X0, k=jnp.asarray(0, jnp.int64), steady_max=jnp.zeros(4, dtype), run_max=f0,
        x_min=X0[0], x_max=X0[0], right_turns=jnp.asarray(0, jnp.int64), first_turn=inf, last_turn=inf,
        history=history, next_sample=jnp.asarray(1, jnp.int64),
    )

    def body(c):
        X, k = c["X"], c["k"] + 1
        X_new = heun_step(X, q, energy0, h)
        f = residuals(X_new, q, energy0)
        a = jnp.abs(f)
        # A right turning point: x' changes sign from + to -; its time by linear interpolation.
        turn = (X[3] > 0) & (X_new[3] <= 0)
        t_turn = (k - 1) * h + h * X[3] / (X[3] - X_new[3])
        sample = k * HISTORY >= c["next_sample"] * n
        return dict(
            X=X_new, k=k,
            steady_max=jnp.where(k > steady_from, jnp.maximum(c["steady_max"], a), c["steady_max"]),
            run_max=jnp.maximum(c["run_max"], a),
            x_min=jnp.minimum(c["x_min"], X_new[0]), x_max=jnp.maximum(c["x_max"], X_new[0]),
            right_turns=c["right_turns"] + turn,
            first_turn=jnp.where(turn & (c["right_turns"] == 0), t_turn, c["first_turn"]),
            last_turn=jnp.where(turn, t_turn, c["last_turn"]),
            history=jnp.where(sample, c["history"].at[c["next_sample"]].set(f), c["history"]),
            next_sample=c["next_sample"] + sample,
        )

    c = jax.lax.while_loop(lambda c: c["k"] < n, body, carry0)
    period = jnp.where(c["right_turns"] >= 2, (c["last_turn"] - c["first_turn"]) / (c["right_turns"] - 1), jnp.nan)
    return dict(
        max_residual_f=c["steady_max"], run_max=c["run_max"], period=period, turn_left_x=c["x_min"],
        turn_right_x=c["x_max"], energy_error=c["run_max"][1], history=c["history"], X=c["X"], steps=n,
        status=jnp.int8(1),
    )


def run_adaptive(q, settings):
    """diffrax's adaptive solver ([solver] of the sweep) on the engine's hybrid loop.

    Turning points (x' = 0) are non-terminal events, so period and turning
    positions are exact to the solver tolerance. Residuals are sampled at those
    events and at the end (no per-step loop here): max_residual covers the
    samples in the last 15% of the run; residual_history is not recorded (NaN).
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
    dtype = sol.y.dtype
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
        run_max=jnp.max(jnp.where(jnp.isfinite(samples[:, :1]), f, 0.0), axis=0),
        period=period,
        turn_left_x=jnp.nanmin(x_extremes),
        turn_right_x=jnp.nanmax(x_extremes),
        energy_error=jnp.max(jnp.where(jnp.isfinite(samples[:, :1]), f, 0.0), axis=0)[1],
        history=jnp.full((HISTORY + 1, 4), jnp.nan, dtype),
        X=sol.y,
        steps=sol.num_steps.astype(jnp.int64),
        status=sol.status,
    )

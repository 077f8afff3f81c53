"""Rolling table-tennis ball: sliding then rolling then at rest.

Gao Yunfeng, "The roll of a table tennis ball", Mechanics in Engineering 43(5),
2021, eqs. (2) and (7). Thin-walled sphere, J = (2/3) m r^2; state
y = (x, xdot, theta, thetadot, lam), where lam = sign(xdot) at the start of
rolling is frozen into the state by the slide->roll map: rolling resistance
opposes the motion and must not flip as xdot passes zero inside the solver's
last step (that would make the vector field discontinuous where the stop event
is being located).
"""

import jax.numpy as jnp

from engine import HybridPoint, HybridSystem, Mode, PointResult, Start, Status, Transition

SLIDE, ROLL = 0, 1


def coefficients(p):
    """The constant coefficients of eqs. (2) and (7), from the parameters: the
    arguments of the vector fields. Computed once per point, not at each of the
    few hundred evaluations of the field (a quarter of a solver step's time)."""
    g, r, mu, delta, beta = p["gravity"], p["radius"], p["friction"], p["rolling_resistance"], p["drag"]
    return {
        "radius": r,
        "slide_drag": 2 * beta,
        "slide_friction": mu * g,
        "slide_spin": 1.5 * (mu * r - delta) * g / r**2,
        "roll_drag": 1.2 * beta,
        "roll_resistance": 0.6 * g * delta / r,
    }


def _slide(t, y, c):
    """Eq. (2): slip s > 0, friction mu N acts backward on the ball:
    x'' = -2 beta xdot - mu g, theta'' = (3/2) (mu r - delta) g / r^2."""
    _, xdot, _, thetadot, _ = y
    xddot = -c["slide_drag"] * xdot - c["slide_friction"]
    return jnp.stack([xdot, xddot, thetadot, jnp.full_like(xdot, c["slide_spin"]), jnp.zeros_like(xdot)])


def _rolling_acceleration(xdot, lam, c):
    """Eq. (7): x'' = -(6/5) beta xdot - (3/5) g lam delta / r."""
    return -c["roll_drag"] * xdot - lam * c["roll_resistance"]


def _roll(t, y, c):
    """Eq. (7), rolling without slip: theta'' = x'' / r."""
    _, xdot, _, thetadot, lam = y
    xddot = _rolling_acceleration(xdot, lam, c)
    return jnp.stack([xdot, xddot, thetadot, xddot / c["radius"], jnp.zeros_like(xdot)])


def slip(t, y, c):
    """Velocity of the contact point, s = xdot - r thetadot (c: the coefficients,
    the arguments of every function of the system)."""
    return y[1] - c["radius"] * y[3]


def _start_rolling(t, y, c):
    # Enforce the rolling constraint exactly (s = 0 holds to solver tolerance at the
    # event) and freeze the direction of rolling resistance.
    xdot = y[1]
    return y.at[3].set(xdot / c["radius"]).at[4].set(jnp.sign(xdot))


SYSTEM = HybridSystem(
    modes=(
        Mode(
            "slide",
            _slide,
            (Transition("slip_ends", slip, target=ROLL, direction=False, reset=_start_rolling),),
        ),
        Mode("roll", _roll, (Transition("stops", lambda t, y, p: y[1], target=None),)),
    )
)


def rolling_friction(xdot, lam, p):
    """Friction force per unit mass needed to keep rolling: F/m = (2/3) x'' + lam delta g / r."""
    xddot = _rolling_acceleration(xdot, lam, coefficients(p))
    return (2.0 / 3.0) * xddot + lam * p["rolling_resistance"] * p["gravity"] / p["radius"]


def _start(p, settings):
    v0, r = p["initial_speed"], p["radius"]
    thetadot0 = -p["spin_ratio"] * v0 / r  # backspin: spin ratio q = |r thetadot0 / v0|
    y0 = jnp.stack([0.0, v0, 0.0, thetadot0, 0.0]).astype(jnp.dtype(settings.dtype))
    # Spin ratio >= 0 and v0 > 0 give slip v0 (1 + q) > 0: the ball always starts sliding.
    return Start(y0, SLIDE, coefficients(p))


def _finish(p, sol, settings):
    dtype = jnp.dtype(settings.dtype)

    roll_start = sol.event_y[0]
    u0, lam = roll_start[1], jnp.sign(roll_start[1])
    # F is affine in xdot and xdot is monotone while rolling, so its largest
    # magnitude over the rolling phase is at one of the phase's ends.
    friction_limit = p["friction"] * p["gravity"]
    margin = jnp.maximum(
        jnp.abs(rolling_friction(u0, lam, p)), jnp.abs(rolling_friction(0.0, lam, p))
    ) / friction_limit
    outputs = {
        "final_displacement": sol.y[0],
        "slide_end_time": sol.event_t[0],
        "stop_time": sol.t,
        "roll_start_speed": u0,
        "reverses": (u0 < 0).astype(dtype),
        "friction_margin": margin,
    }
    if sol.saved_y is not None:  # the sweep samples times ([save] times)
        # After it stops the ball rests: its final position, speed zero.
        resting = sol.saved_t > sol.t
        outputs["x"] = jnp.where(resting, sol.y[0], sol.saved_y[:, 0])
        outputs["x_dot"] = jnp.where(resting, 0.0, sol.saved_y[:, 1])
    ended_at_rest = (sol.num_events == 2) & (sol.status == Status.SUCCESS)
    status = jnp.where(ended_at_rest | (sol.status != Status.SUCCESS), sol.status, jnp.int8(Status.SOLVER_FAILED))
    return PointResult(outputs, status, sol.num_steps, sol.num_events)


solve_point = HybridPoint(SYSTEM, _start, _finish)

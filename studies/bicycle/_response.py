"""Time response of the linearised bicycle from an initial lean rate.

Meijaard et al. 2007, section 8: released upright at v = 4.6 m/s with lean rate
0.5 rad/s, the weave oscillation has period ~1.6 s (linear prediction 1.622 s).
Here the linear model x' = A(v) x, x = (phi, delta, phi', delta'), runs as a
hybrid system on the engine: a terminal "falls" event when |lean| reaches the
fall angle, and non-terminal events at every zero of the lean rate (extrema of
the lean), which sample the oscillation without storing a trajectory.
"""

import jax.numpy as jnp

from engine import (
    TIME,
    HybridPoint,
    HybridSystem,
    Interval,
    Mode,
    Output,
    Parameter,
    PointResult,
    Start,
    Study,
    Transition,
    demo_configs,
)

from ._canonical import canonical_matrices, state_matrix
from ._figures import response_figures
from ._parameters import CONSTRAINTS, DESIGN_NAMES, PARAMETERS, load_design
from ._roots import tracked_eigenvalues

FALLS, LEAN_EXTREMUM = 0, 1


def _ride(t, y, p):
    return p["A"] @ y


SYSTEM = HybridSystem(
    (
        Mode(
            "riding",
            _ride,
            (
                Transition("falls", lambda t, y, p: jnp.abs(y[0]) - p["fall_angle"], target=None, direction=True),
                Transition("lean_extremum", lambda t, y, p: y[2], target=0),
            ),
            ends_at_horizon=True,  # a self-stable bicycle never falls: the horizon ends the run
        ),
    )
)

RESPONSE_PARAMETERS = tuple(p for p in PARAMETERS if p.name not in ("v", "max_speed")) + (
    Parameter("v", "m/s", 4.6, Interval(-100.0, 100.0), "forward speed (Meijaard et al. 2007, section 8)", "v",
              label=r"forward speed $v$"),
    Parameter("initial_lean_rate", "rad/s", 0.5, Interval(-10.0, 10.0), "lean rate at release, upright", "phi'(0)",
              label=r"initial lean rate $\dot\phi_0$"),
    Parameter("fall_angle", "rad", 0.5, Interval(0.0, 1.5, lower_open=True), "lean at which the bicycle has fallen",
              label=r"fall angle $\phi_\mathrm{fall}$"),
)

RESPONSE_OUTPUTS = (
    Output("fall_time", "s", "time the lean reaches the fall angle (NaN: did not fall)", optional=True,
           label="fall time"),
    Output("final_lean", "rad", "lean at the end (the fall, or the time horizon)", label=r"final lean $\phi$"),
    Output("final_steer", "rad", "steer angle at the end", label=r"final steer $\delta$"),
    Output("lean_extrema", "1", "number of lean extrema (lean-rate zeros) before the end",
           label="lean extrema"),
    Output("weave_period", "s", "2 x mean spacing of the lean extrema after the first (NaN: fewer than 3)",
           optional=True, label="weave period (time response)"),
    Output("weave_period_linear", "s", "2 pi / |Im(weave eigenvalue)| at v: the linear prediction", optional=True,
           label="weave period (linear)"),
    Output("lean", "rad", "lean at the sweep's sample times (NaN after a fall)", dims=(TIME,), label=r"lean $\phi$"),
    Output("steer", "rad", "steer angle at the sweep's sample times (NaN after a fall)", dims=(TIME,),
           label=r"steer $\delta$"),
)


def start(p, settings):
    """Upright, released with the initial lean rate; the system's arguments are
    A(v) and the fall angle."""
    design = {k: p[k] for k in DESIGN_NAMES}
    dtype = jnp.dtype(settings.dtype)
    y0 = jnp.stack([0.0, 0.0, p["initial_lean_rate"], 0.0]).astype(dtype)
    return Start(y0, 0, {"A": state_matrix(design, p["v"]), "fall_angle": p["fall_angle"]})


def finish(p, sol, settings):
    """The outputs from the fall (if any) and the lean extrema in the event log."""
    dtype = jnp.dtype(settings.dtype)
    fell = jnp.any(sol.event_code == FALLS)
    extremum = sol.event_code == LEAN_EXTREMUM
    count = jnp.sum(extremum)
    # Spacing of consecutive extrema, skipping the first (release transient).
    times = jnp.where(extremum, sol.event_t, jnp.nan)
    k = jnp.arange(times.size)
    spacing = (jnp.nanmax(jnp.where(k >= 1, times, jnp.nan)) - times[1]) / jnp.maximum(count - 2, 1)
    design = {name: p[name] for name in DESIGN_NAMES}
    weave = tracked_eigenvalues(canonical_matrices(design), p["g"], p["v"])[0]
    outputs = {
        "fall_time": jnp.where(fell, sol.t, jnp.nan),
        "final_lean": sol.y[0],
        "final_steer": sol.y[1],
        "lean_extrema": count.astype(dtype),
        "weave_period": jnp.where(count >= 3, 2 * spacing, jnp.nan),
        "weave_period_linear": jnp.where(jnp.abs(weave.imag) > 0, 2 * jnp.pi / jnp.abs(weave.imag), jnp.nan),
    }
    if sol.saved_y is not None:  # the sweep samples times ([save] times)
        outputs["lean"], outputs["steer"] = sol.saved_y[:, 0], sol.saved_y[:, 1]
    return PointResult(outputs, sol.status, sol.num_steps, sol.num_events)


# Declared as start -> hybrid solve -> finish, so the engine solves a batch on
# refilling lanes (CPU) or in the fused kernel (GPU). The kernel takes the
# system (the field A(v) y, the fall and lean-extremum conditions); A(v) (a 2x2
# inverse) and the finish (the weave eigenvalue, complex) run around it.
solve_response = HybridPoint(SYSTEM, start, finish)


RESPONSE = Study(
    name="bicycle_response",
    title="Whipple bicycle: linear time response from an initial lean rate, with a fall event",
    source="Meijaard, Papadopoulos, Ruina, Schwab, Proc. R. Soc. A 463, 2007, section 8",
    version="1",
    parameters=RESPONSE_PARAMETERS,
    outputs=RESPONSE_OUTPUTS,
    solve_point=solve_response,
    figures=response_figures,
    demo_configs=demo_configs(__package__, "demo/response"),
    constraints=CONSTRAINTS,
    read_parameter_file=load_design,
)

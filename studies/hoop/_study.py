"""The hoop study's declaration (Matrosov, Morozov, Pesterev 2021, section 4)."""

import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

from engine import TIME, Constraint, Interval, Output, Parameter, PointResult, Status, Study, demo_configs

from ._figures import figures
from ._model import reference_energy, residuals
from ._profile import admissible, reference
from ._run import run_adaptive, run_fixed

PARAMETERS = (
    Parameter("mass", "1", 1.0, Interval(0.0, 1e3, lower_open=True), "hoop mass (dimensionless units)", "M",
              label=r"mass $M$"),
    Parameter("radius", "1", 0.01, Interval(0.0, 1.0, lower_open=True), "hoop radius", "r", label=r"radius $r$"),
    Parameter("gravity", "1", 9.81, Interval(0.0, 1e3, lower_open=True), "gravitational acceleration", "g",
              label=r"gravity $g$"),
    Parameter("a", "1", 0.13, Interval(-2.0, 2.0), "profile p(x) = x^4 + a x^3 - b x^2 - a x - (1 - b)", "a",
              label=r"profile coefficient $a$"),
    Parameter("b", "1", 0.5, Interval(-2.0, 2.0), "profile coefficient (see a)", "b", label=r"profile coefficient $b$"),
    Parameter("stabilization", "1/time", 1e3, Interval(0.0, 1e8), "residual decay rate lambda (0: none)", "lam",
              label=r"stabilisation $\lambda$"),
    Parameter("step", "time", 1e-5, Interval(0.0, 1e-1),
              "fixed step of the RK2 (Heun) integrator; 0: diffrax's adaptive solver of the sweep's [solver]", "h",
              label=r"step $h$"),
    Parameter("duration", "time", 10.0, Interval(0.0, 1e5, lower_open=True), "length of the run",
              label=r"duration $T$"),
    Parameter("start_contact_x", "1", 0.0, Interval(-2.0, 2.0), "contact point x at t = 0",
              label=r"initial contact point $x$"),
    Parameter("start_speed", "1/time", 1.0, Interval(0.0, 100.0, lower_open=True), "centre speed at t = 0",
              label="initial centre speed"),
    Parameter("initial_error", "1", 0.0, Interval(-1e-2, 1e-2),
              "perturbation of the initial state in every constraint (height, speeds, spin, alpha)",
              label=r"initial error $\varepsilon$"),
)

CONSTRAINTS = (
    Constraint(
        ("a", "b", "radius", "gravity", "start_contact_x", "start_speed"),
        lambda p: admissible(p["a"], p["b"], p["radius"], p["gravity"], p["start_contact_x"], p["start_speed"]),
        "inadmissible track: the motion is not periodic within |x| < 4, or the track's curvature reaches 1/r "
        "where the hoop rolls",
    ),
)

_F = ("f1", "f2", "f3", "f4")
OUTPUTS = (
    Output("max_residual", "1", "max |f_i| over i and the steady state (last 15% of the run)",
           label=r"$\max_i |f_i|$"),
) + tuple(Output(f"max_residual_{f}", "1", f"max |{f}| in the steady state",
                 label=f"$\\max|f_{f[1:]}|$") for f in _F) + (
    Output("period", "time", "mean period between right turning points (NaN: fewer than two)", optional=True,
           label=r"period $T$"),
    Output("turn_left_x", "1", "smallest centre x over the run", label=r"left turning point $x_\mathrm{left}$"),
    Output("turn_right_x", "1", "largest centre x over the run", label=r"right turning point $x_\mathrm{right}$"),
    Output("energy_error", "1", "largest |E - E0| (= |f2|) over the run",
           label=r"energy error $\max|E-E_0|$"),
    Output("period_reference", "time", "period by quadrature along the centre's curve",
           label=r"reference period $T$ (quadrature)"),
    Output("turn_left_reference", "1", "left turning centre x by quadrature",
           label=r"reference $x_\mathrm{left}$ (quadrature)"),
    Output("turn_right_reference", "1", "right turning centre x by quadrature",
           label=r"reference $x_\mathrm{right}$ (quadrature)"),
    # At the sweep's sample times ([save] times; the study's default below), on
    # either solver; NaN after the run's end (t > duration).
    Output("residual", "1", "f1..f4 at the sample times (NaN after the run's end)", (("constraint", _F), TIME),
           label=r"residual $f_i$"),
    Output("contact_x", "1", "contact point x_a = x + r cos(alpha) at the sample times",
           dims=(TIME,), label=r"contact point $x_a$"),
    Output("contact_z", "1", "contact point z_a = z + r sin(alpha) at the sample times (on the track: p(x_a))",
           dims=(TIME,), label=r"contact point $z_a$"),
)


def solve_point(q, settings):
    times = jnp.asarray(settings.save_times, q["step"].dtype) if settings.save_times else None
    fixed = run_fixed(q, times)
    # The adaptive path runs only if some lane of the batch asks for it (step = 0):
    # an unbatched predicate, so a fixed-step sweep never pays for it.
    adaptive = jax.lax.cond(eqxi.unvmap_any(q["step"] == 0), lambda: run_adaptive(q, settings), lambda: fixed)
    out = jax.tree_util.tree_map(lambda a, f: jnp.where(q["step"] == 0, a, f), adaptive, fixed)
    period_ref, left_ref, right_ref = reference(q["a"], q["b"], q["radius"], q["gravity"], q["start_contact_x"],
                                                q["start_speed"])
    f = out["max_residual_f"]
    outputs = {
        "max_residual": jnp.max(f),
        **{f"max_residual_{name}": f[i] for i, name in enumerate(_F)},
        "period": out["period"],
        "turn_left_x": out["turn_left_x"],
        "turn_right_x": out["turn_right_x"],
        "energy_error": out["energy_error"],
        "period_reference": period_ref,
        "turn_left_reference": left_ref,
        "turn_right_reference": right_ref,
    }
    if times is not None:  # the sweep samples times: the states there, from either solver
        samples = out["samples"]
        energy0 = reference_energy(q)
        outputs["residual"] = jax.vmap(lambda X: residuals(X, q, energy0), out_axes=1)(samples)
        outputs["contact_x"] = samples[:, 0] + q["radius"] * jnp.cos(samples[:, 6])
        outputs["contact_z"] = samples[:, 1] + q["radius"] * jnp.sin(samples[:, 6])
    status = jnp.where(jnp.all(jnp.isfinite(out["X"])), out["status"], jnp.int8(Status.NONFINITE)).astype(jnp.int8)
    return PointResult(outputs, status, out["steps"].astype(jnp.int32), jnp.asarray(0, jnp.int32))


STUDY = Study(
    name="hoop",
    title="heavy hoop rolling on a curved track: constraint-stabilised equations",
    source='Matrosov, Morozov, Pesterev, "Numerical integration of rolling equations using control-theory '
           'approaches", J. Comput. Syst. Sci. Int. 2021',
    version="1",
    parameters=PARAMETERS,
    outputs=OUTPUTS,
    solve_point=solve_point,
    figures=figures,
    demo_configs=demo_configs(__package__),
    constraints=CONSTRAINTS,
    # Sample times of residual, contact_x and contact_z where a sweep selects one
    # and gives no [save] times: the default run's 10 time units.
    save_times={"linspace": [0.0, 10.0, 201]},
    # A call's cost is mostly XLA's fixed cost per kernel of each step (~25 of them)
    # up to a few dozen points: 64 points cost about what 16 do, and a shard of the
    # study's sweeps (35 points, configs/hoop_profiles.toml) is one call. Measured
    # on 117 shapes, 2 cores: shards of 63 points (two calls, one per core) 190
    # points/s; shards of 35 (five calls of 27 or 9 points) 68-75.
    batch_size=64,
)

assert np.all(admissible(0.13, 0.5, 0.01, 9.81, 0.0, 1.0))

"""The bicycle study's declaration and per-point function.

Source: J. P. Meijaard, J. M. Papadopoulos, A. Ruina, A. L. Schwab, "Linearized
dynamics equations for the balance and steer of a bicycle: a benchmark and
review", Proc. R. Soc. A 463: 1955-1982, 2007.
"""

import jax.numpy as jnp

from engine import Output, PointResult, Status, Study, demo_configs

from ._canonical import canonical_entries, state_matrix
from ._figures import figures
from ._parameters import CONSTRAINTS, DESIGN_NAMES, PARAMETERS, load_design
from ._roots import MODES, tracked_eigenvalues
from ._speeds import capsize_speed, double_root_speed, weave_speed

OUTPUTS = (
    Output("eigenvalue_real", "1/s", "real part of the eigenvalue of each mode at speed v", (("mode", MODES),),
           label=r"eigenvalue $\mathrm{Re}\,\lambda$"),
    Output("eigenvalue_imag", "1/s", "imaginary part of the eigenvalue of each mode at speed v", (("mode", MODES),),
           label=r"eigenvalue $\mathrm{Im}\,\lambda$"),
    Output("weave_speed", "m/s", "speed vw above which the weave mode is stable", optional=True,
           label=r"weave speed $v_w$"),
    Output("capsize_speed", "m/s", "speed vc above which the capsize mode is unstable", optional=True,
           label=r"capsize speed $v_c$"),
    Output("double_root_speed", "m/s", "speed vd where two real eigenvalues merge into the weave pair",
           optional=True, label=r"double-root speed $v_d$"),
    Output("stable_speed_width", "m/s",
           "width vc - vw of the self-stable speed interval (0 if vc <= vw; NaN if either is absent)", optional=True,
           label=r"self-stable speed range $v_c-v_w$"),
)


def solve_point(p, settings):
    matrices = canonical_entries({k: p[k] for k in DESIGN_NAMES})
    g, max_speed = p["g"], p["max_speed"]
    eigenvalues = tracked_eigenvalues(matrices, g, p["v"])
    vw, _ = weave_speed(matrices, g, max_speed)
    vc = capsize_speed(matrices, g, max_speed)
    vd, _ = double_root_speed(matrices, g, max_speed)
    outputs = {
        "eigenvalue_real": eigenvalues.real,
        "eigenvalue_imag": eigenvalues.imag,
        "weave_speed": vw,
        "capsize_speed": vc,
        "double_root_speed": vd,
        "stable_speed_width": jnp.maximum(vc - vw, 0.0),
    }
    return PointResult(outputs, jnp.int8(Status.SUCCESS))


def lapack_eigenvalues(p, v):
    """Eigenvalues of A(v) by LAPACK's non-symmetric eig (CPU; on a GPU only with
    cusolver >= 11.7.1 or MAGMA): the cross-check of the quartic path."""
    return jnp.linalg.eigvals(state_matrix(p, v))


STUDY = Study(
    name="bicycle",
    title="Whipple bicycle: linearised lean and steer, self-stability",
    source="Meijaard, Papadopoulos, Ruina, Schwab, Proc. R. Soc. A 463, 2007",
    version="1",
    parameters=PARAMETERS,
    outputs=OUTPUTS,
    solve_point=solve_point,
    figures=figures,
    demo_configs=demo_configs(__package__),
    constraints=CONSTRAINTS,
    read_parameter_file=load_design,
    # Points per compiled call on CPU. CPU time a point, eigenvalues of a (trail, speed) grid: 1,024: 0.67-0.75 us,
    # 2,048: 0.54-0.59, 4,096: 0.50-0.59, 16,384: 0.50-0.53 (each call's ~120 kernels cost their start-up); past
    # 2,048 little is gained, and the engine plans 16 KiB of memory a point for each call in flight.
    batch_size=2048,
)

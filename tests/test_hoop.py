"""Heavy hoop on a curved track (Matrosov, Morozov, Pesterev 2021, section 4).

Truth: the rolling hoop's speed depends only on its centre's height
(M v^2 + M g z = E0), so period and turning points are 1-D integrals along the
centre's curve, computed here independently with scipy."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import brentq

from engine import SolverSettings, Status
from engine.cli.commands import main
from engine.solve import evaluate
from studies.hoop import STUDY
from studies.hoop._profile import reference

from conftest import sweep_file

A, B, R, G = 0.13, 0.5, 0.01, 9.81


def centre(xi):
    slope = 4 * xi**3 + 3 * A * xi**2 - 2 * B * xi - A
    p = xi**4 + A * xi**3 - B * xi**2 - A * xi - (1 - B)
    n = np.sqrt(1 + slope**2)
    return xi - R * slope / n, p + R / n


def quadrature_reference():
    level = centre(0.0)[1] + 1.0**2 / G  # start speed 1 at contact x = 0
    left = brentq(lambda s: centre(s)[1] - level, -1.5, 0.0, xtol=1e-15)
    right = brentq(lambda s: centre(s)[1] - level, 0.0, 1.5, xtol=1e-15)

    def arc(s, ds=1e-6):
        (x1, z1), (x2, z2) = centre(s - ds), centre(s + ds)
        return np.hypot(x2 - x1, z2 - z1) / (2 * ds)

    # s = mid + half cos(phi): the 1/sqrt endpoint singularities cancel; adaptive quad.
    mid, half = (left + right) / 2, (right - left) / 2

    def integrand(phi):
        s = mid + half * np.cos(phi)
        return arc(s) * half * np.sin(phi) / np.sqrt(G * (level - centre(s)[1]))

    period, _ = quad(integrand, 0.0, np.pi, epsabs=1e-13, epsrel=1e-13, limit=200)
    return 2 * period, centre(left)[0], centre(right)[0]


REFERENCE = quadrature_reference()

# The adaptive path's settings (test_adaptive_solver_path_matches_quadrature). The
# fixed-step runs (step > 0) do not read them (studies/hoop/_study.solve_point runs
# run_fixed(q) alone there): so every run of this file shares one compiled program.
SETTINGS = SolverSettings(solver="Tsit5", rtol=1e-10, atol=1e-12, max_segments=16, max_steps=100000)


def run(**overrides):
    columns = {k: np.array([v]) for k, v in (STUDY.defaults | overrides).items()}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=1)
    return {k: v[0] for k, v in result.outputs.items()}, result.status[0]


def test_study_quadrature_matches_independent_quadrature():
    import jax

    period, left, right = (float(x) for x in jax.jit(reference)(*(jnp.asarray(v) for v in (A, B, R, G, 0.0, 1.0))))
    np.testing.assert_allclose([period, left, right], REFERENCE, rtol=1e-9)


@pytest.fixture(scope="module")
def reference_case():
    """The spec's reference case: lambda = 1e3, h = 1e-5, over two periods."""
    return run(stabilization=1e3, step=1e-5, duration=8.0)


def test_period_and_turning_points_match_quadrature(reference_case):
    out, status = reference_case
    assert status == Status.SUCCESS
    period, left, right = REFERENCE
    assert abs(out["period"] / period - 1) < 1e-6
    assert abs(out["turn_left_x"] / left - 1) < 1e-6 and abs(out["turn_right_x"] / right - 1) < 1e-6
    assert out["period_reference"] == pytest.approx(period, rel=1e-9)


def test_steady_residuals_below_the_seeds_bound(reference_case):
    """Seed, section 4: at lambda = 1e3, h = 1e-5 the steady max residual < 7e-9."""
    out, _ = reference_case
    assert out["max_residual"] < 7e-9
    assert max(out[f"max_residual_f{i}"] for i in range(1, 5)) == out["max_residual"]
    assert out["energy_error"] < 1e-8


@pytest.mark.parametrize("lam", [10.0, 100.0])
def test_first_order_residuals_decay_like_exp_minus_lambda_t(lam):
    duration = 3.0 / lam
    out, _ = run(stabilization=lam, step=1e-5, duration=duration, initial_error=1e-4)
    history = out["residual_history"]
    t = np.linspace(0, duration, history.shape[0])
    for i in (1, 2, 3):  # f2, f3, f4 obey f' = -lambda f
        f = np.abs(history[:, i])
        assert f[0] > 1e-6
        slope = np.polyfit(t, np.log(f), 1)[0]
        assert slope == pytest.approx(-lam, rel=1e-3), i


def test_without_stabilisation_an_initial_error_drifts():
    """lambda = 0, initial error 1e-6 (seed's Fig. 4): nothing pulls the state back.
    The first-order residuals f2..f4 persist undiminished and the contact residual
    f1 drifts (more than doubles over two passes); with lambda = 1e3 all vanish."""
    drifting, _ = run(stabilization=0.0, step=1e-5, duration=8.0, initial_error=1e-6)
    stabilised, _ = run(stabilization=1e3, step=1e-5, duration=8.0, initial_error=1e-6)
    start, end = np.abs(drifting["residual_history"][0]), np.abs(drifting["residual_history"][-1])
    assert end[0] > 2 * start[0]
    assert np.all(end[1:] > 0.99 * start[1:])
    assert stabilised["max_residual"] < 1e-8


def test_turning_points_do_not_blow_up(reference_case):
    """theta' passes through 0 at every turning point, where A(X) is singular: the
    controls stay finite and smooth (energy error stays tiny across 4 turns).
    The reference case's run (lambda = 1e3, h = 1e-5, 8 s), shared."""
    out, status = reference_case
    assert status == Status.SUCCESS and np.all(np.isfinite(out["residual_history"]))


@pytest.mark.parametrize("body, key", [
    ("[parameters]\nradius = 0.3\n", "parameters.radius"),  # valleys tighter than the hoop
    ("[parameters]\nstart_speed = 100.0\n", "parameters.start_speed"),  # runs off: not periodic
    ("[axes]\nradius = { values = [0.01, 0.5] }\n", "axes.radius"),
])
def test_inadmissible_track_is_rejected_before_any_compute(tmp_path, capsys, body, key):
    axes = "" if "[axes]" in body else "[axes]\nstabilization = { values = [1000.0] }\n"
    path = sweep_file(tmp_path, f'study = "hoop"\n{body}{axes}[run]\nout = "{tmp_path / "c.zarr"}"\n')
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{key}: inadmissible track" in err, err
    assert not (tmp_path / "c.zarr").exists()


def test_adaptive_solver_path_matches_quadrature():
    """step = 0: diffrax's adaptive solver on the engine's hybrid loop, turning
    points as events; period and turning points to the solver tolerance."""
    columns = {k: np.array([v]) for k, v in (STUDY.defaults | dict(step=0.0, duration=8.0)).items()}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=1)
    out = {k: v[0] for k, v in result.outputs.items()}
    assert result.status[0] == Status.SUCCESS
    period, left, right = REFERENCE
    assert abs(out["period"] / period - 1) < 1e-7
    assert abs(out["turn_left_x"] / left - 1) < 1e-7 and abs(out["turn_right_x"] / right - 1) < 1e-7
    assert out["max_residual"] < 1e-8 and np.all(np.isnan(out["residual_history"]))


def test_sin_cos_by_angle_addition_agree_with_sin_and_cos(monkeypatch):
    """The fixed-step run carries sin and cos of alpha by angle addition within
    each of its segments; with TURN_LIMIT below every increment, each segment
    runs again with sin and cos themselves (the path a point takes when alpha
    moves too far in a step). The two agree to rounding."""
    import jax

    from studies.hoop import _run

    q = {k: jnp.asarray([v]) for k, v in (STUDY.defaults | dict(step=1e-4, duration=1.0, initial_error=1e-4)).items()}
    series = jax.jit(jax.vmap(_run.run_fixed))(q)
    monkeypatch.setattr(_run, "TURN_LIMIT", -1.0)
    exact = jax.jit(jax.vmap(_run.run_fixed))(q)
    assert not np.array_equal(series["X"], exact["X"])  # the two paths did run
    np.testing.assert_allclose(series["X"], exact["X"], rtol=1e-12, atol=1e-14)
    # Residuals are differences of O(1) terms: their rounding is ~1e-16 absolute either way.
    np.testing.assert_allclose(series["history"], exact["history"], rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(series["max_residual_f"], exact["max_residual_f"], rtol=1e-9, atol=1e-13)

"""Heavy hoop on a curved track (Matrosov, Morozov, Pesterev 2021, section 4).

Truth: the rolling hoop's speed depends only on its centre's height
(M v^2 + M g z = E0), so period and turning points are 1-D integrals along the
centre's curve, computed here independently with scipy."""

import dataclasses

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


# Sample times of the sampled tests: the first 0.3 time units densely (the decay
# of an initial error for lambda = 10 and 100), then every time unit to 8 (two
# passes of the track: the drift without stabilisation). One grid, so that the
# sampled tests share one compiled program; DENSER differs from it only in density.
TIMES = tuple(float(t) for t in np.concatenate([np.linspace(0.0, 0.3, 61), np.arange(1.0, 9.0)]))
DENSER = tuple(float(t) for t in np.concatenate([np.linspace(0.0, 0.3, 121), np.arange(0.5, 8.5, 0.5)]))
SAMPLED = dataclasses.replace(SETTINGS, save_times=TIMES)
DECAY = len(TIMES) - 8  # samples in [0, 0.3]
# Points of the sampled tests: the decay on RK2 (h = 1e-5) and the adaptive
# solver (step 0), two runs that end early (at 0.2), and the drift pair.
POINTS = {
    **{(lam, h): dict(stabilization=lam, step=h, duration=0.3, initial_error=1e-4)
       for h in (1e-5, 0.0) for lam in (10.0, 100.0)},
    **{("short", h): dict(stabilization=100.0, step=h, duration=0.2, initial_error=1e-4) for h in (1e-5, 0.0)},
    "drift": dict(stabilization=0.0, step=1e-5, duration=8.0, initial_error=1e-6),
    "stabilised": dict(stabilization=1e3, step=1e-5, duration=8.0, initial_error=1e-6),
}


def sampled_runs(settings, keys):
    """keys' POINTS solved with `settings`, one point per call (as `run`: the
    same program shape), each key's outputs and status."""
    columns = {k: np.array([(STUDY.defaults | POINTS[key])[k] for key in keys]) for k in STUDY.defaults}
    result = evaluate(STUDY, settings, columns, batch_size=1)
    return {key: ({k: v[i] for k, v in result.outputs.items()}, result.status[i]) for i, key in enumerate(keys)}


@pytest.fixture(scope="module")
def sampled():
    return sampled_runs(SAMPLED, list(POINTS))


@pytest.mark.parametrize("solver", [1e-5, 0.0], ids=["rk2", "adaptive"])
@pytest.mark.parametrize("lam", [10.0, 100.0])
def test_first_order_residuals_decay_like_exp_minus_lambda_t(sampled, lam, solver):
    """f2, f3, f4 obey f' = -lambda f exactly (studies/hoop/_model.py), so from
    wrong initial data f_i(t) = f_i(0) exp(-lambda t): every sample of the
    first 0.3 time units within 1e-5 of f_i(0) of it on RK2 at h = 1e-5
    (measured: 7e-6 at most; the floor is RK2's own steady residual, ~1e-9
    absolute), 1e-6 on the adaptive solver at rtol 1e-10 (measured 5e-7)."""
    out, status = sampled[(lam, solver)]
    assert status == Status.SUCCESS
    t = np.array(TIMES[:DECAY])
    bound = 1e-5 if solver else 1e-6
    for i in (1, 2, 3):
        f = out["residual"][i, :DECAY]
        assert abs(f[0]) > 1e-5
        np.testing.assert_allclose(f, f[0] * np.exp(-lam * t), rtol=0, atol=bound * abs(f[0]), err_msg=f"f{i + 1}")


def test_contact_residual_decays(sampled):
    """f1 (second order, f1'' + 2 lambda f1' + lambda^2 f1 = 0 in the restated
    method): from f1(0) = -1e-4, |f1| stays below 2 |f1(0)| (1 + lambda t)
    exp(-lambda t) and has fallen a thousandfold by lambda t = 10."""
    t = np.array(TIMES[:DECAY])
    for lam in (10.0, 100.0):
        f1 = sampled[(lam, 1e-5)][0]["residual"][0, :DECAY]
        assert np.all(np.abs(f1) <= 2 * abs(f1[0]) * (1 + lam * t) * np.exp(-lam * t) + 1e-8)
        assert np.all(np.abs(f1[lam * t >= 10]) < 1e-3 * abs(f1[0]))


def test_rk2_and_adaptive_samples_agree(sampled):
    """The same point's samples on RK2 (h = 1e-5) and on the adaptive solver:
    within RK2's own residual level (measured 1.3e-9), the contact point to 1e-9."""
    for lam in (10.0, 100.0):
        rk2, adaptive = sampled[(lam, 1e-5)][0], sampled[(lam, 0.0)][0]
        np.testing.assert_allclose(rk2["residual"][:, :DECAY], adaptive["residual"][:, :DECAY], rtol=0, atol=3e-9)
        for name in ("contact_x", "contact_z"):
            np.testing.assert_allclose(rk2[name][:DECAY], adaptive[name][:DECAY], rtol=0, atol=1e-9)


def test_samples_after_a_points_end_are_nan(sampled):
    """Runs of 0.3 and 0.2 time units: every sample after the run's end NaN, on
    both solvers, every sample up to it finite; the point itself succeeds."""
    t = np.array(TIMES)
    for key, end in (((100.0, 1e-5), 0.3), ((100.0, 0.0), 0.3), (("short", 1e-5), 0.2), (("short", 0.0), 0.2)):
        out, status = sampled[key]
        assert status == Status.SUCCESS, key
        for name in ("contact_x", "contact_z"):
            assert np.all(np.isfinite(out[name][t <= end])) and np.all(np.isnan(out[name][t > end])), (key, name)
        assert np.all(np.isfinite(out["residual"][:, t <= end])) and np.all(np.isnan(out["residual"][:, t > end]))


def test_a_denser_grid_gives_the_same_samples_at_common_times(sampled):
    """DENSER holds every time of TIMES and others between: at the common times
    the RK2's samples are the same (each is a side step from the step its time
    falls in, which the other samples do not change; to rounding, measured 1
    ulp: another grid is another compiled program), NaN after the run's end
    alike. (The adaptive solver's are the engine's dense output, read from
    steps the samples do not change: tests/test_trajectories.py.)"""
    import jax

    from studies.hoop import _run
    from studies.hoop._model import reference_energy, residuals

    q = {k: jnp.asarray([v]) for k, v in (STUDY.defaults | POINTS[(100.0, 1e-5)]).items()}
    dense = jax.jit(jax.vmap(lambda q: _run.run_fixed(q, jnp.asarray(DENSER))))(q)["samples"][0]
    common = np.isin(np.array(DENSER), np.array(TIMES))
    assert common.sum() == len(TIMES)
    coarse = sampled[(100.0, 1e-5)][0]
    point = {k: v[0] for k, v in q.items()}
    f = np.stack([np.asarray(residuals(X, point, reference_energy(point))) for X in dense[common]], axis=1)
    np.testing.assert_allclose(f, coarse["residual"], rtol=1e-9, atol=1e-15)  # differences of O(1) terms
    x_a = dense[common, 0] + point["radius"] * np.cos(dense[common, 6])
    np.testing.assert_allclose(x_a, coarse["contact_x"], rtol=1e-14, atol=1e-16)
    assert np.all(np.isnan(dense[np.array(DENSER) > 0.3])) and np.all(np.isfinite(dense[np.array(DENSER) <= 0.3]))


def test_without_stabilisation_an_initial_error_drifts(sampled):
    """lambda = 0, initial error 1e-6 (seed's Fig. 4): nothing pulls the state back.
    The first-order residuals f2..f4 persist undiminished and the contact residual
    f1 drifts (more than doubles over two passes): the contact point leaves the
    track; with lambda = 1e3 all vanish."""
    from studies.hoop._profile import p

    drifting, stabilised = sampled["drift"][0], sampled["stabilised"][0]
    start, end = np.abs(drifting["residual"][:, 0]), np.abs(drifting["residual"][:, -1])
    assert end[0] > 2 * start[0]
    assert np.all(end[1:] > 0.99 * start[1:])
    off_track = drifting["contact_z"] - np.asarray(p(drifting["contact_x"], A, B))
    np.testing.assert_allclose(off_track, -drifting["residual"][0], rtol=1e-6, atol=1e-15)  # f1 = p(x_a) - z_a
    assert stabilised["max_residual"] < 1e-8
    assert np.max(np.abs(stabilised["residual"][:, -8:])) < 1e-8


def test_samples_change_no_other_output(sampled):
    """The sampled runs' other outputs are those of the same points solved
    without samples: RK2 takes the same steps (a sample is a side step from
    one), to rounding (its loops are compiled anew around the pauses: measured
    bit for bit in calls of 8 points, 9e-11 relative in one residual maximum
    of this 800,000-step run in calls of one); the adaptive solver's samples
    are read from the dense output of steps taken anyway: its outputs to the
    last bits of the state (bit for bit with jax 0.10; jax 0.12 compiles the
    program with samples otherwise: 4.4e-16 in a residual maximum of 3.4e-13,
    a residual being a difference of quantities of order one)."""
    out, status = sampled["drift"]
    plain, plain_status = run(**POINTS["drift"])
    assert status == plain_status
    for name, value in plain.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-9, atol=0, err_msg=name)
    out, status = sampled[(100.0, 0.0)]
    plain, plain_status = run(**POINTS[(100.0, 0.0)])
    assert status == plain_status
    for name, value in plain.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-12, atol=1e-15, err_msg=name)


def test_turning_points_do_not_blow_up(reference_case):
    """theta' passes through 0 at every turning point, where A(X) is singular: the
    controls stay finite and smooth (energy error stays tiny across 4 turns).
    The reference case's run (lambda = 1e3, h = 1e-5, 8 s), shared."""
    out, status = reference_case
    assert status == Status.SUCCESS and out["energy_error"] < 1e-8


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
    assert out["max_residual"] < 1e-8


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
    np.testing.assert_allclose(series["max_residual_f"], exact["max_residual_f"], rtol=1e-9, atol=1e-13)

"""Pingpong study against the closed forms of Gao Yunfeng 2021 (eqs. (2)-(8)).

The closed forms are computed in tests/pingpong_closed_form.py, independently of
the engine (slide end t* is a scalar root solved to machine precision there).
"""

import itertools

import diffrax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import SolverSettings
from engine.solve import evaluate
from studies.pingpong import STUDY
from studies.pingpong._model import SYSTEM, coefficients

import pingpong_closed_form as cf
from conftest import PINGPONG_DEFAULTS

TIGHT = SolverSettings(solver="Dopri8", rtol=1e-12, atol=1e-14)

SPIN = [0.0, 0.5, 1.0, 1.77, 2.5, 3.0]
DRAG = [0.0, 0.05, 0.1, 0.5, 2.0]
DELTA = [2e-5, 2e-4, 1e-3]


def spread():
    points = [dict(PINGPONG_DEFAULTS, spin_ratio=q, drag=b, rolling_resistance=d)
              for q, b, d in itertools.product(SPIN, DRAG, DELTA)]
    return {k: np.array([p[k] for p in points]) for k in PINGPONG_DEFAULTS}, points


@pytest.fixture(scope="module")
def engine_spread():
    columns, points = spread()
    return evaluate(STUDY, TIGHT, columns, batch_size=32), points


@pytest.mark.parametrize(
    "output, closed_form",
    [
        ("final_displacement", cf.final_displacement),
        ("slide_end_time", cf.slide_end_time),
        ("stop_time", cf.stop_time),
        ("roll_start_speed", cf.roll_start_speed),
        ("friction_margin", cf.friction_margin),
    ],
)
def test_outputs_match_closed_forms_over_a_spread(engine_spread, output, closed_form):
    result, points = engine_spread
    assert np.all(result.status == 1)
    expected = np.array([closed_form(p) for p in points])
    np.testing.assert_allclose(result.outputs[output], expected, rtol=0, atol=1e-10)


def test_reverses_flag_is_the_sign_of_the_roll_start_speed(engine_spread):
    result, points = engine_spread
    expected = np.array([cf.roll_start_speed(p) < 0 for p in points], float)
    np.testing.assert_array_equal(result.outputs["reverses"], expected)


def test_paper_case_theta0dot_minus_50(tmp_path):
    """Gao 2021 section 3: theta0dot = -50 rad/s (q = 1), beta = 0.1, delta = r/100."""
    columns = {k: np.array([v]) for k, v in PINGPONG_DEFAULTS.items()}
    assert -columns["spin_ratio"][0] * 1.0 / 0.02 == -50.0
    # The default solver settings of a sweep, not the tight ones.
    result = evaluate(STUDY, SolverSettings(rtol=1e-12, atol=1e-14), columns, batch_size=1)
    for output, closed_form in [("final_displacement", cf.final_displacement),
                                ("slide_end_time", cf.slide_end_time),
                                ("stop_time", cf.stop_time)]:
        assert abs(result.outputs[output][0] - closed_form(PINGPONG_DEFAULTS)) < 1e-10, output


@pytest.mark.parametrize("q, beta", [(0.5, 0.05), (1.0, 0.1), (2.5, 0.5)])
def test_phase1_trajectory_matches_closed_form(q, beta):
    """The sliding vector field integrated by diffrax against eq. (3), at 9 times."""
    p = dict(PINGPONG_DEFAULTS, spin_ratio=q, drag=beta)
    t_star = cf.slide_end_time(p)
    ts = jnp.linspace(0.0, t_star, 9)
    y0 = jnp.array([0.0, 1.0, 0.0, -q * 1.0 / 0.02, 0.0])
    slide = SYSTEM.modes[0].vector_field
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, a: slide(t, y, a)), diffrax.Dopri8(), 0.0, t_star, None, y0,
        args=coefficients({k: jnp.asarray(v) for k, v in p.items()}), saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-14),
    )
    expected = np.array([cf.phase1_state(float(t), p) for t in ts])
    np.testing.assert_allclose(np.asarray(sol.ys)[:, :4], expected, rtol=0, atol=1e-10)


def test_event_state_is_exact_not_interpolated():
    """The state at the slide->roll event equals the closed form to 1e-12.

    diffrax's own event root-find returns the step interpolant there, which with
    Dopri8's long steps is ~1e-8 off; the engine re-steps to the event instead.
    """
    p = dict(PINGPONG_DEFAULTS, spin_ratio=2.0)
    y0 = jnp.array([0.0, 1.0, 0.0, -2.0 / 0.02, 0.0])
    sol = SYSTEM.solve(y0, 0, coefficients({k: jnp.asarray(v) for k, v in p.items()}),
                       SolverSettings(solver="Dopri8", rtol=1e-10, atol=1e-12))
    t_star = cf.slide_end_time(p)
    assert abs(float(sol.event_t[0]) - t_star) < 1e-12
    np.testing.assert_allclose(np.asarray(sol.event_y[0])[:4], cf.phase1_state(t_star, p), rtol=0, atol=1e-12)

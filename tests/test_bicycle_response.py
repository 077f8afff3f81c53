"""Linear time response with a fall event (Meijaard et al. 2007, section 8).

Event times are checked against the exact solution x(t) = expm(A t) x0."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm
from scipy.optimize import brentq

from engine import SolverSettings, Status
from engine.solve import evaluate
from studies.bicycle import BENCHMARK, RESPONSE
from studies.bicycle._canonical import state_matrix
from studies.bicycle._response import FALLS, LEAN_EXTREMUM, SYSTEM

SETTINGS = SolverSettings(rtol=1e-11, atol=1e-13, t_max=5.0, max_segments=24)
X0 = np.array([0.0, 0.0, 0.5, 0.0])  # upright, lean rate 0.5 rad/s


def exact(A, t):
    return expm(A * t) @ X0


def zeros_of(f, t_max, samples=4000):
    ts = np.linspace(1e-9, t_max, samples)
    values = np.array([f(t) for t in ts])
    return [brentq(f, a, b, xtol=1e-15) for a, b, fa, fb in zip(ts, ts[1:], values, values[1:], strict=False)
            if fa * fb < 0]


def solve(v):
    A = state_matrix({k: jnp.asarray(x) for k, x in BENCHMARK.items()}, v)
    sol = SYSTEM.solve(jnp.asarray(X0), 0, {"A": A, "fall_angle": jnp.asarray(0.5)}, SETTINGS)
    return np.asarray(A), sol


def test_lean_extrema_match_the_exact_solution_at_4_6():
    A, sol = solve(4.6)
    assert sol.status == Status.SUCCESS  # self-stable: no fall, the horizon ends the run
    times = np.asarray(sol.event_t)[np.asarray(sol.event_code) == LEAN_EXTREMUM]
    expected = zeros_of(lambda t: exact(A, t)[2], 5.0)
    assert len(times) == len(expected) == 6
    np.testing.assert_allclose(times, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(sol.y), exact(A, 5.0), rtol=0, atol=1e-9)


def test_fall_event_matches_the_exact_solution_at_2():
    A, sol = solve(2.0)  # below the weave speed: the bicycle falls
    codes = np.asarray(sol.event_code)
    assert sol.status == Status.SUCCESS and codes[int(sol.num_events) - 1] == FALLS
    expected = zeros_of(lambda t: abs(exact(A, t)[0]) - 0.5, 5.0)[0]
    assert abs(float(sol.t) - expected) < 1e-9
    assert abs(abs(float(sol.y[0])) - 0.5) < 1e-12


def test_weave_period_matches_linear_prediction():
    """Section 8: the weave period at 4.6 m/s is 1.622 s by linear analysis."""
    columns = {k: np.array([x]) for k, x in RESPONSE.defaults.items()}
    result = evaluate(RESPONSE, SETTINGS, columns, batch_size=1)
    assert result.status[0] == Status.SUCCESS and np.isnan(result.outputs["fall_time"][0])
    linear = result.outputs["weave_period_linear"][0]
    assert round(linear, 3) == pytest.approx(1.622)
    assert abs(result.outputs["weave_period"][0] - linear) < 1e-3 * linear

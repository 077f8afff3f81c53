"""Unrolled explicit Runge-Kutta steps (engine.solve.tableau) against diffrax's own."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.solve.stepper import step as explicit_step
from engine.solve.tableau import Unrolled
from engine.sweep.settings import SOLVERS, SolverSettings

# A damped oscillator: y = (x, v), x'' = -x - 0.1 x'; x(0) = 1, v(0) = 0.
TERM = diffrax.ODETerm(lambda t, y, args: jnp.stack([y[1], -y[0] - 0.1 * y[1]]))
Y0 = jnp.array([1.0, 0.0])


def exact(t):
    w = np.sqrt(1 - 0.05**2)
    return np.exp(-0.05 * t) * (np.cos(w * t) + 0.05 / w * np.sin(w * t))


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_step_is_diffraxs_step_to_rounding(name):
    """The state, error estimate and dense output of one step agree with the
    wrapped solver's; its state after the step is the field at the end (for the
    next step's first stage) and where the step started."""
    solver = SolverSettings(solver=name).make_solver()
    unrolled = Unrolled(solver)
    theirs = solver.step(TERM, 0.0, 0.3, Y0, None, solver.init(TERM, 0.0, 0.3, Y0, None), False)
    y1, error, dense, state, result = unrolled.step(TERM, 0.0, 0.3, Y0, None, unrolled.init(TERM, 0.0, 0.3, Y0, None),
                                                    False)
    assert result == diffrax.RESULTS.successful
    np.testing.assert_allclose(y1, theirs[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(error, theirs[1], rtol=0, atol=1e-16)  # (a difference of near-equal sums)
    assert jax.tree.map(jnp.shape, dense) == jax.tree.map(jnp.shape, theirs[2])
    between = [cls(t0=0.0, t1=0.3, **info).evaluate(0.17) for cls, info in
               ((solver.interpolation_cls, theirs[2]), (unrolled.interpolation_cls, dense))]
    np.testing.assert_allclose(between[1], between[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(state.f, TERM.vf(0.3, y1, None), rtol=0, atol=1e-15)
    assert state.t_start == 0.0 and np.array_equal(state.y_start, Y0)


@pytest.mark.parametrize("name", ["Tsit5", "Dopri5", "Dopri8"])
def test_a_solve_takes_diffraxs_steps(name):
    """diffeqsolve with the unrolled solver takes the wrapped solver's steps and
    ends where it does, within solver tolerance of the closed form."""
    controller = diffrax.PIDController(rtol=1e-10, atol=1e-12)
    make = SolverSettings(solver=name).make_solver
    solutions = [diffrax.diffeqsolve(TERM, solver, 0.0, 5.0, None, Y0, stepsize_controller=controller)
                 for solver in (make(), Unrolled(make()))]
    assert int(solutions[0].stats["num_steps"]) == int(solutions[1].stats["num_steps"])
    np.testing.assert_allclose(solutions[1].ys[-1], solutions[0].ys[-1], rtol=0, atol=1e-12)
    assert abs(float(solutions[1].ys[-1][0]) - exact(5.0)) < 1e-9


def test_an_event_solve_returns_the_start_of_its_last_step():
    """Stopped at the step in which x crossed zero, the solve's solver state is
    that step's start: a step from there over the same span ends where the
    solve did (the re-steps that locate the crossing start there)."""
    solver = Unrolled(diffrax.Tsit5())
    sol = diffrax.diffeqsolve(TERM, solver, 0.0, 5.0, None, Y0, saveat=diffrax.SaveAt(t1=True, solver_state=True),
                              stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
                              event=diffrax.Event(lambda t, y, args, **kwargs: y[0]))
    start = sol.solver_state
    t_end, y_end = sol.ts[-1], sol.ys[-1]
    assert sol.result == diffrax.RESULTS.event_occurred
    assert float(start.t_start) < float(t_end) and float(start.y_start[0]) > 0 >= float(y_end[0])
    again = explicit_step(diffrax.Tsit5().tableau, lambda t, y: TERM.vf(t, y, None), start.t_start, t_end,
                          start.y_start, start.f_start)
    np.testing.assert_allclose(again.y1, y_end, rtol=0, atol=1e-15)


def test_settings_made_in_code_name_only_a_known_solver():
    """A sweep file's solver is checked when read; settings made in code are
    checked when their solver is made (diffrax has many other names)."""
    with pytest.raises(ValueError, match="'ODETerm' is not one of"):
        SolverSettings(solver="ODETerm").make_solver()

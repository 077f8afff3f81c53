"""`Unrolled`: the stepper's unrolled Runge-Kutta step (engine.solve.stepper)
as a diffrax solver, for `diffeqsolve`.

diffrax's explicit Runge-Kutta solvers run a step's stages in a loop
(`eqxi.while_loop`, one iteration a stage): under `jax.vmap` each stage is then
a lockstep loop iteration (six of the seven a Tsit5 step costs the batch).
"""

from typing import NamedTuple

import diffrax
import jax.numpy as jnp

from engine.solve.stepper import step as unrolled_step


class LastStep(NamedTuple):
    """`Unrolled`'s solver state: the vector field at the current time (the next
    step's first stage), and where the last accepted step started."""

    f: object
    t_start: object
    y_start: object
    f_start: object


class Unrolled(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """A diffrax explicit Runge-Kutta solver whose steps are the stepper's:
    diffeqsolve's own step loop, step-size control and event detection, with one
    loop iteration a step instead of one a stage. For ODE terms (the vector field
    times the step). The solver state (`LastStep`) keeps the vector field at the
    step's start, so no stage is recomputed after an accepted step, and the last
    accepted step's start: a solve that stops at an event returns it (SaveAt
    solver_state), and the event is located by re-steps from there. The dense
    output is the wrapped solver's interpolation of the same stages.
    """

    solver: diffrax.AbstractERK

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args):
        f0 = terms.vf(t0, y0, args)
        return LastStep(f0, t0, y0, f0)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        f0 = solver_state.f
        if made_jump is not False:  # a discontinuity at t0: the stored field is stale
            f0 = jnp.where(made_jump, terms.vf(t0, y0, args), f0)
        step = unrolled_step(self.solver.tableau, lambda t, y: terms.vf(t, y, args), t0, t1, y0, f0)
        h = t1 - t0
        dense_info = dict(y0=y0, y1=step.y1, k=jnp.stack([h * k for k in step.stages]))
        # (diffeqsolve keeps the old state when it rejects the step.)
        return step.y1, step.error, dense_info, LastStep(step.f1, t0, y0, f0), diffrax.RESULTS.successful

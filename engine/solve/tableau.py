"""Explicit Runge-Kutta steps of a diffrax solver's Butcher tableau, unrolled.

diffrax's explicit Runge-Kutta solvers run a step's stages in a loop
(`eqxi.while_loop`, one iteration a stage): under `jax.vmap` each stage is then
a lockstep loop iteration (six of the seven a Tsit5 step costs the batch), and
the generic stage loop indexes a stored array of stages. Here the stages are
unrolled, with the tableau's coefficients as constants: the same step, to
rounding, in straight-line code. `explicit_step` is the step; `Unrolled` is
the same step as a diffrax solver, for `diffeqsolve`.
"""

from typing import NamedTuple

import diffrax
import jax.numpy as jnp


class Step(NamedTuple):
    y1: object  # the state at the step's end
    error: object  # the embedded error estimate
    f1: object  # the vector field at (t1, y1)
    stages: list  # the vector field at every stage (the first is f0)


def explicit_step(tableau, field, t0, t1, y0, f0) -> Step:
    """One step of `tableau` (a diffrax ButcherTableau) from (t0, y0) to t1.

    `field(t, y)` is the vector field and f0 its value at (t0, y0) (the first
    stage). For a first-same-as-last tableau the vector field at the step's end
    is its last stage; otherwise it is evaluated. Any layout of states that
    broadcasts with the times works: a vector per point, or components by lanes.
    """
    h = t1 - t0

    def combine(weights, ks):
        # A dot product over the stages with non-zero weights, as diffrax's step
        # combines them: XLA:CPU rounds it alike whatever the vmap width, where a
        # chain of multiply-adds rounded differently at some widths (measured on a
        # Tsit5 step: width 3 against 1, 2, 4-7, 16, 17), and it ran ~1.6x faster.
        terms = [(float(w), k) for w, k in zip(weights, ks, strict=True) if w != 0]
        if not terms:
            return jnp.zeros_like(ks[0])
        weights = jnp.asarray([w for w, _ in terms], ks[0].dtype)
        return jnp.tensordot(weights, jnp.stack([k for _, k in terms]), axes=1)

    ks = [f0]
    for c, a in zip(tableau.c, tableau.a_lower, strict=True):
        ks.append(field(t0 + float(c) * h, y0 + h * combine(a, ks)))
    y1 = y0 + h * combine(tableau.b_sol, ks)
    error = h * combine(tableau.b_error, ks)
    f1 = ks[-1] if tableau.fsal else field(t1, y1)
    return Step(y1, error, f1, ks)


class LastStep(NamedTuple):
    """`Unrolled`'s solver state: the vector field at the current time (the next
    step's first stage), and where the last accepted step started."""

    f: object
    t_start: object
    y_start: object
    f_start: object


class Unrolled(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """A diffrax explicit Runge-Kutta solver whose steps are `explicit_step`s:
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
        step = explicit_step(self.solver.tableau, lambda t, y: terms.vf(t, y, args), t0, t1, y0, f0)
        h = t1 - t0
        dense_info = dict(y0=y0, y1=step.y1, k=jnp.stack([h * k for k in step.stages]))
        # (diffeqsolve keeps the old state when it rejects the step.)
        return step.y1, step.error, dense_info, LastStep(step.f1, t0, y0, f0), diffrax.RESULTS.successful

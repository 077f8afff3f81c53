"""Solver settings: the `[solver]` table of a sweep, as a hashable static object."""

import dataclasses

import diffrax
import jax.numpy as jnp

# Explicit solvers only: the studies are non-stiff, and the event re-step relies on
# `solver.step` being a single explicit Runge-Kutta step.
SOLVERS = {
    "Tsit5": diffrax.Tsit5,
    "Dopri5": diffrax.Dopri5,
    "Dopri8": diffrax.Dopri8,
    "Bosh3": diffrax.Bosh3,
    "Heun": diffrax.Heun,
}
DTYPES = ("float64", "float32")


@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """Integration settings shared by every point of a sweep.

    Frozen and hashable: it is a static argument of the compiled shard function.
    """

    solver: str = "Tsit5"
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 4096  # per segment of a hybrid solve
    max_segments: int = 8  # bound of the hybrid segment loop
    t_max: float = 1000.0  # horizon of one hybrid solve, in the study's time unit
    dtype: str = "float64"

    def make_solver(self):
        return SOLVERS[self.solver]()

    def make_controller(self):
        return diffrax.PIDController(rtol=self.rtol, atol=self.atol, norm=rms_norm)


def rms_norm(x):
    """Root mean square of the scaled error of one state vector: diffrax's
    default norm, written as the plain reduction the refilling lanes use too
    (diffrax's goes through a dot product), so both solve paths round alike."""
    return jnp.sqrt(jnp.mean(jnp.square(x)))

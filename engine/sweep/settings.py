"""Solver settings: the `[solver]` table of a sweep, as a hashable static object."""

import dataclasses

import jax.numpy as jnp
import numpy as np

# Explicit solvers only: the studies are non-stiff, and every solver takes its
# steps and event re-steps from the tableau (engine.solve.tableau) of a single
# explicit Runge-Kutta step. By their diffrax names: diffrax is imported where a
# solve is traced, not where a sweep is read (0.17 s of `rollsweep validate`).
SOLVERS = ("Tsit5", "Dopri5", "Dopri8", "Bosh3", "Heun")
DTYPES = ("float64", "float32")

# What a dtype can resolve. A relative tolerance within a few rounding errors of
# the state cannot be met: the step-size controller then shrinks the steps until
# rounding dominates the error estimate (float32, rtol 1e-10: a median of 4,359
# steps a point on the rolling ball, where float64 takes 32), and the result is
# no better. At RTOL_FLOOR epsilons, float32 took 1.4x float64's median steps at
# the same tolerances (11 and 8; rtol 1e-6, atol 1e-12: 25 and 14).
RTOL_FLOOR = 8
# atol applies near a zero of a state component, where small values are resolved
# but not the rounding left by the larger terms that cancelled there. float32 at
# rtol 1e-6: atol 1e-12, 1e-14, 1e-16 took 25, 30, 34 steps, atol 1e-20 no point
# finished in 4,096 (float64 at 1e-20: 22). The floor: epsilon squared
# (1.4e-14 for float32; 4.9e-32 for float64).
# A critical value is no more exact than the output it zeroes, whose rounding
# accumulates over the steps of the solve: float32's critical spin ratio of the
# rolling ball was 0.75e-6 to 1.5e-6 off float64's (1.77), where its own spacing
# is 1.2e-7. The floor: XTOL_FLOOR epsilons of the bracket's largest magnitude
# (2.3e-5 for float32 on [1, 3]; 4.3e-14 for float64).
XTOL_FLOOR = 64


def tolerance_floor(dtype: str, key: str, bracket=(1.0,)) -> float:
    """The smallest `key` ("rtol", "atol" or "xtol", the last on `bracket`) that
    `dtype` resolves (measured on the rolling ball: see above)."""
    info = np.finfo(dtype)
    if key == "rtol":
        return RTOL_FLOOR * float(info.eps)
    if key == "atol":
        return float(info.eps) ** 2
    return XTOL_FLOOR * float(info.eps) * max(abs(float(b)) for b in bracket)


# The loosest tolerances that still mean something (a sweep's are refused above
# them). The step-size controller accepts a step whose error estimate is within
# atol + rtol |y|: at rtol 0.1 a step may be 10% off, the loosest a stored
# result can be; beyond it the controller accepts steps of any size and every
# point "succeeds" with values of no accuracy (rtol = atol = 1e10 did). atol is
# absolute, in the units of the study's states, which are of order one here
# (metres, seconds, radians, dimensionless): at 1 the error of such a state is
# not controlled at all. A study with large states is controlled by rtol.
RTOL_CEILING = 0.1
ATOL_CEILING = 1.0
# A critical value's search stops once its bracket is narrower than xtol: at an
# xtol as wide as the bracket it stops before its first step, and an end of the
# bracket is its "root" (xtol = 10 on [0, 3]: 0.0, reported a success). At
# most a quarter of the bracket's width, the search narrows the bracket to a
# quarter of itself or less, two bisections' worth, before it may stop.
XTOL_SHARE = 4


def tolerance_ceiling(key: str, bracket=(0.0, 1.0)) -> float:
    """The largest `key` ("rtol", "atol" or "xtol", the last on `bracket`) that
    still means something (see above)."""
    if key == "rtol":
        return RTOL_CEILING
    if key == "atol":
        return ATOL_CEILING
    return (bracket[1] - bracket[0]) / XTOL_SHARE


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
    # The times a point's states are sampled at (a sweep's `[save] times`,
    # increasing, within [0, t_max]); none: no samples, and every solve is the
    # one it was before samples existed.
    save_times: tuple[float, ...] = ()

    def make_solver(self):
        import diffrax

        if self.solver not in SOLVERS:  # a sweep file's is checked when read; settings made in code are not
            raise ValueError(f"solver {self.solver!r} is not one of {sorted(SOLVERS)}")
        return getattr(diffrax, self.solver)()

    def make_controller(self):
        import diffrax

        # Sample times (save_times) are read from each step's dense output, not
        # stepped to: a step ending on every sample time took the rolling ball
        # 167 steps a point for 201 samples over 4 s, against 28 without, and
        # its dense output is within 2e-11 of the closed form at rtol 1e-10
        # (benchmarks/bench_trajectories.py).
        return diffrax.PIDController(rtol=self.rtol, atol=self.atol, norm=rms_norm)

    def __repr__(self) -> str:
        # A compiled program's key holds this repr: 10^4 sample times print as
        # their count and digest, and settings without samples print as they
        # did before samples existed.
        fields = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.name != "save_times"]
        if self.save_times:
            fields.append(f"save_times=<{len(self.save_times)} times {times_digest(self.save_times)[:16]}>")
        return f"SolverSettings({', '.join(fields)})"

    def asdict(self) -> dict:
        """The settings as a cube's config records them: the sample times
        apart (a sweep's `[save]`, recorded by their digest)."""
        values = dataclasses.asdict(self)
        del values["save_times"]
        return values


def times_digest(times) -> str:
    """The sample times' exact float64 bytes, hashed."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(times, dtype="<f8").tobytes()).hexdigest()


def rms_norm(x):
    """Root mean square of the scaled error of one state vector: diffrax's
    default norm, written as the plain reduction the refilling lanes use too
    (diffrax's goes through a dot product), so both solve paths round alike."""
    return jnp.sqrt(jnp.mean(jnp.square(x)))

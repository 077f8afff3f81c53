"""The one Runge-Kutta stepper of every solver that steps itself: a step of a
Butcher tableau, the step-size adapt and the first-step guess.

diffrax's explicit Runge-Kutta solvers run a step's stages in a loop (one
iteration a stage): under `jax.vmap` each stage is then a lockstep loop
iteration, and the generic stage loop indexes a stored array of stages. Here
the stages are unrolled, with the tableau's coefficients as constants: the
same step, to rounding, in straight-line code. The adapt and the first-step
guess are the arithmetic of diffrax's PIDController (integral control, as
SolverSettings.make_controller sets it up) and of its initial step selection.

The same code serves three layouts of a state:
- a vector per point (HybridSystem.solve, the Unrolled diffrax solver);
- a (components, lanes) array (the refilling lanes: engine.solve.lanes);
- a `Components` tuple of lane vectors (the fused kernel, whose arithmetic
  must be elementwise on lane vectors: engine.solve.kernel.system).
What differs is only how a step combines its stages (`dotted` or `chained`),
and how the lanes take a power (their bit-level root, `inverse_root`). The
first-step guess is diffrax's written out elementwise, for the kernel; the
lanes call diffrax's own (engine.solve.lanes.machine says why).
"""

import dataclasses
import functools
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Components(tuple):
    """A state as the tuple of its components (each a lane vector): `+` adds
    component by component, `*` scales every component by a scalar."""

    def __add__(self, other):
        return Components(a + b for a, b in zip(self, other, strict=True))

    def __rmul__(self, scalar):
        return Components(scalar * a for a in self)

    __mul__ = __rmul__


def rows(x) -> list:
    """A state's components: a Components' own, or the rows of a state array
    (static slices of its leading axis)."""
    return list(x) if isinstance(x, Components) else [x[i] for i in range(x.shape[0])]


def each(fn, *states):
    """fn applied to whole states (arrays broadcast), or component by component."""
    if isinstance(states[0], Components):
        return Components(fn(*parts) for parts in zip(*states, strict=True))
    return fn(*states)


def zeros(x):
    return Components(jnp.zeros_like(c) for c in x) if isinstance(x, Components) else jnp.zeros_like(x)


def rms_rows(x):
    """Root mean square over a state's components, squared and added component
    by component: elementwise, and on XLA:CPU fused with the arithmetic around
    it (a reduction over a short axis runs as a separate, slower kernel)."""
    parts = rows(x)
    return jnp.sqrt(functools.reduce(operator.add, [p * p for p in parts]) / len(parts))


def dotted(weights, ks):
    """Σ w k over the stages with non-zero weights, as a dot product, as diffrax's
    step combines them: XLA:CPU rounds it alike whatever the vmap width, where a
    chain of multiply-adds rounded differently at some widths (measured on a Tsit5
    step: width 3 against 1, 2, 4-7, 16, 17), and it ran ~1.6x faster."""
    terms = [(float(w), k) for w, k in zip(weights, ks, strict=True) if w != 0]
    if not terms:
        return zeros(ks[0])
    stacked = jnp.asarray([w for w, _ in terms], ks[0].dtype)
    return jnp.tensordot(stacked, jnp.stack([k for _, k in terms]), axes=1)


def chained(weights, ks):
    """Σ w k over the stages with non-zero weights, added in order: elementwise,
    for lane-last arrays (no stacking across lanes) and for Components."""
    terms = [float(w) * k for w, k in zip(weights, ks, strict=True) if w != 0]
    return functools.reduce(operator.add, terms) if terms else zeros(ks[0])


class Step(NamedTuple):
    y1: object  # the state at the step's end
    error: object  # the embedded error estimate
    f1: object  # the vector field at (t1, y1)
    stages: list  # the vector field at every stage (the first is f0)


def step(tableau, field, t0, t1, y0, f0, combine=dotted) -> Step:
    """One step of `tableau` (a diffrax ButcherTableau) from (t0, y0) to t1.

    `field(t, y)` is the vector field and f0 its value at (t0, y0) (the first
    stage). For a first-same-as-last tableau the vector field at the step's end
    is its last stage; otherwise it is evaluated.
    """
    h = t1 - t0
    ks = [f0]
    for c, a in zip(tableau.c, tableau.a_lower, strict=True):
        ks.append(field(t0 + float(c) * h, y0 + h * combine(a, ks)))
    y1 = y0 + h * combine(tableau.b_sol, ks)
    error = h * combine(tableau.b_error, ks)
    f1 = ks[-1] if tableau.fsal else field(t1, y1)
    return Step(y1, error, f1, ks)


def inverse_root(x, n: int):
    """x ** (-1 / n) for x >= 0 (to rounding; inf at 0, 0 at inf, NaN for NaN),
    from the exponent bits as a first guess and five Newton steps
    y <- y (n + 1 - x y^n) / n. The step-size factor needs it at every step of
    every lane: XLA:CPU's pow cost ~11 ns a lane there and exp(log(x) / n) ~6 ns,
    a fifth and a tenth of a whole rolling-ball step; this is multiplications."""
    a = -1.0 / n
    info = jnp.finfo(x.dtype)
    integer = jnp.int64 if info.bits == 64 else jnp.int32
    bits = jax.lax.bitcast_convert_type(x, integer).astype(x.dtype)
    # The bits of a positive float are ~ 2^nmant (log2(x) + bias): scale the log.
    guess = ((1 - a) * (info.maxexp - 1) * 2.0**info.nmant + a * bits).astype(integer)
    y = jax.lax.bitcast_convert_type(guess, x.dtype)
    for _ in range(5):  # from within ~10%: 1e-2, 1e-4, 1e-8, 1e-16, rounding
        y = y * (n + 1 - x * jax.lax.integer_pow(y, n)) / n
    return jnp.where(x == 0, jnp.inf, jnp.where(jnp.isinf(x), 0.0, y))


@dataclasses.dataclass(frozen=True)
class Controller:
    """diffrax's PIDController with integral control only (what
    SolverSettings.make_controller sets up, which needs no controller state),
    for a solver of error order `error_order`: its constants as floats."""

    rtol: float
    atol: float
    safety: float
    factormin: float
    factormax: float
    icoeff: float
    error_order: float

    @classmethod
    def of(cls, settings) -> "Controller":
        """The controller SolverSettings.make_controller makes, from its constants
        (engine.solve.solver_constants: where stored, no diffrax import)."""
        from engine.solve.solver_constants import solver_constants

        made = solver_constants(settings.solver)
        return cls(float(settings.rtol), float(settings.atol), made.safety, made.factormin, made.factormax,
                   made.icoeff, made.error_order)

    @property
    def root(self) -> int:
        """The factor (1 / error)^(icoeff / order) is a whole root: this one."""
        n = round(self.error_order / self.icoeff)
        assert n == self.error_order / self.icoeff
        return n

    def power(self, scaled_error):
        """(1 / scaled_error)^(icoeff / order), as diffrax takes it."""
        return jnp.power(scaled_error, -(self.icoeff / self.error_order))

    def adapt(self, t0, t1, y0, y1, y_error, power=None):
        """PIDController.adapt_step_size: accept the step [t0, t1]?, and the next
        step's (t0, t1). `power`: how the factor's power is taken (default:
        `power`; the lanes pass their bit-level root)."""
        power = power or self.power
        nan = functools.reduce(jnp.logical_or, [jnp.isnan(r) for r in rows(y1)])
        scale = each(lambda a, b: self.atol + jnp.maximum(jnp.abs(a), jnp.abs(jnp.where(nan, a, b))) * self.rtol,
                     y0, y1)
        scaled_error = rms_rows(each(operator.truediv, y_error, scale))
        keep = scaled_error < 1
        factor = jnp.clip(
            self.safety * power(scaled_error),
            min=jnp.where(keep, 1.0, self.factormin),
            max=jnp.where(keep, self.factormax, self.safety),
        )
        next_t0 = jnp.where(keep, t1, t0)
        return keep, next_t0, next_t0 + (t1 - t0) * factor

    def first_step(self, field, t0, y0, f0, horizon, rms=rms_rows):
        """diffrax's initial step-size guess (PIDController.init with dt0=None), as
        every segment of diffeqsolve starts, clipped to the horizon. `rms`: the
        norm of a scaled state."""
        scale = each(lambda y: self.atol + jnp.abs(y) * self.rtol, y0)
        d0 = rms(each(operator.truediv, y0, scale))
        d1 = rms(each(operator.truediv, f0, scale))
        small = (d0 < 1e-5) | (d1 < 1e-5)
        h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1, d1)))
        f1 = field(t0 + h0, y0 + h0 * f0)
        d2 = rms(each(lambda a, b, s: (b - a) / s, f0, f1, scale)) / h0
        max_d = jnp.maximum(d1, d2)
        h1 = jnp.where(max_d <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), jnp.power(0.01 / max_d, 1 / self.error_order))
        t1 = t0 + jnp.minimum(100 * h0, h1)
        return jnp.minimum(t1 - t0, horizon - t0)

"""The numbers a sweep's solver is made of, without importing diffrax where stored.

A sweep's solver is diffrax's (Tsit5, Dopri5, ...): the engine's own steppers
(the lanes, the fused kernel) take its Butcher tableau, its error order and the
PID controller's constants from diffrax's objects. The fused kernel's program
calls a generated kernel, so it cannot be exported (engine.solve.exported) and
is traced in every process; importing diffrax only to read these numbers cost
0.38 s of a warm 1M-point run's 2.96 s on one H200 (2026-11-27). So the first
process stores them in the cache folder, under the solver's name and diffrax's
version (JSON: a float's repr reads back bit for bit), and later ones read them.
The file's name also holds a digest of the code that makes them (this module
and engine/sweep/settings.py): a change there is a new file, never a stale one.
"""

import functools
import hashlib
import json
import pathlib
from typing import NamedTuple

import numpy as np

import engine.sweep.settings as settings_module
from engine._atomic_file import write_whole
from engine._jax_setup import cache_dir
from engine.study.source import package_version

# Version of the file's contents: a change makes every stored file stale.
FORMAT = 1


class Tableau(NamedTuple):
    """What engine.solve.stepper.step reads of a diffrax ButcherTableau."""

    c: np.ndarray
    a_lower: tuple[np.ndarray, ...]
    b_sol: np.ndarray
    b_error: np.ndarray
    fsal: bool


class SolverConstants(NamedTuple):
    tableau: Tableau
    error_order: float
    # diffrax.PIDController's defaults, as SolverSettings.make_controller makes it.
    safety: float
    factormin: float
    factormax: float
    icoeff: float


@functools.cache
def solver_constants(solver: str) -> SolverConstants:
    """The constants of diffrax's `solver` (a SolverSettings.solver name): read
    where stored, else taken from diffrax and stored."""
    path = _path(solver)
    stored = _read(path) if path is not None else None
    if stored is not None:
        return stored
    made = _from_diffrax(solver)
    if path is not None:
        try:
            write_whole(path, json.dumps(_as_json(made)).encode())
        except OSError:  # a read-only cache: taken from diffrax in every process
            pass
    return made


def _path(solver: str):
    folder, makers = cache_dir(), _makers_digest()
    if folder is None or makers is None:
        return None
    return folder / "traced" / f"solver-{solver}-diffrax-{package_version('diffrax')}-{FORMAT}-{makers}.json"


@functools.cache
def _makers_digest() -> str | None:
    """A digest of the code that makes the constants: this module and the
    settings' (None where they cannot be read: then nothing is stored)."""
    makers = (pathlib.Path(__file__), pathlib.Path(settings_module.__file__))
    try:
        return hashlib.sha256(b"".join(file.read_bytes() for file in makers)).hexdigest()[:16]
    except OSError:
        return None


def _from_diffrax(solver: str) -> SolverConstants:
    import diffrax

    settings = settings_module.SolverSettings(solver=solver)
    made, controller = settings.make_solver(), settings.make_controller()
    # The steppers implement the integral controller without step bounds alone.
    assert controller.pcoeff == controller.dcoeff == 0 and controller.dtmin is None and controller.dtmax is None
    t = made.tableau
    tableau = Tableau(np.asarray(t.c), tuple(np.asarray(a) for a in t.a_lower), np.asarray(t.b_sol),
                      np.asarray(t.b_error), bool(t.fsal))
    order = made.error_order(diffrax.ODETerm(lambda t, y, args: y))
    return SolverConstants(tableau, float(order),
                           *(float(getattr(controller, k)) for k in ("safety", "factormin", "factormax", "icoeff")))


def _as_json(constants: SolverConstants) -> dict:
    t = constants.tableau
    return {"tableau": {"c": t.c.tolist(), "a_lower": [a.tolist() for a in t.a_lower], "b_sol": t.b_sol.tolist(),
                        "b_error": t.b_error.tolist(), "fsal": t.fsal, "dtype": str(t.c.dtype)},
            **{k: getattr(constants, k) for k in SolverConstants._fields[1:]}}


def _read(path) -> SolverConstants | None:
    """The stored constants; None where missing, damaged or not of this shape."""
    try:
        data = json.loads(path.read_text())
        t = data["tableau"]
        dtype = np.dtype(t["dtype"])
        tableau = Tableau(np.asarray(t["c"], dtype), tuple(np.asarray(a, dtype) for a in t["a_lower"]),
                          np.asarray(t["b_sol"], dtype), np.asarray(t["b_error"], dtype), t["fsal"])
        constants = SolverConstants(tableau, *(float(data[k]) for k in SolverConstants._fields[1:]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return constants if _well_formed(tableau) else None


def _well_formed(t: Tableau) -> bool:
    """An explicit Runge-Kutta tableau of s + 1 stages: c and a_lower's rows of
    s, row i of i + 1 coefficients, b_sol and b_error of s + 1; float64."""
    stages = len(t.c)
    arrays = (t.c, *t.a_lower, t.b_sol, t.b_error)
    return (isinstance(t.fsal, bool) and all(a.dtype == np.float64 and a.ndim == 1 for a in arrays)
            and [len(a) for a in t.a_lower] == list(range(1, stages + 1))
            and len(t.b_sol) == len(t.b_error) == stages + 1)

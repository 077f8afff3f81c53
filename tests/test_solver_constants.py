"""The numbers a sweep's solver is made of (engine.solve.solver_constants):
diffrax's, bit for bit, stored by the first process and read by later ones,
which then trace the fused kernel without importing diffrax."""

import json

import diffrax
import numpy as np
import pytest
from test_kernel_c import pytestmark as needs_cc  # a C compiler to build the host kernel
from test_lazy_imports import fresh

from engine import SolverSettings
from engine.solve import solver_constants as module
from engine.solve.solver_constants import solver_constants
from engine.solve.stepper import Controller
from engine.sweep.settings import SOLVERS


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    solver_constants.cache_clear()
    yield tmp_path / "traced"
    solver_constants.cache_clear()


def _same(a, b) -> bool:
    ta, tb = a.tableau, b.tableau
    arrays = [(ta.c, tb.c), (ta.b_sol, tb.b_sol), (ta.b_error, tb.b_error), *zip(ta.a_lower, tb.a_lower, strict=True)]
    return (len(ta.a_lower) == len(tb.a_lower) and ta.fsal == tb.fsal and a[1:] == b[1:]
            and all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in arrays))


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_constants_are_diffraxs_and_read_back_bit_for_bit(solver, store):
    made = solver_constants(solver)
    diffraxs = getattr(diffrax, solver)()
    tableau = diffraxs.tableau
    for name in ("c", "b_sol", "b_error"):
        assert np.array_equal(getattr(made.tableau, name), getattr(tableau, name)), name
    assert all(np.array_equal(a, b) for a, b in zip(made.tableau.a_lower, tableau.a_lower, strict=True))
    assert made.tableau.fsal is tableau.fsal
    assert made.error_order == diffraxs.error_order(diffrax.ODETerm(lambda t, y, args: y))
    pid = SolverSettings(solver=solver).make_controller()
    assert (made.safety, made.factormin, made.factormax, made.icoeff) == (pid.safety, pid.factormin, pid.factormax,
                                                                          pid.icoeff)
    (entry,) = store.glob(f"solver-{solver}-*.json")
    solver_constants.cache_clear()
    assert _same(solver_constants(solver), made)  # read from the file this time
    assert _same(module._read(entry), made)


def test_a_damaged_or_foreign_file_is_made_again(store, monkeypatch):
    made = solver_constants("Tsit5")
    (entry,) = store.glob("solver-Tsit5-*.json")
    stored = json.loads(entry.read_text())
    short_row = json.loads(json.dumps(stored))
    short_row["tableau"]["a_lower"][2] = short_row["tableau"]["a_lower"][2][:-1]
    for damage in ("not json", "[1]", json.dumps({"tableau": {}}), json.dumps(short_row),
                   json.dumps(stored | {"tableau": stored["tableau"] | {"dtype": "float32"}})):
        entry.write_text(damage)
        solver_constants.cache_clear()
        assert _same(solver_constants("Tsit5"), made), damage
        assert module._read(entry) is not None  # written again, whole


def test_the_controller_is_the_settings(store):
    settings = SolverSettings(rtol=1e-9, atol=1e-11)
    controller = Controller.of(settings)
    assert (controller.rtol, controller.atol) == (1e-9, 1e-11) and controller.error_order == 5.0


@needs_cc
def test_a_later_process_traces_the_fused_kernel_without_diffrax(tmp_path):
    """The fused kernel's program on a GPU is traced in every process (it calls
    the generated kernel: not exported), as is the host backend's, its twin
    here; the second process's trace imports no diffrax (0.36 s of a 0.94 s
    warm fused evaluate of 1,000 points on 2 CPU cores)."""
    code = """
        import os, sys
        os.environ["ROLLSWEEP_KERNEL_BACKEND"] = "host"  # not exported: traced in every process
        import numpy as np
        from engine import SolverSettings
        from engine.solve import evaluate, make_plan
        from studies.pingpong import STUDY
        columns = {p.name: np.full(64, p.default) for p in STUDY.parameters}
        result = evaluate(STUDY, SolverSettings(), columns, plan=make_plan(STUDY, solver="fused", batch=64))
        assert np.all(np.isfinite(result.outputs["final_displacement"]))
        print(sorted({m.partition(".")[0] for m in sys.modules} & {"diffrax", "optimistix", "lineax"}))
        """
    outs = [fresh(code, tmp_path=tmp_path).splitlines()[-1] for _ in range(2)]
    assert "diffrax" in outs[0] and outs[1] == "[]", outs

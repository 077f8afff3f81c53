"""Cross-check against an independent implementation: the `bicycleparameters`
package (Moore et al.), for every parameter set it ships that maps onto the
benchmark parameters. Optional: skipped when the package is absent (CI installs
it through the `crosscheck` extra)."""

import copy
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from engine import SolverSettings
from engine.solve import evaluate
from studies.bicycle import STUDY
from studies.bicycle._canonical import canonical_matrices
from studies.bicycle._parameters import DESIGN_NAMES

bp = pytest.importorskip("bicycleparameters", reason="bicycleparameters not installed (pip install '.[crosscheck]')")
from bicycleparameters import io as bp_io  # noqa: E402
from bicycleparameters.bicycle import ab_matrix, benchmark_par_to_canonical  # noqa: E402

PACKAGE = pathlib.Path(bp.__file__).parent


def shipped_parameter_sets():
    """Every shipped benchmark-parameter file whose keys cover our 26 names."""
    found = {}
    for path in sorted(PACKAGE.glob("app-data/bicycles/*/Parameters/*Benchmark.txt")):
        loaded = bp_io.load_parameter_text_file(str(path))
        values = {k: float(getattr(v, "nominal_value", v)) for k, v in loaded.items()}
        if all(k in values for k in DESIGN_NAMES) and values["rR"] > 0 and values["rF"] > 0:
            found[path.parent.parent.name] = {k: values[k] for k in DESIGN_NAMES}
    return found


SETS = shipped_parameter_sets()
SPEEDS = np.array([0.5, 2.0, 4.0, 6.0, 9.0])


def test_every_shipped_set_was_found():
    assert len(SETS) >= 8, sorted(SETS)


@pytest.mark.parametrize("name", sorted(SETS))
def test_canonical_matrices_and_eigenvalues_agree(name):
    par = SETS[name]
    theirs = [np.asarray(x, float) for x in benchmark_par_to_canonical(copy.copy(par))]  # it mutates its input
    ours = canonical_matrices({k: jnp.asarray(v) for k, v in par.items()})
    for label, a, b in zip(("M", "C1", "K0", "K2"), ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12, err_msg=f"{name} {label}")

    columns = {k: np.full(SPEEDS.size, v) for k, v in par.items()} | {"v": SPEEDS, "max_speed": np.full(5, 10.0)}
    result = evaluate(STUDY, SolverSettings(), columns, batch_size=8, outputs=("eigenvalue_real", "eigenvalue_imag"))
    for i, v in enumerate(SPEEDS):
        A, _ = ab_matrix(*theirs, v, par["g"])
        expected = list(np.linalg.eigvals(A))
        got = result.outputs["eigenvalue_real"][i] + 1j * result.outputs["eigenvalue_imag"][i]
        for root in got:  # equal as multisets
            j = int(np.argmin(np.abs(np.array(expected) - root)))
            assert abs(expected.pop(j) - root) < 1e-9 * (1 + abs(root)), (name, v)

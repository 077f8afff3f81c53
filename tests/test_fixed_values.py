"""A point's results are bitwise the same whether its sweep fixes a parameter
(a shard passes it as a broadcast view, which engine.solve.evaluate puts on
the device once) or sweeps it (a column): they depend on the point's own
parameters alone, not on the layout of the sweep that holds it. Passing a
fixed parameter as one value (0-d) would break this: the bicycle's
eigenvalues then differ in the last bit."""

import numpy as np
import pytest

from engine import SolverSettings, Status
from engine.solve import evaluate
from engine.study.interface import load_study

# Per study: the parameters that vary from point to point (every other one is
# fixed at its default), values inside their allowed ranges.
VARIED = {
    "rebound_regime": {"spin_ratio": [-1.0, -0.3, 0.5, 1.0], "incidence_angle": [0.0, 10.0, 45.0, 89.9]},
    "bicycle": {"v": [0.0, 4.3, 6.1, 10.0]},
    "pingpong": {"friction": [0.05, 0.1, 0.2, 0.4]},
}
SLOW = {"hoop": {"a": [0.1, 0.2]}, "rebound_landing": {"elevation": [-25.0, 0.0, 15.0, 5.0]}}


def _params(study, varied, fixed_as_views):
    n = len(next(iter(varied.values())))
    params = {k: np.asarray(v, float) for k, v in varied.items()}
    for p in study.parameters:
        if p.name not in params:
            value = np.float64(p.default)
            # A broadcast view is how a shard passes a fixed parameter; a
            # column of copies is how it passes an axis.
            params[p.name] = np.broadcast_to(value, (n,)) if fixed_as_views else np.full(n, value)
    return params


def _results_identical(name, varied):
    study = load_study(name)
    settings = SolverSettings()
    fixed, columns = (evaluate(study, settings, _params(study, varied, views), batch_size=8, solver="vmapped")
                      for views in (True, False))
    assert fixed.outputs.keys() == columns.outputs.keys()
    for k in fixed.outputs:
        assert fixed.outputs[k].tobytes() == columns.outputs[k].tobytes(), f"{name}: output {k} differs"
    for counter in ("status", "num_steps", "num_events"):
        assert np.array_equal(getattr(fixed, counter), getattr(columns, counter)), f"{name}: {counter} differs"
    return fixed


@pytest.mark.parametrize("name", sorted(VARIED))
def test_a_fixed_parameter_gives_the_results_of_a_column_of_it(name):
    result = _results_identical(name, VARIED[name])
    assert np.any(result.status == Status.SUCCESS), f"{name}: no point solved, nothing compared"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_a_fixed_parameter_gives_the_results_of_a_column_of_it_slow(name):
    result = _results_identical(name, SLOW[name])
    assert np.any(result.status == Status.SUCCESS)

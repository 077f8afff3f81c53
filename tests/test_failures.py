"""Failed points are data: a status code and NaN outputs, never a number."""

import numpy as np

from engine import SolverSettings, Status
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.solve import evaluate
from engine.sweep.config import load_sweep
from studies.pingpong import STUDY

import pingpong_closed_form as cf
from conftest import PINGPONG_DEFAULTS


def test_tiny_max_steps_fails_only_the_long_points(small_sweep):
    # Rolling lasts ~3 s at delta = 2e-4 but ~25 s at 1e-5: with 12 steps per
    # segment only the long rolls run out of steps.
    path = small_sweep(
        axes="rolling_resistance = { values = [1e-5, 2e-4, 1e-3] }\nspin_ratio = { values = [0.5, 1.0, 2.0] }",
        extra="max_steps = 12",
    )
    sweep = load_sweep(path)
    run(sweep, progress=False)
    ds = open_cube(sweep.out).load()
    status = ds["status"].values
    failed = status == Status.MAX_STEPS
    assert failed.any() and (status == Status.SUCCESS).any()
    assert set(np.unique(status)) <= {Status.SUCCESS, Status.MAX_STEPS}
    for name in ("final_displacement", "stop_time", "slide_end_time", "friction_margin"):
        assert np.all(np.isnan(ds[name].values[failed])), name
    ok = np.argwhere(status == Status.SUCCESS)
    for i, j in ok:
        p = dict(PINGPONG_DEFAULTS, rolling_resistance=float(ds.rolling_resistance[i]),
                 spin_ratio=float(ds.spin_ratio[j]))
        assert abs(ds["final_displacement"].values[i, j] - cf.final_displacement(p)) < 1e-8


def test_out_of_range_point_is_flagged_and_does_not_poison_its_batch():
    q = np.array([1.0, -5.0, 2.0])  # -5 is outside spin_ratio's allowed [0, 20]
    columns = {k: np.full(3, v) for k, v in PINGPONG_DEFAULTS.items()} | {"spin_ratio": q}
    result = evaluate(STUDY, SolverSettings(rtol=1e-12, atol=1e-14), columns, batch_size=4)
    assert list(result.status) == [Status.SUCCESS, Status.OUT_OF_RANGE, Status.SUCCESS]
    assert np.isnan(result.outputs["final_displacement"][1])
    for i in (0, 2):
        p = dict(PINGPONG_DEFAULTS, spin_ratio=q[i])
        assert abs(result.outputs["final_displacement"][i] - cf.final_displacement(p)) < 1e-10


def test_horizon_before_the_stop_is_event_not_found():
    columns = {k: np.array([v]) for k, v in PINGPONG_DEFAULTS.items()}
    result = evaluate(STUDY, SolverSettings(t_max=1.0), columns, batch_size=1)  # the ball stops at 2.69 s
    assert result.status[0] == Status.EVENT_NOT_FOUND
    assert np.isnan(result.outputs["final_displacement"][0])

"""float32 sweeps are honest: tolerances finer than the dtype resolves are refused
before anything runs (naming the key and the floor), and a float32 cube stores
float32 values. At the floor, the rolling ball's float32 solve takes about as many
steps as float64's and its critical spin ratio is within the stated xtol."""

import numpy as np
import pytest

from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.sweep.config import ConfigError, load_sweep, parse_sweep
from engine.sweep.settings import tolerance_floor

from conftest import sweep_file

EPS32 = float(np.finfo(np.float32).eps)


def pingpong(solver="", critical="", out="/tmp/never-written.zarr"):
    return f"""
study = "pingpong"
[parameters]
drag = 0.1
rolling_resistance = 0.0002
[axes]
spin_ratio = {{ linspace = [0.2, 3.0, 401] }}
[solver]
{solver}
[critical]
output = "final_displacement"
axis = "spin_ratio"
bracket = [1.0, 3.0]
{critical}
[run]
shard_size = 2000
executor = "inline"
out = "{out}"
"""


@pytest.mark.parametrize("solver, critical, key, floor, origin", [
    ('dtype = "float32"', "", "solver.rtol", "9.54e-07", "1e-10 (the default)"),
    ('dtype = "float32"\nrtol = 1e-6', "", "critical.xtol", "2.29e-05", "1e-12 (the default)"),
    ('dtype = "float32"\nrtol = 1e-7', "xtol = 1e-4", "solver.rtol", "9.54e-07", "1e-07 is below"),
    ('dtype = "float32"\nrtol = 1e-6\natol = 1e-20', "xtol = 1e-4", "solver.atol", "1.42e-14", "1e-20 is below"),
    ("rtol = 1e-16", "", "solver.rtol", "1.78e-15", "1e-16 is below"),
    ("", "xtol = 1e-14", "critical.xtol", "4.26e-14", "1e-14 is below"),
])
def test_tolerances_below_the_dtype_are_refused(solver, critical, key, floor, origin):
    with pytest.raises(ConfigError) as err:
        parse_sweep(pingpong(solver, critical), file="s.toml")
    assert err.value.key == key
    assert f"floor {floor}" in err.value.reason and origin in str(err.value), err.value
    if "float32" in solver:
        assert 'or dtype = "float64"' in err.value.reason


def test_floors_follow_the_dtype():
    assert tolerance_floor("float32", "rtol") == 8 * EPS32
    assert tolerance_floor("float32", "xtol", (1.0, -3.0)) == 64 * EPS32 * 3
    assert tolerance_floor("float32", "atol") == EPS32**2
    assert tolerance_floor("float64", "rtol") < 1e-14 and tolerance_floor("float64", "atol") < 1e-30
    # Accepted as they are: float64 at the engine's defaults, float32 at its floors.
    parse_sweep(pingpong(), file="s.toml")
    parse_sweep(pingpong('dtype = "float32"\nrtol = 1e-6', "xtol = 3e-5"), file="s.toml")


def test_a_float32_cube_stores_float32(tmp_path):
    config = sweep_file(tmp_path, f"""
        study = "rebound_regime"
        [axes]
        spin_ratio = {{ linspace = [-1.0, 1.0, 5] }}
        incidence_angle = {{ linspace = [0.0, 80.0, 4] }}
        [solver]
        dtype = "float32"
        rtol = 1e-6
        [run]
        executor = "inline"
        out = "{tmp_path / 'f32.zarr'}"
        """)
    sweep = load_sweep(config)
    run(sweep, progress=False)
    cube = open_cube(sweep.out)
    assert cube.attrs["dtype"] == "float32"
    for name in sweep.outputs:
        assert cube[name].dtype == np.float32, name
    solved = cube.status.values == 1
    assert solved.any() and np.isfinite(cube[sweep.outputs[0]].values[solved]).all()


@pytest.mark.slow
def test_float32_rolling_ball_at_its_floor(tmp_path):
    """float32 at its reachable tolerances against float64 at the same ones: the
    median steps within 2x; the critical spin ratio within the stated xtol of
    float64's at the engine's default tolerances (1e-10, 1e-12)."""
    floor = tolerance_floor("float32", "rtol")
    tolerances = f"rtol = {floor!r}\natol = {floor!r}"
    xtol = 3e-5
    cubes = {}
    for name, solver, critical in [
        ("f32", f'dtype = "float32"\n{tolerances}', f"xtol = {xtol}"),
        ("f64_same", tolerances, ""),
        ("f64", "", ""),
    ]:
        sweep = load_sweep(sweep_file(tmp_path, pingpong(solver, critical, tmp_path / f"{name}.zarr"), f"{name}.toml"))
        run(sweep, progress=False)
        cubes[name] = open_cube(sweep.out).load()
    f32, f64 = cubes["f32"], cubes["f64"]
    assert (f32.status.values == 1).all()
    assert f32.final_displacement.dtype == np.float32
    steps32, steps64 = np.median(f32.num_steps.values), np.median(cubes["f64_same"].num_steps.values)
    assert steps32 <= 2 * steps64, (steps32, steps64)
    assert int(f32.critical_spin_ratio_status) == 1
    error = abs(float(f32.critical_spin_ratio) - float(f64.critical_spin_ratio))
    assert error <= xtol, error


def test_a_root_whose_bracket_did_not_reach_xtol_is_not_success(monkeypatch):
    """A search whose bracket did not narrow to xtol within its iterations is
    NOT_CONVERGED, never SUCCESS; a bracket without a sign change is NO_ROOT."""
    from engine.solve import critical
    from engine.study.status import Status

    def step(x, index):  # sign change at 1.3 for problem 0; none for problem 1
        return np.where(index == 0, np.sign(x - 1.3), 1.0), np.full(len(x), Status.SUCCESS, np.int8)

    roots, status = critical.find_critical(step, (1.0, 3.0), 0.0, 1e-9, 2)
    assert list(status) == [Status.SUCCESS, Status.NO_ROOT] and abs(roots[0] - 1.3) <= 1e-9
    monkeypatch.setattr(critical, "MAX_ITERATIONS", 5)  # too few to narrow [1, 3] to 1e-9
    roots, status = critical.find_critical(step, (1.0, 3.0), 0.0, 1e-9, 2)
    assert list(status) == [Status.NOT_CONVERGED, Status.NO_ROOT] and np.isnan(roots).all()

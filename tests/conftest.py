import pathlib
import textwrap

import numpy as np
import pytest

from engine._jax_setup import configure

configure()  # float64 and the compile cache, as in every solving process

PINGPONG_DEFAULTS = dict(
    mass=0.003, radius=0.02, gravity=9.8, friction=0.3,
    rolling_resistance=0.0002, drag=0.1, initial_speed=1.0, spin_ratio=1.0,
)


def sweep_file(folder: pathlib.Path, body: str, name="sweep.toml") -> pathlib.Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def assert_rolling_ball_closed_form(columns, result, output, closed_form):
    """Every point of a rolling-ball solve a success, and its `output` the closed
    form's (tests/pingpong_closed_form.py) to the solver's accuracy (rtol 1e-10
    by default)."""
    np.testing.assert_array_equal(result.status, 1)  # engine.Status.SUCCESS
    points = [{k: columns[k][i] for k in PINGPONG_DEFAULTS} for i in range(len(result.status))]
    expected = np.array([closed_form(p) for p in points])
    np.testing.assert_allclose(result.outputs[output], expected, rtol=0, atol=1e-9)


def cubes_identical(a, b) -> bool:
    """Bitwise equality of every variable and coordinate of two loaded cubes."""
    names = set(a.variables) | set(b.variables)
    return all(
        name in a.variables and name in b.variables
        and np.array_equal(a[name].values, b[name].values, equal_nan=a[name].dtype.kind == "f")
        for name in names
    )


@pytest.fixture
def small_sweep(tmp_path):
    """A small pingpong sweep file whose cube goes to tmp_path/cube.zarr."""
    def make(axes='spin_ratio = { linspace = [0.0, 3.0, 23] }', extra="", shard_size=5):
        return sweep_file(tmp_path, f"""
            study = "pingpong"
            [axes]
            {axes}
            [solver]
            rtol = 1e-10
            atol = 1e-12
            {extra}
            [run]
            shard_size = {shard_size}
            batch_size = 8
            executor = "inline"
            out = "{tmp_path / 'cube.zarr'}"
            """)
    return make

"""Logspace axes are drawn on log scales in the standard figures."""

import matplotlib
import numpy as np
import pytest
import xarray as xr

from engine.cube.plot import log_spaced
from studies.pingpong._figures import figures as pingpong_figures
from studies.rebound._figures import regime_figures

matplotlib.use("Agg")


def cube(axes: dict, variables, config: str | None) -> xr.Dataset:
    """A dataset shaped like a cube: `variables` over every axis, the sweep text in its attrs."""
    shape = tuple(len(v) for v in axes.values())
    rng = np.random.default_rng(0)
    ds = xr.Dataset({name: (tuple(axes), rng.normal(size=shape)) for name in variables}, coords=axes)
    if config is not None:
        ds.attrs["config"] = config
    return ds


def spin_cube(kind: str, with_config=True) -> xr.Dataset:
    values = {"logspace": np.logspace(-2, 0, 7), "linspace": np.linspace(0.01, 1.0, 7)}[kind]
    config = f'study = "pingpong"\n[axes]\nspin_ratio = {{ {kind} = [0, 1, 7] }}\n' if with_config else None
    return cube({"spin_ratio": values}, ["final_displacement"], config)


@pytest.mark.parametrize("kind, with_config, expected", [
    ("logspace", True, True), ("linspace", True, False),  # as the sweep file says
    ("logspace", False, True), ("linspace", False, False),  # from the values' spacing
])
def test_log_spacing_from_the_sweep_or_the_values(kind, with_config, expected):
    assert log_spaced(spin_cube(kind, with_config), "spin_ratio") is expected


def test_values_axes_and_odd_coordinates():
    config = 'study = "x"\n[axes]\na = { values = [1e-3, 1e-2, 1e-1] }\nb = { values = [1, 2, 3] }\n'
    ds = cube({"a": [1e-3, 1e-2, 1e-1], "b": [1.0, 2.0, 3.0]}, ["y"], config)
    assert log_spaced(ds, "a") and not log_spaced(ds, "b")
    assert not log_spaced(cube({"c": [-1.0, -2.0, -4.0]}, ["y"], None), "c")  # not positive
    assert not log_spaced(cube({"c": [1.0, 2.0]}, ["y"], None), "c")  # too few to tell
    assert not log_spaced(cube({"c": [5.0, 5.0, 5.0]}, ["y"], None), "c")


@pytest.mark.parametrize("kind, scale", [("logspace", "log"), ("linspace", "linear")])
def test_pingpong_final_displacement_figure(kind, scale):
    fig = pingpong_figures(spin_cube(kind))["final_displacement"]
    assert fig.axes[0].get_xscale() == scale


@pytest.mark.parametrize("kind, scale", [("logspace", "log"), ("linspace", "linear")])
def test_pingpong_critical_map_follows_the_axis_not_its_name(kind, scale):
    values = np.logspace(-5, -3, 4) if kind == "logspace" else np.linspace(1e-5, 1e-3, 4)
    config = f'study = "pingpong"\n[axes]\nrolling_resistance = {{ {kind} = [0, 1, 4] }}\n'
    axes = {"friction": np.linspace(0.1, 0.3, 3), "rolling_resistance": values, "spin_ratio": np.linspace(1, 3, 5)}
    ds = cube(axes, ["final_displacement"], config)
    ds["critical_spin_ratio"] = ds["final_displacement"].isel(spin_ratio=0, drop=True)
    fig = pingpong_figures(ds)["critical_spin_ratio"]
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == (scale, "linear")


def test_rebound_regime_map_on_a_logspace_spin_axis():
    config = 'study = "rebound_regime"\n[axes]\nincidence_angle = { linspace = [5, 80, 5] }\n' \
             'spin_ratio = { logspace = [-2, 0, 4] }\n'
    ds = cube({"incidence_angle": np.linspace(5, 80, 5), "spin_ratio": np.logspace(-2, 0, 4)},
              ["out_angle", "out_spin_ratio", "critical_angle"], config)
    fig = regime_figures(ds)["regime"]
    assert [(a.get_xscale(), a.get_yscale()) for a in fig.axes[:2]] == [("linear", "log")] * 2

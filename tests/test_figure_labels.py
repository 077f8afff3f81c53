"""Figures fit for a paper: every axis, colour bar and legend of the shipped
studies' standard figures says what it shows in the papers' notation
(mathtext), never a raw identifier, an ASCII-spelled Greek letter or "[1]";
the cube's attributes label xarray's own `.plot()` the same way.

Each figure is drawn from a cube's real structure (Cube.create on the study's
demo sweeps: attributes as a run writes them, nothing solved), its variables
filled with made-up values."""

import re

import matplotlib
import numpy as np
import pytest
import xarray as xr
from matplotlib.mathtext import MathTextParser

from engine.cube.store import Cube
from engine.study.interface import Output, Parameter, load_study
from engine.sweep.config import parse_sweep

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STUDIES = ("pingpong", "bicycle", "bicycle_response", "hoop", "rebound", "rebound_regime", "rebound_table1",
           "rebound_landing")
# ASCII-spelled Greek letters (outside mathtext), and ASCII symbols such as thetadot0.
GREEK = re.compile(r"\b(alpha|beta|gamma|delta|epsilon|theta\w*|lambda|lam|mu|nu|pi|rho|sigma|phi|psi|omega)\b")
MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")
HOOP_TRANSIENT = """study = "hoop"
outputs = ["max_residual", "residual", "contact_x", "contact_z"]
[parameters]
duration = 1.0
[axes]
stabilization = { values = [0.0, 10.0] }
[save]
times = { linspace = [0.0, 1.0, 11] }
"""


def _made_up(ds: xr.Dataset) -> xr.Dataset:
    """The cube with plausible values where a run would have written them."""
    rng = np.random.default_rng(0)
    ds = ds.load()
    for name, da in ds.data_vars.items():
        if name == "outcome":
            values = rng.integers(1, 5, da.shape)
        elif name in ("lands_in", "regime", "reverses", "status") or name.endswith("_status"):
            values = rng.integers(0, 2, da.shape) + (name == "status")
        else:
            values = rng.uniform(0.1, 2.0, da.shape)
        ds[name] = da.copy(data=values.astype(da.dtype))
    return ds


def _cube(tmp_path, study: str, name: str, text: str) -> xr.Dataset:
    sweep = parse_sweep(text, out=str(tmp_path / f"{study}_{name}.zarr"))
    cube = Cube.create(sweep, sweep.out, devices="cpu:cpu")
    ds = _made_up(xr.open_zarr(cube.path, consolidated=True))
    if sweep.sensitivity is not None:  # made-up indices, as an analysis writes them (engine.cube.sensitivity)
        rng = np.random.default_rng(1)
        shape = (len(sweep.sensitivity.outputs), len(sweep.samples.parameters))
        ds = ds.assign_coords(output=list(sweep.sensitivity.outputs), parameter=list(sweep.samples.parameters))
        for name in sweep.sensitivity.index_names():
            ds[name] = (("output", "parameter"), rng.uniform(0.0, 0.5, shape))
        ds.attrs["sensitivity_method"] = sweep.sensitivity.method
    return ds


def _cases():
    for name in STUDIES:
        for demo, text in sorted(load_study(name).demo_configs.items()):
            yield pytest.param(name, demo, text, id=f"{name}-{demo}")
    yield pytest.param("hoop", "transient", HOOP_TRANSIENT, id="hoop-transient")


def _texts(fig) -> list[tuple[str, str]]:
    """(where, text) of every axis label, colour-bar label and legend entry of `fig`."""
    found = []
    for k, ax in enumerate(fig.axes):
        for where, text in (("xlabel", ax.get_xlabel()), ("ylabel", ax.get_ylabel())):
            if text:
                found.append((f"axes {k} {where}", text))
        legend = ax.get_legend()
        if legend is not None:
            found += [(f"axes {k} legend", t.get_text()) for t in legend.get_texts()]
            if legend.get_title().get_text():
                found.append((f"axes {k} legend title", legend.get_title().get_text()))
    return found


def _problems(text: str) -> list[str]:
    """What makes `text` unfit for a paper's figure."""
    problems = []
    parser = MathTextParser("path")
    for line in text.split("\n"):
        if line.count("$") - line.count(r"\$") != 0 and (line.count("$") - line.count(r"\$")) % 2:
            problems.append("an unmatched $")
        for math in MATH.findall(line):
            try:
                parser.parse(math)
            except ValueError as err:
                problems.append(f"mathtext does not parse: {err}")
    plain = MATH.sub(" ", text)
    if re.search(r"\w_\w", plain):
        problems.append("a raw identifier")
    if "[1]" in text:
        problems.append("[1] for a dimensionless quantity")
    if GREEK.search(plain):
        problems.append(f"Greek spelled out: {GREEK.search(plain).group(0)!r}")
    return problems


def _check(fig) -> None:
    bad = [f"{where}: {text!r}: {p}" for where, text in _texts(fig) for p in _problems(text)]
    assert not bad, "\n".join(bad)
    fig.canvas.draw()  # every text rendered: mathtext and all


@pytest.mark.parametrize("study, demo, text", list(_cases()))
def test_standard_figures_are_labelled_for_a_paper(study, demo, text, tmp_path):
    from engine.cube.sensitivity_figure import cube_figures

    ds = _cube(tmp_path, study, demo, text)
    figures = cube_figures(ds, load_study(study))  # as plot draws them: a sensitivity cube's indices too
    assert figures, f"no standard figure of {study} for its demo {demo}"
    try:
        for fig in figures.values():
            assert any(where.endswith(("xlabel", "ylabel")) for where, _ in _texts(fig))
            _check(fig)
            if study == "rebound_landing":  # the outcome's colours in a legend, not the title
                legend = fig.axes[0].get_legend()
                assert legend is not None
                assert {t.get_text() for t in legend.get_texts()} >= {"in (far half)", "net fault"}
                assert "green" not in fig.axes[0].get_title()
            if study == "hoop" and demo == "hoop_residuals":  # its reference lines in the legend
                legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
                assert any("7\\times10^{-9}" in t for t in legend), legend
                assert sum("\\lambda = 0" in t for t in legend) == ds.sizes["step"], legend
    finally:
        for fig in figures.values():
            plt.close(fig)


def test_xarray_plot_shows_label_and_unit(tmp_path):
    """`ds.x.plot()` on a cube: long_name [units], no [1] where there is no unit."""
    text = load_study("pingpong").demo_configs["pingpong_boundary"]
    ds = _cube(tmp_path, "pingpong", "boundary", text)
    assert ds["final_displacement"].attrs["long_name"] == r"final displacement $x_\mathrm{final}$"
    assert ds["final_displacement"].attrs["units"] == "m"
    assert "units" not in ds["spin_ratio"].attrs  # dimensionless
    assert ds["drag"].attrs["long_name"] == r"air drag $\beta$"
    fig, ax = plt.subplots()
    try:
        ds["final_displacement"].sel(drag=0.0).plot(ax=ax)
        assert ax.get_xlabel().replace("\n", " ") == r"spin ratio $q=|r\dot\theta_0/v_0|$"
        assert ax.get_ylabel().replace("\n", " ") == r"final displacement $x_\mathrm{final}$ [m]"
        _check(fig)
        ax.clear()
        mesh = ds["final_displacement"].plot(ax=ax)
        assert mesh.colorbar.ax.get_ylabel().replace("\n", " ") == r"final displacement $x_\mathrm{final}$ [m]"
        assert ax.get_ylabel().replace("\n", " ") == r"air drag $\beta$ [1/s]"
        _check(fig)
    finally:
        plt.close(fig)


def test_every_declared_quantity_has_a_display_label():
    """Every shipped parameter and output: a label of its own or a readable one."""
    for name in STUDIES:
        study = load_study(name)
        for declared in study.parameters + study.outputs:
            assert declared.label and not _problems(declared.axis_label), (name, declared.name, declared.label)


def test_the_default_label_is_the_readable_name():
    from engine import Interval

    p = Parameter("launch_speed", "1", 1.0, Interval(), "a speed")
    assert p.label == "launch speed" and p.axis_label == "launch speed"
    o = Output("x_final", "m", "where", label=r"$x_\mathrm{final}$")
    assert o.axis_label == r"$x_\mathrm{final}$ [m]"
    assert Output("g", "m/s^2", "gravity").axis_label == "g [m/s$^{2}$]"

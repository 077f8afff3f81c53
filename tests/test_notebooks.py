"""The example notebooks run end to end against small cubes (nbclient)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_one_notebook_per_study():
    assert {p.stem for p in NOTEBOOKS} == {"pingpong", "bicycle", "rebound", "hoop"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSWEEP_RESULTS", str(tmp_path))
    monkeypatch.setenv("ROLLSWEEP_EXAMPLES_SMALL", "1")
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(EXAMPLES)}}).execute()  # raises on any cell error
    assert list(tmp_path.glob("*.zarr")), "the notebook opened no cube"
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "the notebook drew no figure"


def _cell_with(notebook: str, text: str) -> str:
    """The source of the notebook's code cell that contains `text`."""
    cells = nbformat.read(EXAMPLES / notebook, as_version=4).cells
    (source,) = [c.source for c in cells if c.cell_type == "code" and text in c.source]
    return source


def _attrs(study: str, name: str) -> dict:
    """The attributes a cube gives an output or parameter of `study` (engine.cube.structure)."""
    import engine

    s = engine.load_study(study)
    field = s.outputs_by_name.get(name) or next(p for p in s.parameters if p.name == name)
    return {"units": field.unit, "long_name": field.description}


def test_notebook_labels_name_what_is_drawn():
    """Without running a sweep: the figure and table cells on a few points of the
    cube's shape. The bicycle's eigenvalue axis (real parts and the weave's
    |imaginary part|) was labelled by the last .plot() alone, "imaginary part ...";
    the rebound table's `model` columns showed as 0.0 1.0 2.0, not the models' names."""
    import matplotlib
    import matplotlib.pyplot as plt
    import numpy as np
    import xarray as xr

    matplotlib.use("Agg")
    modes = ["weave", "weave_conjugate", "capsize", "caster"]
    ds = xr.Dataset({name: (("v", "mode"), np.ones((3, 4)), _attrs("bicycle", name))
                     for name in ("eigenvalue_real", "eigenvalue_imag")},
                    coords={"v": [1.0, 2.0, 3.0], "mode": modes})
    space = {"ds": ds, "plt": plt}
    exec(_cell_with("bicycle.ipynb", "eigenvalue_imag"), space)
    label = space["ax"].get_ylabel()
    plt.close("all")
    assert "real" in label and "imag" in label, label

    errors = [f"error_{c}" for c in ("vx", "vy", "vz", "wx", "wy", "wz")]
    table = xr.Dataset({name: (("model", "sample"), np.ones((3, 2)), _attrs("rebound_table1", name))
                        for name in errors},
                       coords={"model": ("model", [0.0, 1.0, 2.0], _attrs("rebound_table1", "model")),
                               "sample": [1.0, 2.0]})
    space = {"cube": lambda study, sweep: table}
    exec(_cell_with("rebound.ipynb", "summary ="), space)
    assert list(space["summary"].columns) == ["physical", "classical", "learned"], space["summary"]

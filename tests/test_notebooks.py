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

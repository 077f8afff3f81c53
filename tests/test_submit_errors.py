"""`rollsweep submit` and `work` where SLURM is missing, unreachable or given
what is not a share: one line each, and nothing written where nothing was
submitted. SLURM's commands are stand-ins on PATH (a real cluster: test_slurm.py)."""

import os
import pathlib

import pytest

from engine.cli.commands import main
from engine.cube.markers import Markers

from conftest import sweep_file

NO_CONTROLLER = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"


@pytest.fixture
def sbatch_without_controller(tmp_path, monkeypatch):
    """An sbatch on PATH that answers as one does with no controller running."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "sbatch"
    script.write_text(f"#!/bin/sh\necho '{NO_CONTROLLER}' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def no_sbatch(tmp_path, monkeypatch):
    """A PATH on which there is no sbatch (the Python running the test is found by path)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))


def regime_sweep(folder: pathlib.Path) -> pathlib.Path:
    return sweep_file(folder / "work", f"""
        study = "rebound_regime"
        [axes]
        spin_ratio = {{ linspace = [-1.0, 1.0, 3] }}
        incidence_angle = {{ linspace = [0.0, 80.0, 4] }}
        [run]
        shard_size = 6
        out = "{folder / 'work' / 'cube.zarr'}"
        """)


@pytest.fixture
def work(tmp_path):
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_submit_without_a_controller_is_one_line_and_writes_nothing(work, sbatch_without_controller, capsys):
    config = regime_sweep(work.parent)
    assert main(["submit", str(config)]) == 1
    line = one_line(capsys)
    assert line == f"rollsweep: error: sbatch refused the job: {NO_CONTROLLER}", line
    assert sorted(p.name for p in work.iterdir()) == ["sweep.toml"]  # no cube, no share, no lock


def test_submit_without_slurm_says_so_in_one_line(work, no_sbatch, capsys):
    config = regime_sweep(work.parent)
    assert main(["submit", str(config)]) == 1
    assert "sbatch not found" in one_line(capsys)
    assert sorted(p.name for p in work.iterdir()) == ["sweep.toml"]


def test_a_slurm_run_without_a_controller_ends_with_one_line(work, sbatch_without_controller, capsys):
    """dask-jobqueue would submit its worker jobs again and again, a traceback each,
    and the run would never end."""
    config = regime_sweep(work.parent)
    assert main(["run", str(config), "--executor", "slurm", "--quiet"]) == 1
    assert one_line(capsys) == f"rollsweep: error: sbatch refused the job: {NO_CONTROLLER}"
    # The store it made holds no solved shard and is free: the same command resumes it once SLURM answers.
    assert sorted(p.name for p in work.iterdir()) == ["cube.zarr", "sweep.toml"]
    assert not Markers(work / "cube.zarr").any_done()


def test_a_dry_run_of_a_complete_cube_says_there_is_nothing_to_submit(work, capsys):
    config = regime_sweep(work.parent)
    assert main(["run", str(config), "--executor", "inline", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["submit", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out == f"{work / 'cube.zarr'}: complete, nothing to submit\n", out


@pytest.mark.parametrize("share, task, says", [
    ("missing.json", 0, "--share: cannot read"),
    ("garbled.json", 0, "is not a share file written by rollsweep submit"),
    ("share.json", 2, "--task: 2 is not a task of"),
])
def test_work_given_no_such_share_or_task_is_one_line(work, capsys, share, task, says):
    (work / "garbled.json").write_text("{not json")
    (work / "share.json").write_text('[[["grid", 0]], [["grid", 1]]]')
    assert main(["work", str(work / "cube.zarr"), "--task", str(task), "--share", str(work / share)]) == 2
    assert says in one_line(capsys)

"""Bicycle designs from files, and invalid designs rejected before any run."""

import re

import pytest

from engine.cli.commands import main
from studies.bicycle import BENCHMARK, load_design
from studies.bicycle._parameters import BENCHMARK_FILE

from conftest import sweep_file


def test_benchmark_file_is_the_default_design():
    assert load_design(BENCHMARK_FILE) == BENCHMARK
    assert BENCHMARK["IHxz"] == -0.00756 and BENCHMARK["rF"] == 0.35 and len(BENCHMARK) == 26


def run_config(tmp_path, body, capsys, command="validate"):
    out = tmp_path / "cube.zarr"
    path = sweep_file(tmp_path, f'study = "bicycle"\n{body}\n[run]\nexecutor = "inline"\nout = "{out}"\n')
    code = main([command, str(path)])
    captured = capsys.readouterr()
    assert not out.exists()
    return code, captured.err, path


AXIS = "[axes]\nv = { linspace = [0.0, 10.0, 5] }"

INVALID = [
    ("negative mass", "[parameters]\nmB = -85.0\n" + AXIS, "parameters.mB", "outside the allowed range"),
    ("rear frame inertia", "[parameters]\nIBxx = 20.0\n" + AXIS, "parameters.IBxx",
     "inertia of body B is not physical"),
    ("wheel inertia on an axis", "[axes]\nIRyy = { values = [0.1, 0.2] }", "axes.IRyy",
     "IRyy must not exceed 2 IRxx (at IRxx=0.0603, IRyy=0.2)"),
    ("head tube horizontal", "[parameters]\nlam = 1.5707963267948966\n" + AXIS, "parameters.lam",
     "outside the allowed range (-1.5708, 1.5708)"),
    ("zero wheelbase", "[parameters]\nw = 0.0\n" + AXIS, "parameters.w", "outside the allowed range (0, 10]"),
]


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("name, body, key, reason", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_design_rejected_before_any_run(tmp_path, capsys, command, name, body, key, reason):
    code, err, path = run_config(tmp_path, body, capsys, command)
    assert code == 2
    assert f"{path}: {key}: " in err and reason in err, err


def test_design_file_in_a_sweep(tmp_path, capsys):
    design = BENCHMARK_FILE.read_text().replace("c = 0.08 ", "c = 0.1 ")
    (tmp_path / "bike.toml").write_text(design)
    code, err, _ = run_config(tmp_path, 'parameter_file = "bike.toml"\n[parameters]\ng = 9.80665\n' + AXIS, capsys)
    assert code == 0, err


def test_bad_design_file_names_its_key(tmp_path, capsys):
    (tmp_path / "bike.toml").write_text(BENCHMARK_FILE.read_text().replace("m = 85.0", "m = -85.0"))
    code, err, path = run_config(tmp_path, 'parameter_file = "bike.toml"\n' + AXIS, capsys)
    assert code == 2 and f"{path}: parameter_file.mB: -85.0 is outside the allowed range" in err, err
    (tmp_path / "bike.toml").write_text(BENCHMARK_FILE.read_text().replace("m = 85.0", 'm = "heavy"'))
    code, err, path = run_config(tmp_path, 'parameter_file = "bike.toml"\n' + AXIS, capsys)
    assert code == 2 and "parameter_file: cannot read" in err and "rear_frame.m must be a number" in err, err


@pytest.mark.parametrize("body", ["rear_frame = 3", 'front_wheel = "light"', "rear_wheel = [1, 2]"])
def test_a_design_file_whose_body_is_not_a_table_names_it(tmp_path, capsys, body):
    """A body written as a value instead of a table ([rear_frame] with its
    values) is one line naming it, as any other bad design file."""
    key = body.split(" =")[0]
    design = re.sub(rf"^\[{key}\].*?(?=^\[|\Z)", "", BENCHMARK_FILE.read_text(), flags=re.M | re.S)
    assert f"[{key}]" not in design
    (tmp_path / "bike.toml").write_text(f"{body}\n{design}")
    code, err, path = run_config(tmp_path, 'parameter_file = "bike.toml"\n' + AXIS, capsys)
    assert code == 2 and "parameter_file: cannot read" in err and f"{key} must be a table" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err

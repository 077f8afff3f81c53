"""Bad sweep files: a clear message naming file, key and reason; nothing written."""

import pathlib

import pytest

from engine.cli.commands import main

from conftest import sweep_file

GOOD = {
    "study": 'study = "pingpong"',
    "parameters": "[parameters]\nfriction = 0.3",
    "axes": "[axes]\nspin_ratio = { linspace = [0.0, 3.0, 11] }",
    "solver": "[solver]\nrtol = 1e-10",
    "critical": "",
    "run": "[run]\nshard_size = 4\nexecutor = \"inline\"\nout = \"OUT\"",
}

CASES = [
    # (name, section(s) replaced, new text(s), expected key, expected reason fragment)
    ("unknown study", "study", 'study = "billiards"', "study", "unknown study 'billiards'"),
    ("unknown parameter", "parameters", "[parameters]\nspin = 2.0", "parameters.spin", "unknown parameter"),
    ("value out of range", "parameters", "[parameters]\nfriction = -0.3", "parameters.friction",
     "outside the allowed range (0, 2]"),
    ("wrong type", "parameters", '[parameters]\nfriction = "high"', "parameters.friction", "must be a number"),
    ("NaN", "parameters", "[parameters]\nfriction = nan", "parameters.friction", "must be finite"),
    ("axis also fixed", "parameters", "[parameters]\nspin_ratio = 1.0", "parameters.spin_ratio",
     "also an axis"),
    ("empty axis", "axes", "[axes]\nspin_ratio = { values = [] }", "axes.spin_ratio.values", "non-empty"),
    ("non-monotonic axis", "axes", "[axes]\nspin_ratio = { values = [0.0, 2.0, 1.0] }", "axes.spin_ratio",
     "strictly increasing or strictly decreasing"),
    ("axis value out of range", "axes", "[axes]\nspin_ratio = { linspace = [-1.0, 3.0, 5] }",
     "axes.spin_ratio", "outside the allowed range"),
    ("unknown axis", "axes", "[axes]\nspeed = { linspace = [0.0, 1.0, 5] }", "axes.speed", "unknown parameter"),
    ("no axes", "axes", "", "axes", "at least one swept parameter"),
    ("bad count", "axes", "[axes]\nspin_ratio = { linspace = [0.0, 3.0, 2.5] }", "axes.spin_ratio.linspace[2]",
     "positive integer"),
    ("unknown solver", "solver", '[solver]\nsolver = "Euler4"', "solver.solver", "is not one of"),
    ("negative rtol", "solver", "[solver]\nrtol = -1e-10", "solver.rtol", "must be positive"),
    ("bad dtype", "solver", '[solver]\ndtype = "float16"', "solver.dtype", "is not one of"),
    ("critical on non-axis", "critical", '[critical]\noutput = "final_displacement"\naxis = "drag"',
     "critical.axis", "not one of the sweep's axes"),
    ("critical unknown output", "critical", '[critical]\noutput = "height"\naxis = "spin_ratio"',
     "critical.output", "not a scalar output"),
    ("inverted bracket", "critical",
     '[critical]\noutput = "final_displacement"\naxis = "spin_ratio"\nbracket = [3.0, 1.0]',
     "critical.bracket", "must be below"),
    ("shard too large for memory", ("axes", "run"),
     ("[axes]\nspin_ratio = { linspace = [0.0, 3.0, 1000] }\ndrag = { linspace = [0.0, 1.0, 1000] }\n"
      "initial_speed = { linspace = [0.5, 1.0, 1000] }", '[run]\nshard_size = 1000000000\nout = "OUT"'),
     "run.shard_size", "lower shard_size"),
    ("batch too large for memory", ("axes", "run"),
     ("[axes]\nspin_ratio = { linspace = [0.0, 3.0, 1000] }\ndrag = { linspace = [0.0, 1.0, 1000] }\n"
      "initial_speed = { linspace = [0.5, 1.0, 100] }",
      '[run]\nbatch_size = 10000000\nshard_size = 10000000\nout = "OUT"'),
     "run.batch_size", "lower batch_size"),
    ("unknown run key", "run", '[run]\nshards = 4\nout = "OUT"', "run.shards", "unknown key"),
    ("unknown batch solver", "run", '[run]\nbatch_solver = "fast"\nout = "OUT"', "run.batch_solver",
     "unknown batch solver 'fast' (known: vmapped, lanes, fused)"),
    ("batch solver not a name", "run", '[run]\nbatch_solver = 3\nout = "OUT"', "run.batch_solver",
     "must be str"),
    ("batch solver that cannot solve the study", ("study", "parameters", "axes", "solver", "run"),
     ('study = "bicycle"', "", "[axes]\nv = { linspace = [0.0, 10.0, 11] }", "",
      '[run]\nbatch_solver = "lanes"\nout = "OUT"'), "run.batch_solver",
     "the lanes solver cannot solve study 'bicycle': its point function is not declared as a HybridPoint"),
    ("unknown table", "critical", "[plot]\ncolor = 1", "plot", "unknown table or key"),
    ("TOML syntax", "critical", "[critical\n", "<syntax>", "not valid TOML"),
    ("grid too large", "axes",
     "[axes]\nspin_ratio = { linspace = [0.0, 3.0, 1000000] }\ndrag = { linspace = [0.0, 1.0, 1000000] }",
     "axes", "1,000,000,000,000 points exceed the limit of 10,000,000,000"),
    ("too many shards", ("axes", "run"),
     ("[axes]\nspin_ratio = { linspace = [0.0, 3.0, 3000] }\ndrag = { linspace = [0.0, 1.0, 1000] }",
      '[run]\nshard_size = 1\nout = "OUT"'), "run.shard_size", "3,000,000 shards exceed the limit of 1,000,000"),
    ("max_steps too large", "solver", "[solver]\nmax_steps = 3000000000", "solver.max_steps",
     "3,000,000,000 exceeds the limit of 10,000,000"),
    ("max_segments too large", "solver", "[solver]\nmax_segments = 1000000000", "solver.max_segments",
     "exceeds the limit"),
    ("logspace overflow", "axes", "[axes]\ndrag = { logspace = [0, 400, 10] }", "axes.drag.logspace[1]",
     "10**400 is not a normal float64"),
    ("logspace underflow", "axes", "[axes]\ndrag = { logspace = [-400, 0, 10] }", "axes.drag.logspace[0]",
     "10**-400 is not a normal float64"),
    ("linspace overflow", "axes", "[axes]\ndrag = { linspace = [-1.7e308, 1.7e308, 10] }", "axes.drag.linspace",
     "overflow a float64"),
    ("run.workers zero", "run", '[run]\nworkers = 0\nout = "OUT"', "run.workers", "positive integer"),
    ("run.workers huge", "run", '[run]\nworkers = 100000\nout = "OUT"', "run.workers",
     "must be an integer from 1 to 1024"),
    ("unknown slurm key", "critical", '[slurm]\npartitoin = "gpu"', "slurm.partitoin", "unknown key"),
    ("bad slurm value", "critical", "[slurm]\ncores = -4", "slurm.cores", "positive integer"),
]


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("name, section, text, key, reason", CASES, ids=[c[0] for c in CASES])
def test_bad_config_is_reported_and_nothing_written(tmp_path, capsys, command, name, section, text, key, reason):
    out = tmp_path / "cube.zarr"
    if isinstance(section, str):
        section, text = (section,), (text,)
    parts = dict(GOOD, **dict(zip(section, text, strict=True)))
    path = sweep_file(tmp_path, "\n".join(parts.values()).replace("OUT", str(out)))
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {key}: " in err, err
    assert reason in err, err
    assert "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_missing_file_is_reported(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml: <file>: cannot read" in capsys.readouterr().err


def test_good_config_validates_with_cost_estimate(tmp_path, capsys):
    path = sweep_file(tmp_path, "\n".join(GOOD.values()).replace("OUT", str(tmp_path / "c.zarr")))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "grid points      11" in out and "shards           3 of up to 4 points" in out
    assert not (tmp_path / "c.zarr").exists()


def test_whole_axis_check_agrees_with_value_by_value():
    """Parameter.admitted (a whole axis at once) against a plain Python check of
    each value: at the bounds, for NaN and infinities, for whole-number parameters."""
    import math

    import numpy as np

    from engine.study.interface import Interval, Parameter

    def plain(v, a, integer):
        above = v > a.lower if a.lower_open else v >= a.lower
        below = v < a.upper if a.upper_open else v <= a.upper
        return above and below and (not integer or (math.isfinite(v) and float(v).is_integer()))

    values = np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 2.0, 2.5, np.inf, np.nan])
    for allowed in (Interval(0, 2), Interval(0, 2, lower_open=True, upper_open=True), Interval()):
        for integer in (False, True):
            p = Parameter("p", "", 1.0, allowed, "test", integer=integer)
            expected = [plain(float(v), allowed, integer) for v in values]
            np.testing.assert_array_equal(p.admitted(values), expected)
            assert [p.admits(v) for v in values] == expected
    assert list(Parameter("k", "", 1.0, Interval(0, 5), "", integer=True).admitted(values)) == [
        False, False, True, False, True, True, False, False, False]


def _good(tmp_path, out=None):
    out = tmp_path / "cube.zarr" if out is None else out
    return sweep_file(tmp_path, "\n".join(GOOD.values()).replace("OUT", str(out))), out


def _one_line_error(capsys, *fragments):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rollsweep: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err
    assert "Warning" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("workers", ["-2", "-1", "0", "5000"])
def test_bad_worker_count_is_refused_before_anything_is_written(tmp_path, capsys, command, workers):
    path, out = _good(tmp_path)
    assert main([command, str(path), "--workers", workers]) == 2
    _one_line_error(capsys, "<command line>: --workers: must be an integer from 1 to 1024")
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("command", ["run", "validate"])
def test_invalid_utf8_is_one_line_naming_the_file(tmp_path, capsys, command):
    path = tmp_path / "sweep.toml"
    path.write_bytes(b'study = "pingpong"\n# caf\xe9\n')
    assert main([command, str(path)]) == 2
    _one_line_error(capsys, f"{path}: <file>: not UTF-8 text (byte 0xe9 at offset 24)")


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("where", ["inside a file", "proc", "existing file"])
def test_out_path_that_cannot_be_a_store_is_refused(tmp_path, capsys, command, where):
    blocker = tmp_path / "plain.txt"
    blocker.write_text("not a folder")
    out = {"inside a file": blocker / "cube.zarr", "proc": pathlib.Path("/proc/self/cube.zarr"),
           "existing file": blocker}[where]
    path, _ = _good(tmp_path, out)
    assert main([command, str(path)]) == 2
    reason = {"inside a file": "which is a file, not a folder", "proc": "on a virtual file system",
              "existing file": "exists and is not a folder"}[where]
    _one_line_error(capsys, f"{path}: run.out: ", reason)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "sweep.toml"]
    assert main([command, str(_good(tmp_path)[0]), "--out", str(out)]) == 2
    _one_line_error(capsys, ": --out: ", reason)


def test_disk_error_names_the_store_not_the_sweep(tmp_path, capsys, monkeypatch):
    """A disk error without a file name (as zarr raises them) names the store; with
    nothing done yet, no advice to resume."""
    import errno

    from engine.cube.store import Cube

    path, out = _good(tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Cube, "create", full)
    assert main(["run", str(path), "--quiet"]) == 2
    line = _one_line_error(capsys, f"{out}: No space left on device")
    assert str(path) not in line and "resume" not in line


@pytest.mark.parametrize("spec", ["logspace = [0, 400, 10]", "logspace = [-400, 0, 10]",
                                  "linspace = [-1.7e308, 1.7e308, 10]"])
def test_axis_overflow_raises_no_numpy_warning(spec):
    import warnings

    from engine.sweep.config import ConfigError, parse_sweep

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail here
        with pytest.raises(ConfigError, match="float64"):
            parse_sweep(f'study = "pingpong"\n[axes]\ndrag = {{ {spec} }}\n[run]\nout = "x.zarr"')

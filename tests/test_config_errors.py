"""Bad sweep files: a clear message naming file, key and reason; nothing written."""

import pytest

from engine.cli import main

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
    ("unknown table", "critical", "[plot]\ncolor = 1", "plot", "unknown table or key"),
    ("TOML syntax", "critical", "[critical\n", "<syntax>", "not valid TOML"),
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

    from engine._study import Interval, Parameter

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

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
    ("bad slurm value", "critical", "[slurm]\ncores = -4", "slurm.cores", "an integer from 1 to 1,024"),
    # Tolerances too loose to mean anything, and the other [solver] numbers' ranges.
    ("rtol too loose", "solver", "[solver]\nrtol = 1e10", "solver.rtol",
     "10000000000.0 is above 0.1, the loosest rtol accepted (a step 10% off); set rtol <= 0.1"),
    ("rtol just too loose", "solver", "[solver]\nrtol = 0.11", "solver.rtol", "set rtol <= 0.1"),
    ("atol too loose", "solver", "[solver]\natol = 1e10", "solver.atol",
     "10000000000.0 is above 1, the loosest atol accepted"),
    ("both too loose", "solver", "[solver]\nrtol = 1e10\natol = 1e10", "solver.rtol", "is above 0.1"),
    ("max_steps zero", "solver", "[solver]\nmax_steps = 0", "solver.max_steps", "positive integer"),
    ("max_steps fractional", "solver", "[solver]\nmax_steps = 2.5", "solver.max_steps", "positive integer"),
    ("max_segments a boolean", "solver", "[solver]\nmax_segments = true", "solver.max_segments",
     "positive integer"),
    ("t_max zero", "solver", "[solver]\nt_max = 0.0", "solver.t_max", "must be positive"),
    ("t_max infinite", "solver", "[solver]\nt_max = inf", "solver.t_max", "must be finite"),
    ("t_max beyond float32", "solver", '[solver]\ndtype = "float32"\nrtol = 1e-6\nt_max = 1e39', "solver.t_max",
     "1e+39 overflows float32: set t_max <= 3.4e+38"),
    # A critical value's xtol must let the search narrow its bracket.
    ("xtol wider than the bracket", "critical",
     '[critical]\noutput = "final_displacement"\naxis = "spin_ratio"\nxtol = 10.0', "critical.xtol",
     "10.0 is above a quarter of the width of the bracket [0.0, 3.0]: the search would stop before it located "
     "the root; set xtol <= 0.75"),
    ("xtol above a quarter of the bracket", "critical",
     '[critical]\noutput = "final_displacement"\naxis = "spin_ratio"\nbracket = [1.0, 3.0]\nxtol = 0.51',
     "critical.xtol", "set xtol <= 0.5"),
    ("critical axis of one value", ("axes", "critical"),
     ("[axes]\nspin_ratio = { values = [1.5] }", '[critical]\noutput = "final_displacement"\naxis = "spin_ratio"'),
     "critical.bracket", "none given, and the axis 'spin_ratio' has a single value"),
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
    assert "grid points      11" in out and "grid shards      3 of up to 4 points" in out
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
    """Refused as the command line is read (tests/test_cli_ranges.py: every flag)."""
    path, out = _good(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main([command, str(path), "--workers", workers])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (f"rollsweep {command}: error: argument --workers: must be an integer from 1 "
                                       f"to 1,024, got {workers!r}\n")
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


def test_an_xtol_of_a_quarter_of_the_bracket_is_accepted():
    from engine.sweep.config import parse_sweep

    sweep = parse_sweep('study = "pingpong"\n[axes]\nspin_ratio = { values = [1.0, 3.0] }\n[critical]\n'
                        'output = "final_displacement"\naxis = "spin_ratio"\nxtol = 0.5\n[run]\nout = "c.zarr"')
    assert sweep.critical.xtol == 0.5 and sweep.critical.bracket == (1.0, 3.0)


# rollsweep point checks its point as a sweep checks its grid: the study's
# constraints on several parameters together, with the same line.
BICYCLE = 'study = "bicycle"\n[axes]\nv = {{ linspace = [0.0, 10.0, 5] }}\n{more}[run]\nout = "{out}"\n'
WHEEL = "inertia of wheel R is not physical: IRyy must not exceed 2 IRxx (at IRxx=0.0603, IRyy=1000)"


def test_point_refuses_what_the_sweep_refuses_with_the_same_line(tmp_path, capsys):
    from engine.sweep.config import ConfigError, parse_sweep

    config = sweep_file(tmp_path, BICYCLE.format(more="", out=tmp_path / "c.zarr"))
    assert main(["point", str(config), "--at", "v=5", "IRyy=1000"]) == 2
    _one_line_error(capsys, f"<command line>: --at IRyy: {WHEEL}")
    with pytest.raises(ConfigError) as refused:
        parse_sweep(BICYCLE.format(more="[parameters]\nIRyy = 1000.0\n", out="c.zarr"), file="s.toml")
    assert (refused.value.key, refused.value.reason) == ("parameters.IRyy", WHEEL)
    assert list(tmp_path.iterdir()) == [config]


def test_point_within_the_constraints_is_selected(tmp_path):
    from engine.runner.point import select_point
    from engine.sweep.config import load_sweep

    sweep = load_sweep(sweep_file(tmp_path, BICYCLE.format(more="", out=tmp_path / "c.zarr")), writes=False)
    params = select_point(sweep, ["v=5", "IRyy=0.1"], None)
    assert params["v"] == 5.0 and params["IRyy"] == 0.1 and params["IRxx"] == 0.0603
    assert select_point(sweep, [], 4)["v"] == 10.0


def test_constraints_are_evaluated_in_chunks_and_name_the_first_failing_point(monkeypatch, capsys):
    """A chunk of the grid at a time (memory bounded whatever the grid's size),
    and the same first failing point (C order) as one evaluation of the whole
    mesh; a check of more combinations than CONSTRAINT_NOTICE says so first."""
    import types

    import numpy as np

    from engine.study.interface import Constraint
    from engine.sweep import config
    from engine.sweep.config import Axis, ConfigError, check_constraints

    sizes = []

    def below(p):
        sizes.append(np.size(p["x"]))
        return p["x"] + p["z"] <= p["y"]

    study = types.SimpleNamespace(constraints=(Constraint(("x", "y", "z"), below, "x + z must not exceed y"),))
    axes = (Axis("x", np.linspace(0.0, 1.0, 50), {}), Axis("y", np.linspace(2.0, 0.5, 40), {}))
    x, y = np.meshgrid(axes[0].values, axes[1].values, indexing="ij")
    first = int(np.argmin(x.ravel() + 0.25 <= y.ravel()))
    monkeypatch.setattr(config, "CONSTRAINT_CHUNK", 64)
    monkeypatch.setattr(config, "CONSTRAINT_NOTICE", 1999)
    with pytest.raises(ConfigError) as refused:
        check_constraints("s.toml", study, {"z": 0.25}, axes, {"z": "parameters.z"})
    said = capsys.readouterr().err
    assert said == "rollsweep: checking 'x + z must not exceed y' on 2,000 combinations of x, y ...\n", said
    assert refused.value.key == "axes.x"
    assert refused.value.reason == (f"x + z must not exceed y (at x={x.ravel()[first]:g}, y={y.ravel()[first]:g}, "
                                    "z=0.25)")
    assert max(sizes) == 64 and sum(sizes) == (first // 64 + 1) * 64
    with pytest.raises(ConfigError) as refused:  # nothing swept: the key that set a value
        check_constraints("<command line>", study, {"x": 1.0, "y": 0.5, "z": 0.0}, keys={"y": "--at y"})
    assert refused.value.key == "--at y" and refused.value.reason.endswith("(at x=1, y=0.5, z=0)")


def _hoop_point_by_point(a, b, r, g, xi0, speed):
    """The hoop's admissibility check one point at a time, as it was before it
    was vectorised: per point 0 (admissible), 1 (not periodic) or 2 (too sharp)."""
    import numpy as np

    from studies.hoop._profile import curvature, dp, p

    xs = np.linspace(-4.0, 4.0, 8001)
    code = np.zeros(a.size, int)
    for k in range(a.size):
        heights = p(xs, a[k], b[k]) + r[k] / np.sqrt(1 + dp(xs, a[k], b[k]) ** 2)
        start_height = p(xi0[k], a[k], b[k]) + r[k] / np.sqrt(1 + dp(xi0[k], a[k], b[k]) ** 2)
        blocked = np.flatnonzero(heights > start_height + speed[k] ** 2 / g[k])
        s = np.argmin(np.abs(xs - xi0[k]))
        lo, hi = blocked[blocked < s], blocked[blocked > s]
        if not lo.size or not hi.size:
            code[k] = 1
            continue
        kappa = curvature(xs[lo[-1]:hi[0] + 1], a[k], b[k])
        code[k] = 0 if np.all(kappa * r[k] < 1.0) else 2
    return code


def test_the_hoops_vectorised_constraint_refuses_exactly_what_the_point_by_point_check_did():
    """Tracks where the hoop runs off and where it does not fit the valleys, starts
    on, between and midway between the track's samples: the study's function
    and its constraint."""
    import numpy as np

    from studies.hoop import STUDY
    from studies.hoop._profile import TRACK, admissible

    midpoints = (TRACK[:-1] + TRACK[1:]) / 2
    tied = midpoints[np.abs(TRACK[:-1] - midpoints) == np.abs(TRACK[1:] - midpoints)]
    mid = tied[tied > 0.5][0]  # as near two samples: the first is the start's
    grid = np.meshgrid([-1.0, 0.0, 0.13, 0.6, 1.5], [-0.5, 0.2, 0.5, 1.2], [0.01, 0.15, 0.4], [9.81],
                       [0.37, mid, TRACK[3000]], [0.3, 1.0, 4.0, 60.0], indexing="ij")
    a, b, r, g, xi0, speed = (c.ravel() for c in grid)
    code = _hoop_point_by_point(a, b, r, g, xi0, speed)
    assert {0, 1, 2} <= set(code)  # admissible, runs off, too sharp: all three on the grid
    np.testing.assert_array_equal(admissible(a, b, r, g, xi0, speed), code == 0)
    (constraint,) = STUDY.constraints
    names = ("a", "b", "radius", "gravity", "start_contact_x", "start_speed")
    np.testing.assert_array_equal(constraint.holds(dict(zip(names, (a, b, r, g, xi0, speed), strict=True))),
                                  code == 0)


def test_the_hoops_constraint_is_checked_a_chunk_of_points_at_a_time(monkeypatch):
    """Vectorised, not a point at a time (1.2-1.65 ms a point: 66.8 s of silence
    for 200 x 200): 400 points are checked in whole chunks of CHUNK_POINTS, the
    same verdicts. Its speed (200 x 200: 49 s one at a time, 2.3 s vectorised)
    is a benchmark's to measure, not a test's."""
    import math

    import numpy as np

    from studies.hoop import _profile

    chunks = []
    check = _profile._admissible_chunk

    def counted(a, *rest):
        chunks.append(a.size)
        return check(a, *rest)

    monkeypatch.setattr(_profile, "_admissible_chunk", counted)
    a, b = (c.ravel() for c in np.meshgrid(np.linspace(-0.5, 0.5, 20), np.linspace(-0.5, 1.0, 20), indexing="ij"))
    columns = (a, b, 0.01, 9.81, 0.0, 1.0)
    np.testing.assert_array_equal(_profile.admissible(*columns), _hoop_point_by_point(
        *(np.broadcast_to(c, a.shape) for c in columns)) == 0)
    assert len(chunks) == math.ceil(a.size / _profile.CHUNK_POINTS) and sum(chunks) == a.size, chunks


def test_the_hoops_start_sample_is_the_nearest_the_first_of_two_as_near():
    import numpy as np

    from studies.hoop._profile import TRACK, _nearest_samples

    starts = np.concatenate([TRACK, (TRACK[:-1] + TRACK[1:]) / 2, [-4.5, -4.0004, 4.0004, 4.5]])
    nearest = np.array([np.argmin(np.abs(TRACK - x)) for x in starts])
    np.testing.assert_array_equal(_nearest_samples(starts), nearest)

"""Global sensitivity: a sweep's `[sensitivity]`, its design drawn by SALib's
sampler, solved as a sweep, analysed by SALib's estimators once every shard
is done, the indices written into the cube.

Checked on an outside study installed through the `rollsweep.studies` entry
point, a closed form with known indices: the Ishigami function (a = 7,
b = 0.1, inputs uniform on [-pi, pi]), whose Sobol' indices are computed
here from their closed formulas, and a linear function, whose Morris
elementary effects are known exactly."""

import math
import pathlib
import shutil
import sys
import textwrap
import warnings

import numpy as np
import pytest
from scipy import stats

import engine
import engine.study.interface as interface
from engine import ConfigError, parse_sweep
from engine.cli.commands import main
from engine.cube.markers import Markers
from engine.sweep.samples import OPEN_EDGE, Samples
from engine.sweep.sensitivity import Sensitivity

A, B = 7.0, 0.1
LINEAR = (1.5, -2.0, 0.25)  # the linear output's coefficients
N = 1 << 14
SEED = 1
NAMES = ("x1", "x2", "x3")

STUDY = f'''
import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Status, Study


def solve_point(p, settings):
    x1, x2, x3 = p["x1"], p["x2"], p["x3"]
    y = jnp.sin(x1) + {A} * jnp.sin(x2) ** 2 + {B} * x3 ** 4 * jnp.sin(x1)
    ok = jnp.abs(x1) <= p["fail_beyond"]  # a failed point where asked (fail_beyond < pi)
    status = jnp.where(ok, Status.SUCCESS, Status.SOLVER_FAILED).astype(jnp.int8)
    outputs = {{
        "y": jnp.where(ok, y, jnp.nan),
        "linear": {LINEAR[0]} * x1 + {LINEAR[1]} * x2 + {LINEAR[2]} * x3,
        "gappy": jnp.where(x2 <= p["gap_beyond"], y, jnp.nan),  # not finite, yet a success, beyond gap_beyond
        "pair": jnp.stack([x1, x2]),
    }}
    return PointResult(outputs=outputs, status=status)


STUDY = Study(
    name="ishigami", title="the Ishigami function", source="Ishigami and Homma 1990", version="1",
    parameters=(
        Parameter("x1", "1", 0.0, Interval(), "first input"),
        Parameter("x2", "1", 0.0, Interval(), "second input"),
        Parameter("x3", "1", 0.0, Interval(), "third input"),
        Parameter("fail_beyond", "1", 10.0, Interval(0.0, 10.0), "points with |x1| beyond it fail"),
        Parameter("gap_beyond", "1", 10.0, Interval(-10.0, 10.0), "gappy is NaN where x2 is beyond it"),
    ),
    outputs=(
        Output("y", "1", "sin x1 + a sin^2 x2 + b x3^4 sin x1"),
        Output("linear", "1", "a linear function of the inputs"),
        Output("gappy", "1", "y, NaN beyond gap_beyond", optional=True),
        Output("pair", "1", "x1 and x2", dims=(("k", 2),)),
    ),
    solve_point=solve_point,
    batch_size=4096,
)
'''


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory):
    """The study as `pip install` of its package registers it: a module and its
    distribution's entry point, found by the engine by name."""
    site = tmp_path_factory.mktemp("site")
    (site / "ishigami_study.py").write_text(STUDY)
    info = site / "ishigami_study-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ishigami-study\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rollsweep.studies]\nishigami = ishigami_study:STUDY\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        interface._registered.cache_clear()
        yield site
    interface._registered.cache_clear()
    sys.modules.pop("ishigami_study", None)


def _sweep(out, n=N, method="sobol", outputs='["y"]', more="", parameters="", run="shard_size = 4096",
           distributions=None):
    distributions = distributions or {name: f"{{ uniform = [{-math.pi!r}, {math.pi!r}] }}" for name in NAMES}
    drawn = "\n".join(f"{name} = {spec}" for name, spec in distributions.items())
    return textwrap.dedent(f"""\
        study = "ishigami"
        [parameters]
        {parameters}
        [samples]
        n = {n}
        seed = {SEED}
        [samples.parameters]
        """) + drawn + textwrap.dedent(f"""
        [sensitivity]
        method = "{method}"
        outputs = {outputs}
        {more}
        [run]
        {run}
        out = "{out}"
        """)


def _run(text):
    report = engine.run(parse_sweep(text, file="s.toml"), progress=False)
    return report, engine.open_cube(report.path).load()


def _problem(bounds=(-math.pi, math.pi)):
    return {"num_vars": 3, "names": list(NAMES), "bounds": [list(bounds)] * 3}


def ishigami_indices():
    """S1 and ST from the closed formulas (Sobol' and Levitan 1999): with
    inputs uniform on [-pi, pi], V = a^2/8 + b pi^4/5 + b^2 pi^8/18 + 1/2,
    V1 = (1 + b pi^4/5)^2 / 2, V2 = a^2/8, V3 = 0, V13 = b^2 pi^8 (1/18 - 1/50)."""
    V = A**2 / 8 + B * math.pi**4 / 5 + B**2 * math.pi**8 / 18 + 0.5
    V1, V2, V13 = 0.5 * (1 + B * math.pi**4 / 5) ** 2, A**2 / 8, B**2 * math.pi**8 * (1 / 18 - 1 / 50)
    return np.array([V1, V2, 0.0]) / V, np.array([V1 + V13, V2, V13]) / V


@pytest.fixture(scope="module")
def ishigami(tmp_path_factory):
    """N = 2^14 base samples of Saltelli's design without second order:
    N (D + 2) = 81,920 points, shards of 4,096."""
    folder = tmp_path_factory.mktemp("ishigami")
    return _run(_sweep(folder / "ishigami.zarr"))


def test_the_ishigami_indices_are_the_closed_forms(ishigami):
    report, ds = ishigami
    assert ds.sizes["sample"] == N * (3 + 2) == 81_920
    S1, ST = ishigami_indices()
    for name, exact in (("S1", S1), ("ST", ST)):
        found, conf = ds[name].sel(output="y").values, ds[f"{name}_conf"].sel(output="y").values
        assert ds[name].dims == ("output", "parameter") and list(ds.parameter.values) == list(NAMES)
        assert np.all(np.abs(found - exact) <= conf), (name, found, exact, conf)  # within its 95% interval
        assert np.all(np.abs(found - exact) <= 0.01), (name, found, exact)
    assert ds.attrs["sensitivity_method"] == "sobol" and ds.attrs["sensitivity_N"] == N
    assert ds.attrs["sensitivity_seed"] == SEED and ds.attrs["sensitivity_points_dropped"] == 0
    assert int(ds.failed_points.sel(output="y")) == 0 and int(ds.points_dropped.sel(output="y")) == 0
    assert "81,920 points" in report.sensitivity and "no point dropped" in report.sensitivity


def test_salib_on_the_cubes_points_and_outputs_gives_its_indices(ishigami):
    """The `sample` dimension is SALib's design in SALib's order: SALib's sampler
    (scaled to the bounds itself) draws the cube's points, and its analyze on
    the cube's outputs gives the cube's indices."""
    from SALib.analyze import sobol as analyze
    from SALib.sample import sobol as sample

    _, ds = ishigami
    design = sample.sample(_problem(), N, calc_second_order=False, scramble=True, seed=SEED)
    for j, name in enumerate(NAMES):
        np.testing.assert_allclose(ds[name].values, design[:, j], rtol=0, atol=4e-16)
    found = analyze.analyze(_problem(), ds.y.values, calc_second_order=False, seed=SEED)
    for name in ("S1", "S1_conf", "ST", "ST_conf"):
        np.testing.assert_allclose(ds[name].sel(output="y").values, found[name], rtol=0, atol=1e-12)


def test_shards_of_1000_and_4096_points_give_the_same_cube_bit_for_bit(ishigami, tmp_path):
    _, of_4096 = ishigami
    _, of_1000 = _run(_sweep(tmp_path / "c.zarr", run="shard_size = 1000"))
    assert set(of_1000.variables) == set(of_4096.variables)
    for name in of_4096.variables:
        assert of_1000[name].dims == of_4096[name].dims, name
        np.testing.assert_array_equal(of_1000[name].values, of_4096[name].values, err_msg=name)
    assert of_1000.attrs["sensitivity"] == of_4096.attrs["sensitivity"]


def test_a_run_of_a_complete_cube_computes_nothing_again(ishigami, monkeypatch):
    from SALib.analyze import sobol

    report, _ = ishigami
    record = Markers(report.path).sensitivity_path
    before = record.stat().st_mtime_ns
    monkeypatch.setattr(sobol, "analyze", lambda *a, **k: pytest.fail("analysed again"))
    again = engine.run(parse_sweep(_sweep(report.path), file="s.toml"), progress=False)
    assert again.state == "complete" and again.points_run == 0
    assert again.sensitivity == report.sensitivity and record.stat().st_mtime_ns == before


def test_the_ranking_command_orders_the_parameters_by_st(ishigami, capsys):
    report, _ = ishigami
    assert main(["sensitivity", report.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{report.path}: sobol indices of 1 output over 3 parameters: N = 16,384")
    assert lines[1] == "y" and lines[2].split() == ["rank", "parameter", "ST", "±95%", "S1", "±95%"]
    ranked = [line.split() for line in lines[3:6]]
    assert [row[:2] for row in ranked] == [["1", "x1"], ["2", "x2"], ["3", "x3"]]  # ST 0.558, 0.442, 0.244
    S1, ST = ishigami_indices()
    for row, s1, st in zip(ranked, S1, ST, strict=True):
        assert abs(float(row[2]) - st) < 0.01 and abs(float(row[4]) - s1) < 0.01


def test_plot_draws_the_indices_as_bars(ishigami, tmp_path):
    report, _ = ishigami
    assert main(["plot", report.path, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "ishigami_sensitivity.png").stat().st_size > 10_000


# ---- small designs: Morris, failed points, the cube's checks


def test_morris_elementary_effects_of_a_linear_function_are_exact(tmp_path):
    """Y = sum c_i x_i, x_i uniform on [lo_i, hi_i]: every step of Morris' grid
    changes u_i by delta and so Y by c_i (hi_i - lo_i) delta, and SALib divides
    by delta: each elementary effect is c_i (hi_i - lo_i), mu* its absolute
    value, sigma 0."""
    from SALib.analyze import morris
    from SALib.sample import morris as sample

    bounds = {"x1": (-1.0, 3.0), "x2": (0.5, 1.0), "x3": (-10.0, 10.0)}
    specs = {name: f"{{ uniform = [{lo!r}, {hi!r}] }}" for name, (lo, hi) in bounds.items()}
    report, ds = _run(_sweep(tmp_path / "m.zarr", n=20, method="morris", outputs='["linear", "y"]',
                             more="levels = 4", distributions=specs, run=""))
    assert ds.sizes["sample"] == 20 * (3 + 1)
    effects = np.array([c * (hi - lo) for c, (lo, hi) in zip(LINEAR, bounds.values(), strict=True)])
    linear = ds.sel(output="linear")
    np.testing.assert_allclose(linear.mu.values, effects, rtol=1e-12)
    np.testing.assert_allclose(linear.mu_star.values, np.abs(effects), rtol=1e-12)
    np.testing.assert_allclose(linear.sigma.values, 0.0, atol=1e-12 * np.abs(effects).max())
    assert set(ds.data_vars) >= {"mu", "mu_star", "sigma", "mu_star_conf"} and "S1" not in ds
    # SALib's own analyze of the cube's outputs, from its own unit design
    unit = sample.sample(_problem((0.0, 1.0)), 20, num_levels=4, seed=SEED)
    np.testing.assert_array_equal(ds.x1.values, stats.uniform(-1.0, 4.0).ppf(unit[:, 0]))
    drawn = np.stack([ds[name].values for name in NAMES], axis=1)
    for output in ("linear", "y"):
        found = morris.analyze(_problem((0.0, 1.0)), unit, ds[output].values, num_levels=4, seed=SEED)
        # the cube's own points give the same: SALib reads which parameter moved, and which way
        same = morris.analyze(_problem((0.0, 1.0)), drawn, ds[output].values, num_levels=4, seed=SEED)
        for name in ("mu", "mu_star", "sigma", "mu_star_conf"):
            np.testing.assert_allclose(ds[name].sel(output=output).values, found[name], rtol=0, atol=1e-12)
            np.testing.assert_array_equal(same[name], found[name])


@pytest.mark.parametrize(("d", "n", "second_order", "seed"), [
    (1, 2, False, 0), (3, 16, True, 1), (3, 64, False, 7), (5, 32, True, 12345), (25, 256, False, 1),
    (25, 128, True, 3), (10, 1024, False, 2**31 - 1)])
def test_the_vectorised_saltelli_design_is_salibs_bit_for_bit(d, n, second_order, seed):
    """engine.sweep.sensitivity.saltelli_design builds SALib's `sobol.sample`
    with whole-array operations: the same bits, row for row."""
    from SALib.sample import sobol

    from engine.sweep.sensitivity import saltelli_design, unit_problem

    names = [f"p{i}" for i in range(d)]
    salib = sobol.sample(unit_problem(names), n, calc_second_order=second_order, scramble=True, seed=seed)
    ours = saltelli_design(d, n, second_order, seed)
    assert ours.shape == salib.shape == (n * (2 * d + 2 if second_order else d + 2), d)
    np.testing.assert_array_equal(ours.view(np.uint64), salib.view(np.uint64))


@pytest.mark.parametrize("spec", [{"uniform": [0.06, 0.1]}, {"normal": [0.3, 0.005]}, {"lognormal": [0.1, 0.3]},
                                  {"truncnormal": [0.3, 0.1, 0.2, 0.5]}, {"triangular": [0.0, 0.3, 1.0]},
                                  {"triangular": [-1.0, -1.0, 2.0]}])
def test_the_inverse_cdf_is_scipys_bit_for_bit(spec):
    """The draws' inverse CDF skips scipy's per-element checks where every draw
    is inside (0, 1), and takes scipy's own path where one is at an end."""
    from engine.sweep.samples import distribution, inverse_cdf

    law = distribution(spec)
    unit = np.random.default_rng(5).random(10_000)
    np.testing.assert_array_equal(inverse_cdf(spec, unit).view(np.uint64), law.ppf(unit).view(np.uint64))
    unit[:2] = 0.0, 1.0
    edged = inverse_cdf(spec, unit)
    np.testing.assert_array_equal(edged[2:].view(np.uint64), law.ppf(unit[2:]).view(np.uint64))


def test_a_design_is_drawn_once_in_a_process():
    """Two Samples of one design share its draws (read-only), made once."""
    table = {"x1": {"uniform": [0.0, 1.0]}, "x2": {"normal": [1.0, 0.5]}}
    first = Samples("sobol", 64, 3, table, Sensitivity("sobol", ("y",)))
    second = Samples("sobol", 64, 3, {k: dict(v) for k, v in table.items()}, Sensitivity("sobol", ("y",)))
    assert second.draws["x2"] is first.draws["x2"] and second.unit is first.unit
    assert not first.unit.flags.writeable and not first.draws["x1"].flags.writeable
    assert second.canonical() == first.canonical()
    other = Samples("sobol", 64, 4, table, Sensitivity("sobol", ("y",)))
    assert not np.array_equal(other.unit, first.unit)


def test_a_unit_draw_of_0_or_1_has_a_finite_value_under_an_unbounded_distribution():
    """Morris' grid holds both ends of [0, 1] as levels: a normal's inverse CDF
    there is -inf and inf, moved to 2^-53 from the end (mean -+ 8.2 sd)."""
    drawn = Samples("morris", 8, 1, {"x1": {"normal": [1.0, 0.5]}, "x2": {"uniform": [-2.0, 2.0]}},
                    Sensitivity("morris", ("y",)))
    unit = drawn.unit
    assert unit.min() == 0.0 and unit.max() == 1.0  # the grid's ends are drawn
    x1, x2 = drawn.draws["x1"], drawn.draws["x2"]
    assert np.all(np.isfinite(x1))
    law = stats.norm(1.0, 0.5)
    assert x1.min() == law.ppf(OPEN_EDGE) and x1.max() == law.ppf(1 - OPEN_EDGE)
    assert x1.min() == pytest.approx(1.0 - 8.2095 * 0.5, abs=1e-4)
    inside = (unit[:, 0] > 0) & (unit[:, 0] < 1)
    np.testing.assert_array_equal(x1[inside], law.ppf(unit[inside, 0]))  # every other draw as ppf gives it
    assert x2.min() == -2.0 and x2.max() == 2.0  # a bounded distribution's ends are its bounds, not moved


def test_failed_points_refused_give_no_indices_and_say_how_many(tmp_path, capsys):
    out = tmp_path / "f.zarr"
    config = tmp_path / "f.toml"
    config.write_text(_sweep(out, n=64, parameters="fail_beyond = 3.0", run=""))
    assert main(["run", str(config), "--quiet"]) == 0
    ds = engine.open_cube(out).load()
    failed = int(np.count_nonzero(np.abs(ds.x1.values) > 3.0))
    assert failed > 0
    said = f"not computed: {failed} of 320 points failed or are not finite (y: {failed})"
    assert said in capsys.readouterr().out
    assert "S1" not in ds and said in ds.attrs["sensitivity"] and ds.attrs["sensitivity_failed_points"] == {
        "y": failed}
    assert main(["sensitivity", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err
    assert main(["verify", str(out)]) == 0  # sound: a refusal is no damage
    assert main(["status", str(out)]) == 0 and said in capsys.readouterr().out


def test_failed_points_dropped_leave_out_their_blocks(tmp_path):
    """failed = "drop": each output loses the base-sample blocks (D + 2 rows)
    holding one of its failed points (a status, or a value not finite), and
    its indices are SALib's over the blocks left."""
    from SALib.analyze import sobol

    report, ds = _run(_sweep(tmp_path / "d.zarr", n=64, outputs='["y", "gappy"]', more='failed = "drop"',
                             parameters="fail_beyond = 3.0\ngap_beyond = 2.5", run=""))
    blocks = np.abs(ds.x1.values.reshape(64, 5)) > 3.0
    gaps = blocks | (ds.x2.values.reshape(64, 5) > 2.5)
    for output, failed in (("y", blocks), ("gappy", gaps)):
        kept = ~failed.any(axis=1)
        assert 0 < kept.sum() < 64
        assert int(ds.failed_points.sel(output=output)) == failed.sum()
        assert int(ds.points_dropped.sel(output=output)) == 5 * (64 - kept.sum())
        y = ds[output].values.reshape(64, 5)[kept].ravel()
        found = sobol.analyze(_problem(), y, calc_second_order=False, seed=SEED)
        for name in ("S1", "ST", "S1_conf", "ST_conf"):
            np.testing.assert_array_equal(ds[name].sel(output=output).values, found[name])
    total = int(ds.points_dropped.sum())
    assert ds.attrs["sensitivity_points_dropped"] == total and f"{total:,} points dropped" in report.sensitivity


def test_second_order_indices(tmp_path):
    from SALib.analyze import sobol

    _, ds = _run(_sweep(tmp_path / "s2.zarr", n=64, more="second_order = true", run=""))
    assert ds.sizes["sample"] == 64 * (2 * 3 + 2)
    assert ds.S2.dims == ("output", "parameter", "parameter_2")
    found = sobol.analyze(_problem(), ds.y.values, calc_second_order=True, seed=SEED)
    np.testing.assert_array_equal(ds.S2.sel(output="y").values, found["S2"])
    np.testing.assert_array_equal(ds.S2_conf.sel(output="y").values, found["S2_conf"])


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    config = folder / "small.toml"
    config.write_text(_sweep(folder / "small.zarr", n=64, run="shard_size = 64"))
    engine.run(parse_sweep(config.read_text(), file=config), progress=False)
    return config, folder / "small.zarr"


def test_verify_checks_the_indices_and_a_run_computes_them_again(small, tmp_path, capsys):
    config, original = small
    cube = tmp_path / "copy.zarr"
    shutil.copytree(original, cube)
    text = config.read_text().replace(str(original), str(cube))
    assert main(["verify", str(cube)]) == 0 and capsys.readouterr().out.strip().endswith("sound")
    s1 = engine.open_cube(cube).S1.values
    import zarr

    zarr.open_array(cube / "S1", mode="r+")[0, 0] = 0.5  # the index edited
    assert main(["verify", str(cube)]) == 1
    assert "sensitivity variable S1 differs from what the analysis wrote: a run repairs it" in \
        capsys.readouterr().out
    again = engine.run(parse_sweep(text, file="s.toml"), progress=False)
    assert again.state == "complete" and again.points_run == 0
    np.testing.assert_array_equal(engine.open_cube(cube).S1.values, s1)
    assert main(["verify", str(cube)]) == 0


def test_a_complete_cube_without_its_analysis_says_so(small, tmp_path, capsys):
    """As SLURM array jobs leave it: every shard done, no run since."""
    config, original = small
    cube = tmp_path / "copy.zarr"
    shutil.copytree(original, cube)
    Markers(cube).forget_sensitivity()
    for name in ("S1", "S1_conf", "ST", "ST_conf"):
        shutil.rmtree(cube / name)
    import zarr

    with warnings.catch_warnings():  # the markers' folder, no zarr node of its own
        warnings.filterwarnings("ignore", message="Object at _rollsweep")
        zarr.consolidate_metadata(cube)
    assert main(["verify", str(cube)]) == 0
    assert "sensitivity indices not computed yet" in capsys.readouterr().out
    assert main(["sensitivity", str(cube)]) == 1
    assert "not computed yet: every shard is done" in capsys.readouterr().err
    engine.run(parse_sweep(config.read_text().replace(str(original), str(cube)), file="s.toml"), progress=False)
    assert main(["sensitivity", str(cube)]) == 0


def test_an_incomplete_cube_has_no_indices(small, tmp_path, capsys):
    _, original = small
    cube = tmp_path / "copy.zarr"
    shutil.copytree(original, cube)
    Markers(cube).drop_done("grid", 0)
    assert main(["sensitivity", str(cube)]) == 1
    assert "not complete (4 / 5 shards done)" in capsys.readouterr().err
    assert main(["status", str(cube)]) == 3


def test_a_grid_cube_is_no_sensitivity_sweep(tmp_path, capsys):
    text = f'study = "ishigami"\n[axes]\nx1 = {{ values = [0.0, 1.0] }}\n[run]\nout = "{tmp_path / "g.zarr"}"\n'
    engine.run(parse_sweep(text), progress=False)
    assert main(["sensitivity", str(tmp_path / "g.zarr")]) == 1
    assert "no sensitivity indices: not a sensitivity sweep" in capsys.readouterr().err


# ---- bad input: one line naming the file and the key, nothing written


@pytest.mark.parametrize("change, key, says", [
    (('method = "sobol"', 'method = "fast"'), "sensitivity.method", "'fast' is not one of sobol, morris"),
    (('outputs = ["y"]', 'outputs = ["y", "pair"]'), r"sensitivity.outputs\[1\]", "'pair' is not a scalar output"),
    (('outputs = ["y"]', 'outputs = ["z"]'), r"sensitivity.outputs\[0\]", "'z' is not an output of 'ishigami'"),
    (('outputs = ["y"]', 'outputs = []'), "sensitivity.outputs", "non-empty list"),
    (("[samples]\n", '[samples]\nmethod = "lhs"\n'), "samples.method", "means nothing with \\[sensitivity\\]"),
    (('method = "sobol"', 'method = "sobol"\nfailed = "ignore"'), "sensitivity.failed",
     "'ignore' is not one of refuse, drop"),
    ((f"n = {N}", "n = 1000"), "samples.n", "1,000 is not a power of two, which Saltelli's design .* use 512 or "
     "1,024"),
    ((f"n = {N}", "n = 1"), "samples.n", "at least 2"),
    (('method = "sobol"', 'method = "morris"\nsecond_order = true'), "sensitivity.second_order",
     "means nothing to morris"),
    (('method = "sobol"', 'method = "morris"\nlevels = 3'), "sensitivity.levels", "even integer"),
    (('method = "sobol"', 'method = "sobol"\nlevels = 4'), "sensitivity.levels", "means nothing to sobol"),
    (('method = "sobol"', 'method = "sobol"\nbootstrap = 100'), "sensitivity.bootstrap", "unknown key"),
    (("[parameters]\n", '[axes]\nx3 = { values = [1.0, 2.0] }\n[parameters]\n'), "samples.parameters.x3",
     "also an axis in \\[axes\\]"),
    (("[parameters]\n", "[parameters]\nx2 = 1.0\n"), "samples.parameters.x2", "'x2' is also fixed"),
    (('study = "ishigami"', 'study = "ishigami"\noutputs = ["linear"]'), r"sensitivity.outputs\[0\]",
     "'y' is not among the sweep's selected outputs"),
])
def test_bad_sensitivity_tables_are_one_line_naming_the_key(tmp_path, change, key, says):
    text = _sweep(tmp_path / "c.zarr")
    assert change[0] in text, change
    with pytest.raises(ConfigError, match=f"^s.toml: {key}: .*{says}") as error:
        parse_sweep(text.replace(*change), file="s.toml")
    assert "\n" not in str(error.value)


def test_a_sensitivity_table_without_samples_is_refused():
    text = 'study = "ishigami"\n[sensitivity]\nmethod = "sobol"\noutputs = ["y"]\n[run]\nout = "c.zarr"\n'
    with pytest.raises(ConfigError, match="^s.toml: sensitivity: needs \\[samples\\]"):
        parse_sweep(text, file="s.toml")


def test_run_refuses_a_bad_table_in_one_line_and_writes_nothing(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(_sweep(tmp_path / "c.zarr").replace('method = "sobol"', 'method = "fast"'))
    assert main(["run", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"rollsweep: error: {config}: sensitivity.method: 'fast' is not one of sobol, morris"
    assert not (tmp_path / "c.zarr").exists()


def test_a_samples_sweep_without_sensitivity_is_as_it_was(tmp_path):
    """No key of [sensitivity] in its config: its hash and draws are part A's."""
    text = _sweep(tmp_path / "c.zarr", n=64).split("[sensitivity]")[0].replace("[samples]\n", '[samples]\n'
                                                                               'method = "sobol"\n')
    sweep = parse_sweep(text + f'[run]\nout = "{tmp_path / "c.zarr"}"\n')
    assert sweep.sensitivity is None and "sensitivity" not in sweep.canonical()["samples"]
    assert sweep.samples.points == 64


def test_indices_at_each_grid_point_with_axes(tmp_path, capsys):
    """[axes] beside [sensitivity]: the design solved at each grid point, the
    indices of dims (output, parameter, *axes), each SALib's analyze of that
    point's outputs (failed blocks dropped there alone); where nothing fails,
    the indices of the same sweep without the axis, bit for bit."""
    from SALib.analyze import sobol

    n = 1 << 10
    text = _sweep(tmp_path / "axes.zarr", n=n, outputs='["y", "linear"]', more='failed = "drop"',
                  parameters="[axes]\nfail_beyond = { values = [10.0, 3.0] }")
    text = text.replace("[parameters]\n[axes]", "[axes]")
    report, ds = _run(text)
    assert ds["S1"].dims == ("output", "parameter", "fail_beyond") and ds["S1"].shape == (2, 3, 2)
    assert ds["points_dropped"].dims == ("output", "fail_beyond")
    assert "at each of 2 grid points (2)" in report.sensitivity
    _, alone = _run(_sweep(tmp_path / "alone.zarr", n=n, outputs='["y", "linear"]', more='failed = "drop"',
                           parameters="fail_beyond = 10.0"))
    for name in ("S1", "S1_conf", "ST", "ST_conf"):
        np.testing.assert_array_equal(ds[name].sel(fail_beyond=10.0).values, alone[name].values)
    assert int(ds["points_dropped"].sel(fail_beyond=10.0).sum()) == 0
    # at fail_beyond = 3: the blocks holding a point with |x1| > 3 dropped, SALib's analyze on the rest
    y = ds["y"].sel(fail_beyond=3.0).values
    blocks = ~np.isfinite(y.reshape(n, 5)).all(axis=1)
    assert blocks.any() and int(ds["points_dropped"].sel(output="y", fail_beyond=3.0)) == 5 * int(blocks.sum())
    keep = np.repeat(~blocks, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = sobol.analyze(_problem(), y[keep], calc_second_order=False, num_resamples=100, conf_level=0.95,
                              seed=np.random.default_rng(SEED))
    for name in ("S1", "ST", "S1_conf", "ST_conf"):
        np.testing.assert_array_equal(ds[name].sel(output="y", fail_beyond=3.0).values, found[name])
    assert main(["sensitivity", report.path]) == 0
    out = capsys.readouterr().out
    assert "(indices at each point of fail_beyond[2]: their means over the grid" in out
    assert main(["plot", report.path, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "axes_sensitivity.png").stat().st_size > 10_000


def test_the_local_cluster_and_a_resume_give_the_inline_cube_bit_for_bit(tmp_path):
    """The design solved by the local cluster's worker processes, and a cube
    interrupted (shards' done markers dropped, as a killed run leaves them) then
    resumed: both the inline run's cube, indices included, bit for bit."""
    from conftest import cubes_identical

    text = _sweep(tmp_path / "inline.zarr", n=1 << 10, run="shard_size = 1000")
    _, inline = _run(text)
    _, cluster = _run(text.replace("inline.zarr", "cluster.zarr") + 'executor = "local"\nworkers = 2\n')
    assert cubes_identical(cluster, inline)
    resumed = tmp_path / "resumed.zarr"
    shutil.copytree(tmp_path / "inline.zarr", resumed)
    markers = Markers(resumed)
    for shard in (1, 3):
        markers.drop_done("grid", shard)
    report, cube = _run(text.replace("inline.zarr", "resumed.zarr"))
    assert report.shards_run == 2 and cubes_identical(cube, inline)


def test_a_run_killed_mid_design_resumes_to_the_cube_bit_for_bit(installed, tmp_path):
    """kill -9 of a real `rollsweep run` of a Sobol' design (its process group,
    after its first shards), then a resume: the cube, indices included, is an
    uninterrupted run's bit for bit."""
    import os
    import signal
    import subprocess
    import time

    from conftest import cubes_identical, run_marking_slowly

    text = _sweep(tmp_path / "killed.zarr", n=1 << 6, run="shard_size = 8")  # 320 points, 40 shards
    path = tmp_path / "design.toml"
    path.write_text(text)
    root = pathlib.Path(__file__).resolve().parent.parent
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(installed), str(root),
                                                                     os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(run_marking_slowly(["run", str(path), "--quiet"]), start_new_session=True, env=env)
    markers, deadline = Markers(tmp_path / "killed.zarr"), time.time() + 120
    while len(markers.done("grid")) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(markers.done("grid"))
    assert 5 <= done < 40, f"kill did not land mid-run ({done} shards done)"
    report, resumed = _run(text)
    assert report.state == "resumed" and 0 < report.shards_run <= 40 - done
    _, reference = _run(text.replace("killed.zarr", "reference.zarr"))
    assert "S1" in resumed and cubes_identical(resumed, reference)

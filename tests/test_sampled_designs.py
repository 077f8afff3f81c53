"""Sampled designs: a sweep's `[samples]`, points drawn from input
distributions, the cube's leading `sample` dimension with the draws as its
coordinates. Checked against scipy.stats.qmc drawn independently and the
rolling ball's closed form (Gao 2021) at every drawn point."""

import pickle

import numpy as np
import pytest
from scipy import stats
from scipy.stats import qmc

import engine
from engine import ConfigError, parse_sweep

import pingpong_closed_form as closed_form

SPINS = [0.5, 1.0, 2.0]
SWEEP = """
study = "pingpong"
outputs = ["final_displacement", "stop_time"]

[samples]
method = "METHOD"
n = 64
seed = 1

[samples.parameters]
initial_speed = { uniform = [0.8, 1.2] }
friction = { truncnormal = [0.3, 0.02, 0.25, 0.35] }

[axes]
spin_ratio = { values = [0.5, 1.0, 2.0] }

[run]
out = "OUT"
RUN
"""


def _text(out, method="sobol", run=""):
    return SWEEP.replace("METHOD", method).replace("OUT", str(out)).replace("RUN", run)


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampled")
    engine.run(parse_sweep(_text(folder / "bands.zarr")), progress=False)
    return engine.open_cube(folder / "bands.zarr").load()


def _expected_draws(method, n, seed):
    """The design as a user draws it with scipy: the unit cube, then each
    distribution's inverse CDF, parameters in the file's order."""
    rng = np.random.default_rng(seed)
    unit = {"sobol": lambda: qmc.Sobol(2, rng=rng).random(n), "halton": lambda: qmc.Halton(2, rng=rng).random(n),
            "lhs": lambda: qmc.LatinHypercube(2, rng=rng).random(n), "random": lambda: rng.random((n, 2))}[method]()
    speed = stats.uniform(0.8, 1.2 - 0.8).ppf(unit[:, 0])  # uniform = [lower, upper]: loc, scale = upper - lower
    friction = stats.truncnorm((0.25 - 0.3) / 0.02, (0.35 - 0.3) / 0.02, loc=0.3, scale=0.02).ppf(unit[:, 1])
    return speed, friction


def test_the_cube_has_a_sample_dimension_with_the_draws_as_coordinates(cube):
    assert cube.final_displacement.dims == ("sample", "spin_ratio")
    assert cube.final_displacement.shape == (64, 3)
    assert set(cube.coords) >= {"sample", "initial_speed", "friction", "spin_ratio"}
    speed, friction = _expected_draws("sobol", 64, 1)
    np.testing.assert_array_equal(cube.initial_speed.values, speed)
    np.testing.assert_array_equal(cube.friction.values, friction)
    assert cube.friction.attrs["long_name"] and "distribution" in cube.friction.attrs


def test_every_drawn_point_matches_the_closed_form(cube):
    assert np.all(cube.status.values == engine.Status.SUCCESS)
    worst = 0.0
    for i in range(64):
        for j, q in enumerate(SPINS):
            exact = closed_form.final_displacement(initial_speed=float(cube.initial_speed[i]),
                                                   friction=float(cube.friction[i]), spin_ratio=q)
            worst = max(worst, abs(float(cube.final_displacement[i, j]) - exact))
    assert worst < 1e-9


@pytest.mark.parametrize("method", ["halton", "lhs", "random"])
def test_each_method_draws_what_scipy_draws_from_the_seed(tmp_path, method):
    sweep = parse_sweep(_text(tmp_path / "c.zarr", method))
    speed, friction = _expected_draws(method, 64, 1)
    np.testing.assert_array_equal(sweep.samples.draws["initial_speed"], speed)
    np.testing.assert_array_equal(sweep.samples.draws["friction"], friction)


def test_shards_of_one_point_give_the_same_cube_bit_for_bit(cube, tmp_path):
    engine.run(parse_sweep(_text(tmp_path / "one.zarr", run="shard_size = 5")), progress=False)
    one = engine.open_cube(tmp_path / "one.zarr").load()
    for name in ("final_displacement", "stop_time", "initial_speed", "friction"):
        np.testing.assert_array_equal(one[name].values, cube[name].values)


def test_a_sweep_travels_without_its_draws_and_draws_them_again(tmp_path):
    sweep = parse_sweep(_text(tmp_path / "c.zarr"))
    drawn = dict(sweep.samples.draws)
    travelled = pickle.loads(pickle.dumps(sweep))
    assert "draws" not in travelled.samples.__dict__
    for name, values in drawn.items():
        np.testing.assert_array_equal(travelled.samples.draws[name], values)
    assert travelled.config_hash == sweep.config_hash


def test_point_solves_a_drawn_point(tmp_path):
    from engine.runner.point import select_point

    sweep = parse_sweep(_text(tmp_path / "c.zarr"))
    params = select_point(sweep, [], 3 * 7 + 2)  # sample 7, spin ratio 2.0
    assert params["initial_speed"] == sweep.samples.draws["initial_speed"][7] and params["spin_ratio"] == 2.0


@pytest.mark.parametrize("change, key, says", [
    (("method = \"sobol\"", "method = \"grid\""), "samples.method", "'grid' is not one of"),
    (("n = 64", "n = 100"), "samples.n", "100 is not a power of two.* use 64 or 128"),
    (("n = 64", "n = 0"), "samples.n", "must be a positive integer"),
    (("seed = 1", "seed = -1"), "samples.seed", "non-negative integer"),
    (("{ uniform = [0.8, 1.2] }", "{ gamma = [1.0, 2.0] }"), "samples.parameters.initial_speed",
     "unknown distribution 'gamma'"),
    (("{ uniform = [0.8, 1.2] }", "{ uniform = [1.2, 0.8] }"), "samples.parameters.initial_speed.uniform",
     "lower bound 1.2 must be below"),
    (("{ uniform = [0.8, 1.2] }", "{ uniform = [0.8, 30.0] }"), "samples.parameters.initial_speed",
     "beyond the allowed range"),
    (("{ truncnormal = [0.3, 0.02, 0.25, 0.35] }", "{ normal = [0.3, 0.02] }"), "samples.parameters.friction",
     "normal reaches .* give truncnormal"),
    (("{ uniform = [0.8, 1.2] }", "{ normal = [1.0, 0.0] }"), r"samples.parameters.initial_speed.normal\[1\]",
     "standard deviation must be positive"),
    (("initial_speed = { uniform", "spin_ratio = { uniform"), "samples.parameters.spin_ratio",
     "also an axis in \\[axes\\]"),
    (("[samples]", "[samples]\nshuffle = true"), "samples.shuffle", "unknown key"),
    (("initial_speed = { uniform", "bogus = { uniform"), "samples.parameters.bogus", "unknown parameter"),
])
def test_bad_samples_are_one_line_naming_the_key(tmp_path, change, key, says):
    text = _text(tmp_path / "c.zarr").replace(*change)
    with pytest.raises(ConfigError, match=f"{key}: .*{says}") as error:
        parse_sweep(text, file="s.toml")
    assert "\n" not in str(error.value)


def test_a_drawn_parameter_also_fixed_is_refused(tmp_path):
    text = _text(tmp_path / "c.zarr").replace("[samples]\n", "[parameters]\nfriction = 0.3\n\n[samples]\n")
    with pytest.raises(ConfigError, match="samples.parameters.friction: 'friction' is also fixed"):
        parse_sweep(text, file="s.toml")


def test_a_grid_without_samples_keeps_its_config_hash():
    """The canonical config of a sweep without [samples] has no key for it:
    every cube made before keeps its identity."""
    sweep = parse_sweep('study = "pingpong"\n[axes]\nspin_ratio = { values = [1.0] }\n[run]\nout = "c.zarr"\n')
    assert sweep.samples is None and "samples" not in sweep.canonical()


def test_validate_names_the_design_and_the_memory_its_draws_take(tmp_path, capsys):
    from engine.cli.commands import main

    path = tmp_path / "s.toml"
    path.write_text(_text(tmp_path / "c.zarr"))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "design           sobol design of 64 points, seed 1\n" in out, out
    assert f"draws            {2 * 64 * 2 * 8 / 2**20:,.1f} MiB in each process reading the sweep (2 parameters)" in out


def test_plot_draws_the_band_of_a_sampled_cube(tmp_path, capsys):
    """(sample, spin_ratio): the final displacement's median and 5-95% band
    against the swept spin ratio; no grid figure of the sample index."""
    from engine.cli.commands import main

    path = tmp_path / "bands.zarr"
    engine.run(parse_sweep(_text(path)), progress=False)
    assert main(["plot", str(path), "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(tmp_path / "bands_final_displacement.png")] and "Traceback" not in err
    assert (tmp_path / "bands_final_displacement.png").stat().st_size > 10_000


def test_plot_of_a_drawn_spin_ratio_draws_each_point_and_never_a_traceback(tmp_path, capsys):
    """pingpong's figure code had raised KeyError on a cube whose spin ratio is
    drawn (a coordinate along `sample`, not a dimension)."""
    from engine.cli.commands import main

    text = _text(tmp_path / "drawn.zarr").replace("n = 64", "n = 8").replace(
        "[axes]\nspin_ratio = { values = [0.5, 1.0, 2.0] }\n", "").replace(
        "initial_speed = { uniform = [0.8, 1.2] }", "spin_ratio = { uniform = [0.5, 2.0] }")
    engine.run(parse_sweep(text), progress=False)
    assert main(["plot", str(tmp_path / "drawn.zarr")]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(tmp_path / "drawn_final_displacement.png")] and not err


def test_a_study_figure_that_raises_on_a_sampled_cube_is_skipped_in_one_line(cube):
    import types

    import matplotlib.pyplot as plt

    from engine.cube.sensitivity_figure import cube_figures

    def figures(ds):
        plt.figure()  # drawn before it raises: closed
        return {"grid": ds.sizes["spin_ratio_not_here"]}

    before = len(plt.get_fignums())
    skipped = []
    study = types.SimpleNamespace(name="broken", figures=figures)
    assert cube_figures(cube, study, skipped) == {}
    assert len(plt.get_fignums()) == before
    assert skipped == ["study 'broken''s figures skipped: they do not draw a cube with dimensions (sample, spin_ratio) "
                       "(KeyError: 'spin_ratio_not_here')"]
    skipped.clear()
    assert cube_figures(cube, types.SimpleNamespace(name="gridded", figures=lambda ds: {}), skipped) == {}
    assert skipped == ["study 'gridded' has no figure of a cube with dimensions (sample, spin_ratio); its figures "
                       "are of its grids"]


def test_the_shards_write_the_coordinates_checked_and_resumed_like_outputs(tmp_path, cube):
    """Each sample block's coordinates are written by its first shard (two
    shards a block here: spin ratio in blocks of 2), checksummed in its done
    marker: verify finds a damaged coordinate chunk as that shard damaged, a
    shard not yet solved leaves its block's coordinates unwritten, and a run
    solves it again: every coordinate the draws, bit for bit."""
    from engine.cube.markers import GRID, Markers
    from engine.cube.verify import verify

    out = tmp_path / "two.zarr"
    sweep = parse_sweep(_text(out, run="shard_size = 2"))
    engine.run(sweep, progress=False)
    assert verify(out) == []
    markers = Markers(out).read(GRID)
    assert {"sample", "initial_speed", "friction"} <= set(markers[0]["digests"])  # block (0, 0)
    assert "friction" not in markers[1]["digests"]  # block (0, 1): the same samples, written once
    (out / "friction" / "c" / "5").write_bytes(b"damaged")  # sample 5: shard (5, 0) = 10
    found = verify(out)
    assert len(found) == 1 and found[0].startswith("grid shard 10 coordinate friction cannot be read (")
    engine.run(parse_sweep(_text(out, run="shard_size = 2")), progress=False)  # shard 10 solved again
    assert verify(out) == []
    Markers(out).drop_done(GRID, 20)  # sample 10's block, never solved
    (out / "initial_speed" / "c" / "10").unlink()
    partial = engine.open_cube(out).load()
    assert np.isnan(partial.initial_speed.values[10]) and not np.isnan(partial.initial_speed.values[11])
    engine.run(parse_sweep(_text(out, run="shard_size = 2")), progress=False)
    assert verify(out) == []
    again = engine.open_cube(out).load()
    for name in ("sample", "initial_speed", "friction", "final_displacement", "stop_time"):
        np.testing.assert_array_equal(again[name].values, cube[name].values)


def test_a_resumed_run_refuses_another_design_or_other_draws_and_keeps_an_earlier_hash(tmp_path, monkeypatch):
    """The config hash names the design by the file's values (not the draws'
    bytes): another seed is another config; the same file drawn otherwise
    (another scipy) is refused by the checksums of the coordinates the cube's
    shards wrote; a cube whose hash was made the earlier way (the draws
    digested) is this sweep's, sound and resumed."""
    from engine import StoreError
    from engine.cube.markers import GRID, Markers
    from engine.cube.store import Cube
    from engine.cube.verify import verify
    from engine.sweep import samples

    out = tmp_path / "c.zarr"
    sweep = parse_sweep(_text(out, run="shard_size = 48"))
    engine.run(sweep, progress=False)
    with pytest.raises(StoreError, match="another config.*hash"):
        engine.run(parse_sweep(_text(out, run="shard_size = 48").replace("seed = 1", "seed = 2")), progress=False)
    Markers(out).drop_done(GRID, 3)  # interrupted
    monkeypatch.setenv("ROLLSWEEP_CACHE", "")  # no design kept from the run above: this process draws it
    drawn = samples.unit_draws
    monkeypatch.setattr(samples, "unit_draws", lambda *a: np.nextafter(drawn(*a), 1.0))
    samples._DESIGNS.clear()
    with pytest.raises(StoreError, match="initial_speed draws are not the ones this file draws here"):
        engine.run(parse_sweep(_text(out, run="shard_size = 48")), progress=False)
    monkeypatch.setattr(samples, "unit_draws", drawn)
    samples._DESIGNS.clear()
    assert sweep.config_hash_drawn != sweep.config_hash
    Cube(out).set_attribute("config_hash", sweep.config_hash_drawn)  # as made before the hash was the file's
    assert verify(out) == []
    report = engine.run(parse_sweep(_text(out, run="shard_size = 48")), progress=False)
    assert report.state.startswith("resumed") and verify(out) == []


@pytest.mark.parametrize("bounds", [[0.8, 1.2], [-1.0, 1.0], [0.5, 89.5], [-3.14159, 3.14159], [1e-9, 3e-9]])
def test_a_uniform_is_scipys_without_scipy_stats_bit_for_bit(bounds):
    """A uniform's support and inverse CDF made without importing
    scipy.stats, as scipy.stats.uniform(lower, upper - lower) gives them,
    at 0 and 1 too."""
    from engine.sweep.samples import inverse_cdf, support

    spec = {"uniform": bounds}
    law = stats.uniform(bounds[0], bounds[1] - bounds[0])
    assert support(spec) == law.support()
    unit = np.random.default_rng(3).random(10_000)
    unit[:2] = 0.0, 1.0
    np.testing.assert_array_equal(inverse_cdf(spec, unit).view(np.uint64), law.ppf(unit).view(np.uint64))


def test_drawn_ahead_is_drawn_the_same_and_its_error_raised_where_asked(tmp_path, monkeypatch):
    """A design drawn on draw_ahead's thread is the one drawn in place, bit
    for bit; an error there is raised where the draws are asked for."""
    from engine.sweep import samples

    samples._DESIGNS.clear()
    here = parse_sweep(_text(tmp_path / "c.zarr")).samples
    drawn = {name: values.copy() for name, values in here.draws.items()}
    samples._DESIGNS.clear()
    ahead = parse_sweep(_text(tmp_path / "c.zarr")).samples
    ahead.draw_ahead()
    for name, values in drawn.items():
        np.testing.assert_array_equal(ahead.draws[name].view(np.uint64), values.view(np.uint64))
    samples._DESIGNS.clear()

    def broken(*args):
        raise RuntimeError("no engine")

    monkeypatch.setenv("ROLLSWEEP_CACHE", "")  # drawn here, not read from an earlier process's
    monkeypatch.setattr(samples, "unit_draws", broken)
    failing = parse_sweep(_text(tmp_path / "c.zarr").replace("seed = 1", "seed = 7").replace(
        "{ truncnormal = [0.3, 0.02, 0.25, 0.35] }", "{ uniform = [0.25, 0.35] }")).samples  # drawn when asked
    failing.draw_ahead()
    with pytest.raises(RuntimeError, match="no engine"):
        failing.draws  # noqa: B018 - the property draws


def test_a_design_drawn_once_is_read_back_by_later_processes_bit_for_bit(tmp_path, monkeypatch):
    """A design is drawn once and kept (engine.sweep.design_cache): a later
    process reads the same bits without drawing; another seed, or a kept file
    that is not whole, is drawn again; no more than KEPT designs are kept;
    with the cache off nothing is kept."""
    from engine.sweep import design_cache, samples

    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path / "cache"))
    samples._DESIGNS.clear()
    drawn = {k: v.copy() for k, v in parse_sweep(_text(tmp_path / "c.zarr")).samples.draws.items()}
    (kept,) = (tmp_path / "cache" / "designs").glob("*.npy")
    real, calls = samples.unit_draws, []

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(samples, "unit_draws", counted)

    def draws(text):
        samples._DESIGNS.clear()  # as a new process
        return parse_sweep(text).samples.draws

    for name, values in draws(_text(tmp_path / "c.zarr")).items():
        np.testing.assert_array_equal(values.view(np.uint64), drawn[name].view(np.uint64))
    assert calls == []  # read back, not drawn
    draws(_text(tmp_path / "c.zarr").replace("seed = 1", "seed = 2"))
    assert len(calls) == 1  # another design: drawn
    blob = bytearray(kept.read_bytes())
    blob[-1] ^= 1
    kept.write_bytes(bytes(blob))
    for name, values in draws(_text(tmp_path / "c.zarr")).items():
        np.testing.assert_array_equal(values.view(np.uint64), drawn[name].view(np.uint64))
    assert len(calls) == 2  # the damaged file was not read: drawn again, and kept again whole
    draws(_text(tmp_path / "c.zarr"))
    assert len(calls) == 2
    for seed in range(3, 3 + design_cache.KEPT):
        draws(_text(tmp_path / "c.zarr").replace("seed = 1", f"seed = {seed}"))
    assert len(list((tmp_path / "cache" / "designs").glob("*.npy"))) == design_cache.KEPT
    monkeypatch.setenv("ROLLSWEEP_CACHE", "")
    draws(_text(tmp_path / "c.zarr").replace("seed = 1", "seed = 99"))
    assert len(calls) == 3 + design_cache.KEPT
    assert len(list((tmp_path / "cache" / "designs").glob("*.npy"))) == design_cache.KEPT
    samples._DESIGNS.clear()


def test_a_drawn_whole_number_parameter_is_refused_as_before():
    """A uniform drawn for a parameter of whole numbers: its draws are checked
    one by one (not skipped as a uniform's inside its range are)."""
    text = """
study = "rebound"
[samples]
n = 8
[samples.parameters]
model = { uniform = [0.0, 1.0] }
[axes]
spin_ratio = { values = [0.5] }
"""
    with pytest.raises(ConfigError, match="samples.parameters.model: draw .* outside the allowed range"):
        parse_sweep(text, file="s.toml")


def test_a_uniform_design_is_read_without_importing_scipy_stats(tmp_path):
    """Reading a sweep of uniform draws imports no scipy.stats (0.5-1.5 s):
    a run draws them on a thread of its own (Samples.draw_ahead)."""
    import subprocess
    import sys

    text = _text(tmp_path / "c.zarr").replace("{ truncnormal = [0.3, 0.02, 0.25, 0.35] }", "{ uniform = [0.25, 0.35] }")
    code = ("import sys; from engine import parse_sweep; s = parse_sweep(sys.stdin.read());"
            "print('scipy.stats' in sys.modules, s.config_hash[:8], len(s.samples.draws['friction']))")
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True)
    assert done.stdout.split()[0] == "False" and done.stdout.split()[2] == "64"

"""The study with nothing to solve (tests/nothing_to_solve: outputs that are
arithmetic of the parameters), whose `rollsweep run` measures the engine's own
cost a point (benchmarks/host_cost.py): a benchmark of the host side is worth
only as much as the values it writes, so the cube must hold a + b and a * b
bit for bit, and the benchmark's peer must write the same."""

import importlib.metadata
import json
import pathlib
import sys

import nothing_to_solve
import numpy as np
import pytest

import engine.study.interface
from engine import Status, open_cube, parse_sweep, run

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import host_cost  # noqa: E402


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """The study registered as host_cost.py registers it (what `pip install -e`
    of its package would write), found by its entry point."""
    folder = host_cost.write_registration(tmp_path / "site")
    monkeypatch.syspath_prepend(str(folder))
    engine.study.interface._registered.cache_clear()
    yield folder
    engine.study.interface._registered.cache_clear()


def test_the_registration_loads_the_study_by_name(registered):
    names = {ep.name for ep in importlib.metadata.entry_points(group=engine.study.interface.ENTRY_POINT_GROUP)}
    assert "nothing_to_solve" in names
    assert engine.study.interface.load_study("nothing_to_solve") is nothing_to_solve.STUDY


def test_a_run_writes_the_sum_and_product_bit_for_bit(registered, tmp_path):
    """The benchmark's sweep file (default path: no shard_size, no batch_size) on
    a small grid, run by engine.run: every point a success, its outputs numpy's
    a + b and a * b exactly (on the cube's coordinates, themselves numpy's linspace)."""
    shape = (37, 53)
    sweep = parse_sweep(host_cost.sweep_toml(shape, tmp_path / "cube.zarr"))
    report = run(sweep, progress=False)
    assert report.solved == shape[0] * shape[1] and report.failed_points == 0 and not report.failed_shards
    ds = open_cube(sweep.out)
    a, b = ds["a"].values, ds["b"].values
    np.testing.assert_array_equal(a, np.linspace(*host_cost.A_RANGE, shape[0]))
    np.testing.assert_array_equal(b, np.linspace(*host_cost.B_RANGE, shape[1]))
    assert ds["sum"].dims == ("a", "b")
    for name, expected in (("sum", a[:, None] + b[None, :]), ("product", a[:, None] * b[None, :])):
        values = ds[name].values
        assert values.dtype == np.float64
        assert np.array_equal(values.view(np.uint64), expected.view(np.uint64)), name  # bitwise, -0.0 included
    np.testing.assert_array_equal(ds["status"].values, Status.SUCCESS)


def test_the_peer_writes_the_same_values_with_the_cubes_chunks(registered, tmp_path):
    """The numpy + zarr peer (a process of its own, as host_cost.py runs it) writes
    the cube's values, with the cube's chunks and codecs."""
    shape = (37, 53)
    sweep = parse_sweep(host_cost.sweep_toml(shape, tmp_path / "cube.zarr"))
    run(sweep, progress=False)
    layout = host_cost.cube_layout(sweep.out)
    seconds, own = host_cost.peer_process(shape, layout, tmp_path / "peer.zarr")
    assert 0 < own < seconds
    import zarr

    ds = open_cube(sweep.out)
    group = zarr.open_group(tmp_path / "peer.zarr", mode="r")
    for name in ("sum", "product"):
        array = group[name]
        assert array.chunks == tuple(layout["chunks"])
        assert json.loads(json.dumps(array.metadata.to_dict()["codecs"])) == layout["codecs"]
        assert np.array_equal(array[...].view(np.uint64), ds[name].values.view(np.uint64)), name


def test_the_summary_and_profile_are_read():
    """The rate of `rollsweep run`'s summary line, and its --profile table's lines."""
    output = ("/x/cube.zarr: created; 16 shards, 1,000,000 points solved in 0.03 s (31,250,000 points/s), "
              "0 of them failed\nwhere the time went: 3.10 s in all\n  start-up     2.000 s  the interpreter\n"
              "  solving      0.032 s  the tasks\n")
    assert host_cost.solved_seconds(output, 1_000_000) == pytest.approx(0.032)
    assert host_cost.profile_lines(output) == ["where the time went: 3.10 s in all",
                                               "  start-up     2.000 s  the interpreter",
                                               "  solving      0.032 s  the tasks"]

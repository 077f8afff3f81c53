"""Every shipped study's cube is bitwise the same whatever the shard size: a
point's result depends on its parameters alone (not on its batch's width, its
lane's history or its neighbours). The rolling ball, with its critical search,
is in test_determinism.py."""

import pytest

from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.sweep.config import load_sweep

from conftest import cubes_identical, sweep_file

GRIDS = {
    "rebound": "vx = { linspace = [1.0, 8.0, 5] }\nwy = { linspace = [-200.0, 200.0, 9] }\n"
               "model = { values = [0, 1, 2] }",
    "rebound_regime": "spin_ratio = { linspace = [-1.0, 1.0, 21] }\nincidence_angle = { linspace = [0.0, 89.9, 10] }",
    "rebound_table1": "model = { values = [0, 1, 2] }\nsample = { linspace = [1, 12, 12] }",
    "rebound_landing": "topspin = { values = [-150.0, 150.0] }\nelevation = { linspace = [-25.0, 15.0, 7] }\n"
                       "launch_speed = { linspace = [3.0, 15.0, 5] }",
    # 31 speeds, the weave and capsize speeds between them: in shards of 7, four and a ragged one; the
    # demo's 301 cost 301 one-point shards for the same property.
    "bicycle": "v = { linspace = [0.0, 10.0, 31] }",
    "bicycle_response": "v = { linspace = [0.5, 10.0, 9] }",
}
SLOW = {"hoop": "a = { values = [0.1, 0.2] }\nstabilization = { values = [10.0, 100.0] }"}


def _cubes(tmp_path, study, axes, extra=""):
    cubes = []
    for shard_size in (1, 7, 1000, None):
        shard = f"shard_size = {shard_size}" if shard_size else ""
        path = sweep_file(tmp_path, f"""
            study = "{study}"
            {extra}
            [axes]
            {axes}
            [run]
            {shard}
            out = "{tmp_path / f's{shard_size}.zarr'}"
            """.replace("\n            ", "\n"), name=f"s{shard_size}.toml")
        sweep = load_sweep(path)
        run(sweep, progress=False)
        cubes.append(open_cube(sweep.out).load().drop_attrs())
    return cubes


@pytest.mark.parametrize("study", sorted(GRIDS))
def test_shard_sizes_1_7_1000_and_default_give_identical_cubes(tmp_path, study):
    first, *others = _cubes(tmp_path, study, GRIDS[study])
    for other in others:
        assert cubes_identical(first, other)


@pytest.mark.slow
def test_hoop_cubes_do_not_depend_on_the_shard_size(tmp_path):
    first, *others = _cubes(tmp_path, "hoop", SLOW["hoop"], '[parameters]\nduration = 0.2\nstep = 1e-4')
    for other in others:
        assert cubes_identical(first, other)

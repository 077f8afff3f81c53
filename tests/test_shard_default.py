"""The shards of a sweep that sets no shard_size: a 16th of the grid, at
least one call of the study's batch where the study declares one (its points
are costly: the hoop), else engine.sweep.config.SHARD_SIZE points, at most
MAX_DEFAULT_SHARD, doubled while the grid would need more than MAX_SHARDS
shards. Never the machine's: a store resumes anywhere."""

import pytest

import engine.sweep.config as config
from engine.runner.cost import estimate
from engine.sweep.config import SHARD_SIZE, load_sweep

from conftest import sweep_file


def _sweep(tmp_path, study, axes, run=""):
    return load_sweep(sweep_file(tmp_path, f'study = "{study}"\n[axes]\n{axes}\n[run]\n{run}\nout = "x.zarr"\n'))


def test_a_costly_study_gets_shards_of_one_call_each(tmp_path):
    sweep = _sweep(tmp_path, "hoop", "a = { linspace = [0.0, 0.3, 13] }\nb = { linspace = [0.3, 0.7, 9] }")
    assert sweep.shard_size == sweep.study.batch_size == 64
    cost = estimate(sweep)
    assert (cost.shards, cost.shard_points) == (2, 63)  # 13 x 9 shapes as (7, 9) and (6, 9): both cores busy


def test_a_study_without_a_batch_gets_the_engine_default(tmp_path):
    sweep = _sweep(tmp_path, "pingpong", "spin_ratio = { linspace = [0.0, 3.0, 10001] }")
    assert sweep.study.batch_size is None and sweep.shard_size == SHARD_SIZE
    assert estimate(sweep).shards == 3


def test_a_large_grid_of_cheap_points_gets_large_shards(tmp_path):
    sweep = _sweep(tmp_path, "pingpong", "spin_ratio = { linspace = [0.0, 3.0, 1000000] }")
    assert sweep.shard_size == 32768  # 10^6 / 16 = 62,500, as a power of two
    assert estimate(sweep).shards == 31
    huge = _sweep(tmp_path, "pingpong", "spin_ratio = { linspace = [0.0, 3.0, 10000] }\n"
                  "drag = { linspace = [0.05, 0.2, 10000] }")
    assert huge.shard_size == config.MAX_DEFAULT_SHARD


def test_the_sweeps_shard_size_wins(tmp_path):
    assert _sweep(tmp_path, "hoop", "a = { linspace = [0.0, 0.3, 13] }", "shard_size = 5").shard_size == 5


@pytest.mark.parametrize("limit", [1, 3, 10])
def test_the_default_grows_to_stay_within_the_shard_limit(tmp_path, monkeypatch, limit):
    monkeypatch.setattr(config, "MAX_SHARDS", limit)  # 13 x 9 shapes: two shards of 64 at most
    sweep = _sweep(tmp_path, "hoop", "a = { linspace = [0.0, 0.3, 13] }\nb = { linspace = [0.3, 0.7, 9] }")
    cost = estimate(sweep)
    assert cost.shards <= limit
    assert sweep.shard_size == (64 if limit >= 2 else 128)  # no larger than needed

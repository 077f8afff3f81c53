"""Batch sizes and lanes follow the device: fixed caps on CPU, memory on an accelerator.

No accelerator is needed: its reported memory is stubbed, the way a GPU reports it.
"""

import jax
import pytest

import engine._cost as cost
from engine import parse_sweep
from engine._config import ConfigError


def sweep(study, points, shard_size, batch_size=None):
    batch = f"batch_size = {batch_size}\n" if batch_size else ""
    axis = "spin_ratio" if study == "pingpong" else "v"
    return parse_sweep(
        f'study = "{study}"\n[axes]\n{axis} = {{ linspace = [0.5, 3.0, {points}] }}\n'
        f'[run]\nshard_size = {shard_size}\n{batch}out = "unused.zarr"\n'
    )


@pytest.fixture
def gpu_16gib(monkeypatch):
    monkeypatch.setattr(cost, "accelerator_memory", lambda: 16 * 2**30)


def test_cpu_uses_the_fixed_caps():
    if jax.devices()[0].platform != "cpu":
        pytest.skip("runs on an accelerator")
    assert cost.accelerator_memory() is None
    assert cost.batch_size(sweep("bicycle_response", 10**6, 65536)) == cost.DEFAULT_BATCH
    hinted = parse_sweep(  # a study may ask for wider calls
        'study = "rebound_regime"\n[axes]\nspin_ratio = { linspace = [0, 1, 1000000] }\n'
        '[run]\nshard_size = 1000000\nout = "unused.zarr"\n'
    )
    assert hinted.study.batch_size and cost.batch_size(hinted) == hinted.study.batch_size
    assert cost.default_lanes(10**6) == cost.MAX_LANES


def test_accelerator_batches_and_lanes_fill_a_share_of_its_memory(gpu_16gib):
    share = 16 * 2**30 // (cost.DEVICE_SHARE * cost.LANE_BYTES)  # 65,536 lanes
    # A vmapped study takes whole shards up to the share; never more than a shard.
    assert cost.batch_size(sweep("bicycle", 10**6, 10**6)) == share
    assert cost.batch_size(sweep("bicycle", 10**6, 4096)) == 4096
    # A study on lanes: the whole shard per call, an eighth of it in flight, capped by memory.
    assert cost.batch_size(sweep("pingpong", 10**6, 10**6)) == 10**6
    assert cost.default_lanes(400_000) == 400_000 // cost.POINTS_PER_LANE
    assert cost.default_lanes(10**7) == share
    # An explicit batch is kept.
    assert cost.batch_size(sweep("bicycle", 10**6, 10**6, batch_size=1000)) == 1000


def test_a_batch_too_large_for_the_device_is_refused_naming_the_key(gpu_16gib):
    big = sweep("bicycle", 10**6, 10**6, batch_size=10**6)  # 10^6 x 64 KiB = 61 GiB
    with pytest.raises(ConfigError, match=r"run\.batch_size.*device has 16\.0 GiB; lower batch_size"):
        cost.check_memory(big)
    cost.check_memory(sweep("bicycle", 10**6, 10**6, batch_size=10**4))  # 0.6 GiB: fits


def test_default_threads_follow_the_device(monkeypatch, gpu_16gib):
    """On an accelerator, a run's default shard threads share the one device: few
    enough that their calls fit in its memory (16 cores would otherwise mean 16
    calls of a quarter of it each). On CPU: two per core."""
    import engine._execute as execute

    monkeypatch.setattr(execute, "cores", lambda: 16)
    threads = execute.default_workers("inline")
    assert threads == execute.ACCELERATOR_THREADS < cost.DEVICE_SHARE
    assert execute.worker_threads(1) == execute.ACCELERATOR_THREADS
    for executor in ("inline", "local"):  # the default sweep fits as it runs
        workers = execute.default_workers(executor)
        cost.check_memory(sweep("pingpong", 10**6, 10**5), execute.in_flight(executor, workers))
    monkeypatch.setattr(cost, "accelerator_memory", lambda: None)
    assert execute.default_workers("inline") == execute.THREADS_PER_CORE * 16


def test_large_shards_run_one_thread_per_core_by_default(monkeypatch):
    """Two threads per core only where their shards fit in memory: a sweep whose
    shards fit one per core still runs with the default, as it did before."""
    import engine._execute as execute

    monkeypatch.setattr(cost, "accelerator_memory", lambda: None)
    monkeypatch.setattr(execute, "cores", lambda: 2)
    big = sweep("bicycle", 10**6, 10**5)
    shard = cost.estimate(big, 1).shard_bytes
    # host memory for two such shards at a time (budget: half of it, shared out)
    monkeypatch.setattr(cost.psutil, "virtual_memory", lambda: type("Memory", (), {"total": 4 * shard + 1})())
    assert execute.default_workers("inline", big) == 2
    cost.check_memory(big, execute.in_flight("inline", 2))
    small = sweep("bicycle", 10**6, 10**3)
    assert execute.default_workers("inline", small) == execute.THREADS_PER_CORE * 2

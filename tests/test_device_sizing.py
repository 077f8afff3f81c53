"""The plan follows the device: fixed caps on CPU, memory on an accelerator.

No accelerator is needed: a Device is stubbed, as a GPU reports itself.
"""

import dataclasses

import pytest

import engine.runner.cost as cost
import engine.runner.execute as execute
import engine.solve.plan as plan_module
from engine import parse_sweep
from engine.solve import Device, make_plan
from engine.solve.lanes import CPU_BATCH as LANES_CPU_BATCH
from engine.solve.lanes import MAX_LANES, LanesSolver
from engine.solve.vmapped import CPU_BATCH, DEVICE_SHARE, POINT_BYTES, VmappedSolver
from engine.sweep.config import ConfigError

GPU = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)
CPU = Device(platform="cpu", count=1, memory=None, cores=16)


def sweep(study, points, shard_size, batch_size=None):
    batch = f"batch_size = {batch_size}\n" if batch_size else ""
    axis = "spin_ratio" if study == "pingpong" else "v"
    return parse_sweep(
        f'study = "{study}"\n[axes]\n{axis} = {{ linspace = [0.5, 3.0, {points}] }}\n'
        f'[run]\nshard_size = {shard_size}\n{batch}out = "unused.zarr"\n'
    )


@pytest.fixture
def on(monkeypatch):
    """Make this process see `device` as its default backend, beside the host's CPU."""
    def use(device):
        def detect(platform=None):
            return device if platform in (None, device.platform) else dataclasses.replace(CPU, cores=device.cores)

        monkeypatch.setattr(plan_module, "detect", detect)
        monkeypatch.setattr(execute, "detect_device", detect)
    return use


def test_cpu_uses_the_fixed_caps(on):
    on(CPU)
    response = sweep("bicycle_response", 10**6, 65536)
    plan = cost.plan_for(response)
    assert (plan.solver.name, plan.batch) == ("lanes", LANES_CPU_BATCH)
    assert make_plan(response.study, CPU, solver="vmapped", points=10**6).batch == CPU_BATCH
    hinted = parse_sweep(  # a study may ask for wider calls
        'study = "rebound_regime"\n[axes]\nspin_ratio = { linspace = [0, 1, 1000000] }\n'
        '[run]\nshard_size = 1000000\nout = "unused.zarr"\n'
    )
    assert cost.plan_for(hinted).batch == hinted.study.batch_size
    lanes = cost.plan_for(sweep("pingpong", 10**6, 10**5))
    assert lanes.solver.name == "lanes" and lanes.width % 16 == 0  # MAX_LANES in whole vectors
    assert MAX_LANES <= lanes.width < MAX_LANES + 16


def test_the_batch_never_depends_on_the_shard_size(on):
    """A point's result must not depend on how the grid was cut: one batch for
    every shard size; a small sweep gets a small batch (in whole vectors)."""
    for device in (CPU, GPU):
        on(device)
        for study in ("pingpong", "bicycle"):
            plans = {cost.plan_for(sweep(study, 10**4, shard)) for shard in (1, 7, 1000, 10**4)}
            assert len(plans) == 1
    on(CPU)
    assert cost.plan_for(sweep("bicycle", 5, 1)).batch == 16


def test_accelerator_batches_fill_a_share_of_its_memory(on):
    on(GPU)
    share = GPU.memory // (DEVICE_SHARE * POINT_BYTES)
    assert cost.plan_for(sweep("bicycle", 10**6, 10**6)).batch == share
    assert cost.plan_for(sweep("bicycle", 10**6, 4096)).batch == share
    # The rolling ball goes fused on an accelerator (lanes measured 140x slower there).
    assert cost.plan_for(sweep("pingpong", 10**6, 10**6)).solver.name == "fused"
    forced = make_plan(sweep("pingpong", 10, 10).study, GPU, solver="lanes")
    assert forced.width == forced.batch // 8  # no CPU cap on an accelerator
    # An explicit batch is kept.
    assert cost.plan_for(sweep("bicycle", 10**6, 10**6, batch_size=1000)).batch == 1000


def test_a_solver_that_cannot_serve_a_study_says_why():
    study = sweep("bicycle", 10, 10).study
    with pytest.raises(ValueError, match="lanes solver cannot solve study 'bicycle'.*not declared as a HybridPoint"):
        make_plan(study, CPU, solver="lanes")
    assert VmappedSolver().unsupported(study) is None and LanesSolver().unsupported(study)


def test_a_batch_too_large_for_the_device_is_refused_naming_the_key(on):
    on(GPU)
    big = sweep("bicycle", 10**6, 10**6, batch_size=2 * 10**6)  # 2 10^6 x 16 KiB = 31 GiB
    with pytest.raises(ConfigError, match=r"run\.batch_size.*device has 16\.0 GiB; lower batch_size"):
        cost.check_memory(big)
    cost.check_memory(sweep("bicycle", 10**6, 10**6, batch_size=10**4))  # 0.15 GiB: fits


def test_default_threads_follow_the_device(on):
    """On an accelerator, a run's default shard threads share the one device: few
    enough that their calls fit in its memory (16 cores would otherwise mean 16
    calls of a quarter of it each). On CPU: two per core."""
    on(GPU)
    threads = execute.default_workers("inline")
    assert threads == execute.ACCELERATOR_THREADS < DEVICE_SHARE
    assert execute.worker_threads(1) == execute.ACCELERATOR_THREADS
    for executor in ("inline", "local"):  # the default sweep fits as it runs
        workers = execute.default_workers(executor)
        cost.check_memory(sweep("pingpong", 10**6, 10**5), execute.in_flight(executor, workers))
    on(CPU)
    assert execute.default_workers("inline") == execute.THREADS_PER_CORE * 16


def test_large_shards_run_one_thread_per_core_by_default(monkeypatch, on):
    """Two threads per core only where their shards fit in memory: a sweep whose
    shards fit one per core still runs with the default, as it did before."""
    on(Device(platform="cpu", cores=2))
    big = sweep("bicycle", 10**6, 10**5)
    shard = cost.estimate(big, 1).shard_bytes
    # host memory for two such shards at a time (budget: half of it, shared out)
    monkeypatch.setattr(cost, "memory_bytes", lambda: 4 * shard + 1)
    assert execute.default_workers("inline", big) == 2
    cost.check_memory(big, execute.in_flight("inline", 2))
    small = sweep("bicycle", 10**6, 10**3)
    assert execute.default_workers("inline", small) == execute.THREADS_PER_CORE * 2


def test_a_small_vmapped_sweep_on_a_gpu_machine_solves_on_its_cpu_cores(on):
    """On a GPU, a vmapped sweep of fewer than GPU_MIN_POINTS points is routed to
    the host's cores (plan, threads and memory checks alike); a larger one, or a
    study the GPU solves in the fused kernel, stays on the GPU."""
    on(GPU)
    hoop = parse_sweep('study = "hoop"\n[axes]\na = { linspace = [0.0, 0.3, 117] }\n[run]\nout = "unused.zarr"\n')
    plan = cost.plan_for(hoop)
    assert plan.device.platform == "cpu" and plan.device.cores == GPU.cores and plan.solver.name == "vmapped"
    assert execute.default_workers("inline", hoop) == execute.THREADS_PER_CORE * GPU.cores
    assert cost.estimate(hoop).device_memory is None  # the host's memory budget applies
    small = plan_module.GPU_MIN_POINTS - 1
    assert cost.plan_for(sweep("bicycle", small, 4096)).device.platform == "cpu"
    assert cost.plan_for(sweep("bicycle", small + 1, 4096)).device == GPU
    fused = cost.plan_for(sweep("pingpong", 10, 10))
    assert (fused.device, fused.solver.name) == (GPU, "fused")

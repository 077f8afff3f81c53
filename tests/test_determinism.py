"""Results do not depend on batching, shard size or worker count."""

import jax
import numpy as np
import pytest

from engine import SolverSettings
from engine._config import load_sweep
from engine._cube import open_cube
from engine._evaluate import _guarded, evaluate
from engine._execute import run
from studies.pingpong import STUDY

from conftest import PINGPONG_DEFAULTS, cubes_identical

SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12)


def test_vmapped_equals_per_point_loop():
    q = np.linspace(0.0, 3.0, 11)
    columns = {k: np.full(q.size, v) for k, v in PINGPONG_DEFAULTS.items()} | {"spin_ratio": q}
    batched = evaluate(STUDY, SETTINGS, columns, batch_size=4)
    single = jax.jit(_guarded(STUDY, SETTINGS, tuple(o.name for o in STUDY.outputs)))
    for i in range(q.size):
        outputs, status, steps, events = single({k: v[i] for k, v in columns.items()})
        assert status == batched.status[i] and steps == batched.num_steps[i]
        for name, value in outputs.items():
            # Same arithmetic, different program: equal to rounding.
            np.testing.assert_allclose(batched.outputs[name][i], value, rtol=1e-14, atol=1e-15)


def test_identical_for_shard_sizes(small_sweep, tmp_path):
    cubes = []
    for shard_size in (3, 7, 64):
        path = small_sweep(shard_size=shard_size, extra="""
            [critical]
            output = "final_displacement"
            axis = "spin_ratio"
            bracket = [1.0, 3.0]""")
        sweep = load_sweep(path, out=str(tmp_path / f"s{shard_size}.zarr"))
        run(sweep, progress=False)
        cubes.append(open_cube(sweep.out).load())
    assert cubes_identical(cubes[0], cubes[1]) and cubes_identical(cubes[0], cubes[2])


@pytest.mark.parametrize("workers", [1, 2])
def test_identical_for_worker_counts(small_sweep, tmp_path, workers):
    path = small_sweep(shard_size=4)
    inline = load_sweep(path, out=str(tmp_path / "inline.zarr"))
    run(inline, progress=False)
    local = load_sweep(path, out=str(tmp_path / f"w{workers}.zarr"))
    run(local, executor="local", workers=workers, progress=False)
    assert cubes_identical(open_cube(inline.out).load(), open_cube(local.out).load())


def test_existing_scheduler_address(small_sweep, tmp_path):
    from distributed import LocalCluster

    path = small_sweep(shard_size=6)
    inline = load_sweep(path, out=str(tmp_path / "inline.zarr"))
    run(inline, progress=False)
    remote = load_sweep(path, out=str(tmp_path / "remote.zarr"))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        report = run(remote, scheduler=cluster.scheduler_address, progress=False)
    assert report.shards_run == 4
    assert cubes_identical(open_cube(inline.out).load(), open_cube(remote.out).load())

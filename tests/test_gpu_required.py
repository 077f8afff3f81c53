"""A job that asked SLURM for a GPU and whose JAX has none fails its first shard
in one line instead of solving on the CPU."""

import jax
import pytest

from engine._config import load_sweep
from engine._cube import done_shards, failed_shards, prepare, slurm_folder
from engine._execute import pending_shards, solve_task
from engine._jax_setup import REQUIRE_GPU, DeviceError
from engine._slurm import write_share
from engine._submit import write_sweep
from engine._tasks import Task
from engine.cli import main

pytestmark = pytest.mark.skipif(jax.default_backend() == "gpu", reason="this machine has the GPU the job asks for")


@pytest.fixture
def shared_store(small_sweep):
    sweep = load_sweep(small_sweep())
    prepare(sweep, sweep.out)
    share = write_share(slurm_folder(sweep.out), pending_shards(sweep, sweep.out), 1)
    write_sweep(share, sweep)
    return sweep, share


def test_array_task_without_its_gpu_fails_its_first_shard_in_one_line(shared_store, monkeypatch, capsys):
    sweep, share = shared_store
    monkeypatch.setenv(REQUIRE_GPU, "1")
    assert main(["work", str(sweep.out), "--task", "0", "--share", str(share)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and REQUIRE_GPU in err and "JAX runs on cpu" in err
    failed = failed_shards(sweep.out)
    assert [f["shard"] for f in failed] == [0] and REQUIRE_GPU in failed[0]["error"]
    assert not done_shards(sweep.out, "grid")  # nothing solved on the CPU


def test_dask_task_without_its_gpu_raises(shared_store, monkeypatch):
    sweep, _ = shared_store
    monkeypatch.setenv(REQUIRE_GPU, "1")
    with pytest.raises(DeviceError, match="JAX runs on cpu"):
        solve_task(sweep, str(sweep.out), Task("grid", (0,), (pending_shards(sweep, sweep.out)[0][2],)))
    assert not done_shards(sweep.out, "grid")

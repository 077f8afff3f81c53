"""A job that asked SLURM for a GPU and whose JAX has none fails its first shard
in one line instead of solving on the CPU."""

import jax
import pytest

from engine._jax_setup import REQUIRE_GPU, DeviceError
from engine.cli.commands import main
from engine.cube.markers import Markers
from engine.cube.prepare import prepare
from engine.cube.store import Cube
from engine.runner.execute import pending_shards, solve_task
from engine.runner.slurm import write_share
from engine.runner.submit import write_sweep
from engine.runner.tasks import Task
from engine.sweep.config import load_sweep

pytestmark = pytest.mark.skipif(jax.default_backend() == "gpu", reason="this machine has the GPU the job asks for")


@pytest.fixture
def shared_store(small_sweep):
    sweep = load_sweep(small_sweep())
    prepare(sweep, sweep.out)
    share = write_share(Markers(sweep.out).slurm_folder, pending_shards(Cube(sweep.out, sweep)), 1)
    write_sweep(share, sweep)
    return sweep, share


def test_array_task_without_its_gpu_fails_its_first_shard_in_one_line(shared_store, monkeypatch, capsys):
    sweep, share = shared_store
    monkeypatch.setenv(REQUIRE_GPU, "1")
    assert main(["work", str(sweep.out), "--task", "0", "--share", str(share)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and REQUIRE_GPU in err and "JAX runs on cpu" in err
    failed = Markers(sweep.out).failed()
    assert [f["shard"] for f in failed] == [0] and REQUIRE_GPU in failed[0]["error"]
    assert not Markers(sweep.out).done("grid")  # nothing solved on the CPU


def test_dask_task_without_its_gpu_raises(shared_store, monkeypatch):
    sweep, _ = shared_store
    monkeypatch.setenv(REQUIRE_GPU, "1")
    with pytest.raises(DeviceError, match="JAX runs on cpu"):
        solve_task(Cube(sweep.out, sweep), Task("grid", (0,), (pending_shards(Cube(sweep.out, sweep))[0][2],)))
    assert not Markers(sweep.out).done("grid")

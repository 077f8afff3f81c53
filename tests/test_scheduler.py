"""Runs on an existing dask cluster (--scheduler): refused in one line, writing
nothing, when it cannot be reached; stopped, keeping what is done, when it loses
its workers; the same cube as inline; the workers' JAX settings left as found."""

import socket
import threading
import time

import pytest

from engine.cli.commands import main
from engine.cube.markers import Markers
from engine.cube.store import open_cube
from engine.runner.execute import ClusterLost, run
from engine.sweep.config import load_sweep

from conftest import cubes_identical


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("address, expected", [
    # The wait is bounded by the engine's connect timeout (dask's own is 30 s),
    # which the refusal states: the message is checked, not a wall-clock time.
    (f"tcp://127.0.0.1:{closed_port()}", "no dask scheduler answered at tcp://127.0.0.1:"),
    ("foo", "'foo' is not a dask scheduler address"),
], ids=["closed-port", "not-an-address"])  # fixed ids: xdist's workers must collect the same names (the port varies)
def test_unreachable_scheduler_is_refused_writing_nothing(small_sweep, tmp_path, capsys, address, expected):
    config = small_sweep()
    code = main(["run", str(config), "--scheduler", address, "--connect-timeout", "0.5", "--quiet"])
    assert code != 0
    line = one_error_line(capsys)
    assert "--scheduler" in line and expected in line and "kept" not in line
    if "answered" in expected:
        assert "within 0.5 s (--connect-timeout)" in line
    assert not (tmp_path / "cube.zarr").exists()


@pytest.mark.parametrize("executor", ["inline", "slurm"])
def test_scheduler_with_another_executor_is_refused(small_sweep, tmp_path, capsys, executor):
    code = main(["run", str(small_sweep()), "--scheduler", "tcp://127.0.0.1:8786", "--executor", executor])
    assert code != 0
    assert f"cannot be combined with --executor {executor}" in one_error_line(capsys)
    assert not (tmp_path / "cube.zarr").exists()


def test_cluster_without_workers_ends_the_run_keeping_what_is_done(small_sweep, tmp_path, capsys):
    from distributed import LocalCluster

    config = small_sweep()
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        code = main(["run", str(config), "--scheduler", cluster.scheduler_address, "--lost-after", "1", "--quiet"])
    assert code != 0
    line = one_error_line(capsys)
    assert cluster.scheduler_address in line and "no dask worker for 1 s" in line
    # Nothing was solved, so nothing is said to be kept (the line says so only when a shard is done).
    assert "kept" not in line
    assert (tmp_path / "cube.zarr").exists() and not Markers(tmp_path / "cube.zarr").done("grid")


def test_workers_lost_mid_run(small_sweep, tmp_path):
    from distributed import LocalCluster

    sweep = load_sweep(small_sweep(axes='spin_ratio = { linspace = [0.0, 3.0, 400] }', shard_size=5))
    store = sweep.out
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        outcome = {}

        def target():
            try:
                run(sweep, scheduler=cluster.scheduler_address, lost_after=1, progress=False)
            except ClusterLost as err:
                outcome["error"] = err

        thread = threading.Thread(target=target)
        thread.start()
        while thread.is_alive() and not (store.exists() and Markers(store).done("grid")):
            time.sleep(0.005)
        cluster.scale(0)
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert outcome["error"].filename == cluster.scheduler_address
    assert 0 < len(Markers(store).done("grid")) < 80


def test_existing_cluster_matches_inline_and_leaves_worker_settings(small_sweep, tmp_path):
    from distributed import Client, LocalCluster

    path = small_sweep(shard_size=6)
    inline = load_sweep(path, out=str(tmp_path / "inline.zarr"))
    run(inline, progress=False)
    remote = load_sweep(path, out=str(tmp_path / "remote.zarr"))
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        report = run(remote, scheduler=cluster.scheduler_address, progress=False)
        with Client(cluster) as client:
            x64 = client.run(lambda: __import__("jax").config.jax_enable_x64)
    assert report.shards_run == 4
    assert cubes_identical(open_cube(inline.out).load(), open_cube(remote.out).load())
    assert list(x64.values()) == [False]  # float64 was the tasks' own, not the worker process's


def test_a_shard_that_raises_on_the_cluster_is_recorded(small_sweep, monkeypatch):
    from distributed import LocalCluster

    import engine.runner.shard as shard
    from engine.cube.markers import Markers

    solve = shard.RUNNERS["grid"]

    def fails_on_shard_1(cube, plan, task):
        if 1 in task.shards:
            raise ValueError("a study bug")
        return solve(cube, plan, task)

    monkeypatch.setitem(shard.RUNNERS, "grid", fails_on_shard_1)
    sweep = load_sweep(small_sweep())
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        report = run(sweep, scheduler=cluster.scheduler_address, progress=False)
    assert report.failed_shards == 1 and report.shards_run == 5
    assert [(f["shard"], f["error"]) for f in Markers(sweep.out).failed()] == [(1, "ValueError: a study bug")]

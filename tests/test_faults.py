"""Faults: shards that raise, killed workers, concurrent runs, incompatible stores."""

import numpy as np
import pytest

from engine import Status
from engine.cube.markers import Markers
from engine.cube.status_report import progress
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.sweep.config import load_sweep

from conftest import cubes_identical, run_marking_slowly


def test_a_shard_that_raises_is_recorded_and_the_rest_completes(small_sweep, monkeypatch, tmp_path):
    """A study bug on some points: that shard is marked failed with its error,
    every other shard is written, and the next run retries only it."""
    sweep = load_sweep(small_sweep(shard_size=5))
    from engine.solve.evaluate import queue_calls as real_queue_calls

    calls = {"n": 0}

    def flaky_queue_calls(study, settings, params, **options):  # a grid task's calls (engine.runner.shard)
        if np.any(np.isclose(params["spin_ratio"], 3.0)):  # the last shard holds q = 3
            calls["n"] += 1
            raise FloatingPointError("study bug: division by a zero radius")
        return real_queue_calls(study, settings, params, **options)

    monkeypatch.setattr("engine.runner.shard.queue_calls", flaky_queue_calls)
    report = run(sweep, progress=False)
    assert report.failed_shards == 1 and calls["n"] == 1
    failures = Markers(sweep.out).failed()
    assert len(failures) == 1 and "FloatingPointError: study bug" in failures[0]["error"]
    assert len(Markers(sweep.out).done("grid")) == 4  # 23 points in shards of 5: 5 shards
    status = open_cube(sweep.out)["status"].values
    assert np.count_nonzero(status == Status.PENDING) == 3 and np.count_nonzero(status == Status.SUCCESS) == 20
    assert "failed grid shard 4: FloatingPointError" in progress(sweep.out).describe()

    monkeypatch.setattr("engine.runner.shard.queue_calls", real_queue_calls)  # the bug fixed: rerun retries only it
    report = run(sweep, progress=False)
    assert report.shards_run == 1 and report.failed_shards == 0 and not Markers(sweep.out).failed()
    reference = load_sweep(small_sweep(shard_size=5), out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(sweep.out).load(), open_cube(reference.out).load())


def test_verify_finds_a_done_shard_without_values(small_sweep, capsys):
    from engine.cli.commands import main

    sweep = load_sweep(small_sweep(shard_size=5))
    run(sweep, progress=False)
    assert main(["verify", str(sweep.out)]) == 0 and "sound" in capsys.readouterr().out
    for chunk in (sweep.out / "status" / "c").rglob("*"):  # lose the status chunk of shard 2
        if chunk.is_file() and chunk.name == "2":
            chunk.unlink()
    assert main(["verify", str(sweep.out)]) == 1
    assert "grid shard 2 status differs from what was written (chunk lost or damaged)" in capsys.readouterr().out


def test_store_of_another_format_is_refused_clearly(small_sweep, capsys):
    import json

    from engine.cli.commands import main

    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    meta = sweep.out / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["store_format"] = 0
    doc["consolidated_metadata"] = None  # the attributes are read from here
    meta.write_text(json.dumps(doc))
    for command in (["run", str(small_sweep())], ["status", str(sweep.out)], ["verify", str(sweep.out)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "in store format 0; this engine reads format 1" in err, err


def test_a_second_run_on_the_same_store_is_refused(small_sweep, tmp_path):
    """Two real processes: while one runs, the other is told the store is in use;
    the first finishes a cube identical to an undisturbed run."""
    import subprocess
    import sys
    import time

    # 41 one-point shards: the first run marks them over 2 s at least, the
    # second asks for the store within milliseconds of the first marker.
    path = small_sweep(axes='spin_ratio = { linspace = [0.0, 3.0, 41] }', shard_size=1)
    sweep = load_sweep(path)
    args = ["run", str(path), "--quiet"]
    # The second process is started first and waits, its imports done, so that
    # it asks for the store within milliseconds of the first run's first shard;
    # the first marks its shards done slowly, so it is still running then.
    waiting = (
        "import sys, engine.cli, engine.runner.execute, engine.cube.store; engine.load_study('pingpong'); "
        "print('ready', flush=True); sys.stdin.readline(); "
        f"sys.exit(engine.cli.main({args!r}))"
    )
    second = subprocess.Popen([sys.executable, "-c", waiting], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert second.stdout.readline().strip() == "ready"
    first = subprocess.Popen(run_marking_slowly([*args, "--workers", "1"]))
    deadline = time.time() + 120
    while not Markers(sweep.out).done("grid") and time.time() < deadline:
        time.sleep(0.01)
    _, stderr = second.communicate("go\n", timeout=120)
    assert second.returncode == 2 and "in use by another rollsweep run (pid" in stderr, stderr
    assert first.wait(timeout=300) == 0
    reference = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(sweep.out).load(), open_cube(reference.out).load())


def test_killed_local_worker_is_retried_and_the_cube_is_identical(small_sweep, tmp_path):
    """SIGKILL one worker process of the embedded dask cluster mid-run: dask
    retries its shard on a restarted worker; nothing is lost or duplicated."""
    import os
    import signal
    import threading
    import time

    import psutil

    path = small_sweep(axes='spin_ratio = { linspace = [0.0, 3.0, 241] }', shard_size=2)
    sweep = load_sweep(path)
    killed = []

    def kill_a_worker():
        deadline = time.time() + 120
        while len(Markers(sweep.out).done("grid")) < 5 and time.time() < deadline:
            time.sleep(0.05)
        # The nannies live in this process; each worker is a spawned child of it.
        workers = [p for p in psutil.Process().children() if "spawn_main" in " ".join(p.cmdline())]
        if workers:
            os.kill(workers[0].pid, signal.SIGKILL)
            killed.append(workers[0].pid)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    report = run(sweep, executor="local", workers=2, progress=False)
    killer.join()
    assert killed and report.failed_shards == 0
    assert len(Markers(sweep.out).done("grid")) == 121
    reference = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(sweep.out).load(), open_cube(reference.out).load())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("error", [(28, "No space left on device"), (30, "Read-only file system")])
def test_disk_errors_stop_cleanly_and_leave_a_resumable_store(
    small_sweep, monkeypatch, capsys, tmp_path, error, threads
):
    """Simulated (tests run as root, for whom permissions do not bite): the third
    shard's write fails; the run stops with one clear line, the finished shards
    are kept (two, one shard a task and a task at a time; with two threads,
    tasks already running finish too), and the same command afterwards
    completes the cube."""
    import engine.runner.tasks
    from engine.cli.commands import main
    from engine.cube.store import Cube

    path = small_sweep(shard_size=5)
    real_write = Cube.write_regions
    writes = {"n": 0}

    def failing_write(cube, regions):
        writes["n"] += len(regions)
        if writes["n"] == 3:
            raise OSError(error[0], error[1], str(cube.path))
        return real_write(cube, regions)

    monkeypatch.setattr(engine.runner.tasks, "task_points", lambda *args: 1)  # a task per shard
    monkeypatch.setattr(Cube, "write_regions", failing_write)
    assert main(["run", str(path), "--quiet", "--workers", str(threads)]) == 2
    err = capsys.readouterr().err
    assert f"cube.zarr: {error[1]}; shards already done are kept" in err
    store = tmp_path / "cube.zarr"
    done = len(Markers(store).done("grid"))
    assert (done == 2 if threads == 1 else 2 <= done < 5) and not Markers(store).failed()

    monkeypatch.setattr(Cube, "write_regions", real_write)
    assert main(["run", str(path), "--quiet"]) == 0
    reference = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(store).load(), open_cube(reference.out).load())

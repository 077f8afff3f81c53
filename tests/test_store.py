"""The cube on disk: structure, resume after a kill, refusal of another config."""

import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from engine import Status
from engine._config import load_sweep
from engine._cube import StoreError, done_shards, open_cube
from engine._execute import default_workers, run

from conftest import cubes_identical


def tree_digest(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_cube_is_self_describing(small_sweep):
    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    ds = open_cube(sweep.out)
    assert ds["final_displacement"].attrs["units"] == "m"
    assert ds["spin_ratio"].attrs["units"] == "1"
    assert ds["status"].dtype == np.int8 and "success" in ds["status"].attrs["flag_meanings"]
    assert ds.attrs["config_hash"] == sweep.config_hash
    assert ds.attrs["dtype"] == "float64" and ds["final_displacement"].dtype == np.float64
    for key in ("engine_version", "git_commit", "device", "versions", "created", "config"):
        assert ds.attrs[key]
    assert ds.attrs["parameter.drag"] == 0.1
    assert ds["final_displacement"].encoding["chunks"] == (5,)  # chunk = shard


def test_second_config_on_same_store_is_refused_and_store_unchanged(small_sweep):
    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    before = tree_digest(sweep.out)
    other = load_sweep(small_sweep(axes='spin_ratio = { linspace = [0.0, 2.0, 5] }'))
    with pytest.raises(StoreError, match="another config"):
        run(other, progress=False)
    assert tree_digest(sweep.out) == before
    run(other, overwrite=True, progress=False)
    assert open_cube(sweep.out).sizes["spin_ratio"] == 5


def test_rerun_of_a_complete_cube_computes_nothing(small_sweep):
    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    report = run(sweep, progress=False)
    assert report.state == "complete" and report.shards_run == 0


def test_kill_then_resume_gives_identical_cube(small_sweep, tmp_path):
    # Many one-point shards so the kill lands mid-run.
    path = small_sweep(axes='spin_ratio = { linspace = [0.0, 3.0, 61] }', shard_size=1)
    killed = load_sweep(path, out=str(tmp_path / "killed.zarr"))
    cmd = [sys.executable, "-m", "engine.cli", "run", str(path), "--out", str(killed.out), "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.time() + 120
    while len(done_shards(killed.out, "grid")) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(done_shards(killed.out, "grid"))
    assert 5 <= done < 61, f"kill did not land mid-run ({done} shards done)"
    ds = open_cube(killed.out).load()
    # Written but not yet marked done: at most the shards in flight when killed.
    in_flight = default_workers("inline")
    assert np.count_nonzero(ds["status"].values == Status.PENDING) >= 61 - done - in_flight

    report = run(killed, progress=False)
    assert report.state == "resumed" and report.shards_run <= 61 - done

    reference = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(killed.out).load(), open_cube(reference.out).load())

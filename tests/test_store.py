"""The cube on disk: structure, resume after a kill, refusal of another config."""

import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

from engine import Status
from engine.cube.chunks import digest
from engine.cube.markers import Markers
from engine.cube.store import StoreError, open_cube
from engine.runner.cost import plan_for
from engine.runner.execute import default_workers, run
from engine.runner.tasks import task_points
from engine.sweep.config import load_sweep

from conftest import cubes_identical, run_marking_slowly


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
    # dimensionless: no units attribute, so xarray's labels say no "[1]"; long_name is the display label
    assert "units" not in ds["spin_ratio"].attrs and ds["spin_ratio"].attrs["long_name"].startswith("spin ratio")
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
    _usable_by_another_thread(sweep.out)  # the refused run keeps no hold on it
    run(other, overwrite=True, progress=False)
    assert open_cube(sweep.out).sizes["spin_ratio"] == 5


def _usable_by_another_thread(store):
    import threading

    from engine.cube.lock import locked

    errors = []

    def use():
        try:
            with locked(store):
                pass
        except StoreError as err:
            errors.append(err)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert not errors, errors


def test_rerun_of_a_complete_cube_computes_nothing(small_sweep):
    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    report = run(sweep, progress=False)
    assert report.state == "complete" and report.shards_run == 0


def test_kill_then_resume_gives_identical_cube(small_sweep, tmp_path):
    # Many one-point shards, marked done slowly, so the kill lands mid-run.
    n = 101
    path = small_sweep(axes=f'spin_ratio = {{ linspace = [0.0, 3.0, {n}] }}', shard_size=1)
    killed = load_sweep(path, out=str(tmp_path / "killed.zarr"))
    cmd = [sys.executable, "-m", "engine.cli", "run", str(path), "--out", str(killed.out), "--quiet"]
    proc = subprocess.Popen(run_marking_slowly(cmd[3:]), start_new_session=True)
    deadline = time.time() + 120
    while len(Markers(killed.out).done("grid")) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(Markers(killed.out).done("grid"))
    assert 5 <= done < n, f"kill did not land mid-run ({done} shards done)"
    ds = open_cube(killed.out).load()
    # Written but not yet marked done: at most the shards of the tasks in flight
    # when killed (shards of one point here).
    workers = default_workers("inline")
    in_flight = workers * task_points(plan_for(killed), n, workers)
    assert np.count_nonzero(ds["status"].values == Status.PENDING) >= n - done - in_flight

    report = run(killed, progress=False)
    assert report.state == "resumed" and report.shards_run <= n - done

    reference = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(killed.out).load(), open_cube(reference.out).load())


def _two_configs(small_sweep, tmp_path):
    """Two sweep files on one out path that differ only in max_steps."""
    axes = 'spin_ratio = { linspace = [0.0, 3.0, 41] }'
    few = small_sweep(axes=axes, extra="max_steps = 24", shard_size=2).rename(tmp_path / "few.toml")
    many = small_sweep(axes=axes, extra="max_steps = 4096", shard_size=2)
    return load_sweep(few), load_sweep(many)


def _winner_is_whole(sweeps, winner, tmp_path):
    """The cube on the shared path is exactly the winner's: its attributes and
    every value, as an undisturbed run of the winner's config writes them."""
    from engine.cube.verify import verify

    store = sweeps[winner].out
    assert open_cube(store).attrs["config_hash"] == sweeps[winner].config_hash
    assert verify(store) == []
    reference = load_sweep(sweeps[winner].file, out=str(tmp_path / f"reference-{winner}.zarr"))
    run(reference, progress=False)
    assert cubes_identical(open_cube(store).load(), open_cube(reference.out).load())


def test_simultaneous_runs_in_threads_one_owns_the_store(small_sweep, tmp_path):
    import threading

    sweeps = _two_configs(small_sweep, tmp_path)
    barrier, outcomes = threading.Barrier(2), [None, None]

    def start(i):
        barrier.wait()
        try:
            outcomes[i] = run(sweeps[i], progress=False, overwrite=True)
        except StoreError as err:
            outcomes[i] = err

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [i for i, o in enumerate(outcomes) if isinstance(o, StoreError)]
    # Both may succeed one after the other (overwrite), but never interleaved: the
    # cube is then the later one's. Either way it is one config's, whole.
    for i in refused:
        assert "in use by another rollsweep run (pid" in str(outcomes[i])
    if len(refused) == 1:
        winner = 1 - refused[0]
    else:
        assert not refused
        winner = 0 if open_cube(sweeps[0].out).attrs["config_hash"] == sweeps[0].config_hash else 1
    _winner_is_whole(sweeps, winner, tmp_path)


@pytest.mark.cpu_only(reason="the refused run's whole stderr must be one line, and a process that starts JAX's CUDA "
                              "backend may log to it first (XLA, CUDA); its cube is compared with one solved in this "
                              "process, so its processes cannot be sent to the CPU (children_on_cpu)")
def test_simultaneous_runs_in_processes_one_owns_the_store(small_sweep, tmp_path):
    """Two processes started together with different configs on one out path:
    exactly one writes it, the other is refused with one line, and the cube is
    wholly the writer's."""
    sweeps = _two_configs(small_sweep, tmp_path)
    procs = [
        subprocess.Popen([sys.executable, "-m", "engine.cli", "run", s.file, "--quiet", "--workers", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for s in sweeps
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(i for i, (code, _) in enumerate(results) if code == 2)
    err = results[loser][1].strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "in use by another rollsweep run (pid" in err or "holds a cube of another config" in err, err
    _winner_is_whole(sweeps, 1 - loser, tmp_path)


def test_the_lock_is_beside_the_store_and_released_after_a_run(small_sweep):
    """Ownership lives in NAME.zarr.lock, never inside the store, and only while
    a run holds it: nothing is left beside a finished cube, and after a run
    another thread (or process) may use the store again."""
    import threading

    from engine.cube.lock import lock_path, locked

    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    assert lock_path(sweep.out) == sweep.out.with_name("cube.zarr.lock") and not lock_path(sweep.out).exists()
    got = []

    def other():
        with locked(sweep.out):
            assert lock_path(sweep.out).exists()
            got.append(run(sweep, progress=False).state)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got == ["complete"]


def test_a_run_that_opened_the_lock_as_its_owner_let_go_locks_the_one_there_now(tmp_path, monkeypatch):
    """The owner removes its lock file as it lets go: a run that had opened it
    just before then would hold a file no longer beside the store, beside a
    third run holding a new one. It finds it gone and locks the one there now."""
    import os

    from engine.cube import lock

    store = tmp_path / "cube.zarr"
    lock.acquire(store)
    stale = os.open(lock.lock_path(store), os.O_RDWR)  # opened, not yet locked, by another run
    lock.release(store)
    real_open, opened = os.open, []

    def stale_first(path, *args):
        if not opened:
            opened.append(path)
            return stale
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", stale_first)
    lock.acquire(store)
    monkeypatch.undo()
    try:
        held = lock._HELD[lock._held_key(store)][0]
        assert opened and os.stat(lock.lock_path(store)).st_ino == os.fstat(held).st_ino
    finally:
        lock.release(store)
    assert not lock.lock_path(store).exists()


def test_a_store_held_by_another_run_is_not_replaced(small_sweep):
    """--overwrite on a store another run holds is refused, and the store is untouched."""
    import threading

    from engine.cube.lock import locked

    sweep = load_sweep(small_sweep())
    run(sweep, progress=False)
    before = tree_digest(sweep.out)
    other = load_sweep(small_sweep(axes='spin_ratio = { linspace = [0.0, 2.0, 5] }'))
    holding, release = threading.Event(), threading.Event()

    def hold():
        with locked(sweep.out):
            holding.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(30)
    try:
        with pytest.raises(StoreError, match=r"in use by another rollsweep run \(pid \d+ on "):
            run(other, overwrite=True, progress=False)
    finally:
        release.set()
        t.join()
    assert tree_digest(sweep.out) == before


def test_leftovers_of_an_interrupted_creation_are_removed(small_sweep, tmp_path):
    leftover = tmp_path / ".cube.zarr.tmp-0123abcd"
    (leftover / "_rollsweep" / "grid").mkdir(parents=True)
    (tmp_path / ".cube.zarr.tmp-4567cdef-old").mkdir()
    unrelated = tmp_path / ".other.zarr.tmp-0123abcd"
    unrelated.mkdir()
    run(load_sweep(small_sweep()), progress=False)
    assert not leftover.exists() and not (tmp_path / ".cube.zarr.tmp-4567cdef-old").exists()
    assert unrelated.exists()


def test_checksum_reads_values_as_a_reader_gets_them():
    """digest: the CRC32 of the values' bytes in C order, with every NaN as the
    canonical NaN (a chunk of fill values reads back so), for any memory layout."""
    values = np.arange(24, dtype=float).reshape(4, 6)
    values[1, 2] = np.float64(np.frombuffer(np.uint64(0x7FF8000000000123).tobytes(), np.float64)[0])  # a NaN payload
    canonical = np.where(np.isnan(values), np.nan, values)
    assert digest(values) == f"{zlib.crc32(canonical.tobytes()):08x}"
    assert digest(values.T) == f"{zlib.crc32(canonical.T.copy().tobytes()):08x}"  # Fortran order
    assert digest(values[:, ::2]) == f"{zlib.crc32(canonical[:, ::2].copy().tobytes()):08x}"  # strided
    assert digest(np.array(2.5)) == f"{zlib.crc32(np.array(2.5).tobytes()):08x}"  # 0-d
    status = np.array([[1, 0, 3]], dtype=np.int8)
    assert digest(status) == f"{zlib.crc32(status.tobytes()):08x}"
    assert digest(values) != digest(values + 1)

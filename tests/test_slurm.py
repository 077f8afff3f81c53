"""Against a real single-node SLURM, started by slurm/start-local-slurm.sh.

Marked `slurm` (`pytest -m slurm`). Needs root (the harness installs Debian's
slurm-wlm and munge when missing); skipped otherwise, unless
ROLLSWEEP_REQUIRE_SLURM=1 (CI) makes that a failure.
"""

import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from engine.cube.markers import Markers
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.sweep.config import load_sweep

from conftest import cubes_identical, sweep_file

# One worker runs them all (`make test`'s --dist loadfile: a file to a worker):
# the cluster is started once, by one harness, and stopped after its last test.
pytestmark = pytest.mark.slurm
HARNESS = pathlib.Path(__file__).parent.parent / "slurm"
REQUIRED = os.environ.get("ROLLSWEEP_REQUIRE_SLURM") == "1"


def _unavailable(reason):
    if REQUIRED:
        pytest.fail(f"SLURM required (ROLLSWEEP_REQUIRE_SLURM=1) but {reason}")
    pytest.skip(f"no SLURM: {reason}")


@pytest.fixture(scope="session")
def slurm():
    if os.geteuid() != 0:
        _unavailable("the harness must run as root to start slurmctld/slurmd")
    start = time.perf_counter()
    # Advertise 4 CPUs so array tasks and worker jobs run side by side on small machines.
    env = os.environ | {"SLURM_LOCAL_CPUS": "4"}
    out = subprocess.run(["bash", str(HARNESS / "start-local-slurm.sh")], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        _unavailable(f"start-local-slurm.sh failed:\n{out.stderr[-2000:]}")
    print(f"SLURM up in {time.perf_counter() - start:.1f} s")
    yield
    subprocess.run(["bash", str(HARNESS / "stop-local-slurm.sh")], capture_output=True)


def squeue(*args) -> list[str]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, check=True)
    return out.stdout.split()


def wait_for_jobs(job_ids, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not set(squeue("-o", "%A")) & set(job_ids):
            return
        time.sleep(0.5)
    raise TimeoutError(f"jobs {job_ids} still queued after {timeout} s")


SWEEP = """
study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.0, 3.0, {n}] }}
[critical]
output = "final_displacement"
axis = "spin_ratio"
bracket = [1.0, 3.0]
[run]
shard_size = {shard}
batch_size = 8
out = "{out}"
[slurm]
partition = "debug"
memory = "1G"
walltime = "00:10:00"
interface = "lo"
tasks = {tasks}
"""


def make_sweep(tmp_path, name, n=41, shard=8, tasks=2):
    return sweep_file(tmp_path, SWEEP.format(n=n, shard=shard, tasks=tasks, out=tmp_path / f"{name}.zarr"),
                      name=f"{name}.toml")


def reference(tmp_path, path):
    sweep = load_sweep(path, out=str(tmp_path / "reference.zarr"))
    run(sweep, executor="inline", progress=False)
    return open_cube(sweep.out).load()


def submit(path, *args):
    out = subprocess.run([sys.executable, "-m", "engine.cli", "submit", str(path), *args],
                         capture_output=True, text=True, cwd=path.parent)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    return words[words.index("array") + 1], words[words.index("job", words.index("check")) + 1].rstrip(";")


def test_jobqueue_executor_matches_local(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = make_sweep(tmp_path, "jobqueue")
    sweep = load_sweep(path)
    report = run(sweep, executor="slurm", progress=False)
    assert report.failed_points == 0
    assert cubes_identical(open_cube(sweep.out).load(), reference(tmp_path, path))
    # Worker job logs are kept with the store, not dropped where the run started.
    assert list(Markers(sweep.out).slurm_folder.glob("*.out")) and not list(tmp_path.glob("slurm-*.out"))


def test_submit_matches_local(slurm, tmp_path):
    path = make_sweep(tmp_path, "submitted", tasks=3)
    array_job, check_job = submit(path)
    wait_for_jobs([array_job, check_job])
    check_log = next((tmp_path / "submitted.zarr" / "_rollsweep" / "slurm").glob("*check*.out")).read_text()
    assert "complete" in check_log and "incomplete" not in check_log
    assert cubes_identical(open_cube(tmp_path / "submitted.zarr").load(), reference(tmp_path, path))


def test_cancelled_array_tasks_then_resubmission_completes_identically(slurm, tmp_path):
    path = make_sweep(tmp_path, "cancelled", n=81, shard=2, tasks=4)
    store = tmp_path / "cancelled.zarr"
    array_job, check_job = submit(path)
    # Cancelled at once: a task solves its shards in one call and marks them within
    # milliseconds, so waiting for a first done marker let every task finish first
    # (a warm task takes about a second). Tasks 0 and 2 still run.
    subprocess.run(["scancel", f"{array_job}_1", f"{array_job}_3"], check=True)
    wait_for_jobs([array_job, check_job])
    done = len(Markers(store).done("grid"))
    assert done < 41, "cancelled tasks had already finished: nothing to resubmit"
    status = subprocess.run([sys.executable, "-m", "engine.cli", "status", str(store)], capture_output=True,
                            text=True).stdout
    assert "incomplete" in status

    array_job, check_job = submit(path)  # computes only what is missing
    wait_for_jobs([array_job, check_job])
    assert len(Markers(store).done("grid")) == 41
    assert cubes_identical(open_cube(store).load(), reference(tmp_path, path))


def test_killed_worker_job_is_recovered(slurm, tmp_path):
    path = make_sweep(tmp_path, "killed", n=161, shard=2, tasks=2)
    sweep = load_sweep(path)
    store = sweep.out

    def kill_one_worker():
        deadline = time.time() + 120
        while len(Markers(store).done("grid")) < 3 and time.time() < deadline:
            time.sleep(0.1)
        workers = squeue("-n", "dask-worker", "-t", "RUNNING", "-o", "%A")
        if workers:
            subprocess.run(["scancel", workers[0]], check=True)
            killed.append(workers[0])

    killed = []
    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    report = run(sweep, executor="slurm", progress=False)
    killer.join()
    assert killed, "no running worker job to kill"
    assert len(Markers(store).done("grid")) == 81 and report.failed_points == 0
    assert cubes_identical(open_cube(store).load(), reference(tmp_path, path))

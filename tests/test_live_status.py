"""`status` and `verify` of a cube being written: they say a run is writing it
(pid and host, from the lock file), count only the shards finished (points done
and their statuses agree), and `verify` calls such a cube partial, not sound."""

import os
import subprocess
import sys
import time

from engine.cli.commands import EXIT_PARTIAL, main
from engine.cube.lock import writer
from engine.cube.markers import Markers
from engine.cube.status_report import progress
from engine.cube.verify import examine
from engine.runner.execute import run
from engine.sweep.config import load_sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (REPO, os.environ.get("PYTHONPATH")))))


def hold_lock(store):
    """Another process owning the store, as a run does, until its stdin closes."""
    code = ("import sys; from engine.cube.lock import locked\n"
            "with locked(sys.argv[1]):\n    print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=ENV)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_cube_being_written_is_reported_running_and_partial(small_sweep, capsys):
    sweep = load_sweep(small_sweep(shard_size=5))  # 23 points in 5 shards
    run(sweep, progress=False)
    assert writer(sweep.out) is None
    # Shards 3 and 4 as a live run leaves them while it writes: values written, not yet marked done.
    for shard in (3, 4):
        Markers(sweep.out).done_path("grid", shard).unlink()
    holder = hold_lock(sweep.out)
    try:
        owner = writer(sweep.out)
        assert owner == f"pid {holder.pid} on {os.uname().nodename}"
        state = progress(sweep.out)
        assert state.points_done == 15 and sum(state.status_counts.values()) == 15, state
        assert main(["status", str(sweep.out)]) == EXIT_PARTIAL  # shards to do, as verify says
        out = capsys.readouterr().out
        assert f"running          {owner}" in out and "points           15 / 23 done" in out, out
        assert "run the same command again" not in out, out
        assert main(["verify", str(sweep.out)]) == EXIT_PARTIAL
        out = capsys.readouterr().out
        assert f"partial: 3 / 5 shards done, each as written; a run is writing it now ({owner})" in out, out
        assert "sound" not in out
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # The run is gone: the same cube is incomplete, and the way on is to run again.
    assert writer(sweep.out) is None
    assert main(["status", str(sweep.out)]) == EXIT_PARTIAL
    out = capsys.readouterr().out
    assert "running" not in out and "incomplete: run the same command again to resume" in out, out
    assert main(["verify", str(sweep.out)]) == EXIT_PARTIAL
    assert "partial: 3 / 5 shards done, each as written; run the same command again to finish it" in (
        capsys.readouterr().out)
    assert examine(sweep.out).problems == []


def test_status_during_a_real_run_is_consistent(small_sweep):
    """A run in another process, looked at while it runs (it holds the store from
    before its first shard until its end)."""
    config = small_sweep(axes='spin_ratio = { linspace = [0.0, 3.0, 200] }', shard_size=10)
    sweep = load_sweep(config)
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(config), "--quiet"], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = 0
    try:
        while proc.poll() is None:
            if (sweep.out / "zarr.json").exists() and writer(sweep.out):
                state = progress(sweep.out)
                if state.writer:  # still running when the counts were taken
                    assert state.writer.startswith(f"pid {proc.pid} on ")
                    assert sum(state.status_counts.values()) == state.points_done, state
                    assert "running" in state.describe()
                    seen += 1
            time.sleep(0.02)
    finally:
        proc.wait(timeout=600)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    assert seen, "the run ended before it was seen running"
    assert writer(sweep.out) is None and progress(sweep.out).complete
    assert main(["verify", str(sweep.out)]) == 0

"""Where a run's time goes (engine.stages): each stage measured where its work
is done, the stages adding up to the run's wall time; `rollsweep run
--profile` prints them."""

import re
import subprocess
import sys
import time

import pytest

import engine.stages as stages
from engine.runner.execute import run
from engine.sweep.config import load_sweep

# The interpreter's exit after the report is printed is the one part of a
# process's wall time no stage can measure (it is what follows the report):
# the stages must cover the rest, within this margin.
EXIT_MARGIN_S = 0.75
EXIT_MARGIN_SHARE = 0.15


def test_a_clock_charges_the_innermost_stage_and_adds_up_to_its_time():
    clock = stages.Clock("outer")
    start = time.perf_counter()
    with stages.running(clock):
        time.sleep(0.02)
        with stages.stage("inner"):
            time.sleep(0.03)
            with stages.stage("innermost"):
                time.sleep(0.01)
        time.sleep(0.01)
    seconds = clock.stop()
    elapsed = time.perf_counter() - start
    assert set(seconds) == {"outer", "inner", "innermost"}
    assert seconds["inner"] == pytest.approx(0.03, abs=0.02) and seconds["innermost"] >= 0.01
    assert seconds["outer"] >= 0.03
    assert sum(seconds.values()) == pytest.approx(elapsed, abs=0.005)


def test_a_stage_without_a_clock_costs_nothing_and_records_nothing():
    assert stages.current() is None
    with stages.stage("device"):
        pass
    assert stages.current() is None


def _sweep_file(tmp_path, points=2000, shard_size=250, batch_size=64):
    """A sweep in batches of `batch_size`: what the stages measure does not
    depend on it, and the default plan's program (2048 points in lanes of 256)
    compiles 5 s longer on 2 cores than one of 64 in lanes of 16. The two tests
    ask for different ones: each compiles its own, never loading what the
    other kept."""
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.2, 3.0, {points}] }}
[solver]
rtol = 1e-10
atol = 1e-12
[run]
shard_size = {shard_size}
batch_size = {batch_size}
executor = "inline"
out = "{tmp_path / 'cube.zarr'}"
""")
    return path


def test_a_runs_report_holds_its_stages_adding_up_to_its_time(tmp_path):
    """engine.run's report: planning, the program loaded ahead (a fresh cube
    solved inline), store, solving and closing, adding up to the call's wall
    time; the tasks' stages in thread-seconds no more than the threads had,
    every stage of a task measured (device calls, writes, markers)."""
    sweep = load_sweep(_sweep_file(tmp_path))
    start = time.perf_counter()
    report = run(sweep, progress=False)
    elapsed = time.perf_counter() - start
    assert set(report.stages) == {"planning", "program", "store", "solving", "closing"}
    assert sum(report.stages.values()) == pytest.approx(elapsed, rel=0.02, abs=0.01)
    work = {k: v for k, v in report.task_stages.items() if k != "waiting"}
    assert set(work) <= {name for name, _ in stages.TASK_STAGES}
    for name in ("device", "writes", "markers", "packing"):
        assert work[name] > 0, name
    available = report.threads * report.stages["solving"]
    assert sum(work.values()) <= available * 1.02  # no thread-second counted twice
    assert sum(report.task_stages.values()) == pytest.approx(available, rel=0.02)


def test_rollsweep_run_profile_says_where_the_process_time_went(tmp_path):
    """`rollsweep run --profile` in a process of its own, timed from outside: its
    stages (start-up included) add up to the process's wall time but its exit."""
    path = _sweep_file(tmp_path, points=600, shard_size=200, batch_size=32)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(path), "--quiet", "--profile"],
                         capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    assert out.returncode == 0, out.stderr
    total = float(re.search(r"where the time went: ([\d.]+) s in all", out.stdout)[1])
    shown = {m[1]: float(m[2]) for m in re.finditer(r"^  (\S+(?: \S+)?)\s+([\d.]+) s  ", out.stdout, re.M)}
    assert set(shown) == {name for name, _ in stages.RUN_STAGES}, out.stdout
    assert sum(shown.values()) == pytest.approx(total, abs=0.005 * len(shown))
    assert total <= wall + 0.05
    assert total >= wall - EXIT_MARGIN_S - EXIT_MARGIN_SHARE * wall, (total, wall, out.stdout)
    for name, _ in stages.TASK_STAGES:
        assert re.search(rf"^      {name}\s+[\d.]+ s", out.stdout, re.M), name

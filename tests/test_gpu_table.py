"""benchmarks/gpu_table.py reads the parts' outputs of a GPU lease into rows:
a lease is minutes of a machine that is seldom lent, so a figure its parser
drops is lost until the next one."""

import pathlib
import re
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_table  # noqa: E402
import startup  # noqa: E402

STARTUP_OUTPUT = (
    "python3 benchmarks/startup.py --config run.toml --cores 0\n"
    f"{'config':<28} {'run':<5} "
    + " ".join(f"{s:>16}" for s in ("cli imported", "sweep parsed", "store ready", "first shard", "end", "process",
                                    "first shard cpu"))
    + "  exported programs\n"
    + f"{'run1000000':<28} {'cold':<5} " + " ".join(f"{c:>15.2f}s" for c in (4.1, 4.2, 4.4, 9.9, 10.0, 10.6, 20.3))
    + "\n"
    + f"{'run1000000':<28} {'warm':<5} " + " ".join(f"{c:>15.2f}s" for c in (4.0, 4.1, 4.2, 5.0, 5.1, 5.3, 6.0))
    + "  0\n"
)


def test_startup_rows_name_each_stage_with_its_time():
    rows = gpu_table.parsed_rows("startup", STARTUP_OUTPUT, 30.0)
    assert [r["method"] for r in rows] == ["rollsweep run, cold process", "rollsweep run, warm process"]
    assert rows[0]["note"].startswith("cli imported 4.1 s; sweep parsed 4.2 s; store ready 4.4 s; first shard 9.9 s")
    assert "process 10.6 s; first shard cpu 20.3 s" in rows[0]["note"]
    assert "first shard 5.0 s" in rows[1]["note"]


def test_the_startup_table_printed_is_the_one_parsed(tmp_path, capsys, monkeypatch):
    """startup.py's own printing, with its runs stubbed, parses into a row per run."""
    stamps = {"cli imported": 1.0, "sweep parsed": 1.1, "store ready": 1.2, "first shard": 2.5, "end": 2.6,
              "process": 2.9, "first shard cpu": 3.0}
    monkeypatch.setattr(startup, "run_once", lambda *args: dict(stamps))
    config = tmp_path / "run.toml"
    config.write_text("")
    startup.main(["--config", str(config)])
    rows = gpu_table.parsed_rows("startup", capsys.readouterr().out, 5.0)
    assert len(rows) == 2
    assert rows[1]["note"] == ("cli imported 1.0 s; sweep parsed 1.1 s; store ready 1.2 s; first shard 2.5 s; "
                               "end 2.6 s; process 2.9 s; first shard cpu 3.0 s")


def test_run_summaries_become_rows_with_their_rate():
    output = "x.zarr: created; 16 shards, 1,000,000 points solved in 1.80 s (555,556 points/s), 0 of them failed\n"
    rows = gpu_table.parsed_rows("run1m-default", output, 7.0)
    assert rows[0]["points"] == 1_000_000 and rows[0]["rate"] == 555_556
    assert rows[0]["note"].startswith("solving 1.8 s; whole process 7.0 s")


def test_a_profiled_runs_row_names_its_stages(tmp_path, capsys):
    """Two `rollsweep run --profile`s in one part, as gpu_lease.sh runs them: each
    row's note carries its own run's stages, the solving stage's split among them."""
    from engine.cli.commands import main

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f"""
study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.2, 3.0, 64] }}
[run]
shard_size = 32
out = "{tmp_path / 'cube.zarr'}"
""")
    for _ in range(2):  # in this process: no start-up stage (the process is not the program's)
        assert main(["run", str(sweep), "--quiet", "--overwrite", "--profile"]) in (0, None)
    output = capsys.readouterr().out
    rows = gpu_table.parsed_rows("run1m-default", output, 9.0)
    assert len(rows) == 2
    walls = [float(w) for w in re.findall(r"where the time went: ([\d.]+) s in all", output)]
    for row, wall in zip(rows, walls, strict=True):
        note = row["note"]
        assert f"whole process {wall:.1f} s" in note, note  # its own run's, not the part's 9 s
        assert "; stages: planning " in note and ", store " in note and ", closing " in note, note
        assert re.search(r"solving [\d.]+ s \(.*waiting \d+%", note), note


# The tests part: the whole suite across the machine's cores (pytest-xdist), as gpu_lease.sh runs it.
PYTEST_COMMAND = ("env -u ROLLSWEEP_BENCH_ROWS python3 -m pytest -p no:cacheprovider -p no:benchmark -q "
                  "-m not slow and not slurm --durations=20 -n 14")
PYTEST_OUTPUT = (
    f"{PYTEST_COMMAND}\nbringing up nodes...\n" + "." * 72 + " [ 14%]\n" + "..s.F" + "." * 67 + " [ 28%]\n"
    "=============================== slowest 20 durations ===============================\n"
    "41.20s call     tests/test_notebooks.py::test_notebook_executes[bicycle]\n"
    "=========================== short test summary info ============================\n"
    "SKIPPED [1] tests/test_once.py:27: cpu_only, and JAX's default backend is gpu: counts the sines\n"
    "FAILED tests/test_config_errors.py::test_bad_config_is_reported_and_nothing_written[unknown study-run]"
    " - AssertionError: assert 1 == 2\n"
    "FAILED tests/test_cli.py::test_run_status_plot - assert 1 == 0\n"
    "ERROR tests/test_store.py::test_cube_is_self_describing - OSError: disk full\n"
    "2 failed, 497 passed, 9 skipped, 27 deselected, 3 warnings, 1 error in 187.61s (0:03:07)\n"
)


def test_the_suites_row_counts_its_tests_names_its_failures_and_says_it_finished_in_time():
    (row,) = gpu_table.parsed_rows("tests", PYTEST_OUTPUT, 190.2, 210.0, 1)
    assert row["method"] == "pytest, the default suite (not slow, not slurm), 14 processes"
    assert row["counts"] == {"passed": 497, "failed": 2, "skipped": 9, "error": 1}
    assert row["note"] == (
        "497 passed, 2 failed, 9 skipped, 1 error in 188 s; finished within its 210 s timeout (the part: 190 s); "
        "failed: test_config_errors.py::test_bad_config_is_reported_and_nothing_written[unknown study-run], "
        "test_cli.py::test_run_status_plot, test_store.py::test_cube_is_self_describing")


def test_a_suite_cut_off_by_its_timeout_says_so_with_the_counts_until_then(tmp_path):
    """No summary: the progress characters counted; the table has the row and the part's timeout."""
    output = PYTEST_OUTPUT.split("=====")[0] + "..E.s\n"
    (row,) = gpu_table.parsed_rows("tests", output, 210.4, 210.0, 124)
    assert row["counts"] == {"passed": 72 + 70 + 3, "failed": 1, "skipped": 2, "error": 1}
    assert row["note"] == "cut off by its 210 s timeout, before its summary: 145 passed, 1 failed, 2 skipped, 1 error"
    out, rows = tmp_path / "tests.out", tmp_path / "rows.jsonl"
    out.write_text(output)
    gpu_table.record(rows, "tests", "124", "210.4", "210", out, "tests.log")
    table = gpu_table.table(rows)
    assert ("| the test suite on this device (pytest) | pytest, the default suite (not slow, not slurm), 14 processes "
            "| - | - | - | - | cut off by its 210 s timeout") in table
    assert "| **FAILED** | - | - | - | - | timed out after 210 s (log: tests.log) |" in table


def test_a_verbose_suite_cut_off_counts_its_result_lines_and_names_its_failures():
    """-v under xdist (gpu_lease.sh): each result is a line as the test ends, so the
    failures are named though the summary never came."""
    output = (PYTEST_COMMAND.replace("-q ", "") + " -v\nbringing up nodes...\n"
              "tests/test_a.py::test_one \n"
              "[gw0] [  1%] PASSED tests/test_a.py::test_one \n"
              "[gw3] [  2%] FAILED tests/test_b.py::test_two \n"
              "[gw1] [  3%] SKIPPED tests/test_c.py::test_three \n"
              "[gw2] [  4%] PASSED tests/test_a.py::test_four \n")
    (row,) = gpu_table.parsed_rows("tests", output, 110.5, 110.0, 124)
    assert row["counts"] == {"passed": 2, "failed": 1, "skipped": 1, "error": 0}
    assert row["note"] == ("cut off by its 110 s timeout, before its summary: 2 passed, 1 failed, 1 skipped, "
                           "0 errors; failed: test_b.py::test_two")


def test_the_trials_few_tests_name_their_filter():
    output = (PYTEST_COMMAND.replace("-n 14", "-n 1 -k default_solver") + "\n....\n"
              "4 passed, 560 deselected in 31.02s\n")
    (row,) = gpu_table.parsed_rows("tests", output, 35.0, 210.0, 0)
    assert row["method"] == "pytest, the default suite (not slow, not slurm), -k default_solver, 1 process"
    assert row["note"] == ("4 passed, 0 failed, 0 skipped, 0 errors in 31 s; "
                           "finished within its 210 s timeout (the part: 35 s)")


def test_the_host_cost_parts_recorded_rows_are_its_table_rows(tmp_path, monkeypatch):
    """host_cost.py records its rows itself (nothing parsed): the part's rows in
    the table, each with its size, rate and engine / numpy+zarr ratio."""
    import host_cost

    rows = tmp_path / "rows.jsonl"
    monkeypatch.setenv("ROLLSWEEP_BENCH_ROWS", str(rows))
    monkeypatch.setenv("ROLLSWEEP_BENCH_PART", "host")
    layout = {"chunks": [64, 1000], "codecs": []}
    # best seconds: the runs' walls 2.5 / 3.0, 'solved in' 0.1 / 0.5; numpy + zarr's walls 1 / 2, own 0.2 / 1
    host_cost.report("title", [(1000, 1000), (1000, 10000)], [1_000_000, 10_000_000], [[3.0, 2.5], [4.0, 3.0]],
                     [[0.1], [0.5]], [[1.0], [2.0]], [[0.2], [1.0]], [layout, layout])
    gpu_table.record(rows, "host", "0", "55.0", "60", tmp_path / "host.out", "runs.log")
    table = gpu_table.table(rows)
    title = gpu_table.TITLES["host"]
    assert f"| {title} | rollsweep run, its own 'solved in' | 1,000,000 | 10.00M | 2 |" in table
    assert f"| {title} | rollsweep run, whole process | 10,000,000 | 3.33M | 0.667 |" in table
    assert (f"| {title} | rollsweep run, marginal rate between the sizes (1,000,000 -> 10,000,000) | 10,000,000 "
            "| 18.00M | 2 | - | whole processes 2.50 -> 3.00 s |") in table
    assert "FAILED" not in table


def test_bench_kernels_rows_with_copies_on_the_device_and_into_pinned_memory():
    output = ("rolling-ball sweep, 1,000,000 points, rtol 1e-10, atol 1e-12, float64\n"
              "backend          points/s    seconds  max |x - closed form|  chosen\n"
              "cuda         23,890,000     0.0419               5.69e-12  cuda (generated C compiled by NVRTC)\n"
              "cuda*       140,650,000     0.0071                         the same compiled calls on inputs already "
              "on the device\n"
              "cuda_pinned  61,000,000     0.0164               5.69e-12  ROLLSWEEP_PINNED_RESULTS=1: the "
              "calls' results moved into pinned host memory by the calls\n"
              "cuda_device  25,960,000     0.0385               5.69e-12  ROLLSWEEP_PINNED_RESULTS=0: the "
              "calls' results left in device memory, copied out after each call\n"
              "cuda_staged 90,000,000     0.0111               5.69e-12  ROLLSWEEP_PINNED_INPUTS=1 "
              "ROLLSWEEP_PACKED_RESULTS=1: the varying columns put in pinned host memory\n")
    rows = gpu_table.kernel_rows(output)
    assert [(r["method"], r["rate"]) for r in rows] == [
        ("fused solver, kernel backend cuda", 23_890_000),
        ("fused solver, kernel backend cuda, inputs on the device", 140_650_000),
        ("fused solver, kernel backend cuda, results to pinned host memory in the call", 61_000_000),
        ("fused solver, kernel backend cuda, results copied out of device memory after the call", 25_960_000),
        ("fused solver, kernel backend cuda, inputs from pinned host memory, results in one buffer", 90_000_000)]


def test_the_streams_row_carries_its_runs_stages():
    output = ("pingpong: 100,000,000 points, shards of 1,048,576, outputs final_displacement, stop_time\n"
              "x.zarr: created; 97 shards, 100,000,000 points solved in 6.33 s (15,798,129 points/s), "
              "0 of them failed\n"
              "where the time went: 9.50 s in all\n"
              "  start-up     2.500 s  the interpreter's start and the imports, before the run was called\n"
              "  solving      6.330 s  the tasks, from the first handed out to the last one's report\n"
              "    on 2 threads (thread-seconds, share of their time):\n"
              "      packing     3.000 s  23.7%  host work on a task's points\n"
              "      writes      5.000 s  39.5%  the shards' regions written into the store\n"
              "run:             9.7 s, 10,357,092 points/s end to end; CPU 18.9 s\n"
              "peak memory:     1.16 GiB resident, the whole run (49.9% of the cube)\n")
    (row,) = gpu_table.parsed_rows("stream", output, 27.0)
    assert row["rate"] == 10_357_092
    assert row["note"].startswith("run 9.7 s; peak memory: 1.16 GiB resident")
    assert row["note"].endswith("; stages: start-up 2.50 s, solving 6.33 s (packing 24%, writes 40%)"), row["note"]

"""benchmarks/gpu_table.py reads the parts' outputs of a GPU lease into rows:
a lease is minutes of a machine that is seldom lent, so a figure its parser
drops is lost until the next one."""

import pathlib
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

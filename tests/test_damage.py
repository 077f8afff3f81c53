"""A finished cube damaged on disk: verify and status find it, one run repairs it.

Each case damages one chunk of one kind of array (an output, the status, a
solver counter, the critical value and its status) or a done marker; `verify`
names the shard, `status` says incomplete, and the same run command afterwards
solves only that shard again, to a cube identical to an undamaged one.
"""

import pytest

from engine.cli.commands import main
from engine.cube.markers import Markers
from engine.cube.status_report import progress
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.sweep.config import load_sweep

from conftest import cubes_identical, sweep_file

CRITICAL = """
    [critical]
    output = "final_displacement"
    axis = "spin_ratio"
    bracket = [1.0, 3.0]"""


def _sweep_text(out) -> str:
    # Two axes so the critical value has an array of its own (over drag).
    return f"""
        study = "pingpong"
        [axes]
        spin_ratio = {{ linspace = [0.5, 3.0, 6] }}
        drag = {{ linspace = [0.0, 0.2, 4] }}
        {CRITICAL}
        [run]
        shard_size = 8
        batch_size = 8
        executor = "inline"
        out = "{out}"
        """


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reference")
    sweep = load_sweep(sweep_file(folder, _sweep_text(folder / "cube.zarr")))
    run(sweep, progress=False)
    return open_cube(sweep.out).load()


def _chunk(store, name):
    """The chunk file of `name` that holds the last shard's values."""
    files = sorted(p for p in (store / name).rglob("*") if p.is_file() and p.name != "zarr.json")
    assert files, f"no chunk of {name} was written"
    return files[-1]


def _delete(path):
    path.unlink()


def _truncate(path):
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _garble(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


CASES = [
    ("final_displacement", _delete),
    ("final_displacement", _garble),
    ("status", _truncate),
    ("num_steps", _garble),
    ("num_events", _delete),
    ("critical_spin_ratio", _truncate),
    ("critical_spin_ratio_status", _delete),
]


@pytest.mark.parametrize("name, damage", CASES, ids=[f"{n}-{d.__name__[1:]}" for n, d in CASES])
def test_damaged_chunk_is_found_and_repaired_by_one_run(tmp_path, capsys, reference, name, damage):
    path = sweep_file(tmp_path, _sweep_text(tmp_path / "cube.zarr"))
    sweep = load_sweep(path)
    run(sweep, progress=False)
    damage(_chunk(sweep.out, name))

    assert main(["verify", str(sweep.out)]) == 1
    out = capsys.readouterr().out
    assert " shard " in out and name in out and "sound" not in out, out
    assert main(["status", str(sweep.out)]) == 1  # reports (exit 1, as verify), does not crash on an undecodable chunk
    out = capsys.readouterr().out
    assert "damaged" in out and "incomplete" in out, out
    assert not progress(sweep.out).complete

    report = run(sweep, progress=False)
    assert report.shards_run == 1, report
    assert main(["verify", str(sweep.out)]) == 0
    assert cubes_identical(open_cube(sweep.out).load(), reference)


@pytest.mark.parametrize("content", ["", "{not json", "[]"])
def test_empty_or_corrupt_marker_means_not_done(tmp_path, capsys, reference, content):
    path = sweep_file(tmp_path, _sweep_text(tmp_path / "cube.zarr"))
    sweep = load_sweep(path)
    run(sweep, progress=False)
    Markers(sweep.out).done_path("grid", 1).write_text(content)

    assert main(["status", str(sweep.out)]) == 1
    out = capsys.readouterr().out
    assert "grid shards      2 / 3 done" in out and "marker that cannot be read" in out and "incomplete" in out, out
    assert main(["verify", str(sweep.out)]) == 1
    assert "grid shard 1 has a done marker that cannot be read" in capsys.readouterr().out

    assert run(sweep, progress=False).shards_run == 1
    assert main(["verify", str(sweep.out)]) == 0
    assert cubes_identical(open_cube(sweep.out).load(), reference)

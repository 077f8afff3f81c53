"""benchmarks/compile_profile.py: the suite's compile time by file and by test,
from the JSON files its pytest plugin writes (one per xdist worker)."""

import json
import pathlib
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import compile_profile  # noqa: E402


def test_the_report_sums_the_workers_files_costliest_first(tmp_path):
    (tmp_path / "gw0.json").write_text(json.dumps({
        "tests/test_a.py::test_one": {"trace": 1.0, "lower": 0.5, "compile": 2.0, "programs": 2},
        "tests/test_b.py::test_two": {"compile": 1.0, "programs": 1},
    }))
    (tmp_path / "gw1.json").write_text(json.dumps({
        "tests/test_b.py::test_three": {"trace": 2.0, "compile": 4.0, "programs": 3},
    }))
    lines = compile_profile.report(tmp_path, top=10).splitlines()
    assert lines[0] == "3 tests with compile events: 6 programs compiled; trace 3 s, lower 0 s, compile 7 s"
    files = [line for line in lines if line.startswith("| ") and "`tests/test_" in line and "::" not in line]
    assert files == ["| 7.0 | 4 | `tests/test_b.py` |", "| 3.5 | 2 | `tests/test_a.py` |"]
    tests = [line for line in lines if "::" in line]
    assert tests[0] == "| 6.0 | 3 | `tests/test_b.py::test_three` |" and len(tests) == 3


def test_a_folder_without_a_profile_is_named(tmp_path):
    with pytest.raises(SystemExit, match=f"{tmp_path}: no profile"):
        compile_profile.report(tmp_path, top=10)

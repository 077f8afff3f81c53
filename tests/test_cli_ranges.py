"""Every numeric flag of every command has its range: a value outside it is
refused while the command line is read, with one line naming the flag and what
it accepts (exit 2, no traceback, nothing written)."""

import pytest

from engine.cli import commands
from engine.cli.commands import main

from conftest import sweep_file

SWEEP = """study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.0, 3.0, 5] }}
[run]
out = "{out}"
"""

WORKERS = "must be an integer from 1 to 1,024"
SECONDS = "must be a number of seconds above 0 and at most 604,800"
# (command line before the flag, flag, refused values, what the line says is accepted)
FLAGS = [
    (["run", "CONFIG"], "--lost-after", ["-1", "0", "nan", "inf", "1e9", "soon"], SECONDS),
    (["run", "CONFIG"], "--connect-timeout", ["-1", "0", "nan", "1e9"], SECONDS),
    (["run", "CONFIG"], "--workers", ["0", "-1", "1025", "2.5"], WORKERS),
    (["validate", "CONFIG"], "--workers", ["0", "5000"], WORKERS),
    (["demo", "--out", "DEMO"], "--workers", ["0", "5000"], WORKERS),
    (["run", "CONFIG"], "--cores", ["0", "-4", "1025"], WORKERS),
    (["submit", "CONFIG"], "--cores", ["0"], WORKERS),
    (["run", "CONFIG"], "--gpus", ["-1", "65", "one"], "must be an integer from 0 to 64"),
    (["submit", "CONFIG", "--dry-run"], "--gpus", ["-1"], "must be an integer from 0 to 64"),
    (["run", "CONFIG"], "--tasks", ["0", "-8", "1000001"], "must be an integer from 1 to 1,000,000"),
    (["submit", "CONFIG", "--dry-run"], "--tasks", ["0"], "must be an integer from 1 to 1,000,000"),
    (["work", "STORE", "--share", "SHARE"], "--task", ["-1", "1000000", "x"],
     "must be an integer from 0 to 999,999"),
    (["point", "CONFIG"], "--index", ["-1", "1e3", "10000000000"], "must be an integer from 0 to 9,999,999,999"),
]
CASES = [(before, flag, value, accepted) for before, flag, values, accepted in FLAGS for value in values]


@pytest.mark.parametrize("before, flag, value, accepted", CASES,
                         ids=[f"{c[0][0]} {c[1]} {c[2]}" for c in CASES])
def test_a_flag_out_of_its_range_is_one_line_and_nothing_is_written(tmp_path, capsys, before, flag, value,
                                                                    accepted):
    out = tmp_path / "cube.zarr"
    config = sweep_file(tmp_path, SWEEP.format(out=out))
    places = {"CONFIG": config, "STORE": out, "SHARE": tmp_path / "share.json", "DEMO": tmp_path / "demo"}
    argv = [str(places.get(word, word)) for word in before] + [f"{flag}={value}"]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err == f"rollsweep {before[0]}: error: argument {flag}: {accepted}, got {value!r}\n", err
    assert list(tmp_path.iterdir()) == [config]


def test_a_negative_value_after_a_space_is_refused_as_the_flags_value(capsys):
    """`--lost-after -1` (not `=`): read as the flag's value, and refused by its range."""
    with pytest.raises(SystemExit) as stopped:
        main(["run", "sweep.toml", "--lost-after", "-1"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"rollsweep run: error: argument --lost-after: {SECONDS}, got '-1'\n"


@pytest.mark.parametrize("argv, name, value", [
    (["run", "s.toml", "--lost-after", "0.5"], "lost_after", 0.5),
    (["run", "s.toml", "--lost-after", "604800"], "lost_after", 604800.0),
    (["run", "s.toml", "--connect-timeout", "2"], "connect_timeout", 2.0),
    (["run", "s.toml", "--workers", "1"], "workers", 1),
    (["run", "s.toml", "--workers", "1024"], "workers", 1024),
    (["run", "s.toml", "--cores", "64", "--gpus", "0", "--tasks", "1"], "gpus", 0),
    (["submit", "s.toml", "--gpus", "64"], "gpus", 64),
    (["work", "cube.zarr", "--task", "0", "--share", "s.json"], "task", 0),
    (["point", "s.toml", "--index", "0"], "index", 0),
    (["demo", "--workers", "2"], "workers", 2),
])
def test_the_ends_of_each_range_are_accepted(argv, name, value):
    args = commands.parser().parse_args(argv)
    assert getattr(args, name) == value and type(getattr(args, name)) is type(value)


def test_any_bad_command_line_is_one_line(capsys):
    """argparse's other errors too: no usage above them (`--help` has it)."""
    with pytest.raises(SystemExit) as stopped:
        main(["work", "cube.zarr"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "rollsweep work: error: the following arguments are required: --task, --share\n"


@pytest.mark.parametrize("key, flag, low, high", [("cores", "--cores", 1, 1024), ("gpus", "--gpus", 0, 64),
                                                   ("tasks", "--tasks", 1, 1_000_000)])
def test_a_slurm_tables_counts_have_the_flags_ranges(key, flag, low, high, tmp_path, capsys):
    """The [slurm] table and the command line take the same counts (engine.limits):
    each end accepted, one past it refused, in the file and as the flag."""
    from engine.errors import ConfigError
    from engine.sweep.resources import checked

    for good in (low, high):
        assert checked({key: good}, "s.toml")[key] == good
    for bad in (low - 1, high + 1):
        with pytest.raises(ConfigError, match=rf"slurm\.{key}: must be an integer from {low} to {high:,}"):
            checked({key: bad}, "s.toml")
        with pytest.raises(SystemExit):
            main(["submit", "x.toml", flag, str(bad)])
        assert f"argument {flag}: must be an integer from {low} to {high:,}" in capsys.readouterr().err

"""The numbers a run ends with are validate's: the grid's shards and points,
and a critical search's shards and roots named as such (a run of the rolling
ball's Fig. 14 sweep once said "9 shards, 30,002 points" where validate said 8
shards and the README 30,001 points)."""

import re

from engine.cli.commands import _summary
from engine.runner.execute import RunReport


def test_a_run_with_a_critical_search_names_its_shards_and_roots_apart():
    report = RunReport("c.zarr", "created", shards_run=9, points_run=30_002, failed_points=0, seconds=2.0,
                       critical_shards=1, critical_roots=1)
    line = _summary(report)
    assert ("c.zarr: created; 8 grid shards and 1 critical-search shards, 30,001 grid points and 1 critical roots "
            "solved in 2.00 s") in line, line


def test_a_grid_alone_keeps_its_line():
    report = RunReport("c.zarr", "created", shards_run=8, points_run=30_001, failed_points=0, seconds=2.0)
    assert _summary(report).startswith("c.zarr: created; 8 shards, 30,001 points solved in 2.00 s"), _summary(report)


def test_validate_counts_as_the_run_does(tmp_path, capsys):
    """validate's grid and critical-search lines give the numbers the run's line gives."""
    from engine.cli.commands import main

    from conftest import sweep_file

    path = sweep_file(tmp_path, f"""
        study = "pingpong"
        [axes]
        spin_ratio = {{ linspace = [0.0, 3.0, 11] }}
        [critical]
        output = "final_displacement"
        axis = "spin_ratio"
        bracket = [1.0, 3.0]
        [run]
        shard_size = 4
        out = "{tmp_path / 'c.zarr'}"
        """)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^grid shards +3 of up to 4 points$", out, re.M), out
    assert re.search(r"^critical search +1 critical roots in 1 critical-search shards", out, re.M), out


def test_a_grid_alone_never_says_it_compiles_a_critical_search(tmp_path, capsys):
    """The bar names the critical search's compile only where a sweep has one:
    the last update of a grid-only run said it too."""
    from engine import run

    from conftest import regime_grid

    run(regime_grid(tmp_path, "grid", shard_size=30, spins=3), progress=True)
    bar = capsys.readouterr().err
    assert "shards 3/3" in bar and "critical" not in bar, bar

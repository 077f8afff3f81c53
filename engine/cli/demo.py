"""`rollsweep demo`: every study's demo sweeps, run and plotted into one folder.

What it prints is read by a new user after `make demo`: one line a sweep (its
points, time, failures and figures), one for a study it skips, and a closing
summary. The runs show no progress bar: demo sweeps take seconds each, and a
bar's redrawn lines would outnumber the rest.
"""

import dataclasses
import pathlib
import time

from engine.cube.plot import plot_cube
from engine.runner.execute import run
from engine.study.interface import available_studies
from engine.study.status import Status
from engine.sweep.config import parse_sweep


@dataclasses.dataclass
class _Tally:
    """What the closing summary counts."""

    sweeps: int = 0
    points: int = 0
    failed: int = 0
    figures: int = 0


def run_demo(folder: pathlib.Path, workers=None, executor=None, studies=None) -> list[pathlib.Path]:
    """Every study's demo sweeps (`studies`: name -> loader, default: the installed
    ones); the figures written. A study without demo sweeps or without figures is
    noted in its line and the others go on: one incomplete study must not stop
    the demo of all."""
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tally, written = _Tally(), []
    for name, load in sorted((studies or available_studies()).items()):
        study = load()
        if not study.demo_configs:
            print(f"{name}: no demo sweeps; skipped")
            continue
        for demo, text in sorted(study.demo_configs.items()):
            figures = _run_one(study, name, demo, text, folder, workers, executor, tally)
            written += figures
    print(_summary(tally, folder, time.perf_counter() - started))
    return written


def _run_one(study, name, demo, text, folder, workers, executor, tally) -> list[pathlib.Path]:
    """One demo sweep run (afresh) and plotted, told in one line; its figures."""
    began = time.perf_counter()
    # Demo configs carry a bare file name as `out`; place it in the folder.
    sweep = parse_sweep(text, file=f"{name}:demo/{demo}.toml")
    sweep = dataclasses.replace(sweep, out=folder / sweep.out.name)
    report = run(sweep, workers=workers, executor=executor, overwrite=True, progress=False)
    figures = plot_cube(sweep.out, folder) if study.figures is not None else []
    tally.sweeps += 1
    tally.points += report.points_run
    tally.failed += report.failed_points + (report.points_run - report.points_solved)
    tally.figures += len(figures)
    line = f"{demo}: {report.points_run:,} points in {time.perf_counter() - began:.1f} s"
    if report.failed_points:
        line += f", {report.failed_points:,} without success ({_by_status(sweep.out)})"
    if report.failed_shards:
        line += f", {report.failed_shards} shards raised (rollsweep status {sweep.out})"
    if study.figures is None:
        line += f"; study {name!r} declares no figures, cube {sweep.out} not plotted"
    else:
        line += " -> " + ", ".join(f.name for f in figures)
    print(line)
    return figures


def _by_status(out: pathlib.Path) -> str:
    """A demo cube's points without success by status name ("41 out_of_range"):
    a point outside the model's range (a motion that does not exist) is not a
    solver's failure, and a new user reading "failed" would think so."""
    import numpy as np
    import zarr

    values = np.asarray(zarr.open_array(out / "status", mode="r")[...])
    codes, counts = np.unique(values[values != Status.SUCCESS], return_counts=True)
    return ", ".join(f"{n:,} {Status(int(c)).name.lower()}" for c, n in zip(codes, counts, strict=True))


def _summary(tally: _Tally, folder: pathlib.Path, seconds: float) -> str:
    failed = (f", {tally.failed:,} of them without success (each sweep's line says why; `rollsweep status "
              f"CUBE` too)" if tally.failed else "")
    return (f"demo: {tally.sweeps} sweeps, {tally.points:,} points{failed}, {tally.figures} figures "
            f"in {folder}/ ({seconds:.0f} s)")

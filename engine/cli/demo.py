"""`rollsweep demo`: every study's demo sweeps, run and plotted into one folder."""

import dataclasses
import pathlib

from engine.cube.plot import plot_cube
from engine.runner.execute import run
from engine.study.interface import available_studies
from engine.sweep.config import parse_sweep


def run_demo(folder: pathlib.Path, workers=None, executor=None, studies=None) -> list[pathlib.Path]:
    """Every study's demo sweeps (`studies`: name -> loader, default: the installed
    ones). A study without demo sweeps or without figures is noted in one line and
    the others go on: one incomplete study must not stop the demo of all."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, load in sorted((studies or available_studies()).items()):
        study = load()
        if not study.demo_configs:
            print(f"{name}: no demo sweeps; skipped")
            continue
        for demo, text in sorted(study.demo_configs.items()):
            # Demo configs carry a bare file name as `out`; place it in the folder.
            sweep = parse_sweep(text, file=f"{name}:demo/{demo}.toml")
            sweep = dataclasses.replace(sweep, out=folder / sweep.out.name)
            report = run(sweep, workers=workers, executor=executor, overwrite=True)
            print(f"{demo}: {report.points_solved:,} points in {report.seconds:.1f} s")
            if study.figures is None:
                print(f"{demo}: study {name!r} declares no figures; cube {sweep.out} not plotted")
                continue
            written += plot_cube(sweep.out, folder)
    return written

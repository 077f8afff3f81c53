"""`rollsweep demo`: every study's demo sweeps, run and plotted into one folder."""

import dataclasses
import pathlib

from ._config import parse_sweep
from ._execute import run
from ._plot import plot_cube
from ._study import available_studies


def run_demo(folder: pathlib.Path, workers=None, executor=None) -> list[pathlib.Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, load in sorted(available_studies().items()):
        study = load()
        for demo, text in sorted(study.demo_configs.items()):
            # Demo configs carry a bare file name as `out`; place it in the folder.
            sweep = parse_sweep(text, file=f"{name}:demo/{demo}.toml")
            sweep = dataclasses.replace(sweep, out=folder / sweep.out.name)
            report = run(sweep, workers=workers, executor=executor, overwrite=True)
            print(f"{demo}: {report.points_run:,} points in {report.seconds:.1f} s")
            written += plot_cube(sweep.out, folder)
    return written

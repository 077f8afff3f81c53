"""`rollsweep plot`: a cube's standard figures as PNG files."""

import pathlib

import matplotlib.pyplot as plt

from ._cube import StoreError, open_cube, read_attrs
from ._study import load_study


def plot_cube(path, out=None) -> list[pathlib.Path]:
    path = pathlib.Path(path)
    attrs = read_attrs(path)
    if "study" not in attrs:
        raise StoreError(f"{path}: not a rollsweep cube")
    study = load_study(attrs["study"])
    if study.figures is None:
        raise StoreError(f"{path}: study {study.name!r} declares no figures")
    folder = pathlib.Path(out) if out else path.parent
    folder.mkdir(parents=True, exist_ok=True)
    stem = path.name.removesuffix(".zarr")
    written = []
    for name, fig in study.figures(open_cube(path)).items():
        target = folder / f"{stem}_{name}.png"
        fig.savefig(target, dpi=130)
        plt.close(fig)
        written.append(target)
    if not written:
        raise StoreError(f"{path}: no standard figure of {study.name!r} fits this cube's axes")
    return written

"""`rollsweep plot`: a cube's standard figures as PNG files."""

import pathlib
import sys
import tomllib

import numpy as np

from engine.errors import StoreError
from engine.study.interface import load_study, readable, with_unit

# matplotlib and the store (zarr) are imported by plot_cube: the studies import
# scale_axes at every run, and `validate`, which never draws nor opens a cube.


def plot_cube(path, out=None) -> list[pathlib.Path]:
    import matplotlib.pyplot as plt

    from engine.cube.store import Cube
    path = pathlib.Path(path)
    cube = Cube(path)
    attrs = cube.attrs
    cube.check_whole(attrs)  # a damaged cube (its markers or metadata gone) is refused, no figure drawn
    study = load_study(attrs["study"])
    if "sensitivity" in _stored_tables(attrs):  # its figure is its indices' (cube_figures)
        from engine.cube.sensitivity_report import state

        found = state(cube)
        if not found.computed:
            raise StoreError(f"{path}: no sensitivity indices to draw: {found.line}")
    elif study.figures is None:
        raise StoreError(f"{path}: study {study.name!r} declares no figures")
    folder = pathlib.Path(out) if out else path.parent
    _check_not_in_a_cube(folder)
    stem = path.name.removesuffix(".zarr")
    try:
        ds = cube.dataset().load()  # read whole here: a chunk that cannot be decoded is the cube's one line
    except Exception as error:  # noqa: BLE001 - a codec's or a file's, whichever reads the chunk
        raise StoreError(f"{path}: an array cannot be read ({type(error).__name__}: {error}): a chunk is damaged; "
                         f"`rollsweep verify {path}` names it, and `rollsweep run` on its sweep solves it again"
                         ) from None
    from engine.cube.sensitivity_figure import cube_figures

    skipped = []
    figures = cube_figures(ds, study, skipped)
    for line in skipped:  # a study's figures that do not draw this cube: one line each, on stderr
        print(f"{path}: {line}", file=sys.stderr)
    if not isinstance(figures, dict):
        raise StoreError(f"{path}: study {study.name!r}'s figures returned a {type(figures).__name__}, not a dict "
                         "of name -> matplotlib figure")
    folder.mkdir(parents=True, exist_ok=True)  # once there is something to write
    written = []
    for name, fig in figures.items():
        target = folder / f"{stem}_{name}.png"
        fig.savefig(target, dpi=130)
        plt.close(fig)
        written.append(target)
    if not written:
        raise StoreError(f"{path}: no standard figure of {study.name!r} fits this cube's axes")
    return written


def _axis_specs(ds) -> dict:
    """The [axes] table of the sweep file stored in the cube ({} for a dataset without one)."""
    return _stored_tables(ds.attrs).get("axes", {})


def _stored_tables(attrs: dict) -> dict:
    """The sweep file stored in a cube's attributes, read ({} where there is none that reads)."""
    try:
        return tomllib.loads(attrs.get("config", ""))
    except tomllib.TOMLDecodeError:
        return {}


def log_spaced(ds, name: str) -> bool:
    """Whether coordinate `name` is best drawn on a log scale: a `logspace` axis of
    the cube's sweep file or, for `values = [...]` axes and datasets without the
    sweep, three or more positive values in geometric progression."""
    spec = _axis_specs(ds).get(name)
    if isinstance(spec, dict) and ("logspace" in spec or "linspace" in spec):
        return "logspace" in spec
    values = np.asarray(ds[name].values) if name in ds.coords else np.array([])
    if values.size < 3 or values.dtype.kind not in "fiu" or not np.all(np.isfinite(values) & (values > 0)):
        return False
    ratios = values[1:] / values[:-1]
    return bool(np.allclose(ratios, ratios[0], rtol=1e-6) and not np.isclose(ratios[0], 1.0))


def scale_axes(ax, ds, x: str | None = None, y: str | None = None) -> None:
    """Log scales on the plot's axes that show log-spaced coordinates `x` / `y` of `ds`."""
    if x is not None and log_spaced(ds, x):
        ax.set_xscale("log")
    if y is not None and log_spaced(ds, y):
        ax.set_yscale("log")


def axis_label(ds, name: str, declared=()) -> str:
    """What an axis or colour bar showing `name` says: "label [unit]" (the label
    alone for a dimensionless quantity). From the study's declaration among
    `declared` (its Parameters and Outputs) where it has one, else from the
    cube's `long_name` and `units`, else the name with spaces for underscores."""
    for d in declared:
        if d.name == name:
            return d.axis_label
    attrs = ds[name].attrs if ds is not None and name in ds.variables else {}
    return with_unit(attrs.get("long_name") or readable(name), str(attrs.get("units", "")))


def label_of(name: str, declared, fallback: str | None = None) -> str:
    """The display label (no unit) of `name` among `declared`; `fallback` or
    the readable name where none declares it."""
    for d in declared:
        if d.name == name:
            return d.label
    return fallback if fallback is not None else readable(name)


def _check_not_in_a_cube(folder: pathlib.Path) -> None:
    """Figures go beside cubes, never into one: a PNG inside a store is a file
    no reader of the cube expects (and `verify` would not know it)."""
    from engine.cube.store import enclosing_cube

    absolute = folder.absolute()
    cube = enclosing_cube((absolute, *absolute.parents))
    if cube is not None:
        raise StoreError(f"{folder}: inside the cube {cube}: figures are written beside a cube, never into one; "
                         "choose another --out")

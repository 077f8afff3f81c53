"""`ds.rollsweep`: a cube's study, its standard figures and its good points, in a notebook.

Registered with xarray once xarray is imported, never importing it itself
before: `import engine` (which every `rollsweep` command pays) must not load
xarray, pandas and dask (0.5-0.9 s), yet a notebook's `import engine`, then
`import xarray` and `xr.open_zarr(cube)`, must find `ds.rollsweep`. So
`when_imported` registers it at once where xarray is already imported, and
otherwise has the first import of xarray register it (`_AfterXarray`, a
one-shot import hook); `engine.open_cube` registers it too."""

import importlib.abc
import importlib.util
import sys
import threading
import warnings

from engine.study.status import Status

NAME = "rollsweep"
_lock = threading.Lock()


class RollsweepAccessor:
    def __init__(self, ds):
        self._ds = ds

    @property
    def study(self):
        """The Study that wrote this cube (from its `study` attribute)."""
        from engine.study.interface import load_study

        return load_study(self._ds.attrs["study"])

    def figures(self) -> dict:
        """The cube's standard figures (the study's; a sensitivity sweep's
        indices as bars): name -> matplotlib Figure."""
        from engine.cube.sensitivity_figure import cube_figures

        return cube_figures(self._ds, self.study)

    @property
    def ok(self):
        """The cube (an xarray Dataset) with every point that did not succeed masked (NaN)."""
        return self._ds.where(self._ds["status"] == Status.SUCCESS)

    def failures(self) -> dict:
        """Count of points per failure status (pending included)."""
        codes = self._ds["status"].values
        return {s.name.lower(): int((codes == s).sum()) for s in Status if s != Status.SUCCESS and (codes == s).any()}


def register() -> None:
    """`ds.rollsweep` on every xarray Dataset (imports xarray; once per process)."""
    import xarray as xr

    with _lock:
        if getattr(vars(xr.Dataset).get(NAME), "_accessor", None) is not RollsweepAccessor:
            xr.register_dataset_accessor(NAME)(RollsweepAccessor)


def when_imported() -> None:
    """Register the accessor now where xarray is imported, else when it is."""
    if "xarray" in sys.modules:
        register()
    elif not any(isinstance(finder, _AfterXarray) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterXarray())


class _AfterXarray(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the first import of xarray to the finders
    after it, with a loader that registers the accessor once xarray's module
    has run, then steps out of the way (and out of the module's spec)."""

    def find_spec(self, name, path=None, target=None):
        if name != "xarray":
            return None
        with _lock:
            if self not in sys.meta_path:
                return None
            sys.meta_path.remove(self)  # once, and not found again by the search below
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Registering(spec.loader)
        return spec


class _Registering(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # anything else a loader offers (resources, source)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # the module as if it were never hooked
        self.loader.exec_module(module)
        try:
            register()
        except Exception as err:  # never the user's import of xarray
            warnings.warn(f"rollsweep: ds.rollsweep not registered: {err}", stacklevel=2)

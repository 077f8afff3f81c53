"""`ds.rollsweep`: a cube's study, its standard figures and its good points, in a notebook."""

import xarray as xr

from engine.study.interface import load_study
from engine.study.status import Status


@xr.register_dataset_accessor("rollsweep")
class RollsweepAccessor:
    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def study(self):
        """The Study that wrote this cube (from its `study` attribute)."""
        return load_study(self._ds.attrs["study"])

    def figures(self) -> dict:
        """The study's standard figures for this cube: name -> matplotlib Figure."""
        study = self.study
        return study.figures(self._ds) if study.figures else {}

    @property
    def ok(self) -> xr.Dataset:
        """The cube with every point that did not succeed masked (NaN)."""
        return self._ds.where(self._ds["status"] == Status.SUCCESS)

    def failures(self) -> dict:
        """Count of points per failure status (pending included)."""
        codes = self._ds["status"].values
        return {s.name.lower(): int((codes == s).sum()) for s in Status if s != Status.SUCCESS and (codes == s).any()}

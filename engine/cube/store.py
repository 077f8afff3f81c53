"""The cube: an xarray Dataset in a zarr v3 store, filled shard by shard.

A `Cube` owns one store: its path, the sweep that makes it, its markers and,
once it writes, its open arrays. A process opens it once and hands it to what
writes, verifies and reports (it travels to dask workers and SLURM tasks as
its path and resolved sweep, and opens its arrays again there).

The structure (coordinates, NaN-filled variables, attributes) is written first,
into a temporary folder renamed into place, so a store either exists whole or
not at all. Each shard then writes only its own chunks and afterwards drops a
done marker: a store killed at any moment loses at most the shards in flight.
"""

import concurrent.futures
import contextlib
import os
import pathlib
import shutil
import uuid
import warnings

import zarr
import zarr.api.asynchronous

from engine.cube import structure
from engine.cube.aio import sync
from engine.cube.chunks import ChunkWriter, pool
from engine.cube.markers import GRID, MARKERS, Markers
from engine.cube.structure import STORE_FORMAT
from engine.errors import ConfigError, StoreError
from engine.sweep.config import Sweep
from engine.sweep.layout import Layout, layouts


@contextlib.contextmanager
def quiet_zarr():
    # Consolidated metadata is not yet in the zarr v3 spec; it is what keeps
    # readers from listing the marker folder, so the warning is expected.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        yield


def open_cube(path):
    """Open a cube lazily (dask-backed) for analysis: an xarray Dataset, with
    its `ds.rollsweep` accessor."""
    import xarray as xr

    from engine.cube.accessor import register

    register()
    with quiet_zarr():
        return xr.open_zarr(path, consolidated=True)


class Cube:
    """The store at `path`, made by `sweep` (read from the store's attributes
    when not given: `Cube(path).sweep`). Nothing is read until asked."""

    def __init__(self, path, sweep: Sweep | None = None):
        self.path = pathlib.Path(path)
        self.markers = Markers(self.path)
        self._sweep = sweep
        self._arrays: dict = {}  # name -> the ChunkWriter of an array this process writes

    def __reduce__(self):
        # To a dask worker or a SLURM task: the path and the resolved sweep, never
        # the open arrays (each process opens its own, once).
        return Cube, (str(self.path), self._sweep)

    def __repr__(self) -> str:
        return f"Cube({str(self.path)!r})"

    # ---- reading

    @property
    def attrs(self) -> dict:
        """The store's attributes ({} where there is no zarr group)."""
        try:
            with quiet_zarr():
                return dict(zarr.open_group(self.path, mode="r").attrs)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, KeyError):
            return {}

    @property
    def sweep(self) -> Sweep:
        """The sweep that made the cube (re-read from its attributes where the
        cube was opened by path alone)."""
        if self._sweep is None:
            from engine.sweep.config import parse_sweep

            attrs = self.attrs
            self.check_whole(attrs)
            self.check_format(attrs)
            try:
                self._sweep = parse_sweep(attrs["config"], file=attrs.get("config_file", str(self.path)),
                                          out=str(self.path))
            except (ConfigError, KeyError, TypeError) as err:  # its config attribute gone or edited
                said = " ".join(str(err).split())  # one line
                raise StoreError(f"{self.path}: its stored config (attribute config) cannot be read ({said}); "
                                 "a run of the sweep file that made it repairs it") from None
        return self._sweep

    def layout(self, kind: str) -> Layout | None:
        """How a kind of shard cuts the cube: the grid's layout, or the critical
        values' (None for a sweep without [critical])."""
        grid, critical = layouts(self.sweep)
        return grid if kind == GRID else critical

    def missing(self, attrs: dict | None = None) -> str | None:
        """What of a cube's own its folder lacks, in words (None: nothing, or not
        a cube at all): its metadata (the root zarr.json, without which zarr reads
        no array) where its markers are there, or its markers where its metadata
        says it is a cube."""
        attrs = self.attrs if attrs is None else attrs
        root = self.path / "zarr.json"
        if "config_hash" in attrs:
            if not self.markers.folder.is_dir():
                return (f"its markers' folder {MARKERS}/ is missing, so which shards were solved and what they hold "
                        "cannot be told")
            return None
        if self.markers.folder.is_dir():
            return f"its metadata {root.name} is {'not readable' if root.exists() else 'missing'}"
        return None

    def check_whole(self, attrs: dict | None = None) -> None:
        """Refuse in one line a folder that is not a cube, or a cube missing its
        metadata or its markers (which no run repairs: it solves the cube afresh)."""
        attrs = self.attrs if attrs is None else attrs
        lacks = self.missing(attrs)
        if lacks:
            raise StoreError(f"{self.path}: a damaged rollsweep cube: {lacks}; solve it again with "
                             "rollsweep run --overwrite (or restore what is missing)")
        if "config_hash" not in attrs:
            raise StoreError(f"{self.path}: not a rollsweep cube{not_a_cube_because(self.path)}")

    def check_format(self, attrs: dict | None = None) -> None:
        attrs = self.attrs if attrs is None else attrs
        found = attrs.get("store_format")
        if found != STORE_FORMAT:
            raise StoreError(
                f"{self.path}: written by rollsweep {attrs.get('engine_version', '?')} in store format {found}; this "
                f"engine reads format {STORE_FORMAT}: recompute it (--overwrite) or open it with that version"
            )

    def group(self):
        """The store's zarr group, read-only."""
        with quiet_zarr():
            return zarr.open_group(self.path, mode="r")

    def dataset(self):
        return open_cube(self.path)

    # ---- writing

    @classmethod
    def create(cls, sweep: Sweep, path, devices: str) -> "Cube":
        """Write the empty cube at `path`, all or nothing (an old cube there is
        replaced once the new one is complete). `devices`: where the run solves,
        for the provenance."""
        path = pathlib.Path(path)
        arrays, attrs = structure.structure(sweep, devices)
        tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            with quiet_zarr():
                coordinates = structure.write(tmp, arrays, attrs)
            Markers(tmp).make_folders()
            Markers(tmp).record_coordinates(coordinates)
            trash = tmp.with_name(tmp.name + "-old")
            if path.exists():
                os.rename(path, trash)
            try:
                os.rename(tmp, path)
            except OSError:
                if trash.exists() and not path.exists():
                    os.rename(trash, path)  # the old cube back where it was: nothing replaced
                raise
            shutil.rmtree(trash, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return cls(path, sweep)

    def set_attribute(self, name: str, value) -> None:
        with quiet_zarr(), warnings.catch_warnings():
            # The marker folder is the store's own, not a zarr node: expected to be skipped.
            warnings.filterwarnings("ignore", message="Object at _rollsweep is not recognized")
            group = zarr.open_group(self.path, mode="r+")
            group.attrs[name] = value
            zarr.consolidate_metadata(self.path)

    async def _open_arrays(self, names) -> dict:
        group = await zarr.api.asynchronous.open_group(self.path, mode="r+")
        return {name: await group.getitem(name) for name in names}

    def _writers(self, names) -> dict[str, ChunkWriter]:
        # Opened once per process and cube: opening a store's arrays (reading
        # their metadata) cost ~3 ms a shard, as much as writing three of them.
        missing = [name for name in names if name not in self._arrays]
        if missing:
            with quiet_zarr():
                opened = sync(self._open_arrays(missing))
            self._arrays = self._arrays | {name: ChunkWriter(self.path, name, a) for name, a in opened.items()}
        return self._arrays

    def write_regions(self, regions) -> list[dict[str, str]]:
        """Write shards' arrays: `regions` is a list of (region, values), values
        mapping names to arrays shaped like the region (a shard: one chunk of
        each). Returns each shard's checksums (name -> digest) for its done
        marker. Every chunk is a job of the process's chunk writers
        (engine.cube.chunks), all of them at once; it returns once every one
        has ended, and raises the first error (a full disk) after that. An
        array of fewer dimensions than the region (a sampled design's
        coordinates, along the cube's first dimension) is written over the
        region's leading slices."""
        writers = self._writers(list(dict.fromkeys(name for _, values in regions for name in values)))
        writing, submitted, jobs = pool(), [], []
        try:
            for region, values in regions:
                jobs.append({})
                for name, array in values.items():
                    writer = writers[name]
                    jobs[-1][name] = writing.submit(writer.write, region[:len(writer.shape)], array)
                    submitted.append(jobs[-1][name])
        finally:  # every job submitted has ended before this returns or raises (Ctrl-C, a refused submit)
            concurrent.futures.wait(submitted)
        return [{name: job.result() for name, job in shard.items()} for shard in jobs]


def not_a_cube_because(path) -> str:
    """Why a path a command was given holds no cube, where that can be told: a
    link to nothing, a folder that does not exist, a folder inside a cube."""
    path = pathlib.Path(path)
    if path.is_symlink() and not path.exists():
        return f" (a link to {os.readlink(path)}, which does not exist)"
    if not path.exists():
        return " (no such folder)"
    inside = enclosing_cube(path.absolute().parents)
    return f" (a folder inside the cube {inside}: give the cube's own folder)" if inside else ""


def enclosing_cube(folders) -> pathlib.Path | None:
    """The first of `folders` that is a rollsweep cube (holds its markers' folder), else None."""
    return next((folder for folder in folders if (folder / MARKERS).is_dir()), None)

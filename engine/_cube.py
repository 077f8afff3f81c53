"""The cube: an xarray Dataset in a zarr v3 store, filled shard by shard.

The structure (coordinates, NaN-filled variables, attributes) is written first,
into a temporary folder renamed into place, so a store either exists whole or
not at all. Each shard then writes only its own chunks and afterwards drops a
done marker in `_rollsweep/done/`: a store killed at any moment loses at most the
shards in flight.
"""

import asyncio
import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import socket
import uuid
import warnings

import dask.array as da
import numpy as np
import xarray as xr
import zarr
import zarr.api.asynchronous

from ._aio import sync
from ._config import Sweep
from ._cost import layouts
from ._provenance import provenance
from ._status import status_attrs

MARKERS = "_rollsweep"
GRID, CRITICAL = "grid", "critical"
# Version of the on-disk layout (markers, attributes, fill values). A store of
# another format is refused with a clear message rather than misread.
STORE_FORMAT = 1


class StoreError(RuntimeError):
    """A store cannot be used for this run (another config, not a cube, ...)."""


@contextlib.contextmanager
def _quiet_zarr():
    # Consolidated metadata is not yet in the zarr v3 spec; it is what keeps
    # readers from listing the marker folder, so the warning is expected.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        yield


def open_cube(path) -> xr.Dataset:
    """Open a cube lazily (dask-backed) for analysis."""
    with _quiet_zarr():
        return xr.open_zarr(path, consolidated=True)


def cube_sweep(path) -> Sweep:
    """The sweep that made a cube, re-read from its attributes."""
    from ._config import parse_sweep

    attrs = read_attrs(path)
    if "config_hash" not in attrs:
        raise StoreError(f"{path}: not a rollsweep cube")
    check_format(path, attrs)
    return parse_sweep(attrs["config"], file=attrs.get("config_file", str(path)), out=str(path))


def critical_name(sweep_or_axis) -> str:
    axis = sweep_or_axis if isinstance(sweep_or_axis, str) else sweep_or_axis.critical.axis
    return f"critical_{axis}"


def _placeholder(shape, fill, dtype="float64"):
    """A never-computed stand-in for a variable's data (the store gets only its
    metadata): one dask chunk, as the zarr chunks are set by the encoding. A
    dask chunk per zarr chunk made dask build a graph the size of the cube's
    chunk count just to be discarded (~40 ms of a 25-shard run). Named from
    its arguments: dask would otherwise hash them (~1 ms a variable)."""
    shape = tuple(shape)
    name = f"rollsweep-placeholder-{'x'.join(map(str, shape))}-{fill}-{np.dtype(dtype).name}"
    return da.full(shape, fill, dtype=dtype, chunks=shape or -1, name=name)


def structure(sweep: Sweep) -> tuple[xr.Dataset, dict]:
    """The empty cube as a lazy Dataset (coordinates, variables, attributes),
    and each variable's zarr chunks."""
    study = sweep.study
    grid, critical = layouts(sweep)
    dims = sweep.axis_names
    coords = {}
    for axis in sweep.axes:
        p = study.parameter(axis.name)
        coords[axis.name] = (axis.name, axis.values, {"units": p.unit, "long_name": p.description})
    data, chunks = {}, {}
    for o in (study.outputs_by_name[name] for name in sweep.outputs):
        extra = tuple(name for name, _ in o.dims)
        for dim, labels in o.labels.items():
            coords[dim] = (dim, np.array(labels, dtype=object))  # zarr v3 "string" dtype
        shape = grid.shape + o.shape
        attrs = {"units": o.unit, "long_name": o.description}
        if o.optional:
            attrs["note"] = "NaN where absent (not a failure: see status)"
        data[o.name] = (dims + extra, _placeholder(shape, np.nan), attrs)
        chunks[o.name] = grid.chunks + o.shape
    counters = {
        "status": ("int8", status_attrs()),
        "num_steps": ("int32", {"long_name": "solver steps taken, all segments"}),
        "num_events": ("int32", {"long_name": "mode transitions (events) fired"}),
    }
    for name, (dtype, attrs) in counters.items():
        data[name] = (dims, _placeholder(grid.shape, 0, dtype), attrs)
        chunks[name] = grid.chunks
    if critical is not None:
        c = sweep.critical
        other = tuple(n for n in dims if n != c.axis)
        p = study.parameter(c.axis)
        data[critical_name(sweep)] = (
            other,
            _placeholder(critical.shape, np.nan),
            {
                "units": p.unit,
                "long_name": f"{c.axis} where {c.output} = {c.target:g}",
                "bracket": list(c.bracket),
                "xtol": c.xtol,
            },
        )
        data[f"{critical_name(sweep)}_status"] = (
            other,
            _placeholder(critical.shape, 0, "int8"),
            status_attrs(),
        )
        chunks[critical_name(sweep)] = chunks[f"{critical_name(sweep)}_status"] = critical.chunks
    ds = xr.Dataset(data, coords=coords)
    for name, p in sweep.parameters.items():
        ds.attrs[f"parameter.{name}"] = p
    ds.attrs.update(provenance(sweep))
    ds.attrs["store_format"] = STORE_FORMAT
    return ds, chunks


def _encoding(ds: xr.Dataset, chunks: dict) -> dict:
    """Each variable's zarr chunks (a shard's region), and for integer variables
    0 (= PENDING / nothing counted) as their fill value rather than masked floats."""
    encoding = {k: {"chunks": c} for k, c in chunks.items()}
    for k, v in ds.data_vars.items():
        if v.dtype.kind == "i":
            encoding[k]["_FillValue"] = None
    return encoding


def create(sweep: Sweep, path: pathlib.Path) -> None:
    """Write the empty cube at `path`, all or nothing."""
    path = pathlib.Path(path)
    ds, chunks = structure(sweep)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with _quiet_zarr():
            ds.to_zarr(tmp, mode="w-", compute=False, zarr_format=3, consolidated=True, encoding=_encoding(ds, chunks))
        for kind in (GRID, CRITICAL):
            (tmp / MARKERS / kind).mkdir(parents=True)
        # An old cube (overwrite) is moved aside only once the new one is complete.
        trash = tmp.with_name(tmp.name + "-old")
        if path.exists():
            os.rename(path, trash)
        os.rename(tmp, path)
        shutil.rmtree(trash, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(sweep: Sweep, path, overwrite: bool = False) -> str:
    """Create the cube, or check that an existing one belongs to this config.

    Returns "created" or "resumed".
    """
    path = pathlib.Path(path)
    if path.exists():
        attrs = read_attrs(path)
        found = attrs.get("config_hash")
        if found is None:
            raise StoreError(f"{path}: exists and is not a rollsweep cube; choose another --out")
        if found == sweep.config_hash:
            check_format(path, attrs)
            return "resumed"
        if not overwrite:
            raise StoreError(
                f"{path}: holds a cube of another config (hash {found[:12]}, this config "
                f"{sweep.config_hash[:12]}); use --overwrite to replace it or choose another --out"
            )
        with locked(path):  # never replace a cube another run is writing
            create(sweep, path)
        return "created"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        create(sweep, path)
    except OSError:
        if not path.exists():
            raise
        return prepare(sweep, path)  # another process created it first: same checks
    return "created"


def check_format(path, attrs=None) -> None:
    attrs = read_attrs(path) if attrs is None else attrs
    found = attrs.get("store_format")
    if found != STORE_FORMAT:
        raise StoreError(
            f"{path}: written by rollsweep {attrs.get('engine_version', '?')} in store format {found}; this "
            f"engine reads format {STORE_FORMAT}: recompute it (--overwrite) or open it with that version"
        )


@contextlib.contextmanager
def locked(path):
    """Exclusive use of a store by one `rollsweep run` (an advisory flock on a
    file in the store): a second run on the same store is refused, not interleaved."""
    lock = pathlib.Path(path) / MARKERS / "lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise StoreError(f"{path}: in use by another rollsweep run ({holder}); wait for it or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_attrs(path) -> dict:
    try:
        with _quiet_zarr():
            return dict(zarr.open_group(path, mode="r").attrs)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, KeyError):
        return {}


# Opened arrays of the stores this process writes, by store identity: opening a
# store's arrays (reading their metadata) cost ~3 ms a shard, as much as
# writing three of them.
_OPENED: dict = {}
_OPENED_STORES = 16


def _identity(path) -> tuple:
    """A store and this instance of it: a store is always created whole and
    renamed into place, so a re-created one has another inode and mtime."""
    stat = os.stat(pathlib.Path(path) / "zarr.json")
    return str(pathlib.Path(path).resolve()), stat.st_ino, stat.st_mtime_ns


async def _opened_arrays(path, names) -> dict:
    key = _identity(path)
    arrays = _OPENED.get(key, {})
    missing = [name for name in names if name not in arrays]
    if missing:
        group = await zarr.api.asynchronous.open_group(path, mode="r+")
        arrays = arrays | {name: await group.getitem(name) for name in missing}
        _OPENED[key] = arrays
        while len(_OPENED) > _OPENED_STORES:
            _OPENED.pop(next(iter(_OPENED)))
    return arrays


def write_region(path, region: tuple[slice, ...], values: dict) -> None:
    """Write one shard's arrays (name -> array shaped like the region).

    All arrays at once on zarr's event loop: written one after another, each
    write waits for its own round trip (1.8 ms per array on a 2-core machine,
    most of a cheap study's shard time)."""

    async def write_all():
        arrays = await _opened_arrays(path, list(values))

        async def write(name, array):
            target = arrays[name]
            extra = (slice(None),) * (target.ndim - len(region))
            await target.setitem(region + extra, array)

        await asyncio.gather(*(write(name, array) for name, array in values.items()))

    with _quiet_zarr():
        sync(write_all())


def slurm_folder(path) -> pathlib.Path:
    """Where a store keeps its SLURM job scripts, shares and job logs."""
    return pathlib.Path(path) / MARKERS / "slurm"


def marker_path(path, kind: str, shard: int) -> pathlib.Path:
    return pathlib.Path(path) / MARKERS / kind / f"{shard:08d}.json"


def mark_done(path, kind: str, shard: int, info: dict) -> None:
    final = marker_path(path, kind, shard)
    tmp = final.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, final)  # atomic: a marker is either absent or complete
    failed_marker(path, kind, shard).unlink(missing_ok=True)


def failed_marker(path, kind: str, shard: int) -> pathlib.Path:
    return pathlib.Path(path) / MARKERS / "failed" / f"{kind}-{shard:08d}.json"


def mark_failed(path, kind: str, shard: int, error: str) -> None:
    """Record a shard whose computation raised; a later run retries it."""
    final = failed_marker(path, kind, shard)
    final.parent.mkdir(exist_ok=True)
    tmp = final.with_suffix(".tmp")
    tmp.write_text(json.dumps({"kind": kind, "shard": shard, "error": error}))
    os.replace(tmp, final)


def failed_shards(path) -> list[dict]:
    folder = pathlib.Path(path) / MARKERS / "failed"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def done_shards(path, kind: str) -> set[int]:
    folder = pathlib.Path(path) / MARKERS / kind
    return {int(p.stem) for p in folder.glob("*.json")} if folder.exists() else set()


def read_markers(path, kind: str) -> list[dict]:
    folder = pathlib.Path(path) / MARKERS / kind
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]

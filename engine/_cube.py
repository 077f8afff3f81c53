"""The cube: an xarray Dataset in a zarr v3 store, filled shard by shard.

The structure (coordinates, NaN-filled variables, attributes) is written first,
into a temporary folder renamed into place, so a store either exists whole or
not at all. Each shard then writes only its own chunks and afterwards drops a
done marker in `_rollsweep/done/`: a store killed at any moment loses at most the
shards in flight.
"""

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import uuid
import warnings
import zlib

import dask.array as da
import numpy as np
import xarray as xr
import zarr
import zarr.api.asynchronous
import zarr.codecs

from ._aio import sync
from ._config import Sweep, check_out
from ._layout import layouts
from ._lock import acquire, release
from ._provenance import provenance, study_fingerprint
from ._status import status_attrs
from .errors import StoreError

MARKERS = "_rollsweep"
GRID, CRITICAL = "grid", "critical"
# Version of the on-disk layout (markers, attributes, fill values). A store of
# another format is refused with a clear message rather than misread.
STORE_FORMAT = 1


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


def structure(sweep: Sweep, platform: str | None = None) -> tuple[xr.Dataset, dict]:
    """The empty cube as a lazy Dataset (coordinates, variables, attributes),
    and each variable's zarr chunks; `platform`: where the run solves (its
    provenance's device)."""
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
        data[o.name] = (dims + extra, _placeholder(shape, np.nan, sweep.solver.dtype), attrs)  # as solved
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
            _placeholder(critical.shape, np.nan, sweep.solver.dtype),
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
    ds.attrs.update(provenance(sweep, platform))
    ds.attrs["store_format"] = STORE_FORMAT
    return ds, chunks


def compressor():
    """Blosc (lz4, level 1) after a byte shuffle, for every variable. A float64
    output compresses poorly byte by byte; shuffled, its exponent and high
    mantissa bytes lie side by side and do. Measured on the regime map (three
    float64 outputs, 2^20-point chunks, CPU time to write them): zarr's default
    (zstd alone) 50 ms to 0.66 of their size, this 18 ms to 0.54, blosc's zstd
    (level 1) 43 ms to 0.53, uncompressed 13 ms."""
    return zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle")


def _encoding(ds: xr.Dataset, chunks: dict) -> dict:
    """Each variable's zarr chunks (a shard's region) and compressor, and for
    integer variables 0 (= PENDING / nothing counted) as their fill value rather
    than masked floats."""
    encoding = {k: {"chunks": c, "compressors": (compressor(),)} for k, c in chunks.items()}
    for k, v in ds.data_vars.items():
        if v.dtype.kind == "i":
            encoding[k]["_FillValue"] = None
    return encoding


def create(sweep: Sweep, path: pathlib.Path, platform: str | None = None) -> None:
    """Write the empty cube at `path`, all or nothing."""
    path = pathlib.Path(path)
    ds, chunks = structure(sweep, platform)
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


def prepare(sweep: Sweep, path, overwrite: bool = False, platform: str | None = None) -> str:
    """Own the store, then create it, or check that an existing one belongs to this
    config and drop the done markers of shards whose data is damaged.

    Ownership (`locked`) is taken before anything is created or replaced and is
    kept by this process: the `locked(path)` block that follows (the run) takes
    it over and releases it at its end. `platform`: where the run solves (its
    plan's device, for the cube's provenance; None: JAX's default backend, as
    for a submission, which solves nothing here). Returns "created" or "resumed".
    """
    path = pathlib.Path(path)
    check_out(path, sweep.file, "run.out")
    path.parent.mkdir(parents=True, exist_ok=True)
    took = acquire(path, handover=True)
    try:
        return _prepare_owned(sweep, path, overwrite, platform)
    except BaseException:
        if took:  # refused or interrupted: the run that would take it over never starts
            release(path)
        raise


def _prepare_owned(sweep: Sweep, path: pathlib.Path, overwrite: bool, platform: str | None) -> str:
    _remove_leftovers(path)
    if not path.exists():
        create(sweep, path, platform)
        return "created"
    attrs = read_attrs(path)
    found = attrs.get("config_hash")
    if found is None:
        raise StoreError(f"{path}: exists and is not a rollsweep cube; choose another --out")
    if overwrite:  # afresh, whatever the store holds: the way to solve every point again
        create(sweep, path, platform)
        return "created"
    if found != sweep.config_hash:
        raise StoreError(
            f"{path}: holds a cube of another config (hash {found[:12]}, this config "
            f"{sweep.config_hash[:12]}); use --overwrite to replace it or choose another --out"
        )
    check_format(path, attrs)
    from ._verify import repair

    repair(sweep, path)
    return _resume_after_study_change(sweep, path, attrs.get("study_fingerprint"))


def _resume_after_study_change(sweep: Sweep, path: pathlib.Path, made_by: str | None) -> str:
    """Where the study's code changed since the cube was made (a fix, say), the
    shards with failed points are solved again with the new code; the points that
    succeeded are kept (--overwrite solves them all again)."""
    now = study_fingerprint(sweep.study)
    if made_by == now:
        return "resumed"
    again = 0
    for kind in (GRID, CRITICAL):
        for shard, marker in read_markers(path, kind).items():
            if marker is not None and marker.get("failed", 0) > 0:
                marker_path(path, kind, shard).unlink(missing_ok=True)
                again += 1
    # Recorded once its shards are pending: an interruption from here on loses nothing.
    _set_attribute(path, "study_fingerprint", now)
    return (f"resumed; the study's code changed since this cube was made ({(made_by or 'unknown')[:12]} -> "
            f"{now[:12]}): {again} shards with failed points solved again, the others kept (--overwrite: all)")


def _set_attribute(path, name: str, value) -> None:
    with _quiet_zarr(), warnings.catch_warnings():
        # The marker folder is the store's own, not a zarr node: expected to be skipped.
        warnings.filterwarnings("ignore", message="Object at _rollsweep is not recognized")
        group = zarr.open_group(path, mode="r+")
        group.attrs[name] = value
        zarr.consolidate_metadata(path)


def _remove_leftovers(path: pathlib.Path) -> None:
    """Temporary folders of creations that were interrupted (only the owner of the
    store creates them, and the caller owns it now)."""
    for leftover in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def check_format(path, attrs=None) -> None:
    attrs = read_attrs(path) if attrs is None else attrs
    found = attrs.get("store_format")
    if found != STORE_FORMAT:
        raise StoreError(
            f"{path}: written by rollsweep {attrs.get('engine_version', '?')} in store format {found}; this "
            f"engine reads format {STORE_FORMAT}: recompute it (--overwrite) or open it with that version"
        )


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


def digest(values: np.ndarray) -> str:
    """Checksum of an array's values as a reader gets them. NaNs count as one
    value: a chunk that is all NaN, the fill value, is not stored and reads back
    as the canonical NaN whatever NaN was written."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind == "f" and np.isnan(values).any():
        values = np.where(np.isnan(values), np.nan, values).astype(values.dtype)
    return f"{zlib.crc32(memoryview(values).cast('B')):08x}"  # the bytes in place, not a copy


def write_regions(path, regions) -> list[dict[str, str]]:
    """Write shards' arrays: `regions` is a list of (region, values), values
    mapping names to arrays shaped like the region. Returns each shard's
    checksums (name -> digest) for its done marker.

    All arrays of all the shards at once on zarr's event loop: written one
    after another, each write waits for its own round trip (1.8 ms per array on
    a 2-core machine, most of a cheap study's shard time)."""
    names = list(dict.fromkeys(name for _, values in regions for name in values))
    with _quiet_zarr():
        arrays = sync(_opened_arrays(path, names))
    # As read back; checksums here, on the task's thread: on the loop's thread,
    # every task's waited in one queue.
    regions = [(region, {name: np.asarray(array, dtype=arrays[name].dtype) for name, array in values.items()})
               for region, values in regions]
    digests = [{name: digest(array) for name, array in values.items()} for _, values in regions]

    async def write(region, name, array):
        target = arrays[name]
        await target.setitem(region + (slice(None),) * (target.ndim - len(region)), array)

    async def write_all():
        await asyncio.gather(*(write(region, name, array) for region, values in regions
                               for name, array in values.items()))

    with _quiet_zarr():
        sync(write_all())
    return digests


def write_region(path, region: tuple[slice, ...], values: dict) -> dict[str, str]:
    """Write one shard's arrays (see write_regions); return their checksums."""
    (digests,) = write_regions(path, [(region, values)])
    return digests


def slurm_folder(path) -> pathlib.Path:
    """Where a store keeps its SLURM job scripts, shares and job logs."""
    return pathlib.Path(path) / MARKERS / "slurm"


def marker_path(path, kind: str, shard: int) -> pathlib.Path:
    return pathlib.Path(path) / MARKERS / kind / f"{shard:08d}.json"


def mark_done(path, kind: str, shard: int, info: dict) -> None:
    """Mark a shard done with `info` (its "digests", the checksums of what was
    written for it, are what `verify` and the next run compare the data against)."""
    final = marker_path(path, kind, shard)
    tmp = final.with_suffix(f".tmp-{uuid.uuid4().hex[:8]}")
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


def _read_json(path: pathlib.Path):
    """A marker's content, or None where it is empty or corrupt (a disk that filled
    up or a hand edit): such a marker counts as absent."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def failed_shards(path) -> list[dict]:
    folder = pathlib.Path(path) / MARKERS / "failed"
    if not folder.exists():
        return []
    found = (_read_json(p) for p in sorted(folder.glob("*.json")))
    return [f for f in found if isinstance(f, dict) and {"kind", "shard", "error"} <= f.keys()]


def done_shards(path, kind: str) -> set[int]:
    """Shards with a done marker (by name only: runs call this often). A marker that
    cannot be read, or whose shard's data is damaged, is removed when a run
    prepares the store (`_verify.repair`)."""
    folder = pathlib.Path(path) / MARKERS / kind
    return {int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()} if folder.exists() else set()


def has_done_shards(path) -> bool:
    return any(done_shards(path, kind) for kind in (GRID, CRITICAL))


def read_markers(path, kind: str) -> dict[int, dict | None]:
    """Each done marker by shard: its content, or None where it cannot be read."""
    folder = pathlib.Path(path) / MARKERS / kind
    markers = {}
    for p in sorted(folder.glob("*.json")):
        if p.stem.isdigit():
            content = _read_json(p)
            markers[int(p.stem)] = content if isinstance(content, dict) else None
    return markers

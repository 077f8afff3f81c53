"""A cube's structure: its coordinates, variables (NaN-filled placeholders,
never computed), attributes and each variable's zarr chunks (a shard's region),
as a pure function of the sweep and where it solves."""

import dask.array as da
import numpy as np
import xarray as xr
import zarr.codecs

from engine.cube.markers import CRITICAL, GRID
from engine.cube.provenance import provenance
from engine.study.status import status_attrs
from engine.sweep.config import Sweep
from engine.sweep.layout import layouts

# Version of the on-disk layout (markers, attributes, fill values). A store of
# another format is refused with a clear message rather than misread.
STORE_FORMAT = 1
# The arrays every grid shard writes besides the outputs.
COUNTERS = ("status", "num_steps", "num_events")


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


def structure(sweep: Sweep, devices: str) -> tuple[xr.Dataset, dict]:
    """The empty cube as a lazy Dataset (coordinates, variables, attributes),
    and each variable's zarr chunks; `devices`: where the run solves (its
    provenance's device, engine.solve.device.devices_name)."""
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
    ds.attrs.update(provenance(sweep, devices))
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


def encoding(ds: xr.Dataset, chunks: dict) -> dict:
    """Each variable's zarr chunks (a shard's region) and compressor, and for
    integer variables 0 (= PENDING / nothing counted) as their fill value rather
    than masked floats."""
    encoding = {k: {"chunks": c, "compressors": (compressor(),)} for k, c in chunks.items()}
    for k, v in ds.data_vars.items():
        if v.dtype.kind == "i":
            encoding[k]["_FillValue"] = None
    return encoding


def kind_arrays(sweep) -> dict:
    """kind -> (layout, names of the arrays a shard of that kind writes)."""
    grid, critical = layouts(sweep)
    kinds = {GRID: (grid, (*sweep.outputs, *COUNTERS))}
    if critical is not None:
        name = critical_name(sweep)
        kinds[CRITICAL] = (critical, (name, f"{name}_status"))
    return kinds

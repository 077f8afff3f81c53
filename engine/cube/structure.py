"""A cube's structure: its coordinates, variables (NaN-filled, never written
here), attributes and each variable's zarr chunks (a shard's region), as a
pure function of the sweep and where it solves; and that structure written
into a new zarr v3 store.

Written with zarr itself, as xarray's `Dataset.to_zarr` (its conventions:
`dimension_names`, a float variable's NaN fill value and its `_FillValue`
attribute, consolidated metadata) would write it, which it did before:
`rollsweep run` then never imports xarray, pandas and dask (0.5-0.9 s of a
warm run's 2.2 s). `xr.open_zarr` reads both alike (tests/test_lazy_imports.py)."""

import base64
import dataclasses
import json
import struct
import warnings
import zlib

import numpy as np
import zarr
import zarr.codecs

from engine.cube.chunks import digest
from engine.cube.markers import CRITICAL, GRID
from engine.cube.provenance import provenance
from engine.study.interface import dimensionless
from engine.study.status import status_attrs
from engine.sweep.config import Sweep
from engine.sweep.layout import layouts
from engine.sweep.samples import SAMPLE

# Version of the on-disk layout (markers, attributes, fill values). A store of
# another format is refused with a clear message rather than misread.
STORE_FORMAT = 1
# The arrays every grid shard writes besides the outputs.
COUNTERS = ("status", "num_steps", "num_events")
# A float variable's `_FillValue` attribute as xarray encodes NaN for zarr v3
# (the float64 bytes of NaN in base64, whatever the variable's float dtype).
NAN_FILL = base64.standard_b64encode(struct.pack("<d", float("nan"))).decode()


def critical_name(sweep_or_axis) -> str:
    axis = sweep_or_axis if isinstance(sweep_or_axis, str) else sweep_or_axis.critical.axis
    return f"critical_{axis}"


@dataclasses.dataclass(frozen=True)
class Variable:
    """One array of the cube. `values`: a coordinate's, written with the
    structure (zarr's own chunks and compressor); None: a variable the shards
    write (`chunks`, one shard's region; the fill value until then), a sampled
    design's coordinates among them (sample_coordinates)."""

    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    attrs: dict
    chunks: tuple[int, ...] | None = None
    values: np.ndarray | None = None


def structure(sweep: Sweep, devices: str) -> tuple[dict[str, Variable], dict]:
    """The empty cube: its arrays by name (coordinates first) and its
    attributes; `devices`: where the run solves (its provenance's device,
    engine.solve.device.devices_name)."""
    study = sweep.study
    grid, critical = layouts(sweep)
    dims = sweep.axis_names
    arrays: dict[str, Variable] = {}
    for axis in sweep.axes:
        if sweep.samples is not None and axis.name == SAMPLE:  # (a study may have a parameter of that name)
            arrays |= sample_coordinates(sweep, grid.chunks[0])
            continue
        p = study.parameter(axis.name)
        values = np.asarray(axis.values)
        arrays[axis.name] = Variable((axis.name,), values.shape, values.dtype.name, described(p), values=values)
    data = {}
    for o in (study.outputs_by_name[name] for name in sweep.outputs):
        extra = tuple(name for name, _ in o.dims)
        for dim, labels in o.labels.items():
            values = np.array(labels, dtype=object)  # zarr v3 "string" dtype
            arrays[dim] = Variable((dim,), values.shape, "str", {}, values=values)
        if o.sampled:
            arrays["time"] = time_coordinate(sweep)
        attrs = described(o)
        if o.optional:
            attrs["note"] = "NaN where absent (not a failure: see status)"
        if o.sampled:
            attrs["note"] = "NaN at the times before a point's solve starts and after it ends"
        # A shard's block holds its points' whole values (a sampled output's every
        # time, docs/cubes.md): one chunk a shard, written and checksummed whole.
        shape = sweep.output_shape(o.name)
        data[o.name] = Variable(dims + extra, grid.shape + shape, sweep.solver.dtype, attrs,  # as solved
                                chunks=grid.chunks + shape)
    counters = {
        "status": ("int8", status_attrs()),
        "num_steps": ("int32", {"long_name": "solver steps taken, all segments"}),
        "num_events": ("int32", {"long_name": "mode transitions (events) fired"}),
    }
    for name, (dtype, attrs) in counters.items():
        data[name] = Variable(dims, grid.shape, dtype, attrs, chunks=grid.chunks)
    if critical is not None:
        c = sweep.critical
        other = tuple(n for n in dims if n != c.axis)
        p = study.parameter(c.axis)
        found = study.outputs_by_name.get(c.output)
        attrs = described(p, long_name=f"{p.label} where {found.label if found else c.output} = {c.target:g}",
                          description=f"{c.axis} where {c.output} = {c.target:g}")
        attrs |= {"bracket": list(c.bracket), "xtol": c.xtol}
        data[critical_name(sweep)] = Variable(other, critical.shape, sweep.solver.dtype, attrs,
                                              chunks=critical.chunks)
        data[f"{critical_name(sweep)}_status"] = Variable(other, critical.shape, "int8", status_attrs(),
                                                          chunks=critical.chunks)
    if sweep.samples is not None:  # the draws are coordinates along `sample` (CF's attribute, which xarray reads)
        for variable in data.values():
            if SAMPLE in variable.dims:
                variable.attrs["coordinates"] = " ".join(sweep.samples.parameters)
    arrays |= data
    attrs = {f"parameter.{name}": p for name, p in sweep.parameters.items()}
    attrs.update(provenance(sweep, devices))
    attrs["store_format"] = STORE_FORMAT
    return arrays, {k: _attribute(v) for k, v in attrs.items()}


def sample_coordinates(sweep: Sweep, chunk: int) -> dict[str, Variable]:
    """A sampled design's dimension (its points' index) and each drawn
    parameter's values along it, in the shards' blocks along `sample` (`chunk`)
    and their compressor. Not written with the structure: each sample block's
    coordinates are written by the grid shard that is the block's first
    (shard_coordinates), with its outputs and under its done marker's
    checksums, so the store's making holds no design-sized write (4.2 million
    points, three coordinates: 1.1 s of a run on 2 busy cores, before any
    solve). Until its shard is solved a block's coordinates read as their
    fill value (index 0, NaN draws), as its outputs read NaN."""
    samples = sweep.samples
    chunks = (min(chunk, samples.points),)
    arrays = {SAMPLE: Variable((SAMPLE,), (samples.points,), "int64",
                               {"long_name": "sample", "description": samples.describe()}, chunks)}
    for name in samples.parameters:
        attrs = described(sweep.study.parameter(name)) | {"distribution": json.dumps(samples.parameters[name])}
        arrays[name] = Variable((SAMPLE,), (samples.points,), "float64", attrs, chunks)
    return arrays


def shard_coordinates(sweep: Sweep) -> tuple[str, ...]:
    """The coordinates the grid's shards write (a sampled design's, along
    `sample`, the cube's first dimension): none for a grid."""
    return (SAMPLE, *sweep.samples.parameters) if sweep.samples is not None else ()


def writes_coordinates(layout, shard: int) -> bool:
    """Whether grid `shard` writes its sample block's coordinates: the block's
    first shard, at the first block of every other dimension (one writer a
    block, whatever else is swept beside the design)."""
    return not any(np.unravel_index(shard, layout.blocks)[1:])


def coordinate_values(sweep: Sweep, name: str, rows: slice) -> np.ndarray:
    """A shard-written coordinate's values (shard_coordinates) over `rows` of
    the design: the sample index, or a drawn parameter's draws (a view)."""
    if name == SAMPLE:
        start, stop, _ = rows.indices(sweep.samples.points)
        return np.arange(start, stop, dtype=np.int64)
    return sweep.samples.draws[name][rows]


def time_coordinate(sweep: Sweep) -> Variable:
    """The sweep's sample times (`[save] times`), in the study's time unit."""
    values = np.asarray(sweep.save_times, dtype="float64")
    unit = sweep.study.time_unit
    return Variable(("time",), values.shape, "float64", {"long_name": "time", "units": unit,
                                                          "description": "the times the sampled outputs hold"},
                    values=values)


def described(declared, **override) -> dict:
    """A parameter's or output's attributes in xarray's conventions, which its
    `.plot()` reads ("long_name [units]"): `long_name` its display label, `units`
    its unit (none for a dimensionless quantity: no "[1]"), and its description."""
    attrs = {"long_name": declared.label, "units": declared.unit, "description": declared.description} | override
    if dimensionless(declared.unit):
        del attrs["units"]
    return attrs


def _attribute(value):
    """An attribute as JSON holds it (numpy values as Python's, as xarray stores them)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def _fill_value(dtype: str):
    """NaN for floats, the dtype's zero otherwise (0 = PENDING / nothing counted;
    "" for labels): what xarray gave each."""
    return np.nan if dtype.startswith("float") else None


def write(path, arrays: dict[str, Variable], attrs: dict) -> dict[str, str]:
    """The structure into a new zarr v3 store at `path` (which must not exist):
    every array's metadata, the coordinates' values, consolidated metadata.
    Returns each coordinate's checksum (name -> coordinate_digest) as read back,
    which the cube's markers keep as a shard's done marker keeps its arrays'."""
    group = zarr.create_group(path, zarr_format=3, attributes=attrs)
    digests = _create_arrays(group, arrays)
    zarr.consolidate_metadata(path)
    return digests


def add(path, arrays: dict[str, Variable], attrs: dict, remove=(), prefix: str | None = None) -> dict[str, str]:
    """Arrays whose values are all given (`values`) and attributes added to the
    existing store at `path` (an array of the same name replaced), the arrays
    named in `remove` and the attributes starting with `prefix` removed first,
    and its consolidated metadata written again: what a sensitivity analysis
    writes once every shard is done (engine.cube.sensitivity). Returns each
    array's checksum as read back (coordinate_digest)."""
    with warnings.catch_warnings():
        # The markers' folder is the store's own, not a zarr node: expected to be skipped;
        # consolidated metadata, not yet in zarr v3's spec, is what readers read.
        warnings.filterwarnings("ignore", message="Object at _rollsweep is not recognized")
        warnings.filterwarnings("ignore", message="Consolidated metadata")
        group = zarr.open_group(path, mode="r+")
        for name in remove:
            if name in group:
                del group[name]
        kept = {k: v for k, v in group.attrs.items() if prefix is None or not k.startswith(prefix)}
        group.attrs.put(kept | {k: _attribute(v) for k, v in attrs.items()})
        digests = _create_arrays(group, arrays, overwrite=True)
        zarr.consolidate_metadata(path)
    return digests


def _create_arrays(group, arrays: dict[str, Variable], overwrite: bool = False) -> dict[str, str]:
    """Each array's metadata, and the values of those given, in xarray's
    conventions; the given values' checksums as read back."""
    digests = {}
    for name, v in arrays.items():
        attributes = dict(v.attrs)
        if v.dtype.startswith("float"):
            attributes["_FillValue"] = NAN_FILL
        array = group.create_array(
            name,
            shape=v.shape,
            dtype=str if v.dtype == "str" else v.dtype,
            chunks="auto" if v.chunks is None else v.chunks,
            compressors="auto" if v.chunks is None else (compressor(),),
            fill_value=_fill_value(v.dtype),
            dimension_names=v.dims or None,
            attributes=attributes,
            overwrite=overwrite,
        )
        if v.values is not None:
            array[...] = v.values
            digests[name] = coordinate_digest(array[...])
    return digests


def coordinate_digest(values) -> str:
    """Checksum of a coordinate's values as a reader gets them: numbers as
    engine.cube.chunks.digest sums an array's, labels (strings, which have no
    bytes of their own in an object array) by their JSON text."""
    values = np.asarray(values)
    if values.dtype.kind in "OUST":  # object, numpy and variable-width strings
        return f"{zlib.crc32(json.dumps([str(v) for v in values.ravel()]).encode()):08x}"
    return digest(values)


def compressor():
    """Blosc (lz4, level 1) after a byte shuffle, for every variable. A float64
    output compresses poorly byte by byte; shuffled, its exponent and high
    mantissa bytes lie side by side and do. Measured on the regime map (three
    float64 outputs, 2^20-point chunks, CPU time to write them): zarr's default
    (zstd alone) 50 ms to 0.66 of their size, this 18 ms to 0.54, blosc's zstd
    (level 1) 43 ms to 0.53, uncompressed 13 ms."""
    return zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle")


def kind_arrays(sweep) -> dict:
    """kind -> (layout, names of the arrays a shard of that kind writes)."""
    grid, critical = layouts(sweep)
    kinds = {GRID: (grid, (*sweep.outputs, *COUNTERS))}
    if critical is not None:
        name = critical_name(sweep)
        kinds[CRITICAL] = (critical, (name, f"{name}_status"))
    return kinds

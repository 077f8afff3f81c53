"""A shard's chunks written by the engine's own writers (engine/cube/chunks.py)
are the files zarr writes for the same values: byte for byte, edge chunks and
trailing dimensions included, and a chunk of fill value alone is not stored."""

import numpy as np
import pytest
import zarr

from engine.cube.chunks import ChunkWriter, digest
from engine.cube.structure import compressor

SHAPE, CHUNKS = (10, 7, 3), (4, 7, 3)  # a grid of 10 x 7 cut along its first axis; a trailing dimension of 3
REGIONS = [(slice(0, 4),), (slice(4, 8),), (slice(8, 10),)]  # the last an edge chunk


def _array(root, dtype):
    group = zarr.open_group(root, mode="a")
    fill = np.nan if dtype.startswith("float") else None
    return group.create_array(dtype, shape=SHAPE, chunks=CHUNKS, dtype=dtype, fill_value=fill,
                              compressors=(compressor(),))


def _values(dtype):
    values = np.random.default_rng(7).normal(size=SHAPE) * 40
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "int8"])
def test_each_chunk_is_the_file_zarr_writes(tmp_path, dtype):
    values = _values(dtype)
    by_zarr = _array(tmp_path / "zarr", dtype)
    _array(tmp_path / "engine", dtype)
    writer = ChunkWriter(tmp_path / "engine", dtype, zarr.open_group(tmp_path / "engine", mode="r+")[dtype])
    for region in REGIONS:
        by_zarr[region] = values[region]
        assert writer.write(region, values[region]) == digest(values[region])
    for index in range(len(REGIONS)):
        key = f"{dtype}/c/{index}/0/0"
        assert (tmp_path / "engine" / key).read_bytes() == (tmp_path / "zarr" / key).read_bytes(), key
    read = zarr.open_group(tmp_path / "engine", mode="r")[dtype][...]
    np.testing.assert_array_equal(read, values)


def test_a_chunk_of_fill_value_alone_is_not_stored_and_replaces_one_stored(tmp_path):
    array = _array(tmp_path, "float64")
    writer = ChunkWriter(tmp_path, "float64", array)
    chunk = tmp_path / "float64" / "c" / "1" / "0" / "0"
    writer.write(REGIONS[1], np.ones((4, 7, 3)))
    assert chunk.exists()
    nan = np.full((4, 7, 3), np.nan)
    assert writer.write(REGIONS[1], nan) == digest(nan)
    assert not chunk.exists()  # a rewritten shard of NaNs leaves no stale values behind
    assert np.isnan(zarr.open_group(tmp_path, mode="r")["float64"][4:8]).all()
    assert not list(tmp_path.rglob("*.partial"))


def test_a_region_that_is_not_one_chunk_is_refused(tmp_path):
    writer = ChunkWriter(tmp_path, "float64", _array(tmp_path, "float64"))
    with pytest.raises(ValueError, match="not one whole chunk"):
        writer.write((slice(2, 6),), np.ones((4, 7, 3)))


def test_an_array_of_other_codecs_is_written_through_zarr(tmp_path):
    """A cube written by an earlier version (zstd alone) resumes: its arrays are
    written by zarr's own setitem, checksums as for the others."""
    import zarr.api.asynchronous

    from engine.cube.aio import sync

    group = zarr.open_group(tmp_path, mode="a")
    group.create_array("plain", shape=(6,), chunks=(4,), dtype="float64", fill_value=np.nan,
                       compressors=(zarr.codecs.ZstdCodec(),))
    array = sync(zarr.api.asynchronous.open_array(store=str(tmp_path), path="plain", mode="r+"))
    writer = ChunkWriter(tmp_path, "plain", array)
    values = np.array([1.5, -2.0])
    assert writer.write((slice(4, 6),), values) == digest(values)
    np.testing.assert_array_equal(zarr.open_group(tmp_path, mode="r")["plain"][4:], values)


def test_values_of_another_shape_than_their_region_are_refused(tmp_path):
    writer = ChunkWriter(tmp_path, "float64", _array(tmp_path, "float64"))
    with pytest.raises(ValueError, match=r"values of shape \(3, 7, 3\)"):
        writer.write(REGIONS[0], np.ones((3, 7, 3)))

"""A sampled design's unit draws, kept between processes.

Every process that reads a `[samples]` sweep draws its whole design: `run`,
`status`, `verify`, each worker and each SLURM array task. Drawing means
importing scipy.stats (0.5-1.5 s of CPU, most of it holding the GIL) and
running its Sobol' engine (3 s for the bicycle's 2^20 x 25 draws on a busy
core), for a result that is a pure function of the design's method, size and
seed and of the drawing libraries' versions. So the first process stores
the unit design (points x parameters in [0, 1]) in the compile cache's folder
and later ones read it back: the same array, bit for bit, checked against the
CRC-32 stored with it (a file that does not match is drawn again and
replaced). Where the cache is off ($ROLLSWEEP_CACHE empty) nothing is kept.
"""

import functools
import hashlib
import importlib.metadata
import io
import json
import os
import pathlib
import zlib

import numpy as np

from engine._atomic_file import write_whole
from engine._jax_setup import cache_dir

# Version of the keys and the files: a change invalidates every entry.
FORMAT = 1
# Designs kept on disk, the most recently used: each is a run's points x drawn
# parameters in float64 (the bicycle's Sobol' design, 177 MB), so only a few.
KEPT = 6


@functools.cache
def _versions(packages: tuple[str, ...]) -> dict:
    """The installed versions of the drawing packages (read from their
    metadata: nothing imported)."""
    found = {}
    for name in packages:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _path(design_key: str, packages: tuple[str, ...]) -> pathlib.Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    text = json.dumps([FORMAT, design_key, np.__version__, _versions(packages)])
    return folder / "designs" / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.npy"


def load(design_key: str, packages: tuple[str, ...]) -> np.ndarray | None:
    """The unit design stored under `design_key` by these packages' versions;
    None where none is stored, or what is stored is not whole."""
    path = _path(design_key, packages)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
        end = blob.index(b"\n")
        body = memoryview(blob)[end + 1:]  # (a view: the file's 200 MB are not copied again)
        if json.loads(blob[:end]) != {"crc32": zlib.crc32(body)}:
            return None
        unit = _array(body)
        os.utime(path)  # recently used: kept (store's eviction)
    except (OSError, ValueError):
        return None
    return unit


def _array(npy: memoryview) -> np.ndarray:
    """The array an .npy file's bytes hold, on those bytes (read-only)."""
    header = io.BytesIO(npy[:65536])
    version = np.lib.format.read_magic(header)
    shape, fortran_order, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)(header)
    if dtype.hasobject:
        raise ValueError("not an array of numbers")
    values = np.frombuffer(npy, dtype, count=int(np.prod(shape)), offset=header.tell())
    return values.reshape(shape, order="F" if fortran_order else "C")


def store(design_key: str, packages: tuple[str, ...], unit: np.ndarray) -> None:
    """Keep `unit` for the processes after this one; the least recently used
    designs beyond KEPT are removed."""
    path = _path(design_key, packages)
    if path is None:
        return
    buffer = io.BytesIO()
    np.save(buffer, unit, allow_pickle=False)
    body = buffer.getvalue()
    write_whole(path, json.dumps({"crc32": zlib.crc32(body)}).encode() + b"\n" + body)
    _evict(path.parent)


def _evict(folder: pathlib.Path) -> None:
    try:
        files = sorted(folder.glob("*.npy"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:  # another process evicting the same files: its job done
        pass

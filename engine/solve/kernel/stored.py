"""What tracing a study's kernel body decides, kept between processes.

A fused run traced the study's kernel body twice in every process before its
first call: for the plan's check (does the study fuse, and do its start and
finish run inside the kernel) and for the C source of a generated backend
(`cuda`, `host`). Both are pure functions of the study's code and what it
is made of (engine.solve.made_of), the engine's source, the packages'
versions and the settings (engine.solve.source_key), so the first process
stores them in the compile cache's folder and later ones read them. Measured on 2 CPU cores
(benchmarks/first_call.py --backend host: rolling ball, a fresh process,
seven alternating rounds): planning 0.51-0.60 s -> 0.02 s; planning and the
first call of 200,000 points together 1.78-1.91 s -> 1.32-1.51 s, of which
the solve is 0.87-0.90 s (the first call now does some tracing the check did).
A file that cannot be read or does not fit is made again, as is generated C
whose text is not what was stored (its SHA-256 stored with it: the library
compiled from it is code the process runs); with the cache off
($ROLLSWEEP_CACHE empty) nothing is stored.
"""

import functools
import hashlib
import json
import pathlib

import numpy as np

from engine._atomic_file import write_whole
from engine._jax_setup import cache_dir
from engine.solve.source_key import source_key

# Version of the keys and the files: a change invalidates every entry.
FORMAT = 1


def key(study, **made_with) -> str | None:
    """The key of what tracing `study`'s kernel body made with `made_with`
    (None: nothing is stored for this study: engine.solve.source_key)."""
    return source_key(study, format=FORMAT, part="kernel", **made_with)


def _path(key: str | None, suffix: str) -> pathlib.Path | None:
    folder = cache_dir()
    return None if folder is None or key is None else folder / "traced" / f"{key}.{suffix}"


def load(key: str | None, suffix: str):
    """The JSON value stored under `key` (None: none, or unreadable)."""
    path = _path(key, suffix)
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def store(key: str | None, suffix: str, value) -> None:
    path = _path(key, suffix)
    if path is not None:
        write_whole(path, json.dumps(value).encode())


def kernel_source(body, key: str | None):
    """The kernel body (engine.solve.kernel.body.KernelBody) generated as C, or
    read where an earlier process generated it under `key` (for the same
    column dtypes): a c_source.KernelSource."""
    from engine.solve.kernel.c_source import KernelSource, generate

    in_dtypes = [np.dtype(np.int32)] + [np.dtype(d) for d in body.input_dtypes]
    out_dtypes = [np.dtype(d) for d in body.out_dtypes]
    names = {"in": [d.str for d in in_dtypes], "out": [d.str for d in out_dtypes]}
    found = load(key, "c.json")
    if (isinstance(found, dict) and {k: found.get(k) for k in names} == names and isinstance(found.get("text"), str)
            and found.get("sha256") == _sha256(found["text"])):
        return KernelSource.of(found["text"], in_dtypes, out_dtypes)
    source = generate(functools.partial(body, one_point=True), in_dtypes, out_dtypes)
    store(key, "c.json", {**names, "text": source.text, "sha256": _sha256(source.text)})
    return source


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

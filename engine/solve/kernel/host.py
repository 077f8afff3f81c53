"""The generated kernel compiled for the host: a shared library, one point at a time.

What it is for: CI and the tests, which check the generated C (the same
text the CUDA backend compiles) against closed forms and the other solvers
without a GPU; and the CPU, should it ever be measured faster than the lanes
solver (it is not the CPU default).

The system C compiler builds the source with IEEE arithmetic as XLA does it
(`-ffp-contract=off -fno-fast-math`: no fused multiply-adds, no reassociation)
and without `-march=native`, so a result does not depend on the machine that
compiled it. Libraries are cached on disk by a hash of source, compiler and
flags (written to a temporary name, then renamed: concurrent processes never
load a half-written file). Inside `jax.jit` the batch runs through
`jax.experimental.buffer_callback`, which hands the callback XLA's own
buffers: no copies.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax
import numpy as np

from engine._jax_setup import user_cache
from engine.solve.kernel.c_source import HOST_ENTRY, KernelSource, KernelUnsupported
from engine.solve.kernel.stored import kernel_source

FLAGS = ("-O2", "-fPIC", "-shared", "-std=c11", "-ffp-contract=off", "-fno-fast-math")
LIBS = ("-lm",)
# ctypes gives a foreign function at most this many argument types (CPython's
# CTYPES_MAX_ARGCOUNT): the point count and one pointer a column.
CTYPES_MAX_ARGUMENTS = 1024

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


class NoCompiler(KernelUnsupported):
    """The host has no C compiler (or it failed): the generated kernel cannot be built here."""


def compiler() -> str | None:
    """The C compiler: $CC, else cc, else gcc (None: none found)."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


def cache_dir() -> Path:
    """Where compiled kernels are kept: the user's rollsweep cache, `kernels`."""
    return user_cache() / "kernels"


def _version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def library(source: KernelSource) -> ctypes.CDLL:
    """The source compiled and loaded (from the cache when built before)."""
    cc = compiler()
    if cc is None:
        raise NoCompiler("no C compiler (cc, gcc or $CC) to build the generated kernel for the host")
    key = hashlib.sha256("\0".join([source.digest, cc, _version(cc), *FLAGS, *LIBS]).encode()).hexdigest()[:32]
    with _lock:
        if key in _loaded:
            return _loaded[key]
        folder = cache_dir()
        path = folder / f"rs_{key}.so"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
                c_file, built = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
                c_file.write_text(source.text)
                run = subprocess.run([cc, *FLAGS, "-o", str(built), str(c_file), *LIBS],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    raise NoCompiler(f"{cc} failed to build the generated kernel:\n{run.stderr[-4000:]}")
                os.replace(built, path)  # atomic: another process sees the whole library or none
        lib = ctypes.CDLL(str(path))
        _loaded[key] = lib
        return lib


class HostKernel:
    """A kernel body compiled for the host, called on whole columns.

    Built from the body's generated source; `block_call` has the Pallas
    backend's interface (the block is irrelevant here: a point is a loop
    iteration)."""

    name = "host"

    def __init__(self, source: KernelSource):
        self.source = source
        columns = len(source.in_dtypes) + len(source.out_dtypes)
        if columns + 1 > CTYPES_MAX_ARGUMENTS:  # checked before the compiler is run: the call could not be made
            raise KernelUnsupported(f"the host kernel would take {columns} columns (an event log of many rows "
                                    f"read outside the kernel), more than ctypes passes to a C function "
                                    f"({CTYPES_MAX_ARGUMENTS - 1} and the point count)")
        entry = getattr(library(source), HOST_ENTRY)
        entry.restype = None
        entry.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * columns
        self._entry = entry

    @classmethod
    def of(cls, body, key: str | None = None) -> "HostKernel":
        """The fused kernel body (engine.solve.kernel.body.KernelBody) generated
        (or read where stored under `key`: engine.solve.kernel.stored) and compiled."""
        return cls(kernel_source(body, key))

    def run_numpy(self, *columns: np.ndarray) -> list[np.ndarray]:
        """The kernel on numpy columns (outside jit: the code generator's tests)."""
        n = len(columns[0])
        ins = [np.ascontiguousarray(c, d) for c, d in zip(columns, self.source.in_dtypes, strict=True)]
        outs = [np.empty(n, d) for d in self.source.out_dtypes]
        self._entry(n, *[a.ctypes.data for a in ins + outs])
        return outs

    def _callback(self, ctx, outs, *ins):
        arrays = [np.asarray(b) for b in ins]
        results = [np.asarray(b) for b in outs]
        for a in arrays + results:
            if not a.flags.c_contiguous:
                raise ValueError("the host kernel needs contiguous columns")
        self._entry(arrays[0].shape[0], *[a.ctypes.data for a in arrays + results])

    def block_call(self, kernel, inputs, out_dtypes, block, interpret) -> list[jax.Array]:
        """kernel(*inputs) -> outputs, columns in and out (as engine.solve.kernel.pallas.block_call)."""
        from jax.experimental.buffer_callback import buffer_callback

        if [np.dtype(x.dtype) for x in inputs] != list(self.source.in_dtypes):
            raise ValueError("the host kernel's inputs do not have the dtypes it was generated for")
        n = inputs[0].shape[0]
        shapes = [jax.ShapeDtypeStruct((n,), d) for d in out_dtypes]
        return list(buffer_callback(self._callback, shapes)(*inputs))

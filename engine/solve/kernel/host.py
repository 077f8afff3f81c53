"""The generated kernel compiled for the host: a shared library, one point at a time.

The CPU's default solver for a study whose whole hybrid solve fuses into one
kernel (engine.solve.plan.default_solver), where a C compiler is found: one
point's whole solve a loop iteration, its steps and events in registers, not
the lanes' lockstep of whole-vector operations. Measured on 2 cores (`rollsweep
run`, its own "solved in"), against the lanes: the rolling ball (200,000
points) 1.35-1.42x, the serve landing map 1.6-2.0x, the bouncing ball (90,000
points, 20 impacts a point) 1.2-1.4x. The tests also check the generated C
(the same text the CUDA backend compiles) against closed forms and the other
solvers here, without a GPU.

The system C compiler builds the source with IEEE arithmetic as XLA does it
(`-ffp-contract=off -fno-fast-math`: no fused multiply-adds, no reassociation)
and without `-march=native`, so a result does not depend on the machine that
compiled it. Libraries are cached on disk by a hash of source, compiler,
flags and JAX's FFI headers (written to a temporary name, then renamed:
concurrent processes never load a half-written file).

Inside `jax.jit` the batch is an XLA FFI custom call (`jax.ffi`): XLA hands
the library's handler its own buffers (no copies), and, unlike a Python
callback, the program holding it can be exported and kept in JAX's
persistent compile cache, so a warm process neither traces nor compiles it.
The call's target is named by its library (`rs_host_<key>`); a process that
reads such a program registers the library first (`register_targets`).
"""

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax
import numpy as np

from engine._jax_setup import user_cache

# The C generator (engine.solve.kernel.c_source) is imported where a library is
# built: a warm process only loads and registers the libraries its stored
# programs call.

FLAGS = ("-O2", "-fPIC", "-shared", "-std=c11", "-ffp-contract=off", "-fno-fast-math")
LIBS = ("-lm",)
# ctypes gives a foreign function at most this many argument types (CPython's
# CTYPES_MAX_ARGCOUNT): the point count and one pointer a column. Only the
# tests' numpy path (run_numpy) calls the entry through ctypes; XLA calls the
# FFI handler, which takes any number of columns.
CTYPES_MAX_ARGUMENTS = 1024
# The FFI target of a library: its name holds the library's key.
TARGET_PREFIX = "rs_host_"
TARGET = re.compile(rb"rs_host_([0-9a-f]{32})")

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}
_registered: set[str] = set()  # FFI targets registered in this process


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


def _ffi_headers() -> tuple[str, str]:
    """The folder of JAX's FFI C headers and a digest of the one the handler
    includes (its structs' layout changes between jaxlib versions)."""
    folder = jax.ffi.include_dir()
    header = Path(folder) / "xla" / "ffi" / "api" / "c_api.h"
    return folder, hashlib.sha256(header.read_bytes()).hexdigest()


def _library_path(key: str) -> Path:
    return cache_dir() / f"rs_{key}.so"


def library(source) -> tuple[str, ctypes.CDLL]:
    """The source (a c_source.KernelSource) compiled with its FFI handler and
    loaded (from the cache when built before): (its key, the library)."""
    from engine.solve.kernel.c_source import KernelUnsupported, ffi_entry

    cc = compiler()
    if cc is None:
        raise KernelUnsupported("no C compiler (cc, gcc or $CC) to build the generated kernel for the host")
    include, header = _ffi_headers()
    text = source.text + ffi_entry(source)
    key = hashlib.sha256("\0".join([source.digest, text, cc, _version(cc), header, *FLAGS, *LIBS]).encode()
                         ).hexdigest()[:32]
    with _lock:
        if key in _loaded:
            return key, _loaded[key]
        path = _library_path(key)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
                c_file, built = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
                c_file.write_text(text)
                run = subprocess.run([cc, *FLAGS, "-I", include, "-o", str(built), str(c_file), *LIBS],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    raise KernelUnsupported(f"{cc} failed to build the generated kernel:\n{run.stderr[-4000:]}")
                os.replace(built, path)  # atomic: another process sees the whole library or none
        lib = _loaded[key] = ctypes.CDLL(str(path))
        return key, lib


def _register(key: str, lib: ctypes.CDLL) -> str:
    """The library's FFI handler registered with XLA for the CPU (once a process): its target's name."""
    name = TARGET_PREFIX + key
    with _lock:
        if name not in _registered:
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(lib.rs_ffi_batch), platform="cpu")
            _registered.add(name)
    return name


def registered_targets() -> list[str]:
    """The FFI targets this process registered (an export lists them as allowed)."""
    with _lock:
        return sorted(_registered)


def register_targets(program: bytes) -> bool:
    """Each host kernel a serialized program calls registered, its library
    loaded from the cache: False where one is missing (the program cannot be
    called here; it is made again, which builds the library)."""
    for key in sorted({m.decode() for m in TARGET.findall(bytes(program))}):
        path = _library_path(key)
        if key not in _loaded and not path.exists():
            return False
        try:
            with _lock:
                lib = _loaded.get(key) or ctypes.CDLL(str(path))
                _loaded[key] = lib
            _register(key, lib)
        except OSError:  # damaged or foreign: made again
            return False
    return True


class HostKernel:
    """A kernel body compiled for the host, called on whole columns.

    Built from the body's generated source; `block_call` has the Pallas
    backend's interface (the block is irrelevant here: a point is a loop
    iteration)."""

    name = "host"

    def __init__(self, source):
        self.source = source
        key, self._library = library(source)
        self.target = _register(key, self._library)

    @classmethod
    def of(cls, body, key: str | None = None) -> "HostKernel":
        """The fused kernel body (engine.solve.kernel.body.KernelBody) generated
        (or read where stored under `key`: engine.solve.kernel.stored) and compiled."""
        from engine.solve.kernel.stored import kernel_source

        return cls(kernel_source(body, key))

    def run_numpy(self, *columns: np.ndarray) -> list[np.ndarray]:
        """The kernel on numpy columns, through its C entry (outside jit: the code generator's tests)."""
        from engine.solve.kernel.c_source import HOST_ENTRY, KernelUnsupported

        n = len(columns[0])
        count = len(self.source.in_dtypes) + len(self.source.out_dtypes)
        if count + 1 > CTYPES_MAX_ARGUMENTS:
            raise KernelUnsupported(f"the kernel takes {count} columns, more than ctypes passes to a C function")
        entry = getattr(self._library, HOST_ENTRY)
        entry.restype, entry.argtypes = None, [ctypes.c_int64] + [ctypes.c_void_p] * count
        ins = [np.ascontiguousarray(c, d) for c, d in zip(columns, self.source.in_dtypes, strict=True)]
        outs = [np.empty(n, d) for d in self.source.out_dtypes]
        entry(n, *[a.ctypes.data for a in ins + outs])
        return outs

    def block_call(self, kernel, inputs, out_dtypes, block, interpret) -> list[jax.Array]:
        """kernel(*inputs) -> outputs, columns in and out (as engine.solve.kernel.pallas.block_call)."""
        if [np.dtype(x.dtype) for x in inputs] != list(self.source.in_dtypes):
            raise ValueError("the host kernel's inputs do not have the dtypes it was generated for")
        n = inputs[0].shape[0]
        shapes = [jax.ShapeDtypeStruct((n,), d) for d in out_dtypes]
        return list(jax.ffi.ffi_call(self.target, shapes)(*inputs))

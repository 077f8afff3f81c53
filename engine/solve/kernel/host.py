"""The generated kernel compiled for the host: a shared library, one point at a time.

The fused solver's kernel backend on CPU (the lanes stay the CPU's default
solver: engine.solve.plan). What it is for: the tests and CI, which check
the generated C (the same text the CUDA backend compiles) against closed
forms and the other solvers without a GPU; and a sweep solved by the fused
solver on CPU, whose program is small: a warm process reads it from JAX's
cache in milliseconds, where the lanes' takes 0.35-0.45 s (the rolling ball,
2 cores, both JAX lines). Per point it is not faster than the lanes, so
it is not the CPU's default: measured on 2 cores, `rollsweep run` (4 task
threads), the rolling ball's 400,000 points solved at 540k points/s against
the lanes' ~730k once their program is loaded (scalar C, where the lanes
compute across vectors); the bouncing ball (20 impacts a point) between
10,000 and 90,000 points ~230k against ~260k points/s; yet whole processes
were shorter at every size tried (4,096 rolling-ball points 0.80-0.86 s
against 1.18-1.23 s; 400,000: 1.37-1.46 s against 1.53-1.64 s).

The system C compiler builds the source with IEEE arithmetic as XLA does it
(`-ffp-contract=off -fno-fast-math`: no fused multiply-adds, no reassociation)
and without `-march=native`, so a result does not depend on the machine that
compiled it. Libraries are cached on disk by a hash of source, compiler (its
version and target), flags and JAX's FFI headers (written to a temporary
name, then renamed: concurrent processes never load a half-written file).
Each is loaded only where its bytes are those it was built with (their
SHA-256, written beside it as it is built): a library altered since, one
without its digest (built before digests were kept) and one that does not
load are removed and built again. A library is code this process runs, and
what it writes marks shards done. Where the cache cannot be written one is
built in a folder of the process's own.

Inside `jax.jit` the batch is an XLA FFI custom call (`jax.ffi`): XLA hands
the library's handler its own buffers (no copies), and, unlike a Python
callback, the program holding it can be exported and kept in JAX's
persistent compile cache, so a warm process neither traces nor compiles it.
The call's target is named by its library (`rs_host_<key>`); a process that
reads such a program registers the library first (`register_targets`).

The CUDA backend's launcher (engine.solve.kernel.cuda) is such a library
too, built here by the same compiler into the same cache, its target
`rs_cuda_<key>` registered for CUDA.
"""

import ctypes
import functools
import hashlib
import os
import platform
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
# The FFI target of a library: `rs_<kind>_<its key>`. (The prefixes are written
# in engine.solve.exported too, which finds them in a stored program: importing
# them from either module would be an import circle.)
TARGET = re.compile(rb"rs_(host|cuda)_([0-9a-f]{32})")
# Per kind of library: its FFI handler's symbol and the platform XLA calls it on.
HANDLERS = {"host": ("rs_ffi_batch", "cpu"), "cuda": ("rs_ffi_cuda", "CUDA")}

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


@functools.cache  # asked at every kernel built: once a process
def _version(cc: str) -> str:
    """The compiler's version and the machine it builds for (a home folder
    shared by machines of two architectures holds both's libraries apart)."""
    said = []
    for flag in ("--version", "-dumpmachine"):
        try:
            said.append(subprocess.run([cc, flag], capture_output=True, text=True, timeout=30).stdout)
        except (OSError, subprocess.SubprocessError):
            said.append("")
    return "\0".join([*said, platform.machine()])


@functools.cache
def _ffi_headers() -> tuple[str, str]:
    """The folder of JAX's FFI C headers and a digest of the one the handler
    includes (its structs' layout changes between jaxlib versions)."""
    folder = jax.ffi.include_dir()
    header = Path(folder) / "xla" / "ffi" / "api" / "c_api.h"
    return folder, hashlib.sha256(header.read_bytes()).hexdigest()


def _library_path(key: str) -> Path:
    return cache_dir() / f"rs_{key}.so"


def _digest_path(library: Path) -> Path:
    """Where the SHA-256 of the library's bytes, as built, is kept."""
    return library.with_name(library.name + ".sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def library(source) -> tuple[str, ctypes.CDLL]:
    """The source (a c_source.KernelSource) compiled with its FFI handler and
    loaded (from the cache when built before): (its key, the library)."""
    from engine.solve.kernel.c_source import ffi_entry

    return shared_library(source.text + ffi_entry(source), source.digest, LIBS, "the generated kernel for the host")


def shared_library(text: str, digest: str, libs: tuple[str, ...], what: str) -> tuple[str, ctypes.CDLL]:
    """C `text` (with JAX's FFI header on its include path) compiled by the
    host's compiler, linked with `libs`, and loaded (from the cache when built
    before): (its key, the library). `digest`: what it was generated from;
    `what`: the library, as an error names it."""
    from engine.solve.kernel.c_source import KernelUnsupported

    cc = compiler()
    if cc is None:
        raise KernelUnsupported(f"no C compiler (cc, gcc or $CC) to build {what}")
    include, header = _ffi_headers()
    key = hashlib.sha256("\0".join([digest, text, cc, _version(cc), header, *FLAGS, *libs]).encode()
                         ).hexdigest()[:32]
    with _lock:
        if key in _loaded:
            return key, _loaded[key]
        lib = _open(_library_path(key))
        if lib is None:
            lib = _open(_build(cc, include, text, key, libs, what))
        if lib is None:
            raise KernelUnsupported(f"{what}, built by {cc}, could not be loaded")
        _loaded[key] = lib
        return key, lib


def _open(path: Path) -> ctypes.CDLL | None:
    """The library at `path` loaded; None where there is none, or it is not as
    built (its bytes not those its digest records, or no digest recorded) or
    does not load: removed, so that it is built again."""
    if not path.exists():
        return None
    try:
        if _sha256(path) == _digest_path(path).read_text().strip():
            return ctypes.CDLL(str(path))
    except OSError:  # no digest, or unreadable, or a library that does not load
        pass
    path.unlink(missing_ok=True)
    _digest_path(path).unlink(missing_ok=True)
    return None


def _build(cc: str, include: str, text: str, key: str, libs: tuple[str, ...], what: str) -> Path:
    """The library built from `text` into the cache (a temporary name, then
    renamed: another process sees the whole library or none); where the cache
    cannot be written (a read-only home folder), into this process's own
    temporary folder. Its path."""
    from engine.solve.kernel.c_source import KernelUnsupported

    path = _library_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=".build-"))
    except OSError:  # the cache cannot be written: a folder of this process's own, left for the system to clear
        scratch = Path(tempfile.mkdtemp(prefix="rollsweep-kernel-"))
        path = scratch / path.name
    try:
        c_file, built = scratch / "kernel.c", scratch / "kernel.so"
        c_file.write_text(text)
        # Named from inside the scratch folder (a name of its own otherwise goes into the
        # library): two processes building one library build the same bytes, the digest's.
        run = subprocess.run([cc, *FLAGS, "-I", include, "-o", built.name, c_file.name, *libs],
                             capture_output=True, text=True, cwd=scratch)
        if run.returncode != 0:
            raise KernelUnsupported(f"{cc} failed to build {what}:\n{run.stderr[-4000:]}")
        # The digest in place before the library: a library found has the digest it was built with.
        (scratch / "kernel.sha256").write_text(_sha256(built))
        os.replace(scratch / "kernel.sha256", _digest_path(path))
        os.replace(built, path)
    finally:
        if path.parent != scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return path


def register(kind: str, key: str, lib: ctypes.CDLL) -> str:
    """The library's FFI handler (a `kind` of HANDLERS) registered with XLA for
    its platform (once a process): its target's name."""
    symbol, platform_name = HANDLERS[kind]
    name = f"rs_{kind}_{key}"
    with _lock:
        if name not in _registered:
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)), platform=platform_name)
            _registered.add(name)
    return name


def register_targets(program: bytes) -> bool:
    """Each kernel library a serialized program calls registered, loaded from
    the cache: False where one is missing (the program cannot be called here;
    it is made again, which builds the library)."""
    for kind, key in sorted({(k.decode(), m.decode()) for k, m in TARGET.findall(bytes(program))}):
        with _lock:
            lib = _loaded.get(key) or _open(_library_path(key))  # (a damaged one removed: built again)
            if lib is None:
                return False
            _loaded[key] = lib
        register(kind, key, lib)
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
        self.target = register("host", key, self._library)

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
        if [np.dtype(d) for d in out_dtypes] != list(self.source.out_dtypes):
            raise ValueError("the host kernel's outputs do not have the dtypes it was generated for")
        from engine.solve.kernel.c_source import row_groups

        n = inputs[0].shape[0]
        if not self.source.by_rows:
            shapes = [jax.ShapeDtypeStruct((n,), d) for d in out_dtypes]
            return list(jax.ffi.ffi_call(self.target, shapes)(*inputs))
        # Written by rows (c_source.row_groups): each column a slice of its dtype's rows.
        groups = row_groups(self.source.out_dtypes)
        shapes = [jax.ShapeDtypeStruct((n, len(columns)), dtype) for dtype, columns in groups]
        rows = jax.ffi.ffi_call(self.target, shapes)(*inputs)
        out = [None] * len(out_dtypes)
        for buffer, (_, columns) in zip(rows, groups, strict=True):
            for k, j in enumerate(columns):
                out[j] = buffer[:, k]
        return out

"""The compiled batch program, kept between processes.

JAX's persistent cache holds a program's executable, but a process reaches it
only through the program: its exported form read, traced and lowered, and
the lowered module hashed into JAX's key, all on the calling thread before
the executable's read can start (0.17-0.19 s of a warm 4,096-point
rolling-ball run on 2 cores). So the executable a process compiled for a
program (engine.solve.exported's key, with what else an executable depends
on: the backend's version, XLA's flags and JAX's compile settings, the host's
CPU)
is serialized beside that program, and a later process with the same key
loads it alone, on the compile thread (XLA rebuilding it takes what JAX's
cache read took, 0.35-0.45 s there, the GIL released). The executable is the
one the first process called: results are the same bits.

Only on CPU, and for a plan of one device (the executable is loaded for the
calling thread's device). A file that cannot be read or loaded is made again, never
trusted; one that cannot be written costs the next process the program's way.

A loaded executable runs without its program being lowered in this process,
and lowering is where JAX readies what a custom call the program makes needs
(JAX's export does it for an exported program's calls too). XLA:CPU's LAPACK
handlers (`lapack_*_ffi`: jnp.linalg's inv, solve, eig...) call LAPACK
through pointers that jaxlib fills in from scipy only then: an executable
calling them, loaded in a fresh process, was a "Segmentation fault" in its
first call (the bicycle_response demo's second run, jax 0.10.2 and 0.12.0.1;
jax-ml/jax#29610 fixed the same for an exported program called, not for a
deserialized executable). So an executable is kept with the custom calls its
program makes (read from its lowered module as it is compiled: 7-13 ms on 2
cores for the demos' programs), and a process loads it only once each is
made ready here (`_CALLS`: LAPACK's pointers filled in, 0.14-0.19 s on 2
cores, scipy.linalg's import, on the compile thread; a kernel library
registered); a program calling anything else is not kept (JAX's persistent
cache serves it, through its program). The bytes of a kept executable are
searched for such calls too, before it is loaded.
"""

import functools
import hashlib
import json
import os
import pathlib
import pickle
import re
import threading
import time
import zlib

from engine._atomic_file import write_whole
from engine._jax_setup import cache_dir
from engine.solve.exported import kernel_libraries_registered

# Version of the key and the file format: a change invalidates every entry.
# 2: the program's custom calls kept with the executable (_CALLS).
FORMAT = 2


def executable_key(program_key: str | None, device, staging) -> str | None:
    """The key of the executable of the program under `program_key` compiled for
    `device` (a JAX device), its inputs and results moved through pinned host
    memory in the call or not (`staging`, engine.solve.staging: an accelerator
    plan's way, whichever device its calls run on); None (not kept) where nothing says when it is
    stale (no program key; a host whose CPU's features are not listed), or off
    the CPU: an accelerator's executables, serialized again, are not yet tried
    on one (a loaded executable that fails does so in its calls, not as it
    loads), and there the program's read is the smaller part of a run's fixed
    cost."""
    cpu = _host_cpu()
    if program_key is None or device.platform != "cpu" or cpu is None:
        return None
    import jax

    settings = [(name, repr(getattr(jax.config, name, None))) for name in _COMPILE_SETTINGS]
    parts = [FORMAT, program_key, device.platform, device.device_kind, device.client.platform_version,
             os.environ.get("XLA_FLAGS", ""), cpu, repr(staging), settings]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


# JAX's settings that go into a compile's options (and JAX's own cache key).
_COMPILE_SETTINGS = ("jax_optimization_level", "jax_memory_fitting_level", "jax_exec_time_optimization_effort",
                     "jax_memory_fitting_effort", "jax_enable_pgle", "jax_xla_profile_version")


@functools.cache
def _host_cpu() -> str | None:
    """What the host's CPU offers (XLA compiles a CPU program for its features),
    as Linux lists them; None elsewhere (nothing kept: one architecture's
    generations differ in what XLA may use). A cache shared by machines of
    other CPUs (a cluster's home folder) keeps an executable for each."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()
    except OSError:
        pass
    return None


def _path(key: str | None) -> pathlib.Path | None:
    folder = cache_dir()
    return None if folder is None or key is None else folder / "programs" / f"{key}.executable"


def stored(key: str | None) -> bool:
    """Whether an executable is kept under `key` (a file: loaded or not, see load)."""
    path = _path(key)
    return path is not None and path.is_file()


def load(key: str | None, device):
    """The executable kept under `key`, loaded for `device` (a `jax.stages.Compiled`,
    called as the program is); None where there is none or it cannot be loaded
    here (a kernel library it calls gone, a custom call this process cannot
    make ready, a damaged file)."""
    path = _path(key)
    if path is None:
        return None
    from jax.experimental.serialize_executable import deserialize_and_load

    try:
        blob = zlib.decompress(path.read_bytes())
        serialized, in_tree, out_tree, calls = pickle.loads(blob)
        # (each the executable calls, before it is loaded: those it was kept with, and
        # any the bytes name all the same)
        if not calls_ready(calls) or not calls_ready(_named(serialized)):
            return None
        return deserialize_and_load(serialized, in_tree, out_tree, backend=device.platform,
                                    execution_devices=[device])
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - damaged, or of another build: compiled again, and kept anew
        try:
            path.unlink(missing_ok=True)
        except OSError:  # a cache this process may read, not change: compiled here each time
            pass
        return None


# The custom calls a kept executable may make, each with what makes it ready in
# a process that loads the executable (its program not lowered there):
# jaxlib's LAPACK handlers, their LAPACK pointers filled in; a kernel library
# of the engine's (engine.solve.kernel.host), registered; XLA's own sharding and
# placement annotations, which its compile removes. Any other (a Python
# callback's holds this process's pointers; a library's unknown handler may
# need its own set-up) keeps a program from being kept.
_CALLS = (
    (re.compile(r"lapack_\w+"), lambda target: _lapack_ready()),
    (re.compile(r"rs_(host|cuda)_[0-9a-f]{32}"), lambda target: kernel_libraries_registered(target.encode())),
    (re.compile(r"Sharding|SPMDFullToShardShape|SPMDShardToFullShape|annotate_device_placement"), lambda target: True),
)


def keepable(calls) -> bool:
    """Whether an executable making these custom calls (their targets) may be kept."""
    return all(any(pattern.fullmatch(target) for pattern, _ in _CALLS) for target in calls)


def calls_ready(calls) -> bool:
    """Each of these custom calls (their targets) made ready in this process
    (_CALLS); False where one cannot be (the executable is not loaded)."""
    if not isinstance(calls, (list, tuple)) or not all(isinstance(target, str) for target in calls):
        return False
    for target in calls:
        ready = next((ready for pattern, ready in _CALLS if pattern.fullmatch(target)), None)
        if ready is None or not ready(target):
            return False
    return True


# What names a call needing set-up in a serialized executable (a fast test first: `in`).
_NAMED = (b"lapack_", b"rs_host_", b"rs_cuda_")
_NAMED_CALL = re.compile(rb"lapack_[a-z0-9_]+_ffi|rs_(?:host|cuda)_[0-9a-f]{32}")


def _named(serialized: bytes) -> list[str]:
    """The calls needing set-up that the bytes of a serialized executable name."""
    if not any(name in serialized for name in _NAMED):
        return []
    return sorted({found.decode() for found in _NAMED_CALL.findall(serialized)})


def _lapack_ready() -> bool:
    """jaxlib's LAPACK handlers' pointers filled in (from scipy), as JAX does as it
    lowers a program calling them; False where this JAX has no such step."""
    try:
        from jax._src.lax.linalg import initialize_lapack

        initialize_lapack()
    except Exception:  # noqa: BLE001 - another JAX: its executables compiled from their program
        return False
    return True


def custom_calls(lowered) -> list[str] | None:
    """The targets of the custom calls in `lowered` (a `jax.stages.Lowered`)'s
    module, sorted; None where its module cannot be read."""
    try:
        module = lowered.compiler_ir("stablehlo")
        from jax._src.interpreters.mlir import ir
    except Exception:  # noqa: BLE001 - no module to read: not kept
        return None
    found = set()

    def visit(op):
        if op.name == "stablehlo.custom_call":
            found.add(ir.StringAttr(op.attributes["call_target_name"]).value)
        return ir.WalkResult.ADVANCE

    try:
        module.operation.walk(visit)
    except Exception:  # noqa: BLE001 - not kept
        return None
    return sorted(found)


def compile_and_keep(key: str | None, program, args):
    """`program` (jitted) compiled for calls like `args`, and kept under `key`
    where XLA compiled it here (lowered_to_keep, then compiled_to_keep)."""
    return compiled_to_keep(key, lowered_to_keep(key, program, args))


def lowered_to_keep(key: str | None, program, args):
    """`program` (jitted) lowered for calls like `args`; where it is to be kept
    (a key), under a name of its own.

    An executable read from JAX's persistent cache is never kept: serialized
    again, XLA's CPU executables lose kernels (a later call: "NOT_FOUND: Function
    pad_reduce_fusion not found", jax 0.10 and 0.12). So a program to keep is
    compiled by XLA, never read from JAX's cache: under a name of its own
    (which is in JAX's key: an entry JAX has of the program under its usual
    name is not read instead), and not written there either
    (compiled_to_keep): the file kept here is its one copy, and where it is
    lost the next process compiles the program again and keeps it anew."""
    if key is None:
        return program.lower(*args)
    import jax

    def rollsweep_executable(*args):  # (its name is its module's)
        return program(*args)

    return jax.jit(rollsweep_executable).lower(*args)


def compiled_to_keep(key: str | None, lowered):
    """`lowered` compiled, and where `key` says, kept: not written into JAX's
    persistent cache (lowered_to_keep), and not kept where it was read from
    there all the same (an entry of another engine's making: seen by JAX's
    monitoring event, on this thread)."""
    calls = None if key is None else custom_calls(lowered)
    outside = None if calls is None or not keepable(calls) else _not_in_jax_cache()
    if outside is None:  # nothing to keep, a call a later process could not make, or no way out of JAX's cache
        return lowered.compile()
    _listening()
    _compiles.read = False
    start = time.perf_counter()
    with outside:
        compiled = lowered.compile()
    if not _compiles.read:
        _keep(key, compiled, calls)
        _note_compile(time.perf_counter() - start)
    return compiled


# The seconds a run's compiles took here (all its programs', as XLA compiled
# them), noted under its kind (study, solver, platform): what `rollsweep
# validate` says a cold run of that kind compiled in before, never a guess (the
# file is a note: lost or damaged, no time is said).
COMPILE_TIMES = "compile-seconds.json"
_noting = {"kind": None, "seconds": 0.0}
_noting_lock = threading.Lock()


def note_compiles_as(kind: str | None) -> None:
    """This process's compiles from now on noted under `kind` (a run's: see COMPILE_TIMES)."""
    with _noting_lock:
        _noting.update(kind=kind, seconds=0.0)


def _note_compile(seconds: float) -> None:
    folder = cache_dir()
    with _noting_lock:
        if _noting["kind"] is None or folder is None:
            return
        _noting["seconds"] += seconds
        notes = compile_times() | {_noting["kind"]: round(_noting["seconds"], 1)}
        write_whole(folder / "programs" / COMPILE_TIMES, json.dumps(notes, sort_keys=True).encode())


def compile_times() -> dict:
    """COMPILE_TIMES' notes, {} where there are none."""
    folder = cache_dir()
    try:
        notes = json.loads((folder / "programs" / COMPILE_TIMES).read_text()) if folder is not None else {}
    except (OSError, ValueError):
        return {}
    return notes if isinstance(notes, dict) else {}


def _not_in_jax_cache():
    """A context in which this thread's compiles are not written into JAX's
    persistent cache: its threshold of compile time, which is thread-local
    (jax 0.10-0.12), set past any. None where JAX has no such setting: then
    nothing is kept (a kept copy of what JAX's cache handed back would fail)."""
    try:
        from jax._src.config import persistent_cache_min_compile_time_secs as threshold

        return threshold(float("inf"))
    except (ImportError, AttributeError, TypeError):
        return None


# Whether this thread's last compile was read from JAX's persistent cache.
_compiles = threading.local()


@functools.cache
def _listening() -> None:
    import jax.monitoring

    def on_event(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            _compiles.read = True

    jax.monitoring.register_event_listener(on_event)


def _keep(key: str, compiled, calls: list[str]) -> None:
    """`compiled` (a `jax.stages.Compiled`, compiled here) kept under `key`, with
    the custom calls its program makes (`calls`: made ready before it is loaded)."""
    from jax.experimental.serialize_executable import serialize

    try:
        blob = pickle.dumps((*serialize(compiled), list(calls)))
    except Exception:  # noqa: BLE001 - an executable the backend cannot serialize: compiled in each process
        return
    # Compressed, as JAX keeps its own: the rolling ball's 8.4 MB lanes executable
    # in 1.2 MB, made in 64 ms and read back in 36 ms on 2 cores (the GIL released).
    write_whole(_path(key), zlib.compress(blob, 1))

"""The traced batch program, kept between processes.

Before JAX's persistent cache can hand a process its compiled program, the
batch function must be traced: the solver's and the study's Python run once on
abstract values (~1.3 s on 2 cores for the rolling ball, every process). So the
traced program is exported (`jax.export`: its StableHLO, serialized) into the
cache folder, under a key of everything it was made from: the study's files,
the engine's source, the packages' versions, the backend, the settings, the
outputs, the plan and the arguments' shapes. A later process with the same key
deserializes it (milliseconds) and compiles it, which the persistent cache
answers; a changed file or setting is a new key, so a stale program is never
used.

Every process calls the exported program, the one that exported it too: cold
and warm runs compile the same module and give bitwise the same results.

A program calling a kernel library (the host kernel, or the CUDA kernel's
launcher: engine.solve.kernel.host, an XLA FFI custom call) is exported
with that call allowed, and a process reading it registers the library
before calling it.
"""

import pathlib

import jax

from engine._atomic_file import write_whole
from engine._jax_setup import cache_dir
from engine.solve.device import current_device
from engine.solve.source_key import source_key

# Version of the key and the file format: a change invalidates every entry.
FORMAT = 1


def program_key(study, settings, selected, plan, args) -> str | None:
    """The key of the batch program for these arguments; None where the study's
    source cannot be found (then nothing says when a stored program is stale)."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(args)
    device = current_device()  # where this thread's calls run (a plan may route them to the CPU)
    return source_key(
        study,
        format=FORMAT,
        backend=[device.platform, device.device_kind, jax.config.jax_enable_x64],
        settings=repr(settings),
        selected=list(selected),
        # What the batch function is made from; not the host's cores or the device's
        # memory, which would make processes with other allocations trace again.
        plan=[plan.solver.name, plan.batch, plan.width, plan.device.platform],
        # The fused solver's kernel backend as asked for (engine.solve.kernel):
        # a program of one backend is never served for another.
        kernel=_requested_kernel() if plan.solver.name == "fused" else "",
        args=[str(tree)] + [[jax.tree_util.keystr(p), list(v.shape), str(v.dtype)] for p, v in leaves],
    )


def _requested_kernel() -> str:
    """The fused solver's kernel backend as asked for (its modules imported
    only for a fused plan)."""
    from engine.solve.kernel.backends import cuda_launch_requested, requested

    launch = cuda_launch_requested()  # (a program launching by callback is never stored: one is never read for it)
    return (requested() or "") + (f"/{launch}" if launch else "")


def _path(key: str) -> pathlib.Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "programs" / f"{key}.stablehlo"


def stored(key: str) -> bool:
    """Whether a program is kept under `key` (a file: read or not, see program)."""
    path = _path(key)
    return path is not None and path.is_file()


def _load(path: pathlib.Path):
    from jax import export

    try:
        blob = path.read_bytes()
        if not kernel_libraries_registered(blob):
            return None  # a kernel library it calls is gone: made again, which builds it
        return export.deserialize(bytearray(blob))
    except Exception:  # noqa: BLE001 - missing, or damaged: made again, not trusted
        return None


# What names a kernel library's FFI target in a serialized program
# (engine.solve.kernel.host.TARGET: the kernel modules are imported only for a
# program that calls one).
_KERNEL_TARGETS = (b"rs_host_", b"rs_cuda_")


def kernel_libraries_registered(blob: bytes) -> bool:
    """Each kernel library a serialized program (or executable) calls
    registered, loaded from the cache; False where one is gone."""
    if not any(prefix in blob for prefix in _KERNEL_TARGETS):
        return True
    from engine.solve.kernel.host import register_targets

    return register_targets(blob)


def _allowed_calls(jitted) -> list:
    """The kernel library's FFI target that `jitted` (a jitted fused batch
    function) calls, allowed in its export: JAX refuses custom calls it does not
    know to be stable, and this one is the engine's own, its library kept
    beside the program under the same cache. (Only the program's own: every
    target allowed is written into the program, and a reader registers each.)"""
    from jax import export

    choice = getattr(_batch_function(jitted), "kernel_backend", None)
    target = getattr(getattr(choice, "backend", None), "target", None)
    return [export.DisabledSafetyCheck.custom_call(target)] if target else []


def _batch_function(jitted):
    """The batch function `jitted` (a `jax.jit` of it) wraps, where it says
    more of itself (the fused solver's: its kernel backend, whether its program
    may be kept: engine.solve.kernel.fused)."""
    return getattr(jitted, "__wrapped__", None)


def program(make, key: str | None, args) -> tuple:
    """(a jitted callable of the batch function for arguments like `args`,
    whether it is the program stored under `key`): the stored program where
    there is one, else `make()` (the jitted batch function) traced, exported
    and stored. Where the program cannot be exported (a host callback, say),
    may not be kept (the fused kernel run by Pallas where the host kernel could
    not be built) or there is no cache, `make()` itself: (it, False)."""
    path = None if key is None else _path(key)
    exported = None if path is None else _load(path)
    if exported is not None:
        return jax.jit(exported.call), True
    jitted = make()
    if path is None or not getattr(_batch_function(jitted), "stored_between_processes", True):
        return jitted, False
    from jax import export

    try:
        # For this thread's platform: the host's CPU where the plan routed a GPU
        # machine's sweep there (export's default is JAX's default backend).
        platforms = ("cpu",) if current_device().platform == "cpu" else None
        blob = export.export(jitted, platforms=platforms, disabled_checks=_allowed_calls(jitted))(*args).serialize()
    except Exception:  # noqa: BLE001 - not exportable: traced in every process, as without a cache
        return jitted, False
    write_whole(path, blob)
    # The same deserialized program a later process will call, for bitwise
    # equal results and one persistent-cache entry.
    return jax.jit(export.deserialize(bytearray(blob)).call), True

"""Which kernel backend runs the fused solver's kernel body.

Three backends share one interface, `block_call(kernel, inputs, out_dtypes,
block, interpret)`:

- `pallas` (engine.solve.kernel.pallas): Pallas on Triton; a block of
  lanes in lockstep (a loop lasts as long as its slowest lane, both sides
  of every per-lane branch run). On CPU, interpret mode.
- `cuda` (engine.solve.kernel.cuda): the body generated as C for one point
  (engine.solve.kernel.c_source), compiled by NVRTC, one CUDA thread a point:
  per-point loops and branches.
- `host` (engine.solve.kernel.host): the same C compiled for the CPU, called
  by XLA as an FFI custom call.

The choice: $ROLLSWEEP_KERNEL_BACKEND (`cuda`, `host`, `pallas`), else on a
GPU `cuda` where cuda-python's NVRTC imports and the body generates, else
`pallas`; on CPU `host`. A generated backend that cannot be built for a body
(a primitive without a C rule, no compiler, NVRTC missing or failing) falls
back to `pallas`, and the choice says why; on CPU, where Pallas runs in
interpret mode (a test's speed, not a sweep's), with a warning.
"""

import os
import warnings
from typing import NamedTuple

ENV = "ROLLSWEEP_KERNEL_BACKEND"
NAMES = ("cuda", "host", "pallas")


class Choice(NamedTuple):
    """A kernel backend for one kernel body: its name, why it was chosen, and
    the backend itself (an object or module with `block_call`)."""

    name: str
    why: str
    backend: object


def requested() -> str | None:
    """The backend $ROLLSWEEP_KERNEL_BACKEND asks for (None: the default)."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value or value == "default":
        return None
    if value not in NAMES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(NAMES)} (or unset)")
    return value


# How the CUDA backend launches its kernel: "ffi" (the default) or "callback"
# (engine.solve.kernel.cuda).
CUDA_LAUNCH_ENV = "ROLLSWEEP_CUDA_LAUNCH"


def cuda_launch_requested() -> str | None:
    """The CUDA launch $ROLLSWEEP_CUDA_LAUNCH asks for (None: the default, the FFI launcher)."""
    value = os.environ.get(CUDA_LAUNCH_ENV, "").strip().lower()
    if not value or value in ("default", "ffi"):
        return None
    if value != "callback":
        raise ValueError(f"{CUDA_LAUNCH_ENV}={value!r}: expected ffi or callback (or unset)")
    return value


def _pallas(why: str) -> Choice:
    import engine.solve.kernel.pallas as pallas

    return Choice("pallas", why, pallas)


def default_backend(platform: str) -> str:
    """The kernel backend a platform runs where none is asked for (choose's first choice)."""
    return {"gpu": "cuda", "cpu": "host"}.get(platform, "pallas")


def choose(body, platform: str, device=None, request: str | None = None, key: str | None = None) -> Choice:
    """The kernel backend for a fused kernel body on a JAX platform ("gpu", "cpu").

    request: a backend name, as the environment variable (which is read when
    it is None); generation and compilation happen here, so a failure falls
    back to Pallas now, not in the middle of a run. key: where the body's
    generated source is stored between processes (engine.solve.kernel.stored;
    None: generated afresh)."""
    from engine.solve.kernel.jaxpr import Unfusable  # (with Pallas: imported where a kernel is built)

    request = request or requested()
    launch = cuda_launch_requested()  # (a value it does not know raises here, as a backend's name does)
    wanted = request or default_backend(platform)
    asked = f"{ENV}={request}" if request else f"the {platform.upper()} default"
    if wanted == "pallas":
        return _pallas(f"{ENV}=pallas" if request else f"the default on {platform} (Pallas in interpret mode)")
    if wanted == "host":
        if platform != "cpu":
            return _pallas(f"{asked}, but the host kernel runs on CPU arrays only, not on {platform}")
        try:
            from engine.solve.kernel.host import HostKernel

            return Choice("host", f"{asked}: generated C compiled for the host", HostKernel.of(body, key))
        except Unfusable as error:
            warnings.warn(f"the fused solver's host kernel could not be built ({error}); its kernel runs in "
                          "Pallas's interpret mode, far slower: the lanes solver (the CPU's default) solves it "
                          "at full speed", stacklevel=2)
            return _pallas(f"{asked}, but the host kernel could not be built: {error}")
    # cuda, asked for or the GPU default
    if platform != "gpu":
        return _pallas(f"{asked}, but the platform is {platform}, not a GPU")
    try:
        from engine.solve.kernel.cuda import CudaKernel, bindings

        bindings()
        kernel = CudaKernel.of(body, device, key, launch=launch)
        return Choice("cuda", f"{asked}: generated C compiled by NVRTC, one thread a point, launched by "
                      f"{kernel.launch}", kernel)
    except ImportError as error:
        return _pallas(f"{asked}, but cuda-python (cuda.bindings) is not importable: {error}")
    except Unfusable as error:
        return _pallas(f"{asked}, but the CUDA kernel could not be built: {error}")
    except Exception as error:  # the NVRTC library itself missing, a driver error: never fail a run for it
        return _pallas(f"{asked}, but NVRTC/CUDA failed: {type(error).__name__}: {error}")


def kernel_backend(study, platform: str = "gpu", settings=None, selected=None, request: str | None = None) -> Choice:
    """Which kernel backend the fused solver would use for `study` on
    `platform`, and why (builds the study's kernel body; for benchmarks and
    logs)."""
    from engine._jax_setup import float64_here
    from engine.solve.kernel.body import KernelBody
    from engine.sweep.settings import SolverSettings

    settings = settings or SolverSettings()
    # a sampled output only where the settings sample times
    selected = tuple(selected or (o.name for o in study.outputs if settings.save_times or not o.sampled))
    with float64_here():
        body = KernelBody(study.solve_point, settings, [p.name for p in study.parameters], selected, 1)
        return choose(body, platform, request=request)

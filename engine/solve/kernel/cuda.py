"""The generated kernel on a CUDA GPU: one thread solves one point.

The study's kernel body, generated as C (engine.solve.kernel.c_source), is
compiled at run time by NVRTC (NVIDIA's `cuda-python` low-level bindings,
`cuda.bindings`; the `cuda12`/`cuda13` extras install them and the NVRTC
library) for the device's own architecture, as a CUBIN (no PTX JIT in the
driver). `--fmad=false`: no fused multiply-adds, so the arithmetic is the
host build's and close to XLA's.

Inside `jax.jit` the kernel is launched on XLA's own stream, reading and
writing XLA's device buffers in place (nothing goes through the host), by an
XLA FFI custom call: a small host library (engine.solve.kernel.c_source.
cuda_launcher, built by the host's C compiler like the host kernel, the CUBIN
embedded in it) whose handler calls the CUDA driver. Unlike a Python
callback, a program holding that call is exported and kept between processes
(engine.solve.exported): a warm process reads it and neither traces the study,
nor generates, compiles or loads anything in Python (cProfile of a warm
1M-point run, one H100, 2026-11-27: 0.7 s of such work on its main thread
while the launch was a callback). Where the launcher cannot be built (no C
compiler), or $ROLLSWEEP_CUDA_LAUNCH=callback asks for it, the kernel is
launched through `jax.experimental.buffer_callback` as before (traced in
every process).

Every NVRTC and driver call is checked; a failure raises CudaError with the
error's name (and NVRTC's log), which the seam (engine.solve.kernel) turns
into the Pallas backend where it happens while choosing.
"""

import ctypes
import glob
import os
import sys
import threading

import jax
import numpy as np

from engine._atomic_file import write_whole
from engine.solve.kernel.c_source import CUDA_ENTRY, KernelSource, KernelUnsupported
from engine.solve.kernel.host import cache_dir, register, shared_library
from engine.solve.kernel.stored import kernel_source

# Threads per CUDA block. Each thread holds a whole solve (float64 state,
# stages, event log) in registers and local memory; 128 is a common start,
# not yet tuned (measure 64/128/256 on the target GPU before relying on it).
THREADS = 128
# The launcher loads the driver (dlopen) and guards its table of modules (pthreads).
LAUNCHER_LIBS = ("-ldl", "-lpthread")

_lock = threading.Lock()
_cubins: dict[tuple[str, str], bytes] = {}


class CudaError(KernelUnsupported):
    """NVRTC or the CUDA driver failed (the message names the error)."""


def bindings():
    """(driver, nvrtc) of cuda-python: `cuda.bindings` (>= 12.6), else the older `cuda` package.
    Raises ImportError when neither is installed."""
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError:
        from cuda import cuda as driver  # cuda-python before 12.6
        from cuda import nvrtc
    return driver, nvrtc


def _preload_nvrtc() -> None:
    """Make libnvrtc findable when its wheel sits on sys.path (PYTHONPATH, a
    --target folder) rather than in site-packages, where cuda-pathfinder looks:
    load it globally first, which the pathfinder then finds already loaded."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        return
    try:
        load_nvidia_dynamic_lib("nvrtc")
        return
    except Exception:  # not found where the pathfinder looks: try sys.path
        pass
    for entry in sys.path:
        for lib in sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib", "libnvrtc.so.*"))):
            if "builtins" in lib or ".alt." in lib:
                continue
            try:
                builtins_dir = os.path.dirname(lib)
                for dep in sorted(glob.glob(os.path.join(builtins_dir, "libnvrtc-builtins.so.*"))):
                    if ".alt." not in dep:
                        ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


_preloaded = False


def _nvrtc():
    global _preloaded
    _, nvrtc = bindings()
    if not _preloaded:
        _preload_nvrtc()
        _preloaded = True
    return nvrtc


def _name(module, err) -> str:
    """The name of an NVRTC or driver error code."""
    try:
        if hasattr(module, "nvrtcGetErrorString"):
            return module.nvrtcGetErrorString(err)[1].decode()
        code, name = module.cuGetErrorName(err)
        return name.decode() if name else str(err)
    except Exception:
        return str(err)


def _check(module, result, what: str, log: str = ""):
    """The values of a cuda-python call's (err, *values), or CudaError naming err."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaError(f"{what} failed: {_name(module, err)}" + (f"\n{log}" if log else ""))
    return values[0] if len(values) == 1 else values


def arch_of(device=None) -> str:
    """The NVRTC architecture (`sm_90`) of a JAX GPU device (the first by default)."""
    device = device or jax.devices("gpu")[0]
    capability = getattr(device, "compute_capability", None)
    if not capability:
        raise CudaError(f"{device} reports no compute capability")
    major, minor = str(capability).split(".")[:2]
    return f"sm_{major}{minor}"


def compile_cubin(source: KernelSource, arch: str) -> bytes:
    """The source compiled by NVRTC for `arch` (e.g. "sm_90"): a CUBIN. Needs no GPU.

    Kept on disk beside the host kernels (engine.solve.kernel.host.cache_dir)
    under the source's digest, the architecture and NVRTC's version: NVRTC
    takes seconds a kernel, which every process of a run would pay again."""
    key = (source.digest, arch)
    with _lock:
        if key in _cubins:
            return _cubins[key]
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    stored = cache_dir() / f"{source.digest}-{arch}-nvrtc{major}.{minor}.cubin"
    try:
        cubin = stored.read_bytes()
    except OSError:
        cubin = _compile(nvrtc, source, arch)
        write_whole(stored, cubin)
    with _lock:
        _cubins[key] = cubin
    return cubin


def _compile(nvrtc, source: KernelSource, arch: str) -> bytes:
    prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.text.encode(), b"rollsweep_kernel.cu", 0, [], []),
                  "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"--fmad=false", b"--std=c++17"]
        err, = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if int(err) != 0:
            raise CudaError(f"nvrtcCompileProgram for {arch} failed: {_name(nvrtc, err)}\n{_log(nvrtc, prog)}")
        size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def _log(nvrtc, prog) -> str:
    try:
        size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        return log.decode(errors="replace").rstrip("\0 \n")[-8000:]
    except CudaError as error:
        return str(error)


class CudaKernel:
    """A kernel body compiled for a CUDA device, launched one thread a point.

    `block_call` has the Pallas backend's interface; its `block` is ignored
    (threads per CUDA block: THREADS)."""

    name = "cuda"

    def __init__(self, source: KernelSource, arch: str, launch: str | None = None):
        """`launch`: "callback" to launch through a Python callback (None: the
        FFI launcher; engine.solve.kernel.backends.cuda_launch_requested)."""
        self.source, self.arch = source, arch
        self.cubin = compile_cubin(source, arch)
        self._driver = bindings()[0]
        self._functions: dict[int, object] = {}  # per CUDA context: (module, function)
        # The FFI launcher's target (None: launched through a Python callback), and how it launches.
        self.target, self.launch = _launcher(source, self.cubin, launch)

    @classmethod
    def of(cls, body, device=None, key: str | None = None, launch: str | None = None) -> "CudaKernel":
        """The fused kernel body (engine.solve.kernel.body.KernelBody) generated (or
        read where stored under `key`: engine.solve.kernel.stored) and compiled for the device."""
        return cls(kernel_source(body, key), arch_of(device), launch)

    def _function(self, context_key: int):
        driver = self._driver
        with _lock:
            if context_key not in self._functions:
                # The image by address (every cuda-python version takes an int as a void*).
                image = np.frombuffer(self.cubin, np.uint8).copy()
                module = _check(driver, driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
                function = _check(driver, driver.cuModuleGetFunction(module, CUDA_ENTRY.encode()),
                                  "cuModuleGetFunction")
                self._functions[context_key] = (module, function)
            return self._functions[context_key][1]

    def _callback(self, ctx, outs, *ins):
        driver = self._driver
        buffers = list(ins) + list(outs)
        pointers = [int(b.__cuda_array_interface__["data"][0]) for b in buffers]
        n = int(ins[0].__cuda_array_interface__["shape"][0])
        # XLA runs the callback with its context current; if not, use the buffers' own.
        context = _check(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        pushed = False
        if int(context) == 0:
            context = _check(driver, driver.cuPointerGetAttribute(
                driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, pointers[0]), "cuPointerGetAttribute")
            _check(driver, driver.cuCtxPushCurrent(context), "cuCtxPushCurrent")
            pushed = True
        try:
            function = self._function(int(context))
            # kernelParams: a void** array, each entry the address of one argument's value.
            values = [np.array([n], np.int32)] + [np.array([p], np.uint64) for p in pointers]
            params = np.array([v.ctypes.data for v in values], np.uint64)
            blocks = (n + THREADS - 1) // THREADS
            _check(driver, driver.cuLaunchKernel(function, blocks, 1, 1, THREADS, 1, 1, 0,
                                                 driver.CUstream(int(ctx.stream)), params.ctypes.data, 0),
                   "cuLaunchKernel")
        finally:
            if pushed:
                driver.cuCtxPopCurrent()

    def block_call(self, kernel, inputs, out_dtypes, block, interpret) -> list[jax.Array]:
        """kernel(*inputs) -> outputs, columns in and out (as engine.solve.kernel.pallas.block_call)."""
        if [np.dtype(x.dtype) for x in inputs] != list(self.source.in_dtypes):
            raise ValueError("the CUDA kernel's inputs do not have the dtypes it was generated for")
        if [np.dtype(d) for d in out_dtypes] != list(self.source.out_dtypes):
            raise ValueError("the CUDA kernel's outputs do not have the dtypes it was generated for")
        n = inputs[0].shape[0]
        if n >= 2**31 - 1:
            raise ValueError(f"the CUDA kernel takes fewer than 2^31 - 1 points a call, not {n}")
        shapes = [jax.ShapeDtypeStruct((n,), d) for d in out_dtypes]
        if self.target is not None:
            return list(jax.ffi.ffi_call(self.target, shapes)(*inputs))
        from jax.experimental.buffer_callback import buffer_callback

        return list(buffer_callback(self._callback, shapes)(*inputs))


def _launcher(source: KernelSource, cubin: bytes, launch: str | None) -> tuple[str | None, str]:
    """The FFI launcher of `cubin` built (or read from the cache) and
    registered for CUDA: (its target, "ffi"); (None, why not) where the kernel
    is to be launched through a Python callback instead."""
    from engine.solve.kernel.c_source import cuda_launcher

    if launch == "callback":
        return None, "a Python callback ($ROLLSWEEP_CUDA_LAUNCH=callback)"
    try:
        text = cuda_launcher(source, cubin, THREADS)
        key, lib = shared_library(text, source.digest, LAUNCHER_LIBS, "the CUDA kernel's launcher")
        return register("cuda", key, lib), "its XLA FFI launcher"
    except Exception as error:  # noqa: BLE001 - no C compiler, say: the callback launches it, as before
        return None, f"a Python callback (the FFI launcher could not be built: {type(error).__name__}: {error})"

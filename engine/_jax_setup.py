"""JAX set-up: process-wide where the process is rollsweep's (the client, an
array task, an embedded cluster's worker), per task where it is not (a worker
of an existing dask cluster, which runs other users' tasks too)."""

import contextlib
import os
import pathlib
import sys
import threading
import traceback

# A dask worker that owns one CPU core should not start a thread pool of its own.
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
# Set by job scripts that asked SLURM for GPUs: such a job must not solve on the CPU.
REQUIRE_GPU = "ROLLSWEEP_REQUIRE_GPU"


# 0: JAX's backend starts where a command first asks for its devices, on its
# main thread (a measurement's other way; by default it starts ahead: start_backend).
BACKEND_AHEAD = "ROLLSWEEP_BACKEND_AHEAD"
_backend_start: threading.Thread | None = None

# The folder of the compiled-program cache; empty: no persistent cache.
CACHE_VARIABLE = "ROLLSWEEP_CACHE"


def user_cache() -> pathlib.Path:
    """rollsweep's folder in the user's cache ($XDG_CACHE_HOME, else ~/.cache):
    a compiled program is the user's, never the project's."""
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "rollsweep"


def cache_dir() -> pathlib.Path | None:
    """The folder of JAX's compiled programs and the exported traces."""
    if CACHE_VARIABLE in os.environ:
        return pathlib.Path(os.environ[CACHE_VARIABLE]).expanduser() if os.environ[CACHE_VARIABLE] else None
    return user_cache() / "jax"


def usable_cache_dir() -> pathlib.Path | None:
    """cache_dir, where this process can make, read and write it; else None,
    once a process said on stderr in one line (a cache only saves compiles:
    a run goes on without one, compiling its programs each time). Set
    $ROLLSWEEP_CACHE to '' so that the rest of the process, and the workers it
    starts, keep no cache either and say nothing more."""
    folder = cache_dir()
    if folder is None:
        return None
    why = _unusable(folder)
    if why is None:
        return folder
    shown = os.environ.get(CACHE_VARIABLE) or str(folder)
    print(f"rollsweep: warning: the compile cache {shown} cannot be used ({why}); running without it, every "
          f"program compiled afresh: set {CACHE_VARIABLE} to a writable folder (or to '' for none)",
          file=sys.stderr)
    os.environ[CACHE_VARIABLE] = ""
    return None


def _unusable(folder: pathlib.Path) -> str | None:
    """Why `folder` cannot hold the cache (made where missing, a file written and
    removed, its names readable), else None."""
    probe = folder / f".rollsweep-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        if folder.exists() and not folder.is_dir():
            return "not a folder"
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
        if not os.access(folder, os.R_OK | os.X_OK):
            return "not readable"
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def configure() -> None:
    import jax

    # float64 is the default dtype of every sweep; float32 sweeps cast explicitly.
    jax.config.update("jax_enable_x64", True)
    _use_compile_cache(jax)


def _use_compile_cache(jax) -> None:
    # Every run compiles the same shard function (3-13 s on 2 cores): the persistent
    # cache lets every later run, and every worker but the first, load it instead.
    # Every program is kept, however quick to compile or small: a program under
    # JAX's thresholds (by default 1 s to compile) was compiled again in every
    # process, and a warm process is to compile nothing (tests/test_warm_compiles.py).
    # Size -1: no minimum, and none that JAX would choose for the file system.
    folder = usable_cache_dir()
    if folder is None:
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


@contextlib.contextmanager
def task_settings():
    """float64 for this thread while it solves one task, as `configure` gives a
    whole process, and the process's own setting back afterwards (a context
    local to the thread: the worker's other threads keep theirs). The compile
    cache is process-wide: set only where the worker has none of its own."""
    import jax

    if jax.config.jax_compilation_cache_dir is None:
        _use_compile_cache(jax)
    with float64_here():
        yield


def float64_here():
    """A context in which this thread's JAX arrays may be float64."""
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # jax before 0.6

    return enable_x64()


def start_backend() -> None:
    """Start JAX's default backend on a thread of its own, JAX imported, while
    this thread imports the rest of the command and reads its sweep.

    On a GPU the backend's start (the CUDA plug-in's client: the driver, the
    device's memory pool, made with the GIL released) took 0.57 s of a warm
    1M-point run on one H100, after the imports instead of beside them. The
    command asks for its devices as before (engine.solve.device.detect), and
    JAX's backends are made once under JAX's own lock: it gets the devices
    this start made, or waits for them. A failure here is left to that call,
    which raises it where it always did. Once a process; nothing with
    $ROLLSWEEP_BACKEND_AHEAD=0."""
    global _backend_start
    if _backend_start is not None or os.environ.get(BACKEND_AHEAD, "").strip() == "0":
        return
    import jax

    def start():
        try:
            jax.local_devices()
        except Exception as err:  # noqa: BLE001 - the command's to raise (backend_failure)
            _backend_failures.append(err)

    _backend_start = threading.Thread(target=start, name="rollsweep-backend", daemon=True)
    _backend_start.start()


# What start_backend's thread met: JAX keeps the backends that started before a
# failing one (`JAX_PLATFORMS=cpu,cuda` with a CUDA failure), so a later call would
# not raise it again, and the run would go on without the platform that failed.
_backend_failures: list = []


def backend_failure() -> Exception | None:
    """The error JAX's backend met as start_backend's thread started it (waited
    for), else None: the caller asking for the devices raises it."""
    backend_started()
    return _backend_failures[0] if _backend_failures else None


def backend_started() -> None:
    """Wait for start_backend's thread, where one was started: a process ends
    only once its backend is whole (an early error's exit does not race the
    device's start). A second Ctrl-C while it waits ends the wait: the process
    is ending."""
    if _backend_start is not None:
        try:
            _backend_start.join()
        except KeyboardInterrupt:
            pass


class DeviceError(RuntimeError):
    """A job asked for a GPU but JAX sees none."""


def platform_failure(error: BaseException | None) -> str | None:
    """One line for JAX's backends failing to start where $JAX_PLATFORMS names
    only platforms it skips here (`cuda` without a visible NVIDIA GPU: JAX then
    fails an assertion of its own, with no message); None for any other error
    (JAX's RuntimeError for a platform that fails as it starts says so itself)."""
    if not isinstance(error, AssertionError):
        return None
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or pathlib.PurePath(frames[-1].filename).name != "xla_bridge.py":
        return None
    asked = os.environ.get("JAX_PLATFORMS", "")
    return (f"JAX could not start its devices: JAX_PLATFORMS={asked!r} names no platform it can start here "
            "(cuda needs a visible NVIDIA GPU and its driver): set JAX_PLATFORMS=cpu, or unset it for JAX to "
            "choose what this machine has")


def check_device() -> None:
    """Raise DeviceError, in one line, where the job script asked for a GPU
    (REQUIRE_GPU=1) and JAX's default backend is not one."""
    if os.environ.get(REQUIRE_GPU) != "1":
        return
    failure = backend_failure()
    if failure is not None:
        why = platform_failure(failure) or f"JAX could not start its devices: {failure}"
        raise DeviceError(f"{REQUIRE_GPU}=1: {why}") from failure
    import jax

    backend = jax.default_backend()
    if backend != "gpu":
        raise DeviceError(
            f"{REQUIRE_GPU}=1: the job asked SLURM for a GPU but JAX runs on {backend}: install JAX for it "
            '(pip install "rollsweep[cuda12]") or load its CUDA module in the job\'s setup'
        )

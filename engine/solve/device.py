"""The device a run solves on: platform, memory, cores; detected once per process.

Every choice that depends on the hardware (which batch solver, how many points
per compiled call, how many lanes, how many shard threads) is made from one
`Device` in one place (`engine.solve.plan`), never by probing JAX further down.
"""

import contextlib
import dataclasses
import functools

from engine.solve.allocation import cores


@dataclasses.dataclass(frozen=True)
class Device:
    """What JAX's default backend offers this process.

    platform: "cpu", "gpu" or "tpu". count: devices of that platform.
    memory: bytes one device may allocate, where it reports it (accelerators);
    None on CPU, where the host memory budget applies. cores: host cores this
    process may use (its affinity, its SLURM job's and cgroup's allocation).
    """

    platform: str = "cpu"
    count: int = 1
    memory: int | None = None
    cores: int = 1

    @property
    def accelerator(self) -> bool:
        return self.platform != "cpu"


def detect(platform: str | None = None) -> Device:
    """The devices of `platform` (None: JAX's default backend), asked once per process.
    A platform this process cannot use gives the default backend's; the default
    backend's platform by name gives the same Device as None (on a CPU machine,
    the plan's `detect("cpu")` is its `detect()`)."""
    default = _detect(None)
    return default if platform is None or platform == default.platform else _detect(platform)


@functools.cache
def _detect(platform: str | None) -> Device:
    from engine._jax_setup import DeviceError, backend_failure

    # JAX's backend did not start (JAX_PLATFORMS, a driver, a plug-in): here, or
    # on the thread that started it ahead (its error is kept there).
    failure = backend_failure()
    try:
        if failure is not None:
            raise failure
        devices = local_devices(platform)
    except RuntimeError as err:
        raise DeviceError(f"JAX could not start its devices: {err}") from err
    first = devices[0]
    memory = None
    if first.platform != "cpu":
        memory = (first.memory_stats() or {}).get("bytes_limit")
    return Device(platform=first.platform, count=len(devices), memory=memory, cores=cores())


def local_devices(platform: str | None = None) -> list:
    """The devices of `platform` (None: JAX's default backend) in this process, which
    a run spreads its shards over (the inline executor's shard threads, the local
    cluster's workers). Which ones a process sees is chosen outside it:
    CUDA_VISIBLE_DEVICES on NVIDIA GPUs, XLA_FLAGS=--xla_force_host_platform_device_count=N
    for N CPU devices, JAX_PLATFORMS for the backends (with JAX_PLATFORMS=cuda there
    are no CPU devices to route to: the default backend's are used)."""
    import jax

    if platform is not None:
        try:
            return jax.local_devices(backend=platform)
        except RuntimeError:  # that backend is not initialised in this process
            pass
    return jax.local_devices()


@contextlib.contextmanager
def on_device(device):
    """This thread's compiled calls on `device` (None: where they are: JAX's
    default, or a device the thread chose before)."""
    if device is None:
        yield
        return
    import jax

    with jax.default_device(device):
        yield


def call_on(device, fn, *args):
    """fn(*args) with this thread's compiled calls on `device` (on_device)."""
    with on_device(device):
        return fn(*args)


@contextlib.contextmanager
def on_platform(platform: str):
    """This thread's compiled calls on a device of `platform` (a plan routed to the
    host's cores on a GPU machine); nothing changes where they already are."""
    if current_device().platform == platform:
        yield
        return
    import jax

    with jax.default_device(local_devices(platform)[0]):
        yield


def current_device():
    """The device this thread's compiled calls run on: its `jax.default_device`
    where one is set (a shard thread pinned to a device), else the first."""
    import jax

    chosen = jax.config.jax_default_device
    if chosen is None:
        return local_devices()[0]
    return jax.local_devices(backend=chosen)[0] if isinstance(chosen, str) else chosen


def device_name(device=None) -> str:
    """"platform:kind" of a device (default: this thread's), with its number where
    the process sees several ("gpu:NVIDIA H100 #1"): which of them solved a shard."""
    device = device or current_device()
    name = f"{device.platform}:{device.device_kind}"
    return name + (f" #{device.id}" if len(local_devices()) > 1 else "")


def devices_name(platform: str | None = None) -> str:
    """Every device of `platform` (None: JAX's default backend) a run of this
    process spreads its shards over: "cpu:cpu", "gpu:NVIDIA H100 x4"."""
    found = local_devices(platform)
    return f"{found[0].platform}:{found[0].device_kind}" + (f" x{len(found)}" if len(found) > 1 else "")

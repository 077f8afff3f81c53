"""The device a run solves on: platform, memory, cores; detected once per process.

Every choice that depends on the hardware (which batch solver, how many points
per compiled call, how many lanes, how many shard threads) is made from one
`Device` in one place (`engine.solve.plan`), never by probing JAX further down.
"""

import dataclasses
import functools

from .._allocation import cores


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


@functools.cache
def detect() -> Device:
    """The default backend's devices, asked once per process."""
    devices = local_devices()
    first = devices[0]
    memory = None
    if first.platform != "cpu":
        memory = (first.memory_stats() or {}).get("bytes_limit")
    return Device(platform=first.platform, count=len(devices), memory=memory, cores=cores())


def local_devices() -> list:
    """The default backend's devices in this process, which a run spreads its shards
    over (the inline executor's shard threads, the local cluster's workers). Which
    ones a process sees is chosen outside it: CUDA_VISIBLE_DEVICES on NVIDIA GPUs,
    XLA_FLAGS=--xla_force_host_platform_device_count=N for N CPU devices."""
    import jax

    return jax.local_devices()


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

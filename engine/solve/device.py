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
    import jax

    devices = jax.devices()
    first = devices[0]
    memory = None
    if first.platform != "cpu":
        memory = (first.memory_stats() or {}).get("bytes_limit")
    return Device(platform=first.platform, count=len(devices), memory=memory, cores=cores())

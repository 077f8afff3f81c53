"""The device a run solves on: platform, memory, cores; detected once per process.

Every choice that depends on the hardware (which batch solver, how many points
per compiled call, how many lanes, how many shard threads) is made from one
`Device` in one place (`engine.solve.plan`), never by probing JAX further down.
"""

import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class Device:
    """What JAX's default backend offers this process.

    platform: "cpu", "gpu" or "tpu". count: devices of that platform.
    memory: bytes one device may allocate, where it reports it (accelerators);
    None on CPU, where the host memory budget applies. cores: host cores this
    process may use.
    """

    platform: str = "cpu"
    count: int = 1
    memory: int | None = None
    cores: int = 1

    @property
    def accelerator(self) -> bool:
        return self.platform != "cpu"

    def describe(self) -> str:
        if not self.accelerator:
            return f"cpu ({self.cores} cores)"
        memory = f", {self.memory / 2**30:.0f} GiB each" if self.memory else ""
        return f"{self.count} x {self.platform}{memory}, {self.cores} host cores"


def host_cores() -> int:
    """Cores this process may use: its affinity, its SLURM job's and its cgroup's
    allocation, not the machine's count."""
    from .._allocation import cores

    return cores()


@functools.cache
def detect() -> Device:
    """The default backend's devices, asked once per process."""
    import jax

    devices = jax.devices()
    first = devices[0]
    memory = None
    if first.platform != "cpu":
        memory = (first.memory_stats() or {}).get("bytes_limit")
    return Device(platform=first.platform, count=len(devices), memory=memory, cores=host_cores())

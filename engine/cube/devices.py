"""Which devices solved a cube: its `device` attribute names the device of the
process that created it, which for a run on an existing cluster or SLURM is not
where the shards were solved; each shard's done marker records that."""

import collections

from engine.cube.markers import KINDS, Markers


def solving_devices(markers: Markers) -> dict[str, int]:
    """Device ("platform:kind") -> shards it solved, from the done markers."""
    found = [m for kind in KINDS for m in markers.read(kind).values() if m is not None]
    return dict(collections.Counter(m.get("device", "unknown") for m in found).most_common())


def describe_devices(markers: Markers) -> str:
    """One line for `rollsweep status`: e.g. "solved on       gpu:NVIDIA H100 (12 shards), cpu:cpu (1 shard)"."""
    found = solving_devices(markers)
    listed = ", ".join(f"{device} ({n} shard{'s' * (n != 1)})" for device, n in found.items())
    return f"{'solved on':<16} {listed or 'nothing yet'}"

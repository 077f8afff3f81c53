"""The devices that solved a cube, from its shards' done markers."""

from engine.cube.devices import describe_devices, solving_devices
from engine.cube.markers import CRITICAL, GRID, MARKERS, Markers


def test_devices_counted_from_the_markers(tmp_path):
    for kind in (GRID, CRITICAL):
        (tmp_path / MARKERS / kind).mkdir(parents=True)
    assert describe_devices(Markers(tmp_path)) == "solved on        nothing yet"
    for shard, device in enumerate(["gpu:NVIDIA H100", "gpu:NVIDIA H100", "cpu:cpu"]):
        Markers(tmp_path).mark_done(GRID, shard, {"shard": shard, "device": device})
    Markers(tmp_path).mark_done(CRITICAL, 0, {"shard": 0, "device": "gpu:NVIDIA H100"})
    assert solving_devices(Markers(tmp_path)) == {"gpu:NVIDIA H100": 3, "cpu:cpu": 1}
    assert describe_devices(Markers(tmp_path)) == "solved on        gpu:NVIDIA H100 (3 shards), cpu:cpu (1 shard)"

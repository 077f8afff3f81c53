"""`rollsweep verify`: is a cube what its markers and attributes say it is?"""

import numpy as np
import zarr

from ._cost import layouts
from ._cube import CRITICAL, GRID, _quiet_zarr, critical_name, cube_sweep, done_shards, read_attrs
from ._status import Status


def verify(path) -> list[str]:
    """Problems found (empty: the cube is sound)."""
    sweep = cube_sweep(path)  # refuses non-cubes and other store formats
    problems = []
    attrs = read_attrs(path)
    if attrs["config_hash"] != sweep.config_hash:
        problems.append(f"config hash {attrs['config_hash'][:12]} does not match its config ({sweep.config_hash[:12]})")
    if not attrs.get("engine_version"):
        problems.append("no engine version recorded")
    grid, critical = layouts(sweep)
    with _quiet_zarr():
        group = zarr.open_group(path, mode="r")
    expected = {name: grid.chunks + sweep.study.outputs_by_name[name].shape for name in sweep.outputs}
    expected |= {name: grid.chunks for name in ("status", "num_steps", "num_events")}
    if critical is not None:
        name = critical_name(sweep)
        expected |= {name: critical.chunks, f"{name}_status": critical.chunks}
    for name, chunks in expected.items():
        if name not in group:
            problems.append(f"variable {name} is missing")
        elif tuple(group[name].chunks) != chunks:
            problems.append(f"variable {name}: chunks {tuple(group[name].chunks)} are not the shards {chunks}")
    checks = [(GRID, grid, "status")]
    if critical is not None:
        checks.append((CRITICAL, critical, f"{critical_name(sweep)}_status"))
    for kind, layout, status_name in checks:
        if status_name not in group:
            continue
        status = group[status_name]
        for shard in sorted(done_shards(path, kind)):
            if shard >= layout.n_shards:
                problems.append(f"{kind} marker for shard {shard}, but the cube has {layout.n_shards} shards")
                continue
            codes = np.asarray(status[layout.region(shard)])
            if np.any(codes == Status.PENDING):
                problems.append(f"{kind} shard {shard} is marked done but has points never written")
    return problems

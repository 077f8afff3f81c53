"""`rollsweep status`: how far a cube is, from its markers and status variable."""

import dataclasses

import numpy as np

from ._cost import layouts
from ._cube import CRITICAL, GRID, cube_sweep, failed_shards, open_cube, read_markers


@dataclasses.dataclass(frozen=True)
class Progress:
    study: str
    shards_done: dict  # kind -> (done, total)
    points_done: int
    points_total: int
    failed_points: int
    status_counts: dict  # status name -> count, over the grid
    failed: list  # shards whose computation raised: {"kind", "shard", "error"}

    @property
    def complete(self) -> bool:
        return all(done == total for done, total in self.shards_done.values())

    def describe(self) -> str:
        lines = [f"study            {self.study}"]
        for kind, (done, total) in self.shards_done.items():
            failed = sum(1 for f in self.failed if f["kind"] == kind)
            lines.append(f"{kind + ' shards':<16} {done:,} / {total:,} done, {total - done - failed:,} pending, "
                         f"{failed:,} failed")
        lines.append(f"points           {self.points_done:,} / {self.points_total:,} done")
        lines.append(f"failed points    {self.failed_points:,}")
        lines += [f"  {name:<14} {count:,}" for name, count in self.status_counts.items()]
        lines += [f"failed {f['kind']} shard {f['shard']}: {f['error']}" for f in self.failed]
        lines.append("complete" if self.complete else "incomplete: run the same command again to resume")
        return "\n".join(lines)


def progress(path) -> Progress:
    sweep = cube_sweep(path)
    grid, critical = layouts(sweep)
    shards, points_done, failed = {}, 0, 0
    for kind, layout in ((GRID, grid), (CRITICAL, critical)):
        if layout is None:
            continue
        markers = read_markers(path, kind)
        shards[kind] = (len(markers), layout.n_shards)
        failed += sum(m["failed"] for m in markers)
        if kind == GRID:
            points_done = sum(m["points"] for m in markers)
    from ._status import Status

    codes = np.asarray(open_cube(path)["status"].values)
    counts = {s.name.lower(): int(np.count_nonzero(codes == s)) for s in Status if np.any(codes == s)}
    return Progress(sweep.study.name, shards, points_done, grid.n_points, failed, counts, failed_shards(path))

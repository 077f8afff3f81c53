"""`rollsweep status`: how far a cube is, from its markers and status variable."""

import dataclasses

from engine.cube.devices import describe_devices
from engine.cube.lock import writer
from engine.cube.markers import CRITICAL, GRID
from engine.cube.store import Cube
from engine.cube.verify import (
    OVERWRITE,
    RUN_REPAIRS,
    by_code,
    by_identity,
    check_shards,
    cube_problems,
    shards_by_code,
    shards_by_identity,
)
from engine.study.status import Status
from engine.sweep.layout import layouts

# How the cube's own problems end (engine.cube.verify.CubeProblems.lines), which the shards' do not.
_SAYS_WHO_REPAIRS = (RUN_REPAIRS, OVERWRITE)


@dataclasses.dataclass(frozen=True)
class Progress:
    study: str
    shards_done: dict  # kind -> (done, total); a damaged shard is not done
    points_done: int
    points_total: int
    failed_points: int
    status_counts: dict  # status name -> count, over the grid
    failed: list  # shards whose computation raised: {"kind", "shard", "error"}
    damaged: list = dataclasses.field(default_factory=list)  # what verify finds, one line each: its shards' damage,
    # then the cube's own (engine.cube.verify.cube_problems), which say whether a run repairs them
    devices: str = ""  # which devices solved the done shards, one line
    writer: str | None = None  # "pid N on HOST" of the run writing the cube now, if one is
    solved: list = dataclasses.field(default_factory=list)  # by which code and how the done shards were solved
    sensitivity: str = ""  # a sensitivity sweep's indices: computed, or why not (engine.cube.sensitivity_report)

    @property
    def complete(self) -> bool:
        return not self.damaged and all(done == total for done, total in self.shards_done.values())

    def describe(self) -> str:
        lines = [f"study            {self.study}"]
        if self.writer:
            lines.append(f"running          {self.writer}: the counts are of the shards finished so far")
        for kind, (done, total) in self.shards_done.items():
            failed = sum(1 for f in self.failed if f["kind"] == kind)
            lines.append(f"{kind + ' shards':<16} {done:,} / {total:,} done, {total - done - failed:,} pending, "
                         f"{failed:,} failed")
        lines.append(f"points           {self.points_done:,} / {self.points_total:,} done")
        lines.append(f"failed points    {self.failed_points:,}")
        if self.devices:
            lines.append(self.devices)
        lines += self.solved
        lines += [f"  {name:<14} {count:,}" for name, count in self.status_counts.items()]
        if self.sensitivity:
            lines.append(f"{'sensitivity':<16} {self.sensitivity}")
        lines += [f"failed {f['kind']} shard {f['shard']}: {f['error']}" for f in self.failed]
        lines += [f"damaged {line}" + ("" if line.endswith(_SAYS_WHO_REPAIRS) else " (solved again by the next run)")
                  for line in self.damaged]
        if self.complete:
            lines.append("complete")
        elif any(line.endswith(OVERWRITE) for line in self.damaged):
            lines.append(f"damaged: {OVERWRITE}")
        elif self.damaged and all(done == total for done, total in self.shards_done.values()):
            lines.append("damaged: run the same command again to repair it")
        elif self.writer:
            lines.append(f"running: its other shards are being solved ({self.writer})")
        else:
            lines.append("incomplete: run the same command again to resume")
        return "\n".join(lines)


def progress(path) -> Progress:
    """Progress as `verify` sees it: a shard counts as done only if its data reads
    back as written."""
    running = writer(path)  # asked first: a run that ends meanwhile leaves a cube at least as done
    cube = Cube(path)
    sweep = cube.sweep
    grid, critical = layouts(sweep)
    check = check_shards(cube)
    shards, points_done, failed = {}, 0, 0
    for kind, layout in ((GRID, grid), (CRITICAL, critical)):
        if layout is None:
            continue
        markers = check.markers[kind]
        shards[kind] = (len(markers), layout.n_shards)
        failed += sum(m.get("failed", 0) for m in markers.values())
        if kind == GRID:
            points_done = sum(m.get("points", 0) for m in markers.values())
    counts = {s.name.lower(): check.status_counts[s] for s in Status if check.status_counts.get(s)}
    return Progress(sweep.study.name, shards, points_done, grid.n_points, failed, counts, cube.markers.failed(),
                    check.problems() + cube_problems(cube, check).lines(), describe_devices(cube.markers), running,
                    solved_lines(check.markers, cube.attrs.get("study_fingerprint")), _sensitivity(cube))


def _sensitivity(cube: Cube) -> str:
    """A sensitivity sweep's indices in one line ("" for any other sweep)."""
    if cube.sweep.sensitivity is None:
        return ""
    from engine.cube.sensitivity_report import state

    return state(cube).line


def solved_lines(markers: dict, made_by: str | None) -> list[str]:
    """Which code solved the done shards (`markers`: kind -> {shard: marker}),
    and how: one line each, saying "mixed" where they disagree."""
    codes, identities = shards_by_code(markers, made_by), shards_by_identity(markers)
    if not codes:
        return []
    code = next(iter(codes))
    return [f"{'code':<16} " + (f"{by_code(codes)} (mixed)" if len(codes) > 1 else code[:12]),
            f"{'solved with':<16} " + (f"{by_identity(identities)} (mixed)" if len(identities) > 1
                                        else next(iter(identities)))]

"""`rollsweep verify`: is a cube what its markers and attributes say it is?

A reader trusts the data, not the markers, so every done shard's data is read
back (decoded, as a reader would) and compared with the checksums its done
marker recorded when the shard was written. A run on the cube drops the
markers of the shards found damaged (`repair`), so they are solved again.
"""

import collections
import dataclasses
import math

import numpy as np

from engine.cube.chunks import digest
from engine.cube.markers import GRID
from engine.cube.provenance import describe_identity
from engine.cube.store import Cube, quiet_zarr
from engine.cube.structure import kind_arrays
from engine.study.status import Status

# Values read at once while checking: block rows of shards are read together (one
# read per shard took ~1 ms each), up to this many values.
SLAB_VALUES = 4_000_000
# The cube's study_fingerprint attribute while its shards were solved by several
# codes (its study_fingerprints attribute lists them).
MIXED = "mixed"


@dataclasses.dataclass
class ShardCheck:
    """The done shards of a cube that do not hold what their markers say."""

    damaged: dict  # kind -> {shard: reason}
    markers: dict  # kind -> {shard: marker content} of the sound ones
    status_counts: dict  # status code -> points, over the grid's sound done shards

    def problems(self) -> list[str]:
        return [f"{kind} shard {shard} {reason}" for kind, shards in self.damaged.items()
                for shard, reason in sorted(shards.items())]


def read_by_shard(array, layout, shards):
    """(shard, values or the exception raised reading them) for each shard, read
    a slab of whole block rows at a time; a slab that fails is read again shard by
    shard so that only the damaged shards get the error."""
    if not layout.shape:  # one shard: the critical value of a one-axis sweep
        yield from ((shard, _read(array, ())) for shard in shards)
        return
    rows = {}
    for shard in shards:
        rows.setdefault(int(np.unravel_index(shard, layout.blocks)[0]), []).append(shard)
    c0, n0 = layout.chunks[0], layout.shape[0]
    row_values = c0 * math.prod(array.shape[1:])
    per_slab = max(1, SLAB_VALUES // max(1, row_values))
    ordered = sorted(rows)
    for i in range(0, len(ordered), per_slab):
        group = ordered[i:i + per_slab]
        start, stop = group[0] * c0, min((group[-1] + 1) * c0, n0)
        slab = _read(array, (slice(start, stop),))
        for row in group:
            for shard in rows[row]:
                region = layout.region(shard)
                if isinstance(slab, Exception):
                    yield shard, _read(array, region)
                else:
                    local = (slice(region[0].start - start, region[0].stop - start), *region[1:])
                    yield shard, slab[local]


def _read(array, region):
    try:
        with quiet_zarr():
            return np.asarray(array[region])
    except Exception as err:  # noqa: BLE001 - any decoding error: the chunk is damaged
        return err


def check_shards(cube: Cube) -> ShardCheck:
    """Read every done shard back and compare it with its marker's checksums."""
    sweep, group = cube.sweep, cube.group()
    damaged, sound, counts = {}, {}, {}
    shard_counts = {}  # grid shard -> {status code: points}
    for kind, (layout, names) in kind_arrays(sweep).items():
        markers = cube.markers.read(kind)
        bad = damaged.setdefault(kind, {})
        for shard, marker in markers.items():
            if marker is None:
                bad[shard] = "has a done marker that cannot be read (empty or corrupt)"
            elif shard >= layout.n_shards:
                bad[shard] = f"has a done marker, but the cube has {layout.n_shards} shards"
        done = sorted(s for s in markers if s not in bad)
        for name in names:
            if name not in group:
                continue  # reported by verify as a missing variable
            for shard, values in read_by_shard(group[name], layout, done):
                if isinstance(values, Exception):
                    if shard in markers:
                        reason = " ".join(f"{type(values).__name__}: {values}".split())  # one line
                        bad.setdefault(shard, f"{name} cannot be read ({reason})")
                    continue
                if name == "status":
                    shard_counts[shard] = dict(zip(*np.unique(values, return_counts=True), strict=True))
                if shard in bad:
                    continue
                expected = markers[shard].get("digests", {}).get(name)
                if expected is not None and digest(values) != expected:
                    bad[shard] = f"{name} differs from what was written (chunk lost or damaged)"
                elif name.endswith("status") and np.any(values == Status.PENDING):
                    bad[shard] = "is marked done but has points never written"
        sound[kind] = {s: markers[s] for s in done if s not in bad}
    # Counted over the shards found done and sound, as the points done are: the
    # shards a live run is writing meanwhile are in neither.
    for shard in sound.get(GRID, {}):
        for code, n in shard_counts.get(shard, {}).items():
            counts[int(code)] = counts.get(int(code), 0) + int(n)
    return ShardCheck(damaged, sound, counts)


def shard_code(marker: dict | None, made_by: str | None) -> str:
    """The fingerprint of the study's code that solved a shard: its done
    marker's; for a marker written before markers recorded it, the cube's
    `made_by` (its study_fingerprint attribute, which then named one code for
    every shard)."""
    code = (marker or {}).get("code")
    if code:
        return code
    return made_by if made_by and made_by != MIXED else "unknown"


def shards_by_code(markers: dict, made_by: str | None) -> collections.Counter:
    """Shards by the fingerprint of the code that solved them; `markers`: kind ->
    {shard: done marker}."""
    return collections.Counter(shard_code(m, made_by) for shards in markers.values() for m in shards.values())


def shards_by_identity(markers: dict) -> collections.Counter:
    """Shards by how they were solved (engine.cube.provenance.describe_identity)."""
    return collections.Counter(describe_identity((m or {}).get("solved_with"))
                               for shards in markers.values() for m in shards.values())


def by_code(counts: collections.Counter) -> str:
    """e.g. "28 shards solved by code e72a55a69714, 12 by code 6a3893daf359"."""
    (code, n), *others = counts.most_common()
    return ", ".join([f"{_shards(n)} solved by code {code[:12]}"] + [f"{m:,} by code {c[:12]}" for c, m in others])


def by_identity(counts: collections.Counter) -> str:
    """e.g. "18 shards solved with lanes, 32,768 points a call, ...; 32 with lanes, 16 points a call, ..."."""
    (described, n), *others = counts.most_common()
    return "; ".join([f"{_shards(n)} solved with {described}"] + [f"{m:,} with {d}" for d, m in others])


def _shards(n: int) -> str:
    return f"{n:,} shard{'s' * (n != 1)}"


def mixing(markers: dict, attrs: dict) -> list[str]:
    """One line for each way the done shards (`markers`: kind -> {shard: marker})
    disagree, by code and by how they were solved; empty while they agree."""
    codes, identities = shards_by_code(markers, attrs.get("study_fingerprint")), shards_by_identity(markers)
    return ([by_code(codes)] if len(codes) > 1 else []) + ([by_identity(identities)] if len(identities) > 1 else [])


def repair(cube: Cube) -> dict:
    """Drop the done markers of damaged shards, so that this run solves them again.
    Returns the damaged shards by kind."""
    damaged = check_shards(cube).damaged
    for kind, shards in damaged.items():
        for shard in shards:
            cube.markers.drop_done(kind, shard)
    return damaged


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What `verify` found: problems (damage, missing variables), and how much of
    the cube is done: a cube can be sound as far as it goes, but partial."""

    problems: list
    shards_done: int  # sound done shards, grid and critical
    shards_total: int
    writer: str | None  # "pid N on HOST" of the run writing it now, if one is
    mixed: list = dataclasses.field(default_factory=list)  # how its done shards disagree (mixing), one line each

    @property
    def partial(self) -> bool:
        return self.shards_done < self.shards_total

    def summary(self) -> str:
        """One line: sound, partial, or how many problems (and who writes it now),
        and how its shards disagree where they do (solved by two codes, say)."""
        if self.problems:
            line = f"{len(self.problems)} problems"
        elif self.partial:
            line = f"partial: {self.shards_done:,} / {self.shards_total:,} shards done, each as written"
        else:
            line = "sound"
        if self.mixed:
            line += f", but mixed: {'; '.join(self.mixed)}"
        if not self.problems and not self.partial:
            return line
        if self.writer:
            return f"{line}; a run is writing it now ({self.writer})"
        return f"{line}; run the same command again to {'repair' if self.problems else 'finish'} it"


def verify(path) -> list[str]:
    """Problems found (empty: what is done is sound; see `examine` for how much is)."""
    return examine(path).problems


def examine(path) -> Verdict:
    """Every done shard read back against its checksums, the cube's structure
    checked, and how many shards are done (a cube being written is partial)."""
    from engine.cube.lock import writer

    running = writer(path)  # asked first: a run that ends meanwhile leaves a cube at least as done
    cube = Cube(path)
    sweep = cube.sweep  # refuses non-cubes and other store formats
    problems = []
    attrs = cube.attrs
    if attrs["config_hash"] != sweep.config_hash:
        problems.append(f"config hash {attrs['config_hash'][:12]} does not match its config ({sweep.config_hash[:12]})")
    if not attrs.get("engine_version"):
        problems.append("no engine version recorded")
    group = cube.group()
    for layout, names in kind_arrays(sweep).values():
        for name in names:
            chunks = layout.chunks + (sweep.study.outputs_by_name[name].shape if name in sweep.outputs else ())
            if name not in group:
                problems.append(f"variable {name} is missing")
            elif tuple(group[name].chunks) != chunks:
                problems.append(f"variable {name}: chunks {tuple(group[name].chunks)} are not the shards {chunks}")
    check = check_shards(cube)
    total = sum(layout.n_shards for layout, _ in kind_arrays(sweep).values())
    done = sum(len(markers) for markers in check.markers.values())
    return Verdict(problems + check.problems(), done, total, running, mixing(check.markers, attrs))

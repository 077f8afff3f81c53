"""`rollsweep verify`: is a cube what its markers and attributes say it is?

A reader trusts what it reads, so verify reads all of it: every done shard's
data (decoded, as a reader would) against the checksums its done marker
recorded when the shard was written (a sampled design's coordinates, which
its shards write, among them); the other coordinates against the checksums
recorded when the cube was created; each array's own metadata against the
cube's consolidated metadata (which xarray reads; zarr reads the array's);
the stored config against its hash; a sensitivity sweep's indices against
the checksums their analysis recorded. A run on the cube repairs what it can
(`repair`): it drops the markers of the shards found damaged, so they are
solved again, writes damaged coordinates again from its config, an array's
metadata again from the consolidated one, and the stored config or its hash
from its sweep file. What no run repairs (a missing array, say) verify says so.
"""

import collections
import dataclasses
import json
import math
import os
import uuid

import numpy as np

from engine.cube.chunks import digest
from engine.cube.markers import GRID, MARKERS, UNREADABLE, Markers
from engine.cube.provenance import describe_identity
from engine.cube.sensitivity import index_problems
from engine.cube.store import Cube, quiet_zarr
from engine.cube.structure import coordinate_digest, coordinate_values, kind_arrays, shard_coordinates
from engine.study.status import Status
from engine.sweep.layout import Layout

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


def _one_line(err: Exception) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())


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
                        bad.setdefault(shard, f"{name} cannot be read ({_one_line(values)})")
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
        if kind == GRID:
            _check_coordinates(sweep, group, layout, markers, done, bad)
        sound[kind] = {s: markers[s] for s in done if s not in bad}
    # Counted over the shards found done and sound, as the points done are: the
    # shards a live run is writing meanwhile are in neither.
    for shard in sound.get(GRID, {}):
        for code, n in shard_counts.get(shard, {}).items():
            counts[int(code)] = counts.get(int(code), 0) + int(n)
    return ShardCheck(damaged, sound, counts)


def _check_coordinates(sweep, group, layout, markers: dict, done: list, bad: dict) -> None:
    """A sampled design's coordinates, as its grid shards wrote them
    (engine.cube.structure.shard_coordinates), read back against the
    checksums in the done markers of the shards that wrote them; a shard whose
    coordinates are damaged is damaged (a run solves it again, writing them
    again). A cube whose coordinates were written with its structure (made
    before the shards wrote them) has none in its markers: coordinate_problems
    checks those."""
    rows = Layout(layout.shape[:1], layout.chunks[:1])
    for name in shard_coordinates(sweep):
        if name not in group:
            continue  # reported by verify as a missing variable
        writers = {}  # sample block -> the done shard whose marker holds its checksum
        for shard in done:
            if shard not in bad and name in (markers[shard].get("digests") or {}):
                writers[int(np.unravel_index(shard, layout.blocks)[0])] = shard
        for row, values in read_by_shard(group[name], rows, sorted(writers)):
            shard = writers[row]
            if isinstance(values, Exception):
                bad.setdefault(shard, f"coordinate {name} cannot be read ({_one_line(values)})")
            elif shard not in bad and digest(values) != markers[shard]["digests"][name]:
                bad[shard] = f"coordinate {name} differs from what was written (chunk lost or damaged)"


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


# ---- what a reader reads besides the shards

# The words of a problem a run repairs, and of one it does not.
RUN_REPAIRS = "a run repairs it"
OVERWRITE = "no run repairs it: solve the cube again with rollsweep run --overwrite"


def _consolidated(group) -> dict:
    """Each array's metadata as the cube's consolidated metadata holds it (name -> zarr's metadata)."""
    found = group.metadata.consolidated_metadata
    return dict(found.metadata) if found is not None else {}


def _metadata_bytes(metadata) -> bytes:
    from zarr.core.buffer import default_buffer_prototype

    return metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()


def metadata_problems(cube: Cube, group) -> dict[str, str]:
    """Arrays whose own metadata (NAME/zarr.json, which zarr reads opening the
    array alone) is not the consolidated metadata's (which xarray reads):
    name -> why. Compared as zarr reads them, not byte for byte: an older zarr
    may have written either otherwise (its keys' order, a default left out)."""
    problems = {}
    for name, metadata in _consolidated(group).items():
        own = cube.path / name / "zarr.json"
        try:
            found = type(metadata).from_dict(json.loads(own.read_bytes())).to_dict()
        except FileNotFoundError:
            problems[name] = f"{name}/zarr.json (its metadata) is missing"
            continue
        except Exception:  # noqa: BLE001 - not JSON, or not an array's metadata as zarr reads it
            problems[name] = f"{name}/zarr.json (its metadata) cannot be read"
            continue
        if found != metadata.to_dict():
            problems[name] = f"{name}/zarr.json (its metadata) differs from the cube's consolidated metadata"
    return problems


def coordinate_problems(cube: Cube, group) -> tuple[dict[str, str], bool]:
    """Coordinates whose values are not what was written when the cube was
    created (name -> why), and whether the cube recorded their checksums at all
    (a cube made before it did is not checked: no problems)."""
    recorded = cube.markers.coordinates()
    if recorded is None:
        return {}, False
    if recorded is UNREADABLE:
        return {"": f"the coordinates' checksums ({cube.markers.coordinates_path.name}) cannot be read"}, True
    problems = {}
    for name, expected in recorded.items():
        if name not in group:
            problems[name] = f"coordinate {name} is missing"
            continue
        values = _read(group[name], ...)
        if isinstance(values, Exception):
            problems[name] = f"coordinate {name} cannot be read ({_one_line(values)})"
        elif coordinate_digest(values) != expected:
            problems[name] = f"coordinate {name} differs from what was written (its values edited, or a chunk damaged)"
    return problems, True


def config_problem(cube: Cube, attrs: dict) -> str | None:
    """Where the cube's stored config (which `Cube.sweep` reads back) does not
    hash to its config_hash attribute (which a run compares its own against)."""
    found = attrs.get("config_hash")
    if not cube.sweep.matches_hash(found):
        return (f"its config_hash attribute {str(found)[:12]} is not its stored config's hash "
                f"{cube.sweep.config_hash[:12]} (one of them edited)")
    return None


def identity_problem(cube: Cube, markers: dict) -> tuple[str, bool] | None:
    """Where the cube's identity record is not how its done shards (`markers`:
    kind -> {shard: content}) say they were solved, and whether a run repairs
    it: one lost or unreadable it writes again from the shards; one that says
    otherwise (edited) a run resumes by, as it resumes any cube by its record."""
    solved = cube.markers.solved_identity(markers)
    recorded = cube.markers.identity()
    if solved is None or solved == recorded:
        return None
    name = f"{MARKERS}/{cube.markers.identity_path.name}"
    if recorded is None:
        return f"its identity ({name}) is lost or cannot be read (its done shards were solved with " \
               f"{describe_identity(solved)})", True
    return (f"its identity ({name}) says {describe_identity(recorded)}, but its done shards were solved with "
            f"{describe_identity(solved)} (edited: restore it)", False)


def repair(cube: Cube) -> dict:
    """What a run repairs before it solves, `cube` opened with the run's sweep
    (whose config hash the caller has found the cube's): the stored config or
    its hash, arrays' metadata, coordinates, the identity (as its done shards
    were solved); then it drops the done markers of damaged shards, so that
    this run solves them again. Returns the damaged shards by kind."""
    _repair_config(cube)
    group = cube.group()
    for name in metadata_problems(cube, group):  # (an array's folder lost whole: made again, its chunks missing)
        (cube.path / name).mkdir(exist_ok=True)
        _write_whole(cube.path / name / "zarr.json", _metadata_bytes(_consolidated(group)[name]))
    coordinates, _ = coordinate_problems(cube, group)
    if coordinates and all(name in group or name == "" for name in coordinates):
        _write_coordinates(cube)
    check = check_shards(cube)
    solved = cube.markers.solved_identity(check.markers)
    if solved is not None and Markers(cube.path).identity() is None:  # the record lost, or unreadable
        cube.markers.record_identity(solved)
    for kind, shards in check.damaged.items():
        for shard in shards:
            cube.markers.drop_done(kind, shard)
    return check.damaged


def stored_config_hash(path) -> str | None:
    """The hash of the config a cube stores (None where it cannot be read back)."""
    try:
        return Cube(path).sweep.config_hash
    except Exception:  # noqa: BLE001 - any failure to read it back: edited beyond reading
        return None


def _repair_config(cube: Cube) -> None:
    """The stored config and its hash agreeing again where one of them was
    edited (the caller found the cube this sweep's by the other): the hash
    written again from the config, or the config from this sweep's file."""
    attrs, sweep = cube.attrs, cube.sweep
    stored = sweep.config_hash if attrs.get("config") == sweep.text else stored_config_hash(cube.path)
    found = attrs.get("config_hash")
    # As made: this sweep's (its hash in the form of the cube's making), or one
    # with its solver written otherwise.
    if stored == found or (stored == sweep.config_hash and sweep.matches_hash(found)):
        return
    if stored == sweep.config_hash:
        cube.set_attribute("config_hash", stored)
        return
    cube.set_attribute("config", sweep.text)
    if found != sweep.config_hash:
        cube.set_attribute("config_hash", sweep.config_hash)


def _write_coordinates(cube: Cube) -> None:
    """Every coordinate written again from the sweep's values (as the cube's
    creation wrote them: the same bytes), and their checksums recorded again."""
    import zarr

    from engine.cube.structure import structure

    sweep = cube.sweep
    arrays, _ = structure(sweep, "unrecorded")
    recorded = cube.markers.coordinates() or {}
    digests = {}
    with quiet_zarr():
        for name, v in arrays.items():
            values = v.values
            if values is None and name in recorded and name in shard_coordinates(sweep):
                # A sampled design's, recorded where the cube's making wrote them
                # whole (before its shards wrote them): written whole again.
                values = coordinate_values(sweep, name, slice(None))
            if values is not None:
                array = zarr.open_array(cube.path / name, mode="r+")
                array[...] = values
                digests[name] = coordinate_digest(array[...])
    cube.markers.record_coordinates(digests)


def _write_whole(final, blob: bytes) -> None:
    """`blob` at `final`, atomically: a reader finds the old file or the new one."""
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(blob)
    os.replace(tmp, final)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What `verify` found: problems (damage, missing variables), and how much of
    the cube is done: a cube can be sound as far as it goes, but partial."""

    problems: list
    shards_done: int  # sound done shards, grid and critical
    shards_total: int
    writer: str | None  # "pid N on HOST" of the run writing it now, if one is
    mixed: list = dataclasses.field(default_factory=list)  # how its done shards disagree (mixing), one line each
    unrepairable: list = dataclasses.field(default_factory=list)  # the problems no run repairs
    notes: list = dataclasses.field(default_factory=list)  # what was not checked, and why: one line each

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
        line += "".join(f" ({note})" for note in self.notes)
        if not self.problems and not self.partial:
            return line
        if self.writer:
            return f"{line}; a run is writing it now ({self.writer})"
        if self.unrepairable:
            return f"{line}; {len(self.unrepairable)} of them no run repairs: solve it again with --overwrite"
        return f"{line}; run the same command again to {'repair' if self.problems else 'finish'} it"


def verify(path) -> list[str]:
    """Problems found (empty: what is done is sound; see `examine` for how much is)."""
    return examine(path).problems


def examine(path) -> Verdict:
    """Every done shard read back against its checksums, the coordinates
    against theirs, the arrays' metadata and the stored config checked, and
    how many shards are done (a cube being written is partial)."""
    from engine.cube.lock import writer

    running = writer(path)  # asked first: a run that ends meanwhile leaves a cube at least as done
    cube = Cube(path)
    sweep = cube.sweep  # refuses non-cubes, damaged ones, unreadable configs and other store formats
    check = check_shards(cube)
    found = cube_problems(cube, check)
    total = sum(layout.n_shards for layout, _ in kind_arrays(sweep).values())
    done = sum(len(markers) for markers in check.markers.values())
    problems = found.lines() + check.problems()
    if sweep.sensitivity is not None and done == total and not problems and cube.markers.sensitivity() is None:
        found.notes.append("sensitivity indices not computed yet: a run of its sweep computes them, solving "
                           "nothing again")
    return Verdict(problems, done, total, running, mixing(check.markers, cube.attrs), found.unrepairable,
                   found.notes)


@dataclasses.dataclass
class CubeProblems:
    """What is wrong with a cube besides its shards: what a run repairs, what
    none does, and what was not checked (one line each)."""

    repairs: list = dataclasses.field(default_factory=list)
    unrepairable: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"{line}: {RUN_REPAIRS}" for line in self.repairs] + [f"{line}: {OVERWRITE}"
                                                                      for line in self.unrepairable]


def cube_problems(cube: Cube, check: ShardCheck) -> CubeProblems:
    """The stored config, its identity record (against `check`'s sound done
    shards), each array's metadata, shape and chunks, and the coordinates."""
    sweep, attrs, group = cube.sweep, cube.attrs, cube.group()
    found = CubeProblems()
    config = config_problem(cube, attrs)
    if config:
        found.repairs.append(config)
    if not attrs.get("engine_version"):
        found.unrepairable.append("no engine version recorded")
    identity = identity_problem(cube, check.markers)
    if identity:
        (found.repairs if identity[1] else found.unrepairable).append(identity[0])
    found.repairs += metadata_problems(cube, group).values()
    coordinates, checksummed = coordinate_problems(cube, group)
    (found.repairs if all(name in group or name == "" for name in coordinates) else found.unrepairable).extend(
        coordinates.values())
    if not checksummed:
        found.notes.append("coordinates not checksummed: made before they were, not checked")
    if sweep.sensitivity is not None:  # its indices against the checksums their analysis recorded
        found.repairs += index_problems(cube, group=group)
    grid = kind_arrays(sweep)[GRID][0]
    for name in shard_coordinates(sweep):
        if name not in group:
            found.unrepairable.append(f"coordinate {name} is missing")
        elif (tuple(group[name].shape), tuple(group[name].chunks)) != (grid.shape[:1], grid.chunks[:1]):
            found.unrepairable.append(f"coordinate {name}: shape {tuple(group[name].shape)} in chunks "
                                      f"{tuple(group[name].chunks)}, not the design's {grid.shape[:1]} in the "
                                      f"shards' {grid.chunks[:1]}")
    for layout, names in kind_arrays(sweep).values():
        for name in names:
            extra = sweep.output_shape(name) if name in sweep.outputs else ()
            if name not in group:
                found.unrepairable.append(f"variable {name} is missing")
            elif tuple(group[name].chunks) != layout.chunks + extra:
                found.unrepairable.append(f"variable {name}: chunks {tuple(group[name].chunks)} are not the shards "
                                          f"{layout.chunks + extra}")
            elif tuple(group[name].shape) != layout.shape + extra:
                found.unrepairable.append(f"variable {name}: shape {tuple(group[name].shape)} is not the grid's "
                                          f"{layout.shape + extra}")
    return found

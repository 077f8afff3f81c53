"""A store's markers (`_rollsweep/` inside it): a done marker per shard written
(its points, failures, device, the checksums of its arrays, the study's code
that solved it and how: engine.runner.shard), a failed marker per shard whose
task raised, the cube's identity (how its shards are solved: one way for the
whole cube, engine.cube.provenance.identity), the coordinates' checksums
(recorded as the cube is created), what a run with --overwrite made it for,
the sensitivity analysis written (engine.cube.sensitivity: what it was
computed from, and the checksums of its arrays), and the SLURM folder.

A marker is written to a temporary name and renamed into place: it is either
absent or whole. A marker that cannot be read (a disk that filled up, a hand
edit) counts as absent; the next run's repair drops it.
"""

import json
import os
import pathlib
import types
import uuid

MARKERS = "_rollsweep"
GRID, CRITICAL = "grid", "critical"
KINDS = (GRID, CRITICAL)
IDENTITY = "identity.json"
# The coordinates' checksums, recorded as the cube is created (a cube made
# before they were has none: its coordinates are not checked).
COORDINATES = "coordinates.json"
# Markers.coordinates of a record that cannot be read (empty or corrupt).
UNREADABLE = types.MappingProxyType({})  # told apart by identity, not by value
# What a run with --overwrite created the cube for (its config hash, the
# study's code, its identity): the same run, interrupted, resumes it.
AFRESH = "afresh.json"
# A sensitivity sweep's analysis, written after its index arrays: absent while
# none is written whole.
SENSITIVITY = "sensitivity.json"


def _write_json(final: pathlib.Path, content: dict) -> None:
    """`content` at `final`, atomically: a marker is either absent or whole. A
    disk error propagates (the run stops; a marker never lies)."""
    tmp = final.with_suffix(f".tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(content))
    os.replace(tmp, final)


def _read_json(path: pathlib.Path):
    """A marker's content, or None where it is empty or corrupt."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Markers:
    """The markers of the store at `path`."""

    def __init__(self, path):
        self.folder = pathlib.Path(path) / MARKERS
        self._solved = None  # how the done shards were solved, where the record was found otherwise

    @property
    def slurm_folder(self) -> pathlib.Path:
        """Where the store keeps its SLURM job scripts, shares and job logs."""
        return self.folder / "slurm"

    def make_folders(self) -> None:
        for kind in KINDS:
            (self.folder / kind).mkdir(parents=True)

    def done_path(self, kind: str, shard: int) -> pathlib.Path:
        return self.folder / kind / f"{shard:08d}.json"

    def failed_path(self, kind: str, shard: int) -> pathlib.Path:
        return self.folder / "failed" / f"{kind}-{shard:08d}.json"

    def mark_done(self, kind: str, shard: int, info: dict) -> None:
        """Mark a shard done with `info` (its "digests", the checksums of what was
        written for it, are what `verify` and the next run compare the data against)."""
        _write_json(self.done_path(kind, shard), info)
        self.failed_path(kind, shard).unlink(missing_ok=True)

    def mark_failed(self, kind: str, shard: int, error: str) -> None:
        """Record a shard whose computation raised; a later run retries it."""
        final = self.failed_path(kind, shard)
        final.parent.mkdir(exist_ok=True)
        _write_json(final, {"kind": kind, "shard": shard, "error": error})

    def drop_done(self, kind: str, shard: int) -> None:
        """The shard is pending again: the next run solves it."""
        self.done_path(kind, shard).unlink(missing_ok=True)

    def done(self, kind: str) -> set[int]:
        """Shards with a done marker (by name only: runs ask often). A marker that
        cannot be read, or whose shard's data is damaged, is dropped when a run
        prepares the store (engine.cube.verify.repair)."""
        folder = self.folder / kind
        return {int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()} if folder.exists() else set()

    def any_done(self) -> bool:
        return any(self.done(kind) for kind in KINDS)

    def read(self, kind: str) -> dict[int, dict | None]:
        """Each done marker by shard: its content, or None where it cannot be read."""
        markers = {}
        for p in sorted((self.folder / kind).glob("*.json")):
            if p.stem.isdigit():
                content = _read_json(p)
                markers[int(p.stem)] = content if isinstance(content, dict) else None
        return markers

    @property
    def identity_path(self) -> pathlib.Path:
        return self.folder / IDENTITY

    def identity(self) -> dict | None:
        """How the cube's shards are solved (None: not recorded yet), as recorded,
        or as its done shards were solved where a run found the record edited
        (`follow_shards`)."""
        if self._solved is not None:
            return self._solved
        content = _read_json(self.identity_path)
        return content if isinstance(content, dict) else None

    def solved_identity(self, markers: dict | None = None) -> dict | None:
        """How the done shards say they were solved, where all that say it agree
        (None: none says, or they disagree: a cube that mixes, made before
        identities were held to one); `markers`: kind -> {shard: content} where
        read already."""
        found = markers if markers is not None else {kind: self.read(kind) for kind in KINDS}
        said = {json.dumps(m["solved_with"], sort_keys=True) for shards in found.values() for m in shards.values()
                if isinstance(m, dict) and isinstance(m.get("solved_with"), dict)}
        return json.loads(said.pop()) if len(said) == 1 else None

    def follow_shards(self) -> dict | None:
        """Where the identity record is lost or cannot be read while done shards
        say how they were solved, take theirs as the cube's in this process
        (written back by engine.cube.verify.repair, under the store's lock): a
        run then solves the rest as they were. Returns theirs where taken."""
        if self.identity() is not None:
            return None
        self._solved = self.solved_identity()
        return self._solved

    def claim_identity(self, identity: dict) -> dict:
        """Record `identity` as how the cube's shards are solved, unless one is
        recorded already; returns the one on record. Of processes claiming at
        once (SLURM array tasks starting together), one records its own and the
        others read it: a hard link to a whole file never replaces one (a file
        that cannot be read, a hand edit, is replaced)."""
        final = self.identity_path
        tmp = final.with_suffix(f".tmp-{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps(identity))
        try:
            os.link(tmp, final)
        except FileExistsError:
            if self.identity() is None:
                os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return self.identity() or identity

    def record_identity(self, identity: dict) -> None:
        """`identity` as the cube's, replacing the one recorded (a repair: how its shards were solved)."""
        _write_json(self.identity_path, identity)
        self._solved = None

    def forget_identity(self) -> None:
        """No shard is done: the next run records its own."""
        self.identity_path.unlink(missing_ok=True)
        self._solved = None

    @property
    def coordinates_path(self) -> pathlib.Path:
        return self.folder / COORDINATES

    def record_coordinates(self, digests: dict) -> None:
        """The coordinates' checksums (name -> engine.cube.structure.coordinate_digest)."""
        _write_json(self.coordinates_path, {"digests": digests})

    def coordinates(self) -> dict | None:
        """The coordinates' checksums as recorded: None where none were (a cube made
        before they were), UNREADABLE where they cannot be read; {} where the
        cube's making wrote none (a sampled design's alone, which its shards write)."""
        if not self.coordinates_path.exists():
            return None
        content = _read_json(self.coordinates_path)
        digests = content.get("digests") if isinstance(content, dict) else None
        if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
            return UNREADABLE
        return digests

    def record_afresh(self, made_for: dict) -> None:
        _write_json(self.folder / AFRESH, made_for)

    def afresh(self) -> dict | None:
        """What a run with --overwrite created the cube for (None: none did, or unreadable)."""
        content = _read_json(self.folder / AFRESH)
        return content if isinstance(content, dict) else None

    @property
    def sensitivity_path(self) -> pathlib.Path:
        return self.folder / SENSITIVITY

    def record_sensitivity(self, content: dict) -> None:
        _write_json(self.sensitivity_path, content)

    def sensitivity(self) -> dict | None:
        """The analysis written (None: none, or unreadable: computed again by the next run)."""
        content = _read_json(self.sensitivity_path)
        return content if isinstance(content, dict) else None

    def forget_sensitivity(self) -> None:
        self.sensitivity_path.unlink(missing_ok=True)

    def failed(self) -> list[dict]:
        """The failed markers' contents (kind, shard, error)."""
        folder = self.folder / "failed"
        if not folder.exists():
            return []
        found = (_read_json(p) for p in sorted(folder.glob("*.json")))
        return [f for f in found if isinstance(f, dict) and {"kind", "shard", "error"} <= f.keys()]

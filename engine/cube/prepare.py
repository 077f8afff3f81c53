"""A run's store made ready: owned, then created, or checked and repaired for
resuming.

A cube is one identity: its config (the config hash), how its shards are
solved (its identity, engine.cube.provenance: solver, points a call and at a
time, device, packages) and the study's code that solved each shard (its done
marker's `code`). A run that would solve otherwise is refused in one line
naming the key; so is one whose study's code changed since shards were solved
(a cube holds one code's results: --overwrite solves it all with the new one).
"""

import collections
import pathlib
import shutil
import tomllib

import numpy as np

from engine.cube.chunks import digest
from engine.cube.lock import acquire, release
from engine.cube.markers import GRID, KINDS
from engine.cube.store import Cube
from engine.cube.structure import coordinate_digest, coordinate_values, shard_coordinates
from engine.cube.verify import MIXED, repair, shard_code, stored_config_hash
from engine.errors import StoreError
from engine.study.source import code_fingerprint
from engine.sweep.config import Sweep, check_out, config_hash_of
from engine.sweep.samples import SAMPLE

_AGAIN = "or use --overwrite to solve it all again"


def prepare(sweep: Sweep, path, overwrite: bool = False, devices: str = "unrecorded",
            identity: dict | None = None) -> tuple[Cube, str]:
    """Own the store, then create it, or check that an existing one belongs to this
    config and drop the done markers of shards whose data is damaged.

    Ownership (`locked`) is taken before anything is created or replaced and is
    kept by this process: the `locked(path)` block that follows (the run) takes
    it over and releases it at its end. `devices`: where the run solves (for the
    cube's provenance: engine.solve.device.devices_name). `identity`: how this
    run solves the points (engine.cube.provenance.identity) where it solves
    them itself: recorded as the cube's, or refused where the cube's differs;
    None where others solve them (SLURM array tasks, a cluster's workers), each
    recording or comparing its own as it starts (engine.runner.execute.pinned_plan).
    Returns the cube and "created" or "resumed" (with what changed). With
    `overwrite`, the cube is made afresh, unless it is the unfinished cube of
    this very run with --overwrite (_unfinished_afresh): resumed, as its
    advice to run the same command again says.
    """
    path = pathlib.Path(path)
    check_out(path, sweep.file, "run.out")
    path.parent.mkdir(parents=True, exist_ok=True)
    took = acquire(path, handover=True)
    try:
        return _prepare_owned(sweep, path, overwrite, devices, identity)
    except BaseException:
        if took:  # refused or interrupted: the run that would take it over never starts
            release(path)
        raise


def existing(sweep: Sweep, path, overwrite: bool = False) -> Cube | None:
    """The cube at `path` that this sweep resumes, its config checked (StoreError
    where it is another's), or None where a run creates one (nothing there, or
    --overwrite). Read without owning the store: for a run to plan by the cube's
    identity before it prepares it."""
    path = pathlib.Path(path)
    if overwrite or not path.exists():
        return None
    cube = Cube(path, sweep)
    attrs = cube.attrs
    _check_is_cube(cube, attrs)
    _check_config(cube, attrs)
    cube.markers.follow_shards()  # an identity record edited or lost: resumed as its shards were solved
    return cube


def _prepare_owned(sweep: Sweep, path: pathlib.Path, overwrite: bool, devices: str,
                   identity: dict | None) -> tuple[Cube, str]:
    _remove_leftovers(path)
    if not path.exists():
        return _created(sweep, path, devices, identity), "created"
    cube = Cube(path, sweep)
    attrs = cube.attrs
    if overwrite and cube.missing(attrs):  # a damaged cube, solved afresh
        return _replaced(cube, devices, identity), "created"
    _check_is_cube(cube, attrs)
    if overwrite and not _unfinished_afresh(cube, attrs, identity):
        return _replaced(cube, devices, identity), "created"  # whatever the store holds: every point solved again
    _check_config(cube, attrs)
    cube.check_format(attrs)
    repair(cube)
    if not solves_something(cube):  # a complete cube is reported as it is, however this run would solve
        return cube, _complete(cube, attrs)
    _check_study_code(cube, attrs)
    _claim(cube, identity)
    return cube, "resumed"


def _created(sweep: Sweep, path: pathlib.Path, devices: str, identity: dict | None) -> Cube:
    cube = Cube.create(sweep, path, devices)
    _claim(cube, identity)
    return cube


def _replaced(old: Cube, devices: str, identity: dict | None) -> Cube:
    """A new cube in place of the one at `old.path` (--overwrite), recorded as
    made afresh for this run (_unfinished_afresh). Where it cannot be made (a
    full disk), nothing is replaced, and the line says so."""
    path, sweep = old.path, old.sweep
    before = path.stat().st_ino
    try:
        cube = _created(sweep, path, devices, identity)
    except OSError as err:
        if not path.exists() or path.stat().st_ino != before:
            raise  # the new cube in place: as any run's disk error
        raise StoreError(f"{path}: its new cube could not be made ({err.strerror or err}: {err.filename}); "
                         "nothing was replaced, the cube there is as it was") from err
    if identity is not None:
        cube.markers.record_afresh(_afresh(sweep, identity))
    return cube


def _afresh(sweep: Sweep, identity: dict) -> dict:
    return {"config_hash": sweep.config_hash, "code": code_fingerprint(sweep.study), "identity": identity}


def _unfinished_afresh(cube: Cube, attrs: dict, identity: dict | None) -> bool:
    """Whether the cube is one that a run with --overwrite made for this very
    run (its config, the study's code, the identity it solves with) and did not
    finish (interrupted, a disk that filled up): the same command resumes it,
    as its advice says, rather than dropping what it solved. Its points come out
    bit for bit as they would solved afresh: a point's result depends on its
    parameters, the code and the identity alone. A finished one is solved again."""
    recorded = cube.markers.afresh()
    return (identity is not None and recorded is not None and recorded == _afresh(cube.sweep, identity)
            and cube.sweep.matches_hash(attrs.get("config_hash")) and solves_something(cube))


def _check_is_cube(cube: Cube, attrs: dict) -> None:
    if cube.missing(attrs):
        cube.check_whole(attrs)
    if attrs.get("config_hash") is None:
        raise StoreError(f"{cube.path}: exists and is not a rollsweep cube; choose another --out")


# ---- the config

def _check_config(cube: Cube, attrs: dict) -> None:
    """Refuse a cube of another config, naming the first key that differs where
    the cube's own config can be read back."""
    sweep, found = cube.sweep, attrs["config_hash"]
    if sweep.matches_hash(found) or found in _hashes_with_other_solver(sweep, attrs) or \
            stored_config_hash(cube.path) == sweep.config_hash:  # (its config_hash attribute edited: repaired)
        _check_draws(cube)
        return
    key = _differing_key(cube.path, sweep)
    raise StoreError(
        f"{cube.path}: holds a cube of another config ({f'{key} differs; ' if key else ''}hash {found[:12]}, this "
        f"config {sweep.config_hash[:12]}); use --overwrite to replace it or choose another --out"
    )


def _check_draws(cube: Cube) -> None:
    """Refuse a sampled cube whose draws are not the ones this process draws
    from the same file (another scipy or numpy drew them otherwise; the config
    hash names the design by the file's values alone): the checksums of the
    coordinates its done shards wrote (or its making wrote, before the shards
    did) against this process's draws over the same samples."""
    sweep = cube.sweep
    names = [name for name in shard_coordinates(sweep) if name != SAMPLE]
    if not names:  # a grid: nothing drawn, no marker read
        return
    differs = next((name for written, ours in _draw_checksums(cube) for name in names
                    if name in written and ours(name) != written[name]), None)
    if differs is not None:
        import scipy

        raise StoreError(f"{cube.path}: its sampled design's {differs} draws are not the ones this file draws "
                         f"here (scipy {scipy.__version__}, numpy {np.__version__}): drawn by another scipy or "
                         f"numpy; resume it where it was made, or use --overwrite to solve it with these draws")


def _draw_checksums(cube: Cube):
    """(drawn parameter -> the checksum the cube recorded, drawn parameter ->
    this process's checksum of the same values): the whole design's where its
    making recorded them, then each done shard's block; lazily, so a check
    stops at the first difference."""
    sweep = cube.sweep
    yield cube.markers.coordinates() or {}, lambda name: coordinate_digest(sweep.samples.draws[name])
    grid = cube.layout(GRID)
    for shard, marker in cube.markers.read(GRID).items():
        rows = grid.region(shard)[0]
        yield ((marker or {}).get("digests") or {},
               lambda name, rows=rows: digest(coordinate_values(sweep, name, rows)))


def _hashes_with_other_solver(sweep: Sweep, attrs: dict) -> set[str]:
    """This sweep's config hash with its batch solver written otherwise: left
    out, or as the cube's config wrote it. The solver is compared resolved, with
    the cube's identity (_claim): writing down the engine's choice, or leaving
    out what the cube was solved by, is no other config."""
    written = {None, sweep.batch_solver, _batch_solver_written(attrs.get("config", ""))}
    canonical = sweep.canonical()
    canonical.pop("batch_solver", None)
    return {config_hash_of(canonical | ({"batch_solver": solver} if solver else {})) for solver in written}


def _batch_solver_written(config: str) -> str | None:
    """`run.batch_solver` as a cube's config text writes it (None: not written, or unreadable)."""
    try:
        written = tomllib.loads(config).get("run", {}).get("batch_solver")
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    return written if isinstance(written, str) else None


# Sweep.canonical's keys as a sweep file names them.
_FILE_KEYS = {"shard_size": "run.shard_size"}


def _differing_key(path: pathlib.Path, sweep: Sweep) -> str | None:
    """The first key of the sweep file whose value differs from the cube's own
    config's (None where that cannot be read back: a moved parameter_file, a
    study whose parameters changed)."""
    try:
        made = Cube(path).sweep.canonical()
    except Exception:  # noqa: BLE001 - any failure to read it back: the refusal names the hashes alone
        return None
    wanted = sweep.canonical()
    for key in ("study", "outputs", "parameters", "axes", "solver", "critical", "shard_size"):
        old, new = made.get(key), wanted.get(key)
        if old == new:
            continue
        if key == "axes":
            names = [axis[0] for axis in new]
            return next((f"axes.{name}" for name, a, b in zip(names, old, new, strict=False) if a != b), key)
        if isinstance(old, dict) and isinstance(new, dict):
            return next((f"{key}.{k}" for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)), key)
        return _FILE_KEYS.get(key, key)
    return None


# ---- how the shards are solved

def solves_something(cube: Cube) -> bool:
    """Whether a run of the cube's sweep solves any shard: one is pending."""
    for kind in KINDS:
        layout = cube.layout(kind)
        if layout is not None and len(cube.markers.read(kind)) < layout.n_shards:
            return True
    return False


def _claim(cube: Cube, wanted: dict | None) -> None:
    """Record `wanted` as the cube's identity, or refuse where the one recorded
    differs (one line naming the key). A cube without a done shard takes this
    run's: nothing solved holds it to another."""
    if wanted is None:
        return
    if not cube.markers.any_done():
        cube.markers.forget_identity()
    difference = identity_difference(cube.markers.claim_identity(wanted), wanted, cube.sweep)
    if difference:
        raise StoreError(f"{cube.path}: holds a cube of another config: {difference}")


def identity_difference(recorded: dict | None, wanted: dict, sweep: Sweep) -> str | None:
    """The first way a run solving as `wanted` would solve the cube's points
    otherwise than `recorded` (the cube's identity), as one line naming the key,
    the two values and what to do; None where it would not. What `recorded`
    lacks (a cube made before it was recorded) is not compared."""
    if not recorded:
        return None
    if recorded.get("device", wanted["device"]) != wanted["device"]:
        return (f"device: this cube was solved on {recorded['device']}, this run solves on {wanted['device']}; "
                f"resume it on {recorded['device']}, {_AGAIN}")
    for name, version in sorted(recorded.get("versions", {}).items()):
        if wanted["versions"].get(name) != version:
            return (f"{name}: this cube was solved with {name} {version}, this run has "
                    f"{wanted['versions'].get(name, 'none')}; resume it with {name} {version}, {_AGAIN}")
    if recorded.get("solver", wanted["solver"]) != wanted["solver"]:
        verb = "asks for" if sweep.batch_solver else "would use"
        return (f"run.batch_solver: this cube was solved by the {recorded['solver']} solver, this run {verb} "
                f"{wanted['solver']}; set batch_solver = \"{recorded['solver']}\" to resume it, {_AGAIN}")
    if recorded.get("kernel", wanted.get("kernel")) != wanted.get("kernel"):
        return (f"ROLLSWEEP_KERNEL_BACKEND: this cube's fused kernel ran on the {recorded['kernel']} backend, this "
                f"run's would run on {wanted.get('kernel')}; set ROLLSWEEP_KERNEL_BACKEND={recorded['kernel']} to "
                f"resume it, {_AGAIN}")
    if any(recorded.get(key, wanted[key]) != wanted[key] for key in ("batch", "width")):
        return _batch_difference(recorded, wanted, sweep)
    return None


def _batch_difference(recorded: dict, wanted: dict, sweep: Sweep) -> str:
    """The line for points a call or at a time that differ (where the cube
    records them; the width follows the batch: the sweep sets only the batch)."""
    batch, width = recorded.get("batch", wanted["batch"]), recorded.get("width", wanted["width"])

    def calls(batch: int, width: int) -> str:
        return f"{batch:,} points a call ({width:,} at a time)"

    runs = calls(wanted["batch"], wanted["width"])
    asks = f"asks for {sweep.batch_size:,}: {runs}" if sweep.batch_size else f"would use {runs}"
    return (f"run.batch_size: this cube was solved with {calls(batch, width)}, this run {asks}; remove "
            f"batch_size or set it to {batch} to resume it as it was solved, {_AGAIN}")


# ---- the study's code

def _older_codes(cube: Cube, attrs: dict) -> tuple[str, collections.Counter]:
    """This process's fingerprint of the study's code, and the solved shards of
    the cube that another code solved, by code (each done marker names its own)."""
    now, made_by = code_fingerprint(cube.sweep.study), attrs.get("study_fingerprint")
    older = collections.Counter()
    for kind in KINDS:
        if cube.layout(kind) is not None:
            older.update(code for marker in cube.markers.read(kind).values()
                         if (code := shard_code(marker, made_by)) != now)
    return now, older


def _code_change(now: str, older: collections.Counter) -> str:
    return (f"the study's code changed since this cube was solved ({', '.join(c[:12] for c in sorted(older))} -> "
            f"{now[:12]})")


def _check_study_code(cube: Cube, attrs: dict) -> None:
    """Refuse, in one line, a run that would solve shards of a cube whose solved
    shards another code of the study solved (an edit, a fix): a cube holds one
    code's results, never two. A cube that older rollsweep versions solved with
    two codes (its `study_fingerprint` attribute "mixed") is refused as well."""
    now, older = _older_codes(cube, attrs)
    if not older:
        _record_codes(cube, {now}, attrs)
        return
    raise StoreError(f"{cube.path}: {_code_change(now, older)}: its {sum(older.values()):,} solved shards hold the "
                     "older code's results, and a cube holds one code's; restore that code to resume it, or use "
                     "--overwrite to solve it all again with this one")


def _complete(cube: Cube, attrs: dict) -> str:
    """A complete cube's state: "complete", and where another code of the study
    solved it, that a run solves nothing with this one unless told to."""
    now, older = _older_codes(cube, attrs)
    return f"complete; {_code_change(now, older)}: --overwrite solves it all with this one" if older else "complete"


def _record_codes(cube: Cube, codes: set[str], attrs: dict) -> None:
    """The cube's attributes name the code of its shards: one, or "mixed" and
    the list (written only where they change)."""
    if not codes:
        return
    single = next(iter(codes)) if len(codes) == 1 else MIXED
    if single == MIXED or attrs.get("study_fingerprints") is not None:
        listed = sorted(codes)
        if attrs.get("study_fingerprints") != listed:
            cube.set_attribute("study_fingerprints", listed)
    if attrs.get("study_fingerprint") != single:
        cube.set_attribute("study_fingerprint", single)


def _remove_leftovers(path: pathlib.Path) -> None:
    """Temporary folders of creations that were interrupted (only the owner of the
    store creates them, and the caller owns it now)."""
    for leftover in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)

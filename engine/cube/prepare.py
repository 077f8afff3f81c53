"""A run's store made ready: owned, then created, or checked and repaired for
resuming."""

import pathlib
import shutil

from engine.cube.lock import acquire, release
from engine.cube.markers import KINDS
from engine.cube.store import Cube
from engine.cube.verify import repair
from engine.errors import StoreError
from engine.study.source import study_fingerprint
from engine.sweep.config import Sweep, check_out


def prepare(sweep: Sweep, path, overwrite: bool = False, devices: str = "unrecorded") -> tuple[Cube, str]:
    """Own the store, then create it, or check that an existing one belongs to this
    config and drop the done markers of shards whose data is damaged.

    Ownership (`locked`) is taken before anything is created or replaced and is
    kept by this process: the `locked(path)` block that follows (the run) takes
    it over and releases it at its end. `devices`: where the run solves (for the
    cube's provenance: engine.solve.device.devices_name). Returns the cube and
    "created" or "resumed" (with what changed).
    """
    path = pathlib.Path(path)
    check_out(path, sweep.file, "run.out")
    path.parent.mkdir(parents=True, exist_ok=True)
    took = acquire(path, handover=True)
    try:
        return _prepare_owned(sweep, path, overwrite, devices)
    except BaseException:
        if took:  # refused or interrupted: the run that would take it over never starts
            release(path)
        raise


def _prepare_owned(sweep: Sweep, path: pathlib.Path, overwrite: bool, devices: str) -> tuple[Cube, str]:
    _remove_leftovers(path)
    if not path.exists():
        return Cube.create(sweep, path, devices), "created"
    cube = Cube(path, sweep)
    attrs = cube.attrs
    found = attrs.get("config_hash")
    if found is None:
        raise StoreError(f"{path}: exists and is not a rollsweep cube; choose another --out")
    if overwrite:  # afresh, whatever the store holds: the way to solve every point again
        return Cube.create(sweep, path, devices), "created"
    if found != sweep.config_hash:
        raise StoreError(
            f"{path}: holds a cube of another config (hash {found[:12]}, this config "
            f"{sweep.config_hash[:12]}); use --overwrite to replace it or choose another --out"
        )
    cube.check_format(attrs)
    repair(cube)
    return cube, _resume_after_study_change(cube, attrs.get("study_fingerprint"))


def _resume_after_study_change(cube: Cube, made_by: str | None) -> str:
    """Where the study's code changed since the cube was made (a fix, say), the
    shards with failed points are solved again with the new code; the points that
    succeeded are kept (--overwrite solves them all again)."""
    now = study_fingerprint(cube.sweep.study)
    if made_by == now:
        return "resumed"
    again = 0
    for kind in KINDS:
        for shard, marker in cube.markers.read(kind).items():
            if marker is not None and marker.get("failed", 0) > 0:
                cube.markers.drop_done(kind, shard)
                again += 1
    # Recorded once its shards are pending: an interruption from here on loses nothing.
    cube.set_attribute("study_fingerprint", now)
    return (f"resumed; the study's code changed since this cube was made ({(made_by or 'unknown')[:12]} -> "
            f"{now[:12]}): {again} shards with failed points solved again, the others kept (--overwrite: all)")


def _remove_leftovers(path: pathlib.Path) -> None:
    """Temporary folders of creations that were interrupted (only the owner of the
    store creates them, and the caller owns it now)."""
    for leftover in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)

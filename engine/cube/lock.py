"""Who writes a store: the lock file beside it (`NAME.zarr.lock`).

A `rollsweep run` holds an flock on the lock file for as long as it runs and
writes its name ("pid N on HOST") into it: a second run on the same store, from
any process, is refused naming the owner, and `status`/`verify` of a cube being
written say who writes it (`writer`). The run removes it as it ends; one
killed leaves it, and the next run takes it over.
"""

import contextlib
import fcntl
import os
import pathlib
import re
import socket
import threading
import time

from engine.errors import StoreError

_OWNER = re.compile(r"pid (\d+) on (\S+)")


def _owner_name() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _owner_text(fd) -> str:
    return os.pread(fd, 200, 0).decode(errors="replace").strip()


def lock_path(path) -> pathlib.Path:
    """The lock file beside a store (`NAME.zarr.lock`), there while a run holds
    the store, outside it so that a store replaced or removed keeps its lock."""
    path = pathlib.Path(path).absolute()  # "." or "" names the folder it is in: its name, not none
    if not path.name:  # the root folder: no cube, and no folder beside it
        raise StoreError(f"{path}: not a rollsweep cube")
    return path.with_name(path.name + ".lock")


# Stores this process owns, by (resolved path, thread): [fd of the locked file,
# users, handover]. By thread, since two threads of one process starting runs on
# one store must exclude each other too (each opens the file: flock excludes
# open files, not processes).
_HELD: dict = {}
_HELD_GUARD = threading.Lock()


def _held_key(path) -> tuple:
    return str(pathlib.Path(path).resolve()), threading.get_ident()


def acquire(path, handover: bool = False) -> bool:
    """Own `path` (an flock on its lock file), or raise StoreError naming the owner.
    Re-entrant within a thread. `handover`: held for the next `locked(path)` to
    take over (prepare, then the run), or, inside a `locked(path)`, nothing to do.
    Returns whether this call took a new hold."""
    key = _held_key(path)
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            if not handover:
                held[1] += 0 if held[2] else 1
                held[2] = False
            return False
        fd = _locked_file(path, lock_path(key[0]))
        os.ftruncate(fd, 0)
        os.pwrite(fd, _owner_name().encode(), 0)
        _HELD[key] = [fd, 1, handover]
        return True


def _locked_file(path, lock: pathlib.Path) -> int:
    """The lock file `lock`, opened (or made) and flocked, or StoreError naming
    its owner. Its owner removes it as it lets go (release): a run that opened
    it just before then holds a file no longer at `lock`, and tries again on
    the one there now (or none), so two runs never hold two files of one name."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise StoreError(f"{path}: in use by another rollsweep run ({holder}); wait for it or stop it") from None
        if _still_at(fd, lock):
            return fd
        os.close(fd)


def _still_at(fd: int, lock: pathlib.Path) -> bool:
    try:
        return os.stat(lock).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _holder(fd) -> str:
    # The owner writes its name just after locking: give it a moment.
    for _ in range(20):
        text = _owner_text(fd)
        if text:
            return text
        time.sleep(0.01)
    return "owner unknown"


def release(path) -> None:
    key = _held_key(path)
    with _HELD_GUARD:
        held = _HELD[key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            # Removed while still held (nothing is left beside a finished cube), then
            # let go: a run that opened it meanwhile finds it gone (_locked_file).
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_path(key[0]))
            os.close(held[0])  # closing releases the lock


@contextlib.contextmanager
def locked(path):
    """Exclusive use of a store by one `rollsweep run`: a second run on the same
    store, from any process, is refused naming the owner, never interleaved."""
    acquire(path)
    try:
        yield
    finally:
        release(path)


def writer(path) -> str | None:
    """"pid N on HOST" of the run holding the store, or None where none does.

    A killed run's lock file is left with its name, so the lock itself is
    asked: a run holds it for as long as it runs. An owner on this host whose
    process is gone is known to be over without asking."""
    try:
        fd = os.open(lock_path(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        text = _owner_text(fd)
        found = _OWNER.fullmatch(text)
        if found and found[2] == socket.gethostname() and not _alive(int(found[1])):
            return None
        try:  # shared, and let go at once: a run starting in that instant is refused
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return text or "owner unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True

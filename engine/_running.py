"""Whether a run is writing a cube now, from the lock file beside it
(`NAME.zarr.lock`, see engine._cube.locked): `status` and `verify` of a cube
being written say so, and who writes it."""

import fcntl
import os
import re
import socket

from ._cube import lock_path

_OWNER = re.compile(r"pid (\d+) on (\S+)")


def writer(path) -> str | None:
    """"pid N on HOST" of the run holding the store, or None where none does.

    The lock file keeps its last owner's name after that run ends, so the lock
    itself is asked: a run holds it (flock) for as long as it runs. An owner on
    this host whose process is gone is known to be over without asking."""
    lock = lock_path(path)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
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

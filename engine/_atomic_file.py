"""A cache file written whole or not at all."""

import os
import pathlib
import uuid


def write_whole(path: pathlib.Path, blob: bytes) -> None:
    """`blob` at `path`, written under a temporary name and renamed into place,
    so that other processes, which may read it at any time, see it whole or not
    at all. A cache that cannot be written costs the next process the work
    again, nothing else: an OSError is swallowed."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # (NotADirectoryError where a component of the path is a file: no temporary made)
            pass

"""The key of what is made from a study's code and kept between processes.

A traced program (engine.solve.exported) and what tracing the fused kernel's
body decides (engine.solve.kernel.stored) are pure functions of the study's
files, what the study object is made of (engine.solve.made_of: its functions'
code and closures, its parameters), the engine's source and the packages'
versions, and of the settings they were made with: stored under a hash of all
of these, a changed file, study, version or setting is a new key, so nothing
stale is ever used.
"""

import functools
import hashlib
import json
import pathlib

from engine.solve.made_of import made_of
from engine.study.source import folder_digest, package_version, study_folder

# Packages whose code goes into what is traced.
PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix", "numpy")
ENGINE = pathlib.Path(__file__).resolve().parent.parent


@functools.cache
def _engine_source() -> str:
    return folder_digest(ENGINE, "*.py")


def source_key(study, **made_with) -> str | None:
    """A hash of the study's files, what it is made of, the engine's source, the
    packages' versions and `made_with` (JSON values); None where the study's
    source cannot be found or what it is made of cannot be described (then
    nothing says when a stored result is stale)."""
    folder = study_folder(study)
    made = None if folder is None else made_of(study)
    if made is None:
        return None
    try:  # the sources by content alone: a checkout moved elsewhere keeps its keys
        sources = sorted(_digest(s) for s in made.sources | {folder})
    except OSError:  # a source that cannot be read (a module in a zip file): nothing says when it changes
        return None
    parts = {
        "study": [study.name, study.version, made.description, sources],
        "engine": _engine_source(),
        "versions": {name: package_version(name) for name in PACKAGES},
        **made_with,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _digest(source: pathlib.Path) -> str:
    """A package's folder (engine.study.source.folder_digest), or a module's file."""
    return folder_digest(source) if source.is_dir() else hashlib.sha256(source.read_bytes()).hexdigest()

"""The key of what is made from a study's code and kept between processes.

A traced program (engine.solve.exported) and what tracing the fused kernel's
body decides (engine.solve.kernel.stored) are pure functions of the study's
files, the engine's source and the packages' versions, and of the settings
they were made with: stored under a hash of all of these, a changed file,
version or setting is a new key, so nothing stale is ever used.
"""

import functools
import hashlib
import json
import pathlib

from engine.study.source import folder_digest, package_version, study_folder

# Packages whose code goes into what is traced.
PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix", "numpy")
ENGINE = pathlib.Path(__file__).resolve().parent.parent


@functools.cache
def _engine_source() -> str:
    return folder_digest(ENGINE, "*.py")


def source_key(study, **made_with) -> str | None:
    """A hash of the study's files, the engine's source, the packages' versions
    and `made_with` (JSON values); None where the study's source cannot be
    found (then nothing says when a stored result is stale)."""
    folder = study_folder(study)
    if folder is None:
        return None
    parts = {
        "study": [study.name, study.version, folder_digest(folder)],
        "engine": _engine_source(),
        "versions": {name: package_version(name) for name in PACKAGES},
        **made_with,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

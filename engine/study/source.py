"""The code a cube's values come from: the study's own files (their digest
keys the exported programs and is stored in each cube), the engine's git
commit and the packages' versions."""

import functools
import hashlib
import importlib.metadata
import inspect
import pathlib
import subprocess

PACKAGES = ("rollsweep", "jax", "jaxlib", "diffrax", "equinox", "optimistix", "xarray", "zarr", "numpy", "dask")


# Both are fixed for the life of a process (it runs the code it imported):
# asked once, not at every store it creates (~15 ms).
@functools.cache
def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def versions() -> dict:
    return {name: package_version(name) for name in PACKAGES}


@functools.cache
def git_commit() -> str:
    """Commit of the rollsweep source tree, if it is a git checkout."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def study_folder(study) -> pathlib.Path | None:
    """The folder of the package whose code the study solves with: where its point
    function is defined (for a HybridPoint, the engine's class, where its `start`
    and `finish` are). None where no source file is found."""
    point = study.solve_point
    for fn in (point, getattr(point, "start", None), getattr(point, "finish", None)):
        module = inspect.getmodule(fn) if fn is not None else None
        if module is None or module.__name__.partition(".")[0] == "engine":
            continue
        try:
            return pathlib.Path(inspect.getsourcefile(module)).resolve().parent
        except TypeError:  # built in, or defined where no file is
            continue
    return None


def study_fingerprint(study) -> str:
    """A hash of the study package's files, code and data (see folder_digest): a
    cube made by other files of the same study version says so. The exported
    programs' keys (engine.solve.exported) hash the same files."""
    folder = study_folder(study)
    return "unknown" if folder is None else folder_digest(folder)


def folder_digest(folder: pathlib.Path, pattern: str = "*") -> str:
    """A hash of the files below `folder` matching `pattern`, by relative path and
    content. Left out: Python's byte-code caches, and cubes and their lock files
    (a sweep may write its cube into a study's folder while it runs)."""
    digest = hashlib.sha256()
    for file in sorted(folder.rglob(pattern)):
        relative = file.relative_to(folder)
        written = "__pycache__" in relative.parts or any(p.endswith((".zarr", ".zarr.lock")) for p in relative.parts)
        if file.is_file() and not written:
            digest.update(relative.as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()

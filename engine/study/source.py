"""The code a cube's values come from: the study's own files (their digest
keys the exported programs and is stored in each cube and each shard's done
marker), the engine's git commit, the packages' versions and the instruction
set the CPU's programs are compiled for."""

import functools
import hashlib
import importlib.metadata
import inspect
import os
import pathlib
import platform
import re
import subprocess
import threading

PACKAGES = ("rollsweep", "jax", "jaxlib", "diffrax", "equinox", "optimistix", "xarray", "zarr", "numpy", "dask")
# Packages whose code goes into the programs that solve (the list
# engine.solve.source_key keys the exported programs by): another version of
# one may round a point otherwise.
TRACED_PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix", "numpy")
# x86 vector extensions XLA:CPU compiles for, lowest first, as /proc/cpuinfo
# names them, and as XLA_FLAGS=--xla_cpu_max_isa caps them.
_X86_LEVELS = (("sse4_2", "sse4.2"), ("avx", "avx"), ("avx2", "avx2"), ("avx512f", "avx512"))
_MAX_ISA = {"SSE4_2": "sse4.2", "AVX": "avx", "AVX2": "avx2"}  # any other cap (AVX512*, AMX*) caps nothing here


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
def traced_versions() -> dict:
    return {name: package_version(name) for name in TRACED_PACKAGES}


@functools.cache
def instruction_set() -> str:
    """The vector instructions XLA:CPU compiles this process's programs for:
    the CPU's widest x86 extension (capped by XLA_FLAGS' --xla_cpu_max_isa), or
    the machine's architecture elsewhere. It moves a point's bits: the rolling
    ball's lanes, 4,141 points, compiled for AVX2 instead of AVX-512 differ in
    498 final displacements (for SSE4.2 in 3,854)."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return machine or "unknown"
    try:
        flags = set(re.search(r"^flags\s*:(.*)$", pathlib.Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    except (OSError, AttributeError):  # not Linux, or no flags line
        return machine
    found = [name for flag, name in _X86_LEVELS if flag in flags]
    level = found[-1] if found else machine
    cap = re.search(r"--xla_cpu_max_isa=(\w+)", os.environ.get("XLA_FLAGS", ""))
    capped = _MAX_ISA.get(cap.group(1).upper()) if cap else None
    names = [name for _, name in _X86_LEVELS]
    if capped and level in names and names.index(capped) < names.index(level):
        return capped
    return level


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


# The fingerprint of each study object this process solved with (kept with the
# object, so that no other one takes its id).
_SOLVED_WITH: dict[int, tuple[object, str]] = {}
_SOLVED_WITH_LOCK = threading.Lock()


def code_fingerprint(study) -> str:
    """The fingerprint (study_fingerprint) of the code this process solves
    `study` with: its files as first hashed for this study object. A process
    runs the code it imported, whatever its files say later; a study reloaded
    is another object, hashed again. What a shard's done marker records."""
    with _SOLVED_WITH_LOCK:
        kept = _SOLVED_WITH.get(id(study))
        if kept is None or kept[0] is not study:
            kept = _SOLVED_WITH[id(study)] = (study, study_fingerprint(study))
        return kept[1]


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

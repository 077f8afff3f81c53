"""Provenance attributes: what produced a cube, so it can be trusted later;
and its identity: how its shards are solved."""

import datetime

from engine._version import __version__
from engine.study.source import code_fingerprint, git_commit, traced_versions, versions


def provenance(sweep, devices: str) -> dict:
    """The cube's provenance attributes; `devices`: where the run solves, as
    engine.solve.device.devices_name describes them."""
    return {
        "title": f"rollsweep cube: {sweep.study.title}",
        "study": sweep.study.name,
        "study_version": sweep.study.version,
        "study_source": sweep.study.source,
        "study_fingerprint": code_fingerprint(sweep.study),
        "engine_version": __version__,
        "config": sweep.text,
        "config_file": sweep.file,
        "config_hash": sweep.config_hash,
        "axes": list(sweep.axis_names),
        "critical": [sweep.critical.axis, sweep.critical.output] if sweep.critical else [],
        "dtype": sweep.solver.dtype,
        "solver": sweep.solver.solver,
        "rtol": sweep.solver.rtol,
        "atol": sweep.solver.atol,
        "git_commit": git_commit(),
        "versions": dict(versions()),  # a copy: the cached one stays as found
        "device": devices,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# A cube's identity: what moves a point's bits beyond its config (the config
# hash) and the study's code (each shard's marker records its own). One for the
# whole cube (its markers' identity.json), and each shard's done marker says how
# it was solved. Measured on the rolling ball (4,141 points, CPU): XLA:CPU
# compiles the reduction over a point's few components in diffrax's first-step
# guess otherwise for 1,024 points at once or more than for 512 or fewer, so a
# lanes call of 32,768 points (1,200 lanes, planned 1,024 at a time) and one of
# 16 differ in 409 final displacements (vmapped calls of 1,024 and 16: 861);
# AVX2 against AVX-512 in 498. The batch and width are compared whole, not only
# across that threshold: it is XLA's, and another version may draw it elsewhere.
# The fused solver's kernel backend (host C, CUDA C, Pallas: engine.solve.kernel)
# is one more: three implementations of the same kernel body round otherwise.
IDENTITY_KEYS = ("device", "versions", "solver", "kernel", "batch", "width")


def identity(solver: str, batch: int, width: int, device: str, kernel: str | None = None) -> dict:
    """How a process solves a cube's points: the batch solver (the fused one's
    kernel backend), its points a call and at a time, the device (a CPU's with
    its instruction set) and the versions of the packages traced into its
    programs."""
    return {"solver": solver, "batch": int(batch), "width": int(width), "device": device,
            "versions": dict(traced_versions())} | ({"kernel": kernel} if kernel else {})


def describe_identity(found: dict | None) -> str:
    """e.g. "lanes, 32,768 points a call, 1,200 at a time, on cpu (avx512), jax 0.10.2"."""
    if not found:
        return "unrecorded (solved before identities were recorded)"
    parts = [found.get("solver", "?") + (f" ({found['kernel']} kernel)" if "kernel" in found else "")]
    if "batch" in found:
        parts.append(f"{found['batch']:,} points a call")
    if "width" in found:
        parts.append(f"{found['width']:,} at a time")
    if "device" in found:
        parts.append(f"on {found['device']}")
    if "jax" in found.get("versions", {}):
        parts.append(f"jax {found['versions']['jax']}")
    return ", ".join(parts)

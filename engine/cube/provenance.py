"""Provenance attributes: what produced a cube, so it can be trusted later."""

import datetime

from engine._version import __version__
from engine.study.source import git_commit, study_fingerprint, versions


def provenance(sweep, devices: str) -> dict:
    """The cube's provenance attributes; `devices`: where the run solves, as
    engine.solve.device.devices_name describes them."""
    return {
        "title": f"rollsweep cube: {sweep.study.title}",
        "study": sweep.study.name,
        "study_version": sweep.study.version,
        "study_source": sweep.study.source,
        "study_fingerprint": study_fingerprint(sweep.study),
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

"""Per-point status codes stored in every cube's `status` variable.

`PENDING` is 0 on purpose: it is the zarr fill value, so a point whose shard has
not been written yet reads as "not computed" rather than as a result.
"""

import enum


class Status(enum.IntEnum):
    PENDING = 0
    SUCCESS = 1
    MAX_STEPS = 2  # the solver used its step budget before the segment ended
    EVENT_NOT_FOUND = 3  # the time horizon passed without the expected event
    NONFINITE = 4  # NaN or inf appeared in the state or an output
    OUT_OF_RANGE = 5  # a parameter lies outside the study's allowed range
    MAX_SEGMENTS = 6  # more mode transitions than the hybrid loop allows
    SOLVER_FAILED = 7  # any other solver failure (step size underflow, ...)
    NO_ROOT = 8  # critical-value search: no sign change inside the bracket
    NOT_CONVERGED = 9  # critical-value search: the bracket did not shrink to xtol within its iterations


def status_attrs() -> dict:
    """CF-style flag attributes so the cube explains its own codes."""
    return {
        "long_name": "per-point solve status",
        "flag_values": [int(s) for s in Status],
        "flag_meanings": " ".join(s.name.lower() for s in Status),
    }

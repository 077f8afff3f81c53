"""Reference solves that several test files compare against, solved once a
process: the lanes solve of bicycle_response (tests/test_fused_outside.py,
tests/test_kernel_c.py) and of the serve landing map (tests/test_fused.py,
tests/test_kernel_c.py) each cost a compile of 8-15 s on 2 cores.

A solve is shared only where everything it depends on is the same: the
study, the solver, its settings, the batch and every column's bytes. Tests
that read a shared solve carry SHARED: under pytest-xdist's --dist loadgroup
(`make test`) their group is to run on one worker, which then solves each
once. (pytest 9.2 with xdist 3.8 ignores xdist_group: xdist's nodeid suffix
no longer takes, pytest-dev/pytest-xdist#1386. Tests on two workers then
solve once each, the second loading the first's compiled program from the
shared compile cache; in one process, as `pytest tests/FILE.py`, once.)
The results are read, never written, by the tests."""

import numpy as np
import pytest

from engine.solve import evaluate, make_plan

SHARED = pytest.mark.xdist_group("shared_solves")

_solved: dict = {}


def solved(study, solver, columns, settings, batch):
    """`evaluate` of `columns` by `solver` in batches of `batch` (the process's
    programs and its compile cache as any solve's), once a process."""
    key = (id(study), solver, settings, batch,
           tuple((name, np.asarray(v).dtype.str, np.asarray(v).tobytes()) for name, v in sorted(columns.items())))
    if key not in _solved:
        result = evaluate(study, settings, columns, plan=make_plan(study, solver=solver, batch=batch))
        _solved[key] = study, result  # (the study kept: its id not reused)
    return _solved[key][1]

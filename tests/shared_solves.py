"""Reference solves that several test files compare against, solved once a
process: the lanes solve of bicycle_response (tests/test_fused_outside.py,
tests/test_kernel_c.py) and of the serve landing map (tests/test_fused.py,
tests/test_kernel_c.py) each cost a compile of 8-15 s on 2 cores.

A solve is shared only where everything it depends on is the same: the
study, the solver, its settings, the batch and every column's bytes. Within
a process (`pytest tests/FILE.py`, or a `make test` worker given these
files) each is solved once; on two workers once each, the second loading
the first's compiled program from the compile cache.
The results are read, never written, by the tests."""

import numpy as np

from engine.solve import evaluate, make_plan

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

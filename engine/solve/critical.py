"""Batched bracketing root finding along one axis: critical values.

For every point of the other axes, find x in the bracket where
output(x) = target. scipy's elementwise Chandrupatla solver drives the search:
it is vectorised (one call evaluates all unconverged points, which we solve as
one batched, vmapped shard) and converges superlinearly with the guarantees of
bisection. Termination is on the bracket width only (`xtol`): a tolerance on
the output would mean different things for different outputs.
"""

import numpy as np

from engine.study.status import Status

MAX_ITERATIONS = 200
_MAXITER = -2  # scipy's status where the iterations ran out (-1: no sign change)


def find_critical(evaluate, bracket, target, xtol, n):
    """Roots of evaluate(x, index) - target for n independent problems.

    evaluate(x, index) -> (values, status) solves the points `index` (into the n
    problems) at axis values x. Returns (roots, status): NaN and NO_ROOT where
    the bracket holds no sign change, NOT_CONVERGED where the bracket did not
    shrink to xtol within MAX_ITERATIONS, the failing status where a solve failed.
    A root is SUCCESS only where its bracket reached xtol.
    """
    from scipy.optimize import elementwise  # 0.3 s to import: only for a sweep with [critical]

    failures = np.full(n, Status.SUCCESS, np.int8)

    def f(x, index):
        index = index.astype(np.int64)
        values, status = evaluate(x, index)
        bad = status != Status.SUCCESS
        failures[index[bad]] = status[bad]
        return values - target

    lo = np.full(n, bracket[0], float)
    hi = np.full(n, bracket[1], float)
    res = elementwise.find_root(
        f,
        (lo, hi),
        args=(np.arange(n, dtype=float),),
        tolerances=dict(xatol=xtol, xrtol=0.0, fatol=0.0, frtol=0.0),
        maxiter=MAX_ITERATIONS,
    )
    status = np.select([res.success, res.status == _MAXITER], [Status.SUCCESS, Status.NOT_CONVERGED],
                       Status.NO_ROOT).astype(np.int8)
    status = np.where(failures != Status.SUCCESS, failures, status)
    roots = np.where(status == Status.SUCCESS, res.x, np.nan)
    return roots, status

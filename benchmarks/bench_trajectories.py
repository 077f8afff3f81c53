"""Sampled outputs: a point's states at a sweep's `[save] times`, against closed forms and the code a user would write.

Two studies, each sampled at 201 times (`[save] times = { linspace = [0.0, 4.0, 201] }`):

- the rolling table-tennis ball (study `pingpong`, spin ratios 0.2-3.0, rtol
  1e-10, atol 1e-12): its centre's position `x` and speed `x_dot` at the
  times, against Gao's closed form (tests/pingpong_closed_form.py: sliding,
  rolling, at rest);
- the outside bouncing ball (tests/bouncing_ball, heights 0.1-10 m x
  restitutions 0.05-0.9, max_segments 128: 92 impacts at most), sampled as
  tests/test_trajectories.py samples it (`height`, `speed`), against its
  parabolas; a sample within 1e-9 s of an impact may hold either side of it
  and is left out (counted), as are those after the last impact (NaN in both).

What it measures, in one run, every method once a round in alternating rounds
(points/s of a method's best round; "ratio" the median of the rounds' ratios to
the table's reference row, where a slow spell of a shared machine falls on all
alike):

1. accuracy: the largest |error| of each sampled output over every point and
   sample, against the closed form;
2. the cost of samples: the engine's compiled calls (engine.solve.evaluate,
   the default plan for the sweep: on CPU the lanes solver) with samples,
   against the same calls without them (the sampled outputs not selected, no
   save_times: the default plan there, the lanes too); and the vmapped
   solver's and the fused solver's (on CPU its host kernel, the generated C,
   writing the samples from inside the kernel) calls with and without
   samples; the project's target: with samples at least 0.67x without, on
   the same solver;
3. end to end (rolling ball): `rollsweep run` of the sampled sweep on the
   default path (no shard_size, no batch_size), a whole process, against its
   peer: numba, Dormand-Prince 5(4) with Hairer's PI step-size control, the
   ball's two modes and two events (slip ends -> rolling, spin reset; speed
   zero -> at rest), each located on the accepted step's dense output, x and
   x_dot at the sample times from the accepted steps' dense output, `prange`
   over the points, then the same four outputs written into a zarr v3 store
   with the engine's cube's chunks and codecs (read from the cube).

Default sizes: 100,000 spin ratios (x and x_dot: 321 MB of samples), a 100 x
100 bouncing grid, 3 rounds; --quick: 2,000 spin ratios, 16 x 16, 1 round.

Run: python benchmarks/bench_trajectories.py [--quick] [--points N] [--grid N] [--rounds R]
"""

import argparse
import math
import os
import pathlib
import re
import sys
import tempfile
import time
import traceback

import numpy as np
from _common import (
    DOPRI5_CONSTANTS,
    add_tests_to_path,
    machine,
    numba,
    print_table,
    rollsweep_process,
    sweep_text,
)

add_tests_to_path()
import bouncing_ball as ball  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

RTOL, ATOL, MAX_STEPS = 1e-10, 1e-12, 4096
TIMES = (0.0, 4.0, 201)  # the sweep's [save] times: sliding, rolling, at rest after 3.8 s at most
SPINS = (0.2, 3.0)
P = dict(cf.DEFAULTS)
# The rolling ball's outputs in the sampled sweep: two of its scalars and its samples (the peer writes the same).
SCALARS, SAMPLED = ("final_displacement", "stop_time"), ("x", "x_dot")
HEIGHTS, RESTITUTIONS, BALL_SEGMENTS = (0.1, 10.0), (0.05, 0.9), 128
NEAR_IMPACT = 1e-9  # s: a sample this close to an impact may hold either side of it
TARGET = 0.67  # the project's target: compiled calls with samples at least this fraction of without


def sample_times() -> np.ndarray:
    return np.linspace(TIMES[0], TIMES[1], TIMES[2])


# ------------------------------------------------------------- the numba peer
NUMBA_SOURCE = '''
import math

import numpy as np
from numba import njit, prange
''' + DOPRI5_CONSTANTS + '''
SAFETY=0.9; PI_BETA=0.04; EXPO=0.2 - 0.75*PI_BETA; GROW=10.0; SHRINK=0.2

@njit(inline="always")
def f(mode, v, w, lam, c):
    # (x, v, th, w)' of the slide (mode 0, eq. 2) or the roll (mode 1, eq. 7); c: the coefficients
    radius, slide_drag, slide_friction, slide_spin, roll_drag, roll_resistance = c
    if mode == 0:
        return v, -slide_drag*v - slide_friction, w, slide_spin
    a = -roll_drag*v - lam*roll_resistance
    return v, a, w, a/radius

@njit(inline="always")
def coefficients(y0, y1, h, k1, k3, k4, k5, k6, k7):
    # one component's error estimate and dense output coefficients r2..r5 (Hairer's CONTD5)
    e = h*(E1*k1 + E3*k3 + E4*k4 + E5*k5 + E6*k6 + E7*k7)
    r2 = y1 - y0
    r3 = h*k1 - r2
    r4 = r2 - h*k7 - r3
    r5 = h*(D1*k1 + D3*k3 + D4*k4 + D5*k5 + D6*k6 + D7*k7)
    return e, r2, r3, r4, r5

@njit(inline="always")
def dense(r1, r2, r3, r4, r5, th):
    # the step's interpolant at the fraction th of the step, and its derivative in th
    a = r4 + (1 - th)*r5
    b = r3 + th*a
    c = r2 + (1 - th)*b
    db = a - th*r5
    dc = -b + (1 - th)*db
    return r1 + th*c, c + th*dc

@njit(inline="always")
def locate(g0, r2, r3, r4, r5):
    # the fraction of the step where an interpolant positive at its start
    # (g0 > 0) reaches zero: Newton from the step's end, bisection where Newton leaves the bracket
    lo, hi, th = 0.0, 1.0, 1.0
    for _ in range(100):
        gv, dg = dense(g0, r2, r3, r4, r5, th)
        if gv == 0.0:
            return th
        if gv > 0.0:
            lo = th
        else:
            hi = th
        new = th - gv/dg if dg != 0.0 else -1.0
        if not (lo < new < hi):
            new = 0.5*(lo + hi)
        if abs(new - th) <= 1e-16 or hi - lo <= 1e-16:
            return new
        th = new
    return th

@njit(inline="always")
def scaled(e, y0, y1, rtol, atol):
    s = e/(atol + rtol*max(abs(y0), abs(y1)))
    return s*s

@njit(inline="always")
def first_step(mode, x, v, th, w, lam, c, rtol, atol):
    # Hairer and Wanner's starting step (DOPRI5's HINIT)
    fx, fv, fth, fw = f(mode, v, w, lam, c)
    sx = atol + rtol*abs(x); sv = atol + rtol*abs(v); sth = atol + rtol*abs(th); sw = atol + rtol*abs(w)
    d0 = math.sqrt(((x/sx)**2 + (v/sv)**2 + (th/sth)**2 + (w/sw)**2)/4)
    d1 = math.sqrt(((fx/sx)**2 + (fv/sv)**2 + (fth/sth)**2 + (fw/sw)**2)/4)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01*d0/d1
    gx, gv, gth, gw = f(mode, v + h0*fv, w + h0*fw, lam, c)
    d2 = math.sqrt((((gx - fx)/sx)**2 + ((gv - fv)/sv)**2 + ((gth - fth)/sth)**2 + ((gw - fw)/sw)**2)/4)/h0
    h1 = max(1e-6, 1e-3*h0) if max(d1, d2) <= 1e-15 else (0.01/max(d1, d2))**0.2
    return min(100*h0, h1)

@njit(cache=True)
def ball(q, v0, c, times, rtol, atol, max_steps, xs, vs):
    # one ball: x and x_dot at `times` into xs, vs; returns (final x, stop time, steps); NaN if it did not finish
    radius = c[0]
    t, x, v, th, w, lam = 0.0, 0.0, v0, 0.0, -q*v0/radius, 0.0
    k, n = 0, times.size
    while k < n and times[k] <= t:
        xs[k] = x; vs[k] = v; k += 1
    steps = 0
    for mode in range(2):
        k1x, k1v, k1th, k1w = f(mode, v, w, lam, c)
        h = first_step(mode, x, v, th, w, lam, c, rtol, atol)
        facold = 1e-4
        rejected = False
        found = False
        for _ in range(max_steps):
            steps += 1
            k2x, k2v, k2th, k2w = f(mode, v + h*A21*k1v, w + h*A21*k1w, lam, c)
            k3x, k3v, k3th, k3w = f(mode, v + h*(A31*k1v + A32*k2v), w + h*(A31*k1w + A32*k2w), lam, c)
            k4x, k4v, k4th, k4w = f(mode, v + h*(A41*k1v + A42*k2v + A43*k3v),
                                    w + h*(A41*k1w + A42*k2w + A43*k3w), lam, c)
            k5x, k5v, k5th, k5w = f(mode, v + h*(A51*k1v + A52*k2v + A53*k3v + A54*k4v),
                                    w + h*(A51*k1w + A52*k2w + A53*k3w + A54*k4w), lam, c)
            k6x, k6v, k6th, k6w = f(mode, v + h*(A61*k1v + A62*k2v + A63*k3v + A64*k4v + A65*k5v),
                                    w + h*(A61*k1w + A62*k2w + A63*k3w + A64*k4w + A65*k5w), lam, c)
            x1 = x + h*(B1*k1x + B3*k3x + B4*k4x + B5*k5x + B6*k6x)
            v1 = v + h*(B1*k1v + B3*k3v + B4*k4v + B5*k5v + B6*k6v)
            th1 = th + h*(B1*k1th + B3*k3th + B4*k4th + B5*k5th + B6*k6th)
            w1 = w + h*(B1*k1w + B3*k3w + B4*k4w + B5*k5w + B6*k6w)
            k7x, k7v, k7th, k7w = f(mode, v1, w1, lam, c)
            ex, x2, x3, x4, x5 = coefficients(x, x1, h, k1x, k3x, k4x, k5x, k6x, k7x)
            ev, v2, v3, v4, v5 = coefficients(v, v1, h, k1v, k3v, k4v, k5v, k6v, k7v)
            eth, th2, th3, th4, th5 = coefficients(th, th1, h, k1th, k3th, k4th, k5th, k6th, k7th)
            ew, w2, w3, w4, w5 = coefficients(w, w1, h, k1w, k3w, k4w, k5w, k6w, k7w)
            err = math.sqrt((scaled(ex, x, x1, rtol, atol) + scaled(ev, v, v1, rtol, atol)
                             + scaled(eth, th, th1, rtol, atol) + scaled(ew, w, w1, rtol, atol))/4)
            fac11 = err**EXPO
            if err > 1.0:  # rejected: shrink
                h = h/min(1/SHRINK, fac11/SAFETY)
                rejected = True
                continue
            # the event: the slip v - r w falls to zero (slide), the speed v reaches zero (roll)
            if mode == 0:
                g0, g1 = v - radius*w, v1 - radius*w1
                sign = 1.0
            else:
                g0, g1 = v, v1
                sign = 1.0 if v > 0.0 else -1.0
            end = t + h
            if sign*g1 <= 0.0 and sign*g0 > 0.0:
                if mode == 0:
                    frac = locate(g0, v2 - radius*w2, v3 - radius*w3, v4 - radius*w4, v5 - radius*w5)
                else:
                    frac = locate(sign*g0, sign*v2, sign*v3, sign*v4, sign*v5)
                end = t + frac*h
                found = True
            while k < n and times[k] <= end:  # the samples in this step: its dense output
                s = (times[k] - t)/h
                xs[k] = dense(x, x2, x3, x4, x5, s)[0]
                vs[k] = dense(v, v2, v3, v4, v5, s)[0]
                k += 1
            if found:
                x = dense(x, x2, x3, x4, x5, frac)[0]
                v = dense(v, v2, v3, v4, v5, frac)[0]
                th = dense(th, th2, th3, th4, th5, frac)[0]
                w = dense(w, w2, w3, w4, w5, frac)[0]
                t = end
                break
            t, x, v, th, w = end, x1, v1, th1, w1
            k1x, k1v, k1th, k1w = k7x, k7v, k7th, k7w
            fac = max(1/GROW, min(1/SHRINK, fac11/facold**PI_BETA/SAFETY))  # the PI controller
            facold = max(err, 1e-4)
            new = h/fac
            h = min(new, h) if rejected else new
            rejected = False
        if not found:
            for j in range(k, n):
                xs[j] = math.nan; vs[j] = math.nan
            return math.nan, math.nan, steps
        if mode == 0:  # rolling starts: no slip, the rolling resistance's direction frozen
            w = v/radius
            lam = 1.0 if v > 0.0 else (-1.0 if v < 0.0 else 0.0)
    for j in range(k, n):  # at rest
        xs[j] = x; vs[j] = 0.0
    return x, t, steps

@njit(parallel=True, cache=True)
def sweep(qs, v0, c, times, rtol, atol, max_steps):
    n = qs.size
    xs = np.empty((n, times.size))
    vs = np.empty((n, times.size))
    final = np.empty(n)
    stop = np.empty(n)
    steps = np.empty(n)
    for i in prange(n):
        r = ball(qs[i], v0, c, times, rtol, atol, max_steps, xs[i], vs[i])
        final[i] = r[0]
        stop[i] = r[1]
        steps[i] = r[2]
    return final, stop, xs, vs, steps
'''


def numba_sweep():
    """The numba peer as a function of the spin ratios -> (final displacement,
    stop time, x, x_dot, steps); None without numba. Written to a file, so that
    numba's cache keeps its compiled code between runs."""
    if numba is None:
        return None
    folder = pathlib.Path(tempfile.gettempdir()) / "rollsweep_bench_numba"
    folder.mkdir(exist_ok=True)
    path = folder / "trajectories_numba.py"
    if not path.exists() or path.read_text() != NUMBA_SOURCE:  # whole, never half-written (other processes)
        part = folder / f"trajectories_numba.{os.getpid()}.tmp"
        part.write_text(NUMBA_SOURCE)
        os.replace(part, path)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    import trajectories_numba

    g, r, mu, delta, beta = P["gravity"], P["radius"], P["friction"], P["rolling_resistance"], P["drag"]
    c = (r, 2 * beta, mu * g, 1.5 * (mu * r - delta) * g / r**2, 1.2 * beta, 0.6 * g * delta / r)  # the study's
    times = sample_times()

    def run(qs):
        return trajectories_numba.sweep(np.ascontiguousarray(qs, np.float64), P["initial_speed"], c, times,
                                        RTOL, ATOL, MAX_STEPS)

    return run


def write_zarr(path, qs, values, chunks, compressors):
    """What the peer's user writes: a zarr v3 store of its outputs (`values`:
    name -> array) with the engine's cube's chunks and codecs, and the
    coordinates spin_ratio and time."""
    import zarr

    root = zarr.open_group(path, mode="w", zarr_format=3)
    times = sample_times()
    for name, coordinate in (("spin_ratio", qs), ("time", times)):
        root.create_array(name, data=coordinate, dimension_names=(name,))
    for name, data in values.items():
        dims = ("spin_ratio", "time")[:data.ndim]
        array = root.create_array(name, shape=data.shape, dtype="float64", chunks=chunks[:data.ndim],
                                  compressors=compressors, dimension_names=dims)
        array[...] = data


# ------------------------------------------------------------ the closed forms
def _e1(y):  # (1 - exp(-y)) / y, 1 at y = 0 (cf.e1 on arrays)
    safe = np.where(y == 0, 1.0, y)
    return np.where(y == 0, 1.0, -np.expm1(-safe) / safe)


def _g2(y):  # (exp(-y) - 1 + y) / y^2, its series where that cancels (cf.g2 on arrays)
    series = sum((-y) ** k / math.factorial(k + 2) for k in range(16))
    safe = np.where(y == 0, 1.0, y)
    return np.where(np.abs(y) < 0.1, series, (np.expm1(-safe) + safe) / (safe * safe))


def rolling_reference(qs, times) -> tuple[np.ndarray, np.ndarray]:
    """(x, x_dot) of every spin ratio at every time, shape (points, times):
    tests/pingpong_closed_form.py's centre(t), its per-point constants (the
    slide's end, the rolling stage's) from that module and its formulas in t
    evaluated on arrays. Checked against centre() itself on a few points."""
    v0, b, mu, g = P["initial_speed"], P["drag"], P["friction"], P["gravity"]
    per_point = []
    for q in qs:
        point = dict(P, spin_ratio=float(q))
        t_star = cf.slide_end_time(point)
        per_point.append((t_star, cf.phase1_state(t_star, point)[0], *cf._rolling(point)))
    t_star, x_star, u0, c, d, tau, distance = (np.array(column)[:, None] for column in zip(*per_point, strict=True))
    t = np.asarray(times)[None, :]
    y = 2.0 * b * t
    x = np.where(t <= t_star, v0 * t * _e1(y) - mu * g * t * t * _g2(y), 0.0)
    xdot = np.where(t <= t_star, v0 * np.exp(-y) - mu * g * t * _e1(y), 0.0)
    s = np.maximum(t - t_star, 0.0)
    y = c * s
    rolling = (t > t_star) & (t < t_star + tau)
    x = np.where(rolling, x_star + u0 * s * _e1(y) - d * s * s * _g2(y), x)
    xdot = np.where(rolling, u0 * np.exp(-y) - d * s * _e1(y), xdot)
    resting = t >= t_star + tau
    x = np.where(resting, x_star + distance, x)
    xdot = np.where(resting, 0.0, xdot)
    check = np.unique(np.linspace(0, len(qs) - 1, min(len(qs), 12)).astype(int))
    exact = np.array([[cf.centre(tk, P, spin_ratio=float(qs[i])) for tk in times] for i in check])
    worst = max(np.max(np.abs(x[check] - exact[..., 0])), np.max(np.abs(xdot[check] - exact[..., 1])))
    if worst > 1e-14:
        raise RuntimeError(f"the closed form on arrays differs from centre() by {worst:.1e}")
    return x, xdot


def bouncing_reference(heights, restitutions, times) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(height, speed, near) of every point at every time, shape (points, times):
    free fall, then a parabola after each impact (the k-th at speed e^k
    sqrt(2 G h)), NaN after the last (the first slower than min_speed); near:
    the samples within NEAR_IMPACT of an impact (either side may hold there)."""
    _, impacts = ball.closed_form(heights, restitutions)
    n, t = len(heights), np.asarray(times)
    height, speed, near = np.full((n, t.size), np.nan), np.full((n, t.size), np.nan), np.zeros((n, t.size), bool)
    for i in range(n):
        v1, e, count = math.sqrt(2 * ball.G * heights[i]), restitutions[i], int(impacts[i])
        up = v1 * e ** np.arange(1, count)  # the rebounds' upward speeds
        at = v1 / ball.G + np.concatenate([[0.0], np.cumsum(2 * up / ball.G)])  # the impacts' times
        m = np.searchsorted(at, t, side="left")  # impacts before each time
        fall = m == 0
        height[i, fall], speed[i, fall] = heights[i] - ball.G * t[fall] ** 2 / 2, -ball.G * t[fall]
        flight = (m > 0) & (m < count)
        s, u = t[flight] - at[m[flight] - 1], up[m[flight] - 1]
        height[i, flight], speed[i, flight] = u * s - ball.G * s * s / 2, u - ball.G * s
        near[i] = np.min(np.abs(t[:, None] - at[None, :]), axis=1) <= NEAR_IMPACT
    return height, speed, near


def largest_error(found, exact, keep=None):
    """max |found - exact| over the samples `keep` (default all); a string
    naming the NaN where one side has NaN and the other not."""
    found = np.asarray(found, np.float64)
    keep = np.ones(found.shape, bool) if keep is None else keep
    differ = int((np.isnan(found) != np.isnan(exact))[keep].sum())
    if differ:
        return f"{differ} NaN differ"
    both = keep & ~np.isnan(exact)
    return float(np.max(np.abs(found - exact)[both])) if both.any() else math.nan


# ------------------------------------------------------------------ the methods
def pingpong_columns(qs) -> dict:
    return {k: np.broadcast_to(np.float64(v), qs.shape) for k, v in P.items()} | {"spin_ratio": qs}


def compiled_calls(study, columns, outputs, sampled, solver=None):
    """The engine's compiled calls with the plan a sweep of these points makes
    (engine.runner.cost.plan_for: sampled or not), or with `solver`; as a
    function of no arguments -> (outputs, steps), and the plan."""
    from engine import SolverSettings
    from engine.solve import evaluate, make_plan

    n = len(next(iter(columns.values())))
    settings = SolverSettings(rtol=RTOL, atol=ATOL, max_segments=max_segments_of(study),
                              save_times=tuple(sample_times()) if sampled else ())
    plan = make_plan(study, solver=solver, points=n, sampled=sampled)

    def run():
        result = evaluate(study, settings, columns, outputs=outputs, plan=plan)
        return result.outputs, result.num_steps

    return run, plan


# The solvers whose compiled calls with and without samples are compared, beside the default plan's.
SOLVER_PAIRS = ("vmapped", "fused")


def solver_pairs(methods: dict, study, columns, scalars, sampled) -> dict:
    """Each of SOLVER_PAIRS' compiled calls with the `sampled` outputs and
    without them (`scalars` alone, no save_times), into `methods`: solver ->
    (the label with, the label without)."""
    pairs = {}
    for solver in SOLVER_PAIRS:
        with_samples, plan = compiled_calls(study, columns, scalars + sampled, sampled=True, solver=solver)
        kernel = ", the host kernel" if solver == "fused" and not plan.device.accelerator else ""
        labels = (f"engine: compiled calls with samples ({solver}{kernel}, batch {plan.batch:,})",
                  f"engine: same calls without samples ({solver}{kernel}, batch {plan.batch:,})")
        methods[labels[0]] = with_samples
        methods[labels[1]] = compiled_calls(study, columns, scalars, sampled=False, solver=solver)[0]
        pairs[solver] = labels
    return pairs


def pair_ratios(times, pairs: dict) -> dict:
    """solver -> the median of the rounds' ratios of its calls with samples to without."""
    return {solver: median_ratio(times, *labels) for solver, labels in pairs.items()}


def max_segments_of(study) -> int:
    from engine import SolverSettings

    return BALL_SEGMENTS if study.name.startswith("bouncing_ball") else SolverSettings().max_segments


def sampled_ball():
    """tests/bouncing_ball sampled as tests/test_trajectories.py samples it: its
    height and speed at the times, NaN after its last impact."""
    import dataclasses

    from engine import TIME, HybridPoint, Output

    def finish(p, sol, settings):
        result = ball._finish(p, sol, settings)
        if sol.saved_y is not None:
            result.outputs.update(height=sol.saved_y[:, 0], speed=sol.saved_y[:, 1])
        return result

    return dataclasses.replace(
        ball.STUDY, name="bouncing_ball_sampled",
        outputs=ball.STUDY.outputs + (Output("height", "m", "height at the sample times", dims=(TIME,)),
                                      Output("speed", "m/s", "vertical speed at the sample times", dims=(TIME,))),
        solve_point=HybridPoint(ball.SYSTEM, ball._start, finish))


def sweep_toml(points, out) -> str:
    """The sampled sweep a user writes: no shard_size, no batch_size."""
    return sweep_text("pingpong", {"spin_ratio": {"linspace": [*SPINS, points]}}, out=out,
                      outputs=SCALARS + SAMPLED, solver={"rtol": RTOL, "atol": ATOL}) + (
        f"[save]\ntimes = {{ linspace = [{TIMES[0]}, {TIMES[1]}, {TIMES[2]}] }}\n")


SOLVED = re.compile(r"points solved in ([0-9.]+) s")


def cube_values(out) -> dict:
    import zarr

    root = zarr.open_group(out, mode="r")
    return {name: root[name][...] for name in SCALARS + SAMPLED}


def cube_layout(out) -> tuple:
    """The chunks and codecs of the cube's sampled array x."""
    import zarr

    array = zarr.open_group(out, mode="r")["x"]
    return array.chunks, array.compressors


def attempt(label, fn, failed: dict):
    """fn()'s result, or None with the error kept in failed[label] (a FAILED row)."""
    try:
        return fn()
    except Exception as err:  # one failing method must not cost the others
        failed[label] = err
        print(f"{label} raised:", file=sys.stderr)
        traceback.print_exc()
        return None


def alternate(methods: dict, rounds: int, failed: dict) -> tuple[dict, dict]:
    """Every method once untimed (compilation, caches), then `rounds` rounds of
    each once: (label -> each round's seconds, label -> its last values)."""
    times = {label: [] for label in methods}
    values, first = {}, []
    for label, method in methods.items():
        start = time.perf_counter()
        values[label] = attempt(label, method, failed)
        first.append(f"{time.perf_counter() - start:.1f}")
    print(f"first (untimed) calls, s: {', '.join(first)}", flush=True)
    for _ in range(rounds):
        for label, method in methods.items():
            if label in failed:
                continue
            start = time.perf_counter()
            out = attempt(label, method, failed)
            if out is not None:
                times[label].append(time.perf_counter() - start)
                values[label] = out
    return times, values


def median_ratio(times, label, reference) -> float:
    """The median of the rounds' ratios of label's points/s to reference's."""
    if not times.get(label) or not times.get(reference):
        return math.nan
    return float(np.median(np.divide(times[reference], times[label])))


def rows_of(n, times, values, failed, reference, errors_of) -> list:
    rows = []
    for label in times:
        if label in failed:
            err = failed[label]
            rows.append((f"{label} [FAILED: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}]",
                         math.nan))
            continue
        ratio = median_ratio(times, label, reference)
        rows.append((label, n / min(times[label]), f"{ratio:.3g}", *errors_of(values[label])))
    return rows


# ------------------------------------------------------------------ the tables
def rolling_table(points: int, rounds: int) -> dict:
    """The rolling ball: end to end, compiled calls with and without samples,
    the peer. Returns the cost-of-samples ratios (name -> median of the rounds)."""
    from studies.pingpong import STUDY

    qs = np.linspace(*SPINS, points)
    times = sample_times()
    start = time.perf_counter()
    exact_x, exact_xdot = rolling_reference(qs, times)
    reference_seconds = time.perf_counter() - start
    columns = pingpong_columns(qs)
    failed, methods = {}, {}
    with tempfile.TemporaryDirectory(prefix="rollsweep_trajectories_") as tmp:
        folder = pathlib.Path(tmp)
        sweep = folder / "pingpong_sampled.toml"
        out = folder / "pingpong_sampled.zarr"
        sweep.write_text(sweep_toml(points, out))
        solved = []

        def process():
            _, done = rollsweep_process("run", str(sweep), "--quiet", "--overwrite")
            found = SOLVED.search(done.stdout)
            solved.append(float(found.group(1)) if found else math.nan)
            return {}, None  # its values: read from the cube at the end

        run_label = "engine: rollsweep run, default path (the sampled sweep, a process)"
        methods[run_label] = process
        threads = numba.get_num_threads() if numba is not None else 0
        peer = numba_sweep()
        peer_label = f"numba DP5 + dense output, prange, {threads} threads, then zarr v3 (the cube's chunks)"
        solve_label = "numba, the same without the zarr writes"
        if peer is not None:
            layout = {}

            def peer_end_to_end():
                if not layout:  # the engine's cube, from its untimed first run
                    layout["chunks"], layout["compressors"] = cube_layout(out)
                final, stop, xs, vs, steps = peer(qs)
                write_zarr(folder / "peer.zarr", qs, {"final_displacement": final, "stop_time": stop, "x": xs,
                                                      "x_dot": vs}, layout["chunks"], layout["compressors"])
                return {"x": xs, "x_dot": vs}, steps

            methods[peer_label] = peer_end_to_end
            methods[solve_label] = lambda: (lambda r: ({"x": r[2], "x_dot": r[3]}, r[4]))(peer(qs))
        with_samples, plan = compiled_calls(STUDY, columns, SCALARS + SAMPLED, sampled=True)
        calls_with = f"engine: compiled calls with samples ({plan.solver.name}, batch {plan.batch:,}; default plan)"
        methods[calls_with] = with_samples
        without, plan = compiled_calls(STUDY, columns, SCALARS, sampled=False)
        calls_without = (f"engine: same calls without samples ({plan.solver.name}, batch {plan.batch:,}; "
                         "default plan)")
        methods[calls_without] = without
        pairs = solver_pairs(methods, STUDY, columns, SCALARS, SAMPLED)
        times_, values = alternate(methods, rounds, failed)
        if run_label not in failed:
            found = cube_values(out)
            values[run_label] = ({"x": found["x"], "x_dot": found["x_dot"]}, None)
            chunks = cube_layout(out)[0]
        else:
            chunks = None

    def errors_of(found):
        outputs, steps = found
        steps = "-" if steps is None else f"{float(np.mean(steps)):.1f}"
        if "x" not in outputs:
            return "-", "-", steps
        return largest_error(outputs["x"], exact_x), largest_error(outputs["x_dot"], exact_xdot), steps

    reference = run_label if run_label not in failed else next(iter(times_))
    rows = rows_of(points, times_, values, failed, reference, errors_of)
    if solved and run_label not in failed:
        rows.insert(1, ("  same, the rate of its own 'solved in' figure", points / min(solved[1:] or solved), "-",
                        *errors_of(values[run_label])))
    megabytes = 2 * points * TIMES[2] * 8 / 1e6
    title = (f"rolling ball sampled: {points:,} spin ratios {SPINS[0]}-{SPINS[1]}, x and x_dot at {TIMES[2]} times "
             f"{TIMES[0]}-{TIMES[1]} s ({megabytes:,.0f} MB), rtol {RTOL}, atol {ATOL}, float64; the cube's chunks "
             f"{chunks}; best of {rounds} alternating rounds; {machine()}")
    print_table(title, rows, reference, ("median round ratio", "max |x err| (m)", "max |x_dot err| (m/s)",
                                         "steps a point"))
    print(f"closed form: tests/pingpong_closed_form.py at every point and sample ({reference_seconds:.1f} s)")
    return {"rolling ball": (median_ratio(times_, calls_with, calls_without), pair_ratios(times_, pairs),
                             median_ratio(times_, run_label, peer_label) if peer is not None else math.nan)}


def bouncing_table(grid: int, rounds: int) -> dict:
    study = sampled_ball()
    h, e = np.meshgrid(np.linspace(*HEIGHTS, grid), np.linspace(*RESTITUTIONS, grid), indexing="ij")
    heights, restitutions = h.ravel(), e.ravel()
    times = sample_times()
    exact_h, exact_v, near = bouncing_reference(heights, restitutions, times)
    keep = ~near
    columns = {"height": heights, "restitution": restitutions,
               "min_speed": np.broadcast_to(np.float64(ball.MIN_SPEED), heights.shape)}
    scalars = ("rest_time", "impacts")
    failed, methods = {}, {}
    with_samples, plan = compiled_calls(study, columns, scalars + ("height", "speed"), sampled=True)
    calls_with = f"engine: compiled calls with samples ({plan.solver.name}, batch {plan.batch:,}; default plan)"
    methods[calls_with] = with_samples
    without, plan = compiled_calls(study, columns, scalars, sampled=False)
    calls_without = f"engine: same calls without samples ({plan.solver.name}, batch {plan.batch:,}; default plan)"
    methods[calls_without] = without
    pairs = solver_pairs(methods, study, columns, scalars, ("height", "speed"))
    times_, values = alternate(methods, rounds, failed)

    def errors_of(found):
        outputs, steps = found
        steps = f"{float(np.mean(steps)):.1f}"
        if "height" not in outputs:
            return "-", "-", steps
        return (largest_error(outputs["height"], exact_h, keep), largest_error(outputs["speed"], exact_v, keep),
                steps)

    rows = rows_of(heights.size, times_, values, failed, calls_without, errors_of)
    _, impacts = ball.closed_form(heights, restitutions)
    title = (f"bouncing ball (outside study) sampled: {grid} x {grid} = {heights.size:,} points (heights "
             f"{HEIGHTS[0]}-{HEIGHTS[1]} m, restitutions {RESTITUTIONS[0]}-{RESTITUTIONS[1]}: {impacts.mean():.1f} "
             f"impacts a point, {int(impacts.max())} at most; max_segments {BALL_SEGMENTS}), height and speed at "
             f"{TIMES[2]} times {TIMES[0]}-{TIMES[1]} s, rtol {RTOL}, atol {ATOL}; best of {rounds} alternating "
             f"rounds; {machine()}")
    print_table(title, rows, calls_without, ("median round ratio", "max |height err| (m)", "max |speed err| (m/s)",
                                             "steps a point"))
    print(f"closed form: parabolas between the impacts; {int(near.sum()):,} of {near.size:,} samples within "
          f"{NEAR_IMPACT:g} s of an impact left out (either side may hold there)")
    return {"bouncing ball": (median_ratio(times_, calls_with, calls_without), pair_ratios(times_, pairs), math.nan)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000, help="spin ratios of the rolling ball's sweep")
    parser.add_argument("--grid", type=int, default=100, help="heights and restitutions of the bouncing ball, each")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (every method once a round)")
    parser.add_argument("--quick", action="store_true", help="2,000 spin ratios, a 16 x 16 grid, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.points, args.grid, args.rounds = 2_000, 16, 1
    ratios = rolling_table(args.points, args.rounds)
    ratios |= bouncing_table(args.grid, args.rounds)
    print(f"\nthe cost of samples: compiled calls with samples against without, points/s, median of the rounds' "
          f"ratios (target: with >= {TARGET}x without):")
    for study, (default, solvers, peer) in ratios.items():
        print(f"  {study}: the default plan {default:.3g}x without samples"
              f"{'' if default >= TARGET else '  [below the target]'}" + "".join(
                  f"; {solver} {ratio:.3g}x{'' if ratio >= TARGET else '  [below the target]'}"
                  for solver, ratio in solvers.items()))
        if not math.isnan(peer):
            print(f"  {study}: rollsweep run on the default path {peer:.3g}x the numba peer end to end "
                  f"(target: >= 1x){'' if peer >= 1 else '  [below the target]'}")


if __name__ == "__main__":
    main()

"""Many events a point: an outside bouncing-ball study against the code a user would write instead.

The study (tests/bouncing_ball: a ball dropped from rest at `height`, reset
v -> -e v at each ground contact until the impact speed falls below
`min_speed` = 1e-3 m/s; 20.6 impacts a point on average, 92 at most on the
default grid of heights 0.1-10 m x restitutions 0.05-0.9, 100 x 100) is
registered as an outside package is, under the `rollsweep.studies` entry
point, and swept with rtol 1e-10, atol 1e-12, max_segments 512. In one run,
in alternating rounds (every method once a round; best of the rounds, and the
median of each round's ratio to the numba peer, where a slow spell of a shared
machine falls on all alike):

- `rollsweep run` on the default path (no shard_size, no batch_size), a whole
  process: points/s of its wall time, and of its own "solved in" figure
- engine.run of the same sweep in this process, warm (no process start-up)
- the engine's compiled calls (engine.solve.evaluate with the default plan)
- each of the engine's ways at max_segments 512, 128 and 1024 (the cost
  should follow the events taken, not the room reserved for them), and for
  the study as written (its rest time the solution's end, sol.t) and as a
  user might write it instead (the rest time read from the event log,
  sol.event_t: bouncing_ball.LOGGED, registered beside it)
- the peer: numba, Dormand-Prince 5(4) with Hairer's PI step-size control,
  each ground crossing located on the accepted step's dense output (Newton,
  bisection fallback), a fresh step-size guess after each reset, the same stop
  rule, no closed form inside; `prange` over the points on every CPU thread,
  and on a GPU the same code as a numba-CUDA kernel, one thread a point

Errors against the closed form: the largest relative error of the time to
rest, how many points are late and early, and whether every point's impact
count is the closed form's. A peer that raises is a FAILED row; the CUDA row
is skipped without a GPU (or numba).

Run: python benchmarks/bench_bounces.py [--quick] [--grid 100] [--rounds 5]
NUMBA_ENABLE_CUDASIM=1 python benchmarks/bench_bounces.py --cudasim-check
checks the CUDA kernel on a few points in numba's CUDA simulator.
"""

import argparse
import math
import os
import pathlib
import re
import resource
import sys
import tempfile
import time
import traceback

import numpy as np
from _common import (
    DOPRI5_CONSTANTS,
    add_tests_to_path,
    cuda_device_source,
    engine_end_to_end,
    machine,
    numba,
    numba_cuda_namespace,
    print_table,
    record_row,
    rollsweep_process,
    sweep_text,
)
from _common import write_registration as register

add_tests_to_path()
import bouncing_ball as ball  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
RTOL, ATOL, MAX_SEGMENTS = 1e-10, 1e-12, 512
HEIGHTS, RESTITUTIONS = (0.1, 10.0), (0.05, 0.9)
MAX_STEPS = 4096  # a segment's steps, as the engine's default max_steps
# The package's studies by attribute: the rest time from the solution's end
# (sol.t), and from the event log (whose length is max_segments).
STUDIES = {"STUDY": ball.STUDY, "LOGGED": ball.LOGGED}
READS = {ball.STUDY.name: "sol.t", ball.LOGGED.name: "event log"}
CUDA_THREADS = 128

# ------------------------------------------------------------- the numba peer
NUMBA_SOURCE = '''
import math

import numpy as np
from numba import njit, prange
''' + DOPRI5_CONSTANTS + '''
SAFETY=0.9; BETA=0.04; EXPO=0.2 - 0.75*BETA; GROW=10.0; SHRINK=0.2

@njit(inline="always")
def f(x, v, g):
    # the flight: height x, velocity v
    return v, -g

@njit(inline="always")
def step(x, v, k1x, k1v, dt, g):
    # one Dormand-Prince step from (x, v) with first stage k1 (FSAL): the new
    # state, its last stage (the next step's first), the error estimate and the
    # dense output's coefficients r2..r5 of each component
    k2x, k2v = f(x + dt*A21*k1x, v + dt*A21*k1v, g)
    k3x, k3v = f(x + dt*(A31*k1x + A32*k2x), v + dt*(A31*k1v + A32*k2v), g)
    k4x, k4v = f(x + dt*(A41*k1x + A42*k2x + A43*k3x), v + dt*(A41*k1v + A42*k2v + A43*k3v), g)
    k5x, k5v = f(x + dt*(A51*k1x + A52*k2x + A53*k3x + A54*k4x), v + dt*(A51*k1v + A52*k2v + A53*k3v + A54*k4v), g)
    k6x, k6v = f(x + dt*(A61*k1x + A62*k2x + A63*k3x + A64*k4x + A65*k5x),
                 v + dt*(A61*k1v + A62*k2v + A63*k3v + A64*k4v + A65*k5v), g)
    x1 = x + dt*(B1*k1x + B3*k3x + B4*k4x + B5*k5x + B6*k6x)
    v1 = v + dt*(B1*k1v + B3*k3v + B4*k4v + B5*k5v + B6*k6v)
    k7x, k7v = f(x1, v1, g)
    ex = dt*(E1*k1x + E3*k3x + E4*k4x + E5*k5x + E6*k6x + E7*k7x)
    ev = dt*(E1*k1v + E3*k3v + E4*k4v + E5*k5v + E6*k6v + E7*k7v)
    r2x = x1 - x; r3x = dt*k1x - r2x; r4x = r2x - dt*k7x - r3x
    r5x = dt*(D1*k1x + D3*k3x + D4*k4x + D5*k5x + D6*k6x + D7*k7x)
    r2v = v1 - v; r3v = dt*k1v - r2v; r4v = r2v - dt*k7v - r3v
    r5v = dt*(D1*k1v + D3*k3v + D4*k4v + D5*k5v + D6*k6v + D7*k7v)
    return x1, v1, k7x, k7v, ex, ev, r2x, r3x, r4x, r5x, r2v, r3v, r4v, r5v

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
def rms(a, b):
    return math.sqrt(0.5*(a*a + b*b))

@njit(inline="always")
def first_step(x, v, fx, fv, g, rtol, atol):
    # Hairer and Wanner's starting step (DOPRI5's HINIT; scipy's select_initial_step)
    sx = atol + rtol*abs(x); sv = atol + rtol*abs(v)
    d0 = rms(x/sx, v/sv); d1 = rms(fx/sx, fv/sv)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01*d0/d1
    f1x, f1v = f(x + h0*fx, v + h0*fv, g)
    d2 = rms((f1x - fx)/sx, (f1v - fv)/sv)/h0
    h1 = max(1e-6, 1e-3*h0) if max(d1, d2) <= 1e-15 else (0.01/max(d1, d2))**0.2
    return min(100*h0, h1)

@njit(inline="always")
def locate(x, r2, r3, r4, r5):
    # the fraction of the step where the height's interpolant crosses zero
    # downward: Newton from the step's end, bisection where Newton leaves the bracket
    lo, hi, th = 0.0, 1.0, 1.0
    for _ in range(100):
        gv, dg = dense(x, r2, r3, r4, r5, th)
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

@njit(cache=True)
def bounce(height, e, min_speed, g, rtol, atol, max_steps, max_segments):
    # one ball: (time of the last impact, impacts, steps); NaN time if it did not finish
    t, x, v = 0.0, height, 0.0
    steps = 0
    for impacts in range(1, max_segments + 1):
        k1x, k1v = f(x, v, g)
        dt = first_step(x, v, k1x, k1v, g, rtol, atol)
        facold = 1e-4
        rejected = False
        found = False
        te = 0.0
        ve = 0.0
        for _ in range(max_steps):
            steps += 1
            x1, v1, k7x, k7v, ex, ev, r2x, r3x, r4x, r5x, r2v, r3v, r4v, r5v = step(x, v, k1x, k1v, dt, g)
            err = rms(ex/(atol + rtol*max(abs(x), abs(x1))), ev/(atol + rtol*max(abs(v), abs(v1))))
            fac11 = err**EXPO
            if err > 1.0:  # rejected: shrink
                dt = dt/min(1/SHRINK, fac11/SAFETY)
                rejected = True
                continue
            # a crossing downward: above the ground at the start (or on it, going up), not above at the end
            if x1 <= 0.0 and (x > 0.0 or (x == 0.0 and v > 0.0)):
                th = locate(x, r2x, r3x, r4x, r5x)
                te = t + th*dt
                ve = dense(v, r2v, r3v, r4v, r5v, th)[0]
                found = True
                break
            t, x, v, k1x, k1v = t + dt, x1, v1, k7x, k7v
            fac = max(1/GROW, min(1/SHRINK, fac11/facold**BETA/SAFETY))  # the PI controller
            facold = max(err, 1e-4)
            new = dt/fac
            dt = min(new, dt) if rejected else new
            rejected = False
        if not found:
            return math.nan, impacts, steps
        t = te
        if abs(ve) < min_speed:
            return t, impacts, steps
        x, v = 0.0, -e*ve
    return math.nan, max_segments, steps

@njit(parallel=True, cache=True)
def sweep(heights, restitutions, min_speed, g, rtol, atol, max_steps, max_segments):
    n = heights.size
    rest = np.empty(n)
    impacts = np.empty(n)
    steps = np.empty(n)
    for i in prange(n):
        r = bounce(heights[i], restitutions[i], min_speed, g, rtol, atol, max_steps, max_segments)
        rest[i] = r[0]
        impacts[i] = r[1]
        steps[i] = r[2]
    return rest, impacts, steps
'''


def numba_sweep():
    """The numba CPU peer as a function of (heights, restitutions) -> (rest time,
    impacts, steps) arrays; None without numba. Written to a file, so that
    numba's cache keeps its compiled code between runs."""
    if numba is None:
        return None
    folder = pathlib.Path(tempfile.gettempdir()) / "rollsweep_bench_numba"
    folder.mkdir(exist_ok=True)
    path = folder / "bounces_numba.py"
    if not path.exists() or path.read_text() != NUMBA_SOURCE:  # whole, never half-written (other processes)
        part = folder / f"bounces_numba.{os.getpid()}.tmp"
        part.write_text(NUMBA_SOURCE)
        os.replace(part, path)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    import bounces_numba

    def run(heights, restitutions):
        return bounces_numba.sweep(np.ascontiguousarray(heights, np.float64),
                                   np.ascontiguousarray(restitutions, np.float64),
                                   ball.MIN_SPEED, ball.G, RTOL, ATOL, MAX_STEPS, MAX_SEGMENTS)

    return run


def cuda_source() -> str:
    """The numba source compiled for the GPU: its functions made CUDA device
    functions, and a kernel (one thread a point) in place of its parallel loop;
    the same arithmetic as the CPU peer."""
    replacements = [("from numba import njit, prange\n", "from numba import cuda\n"),
                    ('@njit(inline="always")', "@cuda.jit(device=True)"),
                    ("@njit(cache=True)\ndef bounce", "@cuda.jit(device=True)\ndef bounce")]
    return cuda_device_source(NUMBA_SOURCE, replacements, "the numba source") + '''
@cuda.jit
def sweep_kernel(heights, restitutions, rest, impacts, steps, min_speed, g, rtol, atol, max_steps, max_segments):
    i = cuda.grid(1)
    if i < heights.size:
        r = bounce(heights[i], restitutions[i], min_speed, g, rtol, atol, max_steps, max_segments)
        rest[i] = r[0]
        impacts[i] = r[1]
        steps[i] = r[2]
'''


def cuda_sweep():
    """The numba-CUDA peer as a function like numba_sweep's (None: no numba or no CUDA device)."""
    namespace = numba_cuda_namespace(cuda_source(), "bounces_numba_cuda")
    if namespace is None:
        return None
    from numba import cuda

    kernel = namespace["sweep_kernel"]

    def run(heights, restitutions):
        n = heights.size
        h = cuda.to_device(np.ascontiguousarray(heights, np.float64))
        e = cuda.to_device(np.ascontiguousarray(restitutions, np.float64))
        out = [cuda.device_array(n, np.float64) for _ in range(3)]
        kernel[-(-n // CUDA_THREADS), CUDA_THREADS](h, e, *out, ball.MIN_SPEED, ball.G, RTOL, ATOL, MAX_STEPS,
                                                    MAX_SEGMENTS)
        return tuple(a.copy_to_host() for a in out)

    return run


# ------------------------------------------------------------ the grid, errors
def grid(n_heights, n_restitutions):
    """The sweep's points in its cube's order (C order of the axes height, restitution)."""
    h, e = np.meshgrid(np.linspace(*HEIGHTS, n_heights), np.linspace(*RESTITUTIONS, n_restitutions), indexing="ij")
    return h.ravel(), e.ravel()


def accuracy(rest, impacts, exact_rest, exact_impacts) -> tuple:
    """(max |relative error| of the time to rest, 'late/early' point counts,
    impacts against the closed form: 'all equal' or how many differ)."""
    rest, impacts = np.asarray(rest, np.float64), np.asarray(impacts, np.float64)
    relative = (rest - exact_rest) / exact_rest
    failed = int(np.isnan(relative).sum())
    worst = float(np.nanmax(np.abs(relative))) if failed < relative.size else math.nan
    signs = f"{int((relative > 0).sum())}/{int((relative < 0).sum())}" + (f" ({failed} NaN)" if failed else "")
    differ = int((impacts != exact_impacts).sum())
    return worst, signs, "all equal" if differ == 0 else f"{differ} differ"


ERROR_HEADERS = ("median round ratio", "CPU us a point", "max |rel err| rest time", "late/early points",
                 "impacts vs closed form", "steps a point")


# ------------------------------------------------------- the engine's methods
def write_registration(folder: pathlib.Path) -> pathlib.Path:
    """What `pip install -e` of the study's package would add to the environment,
    in `folder` (a path entry of its own, not the shared environment): the
    package (a link to tests/bouncing_ball) and its distribution's metadata
    with the entry points (_common.write_registration)."""
    return register(folder, pathlib.Path(ball.__file__).parent,
                    {study.name: f"bouncing_ball:{attribute}" for attribute, study in STUDIES.items()})


def sweep_toml(n_heights, n_restitutions, max_segments, out, study="bouncing_ball") -> str:
    """The sweep a user writes: no shard_size, no batch_size."""
    return sweep_text(
        study,
        {"height": {"linspace": [*HEIGHTS, n_heights]}, "restitution": {"linspace": [*RESTITUTIONS, n_restitutions]}},
        out=out, solver={"rtol": RTOL, "atol": ATOL, "max_segments": max_segments})


def sweep_file(folder: pathlib.Path, n_heights, n_restitutions, max_segments, study="bouncing_ball") -> pathlib.Path:
    name = f"{study}_{n_heights}x{n_restitutions}_{max_segments}"
    path = folder / f"{name}.toml"
    path.write_text(sweep_toml(n_heights, n_restitutions, max_segments, folder / f"{name}.zarr", study))
    return path


SOLVED = re.compile(r"points solved in ([0-9.]+) s")


def rollsweep_run(sweep: pathlib.Path, registration: pathlib.Path) -> tuple[float, float]:
    """(wall seconds of one `rollsweep run` process, the seconds its own summary
    says it solved in). The CLI of this checkout, whatever Python runs it
    (_common.rollsweep_process), with the study's registration on its path."""
    seconds, done = rollsweep_process("run", str(sweep), "--quiet", "--overwrite", path=[registration])
    solved = SOLVED.search(done.stdout)
    return seconds, float(solved.group(1)) if solved else math.nan


def cube_values(sweep: pathlib.Path) -> tuple:
    from engine import open_cube, parse_sweep

    cube = open_cube(parse_sweep(sweep.read_text()).out)
    return cube["rest_time"].values.ravel(), cube["impacts"].values.ravel()


def engine_calls(heights, restitutions, max_segments, study=ball.STUDY, solver=None):
    """The engine's compiled calls with the default plan for this many points
    (what `rollsweep run` uses; `solver`: another of the engine's), as a function of no arguments."""
    from engine import SolverSettings
    from engine.solve import evaluate, make_plan

    settings = SolverSettings(rtol=RTOL, atol=ATOL, max_segments=max_segments)
    plan = make_plan(study, solver=solver, points=heights.size)
    columns = {"height": heights, "restitution": restitutions,
               "min_speed": np.broadcast_to(np.float64(ball.MIN_SPEED), heights.shape)}

    def run():
        result = evaluate(study, settings, columns, plan=plan)
        return result.outputs["rest_time"], result.outputs["impacts"], result.num_steps

    return run, plan


# ------------------------------------------------------------------ the run
SEGMENTS = (MAX_SEGMENTS, 128, 1024)  # the sweep's, then the room check's
THE_SWEEPS = {segments: " (the sweep's)" if segments == MAX_SEGMENTS else "" for segments in SEGMENTS}
SOLVED_IN = "  same, the rate of its own 'solved in' figure"


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds so far: the CPU of this process's threads (numba's
    and XLA's included) and of its finished children (the `rollsweep run`s)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time() + children.ru_utime + children.ru_stime


def measured(fn):
    """A method: () -> (fn()'s (rest time, impacts, steps) or None, wall
    seconds, 'solved in' seconds or None, CPU seconds)."""
    def method():
        wall, cpu = clocks()
        found, solved_in = fn()
        after_wall, after_cpu = clocks()
        return found, after_wall - wall, solved_in, after_cpu - cpu

    return method


def timed(fn):
    """Compiled calls, fn() -> (rest time, impacts, steps), as a method."""
    return measured(lambda: (fn(), None))


def process_method(sweep: pathlib.Path, registration: pathlib.Path):
    """`rollsweep run` as a method (its cube read at the end; its own 'solved in' figure kept)."""
    return measured(lambda: (None, rollsweep_run(sweep, registration)[1]))


def in_process_method(text_for):
    """engine.run in this process, warm (the program loaded, the study
    imported): the run's own work, its store, shards and their calls, without
    a process's start-up."""
    def run():
        found, _, _ = engine_end_to_end(text_for, ["rest_time", "impacts"], repeat=1, warmup=False)
        return (found["rest_time"].ravel(), found["impacts"].ravel(), None), None

    return measured(run)


def in_process_methods(heights, restitutions, skipped: list, failed: dict, room: dict,
                       with_one_thread: bool = True, solver=None) -> tuple[dict, str]:
    """label -> a method (see measured): the engine's compiled calls of each study at each max_segments, and the numba
    peers; and the CPU peer's label (the table's reference). room: (what, study)
    -> {max_segments: label}, filled. with_one_thread: also the CPU peer on one thread; solver: the
    compiled calls' (None: the plan's default)."""
    import jax

    methods = {}
    platform = jax.devices()[0].platform
    for study in STUDIES.values():
        for segments in SEGMENTS:
            calls, plan = engine_calls(heights, restitutions, segments, study, solver)
            label = (f"engine: compiled calls on {platform} ({plan.solver.name}, batch {plan.batch:,}), rest time "
                     f"from {READS[study.name]}, max_segments {segments}{THE_SWEEPS[segments]}")
            methods[label] = timed(calls)
            room.setdefault(("compiled calls", study.name), {})[segments] = label
    threads = numba.get_num_threads() if numba is not None else 0
    cpu_label = f"numba DP5 + dense-output events, prange, {threads} threads"
    cpu_peer = numba_sweep()
    if cpu_peer is not None:
        methods[cpu_label] = timed(lambda: cpu_peer(heights, restitutions))
        if with_one_thread and threads > 1:  # one core's worth, beside the compiled calls (one call: one thread)
            methods["numba, the same on 1 thread"] = timed(lambda: one_thread(cpu_peer, heights, restitutions))
    else:
        skipped.append((cpu_label, "numba not installed: pip install -e '.[bench]'"))
    cuda_label = "numba-CUDA DP5 + dense-output events, one thread a point"
    try:
        gpu_peer = cuda_sweep()
        if gpu_peer is not None:
            methods[cuda_label] = timed(lambda: gpu_peer(heights, restitutions))
        else:
            skipped.append((cuda_label, "numba not installed" if numba is None else "no CUDA GPU"))
    except Exception as err:  # a broken peer is a failed row, never the end of the run
        failed[cuda_label] = err
    return methods, cpu_label


def one_thread(peer, *args):
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return peer(*args)
    finally:
        numba.set_num_threads(threads)


def attempt(label, fn, failed: dict):
    """fn()'s result, or None with the error kept in failed[label] (a FAILED row)."""
    try:
        return fn()
    except Exception as err:  # one failing method must not cost the others
        failed[label] = err
        print(f"{label} raised:", file=sys.stderr)
        traceback.print_exc()
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=int, default=100, help="heights and restitutions each (grid N x N)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (every method once a round)")
    parser.add_argument("--quick", action="store_true", help="a 16 x 16 grid, one round: a smoke test")
    parser.add_argument("--cudasim-check", action="store_true", help="only check the CUDA kernel (simulator)")
    parser.add_argument("--calls-only", action="store_true",
                        help="only the compiled calls and the numba peers, no rollsweep processes (a GPU lease)")
    parser.add_argument("--solver", choices=("lanes", "vmapped", "fused"), default=None,
                        help="the compiled calls' solver (default: the plan's; fused on CPU runs the kernel backend "
                             "ROLLSWEEP_KERNEL_BACKEND names: host, the generated C, or Pallas in interpret mode)")
    parser.add_argument("--marginal", type=int, default=None, metavar="N",
                        help="also `rollsweep run` (rest time from sol.t, the sweep's max_segments) and numba on an "
                             "N x N grid in the same rounds: each one's rate between the two sizes (start-up cancels)")
    args = parser.parse_args()
    if args.cudasim_check:
        raise SystemExit(cudasim_check())
    if args.quick:
        args.grid, args.rounds = 16, 1
    heights, restitutions = grid(args.grid, args.grid)
    exact = ball.closed_form(heights, restitutions)

    failed, skipped, room = {}, [], {}
    methods, reference = in_process_methods(heights, restitutions, skipped, failed, room,
                                            with_one_thread=not args.calls_only, solver=args.solver)
    with tempfile.TemporaryDirectory(prefix="rollsweep_bounces_") as tmp:
        folder = pathlib.Path(tmp)
        registration = write_registration(folder / "site")
        cubes = {}  # a process's label -> its sweep file (the cube read at the end)
        sys.path.append(str(registration))  # the studies found by their entry points, as the processes find them
        for study in () if args.calls_only else STUDIES.values():
            for segments in SEGMENTS:
                label = (f"engine: rollsweep run, default path, rest time from {READS[study.name]}, "
                         f"max_segments {segments}{THE_SWEEPS[segments]}")
                cubes[label] = sweep_file(folder, args.grid, args.grid, segments, study.name)
                methods[label] = process_method(cubes[label], registration)
                room.setdefault(("rollsweep run", study.name), {})[segments] = label
        if not args.calls_only:
            methods[f"engine: engine.run in this process (warm), rest time from sol.t, max_segments {MAX_SEGMENTS}"] = (
                in_process_method(lambda out: sweep_toml(args.grid, args.grid, MAX_SEGMENTS, out)))
        # The larger grid's runs (--marginal): timed in the same rounds, reported as rates between the sizes.
        larger = {}
        small_run = (f"engine: rollsweep run, default path, rest time from sol.t, max_segments {MAX_SEGMENTS}"
                     f"{THE_SWEEPS[MAX_SEGMENTS]}")
        if args.marginal and small_run in methods:
            big_heights, big_restitutions = grid(args.marginal, args.marginal)
            larger[small_run] = process_method(sweep_file(folder, args.marginal, args.marginal, MAX_SEGMENTS),
                                               registration)
            peer = numba_sweep()
            if peer is not None:
                larger[reference] = timed(lambda: peer(big_heights, big_restitutions))
        larger_times = {label: [] for label in larger}
        times = {label: [] for label in methods}  # each round's seconds
        cpu = {label: [] for label in methods}  # each round's CPU seconds
        solved = {label: [] for label in cubes}  # each round's 'solved in' seconds
        values = {}
        # Untimed first calls: compilation (numba's, JAX's; the processes' compile cache filled).
        for label, method in methods.items():
            values[label] = (attempt(label, method, failed) or (None,))[0]
        for label, method in larger.items():  # untimed, as above
            attempt(label, method, failed)
        for _ in range(args.rounds):
            for label, method in methods.items():
                out = None if label in failed else attempt(label, method, failed)
                if out is not None:
                    found, seconds, solved_in, cpu_seconds = out
                    values[label] = found if found is not None else values[label]
                    times[label].append(seconds)
                    cpu[label].append(cpu_seconds)
                    if label in solved:
                        solved[label].append(solved_in)
            for label, method in larger.items():
                out = None if label in failed else attempt(label, method, failed)
                larger_times[label].append(out[1] if out is not None else math.nan)
        for label, sweep in cubes.items():
            if label not in failed:
                values[label] = (*cube_values(sweep), None)

    if reference in failed or reference not in times:  # no peer to compare with: the engine's first row
        reference = next((label for label in times if label not in failed), reference)
    n = heights.size
    rows = table_rows(n, exact, times, cpu, solved, values, failed, reference)
    exact_impacts = exact[1]
    title = (f"bouncing ball (outside study), {args.grid} x {args.grid} = {n:,} points (heights {HEIGHTS[0]}-"
             f"{HEIGHTS[1]} m, restitutions {RESTITUTIONS[0]}-{RESTITUTIONS[1]}, min_speed {ball.MIN_SPEED} m/s: "
             f"{exact_impacts.mean():.1f} impacts a point, {int(exact_impacts.max())} at most), rtol {RTOL}, "
             f"atol {ATOL}, float64; best of {args.rounds} alternating rounds; {machine()}")
    print_table(title, rows, reference, ERROR_HEADERS)
    for label, why in skipped:
        print(f"skipped: {label} ({why})")
        record_row(label, note=f"skipped: {why}", title=title)
    for (what, study), labels in room.items():
        for table, figure in ((times, ""), (solved, ", its 'solved in' figure")):
            low, high = labels.get(128), labels.get(1024)
            if low in table and high in table and table[low] and table[high]:
                ratio = np.nanmedian(np.divide(table[low], table[high]))
                print(f"{what}{figure}, rest time from {READS[study]}: points/s at max_segments 1024 against 128, "
                      f"median of the rounds: {ratio:.2f}x")
    if larger_times:
        print_marginal(args.grid, args.marginal, times, larger_times, reference)
    margin = ball.closed_form_margin(heights, restitutions)
    print(f"closed form: every impact speed at least {margin:.1e} (relative) from min_speed, so a solver's "
          "impact count differs from it only by an error that large")


def print_marginal(small: int, large: int, times: dict, larger_times: dict, reference: str) -> None:
    """Each method's rate between the small and the large grid, (large^2 - small^2)
    points over the difference of its best times: what a point costs it once its
    process has started (the issue's measure of `rollsweep run`); and the median of
    the rounds' ratios of the engine's to numba's, each from that round's times."""
    extra = large * large - small * small
    rates, per_round = {}, {}
    for label, big in larger_times.items():
        rates[label] = extra / (np.nanmin(big) - np.nanmin(times[label]))
        per_round[label] = np.subtract(big, times[label][:len(big)])
    print(f"rate between {small} x {small} and {large} x {large} grids ({extra:,} points more; best times):")
    for label, rate in rates.items():
        print(f"  {label}: {rate:,.0f} points/s")
    run = next((label for label in rates if label != reference), None)
    if run is not None and reference in per_round:
        ratio = np.nanmedian(np.divide(per_round[reference], per_round[run]))
        print(f"  engine / numba, median of the rounds' ratios: {ratio:.2f}x")
        record_row(f"{run}, rate between {small} x {small} and {large} x {large}", rate=rates[run],
                   note=f"numba: {rates.get(reference, math.nan):,.0f} points/s; ratio {ratio:.2f}x")


def table_rows(n, exact, times, cpu, solved, values, failed, reference) -> list:
    """(method, points/s of its best round, the median of the rounds' ratios to
    the reference, CPU microseconds a point (its least), errors, steps a point)
    of each method, in order."""
    def per_round(seconds) -> str:
        if not times.get(reference) or not seconds:
            return "-"
        return f"{np.nanmedian(np.divide(times[reference], seconds)):.3g}"

    def failed_row(label):
        err = failed[label]
        return (f"{label} [FAILED: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}]", math.nan)

    rows = []
    for label in times:
        if label in failed:
            rows.append(failed_row(label))
            continue
        rest, impacts, steps = values[label]
        errors = accuracy(rest, impacts, *exact)
        steps = "-" if steps is None else f"{float(np.mean(steps)):.1f}"
        rows.append((label, n / np.nanmin(times[label]), per_round(times[label]), f"{1e6 * min(cpu[label]) / n:.2f}",
                     *errors, steps))
        if label in solved:
            rows.append((SOLVED_IN, n / np.nanmin(solved[label]), per_round(solved[label]), "-", *errors, steps))
    return rows + [failed_row(label) for label in failed if label not in times]


def cudasim_check(points: int = 8) -> int:
    """The CUDA kernel on a few points against the closed form (NUMBA_ENABLE_CUDASIM=1
    without a GPU): exit status 0 when every count is equal and every time within 1e-11."""
    sweep = cuda_sweep()
    if sweep is None:
        print("no CUDA device and no simulator: set NUMBA_ENABLE_CUDASIM=1")
        return 2
    heights, restitutions = np.linspace(0.1, 10.0, points), np.linspace(0.05, 0.9, points)
    rest, impacts, _ = sweep(heights, restitutions)
    exact_rest, exact_impacts = ball.closed_form(heights, restitutions)
    worst, signs, counts = accuracy(rest, impacts, exact_rest, exact_impacts)
    print(f"numba CUDA kernel, {points} points: max relative error {worst:.1e}, late/early {signs}, impacts {counts}")
    return 0 if worst < 1e-11 and counts == "all equal" else 1


if __name__ == "__main__":
    main()

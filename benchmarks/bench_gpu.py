"""Rolling-ball sweep on a GPU: every engine solver against the usual baselines, one run.

The sweep of bench_pingpong.py (spin ratio 0.2..3.0, rtol 1e-10, atol 1e-12,
float64, slide then roll to rest), at 1e4..1e7 points. Rows: each engine
solver (its compiled calls, on JAX's default device); plain
jax.jit(jax.vmap(diffrax)) with events (bench_pingpong's); numba on all CPU
threads (bench_pingpong's hand-written Dormand-Prince); and that same
Dormand-Prince compiled for the GPU with numba's CUDA target, one thread a
point. Prints points/s, the ratio to the engine's default solver, and the
largest final-displacement error against the closed form (on up to
--check-points evenly spaced points; the closed form is scalar Python).

On a machine without a GPU the CPU rows run (the engine's solvers on CPU, the
fused one in interpret mode) and the GPU rows are reported as skipped. A
method whose calls at a size (a warm-up, two timed) are predicted from its rate
at an earlier size to take longer than --budget seconds is skipped at that
size; a method that raises is printed as a failed row and the others go on.
ROLLSWEEP_BENCH_ROWS=FILE also appends each row, as it is measured, to FILE
(benchmarks/gpu_lease.sh). Run: python benchmarks/bench_gpu.py [--sizes 10000 100000 ...].
NUMBA_ENABLE_CUDASIM=1 python benchmarks/bench_gpu.py --cudasim-check checks
the CUDA kernel's results on a few points in numba's CUDA simulator (no GPU).
"""

import argparse
import math
import sys
import traceback

import numpy as np
from _common import (
    add_tests_to_path,
    best_of,
    cuda_device_source,
    machine,
    numba,
    numba_cuda_namespace,
    pad_to_batch,
    print_table,
    record_row,
)

add_tests_to_path()
import bench_pingpong as pingpong  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

DEFAULT_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
# The plain diffrax baseline runs in calls of at most this many points (its
# loop state for millions of points at once would not fit a GPU's memory).
DIFFRAX_CHUNK = 2**20
# Threads of a CUDA block of the numba kernel.
CUDA_THREADS = 128


# ------------------------------------------- numba's CUDA target, one thread a point
def cuda_source() -> str:
    """bench_pingpong's numba Dormand-Prince, compiled for the GPU: the same
    source, its functions made CUDA device functions, and a kernel in place of
    its parallel CPU loop (so both baselines do the same arithmetic)."""
    replacements = [
        ("import numpy as np\nfrom numba import njit, prange\n", "import math\nfrom numba import cuda\n"),
        ('@njit(inline="always")', "@cuda.jit(device=True)"),
        ("@njit(cache=True)\ndef final_x", "@cuda.jit(device=True)\ndef final_x"),
        ("np.sqrt(", "math.sqrt("),
        ("np.sign(", "_sign("),
    ]
    return cuda_device_source(pingpong.NUMBA_SOURCE, replacements, "bench_pingpong's numba source") + '''
@cuda.jit(device=True)
def _sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)


@cuda.jit
def sweep_kernel(qs, out, beta, mu, g, r, delta, rtol, atol):
    i = cuda.grid(1)
    if i < qs.size:
        out[i] = final_x(qs[i], beta, mu, g, r, delta, rtol, atol)
'''


def cuda_sweep():
    """The numba CUDA sweep as a function of the spin ratios (None: no CUDA device)."""
    namespace = numba_cuda_namespace(cuda_source(), "pingpong_numba_cuda")
    if namespace is None:
        return None
    from numba import cuda

    kernel = namespace["sweep_kernel"]

    def sweep(qs):
        qs_device = cuda.to_device(np.ascontiguousarray(qs, np.float64))
        out = cuda.device_array(qs.size, np.float64)
        blocks = -(-qs.size // CUDA_THREADS)
        kernel[blocks, CUDA_THREADS](qs_device, out, pingpong.BETA, pingpong.MU, pingpong.G, pingpong.R,
                                     pingpong.DELTA, pingpong.RTOL, pingpong.ATOL)
        return out.copy_to_host()

    return sweep


# ------------------------------------------------------------------ the rows
def engine_rows():
    """(name, function of the spin ratios) for each engine solver on this device."""
    from engine import SolverSettings
    from engine.solve import SOLVERS, detect, evaluate, make_plan
    from engine.solve.plan import default_solver
    from studies.pingpong import STUDY

    settings = SolverSettings(rtol=pingpong.RTOL, atol=pingpong.ATOL)
    device = detect()
    default = default_solver(STUDY, device)
    rows = []
    for name in sorted(SOLVERS, key=lambda s: s != default):
        if SOLVERS[name].unsupported(STUDY):
            continue

        def run(qs, name=name):
            plan = make_plan(STUDY, device, solver=name, points=qs.size)
            return evaluate(STUDY, settings, pingpong.columns(qs), plan=plan, outputs=["final_displacement"]).outputs[
                "final_displacement"]

        mode = " (interpret mode)" if name == "fused" and device.platform != "gpu" else ""
        label = f"engine: {name}{mode} on {device.platform}" + (" (default)" if name == default else "")
        rows.append((label, run))
    return rows


def diffrax_sweep(qs):
    """bench_pingpong's plain jax.jit(jax.vmap(diffrax)) with events, in calls of
    at most DIFFRAX_CHUNK points (one compiled shape: the last call padded)."""
    chunk = min(DIFFRAX_CHUNK, qs.size)
    padded, n = pad_to_batch({"q": qs}, chunk)
    solve = _plain_diffrax()
    parts = [np.asarray(solve(jnp.asarray(padded["q"][i:i + chunk]))) for i in range(0, padded["q"].size, chunk)]
    return np.concatenate(parts)[:n]


_PLAIN = []


def _plain_diffrax():
    if not _PLAIN:
        _PLAIN.append(jax.jit(jax.vmap(pingpong.diffrax_final)))
    return _PLAIN[0]


def checked(qs, check_points):
    """(indices, closed form there) of up to check_points evenly spaced points: once
    per size, shared by every method (the closed form is scalar Python, ~0.3 ms a point)."""
    index = np.unique(np.linspace(0, qs.size - 1, min(qs.size, check_points)).astype(int))
    return index, np.array([cf.final_displacement(pingpong.P, spin_ratio=q) for q in qs[index]])


def max_error(values, qs, check_points, reference=None):
    """Largest |x - closed form| over up to check_points evenly spaced points
    (reference: checked(qs, check_points), when already computed)."""
    index, exact = reference or checked(qs, check_points)
    return float(np.max(np.abs(np.asarray(values)[index] - exact)))


def cudasim_check(points: int = 8) -> float:
    """The CUDA kernel's results on a few points against the closed form (run with
    NUMBA_ENABLE_CUDASIM=1 on a machine without a GPU)."""
    sweep = cuda_sweep()
    if sweep is None:
        raise SystemExit("no CUDA device and no simulator: set NUMBA_ENABLE_CUDASIM=1")
    qs = np.linspace(0.2, 3.0, points)
    error = max_error(sweep(qs), qs, points)
    print(f"numba CUDA kernel, {points} points: max |x - closed form| = {error:.1e}")
    return error


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help=f"points of each sweep (default {DEFAULT_SIZES} on a GPU, the first two on CPU)")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds: a method whose three calls (warm-up, two timed) at a size are predicted "
                             "to take longer is skipped there")
    parser.add_argument("--check-points", type=int, default=2000,
                        help="points whose error against the closed form is measured")
    parser.add_argument("--cudasim-check", action="store_true", help="only check the CUDA kernel (simulator)")
    args = parser.parse_args()
    if args.cudasim_check:
        raise SystemExit(0 if cudasim_check() < 1e-9 else 1)

    gpu = jax.devices()[0].platform == "gpu"
    sizes = args.sizes or (DEFAULT_SIZES if gpu else DEFAULT_SIZES[:2])
    numba_cpu = pingpong.numba_sweep()
    try:
        numba_cuda = cuda_sweep()
    except Exception as err:  # a broken peer is a failed row, never the end of the run
        numba_cuda = _failing(err)
    # The engine's default solver, the baselines, then the engine's other solvers: a run cut
    # off at its largest size loses the rows that matter least (lanes on a GPU are slow).
    default, *others = engine_rows()
    methods = [default, (f"plain jax.jit(jax.vmap(diffrax)) with events on {jax.devices()[0].platform}",
                         diffrax_sweep)]
    if numba_cuda is not None:
        methods.append(("numba CUDA Dormand-Prince, one thread a point", numba_cuda))
    if numba_cpu is not None:
        methods.append((f"numba Dormand-Prince, {numba.get_num_threads()} CPU threads", numba_cpu))
    methods += others
    skipped = []
    if not gpu:
        skipped.append("the engine's and diffrax's GPU rows (JAX sees no GPU; their rows above ran on CPU)")
    if numba_cuda is None:
        skipped.append("numba CUDA kernel (" + ("numba not installed" if numba is None else "no GPU") + ")")
    if numba_cpu is None:
        skipped.append("numba on CPU (numba not installed)")

    header = ("max |x - closed form|",)
    rates = {}  # method -> points/s at the last size it ran: predicts its time at the next sizes
    failed = {}  # method -> the size at which it raised: not tried again
    for n in sizes:
        qs = np.linspace(0.2, 3.0, n)
        reference = checked(qs, args.check_points)
        rows = []
        for label, fn in methods:
            predicted = 3 * n / rates[label] if label in rates else 0.0
            if label in failed:
                row = (f"{label} [skipped: failed at {failed[label]:,} points]", math.nan, None)
            elif predicted > args.budget:
                row = (f"{label} [skipped: ~{predicted:.0f} s predicted, budget {args.budget:.0f} s]", math.nan, None)
            else:
                try:  # warm-up (compilation) on the same size, then the best of two timed calls
                    values, seconds = best_of(lambda fn=fn, qs=qs: np.asarray(jax.block_until_ready(fn(qs))),
                                              repeat=2)
                    rates[label] = n / seconds
                    row = (label, n / seconds, max_error(values, qs, args.check_points, reference))
                except Exception as err:  # one failing method must not cost the others
                    failed[label] = n
                    first_line = (str(err).splitlines() or [""])[0][:160]
                    row = (f"{label} [FAILED: {type(err).__name__}: {first_line}]", math.nan, None)
                    print(f"{label} raised at {n:,} points:", file=sys.stderr)
                    traceback.print_exc()
            rows.append(row)
            # Recorded at once, so that a run cut off by a timeout keeps what it measured.
            record_row(row[0], row[1], points=n, ratio=row[1] / rows[0][1], errors=row[2:], headers=header)
        print_table(
            f"rolling-ball sweep, {n:,} points, rtol {pingpong.RTOL}, atol {pingpong.ATOL}, float64; "
            f"errors on {min(n, args.check_points):,} points; {machine()}",
            rows, rows[0][0], header, record=False,
        )
    for line in skipped:
        print(f"skipped: {line}")
    if numba_cuda is None:
        record_row("numba CUDA Dormand-Prince, one thread a point",
                   note="skipped: " + ("numba not installed" if numba is None else "no GPU"))


def _failing(err):
    """A method that raises err when called (its row then says FAILED)."""
    def fail(qs):
        raise err
    return fail


if __name__ == "__main__":
    main()

"""The fused solver's kernel backends on the rolling-ball sweep: generated CUDA against Pallas.

The sweep of bench_gpu.py (spin ratio 0.2..3.0, rtol 1e-10, atol 1e-12,
float64), solved by the fused solver with each kernel backend
(ROLLSWEEP_KERNEL_BACKEND, engine.solve.kernel): `cuda` (the study's kernel
body generated as C, NVRTC, one thread a point) and `pallas` (Pallas on
Triton, a block of lanes in lockstep). Compiled calls (a warm-up call
first), best of 2; points/s and the largest final-displacement error
against the closed form. A backend that fails prints a failed row.

Without a GPU the `host` backend (the same generated C, compiled for the
CPU) stands in for `cuda`, and Pallas runs in interpret mode: a smoke test,
not a measurement (e.g. --sizes 1000).

One process runs both backends: the backend is read when a plan's batch
function is built, so between backends the evaluated-function cache is
cleared (the exported-program store names the backend in its key).
Run: python benchmarks/bench_kernel.py --sizes 100000 1000000 10000000
"""

import argparse
import math
import os
import time
import traceback

import numpy as np
from _common import add_tests_to_path, best_of, machine

add_tests_to_path()
import bench_pingpong as pingpong  # noqa: E402
import jax  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

ENV = "ROLLSWEEP_KERNEL_BACKEND"
PINNED = "ROLLSWEEP_PINNED_RESULTS"  # engine.solve.staging's switches
STAGED = {"ROLLSWEEP_PINNED_INPUTS": "1", "ROLLSWEEP_PACKED_RESULTS": "1"}


def max_error(values, qs, check_points):
    """Largest |x - closed form| over up to check_points evenly spaced points."""
    index = np.unique(np.linspace(0, qs.size - 1, min(qs.size, check_points)).astype(int))
    exact = np.array([cf.final_displacement(pingpong.P, spin_ratio=q) for q in qs[index]])
    return float(np.max(np.abs(np.asarray(values)[index] - exact)))


def _evaluate_module():
    """engine.solve.evaluate the module (the package's `evaluate` is the function)."""
    import sys

    import engine.solve  # noqa: F401

    return sys.modules["engine.solve.evaluate"]


def sweep_with(backend: str):
    """(description of the backend the fused solver uses, function of the spin ratios)."""
    from engine import SolverSettings
    from engine.solve import detect, evaluate, make_plan
    from engine.solve.kernel.backends import kernel_backend
    from studies.pingpong import STUDY

    settings = SolverSettings(rtol=pingpong.RTOL, atol=pingpong.ATOL)
    device = detect()
    os.environ[ENV] = backend
    choice = kernel_backend(STUDY, device.platform, settings, ["final_displacement"])

    def run(qs):
        os.environ[ENV] = backend
        plan = make_plan(STUDY, device, solver="fused", points=qs.size)
        return evaluate(STUDY, settings, pingpong.columns(qs), plan=plan, outputs=["final_displacement"]).outputs[
            "final_displacement"]

    def on_device(qs):
        """The same compiled batch function called on inputs already on the device,
        its outputs left there: the device's work alone, without evaluate's
        copies in and out (n a whole number of batches)."""
        os.environ[ENV] = backend
        plan = make_plan(STUDY, device, solver="fused", points=qs.size)
        fn = _evaluate_module().compiled(STUDY, settings, ("final_displacement",), plan)
        calls = []
        for start in range(0, qs.size, plan.batch):
            part = np.resize(qs[start:start + plan.batch], plan.batch)
            args = {k: jax.numpy.full((plan.batch,), np.float64(v)) for k, v in pingpong.P.items()}
            calls.append(args | {"spin_ratio": jax.device_put(part)})
        jax.block_until_ready(calls)

        def solve():
            return jax.block_until_ready([fn(args, np.int32(plan.batch))[0]["final_displacement"] for args in calls])

        return solve

    _evaluate_module().compiled.cache_clear()  # batch functions built for another backend
    run.on_device = on_device
    return f"{choice.name} ({choice.why})", choice.name, run


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 1e7], help="points of each sweep")
    parser.add_argument("--backends", nargs="+", default=None,
                        help="kernel backends (default: cuda pallas on a GPU, host pallas on CPU)")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds: a backend slower than this is not run at larger sizes")
    parser.add_argument("--check-points", type=int, default=2000,
                        help="points whose error against the closed form is measured")
    args = parser.parse_args()
    gpu = jax.devices()[0].platform == "gpu"
    backends = args.backends or (["cuda", "pallas"] if gpu else ["host", "pallas"])
    print(f"# {machine()}; JAX {jax.__version__} on {jax.devices()[0]}")
    if not gpu:
        print("# no GPU: the host backend (the generated C compiled for the CPU) stands in for cuda; "
              "Pallas runs in interpret mode. A smoke test, not a measurement.")
    over_budget = set()
    prepared = {}
    for size in args.sizes:
        n = int(size)
        qs = np.linspace(0.2, 3.0, n)
        print(f"\nrolling-ball sweep, {n:,} points, rtol {pingpong.RTOL}, atol {pingpong.ATOL}, float64")
        print(f"{'backend':<10} {'points/s':>14} {'seconds':>10} {'max |x - closed form|':>22}  chosen")
        for backend in backends:
            if backend in over_budget:
                print(f"{backend:<10} {'skipped':>14}  (over {args.budget:.0f} s at a smaller size)")
                continue
            try:
                if backend not in prepared:
                    prepared[backend] = sweep_with(backend)
                why, name, run = prepared[backend]
                os.environ[ENV] = backend
                _evaluate_module().compiled.cache_clear()
                start = time.perf_counter()
                values, seconds = best_of(lambda run=run, qs=qs: np.asarray(jax.block_until_ready(run(qs))),
                                          repeat=2)
                if time.perf_counter() - start > args.budget:
                    over_budget.add(backend)
                error = max_error(values, qs, args.check_points)
                flag = "" if name == backend else "  [NOT the requested backend]"
                print(f"{backend:<10} {n / seconds:>14,.0f} {seconds:>10.4f} {error:>22.2e}  {why}{flag}",
                      flush=True)
                _, seconds = best_of(run.on_device(qs), repeat=2)
                print(f"{backend + '*':<10} {n / seconds:>14,.0f} {seconds:>10.4f} {'':>22}  the same compiled "
                      "calls on inputs already on the device, outputs left there (no copies in or out)", flush=True)
                if gpu:  # the same calls with their copies made other ways (engine.solve.staging; each
                    # a program of its own: where inputs come from and results go is in its cache's key)
                    for suffix, switches, what in (
                            ("_device", {PINNED: "0"}, f"{PINNED}=0: the calls' results left in device memory, "
                                                       "copied out after each call"),
                            ("_staged", STAGED, " ".join(f"{k}={v}" for k, v in STAGED.items()) +
                             ": the varying columns put in pinned host memory and moved in by the call, its "
                             "results moved out as one buffer")):
                        before = {name: os.environ.get(name) for name in switches}
                        os.environ.update(switches)
                        try:
                            variant, seconds = best_of(
                                lambda run=run, qs=qs: np.asarray(jax.block_until_ready(run(qs))), repeat=2)
                        finally:  # the switches as they were (the rows above and below: the default way)
                            for name, value in before.items():
                                if value is None:
                                    os.environ.pop(name, None)
                                else:
                                    os.environ[name] = value
                        error = max_error(variant, qs, args.check_points)
                        same = "the default's bits" if variant.tobytes() == values.tobytes() else \
                            "NOT the default's bits"
                        print(f"{backend + suffix:<10} {n / seconds:>14,.0f} {seconds:>10.4f} {error:>22.2e}  {what} "
                              f"({same})", flush=True)
            except Exception as error:  # noqa: BLE001 - a failed backend is a row, never the end of the run
                print(f"{backend:<10} {'FAILED':>14} {math.nan:>10} {math.nan:>22}  "
                      f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", flush=True)
                traceback.print_exc(limit=3)
    os.environ.pop(ENV, None)


if __name__ == "__main__":
    main()

"""A fresh process's fixed cost on the fused (or any) solver's path: planning,
then the first call and two more of the rolling ball (spin ratio 0.2..3.0,
rtol 1e-10, atol 1e-12, float64), each timed. The first call's excess over the
others is what the process pays once (tracing, generating the kernel's C,
loading compiled code); run it twice, the second finds the caches the first
filled. On CPU `--backend host` takes the fused solver's generated C (what a
GPU's `cuda` backend compiles); on a GPU leave the engine's choice.

Run: python benchmarks/first_call.py [--solver fused] [--backend host] [--points 200000]
"""

import argparse
import os
import time

START = time.perf_counter()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--solver", default="fused", help="the batch solver (default: fused)")
    parser.add_argument("--backend", help="ROLLSWEEP_KERNEL_BACKEND for the fused solver (cuda, host, pallas)")
    parser.add_argument("--points", type=int, default=200_000)
    args = parser.parse_args()
    if args.backend:
        os.environ["ROLLSWEEP_KERNEL_BACKEND"] = args.backend

    import numpy as np
    from _common import add_tests_to_path

    add_tests_to_path()
    import bench_pingpong as pingpong

    from engine import SolverSettings
    from engine.solve import detect, evaluate, make_plan
    from studies.pingpong import STUDY

    print(f"imports {time.perf_counter() - START:.2f} s")
    settings = SolverSettings(rtol=pingpong.RTOL, atol=pingpong.ATOL)
    qs = np.linspace(0.2, 3.0, args.points)
    columns = pingpong.columns(qs)
    start = time.perf_counter()
    plan = make_plan(STUDY, detect(), solver=args.solver, points=args.points)
    print(f"plan {time.perf_counter() - start:.2f} s ({plan.solver.name}, batch {plan.batch:,}, width {plan.width:,})")
    for call in range(3):
        start = time.perf_counter()
        evaluate(STUDY, settings, columns, plan=plan, outputs=["final_displacement"])
        print(f"call {call} {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()

"""Lockstep loop iterations of a vmapped call: the engine's vmapped solver
against plain `jax.jit(jax.vmap(diffrax.diffeqsolve))` with events, on the
rolling-ball sweep of bench_pingpong.

Under vmap, a `while_loop` runs until its slowest lane is done and every lane
pays each iteration, so the iterations of all the loops of one call (the
segment loop, diffrax's step loop, the event-locating loops) are what a wide
batch on a GPU costs. They are counted by a callback in every loop's body
(one call per lockstep iteration, whatever the batch width), in a separately
traced program; points/s are timed on the uninstrumented ones, in turns
(medians). Run: python benchmarks/lockstep.py [--points 256]
"""

import argparse
import time

import numpy as np
from _common import add_tests_to_path

add_tests_to_path()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from bench_pingpong import ATOL, RTOL, diffrax_final  # noqa: E402
from lockstep_count import lockstep_iterations  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402


def rates(methods, points, rounds=7) -> list[float]:
    """Points/s of each (make, args), timed in turns (a shared machine's load
    drifts over seconds): the median of `rounds` calls each, after a warm-up."""
    fns = [(jax.jit(make()), args) for make, args in methods]
    for fn, args in fns:
        jax.block_until_ready(fn(*args))
    times = [[] for _ in fns]
    for _ in range(rounds):
        for (fn, args), taken in zip(fns, times, strict=True):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            taken.append(time.perf_counter() - start)
    return [points / np.median(taken) for taken in times]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=256, help="points of one call (the CPU batch: 256)")
    args = parser.parse_args()
    from engine import SolverSettings
    from engine.solve import make_plan
    from engine.solve.plan import solver_of
    from studies.pingpong import STUDY

    qs = np.linspace(0.2, 3.0, args.points)
    exact = np.array([cf.final_displacement(cf.DEFAULTS, spin_ratio=q) for q in qs])
    settings = SolverSettings(rtol=RTOL, atol=ATOL)
    plan = make_plan(STUDY, solver="vmapped", batch=args.points)
    params = {p.name: jnp.full(plan.batch, cf.DEFAULTS.get(p.name, p.default)) for p in STUDY.parameters}
    params["spin_ratio"] = jnp.asarray(np.resize(qs, plan.batch))
    count = np.int32(args.points)

    def engine():
        return solver_of(plan).batch_function(STUDY, settings, ("final_displacement",), plan)

    def plain():
        return jax.vmap(diffrax_final)

    engine_x = np.asarray(jax.jit(engine())(params, count)[0]["final_displacement"])[: args.points]
    plain_x = np.asarray(jax.jit(plain())(params["spin_ratio"]))[: args.points]
    print(f"rolling ball, {args.points} points per call, rtol {RTOL}, atol {ATOL}, float64, {jax.devices()[0]}")
    methods = (("engine, vmapped solver", engine, (params, count), engine_x),
               ("plain jax.jit(jax.vmap(diffrax))", plain, (params["spin_ratio"],), plain_x))
    speeds = rates([(make, call_args) for _, make, call_args, _ in methods], args.points)
    print(f"{'method':<40} {'iterations':>10} {'points/s':>10} {'max |x - closed form|':>22}")
    for (name, make, call_args, x), speed in zip(methods, speeds, strict=True):
        count = lockstep_iterations(make(), *call_args)
        print(f"{name:<40} {count:>10} {speed:>10,.0f} {np.max(np.abs(x - exact)):>22.2e}", flush=True)

if __name__ == "__main__":
    main()

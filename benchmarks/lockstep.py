"""Lockstep loop iterations of a vmapped call: the engine's vmapped solver
against plain `jax.jit(jax.vmap(diffrax.diffeqsolve))` with events, on the
rolling-ball sweep of bench_pingpong.

Under vmap, a `while_loop` runs until its slowest lane is done and every lane
pays each iteration, so the iterations of all the loops of one call (the
segment loop, diffrax's step loop and its stage loop, the event-locating
loops) are what a wide batch on a GPU costs. They are counted by a callback in
every loop's body (one call per lockstep iteration, whatever the batch width),
in a separately traced program, and listed by the code that runs each loop;
points/s are timed on the uninstrumented ones, in turns (medians).
Run: python benchmarks/lockstep.py [--points 256]
"""

import argparse
import time
from typing import NamedTuple

import numpy as np
from _common import add_tests_to_path

add_tests_to_path()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from bench_pingpong import ATOL, RTOL, diffrax_final  # noqa: E402
from lockstep_count import lockstep_iterations_by_loop  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

POINTS = 256  # points of one call (the vmapped solver's CPU batch)


class Call(NamedTuple):
    name: str
    make: object  # () -> the batch function (a new one each call: each is traced anew)
    args: tuple


def rolling_ball(points: int = POINTS) -> tuple[list[Call], np.ndarray]:
    """The engine's vmapped batch function and plain jit(vmap(diffrax)) on
    `points` spin ratios in [0.2, 3.0] (rtol 1e-10, atol 1e-12, float64), and
    the closed form's final displacements there."""
    from engine import SolverSettings
    from engine.solve import make_plan
    from studies.pingpong import STUDY

    qs = np.linspace(0.2, 3.0, points)
    exact = np.array([cf.final_displacement(cf.DEFAULTS, spin_ratio=q) for q in qs])
    settings = SolverSettings(rtol=RTOL, atol=ATOL)
    plan = make_plan(STUDY, solver="vmapped", batch=points)
    params = {p.name: jnp.full(plan.batch, cf.DEFAULTS.get(p.name, p.default)) for p in STUDY.parameters}
    params["spin_ratio"] = jnp.asarray(np.resize(qs, plan.batch))

    def engine():
        run = plan.solver.batch_function(STUDY, settings, ("final_displacement",), plan)
        return lambda params, count: run(params, count)[0]["final_displacement"]

    def plain():
        return jax.vmap(diffrax_final)

    return [Call("engine, vmapped solver", engine, (params, np.int32(points))),
            Call("plain jax.jit(jax.vmap(diffrax))", plain, (params["spin_ratio"],))], exact


def rates(calls, points, rounds=7) -> list[float]:
    """Points/s of each call, timed in turns (a shared machine's load drifts
    over seconds): the median of `rounds` calls each, after a warm-up."""
    fns = [(jax.jit(call.make()), call.args) for call in calls]
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
    parser.add_argument("--points", type=int, default=POINTS, help=f"points of one call (the CPU batch: {POINTS})")
    args = parser.parse_args()
    calls, exact = rolling_ball(args.points)
    print(f"rolling ball, {args.points} points per call, rtol {RTOL}, atol {ATOL}, float64, {jax.devices()[0]}")
    speeds = rates(calls, args.points)
    print(f"{'method':<40} {'iterations':>10} {'points/s':>10} {'max |x - closed form|':>22}")
    for call, speed in zip(calls, speeds, strict=True):
        x = np.asarray(jax.jit(call.make())(*call.args))[: args.points]
        loops = lockstep_iterations_by_loop(call.make(), *call.args)
        print(f"{call.name:<40} {sum(loops.values()):>10} {speed:>10,.0f} {np.max(np.abs(x - exact)):>22.2e}")
        for site, count in loops.most_common():
            print(f"    {count:>6}  {site}", flush=True)


if __name__ == "__main__":
    main()

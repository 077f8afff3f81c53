"""Serve landing map: the engine's compiled calls against plain jax.jit(jax.vmap(diffrax)),
on this machine's default device (a GPU part of benchmarks/gpu_lease.sh).

A lean cut of bench_landing.py, whose model, grid (configs/rebound_landing.toml:
3 spins x 161 elevations x 161 speeds), tolerances, reference (scipy DOP853 at
rtol 1e-13 on a subsample) and error columns it reuses. bench_landing.py also
runs the engine end to end, scipy's loop, diffrax in chunks and a batch-size
curve: more compilations than a part of a short GPU lease has time for. Each
row is recorded as soon as it is measured, so a timeout keeps the rows before it.

Run: python benchmarks/gpu_landing.py [--quick]
"""

import argparse
import math
import sys
import time
import traceback

import bench_landing as landing
import jax.numpy as jnp
import numpy as np
from _common import best_of, in_study_order, machine, print_table, record_row, sweep_text

HEADERS = ("max |d landing| m", "max |d time| s", "outcome differs")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed-points", type=int, default=161)
    parser.add_argument("--elevation-points", type=int, default=161)
    parser.add_argument("--reference-points", type=int, default=300, help="subsample checked against DOP853")
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.speed_points, args.elevation_points, args.reference_points = 21, 21, 40
    axes = {"topspin": {"values": list(landing.TOPSPIN)},
            "elevation": {"linspace": [*landing.ELEVATION, args.elevation_points]},
            "launch_speed": {"linspace": [*landing.SPEED, args.speed_points]}}
    spin, elevation, speed = (g.ravel() for g in np.meshgrid(
        np.array(landing.TOPSPIN), np.linspace(*landing.ELEVATION, args.elevation_points),
        np.linspace(*landing.SPEED, args.speed_points), indexing="ij"))
    n = speed.size
    sub = np.unique(np.linspace(0, n - 1, min(args.reference_points, n)).astype(int))
    ref = np.array([landing.scipy_landing(speed[i], elevation[i], spin[i], "DOP853", 1e-13, 1e-15) for i in sub]).T
    rows = []

    def measure(name, solve):
        """solve() -> (4, n) outcome, landing x, landing y, flight time; timed as the best of
        two calls after a warm-up call (compilation). A method that raises is a failed row."""
        try:
            got, seconds = best_of(lambda: np.asarray(solve(), float), repeat=2)
            row = (name, n / seconds, *landing.errors(got[:, sub], ref))
        except Exception as err:  # one failing method must not cost the other
            traceback.print_exc()
            row = (f"{name} [FAILED: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}]", math.nan)
        rows.append(row)
        record_row(row[0], row[1], points=n, ratio=row[1] / rows[0][1], errors=row[2:], headers=HEADERS)

    from engine import SolverSettings, parse_sweep
    from engine.runner.cost import plan_for
    from engine.solve import evaluate
    from studies.rebound import LANDING

    # The engine's plan for this sweep as `rollsweep run` makes it from configs/rebound_landing.toml.
    solver = {"rtol": landing.RTOL, "atol": landing.ATOL, "t_max": landing.T_MAX,
              "max_segments": landing.MAX_SEGMENTS}
    plan = plan_for(parse_sweep(sweep_text("rebound_landing", axes, outputs=landing.OUTPUTS, out="unused.zarr",
                                           solver=solver, run={"shard_size": landing.SHARD_SIZE})))
    columns = {k: np.full(n, v) for k, v in LANDING.defaults.items()} | {
        "topspin": spin, "elevation": elevation, "launch_speed": speed}
    settings = SolverSettings(rtol=landing.RTOL, atol=landing.ATOL, t_max=landing.T_MAX,
                              max_segments=landing.MAX_SEGMENTS)
    selected = in_study_order(LANDING, landing.OUTPUTS)

    def engine():
        outputs = evaluate(LANDING, settings, columns, outputs=selected, plan=plan).outputs
        return [outputs[k] for k in landing.OUTPUTS]

    measure(f"engine: compiled calls ({plan.solver.name} on {plan.device.platform}, batch {plan.batch:,})", engine)

    plain = landing.diffrax_landing()
    inputs = [jnp.asarray(a) for a in (speed, elevation, spin)]
    measure("plain jax.jit(jax.vmap(diffrax)), all points in one call", lambda: np.asarray(plain(*inputs)).T)

    print_table(f"serve landing map, {len(landing.TOPSPIN)} spins x {args.elevation_points} elevations x "
                f"{args.speed_points} speeds = {n:,} points, rtol {landing.RTOL}, atol {landing.ATOL}, float64; "
                f"{machine()}", rows, rows[0][0], HEADERS, record=False)
    print(f"errors: on {sub.size} points, against scipy solve_ivp DOP853 at rtol 1e-13, atol 1e-15.")
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    code = main()
    print(f"benchmark time: {time.perf_counter() - start:.0f} s")
    sys.exit(code)

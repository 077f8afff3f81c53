"""The default path: `rollsweep run` of sweeps written as a user writes them.

No `shard_size`, no `batch_size`: what a user gets without tuning. Each sweep
runs as a whole `rollsweep run` process at two sizes, and the rate is taken
between them, (n2 - n1) / (t2 - t1), so that the process's start-up (imports,
JAX, loading the compiled program) cancels. Beside each, in the same run, the
peer a user would otherwise write, timed on its compiled calls at the larger
size (best of --repeat):

- rolling ball (pingpong, spin ratio 0.2..3.0, rtol 1e-10, atol 1e-12):
  numba's Dormand-Prince on all threads (bench_pingpong's)
- bicycle speeds (v in 0..10 m/s), the eigenvalues only (what the peer
  computes): jax.jit(jax.vmap(eigvals)) (bench_bicycle's)
- rebound regime map (spin ratio x incidence angle): numba's bounce map on all
  threads (bench_rebound's), and the 1e7 points/s the engine aims at

Run: python benchmarks/default_paths.py [--quick] [--repeat 5]
"""

import argparse
import math
import pathlib
import tempfile

import numpy as np
from _common import add_tests_to_path, best_of, machine, numba, rollsweep_process, sweep_text

add_tests_to_path()
import bench_bicycle  # noqa: E402
import bench_pingpong  # noqa: E402
import bench_rebound  # noqa: E402


def rollsweep(*args) -> float:
    """Wall seconds of one `rollsweep ...` process (_common.rollsweep_process)."""
    return rollsweep_process(*args)[0]


def default_path_rate(study, axes_for, sizes, repeat, folder, solver=None, outputs=None) -> tuple[float, list[float]]:
    """Points/s of `rollsweep run` between the two sizes (best of `repeat`
    whole processes each), and the best seconds at each size.

    The sizes run in turns (small, large, small, large, ...): a slow spell of a
    shared machine then falls on both, where timing one size's runs after the
    other's put it on one side of the difference."""
    paths = []
    for n in sizes:
        path = pathlib.Path(folder) / f"{study}_{n}.toml"
        path.write_text(sweep_text(study, axes_for(n), out=pathlib.Path(folder) / f"{study}_{n}.zarr", solver=solver,
                                   outputs=outputs))
        rollsweep("run", str(path), "--quiet", "--overwrite")  # untimed: fills the compile cache
        paths.append(path)
    times = [[] for _ in sizes]
    for _ in range(repeat):
        for path, taken in zip(paths, times, strict=True):
            taken.append(rollsweep("run", str(path), "--quiet", "--overwrite"))
    seconds = [min(taken) for taken in times]
    (n1, n2), (t1, t2) = sizes, seconds
    return (n2 - n1) / (t2 - t1) if t2 > t1 else math.nan, seconds


def rolling_ball_row(sizes, repeat, folder) -> tuple:
    """The rolling ball against numba on the same cores."""
    rate, seconds = default_path_rate(
        "pingpong", lambda n: {"spin_ratio": {"linspace": [0.2, 3.0, n]}}, sizes, repeat, folder,
        solver={"rtol": bench_pingpong.RTOL, "atol": bench_pingpong.ATOL})
    peer = bench_pingpong.numba_sweep()
    peer_rate = math.nan
    if peer is not None:
        qs = np.linspace(0.2, 3.0, sizes[1])
        _, best = best_of(lambda: peer(qs), repeat)
        peer_rate = sizes[1] / best
    return "rolling ball", sizes, seconds, rate, "numba DP5, all threads", peer_rate, None


def bicycle_row(sizes, repeat, folder) -> tuple:
    """Bicycle speeds against jit(vmap(eigvals)): the eigenvalues the peer computes
    (`outputs`; the characteristic speeds, a root search each, are not the peer's)."""
    rate, seconds = default_path_rate("bicycle", lambda n: {"v": {"linspace": [0.0, 10.0, n]}}, sizes, repeat,
                                      folder, outputs=bench_bicycle.OUTPUTS)
    matrices, g = bench_bicycle.benchmark_matrices()
    eigvals = bench_bicycle.jax_eigvals(matrices, g)
    v = np.linspace(0.0, 10.0, sizes[1])
    _, best = best_of(lambda: np.asarray(eigvals(v)), repeat)
    return "bicycle speeds", sizes, seconds, rate, "jit(vmap(eigvals))", sizes[1] / best, None


def rebound_row(scale, repeat, folder) -> tuple:
    """The rebound regime map (spin ratio x incidence angle) against numba and 1e7 points/s."""
    spins = 1000
    sizes = (spins * 1000 // scale, spins * 5000 // scale)
    rate, seconds = default_path_rate(
        "rebound_regime", lambda n: {"spin_ratio": {"linspace": [-1.0, 1.0, spins]},
                                     "incidence_angle": {"linspace": [0.0, 89.9, n // spins]}},
        sizes, repeat, folder)
    peer_rate = math.nan
    peer = bench_rebound.numba_sweep() if numba is not None else None
    if peer is not None:
        angle, spin = (m.ravel() for m in np.meshgrid(np.linspace(0.0, 89.9, sizes[1] // spins),
                                                    np.linspace(-1.0, 1.0, spins), indexing="ij"))
        speed, e, mu, r = (bench_rebound.SPEED, bench_rebound.RESTITUTION, bench_rebound.FRICTION,
                           bench_rebound.RADIUS)
        _, best = best_of(lambda: peer(speed, angle, spin, e, mu, r), repeat)
        peer_rate = sizes[1] / best
    return "rebound regime", sizes, seconds, rate, "numba bounce map, all threads", peer_rate, 1e7


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, one repeat: a smoke test")
    parser.add_argument("--repeat", type=int, default=5, help="whole processes a size, in turns (best of)")
    parser.add_argument("--rolling-ball-sizes", type=int, nargs=2, default=(100_000, 400_000), metavar=("N1", "N2"),
                        help="the rolling ball's two sizes (a wider span: a rate less at the mercy of start-up noise)")
    parser.add_argument("--bicycle-sizes", type=int, nargs=2, default=(20_000, 100_000), metavar=("N1", "N2"),
                        help="the bicycle speeds' two sizes (as above)")
    parser.add_argument("--only", choices=("rolling ball", "bicycle", "rebound"), help="this sweep alone")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    repeat = 1 if args.quick else args.repeat
    print(f"default path (no shard_size, no batch_size), {machine()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rollsweep_default_") as folder:
        if args.only in (None, "rolling ball"):
            rows.append(rolling_ball_row(tuple(n // scale for n in args.rolling_ball_sizes), repeat, folder))
        if args.only in (None, "bicycle"):
            rows.append(bicycle_row(tuple(n // scale for n in args.bicycle_sizes), repeat, folder))
        if args.only in (None, "rebound"):
            rows.append(rebound_row(scale, repeat, folder))
    _print(rows)


def _print(rows) -> None:
    print(f"\n{'sweep':<16} {'sizes':>19} {'seconds':>15} {'default pts/s':>14} {'peer':<30} {'peer pts/s':>12} "
          f"{'ratio':>6} {'target':>8}")
    for name, sizes, seconds, rate, peer, peer_rate, target in rows:
        size_text = f"{sizes[0]:,}->{sizes[1]:,}"
        second_text = f"{seconds[0]:.2f}->{seconds[1]:.2f}"
        ratio = rate / peer_rate if peer_rate and math.isfinite(peer_rate) else math.nan
        target_text = f"{target:.0e}" if target else ""
        print(f"{name:<16} {size_text:>19} {second_text:>15} {rate:>14,.0f} {peer:<30} {peer_rate:>12,.0f} "
              f"{ratio:>6.2f} {target_text:>8}")


if __name__ == "__main__":
    main()

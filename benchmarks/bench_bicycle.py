"""Whipple bicycle eigenvalues against speed: the engine against the ways a user might do it, one run.

The main sweep of the bicycle study (configs/bicycle_eigen_speed.toml): the
four eigenvalues of the benchmark bicycle of Meijaard, Papadopoulos, Ruina,
Schwab (2007) over forward speed v = 0..10 m/s, outputs eigenvalue_real and
eigenvalue_imag only. The study finds them as roots of the characteristic
quartic det(M s^2 + v C1 s + g K0 + v^2 K2) (closed form, polished) and labels
each mode (weave pair, capsize, caster) by the collisions of the eigenvalue
branches below |v| (the discriminant's sign changes), so its labels follow the
branches; the baselines return the eigenvalues of the state matrix
A(v) = [[0, I], [-M^-1 (g K0 + v^2 K2), -v M^-1 C1]] in LAPACK's order,
unlabelled.

Methods: the engine end to end (`rollsweep run`, inline executor, into a
temporary zarr store); the engine's compiled calls alone
(engine.solve.evaluate); a Python loop of numpy.linalg.eigvals per speed;
numpy's batched eigvals on an (n, 4, 4) stack; jax.jit(jax.vmap(eigvals))
(LAPACK: CPU only); numba (njit, parallel prange, np.linalg.eigvals per speed).
Then a (design, speed) grid: trail c x speed v, `rollsweep run` end to end and
the compiled calls alone (every point's design is its own: nothing per design
is shared between points). Shard sizes as the configs set them:
configs/bicycle_eigen_speed.toml for the speeds, configs/bicycle_trail_speed.toml
for the grid.

Errors: against Table 2 of the paper (v = 0 and 1..10 m/s, tests/bicycle_reference.py;
the speeds 0..10 lie on the default grid), comparing the four eigenvalues as
sets (the best matching); and over every speed, against numpy's batched
eigvals, also as sets. The engine's mode labels are checked separately.

Run: python benchmarks/bench_bicycle.py [--points N]
"""

import argparse
import itertools
import pathlib
import time
import tomllib

import numpy as np
from _common import (
    add_tests_to_path,
    best_of,
    engine_end_to_end,
    in_study_order,
    machine,
    numba,
    print_table,
    scaling_line,
    sweep_text,
)

from engine._jax_setup import configure

configure()  # float64 (and the compile cache) before jax builds any array
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

add_tests_to_path()
import bicycle_reference as ref  # noqa: E402

MODES = ("weave", "weave_conjugate", "capsize", "caster")  # the study's output order
OUTPUTS = ("eigenvalue_real", "eigenvalue_imag")
CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"


def config_shard_size(name):
    return tomllib.loads((CONFIGS / name).read_text())["run"]["shard_size"]


SHARD_SIZE = config_shard_size("bicycle_eigen_speed.toml")
GRID_SHARD_SIZE = config_shard_size("bicycle_trail_speed.toml")
PERMUTATIONS = np.array(list(itertools.permutations(range(4))))


def benchmark_matrices():
    """M, C1, K0, K2 of the benchmark bicycle (the study's canonical matrices) and g."""
    from studies.bicycle import BENCHMARK
    from studies.bicycle._canonical import canonical_matrices

    design = {k: jnp.asarray(v) for k, v in BENCHMARK.items()}
    return tuple(np.asarray(m) for m in canonical_matrices(design)), BENCHMARK["g"]


def state_matrices(v, matrices, g):
    """A(v) for every speed: an (n, 4, 4) stack, state (lean, steer, lean rate, steer rate)."""
    M, C1, K0, K2 = matrices
    Minv = np.linalg.inv(M)
    A = np.zeros((v.size, 4, 4))
    A[:, 0, 2] = A[:, 1, 3] = 1.0
    A[:, 2:, :2] = -Minv @ (g * K0) - v[:, None, None] ** 2 * (Minv @ K2)
    A[:, 2:, 2:] = -v[:, None, None] * (Minv @ C1)
    return A


def table2_sets():
    """Table 2 eigenvalues as (11, 4) complex: v = 0 (four real roots), then 1..10."""
    small, large = ref.V0_ROOTS
    rows = [[large, small, -small, -large]]
    for _, re, im, capsize, caster in ref.TABLE2:
        rows.append([re + 1j * im, re - 1j * im, capsize, caster])
    return np.concatenate([[0.0], ref.TABLE2[:, 0]]), np.array(rows, complex)


def set_error(a, b, chunk=50_000):
    """Largest |a - b| over points, with each point's four eigenvalues matched as sets."""
    worst = 0.0
    for i in range(0, len(a), chunk):
        d = np.abs(a[i:i + chunk, None, :] - b[i:i + chunk][:, PERMUTATIONS])  # (n, 24, 4)
        worst = max(worst, float(np.max(np.min(np.max(d, axis=2), axis=1))))
    return worst


# ------------------------------------------------------------------ baselines
def python_loop(v, matrices, g):
    M, C1, K0, K2 = matrices
    Minv = np.linalg.inv(M)
    out = np.empty((v.size, 4), complex)
    for i, speed in enumerate(v):
        A = np.block([[np.zeros((2, 2)), np.eye(2)], [-Minv @ (g * K0 + speed**2 * K2), -speed * Minv @ C1]])
        out[i] = np.linalg.eigvals(A)
    return out


def jax_eigvals(matrices, g):
    M, C1, K0, K2 = (jnp.asarray(m) for m in matrices)
    Minv = jnp.linalg.inv(M)

    def point(speed):
        A = jnp.block([[jnp.zeros((2, 2)), jnp.eye(2)], [-Minv @ (g * K0 + speed**2 * K2), -speed * Minv @ C1]])
        return jnp.linalg.eigvals(A)

    return jax.jit(jax.vmap(point))


def numba_eigvals(matrices, g):
    if numba is None:
        return None
    M, C1, K0, K2 = matrices
    Minv = np.linalg.inv(M)
    stiff0, stiff2, damp = -Minv @ (g * K0), -Minv @ K2, -Minv @ C1

    @numba.njit(parallel=True)
    def sweep(v, stiff0, stiff2, damp):
        out = np.empty((v.size, 4), np.complex128)
        for i in numba.prange(v.size):
            # numba's eigvals keeps the input's domain: complex eigenvalues need complex input.
            A = np.zeros((4, 4), np.complex128)
            A[0, 2] = A[1, 3] = 1.0
            A[2:, :2] = stiff0 + v[i] ** 2 * stiff2
            A[2:, 2:] = v[i] * damp
            out[i] = np.linalg.eigvals(A)
        return out

    return lambda v: sweep(v, stiff0, stiff2, damp)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_001,
                        help="speeds in 0..10 m/s (config: 10,001; rounded up to 10 k + 1 so 0, 1, ..., 10 are on it)")
    parser.add_argument("--grid", type=int, nargs=2, default=(100, 10_001), metavar=("TRAILS", "SPEEDS"),
                        help="the (design, speed) grid: trail values x speeds")
    parser.add_argument("--loop-points", type=int, default=20_001, help="speeds of the Python loop (a subsample)")
    parser.add_argument("--shard-size", type=int, default=SHARD_SIZE, help="shards of the speed sweep")
    parser.add_argument("--grid-shard-size", type=int, default=GRID_SHARD_SIZE,
                        help="shards of the (design, speed) grid")
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.points, args.loop_points, args.grid = 2_001, 2_001, (10, 201)
    points = 10 * -(-(args.points - 1) // 10) + 1
    v = np.linspace(0.0, 10.0, points)  # as the engine builds the axis
    table_speeds, table_sets = table2_sets()
    on_grid = np.array([np.argmin(np.abs(v - s)) for s in table_speeds])
    assert np.max(np.abs(v[on_grid] - table_speeds)) < 1e-12
    matrices, g = benchmark_matrices()
    exact = np.linalg.eigvals(state_matrices(v, matrices, g))
    rows = []

    def record(name, seconds, eig, idx=None):
        """eig: (n, 4) eigenvalues at v[idx] (idx None: every speed)."""
        idx = np.arange(points) if idx is None else idx
        eig = np.asarray(eig)
        at = np.searchsorted(idx, on_grid)
        table = set_error(eig[at], table_sets) if np.all(idx[np.minimum(at, idx.size - 1)] == on_grid) else None
        rows.append((name, idx.size / seconds, table, set_error(eig, exact[idx])))

    from engine import SolverSettings, parse_sweep
    from engine.runner.cost import plan_for
    from engine.solve import evaluate
    from studies.bicycle import STUDY

    # ---- the engine end to end; the untimed warm-up sweep (one shard) compiles the same batch
    def text(count):
        return lambda out: sweep_text("bicycle", {"v": {"linspace": [0.0, 10.0, count]}}, outputs=OUTPUTS, out=out,
                                      run={"shard_size": args.shard_size})

    cube, seconds, report = engine_end_to_end(text(points), OUTPUTS, warmup=text(min(points, args.shard_size)))
    engine_eig = cube["eigenvalue_real"] + 1j * cube["eigenvalue_imag"]
    end_to_end = "engine: rollsweep run, inline"
    record(end_to_end, seconds, engine_eig)

    # ---- the engine's compiled calls alone: the batch the engine picks, and a scaling line
    columns = {k: np.full(points, x) for k, x in STUDY.defaults.items()} | {"v": v}
    selected = in_study_order(STUDY, OUTPUTS)  # as the sweep file selects them
    settings = SolverSettings()
    batch = plan_for(parse_sweep(text(points)("unused.zarr"))).batch
    # (compiled by the run above, in this process: no warm-up call)
    result, seconds = best_of(lambda: evaluate(STUDY, settings, columns, batch, outputs=selected), repeat=2,
                              warmup=False)
    compiled_eig = result.outputs["eigenvalue_real"] + 1j * result.outputs["eigenvalue_imag"]
    record(f"engine: compiled calls only (batch {batch}, one call at a time)", seconds, compiled_eig)
    few = {k: c[np.linspace(0, points - 1, min(points, 4096)).astype(int)] for k, c in columns.items()}
    curve = []
    for size in (64, 256, 1024, 4096):
        _, seconds = best_of(lambda s=size: evaluate(STUDY, settings, few, s, outputs=selected), repeat=1)
        curve.append((size, few["v"].size / seconds))

    # ---- the baselines
    sub = np.linspace(0, points - 1, min(args.loop_points, points)).astype(int)
    eig, seconds = best_of(lambda: python_loop(v[sub], matrices, g), repeat=1)
    record(f"Python loop of numpy.linalg.eigvals ({sub.size:,} speeds)", seconds, eig, sub)

    eig, seconds = best_of(lambda: np.linalg.eigvals(state_matrices(v, matrices, g)))
    record("numpy eigvals on the (n, 4, 4) stack", seconds, eig)

    if jax.devices()[0].platform != "cpu":
        print("jax.jit(jax.vmap(eigvals)) skipped: jax's non-symmetric eig needs LAPACK (CPU)")
    else:
        plain = jax_eigvals(matrices, g)
        try:
            eig, seconds = best_of(lambda: np.asarray(plain(jnp.asarray(v))))
            record("jax.jit(jax.vmap(jnp.linalg.eigvals))", seconds, eig)
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"jax.jit(jax.vmap(eigvals)) skipped: {type(err).__name__}: {err}")

    numba_fn = numba_eigvals(matrices, g)
    numba_name = None
    if numba_fn is None:
        print("numba not installed: pip install numba (its baseline is skipped)")
    else:
        eig, seconds = best_of(lambda: numba_fn(v))
        numba_name = f"numba njit, parallel prange, eigvals per speed ({numba.get_num_threads()} threads)"
        record(numba_name, seconds, eig)

    print_table(f"bicycle eigenvalues against speed, {points:,} speeds in 0..10 m/s, float64; {machine()}", rows,
                end_to_end, ("max |d eig| Table 2", "max |d eig| numpy"))
    rates = {name: rate for name, rate, *_ in rows}
    for name in ("jax.jit(jax.vmap(jnp.linalg.eigvals))", numba_name):
        if name in rates:
            ratio = rates[end_to_end] / rates[name]
            print(f"engine rollsweep run / {name}: {ratio:.3g}x (same run, {points:,} speeds)")
    print("errors, 1/s, eigenvalues matched as sets: 'Table 2' at v = 0, 1, ..., 10 (Meijaard et al. 2007),"
          " 'numpy' at every speed against numpy's batched eigvals ('-': the method ran a subsample).")

    # ---- the engine's mode labels: at the Table 2 speeds, mode by mode, and
    # continuity of every labelled branch over the grid
    labelled = engine_eig[on_grid]
    per_mode = np.max(np.abs(labelled - table_sets), axis=0)
    print("engine, labelled modes against Table 2 (" + ", ".join(f"{m}: {e:.1e}" for m, e in
                                                                  zip(MODES, per_mode, strict=True)) + ")")
    jumps = np.max(np.abs(np.diff(engine_eig, axis=0)), axis=0)
    print(f"engine, largest change of a labelled mode between neighbouring speeds (dv = {v[1]:.1e} m/s): "
          + ", ".join(f"{m}: {j:.2g}" for m, j in zip(MODES, jumps, strict=True)))
    if report.failed_points:
        print(f"engine: {report.failed_points:,} points without a result")
    print(scaling_line(f"engine compiled calls by batch size, {few['v'].size:,} speeds", curve))
    design_speed_grid(args, batch, selected, settings)


def design_speed_grid(args, batch, selected, settings):
    """Trail x speed: the engine end to end and its compiled calls, points/s."""
    from engine.solve import evaluate
    from studies.bicycle import STUDY

    trails, speeds = args.grid
    axes = {"c": {"linspace": [0.06, 0.10, trails]}, "v": {"linspace": [0.0, 10.0, speeds]}}

    def text(c_count):
        grid = axes | {"c": {"linspace": [0.06, 0.10, c_count]}}
        return lambda out: sweep_text("bicycle", grid, outputs=OUTPUTS, out=out,
                                      run={"shard_size": args.grid_shard_size})

    points = trails * speeds
    _, seconds, _ = engine_end_to_end(text(trails), OUTPUTS, warmup=text(max(1, trails // 10)))
    end_to_end = points / seconds
    c, v = np.meshgrid(np.linspace(0.06, 0.10, trails), np.linspace(0.0, 10.0, speeds), indexing="ij")
    columns = {k: np.full(points, x) for k, x in STUDY.defaults.items()} | {"c": c.ravel(), "v": v.ravel()}
    _, compiled = best_of(lambda: evaluate(STUDY, settings, columns, batch, outputs=selected), repeat=2,
                          warmup=False)
    print(f"(design, speed) grid, {trails:,} trails x {speeds:,} speeds = {points:,} points, shards of "
          f"{args.grid_shard_size:,}: engine rollsweep run {end_to_end:,.0f} points/s (best of 3), compiled calls only "
          f"(batch {batch}) {points / compiled:,.0f} points/s")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"benchmark time: {time.perf_counter() - start:.0f} s")

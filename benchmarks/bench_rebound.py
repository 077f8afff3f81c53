"""Rebound regime map: the engine against the ways a user might do it, one run.

The main sweep of the rebound study (configs/rebound_regime.toml, study
"rebound_regime"): a ball at speed 3.8 m/s meets the table at contact incidence
angle alpha (0..89.9 deg) with spin ratio s = r wy / |v| (-1..1); the physical
impulse model of Ren, Xu, Tan (sliding above the critical friction angle
arctan(5 (1 + e) mu / 2), no tangential impulse below it) gives the outgoing
velocity and spin. An algebraic map: one point costs a few hundred flops, so
what is measured is the engine's overhead per point (padding, masking, status,
the zarr store) against plain vectorised code.

Methods: the engine end to end (`rollsweep run`, inline executor, into a
temporary zarr store) with the sweep's default batch and with one batch per
shard; the engine's compiled calls alone (engine.solve.evaluate); a Python
loop of the scalar formula over a subsample; numpy vectorised over all points;
jax.jit(jax.vmap(...)) of the same formula; numba (njit, parallel prange).

Errors: every method against a float64 numpy reference written here from the
model equations by a different route (the incoming state from a quadratic in
tan(alpha); the regime from alpha itself): the largest difference in outgoing
velocity (out_vx, out_vz, out_speed), spin (out_wy) and angle (out_angle), and
the count of points where the regime or the existence of a bounce differ.

Run: python benchmarks/bench_rebound.py [--spin-points N --angle-points N]
"""

import argparse
import concurrent.futures
import math
import pathlib
import time
import tomllib

import numpy as np
from _common import best_of, engine_end_to_end, in_study_order, machine, numba, print_table, scaling_line, sweep_text

from engine._jax_setup import configure

configure()  # float64 (and the compile cache) before jax builds any array
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

SPEED, RESTITUTION, FRICTION, RADIUS = 3.8, 0.8788, 0.1049, 0.02  # the study's defaults
SPIN_RANGE, ANGLE_RANGE = (-1.0, 1.0), (0.0, 89.9)  # configs/rebound_regime.toml
CONFIG = pathlib.Path(__file__).resolve().parent.parent / "configs" / "rebound_regime.toml"
SHARD_SIZE = tomllib.loads(CONFIG.read_text())["run"]["shard_size"]  # the config's shards
OUTPUTS = ("out_vx", "out_vz", "out_wy", "out_speed", "out_angle", "regime")


# ------------------------------------------------------------ the reference
def reference(spin, angle):
    """Outgoing (vx, vz, wy, speed, angle, regime), float64, from the model equations.

    Incoming: slip u = vx - r wy >= 0 along x, |vz| = q, tan(alpha) = u / q and
    |v| = S with vx = u + s S, so (q t + s S)^2 + q^2 = S^2 (t = tan alpha):
    q = S (sqrt(1 - s^2 + t^2) - s t) / (1 + t^2), the non-negative root. No
    bounce where q <= 0: at s = 1 the ball rolls along the table (q = 0 exactly
    here, with 1 - s^2 formed first), at alpha = 0 and s = -1 it spins in place.
    Bounce: vz -> -e vz. At alpha >= phi = arctan(5 (1 + e) mu / 2) the ball
    slides through the impact: friction impulse mu (1 + e) m q against the
    slip, applied at the contact point (0, 0, -r), I = (2/3) m r^2, so vx drops
    by J = mu (1 + e) q and wy rises by (r J m) / I = 3 J / (2 r). Below phi
    (physical model) the tangential motion is unchanged.
    """
    t = np.tan(np.radians(angle))
    q = SPEED * (np.sqrt((1 - spin**2) + t**2) - spin * t) / (1 + t**2)  # exactly 0 at s = 1
    vx, wy = q * t + spin * SPEED, spin * SPEED / RADIUS
    sliding = angle >= np.degrees(np.arctan(2.5 * (1 + RESTITUTION) * FRICTION))
    impulse = np.where(sliding, FRICTION * (1 + RESTITUTION) * q, 0.0)
    out_vx, out_wy, out_vz = vx - impulse, wy + 1.5 * impulse / RADIUS, RESTITUTION * q
    out = {
        "out_vx": out_vx, "out_vz": out_vz, "out_wy": out_wy, "out_speed": np.sqrt(out_vx**2 + out_vz**2),
        "out_angle": np.degrees(np.arctan2(np.abs(out_vx), out_vz)), "regime": sliding.astype(float),
    }
    bounces = q > 0
    return {k: np.where(bounces, v, np.nan) for k, v in out.items()}


# -------------------------------------------- the formula as a user writes it
def bounce_point(speed, angle_deg, s, e, mu, r):
    """One point, scalar code: (out_vx, out_vz, out_wy, out_speed, out_angle, regime)."""
    nan = math.nan
    a = math.radians(angle_deg)
    sin, cos = math.sin(a), math.cos(a)
    root = 1.0 - s * s * cos * cos
    if root < 0.0:
        return nan, nan, nan, nan, nan, nan
    sq = math.sqrt(root)
    u = speed * (sin * sq - s * sin * sin)  # contact slip, along +x
    vz = -speed * (cos * sq - s * sin * cos)
    if u < 0.0 or vz >= 0.0:
        return nan, nan, nan, nan, nan, nan
    vx, wy = u + s * speed, s * speed / r
    regime = 0.0
    if math.atan2(u, -vz) >= math.atan(2.5 * (1.0 + e) * mu):  # sliding
        impulse = (1.0 + e) * mu * -vz
        vx, wy, regime = vx - impulse, wy + 1.5 * impulse / r, 1.0
    vz = -e * vz
    return vx, vz, wy, math.sqrt(vx * vx + vz * vz), math.degrees(math.atan2(abs(vx), vz)), regime


def bounce_arrays(speed, angle_deg, s, e, mu, r, xp):
    """The same, vectorised, for xp = numpy or jax.numpy."""
    a = xp.radians(angle_deg)
    sin, cos = xp.sin(a), xp.cos(a)
    root = 1.0 - s**2 * cos**2
    sq = xp.sqrt(xp.maximum(root, 0.0))
    u = speed * (sin * sq - s * sin**2)
    vz = -speed * (cos * sq - s * sin * cos)
    vx, wy = u + s * speed, s * speed / r
    sliding = xp.arctan2(u, -vz) >= xp.arctan(2.5 * (1.0 + e) * mu)
    impulse = xp.where(sliding, (1.0 + e) * mu * -vz, 0.0)
    vx, wy, vz = vx - impulse, wy + 1.5 * impulse / r, -e * vz
    out = (vx, vz, wy, xp.sqrt(vx**2 + vz**2), xp.degrees(xp.arctan2(xp.abs(vx), vz)), sliding * 1.0)
    ok = (root >= 0) & (u >= 0) & (vz > 0)
    return tuple(xp.where(ok, o, xp.nan) for o in out)


def numba_sweep():
    if numba is None:
        return None
    point = numba.njit(bounce_point)

    @numba.njit(parallel=True)
    def sweep_into(out, speed, angle, spin, e, mu, r):
        for i in numba.prange(angle.size):
            o = point(speed, angle[i], spin[i], e, mu, r)
            out[0, i], out[1, i], out[2, i], out[3, i], out[4, i], out[5, i] = o
        return out

    # Into one output array made once and written again by every call: its
    # pages are in memory from the first call on (a new array a call, as numba's
    # np.empty makes inside the loop, faults its pages in afresh: 16-30M points
    # a second against 47M on 2 cores). The strongest a user would write.
    outputs = {}

    def sweep(speed, angle, spin, e, mu, r):
        out = outputs.get(angle.size)
        if out is None:
            out = outputs[angle.size] = np.empty((6, angle.size))
        return sweep_into(out, speed, angle, spin, e, mu, r)

    return sweep


# ------------------------------------------------------------------ errors
def mismatches(got, ref, idx=slice(None)):
    """Masks of the points where bounce / no bounce differ, and where the regime differs."""
    got = dict(zip(OUTPUTS, got, strict=True)) if not isinstance(got, dict) else got
    got = {k: np.asarray(got[k], float).ravel() for k in OUTPUTS}
    ref = {k: ref[k][idx] for k in OUTPUTS}
    both = np.isfinite(got["out_vx"]) & np.isfinite(ref["out_vx"])
    return got, ref, np.isfinite(got["out_vx"]) != np.isfinite(ref["out_vx"]), both & (got["regime"] != ref["regime"])


def errors(got, ref, idx=slice(None)):
    """(max |d velocity| m/s, max |d spin| rad/s, max |d angle| deg, bounce differs, regime differs):
    the differences over the points where both bounce in the same regime."""
    got, ref, bounce, regime = mismatches(got, ref, idx)
    same = np.isfinite(got["out_vx"]) & np.isfinite(ref["out_vx"]) & ~regime

    def worst(names):
        return max(float(np.max(np.abs(got[k][same] - ref[k][same]), initial=0.0)) for k in names)

    return (worst(("out_vx", "out_vz", "out_speed")), worst(("out_wy",)), worst(("out_angle",)), int(bounce.sum()),
            int(regime.sum()))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spin-points", type=int, default=1000, help="spin ratio axis length (config: 401)")
    parser.add_argument("--angle-points", type=int, default=1000, help="incidence angle axis length (config: 900)")
    parser.add_argument("--loop-points", type=int, default=100_000, help="points of the Python loop (a subsample)")
    parser.add_argument("--rounds", type=int, default=7,
                        help="alternated rounds of the compiled calls and numba, for median ratios (0: none)")
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.spin_points, args.angle_points, args.loop_points, args.rounds = 101, 200, 5_000, 2
    axes = {"spin_ratio": {"linspace": [*SPIN_RANGE, args.spin_points]},
            "incidence_angle": {"linspace": [*ANGLE_RANGE, args.angle_points]}}
    spin_axis, angle_axis = np.linspace(*SPIN_RANGE, args.spin_points), np.linspace(*ANGLE_RANGE, args.angle_points)
    spin, angle = (g.ravel() for g in np.meshgrid(spin_axis, angle_axis, indexing="ij"))  # the cube's order
    n = spin.size
    ref = reference(spin, angle)
    rows = []

    def record(name, seconds, count, got, idx=slice(None)):
        rows.append((name, count / seconds, *errors(got, ref, idx)))

    from engine import SolverSettings
    from engine.solve import evaluate
    from engine.solve.device import detect
    from engine.solve.plan import make_plan
    from studies.rebound import REGIME

    # ---- the engine end to end: the config's run settings (the engine picks the
    # batch: the study's, REGIME.batch_size points a call), then one compiled call
    # per shard, then the default batch with one shard thread per core rather than two
    cores = detect().cores
    e2e = []
    for label, run_table, workers in (
            ("config's shard_size, default batch", {"shard_size": SHARD_SIZE}, None),
            ("one batch per shard", {"shard_size": SHARD_SIZE, "batch_size": SHARD_SIZE}, None),
            (f"config's shard_size, default batch, {cores} shard threads", {"shard_size": SHARD_SIZE}, cores)):
        cube, seconds, report = engine_end_to_end(
            lambda out, run_table=run_table: sweep_text("rebound_regime", axes, outputs=OUTPUTS, out=out,
                                                        run=run_table), OUTPUTS, workers=workers)
        name = f"engine: rollsweep run, inline ({label})"
        record(name, seconds, n, cube)
        e2e.append(name)
    _, _, bounce, regime = mismatches(cube, ref)
    no_result = report.failed_points
    where = np.unique(spin[bounce | regime])

    # ---- the engine's compiled calls alone, over batch sizes, on the points as a
    # shard passes them: the axes as columns, every other parameter one value seen
    # n times (a broadcast view, which evaluate puts on the device once)
    columns = {k: np.broadcast_to(np.float64(v), (n,)) for k, v in REGIME.defaults.items()} | {
        "spin_ratio": spin, "incidence_angle": angle}
    selected = in_study_order(REGIME, OUTPUTS)  # as the sweep file selects them
    settings = SolverSettings()
    curve = []
    default_batch = make_plan(REGIME, points=n).batch  # what a run of this sweep uses
    for batch in sorted({256, 1024, 4096, SHARD_SIZE, 65536, default_batch}):
        result, seconds = best_of(lambda b=batch: evaluate(REGIME, settings, columns, b, outputs=selected))
        curve.append((batch, n / seconds))
        if batch in (default_batch, SHARD_SIZE):
            record(f"engine: compiled calls only (batch {batch}, one call at a time)", seconds, n, result.outputs)

    # The compiled calls on every core: a thread per core, each solving its part
    # of the points (what the inline executor's shard threads do).
    bounds = np.linspace(0, n, cores + 1).astype(int)
    parts = [{k: v[a:b] for k, v in columns.items()} for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def threaded():
        with concurrent.futures.ThreadPoolExecutor(cores) as pool:
            results = list(pool.map(lambda part: evaluate(REGIME, settings, part, default_batch, outputs=selected),
                                    parts))
        return {k: np.concatenate([r.outputs[k] for r in results]) for k in selected}

    out, seconds = best_of(threaded)
    record(f"engine: compiled calls only (batch {default_batch}, {cores} threads)", seconds, n, out)

    # ---- the baselines
    sub = np.linspace(0, n - 1, min(args.loop_points, n)).astype(int)

    def loop():
        return np.array([bounce_point(SPEED, a, s, RESTITUTION, FRICTION, RADIUS)
                         for a, s in zip(angle[sub].tolist(), spin[sub].tolist(), strict=True)]).T

    out, seconds = best_of(loop, repeat=1)
    record(f"Python loop of the scalar formula ({sub.size:,} points)", seconds, sub.size, out, sub)

    out, seconds = best_of(lambda: bounce_arrays(SPEED, angle, spin, RESTITUTION, FRICTION, RADIUS, np))
    record("numpy vectorised formula, all points", seconds, n, out)

    def point(a, s):
        return bounce_arrays(SPEED, a, s, RESTITUTION, FRICTION, RADIUS, jnp)

    plain = jax.jit(jax.vmap(point))
    angle_d, spin_d = jnp.asarray(angle), jnp.asarray(spin)
    out, seconds = best_of(lambda: jax.block_until_ready(plain(angle_d, spin_d)))
    record("jax.jit(jax.vmap(formula)), all points", seconds, n, out)
    out, seconds = best_of(lambda: [np.asarray(o) for o in plain(jnp.asarray(angle), jnp.asarray(spin))])
    record("same, with host -> device -> host copies", seconds, n, out)

    sweep = numba_sweep()
    if sweep is None:
        print("numba not installed: pip install numba (its baseline is skipped)")
    else:
        out, seconds = best_of(lambda: sweep(SPEED, angle, spin, RESTITUTION, FRICTION, RADIUS))
        record(f"numba njit, parallel prange ({numba.get_num_threads()} threads)", seconds, n, out)

    # ---- the compiled calls against numba in alternated rounds: on a shared
    # machine the load changes within a run, so each round's ratio is taken
    # between calls made moments apart, and the medians are reported
    alternated = None
    if sweep is not None and args.rounds > 0:
        contenders = {
            f"compiled calls (batch {default_batch}, one call at a time)":
                lambda: evaluate(REGIME, settings, columns, default_batch, outputs=selected),
            f"compiled calls (batch {default_batch}, {cores} threads)": threaded,
            "numba": lambda: sweep(SPEED, angle, spin, RESTITUTION, FRICTION, RADIUS),
        }
        seconds = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, fn in contenders.items():
                # A pause first: the worker threads of the contender before
                # (XLA's pool, numba's OpenMP team) spin for a while after their
                # work, on the cores the next one needs.
                time.sleep(0.1)
                start = time.perf_counter()
                fn()
                seconds[name].append(time.perf_counter() - start)
        alternated = {name: (n / float(np.median(t)), [nb / own for own, nb in zip(t, seconds["numba"], strict=True)])
                      for name, t in seconds.items()}

    fastest = max((r for r in rows if r[0] in e2e), key=lambda r: r[1])[0]
    print_table(
        f"rebound regime map (physical model), {args.spin_points} spin ratios x {args.angle_points} incidence angles"
        f" = {n:,} points, float64; {machine()}",
        rows, fastest, ("max |dv| m/s", "max |dw| rad/s", "max |dangle| deg", "bounce differs", "regime differs"))
    print("errors: against the float64 numpy reference of this file (incoming state by a quadratic in tan alpha),"
          " over the points where both bounce in the same regime; 'bounce differs': one of the two has no bounce"
          " (NaN); 'regime differs': sliding in one, rolling in the other.")
    print(f"no bounce in the reference: {int(np.sum(np.isnan(ref['out_vx']))):,} points (spin ratio 1: the ball"
          " rolls along the table, vz = 0; alpha 0 with spin ratio -1).")
    print(f"engine: {no_result:,} points without a result (status other than success: out_of_range, no bounce).")
    print("engine (end to end) differs from the reference only at spin ratios: "
          + (", ".join(f"{s:g}" for s in where) or "none")
          + (" (grazing: vz = 0 up to rounding, so a bounce or not, and its regime, are decided by rounding)"
             if where.size and np.all(np.abs(where) == 1) else ""))
    print(scaling_line("engine compiled calls by batch size", curve))
    if alternated:
        print(f"alternated, {args.rounds} rounds (median points/s; against numba: median and range of the"
              " rounds' ratios):")
        for name, (rate, ratios) in alternated.items():
            against = "" if name == "numba" else \
                f", {np.median(ratios):.2f}x numba ({min(ratios):.2f}-{max(ratios):.2f})"
            print(f"  {name}: {rate:,.0f}{against}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"benchmark time: {time.perf_counter() - start:.0f} s")

"""Rolling-ball sweep: the engine against the ways a user might do it, one run.

Spin ratio 0.2..3.0, rtol 1e-10, atol 1e-12, float64, both phases (slide, roll
to rest). Prints points per second, the ratio to the engine (end to end), and
the largest final-displacement error against the closed form, per method; then
the engine's scaling over executors/workers and lanes, what one point that
never finishes costs its batch, and the engine against numba run in turns
(their ratio, where the machine's drift over minutes cancels). Run: `make
bench` (or python benchmarks/bench_pingpong.py --points N). Times are the best
of a few runs.
"""

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np
from _common import (
    DOPRI5_CONSTANTS,
    add_tests_to_path,
    best_of,
    engine_end_to_end,
    machine,
    numba,
    print_table,
    scaling_line,
)

add_tests_to_path()
import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optimistix as optx  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

RTOL, ATOL = 1e-10, 1e-12
P = dict(cf.DEFAULTS)
G, R, MU, DELTA, BETA, V0 = P["gravity"], P["radius"], P["friction"], P["rolling_resistance"], P["drag"], 1.0


def columns(qs) -> dict:
    """The engine's parameter columns at the spin ratios `qs`, the fixed ones as
    a run passes them (one value seen n times: made on the device)."""
    return {k: np.broadcast_to(np.float64(v), qs.shape) for k, v in P.items()} | {"spin_ratio": qs}


# ---------------------------------------------------------------- scipy loop
def scipy_final(q):
    from scipy.integrate import solve_ivp

    def slide(t, y):
        return [y[1], -2 * BETA * y[1] - MU * G, y[3], 1.5 * (MU * R - DELTA) * G / R**2]

    def slip(t, y):
        return y[1] - R * y[3]

    slip.terminal, slip.direction = True, -1
    s = solve_ivp(slide, (0, 100), [0, V0, 0, -q * V0 / R], "RK45", rtol=RTOL, atol=ATOL, events=slip)
    y = s.y_events[0][0]
    lam = np.sign(y[1])

    def roll(t, z):
        return [z[1], -1.2 * BETA * z[1] - 0.6 * G * lam * DELTA / R]

    def stop(t, z):
        return z[1]

    stop.terminal = True
    r = solve_ivp(roll, (0, 1000), [y[0], y[1]], "RK45", rtol=RTOL, atol=ATOL, events=stop)
    return r.y_events[0][0][0]


# --------------------------------------------------- plain jit(vmap(diffrax))
def diffrax_final(q):
    solver, ctrl = diffrax.Tsit5(), diffrax.PIDController(rtol=RTOL, atol=ATOL)
    root = optx.Newton(rtol=1e-14, atol=1e-14)

    def slide(t, y, a):
        spin = 1.5 * (MU * R - DELTA) * G / R**2 * jnp.ones_like(y[0])
        return jnp.stack([y[1], -2 * BETA * y[1] - MU * G, y[3], spin])

    y0 = jnp.stack([0.0, V0, 0.0, -q * V0 / R])
    s = diffrax.diffeqsolve(diffrax.ODETerm(slide), solver, 0.0, 100.0, None, y0, stepsize_controller=ctrl,
                            event=diffrax.Event(lambda t, y, args, **k: y[1] - R * y[3], root), max_steps=4096)
    y = s.ys[-1]
    lam = jnp.sign(y[1])

    def roll(t, z, a):
        return jnp.stack([z[1], -1.2 * BETA * z[1] - 0.6 * G * lam * DELTA / R])

    r = diffrax.diffeqsolve(diffrax.ODETerm(roll), solver, 0.0, 1000.0, None, y[:2], stepsize_controller=ctrl,
                            event=diffrax.Event(lambda t, y, args, **k: y[1], root), max_steps=4096)
    return r.ys[-1][0]


# ------------------------------------------------------------- numba baseline
NUMBA_SOURCE = '''
import numpy as np
from numba import njit, prange
''' + DOPRI5_CONSTANTS + '''
@njit(inline="always")
def f(phase, v, w, beta, mu, g, r, delta, lam):
    # returns (xdot, vdot, thdot, wdot) for state (x, v, th, w)
    if phase == 0:
        return v, -2*beta*v - mu*g, w, 1.5*(mu*r - delta)*g/(r*r)
    a = -1.2*beta*v - 0.6*g*lam*delta/r
    return v, a, w, a/r

@njit(inline="always")
def step(phase, x, v, th, w, h, c):
    beta, mu, g, r, delta, lam = c
    k1 = f(phase, v, w, beta, mu, g, r, delta, lam)
    k2 = f(phase, v + h*A21*k1[1], w + h*A21*k1[3], beta, mu, g, r, delta, lam)
    k3 = f(phase, v + h*(A31*k1[1]+A32*k2[1]), w + h*(A31*k1[3]+A32*k2[3]), beta, mu, g, r, delta, lam)
    k4 = f(phase, v + h*(A41*k1[1]+A42*k2[1]+A43*k3[1]), w + h*(A41*k1[3]+A42*k2[3]+A43*k3[3]), beta, mu, g, r, delta, lam)
    k5 = f(phase, v + h*(A51*k1[1]+A52*k2[1]+A53*k3[1]+A54*k4[1]), w + h*(A51*k1[3]+A52*k2[3]+A53*k3[3]+A54*k4[3]), beta, mu, g, r, delta, lam)
    k6 = f(phase, v + h*(A61*k1[1]+A62*k2[1]+A63*k3[1]+A64*k4[1]+A65*k5[1]), w + h*(A61*k1[3]+A62*k2[3]+A63*k3[3]+A64*k4[3]+A65*k5[3]), beta, mu, g, r, delta, lam)
    s = (B1*k1[0]+B3*k3[0]+B4*k4[0]+B5*k5[0]+B6*k6[0], B1*k1[1]+B3*k3[1]+B4*k4[1]+B5*k5[1]+B6*k6[1],
         B1*k1[2]+B3*k3[2]+B4*k4[2]+B5*k5[2]+B6*k6[2], B1*k1[3]+B3*k3[3]+B4*k4[3]+B5*k5[3]+B6*k6[3])
    x1, v1, th1, w1 = x + h*s[0], v + h*s[1], th + h*s[2], w + h*s[3]
    k7 = f(phase, v1, w1, beta, mu, g, r, delta, lam)
    e0 = h*(E1*k1[0]+E3*k3[0]+E4*k4[0]+E5*k5[0]+E6*k6[0]+E7*k7[0])
    e1 = h*(E1*k1[1]+E3*k3[1]+E4*k4[1]+E5*k5[1]+E6*k6[1]+E7*k7[1])
    e2 = h*(E1*k1[2]+E3*k3[2]+E4*k4[2]+E5*k5[2]+E6*k6[2]+E7*k7[2])
    e3 = h*(E1*k1[3]+E3*k3[3]+E4*k4[3]+E5*k5[3]+E6*k6[3]+E7*k7[3])
    return x1, v1, th1, w1, e0, e1, e2, e3

@njit(inline="always")
def event(phase, v, w, r):
    return v - r*w if phase == 0 else v

@njit(cache=True)
def final_x(q, beta, mu, g, r, delta, rtol, atol):
    x, v, th, w = 0.0, 1.0, 0.0, -q/r
    h = 1e-3
    lam = 0.0
    for phase in range(2):
        if phase == 1:
            lam = np.sign(v)
        c = (beta, mu, g, r, delta, lam)
        g0 = event(phase, v, w, r)
        while True:
            x1, v1, th1, w1, e0, e1, e2, e3 = step(phase, x, v, th, w, h, c)
            s0 = e0/(atol + rtol*max(abs(x), abs(x1))); s1 = e1/(atol + rtol*max(abs(v), abs(v1)))
            s2 = e2/(atol + rtol*max(abs(th), abs(th1))); s3 = e3/(atol + rtol*max(abs(w), abs(w1)))
            e = np.sqrt((s0*s0 + s1*s1 + s2*s2 + s3*s3)/4)
            if e > 1.0:
                h *= max(0.2, 0.9*e**-0.2)
                continue
            g1 = event(phase, v1, w1, r)
            if np.sign(g1) != np.sign(g0):
                lo, hi, glo, ghi = 0.0, h, g0, g1
                side = 0
                mid = hi
                for _ in range(100):
                    mid = hi - ghi*(hi - lo)/(ghi - glo)
                    xm, vm, thm, wm, _, _, _, _ = step(phase, x, v, th, w, mid, c)
                    gm = event(phase, vm, wm, r)
                    if gm == 0 or hi - lo < 1e-14*max(1.0, hi):
                        break
                    if np.sign(gm) == np.sign(glo):
                        lo, glo = mid, gm
                        if side == -1:
                            ghi /= 2
                        side = -1
                    else:
                        hi, ghi = mid, gm
                        if side == 1:
                            glo /= 2
                        side = 1
                x, v, th, w, _, _, _, _ = step(phase, x, v, th, w, mid, c)
                break
            x, v, th, w = x1, v1, th1, w1
            h *= min(5.0, 0.9*max(e, 1e-10)**-0.2)
    return x

@njit(parallel=True, cache=True)
def sweep(qs, beta, mu, g, r, delta, rtol, atol):
    out = np.empty(qs.size)
    for i in prange(qs.size):
        out[i] = final_x(qs[i], beta, mu, g, r, delta, rtol, atol)
    return out
'''


def numba_sweep():
    if numba is None:
        return None
    folder = pathlib.Path(tempfile.gettempdir()) / "rollsweep_bench_numba"
    folder.mkdir(exist_ok=True)
    (folder / "pingpong_numba.py").write_text(NUMBA_SOURCE)
    sys.path.insert(0, str(folder))
    import pingpong_numba

    return lambda qs: pingpong_numba.sweep(qs, BETA, MU, G, R, DELTA, RTOL, ATOL)


def sweep_text(points, out, shard_size, outputs=None, solver=None):
    """The benchmark sweep; outputs None: all the study's outputs."""
    selected = "" if outputs is None else f"outputs = {list(outputs)!r}\n".replace("'", '"')
    method = "" if solver is None else f'solver = "{solver}"\n'
    return f"""study = "pingpong"
{selected}[axes]
spin_ratio = {{ linspace = [0.2, 3.0, {points}] }}
[solver]
{method}rtol = {RTOL}
atol = {ATOL}
[run]
shard_size = {shard_size}
out = "{out}"
"""


def shards_for(points: int, threads: int) -> int:
    """Shard size of the benchmark sweep: two shards per shard thread.

    Each shard pays a fixed cost whatever its size: creating its files (one
    chunk per array and a done marker; on this 2-core machine creating a file
    costs ~0.9 ms of kernel time), zarr's event loop, the drain of its compiled
    call's last lanes. A point of this sweep costs ~3 us, so shards of a few
    thousand points spend a third of their time on it; two shards per thread
    keep every thread busy to the end. Measured (200,000 points, 4 threads,
    10 alternating runs, median points/s relative to 25,000): 8,192: 0.82,
    12,500: 0.94, 16,667: 0.93, 33,334: 0.98, 50,000: 0.97; the benchmark
    prints the curve."""
    return -(-points // (2 * threads))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--scipy-points", type=int, default=200)
    parser.add_argument("--shard-size", type=int, default=None,
                        help="default: two shards per shard thread (see shards_for)")
    parser.add_argument("--pairs", type=int, default=7, help="engine and numba runs in turns, for their ratio")
    parser.add_argument("--quick", action="store_true", help="20,000 points, a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.points, args.scipy_points, args.pairs = 20_000, 20, 2
    from engine.runner.execute import default_workers
    from engine.solve.allocation import cores

    threads = default_workers("inline")
    args.shard_size = args.shard_size or shards_for(args.points, threads)
    qs = np.linspace(0.2, 3.0, args.points)
    exact = np.array([cf.final_displacement(P, spin_ratio=q) for q in qs])
    rows = []

    def record(name, seconds, n, values, idx=slice(None)):
        rows.append((name, n / seconds, float(np.nanmax(np.abs(np.asarray(values) - exact[idx])))))

    from engine import SolverSettings
    from engine.solve import evaluate
    from studies.pingpong import STUDY

    # The baselines compute the final displacement: the like-for-like engine run
    # asks for that output (the reference row); the study's full set follows.
    wanted = ["final_displacement"]

    def text(out, shard_size=args.shard_size, outputs=wanted, solver=None):
        return sweep_text(args.points, out, shard_size, outputs, solver)

    # ---- the engine, end to end through `rollsweep run` (a first untimed run
    # fills the compile cache): inline threads and local dask cluster processes
    executors = [("inline", None, f"inline, {threads} threads (default)"),
                 ("inline", cores(), f"inline, {cores()} threads (one per core)"), ("inline", 1, "inline, 1 thread"),
                 ("local", 1, f"local cluster, 1 process x {cores()} threads"),
                 ("local", cores(), f"local cluster, {cores()} processes x 1 thread")]
    workers_curve = []
    for executor, workers, label in executors:
        values, seconds, _ = engine_end_to_end(text, wanted, executor=executor, workers=workers)
        record(f"engine: rollsweep run, {label}", seconds, args.points, values["final_displacement"])
        workers_curve.append((label, args.points / seconds))
    values, seconds, _ = engine_end_to_end(lambda out: text(out, outputs=None), wanted)
    record(f"engine: same (inline, {threads} threads), all 6 outputs of the study", seconds, args.points,
           values["final_displacement"])
    values, seconds, _ = engine_end_to_end(lambda out: text(out, solver="Dopri8"), wanted)
    record(f"engine: same (inline, {threads} threads), solver = \"Dopri8\" in the sweep", seconds, args.points,
           values["final_displacement"])
    shard_curve = [(args.shard_size, workers_curve[0][1])]  # the default-executor row above
    for shard_size in {4096, 8192, args.shard_size // 2, args.shard_size * 2} - {args.shard_size}:
        _, seconds, _ = engine_end_to_end(lambda out, k=shard_size: text(out, k), [])
        shard_curve.append((shard_size, args.points / seconds))
    shard_curve.sort()

    # ---- the engine's compiled calls alone, and how they scale with lanes
    columns = {k: np.full(qs.size, v) for k, v in P.items()} | {"spin_ratio": qs}
    settings = SolverSettings(rtol=RTOL, atol=ATOL)
    batch = min(args.shard_size, qs.size)
    lanes_curve = []
    for lanes in (250, 500, 1000, 1024, 2000, 4000):  # 1,024: slow on large calls (engine/runner/cost.py)
        _, seconds = best_of(lambda n=lanes: evaluate(STUDY, settings, columns, batch, wanted, solver="lanes", width=n))
        lanes_curve.append((lanes, args.points / seconds))
    result, seconds = best_of(lambda: evaluate(STUDY, settings, columns, batch, wanted))
    record(f"engine: compiled calls only, one thread ({batch:,} points, lanes)", seconds, args.points,
           result.outputs["final_displacement"])
    vmap_curve = []
    for size in (256, 4096):
        out, seconds = best_of(lambda b=size: evaluate(STUDY, settings, columns, b, wanted, solver="vmapped"), repeat=1)
        vmap_curve.append((size, args.points / seconds))
    fastest_vmap = max(rate for _, rate in vmap_curve)
    record("engine: compiled calls, vmap of the point solve (no lanes)", args.points / fastest_vmap,
           args.points, out.outputs["final_displacement"])

    # ---- one point that never finishes, in a batch of 4096
    stall = {}
    bad = {k: v[:4096].copy() for k, v in columns.items()}
    bad["rolling_resistance"][7] = 1e-300  # creeps for ~5e3 s: runs out of steps
    long_settings = SolverSettings(rtol=RTOL, atol=ATOL, t_max=1e6)
    for label, solver in (("lanes", "lanes"), ("vmap", "vmapped")):
        clean = {k: v[:4096] for k, v in columns.items()}
        _, t_clean = best_of(
            lambda solver=solver, clean=clean: evaluate(STUDY, long_settings, clean, 4096, solver=solver), repeat=1
        )
        _, t_bad = best_of(lambda solver=solver: evaluate(STUDY, long_settings, bad, 4096, solver=solver), repeat=1)
        stall[label] = t_bad / t_clean

    # ---- the baselines
    sub = np.linspace(0, args.points - 1, args.scipy_points).astype(int)
    start = time.perf_counter()
    x = [scipy_final(q) for q in qs[sub]]
    record("scipy solve_ivp RK45 loop with events", time.perf_counter() - start, len(sub), x, sub)

    plain = jax.jit(jax.vmap(diffrax_final))
    x, seconds = best_of(lambda: jax.block_until_ready(plain(jnp.asarray(qs))), repeat=1)
    record("plain jax.jit(jax.vmap(diffrax)), all points", seconds, args.points, x)
    order = np.argsort(qs)
    chunked = jax.jit(jax.vmap(diffrax_final))

    def by_chunks():
        # 250 neighbouring (sorted) points per call, the last chunk padded: one compiled shape.
        q_sorted = qs[order]
        padded = np.concatenate([q_sorted, np.full((-qs.size) % 250, q_sorted[-1])])
        x = np.concatenate([np.asarray(chunked(jnp.asarray(padded[i:i + 250]))) for i in range(0, padded.size, 250)])
        return x[: qs.size][np.argsort(order)]

    x, seconds = best_of(by_chunks)
    record("same, chunks of 250 sorted points", seconds, args.points, x)

    numba_fn = numba_sweep()
    paired = []
    if numba_fn is None:
        print("numba not installed: pip install numba (its baseline is skipped)")
    else:
        x, seconds = best_of(lambda: numba_fn(qs))
        record(f"numba hand-written Dormand-Prince, {numba.get_num_threads()} threads", seconds, args.points, x)
        # The rows above are minutes apart, and this machine's speed drifts over
        # minutes: the engine (end to end, default executor) and numba, in turns.
        for _ in range(args.pairs):
            _, engine_seconds, _ = engine_end_to_end(text, [], repeat=1, warmup=False)
            _, numba_seconds = best_of(lambda: numba_fn(qs), repeat=1, warmup=False)
            paired.append(numba_seconds / engine_seconds)

    engine_row = rows[0][0]
    print_table(
        f"rolling-ball sweep, {args.points:,} points (scipy: {len(sub)}), rtol {RTOL}, atol {ATOL}, float64, "
        f"engine shards of {args.shard_size:,}; "
        f"{machine()}",
        rows,
        engine_row,
        ("max |x - closed form|",),
    )
    print("end to end by executor (points/s): " + ", ".join(f"{label}: {r:,.0f}" for label, r in workers_curve))
    print(scaling_line(f"end to end by shard size ({executors[0][2]})", shard_curve))
    print(scaling_line(f"compiled calls of {batch:,} points by lanes", lanes_curve))
    print(scaling_line("vmap of the point solve by batch size", vmap_curve))
    print("one never-finishing point in a batch of 4096, time against a clean batch: "
          + ", ".join(f"{label}: {r:.2f}x" for label, r in stall.items()))
    if paired:
        print(f"engine end to end vs numba, {len(paired)} runs each in turns (points/s ratio): median "
              f"{np.median(paired):.2f}, range {min(paired):.2f}-{max(paired):.2f}")


if __name__ == "__main__":
    main()

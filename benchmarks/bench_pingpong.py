"""Rolling-ball sweep: the engine against the ways a user might do it, one run.

Spin ratio 0.2..3.0, rtol 1e-10, atol 1e-12, float64, both phases (slide, roll
to rest). Prints points per second, the ratio to the engine (end to end), and
the largest final-displacement error against the closed form, per method.
Run: `make bench` (or python benchmarks/bench_pingpong.py --points N).
"""

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from engine._jax_setup import configure  # noqa: E402

import pingpong_closed_form as cf  # noqa: E402

configure()
import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optimistix as optx  # noqa: E402

RTOL, ATOL = 1e-10, 1e-12
P = dict(cf.DEFAULTS)
G, R, MU, DELTA, BETA, V0 = P["gravity"], P["radius"], P["friction"], P["rolling_resistance"], P["drag"], 1.0


def timed(fn, *args, repeat=1):
    fn(*args)  # warm-up: compile
    start = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args)
    return out, (time.perf_counter() - start) / repeat


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

A21=1/5; A31=3/40; A32=9/40; A41=44/45; A42=-56/15; A43=32/9
A51=19372/6561; A52=-25360/2187; A53=64448/6561; A54=-212/729
A61=9017/3168; A62=-355/33; A63=46732/5247; A64=49/176; A65=-5103/18656
B1=35/384; B3=500/1113; B4=125/192; B5=-2187/6784; B6=11/84
E1=71/57600; E3=-71/16695; E4=71/1920; E5=-17253/339200; E6=22/525; E7=-1/40

@njit(cache=True)
def f(phase, y, c):
    beta, mu, g, r, delta, lam = c[0], c[1], c[2], c[3], c[4], c[5]
    out = np.empty(4)
    if phase == 0:
        out[0] = y[1]; out[1] = -2*beta*y[1] - mu*g; out[2] = y[3]; out[3] = 1.5*(mu*r - delta)*g/r**2
    else:
        a = -1.2*beta*y[1] - 0.6*g*lam*delta/r
        out[0] = y[1]; out[1] = a; out[2] = y[3]; out[3] = a/r
    return out

@njit(cache=True)
def step(phase, y, h, c):
    k1 = f(phase, y, c)
    k2 = f(phase, y + h*A21*k1, c)
    k3 = f(phase, y + h*(A31*k1 + A32*k2), c)
    k4 = f(phase, y + h*(A41*k1 + A42*k2 + A43*k3), c)
    k5 = f(phase, y + h*(A51*k1 + A52*k2 + A53*k3 + A54*k4), c)
    k6 = f(phase, y + h*(A61*k1 + A62*k2 + A63*k3 + A64*k4 + A65*k5), c)
    y1 = y + h*(B1*k1 + B3*k3 + B4*k4 + B5*k5 + B6*k6)
    k7 = f(phase, y1, c)
    err = h*(E1*k1 + E3*k3 + E4*k4 + E5*k5 + E6*k6 + E7*k7)
    return y1, err

@njit(cache=True)
def event(phase, y, c):
    return y[1] - c[3]*y[3] if phase == 0 else y[1]

@njit(cache=True)
def final_x(q, c, rtol, atol):
    y = np.array([0.0, 1.0, 0.0, -q/c[3]])
    h = 1e-3
    for phase in range(2):
        if phase == 1:
            c[5] = np.sign(y[1])
        g0 = event(phase, y, c)
        while True:
            y1, err = step(phase, y, h, c)
            sc = atol + rtol*np.maximum(np.abs(y), np.abs(y1))
            e = np.sqrt(np.mean((err/sc)**2))
            if e > 1.0:
                h *= max(0.2, 0.9*e**-0.2)
                continue
            if np.sign(event(phase, y1, c)) != np.sign(g0):
                # Illinois (regula falsi that halves a stuck end) on re-steps from the
                # accepted step start: the event state is exact to the tolerance.
                lo, hi = 0.0, h
                glo, ghi = event(phase, y, c), event(phase, y1, c)
                side = 0
                mid = hi
                for _ in range(100):
                    mid = hi - ghi*(hi - lo)/(ghi - glo)
                    ym, _ = step(phase, y, mid, c)
                    gm = event(phase, ym, c)
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
                y, _ = step(phase, y, mid, c)
                break
            y = y1
            h *= min(5.0, 0.9*max(e, 1e-10)**-0.2)
    return y[0]

@njit(parallel=True, cache=True)
def sweep(qs, c0, rtol, atol):
    out = np.empty(qs.size)
    for i in prange(qs.size):
        out[i] = final_x(qs[i], c0.copy(), rtol, atol)
    return out
'''


def numba_sweep():
    try:
        import numba  # noqa: F401
    except ImportError:
        return None
    folder = pathlib.Path(tempfile.gettempdir()) / "rollsweep_bench_numba"
    folder.mkdir(exist_ok=True)
    (folder / "pingpong_numba.py").write_text(NUMBA_SOURCE)
    sys.path.insert(0, str(folder))
    import pingpong_numba

    c = np.array([BETA, MU, G, R, DELTA, 0.0])
    return lambda qs: pingpong_numba.sweep(qs, c, RTOL, ATOL)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=20000)
    parser.add_argument("--scipy-points", type=int, default=200)
    args = parser.parse_args()
    qs = np.linspace(0.2, 3.0, args.points)
    exact = np.array([cf.final_displacement(P, spin_ratio=q) for q in qs])
    rows = []

    def record(name, seconds, n, values, idx=slice(None)):
        rows.append((name, n / seconds, float(np.max(np.abs(np.asarray(values) - exact[idx])))))

    # the engine, end to end through `rollsweep run` (inline and the default local cluster)
    from engine import parse_sweep, run

    toml = f"""study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.2, 3.0, {args.points}] }}
[solver]
rtol = {RTOL}
atol = {ATOL}
[run]
shard_size = 4096
out = "OUT"
"""
    with tempfile.TemporaryDirectory() as tmp:
        from engine import open_cube

        for executor in ("inline", "local"):
            sweep = parse_sweep(toml.replace("OUT", f"{tmp}/{executor}.zarr"))
            report = run(sweep, executor=executor, progress=False)
            x = open_cube(sweep.out)["final_displacement"].values
            record(f"engine: rollsweep run ({executor}, end to end)", report.seconds, args.points, x)

    from engine import SolverSettings
    from engine._evaluate import evaluate
    from studies.pingpong import STUDY

    columns = {k: np.full(qs.size, v) for k, v in P.items()} | {"spin_ratio": qs}
    settings = SolverSettings(rtol=RTOL, atol=ATOL)
    scaling = []
    for batch in (64, 256, 1024, 4096):
        result, seconds = timed(lambda b=batch: evaluate(STUDY, settings, columns, b))
        scaling.append((batch, args.points / seconds))
    best = max(scaling, key=lambda s: s[1])
    result, seconds = timed(lambda: evaluate(STUDY, settings, columns, best[0]))
    record(f"engine: compiled batches only (batch {best[0]})", seconds, args.points,
           result.outputs["final_displacement"])

    sub = np.linspace(0, args.points - 1, args.scipy_points).astype(int)
    start = time.perf_counter()
    x = [scipy_final(q) for q in qs[sub]]
    record("scipy solve_ivp RK45 loop with events", time.perf_counter() - start, len(sub), x, sub)

    plain = jax.jit(jax.vmap(diffrax_final))
    x, seconds = timed(lambda: jax.block_until_ready(plain(jnp.asarray(qs))))
    record("plain jax.jit(jax.vmap(diffrax)), all points", seconds, args.points, x)
    order = np.argsort(qs)
    chunked = jax.jit(jax.vmap(diffrax_final))

    def by_chunks():
        # 250 neighbouring (sorted) points per call, the last chunk padded: one compiled shape.
        q_sorted = qs[order]
        padded = np.concatenate([q_sorted, np.full((-qs.size) % 250, q_sorted[-1])])
        x = np.concatenate([np.asarray(chunked(jnp.asarray(padded[i:i + 250]))) for i in range(0, padded.size, 250)])
        return x[: qs.size][np.argsort(order)]

    x, seconds = timed(by_chunks)
    record("same, chunks of 250 sorted points", seconds, args.points, x)

    numba_fn = numba_sweep()
    if numba_fn is None:
        print("numba not installed: pip install numba (its baseline is skipped)")
    else:
        x, seconds = timed(numba_fn, qs)
        record("numba hand-written Dormand-Prince, 2 threads", seconds, args.points, x)

    engine_rate = rows[0][1]
    print(f"\nrolling-ball sweep, {args.points} points (scipy: {len(sub)}), rtol {RTOL}, atol {ATOL}, float64")
    print(f"{'method':<52} {'points/s':>12} {'vs engine':>10} {'max |x - closed form|':>22}")
    for name, rate, err in rows:
        print(f"{name:<52} {rate:>12,.0f} {rate / engine_rate:>10.2f} {err:>22.1e}")
    print("\nengine batch-size scaling (compiled batches): "
          + ", ".join(f"{b}: {r:,.0f} points/s" for b, r in scaling))


if __name__ == "__main__":
    main()

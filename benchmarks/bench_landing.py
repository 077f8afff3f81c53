"""Landing map of a serve: the engine against the ways a user might do it, one run.

The main sweep of the rebound_landing study (configs/rebound_landing.toml): a
ball launched from x = -0.2 m, 0.25 m high, over launch speed (3..15 m/s) x
elevation (-25..15 deg) x spin (back-, no, topspin 150 rad/s); flight with
gravity, quadratic drag and Magnus lift, a = -g ez - kD |v| v + kM (w x v);
events: the centre at z = r falling (on the near half of the table, the first
time: a bounce by the physical rebound model of Ren, Xu, Tan, and the flight
goes on; anywhere else, or a second near-half contact, ends the flight there) and the net plane x = 1.37 m (below the
net top plus r: net fault). Tsit5 at rtol 1e-9, atol 1e-11, horizon 3 s, at
most 8 segments.

Methods: the engine end to end (`rollsweep run`, inline executor, into a
temporary zarr store) and its compiled calls alone (engine.solve.evaluate);
scipy solve_ivp (RK45, the same tolerances) with terminal events, segment after
segment, in a Python loop over a subsample; jax.jit(jax.vmap(...)) of diffrax
(Tsit5, the same tolerances, an Event with a Newton root finder, segments in a
lax.while_loop), all points in one call and in chunks.

Errors: on the subsample, against scipy solve_ivp DOP853 at rtol 1e-13, atol
1e-15 (the same model): the largest |landing point - reference| and
|flight time - reference| over points with the same outcome, and the count of
points whose outcome (in, net, out) differs.

Run: python benchmarks/bench_landing.py [--speed-points N --elevation-points N]
"""

import argparse
import math
import time

import numpy as np
from _common import best_of, engine_end_to_end, in_study_order, machine, print_table, scaling_line, sweep_text

from engine._jax_setup import configure

configure()  # float64 (and the compile cache) before jax builds any array
import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optimistix as optx  # noqa: E402

# The study's defaults and the table (studies/rebound/_flight.py, the project's specification).
X0, Y0, Z0, AZIMUTH, SIDESPIN = -0.2, 0.0, 0.25, 0.0, 0.0
MASS, G, RHO, CD, CM, E, MU, R = 0.0027, 9.81, 1.2, 0.5, 1.0, 0.8788, 0.1049, 0.02
K_DRAG, K_MAGNUS = RHO * CD * math.pi * R**2 / (2 * MASS), RHO * CM * math.pi * R**3 / (2 * MASS)
LENGTH, HALF_WIDTH, NET_X, NET_HEIGHT = 2.74, 0.7625, 1.37, 0.1525
IN, NET_FAULT, OUT, DOUBLE_BOUNCE = 1.0, 2.0, 3.0, 4.0
RTOL, ATOL, T_MAX, MAX_SEGMENTS = 1e-9, 1e-11, 3.0, 8  # configs/rebound_landing.toml
TOPSPIN, ELEVATION, SPEED = (-150.0, 0.0, 150.0), (-25.0, 15.0), (3.0, 15.0)  # configs/rebound_landing.toml
SHARD_SIZE = 4096  # configs/rebound_landing.toml
OUTPUTS = ("outcome", "landing_x", "landing_y", "flight_time")


def launch(speed, elevation, topspin, xp=np):
    el, az = xp.radians(elevation), math.radians(AZIMUTH)
    v = [speed * xp.cos(el) * math.cos(az), speed * xp.cos(el) * math.sin(az), speed * xp.sin(el)]
    return xp.stack([X0 + 0 * speed, Y0 + 0 * speed, Z0 + 0 * speed, *v, 0 * speed, topspin + 0 * speed,
                     SIDESPIN + 0 * speed])


def fly(y, xp=np):
    """d/dt (x, y, z, vx, vy, vz, wx, wy, wz): drag against v, Magnus along w x v, spin constant in flight."""
    v, w = y[3:6], y[6:9]
    a = -K_DRAG * xp.sqrt(v[0] ** 2 + v[1] ** 2 + v[2] ** 2) * v + K_MAGNUS * xp.cross(w, v)
    return xp.concatenate([v, a - xp.array([0.0, 0.0, G]), xp.zeros(3)])


def bounce(y, xp=np):
    """Physical rebound model: above the critical angle the friction impulse
    mu (1 + e) m |vz| acts against the contact slip; vz -> -e vz."""
    v, w = y[3:6], y[6:9]
    slip = xp.stack([v[0] - R * w[1], v[1] + R * w[0]])
    norm = xp.sqrt(slip[0] ** 2 + slip[1] ** 2)
    sliding = xp.arctan2(norm, xp.abs(v[2])) >= xp.arctan(2.5 * (1 + E) * MU)
    k = xp.where(sliding & (norm > 0), (1 + E) * MU * xp.abs(v[2]) / xp.where(norm > 0, norm, 1.0), 0.0)
    jx, jy = -k * slip[0], -k * slip[1]
    v_new = xp.stack([v[0] + jx, v[1] + jy, -E * v[2]])
    w_new = xp.stack([w[0] + 1.5 / R * jy, w[1] - 1.5 / R * jx, w[2]])
    return xp.concatenate([y[:3], v_new, w_new])


def inside(y):
    return (y[0] >= 0) & (y[0] <= LENGTH) & (abs(y[1]) <= HALF_WIDTH)


# ---------------------------------------------------------- scipy, a Python loop
def scipy_landing(speed, elevation, topspin, method="RK45", rtol=RTOL, atol=ATOL):
    """(outcome, landing x, landing y, flight time), segment after segment.

    As the study does, the first contact with the near half is a bounce (the
    flight goes on) and a second one ends the flight (outcome 4)."""
    from scipy.integrate import solve_ivp

    y, t, net_done, bounces = launch(speed, elevation, topspin), 0.0, False, 0

    def table(t, y):
        return y[2] - R

    def net(t, y):
        return 1.0 if net_done else y[0] - NET_X

    table.terminal, table.direction, net.terminal = True, -1, True
    for _ in range(MAX_SEGMENTS):
        sol = solve_ivp(lambda t, y: fly(y), (t, T_MAX), y, method, rtol=rtol, atol=atol, events=[table, net])
        if sol.status != 1:  # the horizon, no event
            return np.nan, np.nan, np.nan, np.nan
        k = 0 if sol.t_events[0].size else 1
        t, y = sol.t_events[k][0], sol.y_events[k][0]
        if k == 1:  # net plane
            if y[2] < NET_HEIGHT + R:
                return NET_FAULT, np.nan, np.nan, t
            net_done = True
        elif inside(y) and y[0] < NET_X and bounces == 0:
            y, bounces = bounce(y), bounces + 1
        else:
            outcome = (IN if y[0] >= NET_X else DOUBLE_BOUNCE) if inside(y) else OUT
            return outcome, y[0], y[1], t
    return np.nan, np.nan, np.nan, np.nan


# ---------------------------------------------------- plain jit(vmap(diffrax))
def diffrax_landing():
    term = diffrax.ODETerm(lambda t, y, args: fly(y, jnp))
    root = optx.Newton(rtol=1e-12, atol=1e-12)

    def table(t, y, args, **kwargs):
        return y[2] - R

    def net(t, y, args, **kwargs):
        return jnp.where(args, 1.0, y[0] - NET_X)

    event = diffrax.Event((table, net), root, direction=(False, None))

    def point(speed, elevation, topspin):
        nan = jnp.asarray(jnp.nan)

        def body(c):
            t, y, net_done, done, result, k, bounced = c
            sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), t, T_MAX, None, y, args=net_done, event=event,
                                      stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
                                      max_steps=4096, throw=False)
            t1, y1 = sol.ts[-1], sol.ys[-1]
            hit_table, hit_net = sol.event_mask
            fault = hit_net & (y1[2] < NET_HEIGHT + R)
            bounces = hit_table & inside(y1) & (y1[0] < NET_X) & ~bounced
            lands = hit_table & ~bounces
            outcome = jnp.where(inside(y1), jnp.where(y1[0] >= NET_X, IN, DOUBLE_BOUNCE), OUT)
            new = jnp.where(fault, jnp.stack([NET_FAULT, nan, nan, t1]),
                            jnp.where(lands, jnp.stack([outcome, y1[0], y1[1], t1]), result))
            ends = fault | lands | ~(hit_table | hit_net)
            y_next = jnp.where(bounces, bounce(y1, jnp), y1)
            keep = done
            return (jnp.where(keep, t, t1), jnp.where(keep, y, y_next), net_done | (hit_net & ~fault),
                    done | ends, jnp.where(keep, result, new), k + 1, bounced | (bounces & ~keep))

        carry = (jnp.asarray(0.0), launch(speed, elevation, topspin, jnp), jnp.asarray(False), jnp.asarray(False),
                 jnp.full(4, jnp.nan), 0, jnp.asarray(False))
        *_, result, _, _ = jax.lax.while_loop(lambda c: ~c[3] & (c[5] < MAX_SEGMENTS), body, carry)
        return result

    return jax.jit(jax.vmap(point))


def errors(got, ref):
    """(max |d landing| m, max |d flight time| s, outcome mismatches) over the points of ref."""
    got, ref = np.asarray(got, float), np.asarray(ref, float)  # (4, n): outcome, x, y, time
    same = got[0] == ref[0]
    landed = same & np.isfinite(ref[1])
    d_land = np.max(np.hypot(got[1] - ref[1], got[2] - ref[2])[landed], initial=0.0)
    d_time = np.max(np.abs(got[3] - ref[3])[same], initial=0.0)
    return float(d_land), float(d_time), int(np.sum(~same))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed-points", type=int, default=161, help="launch speed axis length (config: 161)")
    parser.add_argument("--elevation-points", type=int, default=161, help="elevation axis length (config: 161)")
    parser.add_argument("--scipy-points", type=int, default=300, help="subsample: scipy loop and the reference")
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.speed_points, args.elevation_points, args.scipy_points = 21, 21, 40
    axes = {"topspin": {"values": list(TOPSPIN)}, "elevation": {"linspace": [*ELEVATION, args.elevation_points]},
            "launch_speed": {"linspace": [*SPEED, args.speed_points]}}
    spin, elevation, speed = (g.ravel() for g in np.meshgrid(
        np.array(TOPSPIN), np.linspace(*ELEVATION, args.elevation_points), np.linspace(*SPEED, args.speed_points),
        indexing="ij"))
    n = speed.size
    sub = np.unique(np.linspace(0, n - 1, min(args.scipy_points, n)).astype(int))
    start = time.perf_counter()
    ref = np.array([scipy_landing(speed[i], elevation[i], spin[i], "DOP853", 1e-13, 1e-15) for i in sub]).T
    reference_seconds = time.perf_counter() - start
    rows, differing = [], []
    names = {IN: "in", NET_FAULT: "net", OUT: "out", DOUBLE_BOUNCE: "second bounce"}

    def record(name, seconds, count, got):
        """got: (4, count) or (4, n) outcome, landing x, landing y, flight time."""
        got = np.asarray(got, float)
        got = got[:, sub] if got.shape[1] == n else got
        rows.append((name, count / seconds, *errors(got, ref)))
        pairs = [(names.get(a, "none"), names.get(b, "none")) for a, b in zip(ref[0], got[0], strict=True) if a != b]
        if pairs:
            found = sorted(set(pairs))
            differing.append(f"{name}: " + ", ".join(f"{a} -> {b}: {pairs.count((a, b))}" for a, b in found))

    from engine import SolverSettings, parse_sweep
    from engine.runner.cost import plan_for
    from engine.solve import evaluate
    from studies.rebound import LANDING

    # ---- the engine end to end; the untimed warm-up sweep (one spin) compiles the same batch
    solver = {"rtol": RTOL, "atol": ATOL, "t_max": T_MAX, "max_segments": MAX_SEGMENTS}

    def text(sweep_axes):
        return lambda out: sweep_text("rebound_landing", sweep_axes, outputs=OUTPUTS, out=out, solver=solver,
                                      run={"shard_size": SHARD_SIZE})

    cube, seconds, report = engine_end_to_end(text(axes), OUTPUTS, warmup=text(axes | {"topspin": {"values": [0.0]}}))
    end_to_end = "engine: rollsweep run, inline"
    record(end_to_end, seconds, n, [cube[k].ravel() for k in OUTPUTS])
    plan = plan_for(parse_sweep(text(axes)("unused.zarr")))

    # ---- the engine's compiled calls alone (compiled by the run above), and over batch sizes
    columns = {k: np.full(n, v) for k, v in LANDING.defaults.items()} | {
        "topspin": spin, "elevation": elevation, "launch_speed": speed}
    selected = in_study_order(LANDING, OUTPUTS)  # as the sweep file selects them
    settings = SolverSettings(rtol=RTOL, atol=ATOL, t_max=T_MAX, max_segments=MAX_SEGMENTS)
    result, seconds = best_of(lambda: evaluate(LANDING, settings, columns, outputs=selected, plan=plan), repeat=2,
                              warmup=False)
    record(f"engine: compiled calls only ({plan.solver.name}, batch {plan.batch}, width {plan.width}, "
           "one call at a time)",
           seconds, n,
           [result.outputs[k] for k in OUTPUTS])
    some = np.random.default_rng(0).permutation(n)[:4096]
    few = {k: v[some] for k, v in columns.items()}
    curve = []
    for size in (64, 256, 1024, 4096):
        _, seconds = best_of(lambda s=size: evaluate(LANDING, settings, few, s, outputs=selected), repeat=1)
        curve.append((size, some.size / seconds))

    # ---- the baselines
    start = time.perf_counter()
    got = np.array([scipy_landing(speed[i], elevation[i], spin[i]) for i in sub]).T
    record(f"scipy solve_ivp RK45 with events, Python loop ({sub.size} points)", time.perf_counter() - start,
           sub.size, got)

    plain = diffrax_landing()
    args_d = [jnp.asarray(a) for a in (speed, elevation, spin)]
    whole = plain.lower(*args_d).compile()  # compiled ahead: one timed call, no warm-up call of its size
    got, seconds = best_of(lambda: np.asarray(whole(*args_d)).T, repeat=1, warmup=False)
    record("jax.jit(jax.vmap(diffrax)), all points in one call", seconds, n, got)

    def by_chunks(size=1024):
        pad = (-n) % size
        padded = [jnp.asarray(np.concatenate([a, np.full(pad, a[0])])) for a in (speed, elevation, spin)]
        parts = [plain(*(a[i:i + size] for a in padded)) for i in range(0, n + pad, size)]
        return np.concatenate([np.asarray(p) for p in parts])[:n].T

    got, seconds = best_of(by_chunks, repeat=1)
    record("same, chunks of 1024 points", seconds, n, got)

    print_table(f"serve landing map, {len(TOPSPIN)} spins x {args.elevation_points} elevations x {args.speed_points}"
                f" speeds = {n:,} points, rtol {RTOL}, atol {ATOL}, float64; {machine()}", rows, end_to_end,
                ("max |d landing| m", "max |d time| s", "outcome differs"))
    print(f"errors: on {sub.size} points of the grid, against scipy solve_ivp DOP853 at rtol 1e-13, atol 1e-15"
          f" ({sub.size / reference_seconds:,.1f} points/s), over the points with the same outcome.")
    counts = np.bincount(np.nan_to_num(cube["outcome"].ravel(), nan=0).astype(int), minlength=5)
    print(f"engine outcomes: in {counts[1]:,}, net {counts[2]:,}, out {counts[3]:,}, second bounce on the near half"
          f" {counts[4]:,}, no result {counts[0]:,}")
    for line in differing:
        print(f"outcome differs (reference -> method), {line}")
    if report.failed_points:
        print(f"engine: {report.failed_points:,} points without a result")
    print(scaling_line("engine compiled calls by batch size, 4,096 random points of the grid", curve))


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"benchmark time: {time.perf_counter() - start:.0f} s")

"""Rolling hoop over track shapes: the engine against the ways a user might do it, one run.

The main sweep of the hoop study (configs/hoop_profiles.toml): a hoop (r = 0.01)
rolls on z = x^4 + a x^3 - b x^2 - a x - (1 - b) from contact x = 0 at speed 1;
the constraint-stabilised equations of Matrosov, Morozov, Pesterev (2021)
(state x, z, theta, x', z', theta', alpha; contact force, its moment and
alpha' chosen so that the constraint residuals decay at rate lambda = 1e3) are
integrated by the fixed-step RK2 (Heun) with h = 5e-5 over 12 time units
(240,000 steps, ~6 periods) per point, over a grid of (a, b). Outputs: the
mean period between right turning points, the turning points, the steady
residual, and the period by quadrature along the centre's curve
(period_reference), which every cube carries.

Methods: the engine end to end (`rollsweep run`, inline executor, into a
temporary zarr store; one run, after an untimed warm-up sweep that compiles
the same batch) and its compiled calls alone (engine.solve.evaluate);
numba: the same equations and Heun steps, written out in scalar code (njit,
parallel prange over points); jax.jit(jax.vmap(diffrax)) of the same
equations with diffrax's Heun at the same constant step, saving the state
every 1e-3 and finding the turning points on the samples; scipy solve_ivp
(RK45, events at x' = 0) on the same stabilised equations, over a subsample;
scipy solve_ivp (DOP853, events) on the plain one-degree-of-freedom ODE of the
rolling hoop (contact parameter xi: M |C'(xi)|^2 xi'^2 + M g Z(xi) = E0), the
way to the period alone, over a subsample.

Error: |period / period_reference - 1|, largest over the points a method ran
(period_reference from the engine's cube: Gauss-Chebyshev quadrature).

Run: python benchmarks/bench_hoop.py [--a-points N --b-points N]
"""

import argparse
import math
import time
import types
from math import atan2, cos, sin, sqrt

import numpy as np
from _common import best_of, engine_end_to_end, in_study_order, machine, numba, print_table, scaling_line, sweep_text

from engine._jax_setup import configure

configure()  # float64 (and the compile cache) before jax builds any array
import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

MASS, RADIUS, GRAVITY, LAM, XI0, SPEED = 1.0, 0.01, 9.81, 1e3, 0.0, 1.0  # the study's defaults
STEP, DURATION = 5e-5, 12.0  # configs/hoop_profiles.toml
A_RANGE, B_RANGE = (0.0, 0.3), (0.3, 0.7)  # configs/hoop_profiles.toml
OUTPUTS = ("period", "period_reference", "turn_left_x", "turn_right_x", "max_residual")
TURNING_RATE = 1e-3  # theta' below which the energy row blends into its turning-point limit (the study's)
SAVE_EVERY = 1e-3  # diffrax baseline: sampling of the trajectory


# ------------------------------------------------- the equations, scalar code
def stabilised_field(x, z, th, xd, zd, thd, al, a, b, M, r, g, lam, E0):
    """X' of the stabilised hoop: f1'' + 2 lam f1' + lam^2 f1 = 0 and fi' = -lam fi
    for the residuals f1 (contact), f2 (energy), f3 (no slip), f4 (alpha is the
    contact angle); the contact force (Rx, Rz) and moment Q by Cramer's rule,
    alpha' = U from the last constraint. Only + - * / and sin, cos, sqrt."""
    s, c = sin(al), cos(al)
    xa = x + r * c  # contact point x
    pa = (((xa + a) * xa - b) * xa - a) * xa - (1 - b)  # p(xa)
    hx = ((4 * xa + 3 * a) * xa - 2 * b) * xa - a  # p'(xa)
    hxx = (12 * xa + 6 * a) * xa - 2 * b  # p''(xa)
    f1 = pa - (z + r * s)
    f2 = M * (xd * xd + zd * zd) / 2 + M * r * r * thd * thd / 2 + M * g * z - E0
    f3 = -xd * s + zd * c + r * thd
    f4 = hx * s + c
    v_h_chi = -xd * hxx * s
    U = -(-v_h_chi + lam * f4) / (hx * c - s - hxx * s * s * r)
    phi1 = M * g + M * hxx * xd * xd + lam * lam * M * f1 + 2 * lam * M * (xd * hx - zd)
    eps2 = TURNING_RATE * TURNING_RATE
    scale, blend = thd / (thd * thd + eps2), eps2 / (thd * thd + eps2)
    # rows (a1 a2 a3), (b1 b2 b3), (c1 c2 c3) and right-hand side (r1, r2, r3) for (Rx, Rz, Q)
    a1, a2, a3 = hx, -1.0, 0.0
    b1, b2, b3 = xd * scale + r * s * blend, zd * scale - r * c * blend, thd * scale + blend
    c1, c2, c3 = -s, c, 1 / r
    r1 = -phi1 - v_h_chi * M * r * U
    r2 = -lam * f2 * scale
    r3 = M * g * c - lam * M * f3 + M * (xd * c + zd * s) * U
    det = a1 * (b2 * c3 - b3 * c2) - a2 * (b1 * c3 - b3 * c1) + a3 * (b1 * c2 - b2 * c1)
    Rx = (r1 * (b2 * c3 - b3 * c2) - a2 * (r2 * c3 - b3 * r3) + a3 * (r2 * c2 - b2 * r3)) / det
    Rz = (a1 * (r2 * c3 - b3 * r3) - r1 * (b1 * c3 - b3 * c1) + a3 * (b1 * r3 - r2 * c1)) / det
    Q = (a1 * (b2 * r3 - r2 * c2) - a2 * (b1 * r3 - r2 * c1) + r1 * (b1 * c2 - b2 * c1)) / det
    return xd, zd, thd, Rx / M, -g + Rz / M, Q / (M * r * r), U


def largest_residual(x, z, xd, zd, thd, al, a, b, M, r, g, E0):
    """max |f_i| of the four constraint residuals (contact, energy, no slip, contact angle)."""
    s, c = sin(al), cos(al)
    xa = x + r * c
    f1 = (((xa + a) * xa - b) * xa - a) * xa - (1 - b) - (z + r * s)
    f2 = M * (xd * xd + zd * zd) / 2 + M * r * r * thd * thd / 2 + M * g * z - E0
    f3 = -xd * s + zd * c + r * thd
    f4 = (((4 * xa + 3 * a) * xa - 2 * b) * xa - a) * s + c
    return max(abs(f1), abs(f2), abs(f3), abs(f4))


def initial_state(a, b, M, r, g, xi0, speed):
    """On top of the track at contact xi0, rolling forward along the tangent; and E0."""
    slope = ((4 * xi0 + 3 * a) * xi0 - 2 * b) * xi0 - a
    norm = sqrt(1 + slope * slope)
    height = (((xi0 + a) * xi0 - b) * xi0 - a) * xi0 - (1 - b)
    x, z, xd, zd, thd = xi0 - r * slope / norm, height + r / norm, speed / norm, speed * slope / norm, -speed / r
    energy = M * (xd * xd + zd * zd) / 2 + M * r * r * thd * thd / 2 + M * g * z
    return (x, z, 0.0, xd, zd, thd, atan2(-1 / norm, slope / norm)), energy


def heun_period(a, b, M, r, g, lam, xi0, speed, h, duration):
    """Fixed-step Heun; right turning points (x' from + to -) by linear interpolation
    in the step; the largest residual over the last 15% of the steps. Returns
    (period, smallest x, largest x, steady residual)."""
    (x, z, th, xd, zd, thd, al), E0 = initial_state(a, b, M, r, g, xi0, speed)
    n = max(round(duration / h), 1)
    steady_from = math.floor(0.85 * n)
    turns, first, last, x_min, x_max, steady = 0, math.nan, math.nan, x, x, 0.0
    for k in range(1, n + 1):
        k1 = stabilised_field(x, z, th, xd, zd, thd, al, a, b, M, r, g, lam, E0)
        k2 = stabilised_field(x + h * k1[0], z + h * k1[1], th + h * k1[2], xd + h * k1[3], zd + h * k1[4],
                              thd + h * k1[5], al + h * k1[6], a, b, M, r, g, lam, E0)
        xd_new = xd + h / 2 * (k1[3] + k2[3])
        if xd > 0 and xd_new <= 0:
            t_turn = (k - 1) * h + h * xd / (xd - xd_new)
            if turns == 0:
                first = t_turn
            last, turns = t_turn, turns + 1
        x, z, th = x + h / 2 * (k1[0] + k2[0]), z + h / 2 * (k1[1] + k2[1]), th + h / 2 * (k1[2] + k2[2])
        xd, zd, thd, al = xd_new, zd + h / 2 * (k1[4] + k2[4]), thd + h / 2 * (k1[5] + k2[5]), al + h / 2 * (
            k1[6] + k2[6])
        x_min, x_max = min(x_min, x), max(x_max, x)
        if k > steady_from:
            steady = max(steady, largest_residual(x, z, xd, zd, thd, al, a, b, M, r, g, E0))
    period = (last - first) / (turns - 1) if turns >= 2 else math.nan
    return period, x_min, x_max, steady


def numba_sweep():
    if numba is None:
        return None
    field = numba.njit(stabilised_field)
    start = numba.njit(initial_state)
    point = numba.njit(types.FunctionType(heun_period.__code__, heun_period.__globals__ | {
        "stabilised_field": field, "initial_state": start, "largest_residual": numba.njit(largest_residual)}))

    @numba.njit(parallel=True)
    def sweep(a, b, M, r, g, lam, xi0, speed, h, duration):
        out = np.empty((4, a.size))
        for i in numba.prange(a.size):
            out[0, i], out[1, i], out[2, i], out[3, i] = point(a[i], b[i], M, r, g, lam, xi0, speed, h, duration)
        return out

    return sweep


# ----------------------------------------------------------------- scipy
def scipy_stabilised(a, b):
    from scipy.integrate import solve_ivp

    X0, E0 = initial_state(a, b, MASS, RADIUS, GRAVITY, XI0, SPEED)

    def rhs(t, X):
        return stabilised_field(*X.tolist(), a, b, MASS, RADIUS, GRAVITY, LAM, E0)

    def right_turn(t, X):
        return X[3]

    right_turn.direction = -1
    sol = solve_ivp(rhs, (0.0, DURATION), X0, "RK45", rtol=1e-10, atol=1e-12, events=right_turn)
    t = sol.t_events[0]
    return (t[-1] - t[0]) / (t.size - 1) if t.size >= 2 else math.nan


def scipy_reduced(a, b):
    """The rolling hoop as one degree of freedom, the contact parameter xi: its centre
    C(xi) = (xi, p) + r n / |n| moves with C' = s(xi) (1, p') |...|, s = 1 - r p'' / (1 + p'^2)^1.5,
    and rolling without slip makes the kinetic energy M v^2: L = M A(xi) xi'^2 - M g Z(xi),
    A = |C'|^2 = s^2 (1 + p'^2), Z' = s p'; so xi'' = -(A' xi'^2 + g Z') / (2 A)."""
    from scipy.integrate import solve_ivp

    r, g = RADIUS, GRAVITY

    def parts(xi):
        p1 = ((4 * xi + 3 * a) * xi - 2 * b) * xi - a
        p2 = (12 * xi + 6 * a) * xi - 2 * b
        n2 = 1 + p1 * p1
        n3 = n2 * sqrt(n2)
        return p1, p2, n2, n3, 1 - r * p2 / n3

    def rhs(t, y):
        xi, w = y
        p1, p2, n2, n3, s = parts(xi)
        ds = -r * ((24 * xi + 6 * a) / n3 - 3 * p2 * p2 * p1 / (n3 * n2))
        A, dA = s * s * n2, 2 * s * ds * n2 + 2 * s * s * p1 * p2
        return [w, -(dA * w * w + g * s * p1) / (2 * A)]

    def right_turn(t, y):
        return y[1]

    right_turn.direction = -1
    _, _, n2, _, s = parts(XI0)
    sol = solve_ivp(rhs, (0.0, DURATION), [XI0, SPEED / (s * sqrt(n2))], "DOP853", rtol=1e-12, atol=1e-12,
                    events=right_turn)
    t = sol.t_events[0]
    return (t[-1] - t[0]) / (t.size - 1) if t.size >= 2 else math.nan


# ------------------------------------------------------- jit(vmap(diffrax))
def diffrax_periods():
    field = types.FunctionType(stabilised_field.__code__, stabilised_field.__globals__ | {
        "sin": jnp.sin, "cos": jnp.cos, "sqrt": jnp.sqrt})
    start = types.FunctionType(initial_state.__code__, initial_state.__globals__ | {
        "sqrt": jnp.sqrt, "atan2": jnp.arctan2})
    n = round(DURATION / STEP)
    ts = jnp.linspace(0.0, DURATION, round(DURATION / SAVE_EVERY) + 1)

    def point(a, b):
        X0, E0 = start(a, b, MASS, RADIUS, GRAVITY, XI0, SPEED)

        def vf(t, X, args):
            return jnp.stack(field(*X, a, b, MASS, RADIUS, GRAVITY, LAM, E0))

        sol = diffrax.diffeqsolve(diffrax.ODETerm(vf), diffrax.Heun(), 0.0, DURATION, STEP, jnp.stack(X0),
                                  stepsize_controller=diffrax.ConstantStepSize(), saveat=diffrax.SaveAt(ts=ts),
                                  max_steps=n + 16)
        return sol.ys[:, 3], sol.ys[:, 0]

    solve = jax.jit(jax.vmap(point))

    def periods(a, b):
        xd, x = (np.asarray(o) for o in solve(jnp.asarray(a), jnp.asarray(b)))
        dt = float(ts[1] - ts[0])
        out = np.full(a.size, np.nan)
        for i in range(a.size):
            # x' from + to - between samples k and k + 1: the root of the parabola through k - 1, k, k + 1
            k = np.flatnonzero((xd[i, 1:-1] > 0) & (xd[i, 2:] <= 0)) + 1
            y0, y1, y2 = xd[i, k - 1], xd[i, k], xd[i, k + 1]
            qa, qb = (y2 - 2 * y1 + y0) / 2, (y2 - y0) / 2
            tau = y1 / (y1 - y2)
            for _ in range(4):
                tau -= (qa * tau**2 + qb * tau + y1) / (2 * qa * tau + qb)
            t = (k + tau) * dt
            out[i] = (t[-1] - t[0]) / (t.size - 1) if t.size >= 2 else np.nan
        return out

    return periods


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a-points", type=int, default=13, help="a axis length, 0..0.3 (config: 7)")
    parser.add_argument("--b-points", type=int, default=9, help="b axis length, 0.3..0.7 (config: 5)")
    parser.add_argument("--scipy-points", type=int, default=2, help="points of scipy on the stabilised equations")
    parser.add_argument("--reduced-points", type=int, default=20, help="points of scipy on the plain ODE")
    parser.add_argument("--diffrax-points", type=int, default=16, help="points of the plain diffrax baseline")
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.a_points, args.b_points, args.scipy_points, args.reduced_points, args.diffrax_points = 4, 3, 1, 4, 4
    axes = {"a": {"linspace": [*A_RANGE, args.a_points]}, "b": {"linspace": [*B_RANGE, args.b_points]}}
    a, b = (g.ravel() for g in np.meshgrid(np.linspace(*A_RANGE, args.a_points), np.linspace(*B_RANGE, args.b_points),
                                           indexing="ij"))
    n = a.size
    rows = []

    from engine import SolverSettings, parse_sweep
    from engine.runner.cost import plan_for
    from engine.solve import evaluate
    from studies.hoop import STUDY

    # ---- the engine end to end: one run, with the engine's shards (the sweep sets
    # no shard_size: one call of the study's batch each, so 13 x 9 shapes are two
    # shards of 63 and 54, one for each core); the warm-up sweep is the same grid
    # over a short duration (the same compiled batch, not its run time)
    def text(duration):
        return lambda out: sweep_text("hoop", axes, outputs=OUTPUTS, out=out,
                                      parameters={"step": STEP, "duration": duration})

    cube, seconds, report = engine_end_to_end(text(DURATION), OUTPUTS, repeat=1, warmup=text(0.01))
    reference = cube["period_reference"].ravel()

    def record(name, seconds, periods, idx=slice(None), residual=None):
        periods = np.asarray(periods).ravel()
        rows.append((name, periods.size / seconds, float(np.max(np.abs(periods / reference[idx] - 1))),
                     int(np.sum(~np.isfinite(periods))), None if residual is None else float(np.max(residual))))

    end_to_end = "engine: rollsweep run, inline"
    record(end_to_end, seconds, cube["period"], residual=cube["max_residual"])
    batch = plan_for(parse_sweep(text(DURATION)("unused.zarr"))).batch

    # ---- the engine's compiled calls alone (compiled by the run above)
    columns = {k: np.full(n, x) for k, x in STUDY.defaults.items()} | {
        "a": a, "b": b, "step": np.full(n, STEP), "duration": np.full(n, DURATION)}
    settings, selected = SolverSettings(), in_study_order(STUDY, OUTPUTS)
    result, seconds = best_of(lambda: evaluate(STUDY, settings, columns, batch, outputs=selected), repeat=1,
                              warmup=False)
    record(f"engine: compiled calls only (batch {batch}, one call at a time)", seconds, result.outputs["period"],
           residual=result.outputs["max_residual"])
    # Scaling over batch sizes, on 32 points over 2 time units (40,000 steps a point).
    short = {k: v[:32] for k, v in columns.items()} | {"duration": np.full(min(n, 32), 2.0)}
    curve = []
    for size in (4, 8, 16, 32):
        _, seconds = best_of(lambda s=size: evaluate(STUDY, settings, short, s, outputs=selected), repeat=1)
        curve.append((size, short["a"].size / seconds))

    # ---- the baselines
    sweep = numba_sweep()
    if sweep is None:
        print("numba not installed: pip install numba (its baseline is skipped)")
    else:
        def numba_run(duration=DURATION):
            return sweep(a, b, MASS, RADIUS, GRAVITY, LAM, XI0, SPEED, STEP, duration)

        out, seconds = best_of(numba_run, repeat=1, warmup=lambda: numba_run(0.01))
        record(f"numba Heun, same equations and step, parallel prange ({numba.get_num_threads()} threads)",
               seconds, out[0], residual=out[3])

    sub = np.linspace(0, n - 1, min(args.diffrax_points, n)).astype(int)
    periods = diffrax_periods()
    out, seconds = best_of(lambda: periods(a[sub], b[sub]), repeat=1)
    record(f"jax.jit(jax.vmap(diffrax Heun, same step)) ({sub.size} points)", seconds, out, sub)

    sub = np.linspace(0, n - 1, min(args.scipy_points, n)).astype(int)
    out, seconds = best_of(lambda: [scipy_stabilised(a[i], b[i]) for i in sub], repeat=1, warmup=False)
    record(f"scipy solve_ivp RK45 rtol 1e-10, stabilised equations ({sub.size} points)", seconds, out, sub)

    sub = np.linspace(0, n - 1, min(args.reduced_points, n)).astype(int)
    out, seconds = best_of(lambda: [scipy_reduced(a[i], b[i]) for i in sub], repeat=1, warmup=False)
    record(f"scipy solve_ivp DOP853 rtol 1e-12, plain 1-dof ODE ({sub.size} points)", seconds, out, sub)

    print_table(f"rolling hoop, {args.a_points} x {args.b_points} track shapes (a, b) = {n} points, Heun h = {STEP},"
                f" {DURATION} time units ({round(DURATION / STEP):,} steps a point), float64; {machine()}", rows,
                end_to_end, ("max |T/T_ref - 1|", "no period", "steady max |f|"))
    print("T_ref: the engine's period_reference (quadrature along the centre's curve); 'no period': points without"
          " two right turning points; 'steady max |f|': largest constraint residual over the last 15% of the run"
          " (methods that track it).")
    if report.failed_points:
        print(f"engine: {report.failed_points} points without a result")
    print(scaling_line("engine compiled calls by batch size, 32 points over 2 time units", curve))


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"benchmark time: {time.perf_counter() - start:.0f} s")

"""Closed-form reference ("truth") for the rolling table-tennis ball model: the paper's analytical solution.

Written from the paper: Gao Yunfeng, "The roll of a table
tennis ball", Mechanics in Engineering 43(5), 2021, eqs. (2)-(8), with the sign
slip in the printed phase-1 xdot corrected.  Thin-walled sphere, SI units,
float64, numpy/scipy only, independent of the simulation engine under test.

Phase 1 (sliding, slip s = xdot - r*thetadot > 0, friction -mu m g, drag 2 beta):
    xdot  = (v0 + mu g/(2 beta)) exp(-2 beta t) - mu g/(2 beta)
    thetadot = thetadot0 + (3/2)(mu r - delta) g t / r^2,  thetadot0 = -q v0 / r
Phase 2 (rolling, xdot = r thetadot):  x'' = -c xdot - d,
    c = (6/5) beta,  d = (3/5) g lam delta / r,  lam = sign(u0),  u0 = xdot(t*).

The slide end t* (s(t*) = 0) has no closed form: it is a scalar root, found by
brentq on a proven bracket and polished with Newton steps to machine precision.
Everything else is closed form.  Formulas are written through the regular
functions e1, g2, h below (expm1/log1p based), so they stay accurate for small
beta*t and small c*u0/d and are valid down to beta = 0 (the frictionless-drag
limit), not only for beta > 0.

Parameters (keyword args, or one positional dict; missing ones fall back to
DEFAULTS): mass, radius, gravity, friction, rolling_resistance (a length),
drag (1/s), initial_speed, spin_ratio.  Requires radius > 0, drag >= 0,
rolling_resistance > 0, friction*radius > rolling_resistance, initial_speed > 0
and spin_ratio > -1 (so s(0) = v0 (1 + q) > 0).
"""
import math

from scipy.optimize import brentq

DEFAULTS = dict(mass=0.003, radius=0.02, gravity=9.8, friction=0.3,
                rolling_resistance=0.0002, drag=0.1, initial_speed=1.0,
                spin_ratio=1.0)
EPS = 2.220446049250313e-16


def _params(p, kw):
    P = {**DEFAULTS, **(p or {}), **kw}
    unknown = set(P) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown parameters: {sorted(unknown)}")
    r, mu, dl = P["radius"], P["friction"], P["rolling_resistance"]
    if not (r > 0 and P["drag"] >= 0 and dl > 0 and mu * r > dl
            and P["initial_speed"] > 0 and P["spin_ratio"] > -1):
        raise ValueError(f"parameters outside the model's validity: {P}")
    return P


def e1(y):  # (1 - exp(-y)) / y, -> 1 at y = 0
    return 1.0 if y == 0 else -math.expm1(-y) / y


def g2(y):  # (exp(-y) - 1 + y) / y^2, -> 1/2; series where expm1(-y)+y cancels
    if abs(y) < 0.1:
        return sum((-y) ** k / math.factorial(k + 2) for k in range(16))
    return (math.expm1(-y) + y) / (y * y)


def h(z):  # (z - log1p(z)) / z^2, -> 1/2; series where z - log1p(z) cancels
    if abs(z) < 0.1:
        return sum((-z) ** k / (k + 2) for k in range(20))
    return (z - math.log1p(z)) / (z * z)


def phase1_state(t, p=None, /, **kw):
    """(x, xdot, theta, thetadot) of the sliding phase at time t (valid t <= t*)."""
    P = _params(p, kw)
    v0, b, mu, g, r = (P["initial_speed"], P["drag"], P["friction"],
                       P["gravity"], P["radius"])
    y = 2.0 * b * t
    # x = (v0 + A)(1-e^{-y})/(2b) - A t with A = mu g/(2b), rewritten cancellation-free
    x = v0 * t * e1(y) - mu * g * t * t * g2(y)
    xdot = v0 * math.exp(-y) - mu * g * t * e1(y)
    alpha = 1.5 * (mu * r - P["rolling_resistance"]) * g / r**2  # theta''
    w0 = -P["spin_ratio"] * v0 / r
    return x, xdot, w0 * t + 0.5 * alpha * t * t, w0 + alpha * t


def slide_end_time(p=None, /, **kw):
    """t* with s(t*) = xdot - r*thetadot = 0, to ~1 ulp."""
    P = _params(p, kw)
    v0, q, b, mu, g, r = (P[k] for k in ("initial_speed", "spin_ratio", "drag",
                                         "friction", "gravity", "radius"))
    k = 1.5 * (mu - P["rolling_resistance"] / r) * g  # d(r thetadot)/dt > 0

    def s(t):
        _, xd, _, w = phase1_state(t, P)
        return xd - r * w

    def ds(t):  # s' = -2b xdot - mu g - k <= -k < 0, since xdot > -mu g/(2b)
        return -2.0 * b * phase1_state(t, P)[1] - mu * g - k

    # xdot <= v0 always, so s(t) <= v0(1+q) - k t: t_hi brackets the root
    t_hi = v0 * (1.0 + q) / k
    t = brentq(s, 0.0, t_hi, xtol=1e-300, rtol=4 * EPS, maxiter=500)
    for _ in range(4):  # Newton polish; stop once steps stop shrinking
        step = s(t) / ds(t)
        t -= step
        if abs(step) <= 2 * EPS * t:
            break
    return t


def roll_start_speed(p=None, /, **kw):
    """u0 = xdot(t*) = r thetadot(t*)."""
    P = _params(p, kw)
    return phase1_state(slide_end_time(P), P)[1]


def _rolling(P):
    """(u0, c, d, tau, rolling distance) of phase 2."""
    u0 = roll_start_speed(P)
    lam = math.copysign(1.0, u0) if u0 != 0 else 0.0
    c = 1.2 * P["drag"]
    d = 0.6 * P["gravity"] * lam * P["rolling_resistance"] / P["radius"]
    if u0 == 0:
        return u0, c, d, 0.0, 0.0
    z = c * u0 / d  # > 0 because lam = sign(u0)
    # tau = ln(1 + z)/c; since exp(-c tau) = 1/(1+z) the printed distance
    # (u0 + d/c)(1 - exp(-c tau))/c - d tau/c collapses to (u0 - d tau)/c
    # = (u0^2/d) h(z); both forms are written without cancellation for z -> 0
    tau = (u0 / d) * (math.log1p(z) / z if z != 0 else 1.0)  # beta = 0: u0/d
    return u0, c, d, tau, u0 * u0 / d * h(z)


def stop_time(p=None, /, **kw):
    """t* + tau: time at which the ball comes to rest."""
    P = _params(p, kw)
    return slide_end_time(P) + _rolling(P)[3]


def final_displacement(p=None, /, **kw):
    """x(t*) + rolling distance (can be ~0 or negative near critical spin)."""
    P = _params(p, kw)
    return phase1_state(slide_end_time(P), P)[0] + _rolling(P)[4]


def centre(t, p=None, /, **kw):
    """(x, xdot) of the centre at time t >= 0: sliding up to t*, rolling up to
    t* + tau (x'' = -c xdot - d from (x(t*), u0): the sliding phase's form with
    v0 -> u0, mu g -> d, 2 beta -> c), at rest after."""
    P = _params(p, kw)
    t_star = slide_end_time(P)
    if t <= t_star:
        return phase1_state(t, P)[:2]
    x_star = phase1_state(t_star, P)[0]
    u0, c, d, tau, distance = _rolling(P)
    if t >= t_star + tau:
        return x_star + distance, 0.0
    s = t - t_star
    y = c * s
    return x_star + u0 * s * e1(y) - d * s * s * g2(y), u0 * math.exp(-y) - d * s * e1(y)


def friction_margin(p=None, /, **kw):
    """max over rolling of |F| / (mu m g), F/m = (2/3) x'' + lam delta g / r."""
    P = _params(p, kw)
    u0, c, d, _, _ = _rolling(P)
    lam = math.copysign(1.0, u0) if u0 != 0 else 0.0
    a = lam * P["rolling_resistance"] * P["gravity"] / P["radius"]
    # x'' = -c xdot - d makes F affine in xdot, and xdot runs monotonically
    # from u0 to 0, so the max of |F| is at one of the two end points
    F = [2.0 / 3.0 * (-c * v - d) + a for v in (u0, 0.0)]
    return max(abs(f) for f in F) / (P["friction"] * P["gravity"])


def critical_spin_ratio(p=None, /, bracket=(1.0, 3.0), **kw):
    """q_c with final_displacement = 0 (ball stops where it started)."""
    P = {**DEFAULTS, **(p or {}), **kw}
    P.pop("spin_ratio")
    def f(q):
        return final_displacement(P, spin_ratio=q)
    return brentq(f, *bracket, xtol=1e-15, rtol=4 * EPS, maxiter=1000)


# Each output of the study with its closed form, for tests that check them all.
CLOSED_FORMS = [
    ("final_displacement", final_displacement), ("slide_end_time", slide_end_time),
    ("stop_time", stop_time), ("roll_start_speed", roll_start_speed),
]

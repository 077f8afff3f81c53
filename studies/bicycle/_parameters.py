"""Design parameters of the Whipple bicycle (Meijaard et al. 2007, Table 1).

Frame: origin at the rear contact point, x forward, z DOWN, so centres of mass
have negative z. Inertias are about each body's centre of mass. Names are the
field's usual symbols; defaults are the benchmark bicycle.
"""

import math
import pathlib
import re
import tomllib

import numpy as np

from engine import Constraint, Interval, Parameter

BENCHMARK_FILE = pathlib.Path(__file__).parent / "data" / "benchmark.toml"

# TOML layout of a design file -> flat parameter names.
_BODIES = {"rear_wheel": "R", "rear_frame": "B", "front_frame": "H", "front_wheel": "F"}


def load_design(path) -> dict:
    """Flatten a benchmark-style TOML design file into parameter names (IRxx, xB, ...).

    Raises ValueError naming the offending table and key.
    """
    path = pathlib.Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"not valid TOML: {err}") from None
    flat = {}
    for key, value in doc.items():
        if key in _BODIES:
            if not isinstance(value, dict):
                raise ValueError(f"{key} must be a table of the body's values ([{key}] with r, m, x, z, Ixx, ...), "
                                 f"got {value!r}")
            body = _BODIES[key]
            for field, number in value.items():
                # r, m, x, z -> rR, mR, ...; Ixx -> IRxx (body letter after the I)
                name = f"{field}{body}" if len(field) == 1 else f"I{body}{field[1:]}"
                flat[name] = _number(f"{key}.{field}", number)
        else:
            flat[key] = _number(key, value)
    return flat


def _number(key, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


BENCHMARK = load_design(BENCHMARK_FILE)

_ANY = Interval(-100.0, 100.0)
_POSITIVE = Interval(0.0, 1000.0, lower_open=True)
_NONNEGATIVE = Interval(0.0, 1000.0)
_HEIGHT = Interval(-10.0, 0.0)  # z down: a centre of mass above the ground has z <= 0

_SPEC = {
    "w": ("m", Interval(0.0, 10.0, lower_open=True), "wheelbase"),
    "c": ("m", Interval(-2.0, 2.0), "trail"),
    "lam": ("rad", Interval(-math.pi / 2, math.pi / 2, lower_open=True, upper_open=True), "steer axis tilt"),
    "g": ("m/s^2", Interval(0.0, 100.0, lower_open=True), "gravitational acceleration"),
    "rR": ("m", Interval(0.0, 5.0, lower_open=True), "rear wheel radius"),
    "mR": ("kg", _NONNEGATIVE, "rear wheel mass"),
    "IRxx": ("kg m^2", _NONNEGATIVE, "rear wheel inertia about a diameter"),
    "IRyy": ("kg m^2", _NONNEGATIVE, "rear wheel polar inertia"),
    "xB": ("m", _ANY, "rear frame (with rider) centre of mass, x"),
    "zB": ("m", _HEIGHT, "rear frame (with rider) centre of mass, z (down)"),
    "mB": ("kg", _POSITIVE, "rear frame (with rider) mass"),
    "IBxx": ("kg m^2", _NONNEGATIVE, "rear frame inertia, xx"),
    "IByy": ("kg m^2", _NONNEGATIVE, "rear frame inertia, yy"),
    "IBzz": ("kg m^2", _NONNEGATIVE, "rear frame inertia, zz"),
    "IBxz": ("kg m^2", _ANY, "rear frame inertia, xz"),
    "xH": ("m", _ANY, "front frame centre of mass, x"),
    "zH": ("m", _HEIGHT, "front frame centre of mass, z (down)"),
    "mH": ("kg", _NONNEGATIVE, "front frame (fork, handlebar) mass"),
    "IHxx": ("kg m^2", _NONNEGATIVE, "front frame inertia, xx"),
    "IHyy": ("kg m^2", _NONNEGATIVE, "front frame inertia, yy"),
    "IHzz": ("kg m^2", _NONNEGATIVE, "front frame inertia, zz"),
    "IHxz": ("kg m^2", _ANY, "front frame inertia, xz"),
    "rF": ("m", Interval(0.0, 5.0, lower_open=True), "front wheel radius"),
    "mF": ("kg", _NONNEGATIVE, "front wheel mass"),
    "IFxx": ("kg m^2", _NONNEGATIVE, "front wheel inertia about a diameter"),
    "IFyy": ("kg m^2", _NONNEGATIVE, "front wheel polar inertia"),
}


def _label(name: str, text: str) -> str:
    """A design parameter's display label in the paper's notation: "trail $c$",
    "rear frame inertia $I_{\\mathrm{B}xx}$", "steer axis tilt $\\lambda$"."""
    if name == "lam":
        symbol = r"\lambda"
    elif len(name) == 1:
        symbol = name
    elif name.startswith("I"):
        symbol = rf"I_{{\mathrm{{{name[1]}}}{name[2:]}}}"
    else:
        symbol = rf"{name[0]}_\mathrm{{{name[1]}}}"
    words = re.sub(r", (x|z|xx|yy|zz|xz)( \(down\))?$", "", text).replace("gravitational acceleration", "gravity")
    return f"{words} ${symbol}$"


PARAMETERS = tuple(
    Parameter(name, unit, BENCHMARK[name], allowed, f"{text} (Meijaard et al. 2007, Table 1)", name,
              label=_label(name, text))
    for name, (unit, allowed, text) in _SPEC.items()
) + (
    Parameter("v", "m/s", 5.0, Interval(-100.0, 100.0), "forward speed", "v", label=r"forward speed $v$"),
    Parameter("max_speed", "m/s", 10.0, Interval(0.0, 100.0, lower_open=True),
              "upper end of the speed range searched for weave, capsize and double-root speeds", "v_max",
              label=r"largest speed searched $v_\mathrm{max}$"),
)
DESIGN_NAMES = tuple(_SPEC)


def _principal_triangle(ixx, iyy, izz, ixz):
    """Principal moments of [[Ixx,0,Ixz],[0,Iyy,0],[Ixz,0,Izz]] obey the triangle inequality.

    A small relative slack admits bodies that are exactly planar (a thin wheel
    has Iyy = Ixx + Izz), which rounding would otherwise reject.
    """
    mean, half = (ixx + izz) / 2, np.hypot((ixx - izz) / 2, ixz)
    moments = [mean + half, mean - half, np.asarray(iyy, float)]
    total = sum(moments)
    slack = 1e-12 * np.maximum(total, 1e-300)
    return np.all([2 * m <= total + slack for m in moments], axis=0) & np.all([m >= -slack for m in moments], axis=0)


def _body(b, ixz=True):
    names = (f"I{b}xx", f"I{b}yy", f"I{b}zz", f"I{b}xz")
    return Constraint(
        names,
        lambda p: _principal_triangle(p[names[0]], p[names[1]], p[names[2]], p[names[3]]),
        f"inertia of body {b} is not physical: principal moments violate the triangle inequality",
    )


def _wheel(b):
    # A wheel's inertia is axisymmetric (Izz = Ixx): triangle inequality Iyy <= 2 Ixx.
    names = (f"I{b}xx", f"I{b}yy")
    return Constraint(
        names,
        lambda p: _principal_triangle(p[names[0]], p[names[1]], p[names[0]], 0.0),
        f"inertia of wheel {b} is not physical: I{b}yy must not exceed 2 I{b}xx",
    )


CONSTRAINTS = (_wheel("R"), _body("B"), _body("H"), _wheel("F"))

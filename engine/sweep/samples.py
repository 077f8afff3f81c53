"""A sampled design: a sweep's `[samples]` table, points drawn from input
distributions instead of (or besides) a grid.

The draws are made from the file alone (method, n, seed, distributions): the
whole design at once, as scipy.stats.qmc draws it, so a point's values never
depend on the shard or the machine that solves it. The cube gets a leading
`sample` dimension, each drawn parameter a coordinate along it. With
`[sensitivity]` the design is the sensitivity method's, drawn by SALib
(engine.sweep.sensitivity), and `n` is its base samples or trajectories.
"""

import collections.abc
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import threading

import numpy as np

from engine.errors import ConfigError
from engine.sweep import design_cache
from engine.sweep.sensitivity import Sensitivity

# The cube's dimension of a sampled design's points (its first).
SAMPLE = "sample"
METHODS = ("sobol", "halton", "lhs", "random")
# name -> the parameters a distribution takes, as a sweep file lists them
DISTRIBUTIONS = {
    "uniform": ("lower", "upper"),
    "normal": ("mean", "standard deviation"),
    "lognormal": ("mean of the log", "standard deviation of the log"),
    "truncnormal": ("mean", "standard deviation", "lower", "upper"),
    "triangular": ("lower", "mode", "upper"),
}
SAMPLES_KEYS = {"method", "n", "seed", "parameters"}
# Draws held in memory when a sweep is read (points x drawn parameters).
MAX_DRAWN_VALUES = 1 << 28  # 2 GiB of float64
# A unit draw of exactly 0 or 1 (Morris' grid has both ends as levels; an
# unscrambled Sobol' sequence starts at 0) has an infinite inverse CDF under
# a distribution unbounded on that side: it is moved this far into the open
# interval (0, 1) instead, where a normal's draw is its mean -+ 8.2 standard
# deviations. 2^-53 is below every other draw's distance from the ends
# (scipy's qmc draws are multiples of 2^-30 or 2^-64 away from 0 but at most
# 1 - 2^-53; numpy's random ones multiples of 2^-53), and only draws whose
# value would be infinite are moved: every finite draw stays bit for bit.
OPEN_EDGE = 2.0 ** -53


@dataclasses.dataclass(frozen=True)
class Samples:
    method: str  # scipy.stats.qmc's (METHODS); with `sensitivity`, the sensitivity method's
    n: int  # points drawn; with `sensitivity`, its base samples (sobol) or trajectories (morris)
    seed: int
    parameters: dict  # name -> {distribution: [arguments]}, in the file's order
    # The design a sensitivity analysis needs ([sensitivity]); None: scipy's
    # draws. Last, defaulted: a Samples made without it is what it was.
    sensitivity: Sensitivity | None = None

    @property
    def points(self) -> int:
        """The design's rows: the cube's `sample` dimension."""
        if self.sensitivity is None:
            return self.n
        return self.sensitivity.points(self.n, len(self.parameters))

    @functools.cached_property
    def unit(self) -> np.ndarray:
        """The design in the unit hypercube, (points, drawn parameters), read-only."""
        return self._design()["unit"]

    @functools.cached_property
    def draws(self) -> dict[str, np.ndarray]:
        """Each drawn parameter's values, one a point (row i of the design is
        sample i), read-only."""
        design = self._design()
        if "draws" not in design:
            design["draws"] = self._draws_of(design["unit"])
        return design["draws"]

    def _draws_of(self, unit: np.ndarray) -> dict[str, np.ndarray]:
        """The drawn parameters' values at the unit design `unit`, read-only."""
        return {name: _read_only(inverse_cdf(spec, unit[:, j]))
                for j, (name, spec) in enumerate(self.parameters.items())}

    def _key(self) -> str:
        return json.dumps([self.method, self.n, self.seed, self.parameters,
                           None if self.sensitivity is None else
                           [self.sensitivity.second_order, self.sensitivity.levels]])

    def _design(self) -> dict:
        """This design's entry in the process's cache (DESIGNS): a sweep is
        read more than once in a process (the run's file, then its cube's
        attributes; status, verify), and the bicycle's 25-parameter Sobol'
        design is 884,736 x 25 draws. Drawn here, or waited for where
        draw_ahead's thread draws it (its error raised here)."""
        key = self._key()
        with _LOCK:
            ahead = _AHEAD.get(key)
        if ahead is not None:
            try:
                ahead.result()  # in the cache once done
            finally:
                with _LOCK:
                    _AHEAD.pop(key, None)
        with _LOCK:
            design = _DESIGNS.pop(key, None)
        if design is None:
            design = {"unit": _read_only(self._unit())}
        with _LOCK:
            _DESIGNS[key] = design  # the most recent last
            while len(_DESIGNS) > DESIGNS_KEPT:
                del _DESIGNS[next(iter(_DESIGNS))]
        return design

    def _unit(self) -> np.ndarray:
        """The unit design, as an earlier process drew it with the same
        libraries (engine.sweep.design_cache), or drawn now and kept."""
        key, packages = self._key(), ("scipy",) + (("SALib",) if self.sensitivity is not None else ())
        unit = design_cache.load(key, packages)
        if unit is None:
            # Column-major: each parameter's draws are contiguous for its
            # inverse CDF (a strided column of 25 costs 25 times the memory
            # traffic), in memory and in the kept file alike.
            unit = np.asfortranarray(self._drawn_unit())
            design_cache.store(key, packages, unit)
        return unit

    def _drawn_unit(self) -> np.ndarray:
        if self.sensitivity is not None:
            return self.sensitivity.unit_design(self.parameters, self.n, self.seed)
        return unit_draws(self.method, self.n, len(self.parameters), self.seed)

    def draw_ahead(self) -> None:
        """Draw the design on a thread of its own (scipy.stats imported there,
        0.5-1.5 s), into the process's cache, for a run that needs its draws
        only once its tasks start: the run's planning, its program's load and
        its store's making go on meanwhile, and the first to ask for the draws
        waits for them. Nothing where they are drawn or being drawn."""
        key = self._key()
        with _LOCK:
            if key in _DESIGNS or key in _AHEAD:
                return
            _AHEAD[key] = future = concurrent.futures.Future()

        def draw():
            try:
                unit = _read_only(self._unit())
                draws = self._draws_of(unit)
                with _LOCK:
                    _DESIGNS[key] = {"unit": unit, "draws": draws}
                future.set_result(None)
            except BaseException as err:  # noqa: BLE001 - raised where the draws are asked for
                future.set_exception(err)

        threading.Thread(target=draw, name="rollsweep-draws", daemon=True).start()

    @property
    def drawn_later(self) -> collections.abc.Mapping:
        """The drawn parameters' names, their draws made only when one is read
        (the draws themselves: Samples.draws)."""
        return _Draws(self)

    def describe(self) -> str:
        if self.sensitivity is None:
            return f"{self.method} design of {self.n:,} points, seed {self.seed}"
        s = self.sensitivity
        design = "Saltelli's design" if s.method == "sobol" else f"Morris' trajectories ({s.levels} levels)"
        return (f"{design} (SALib) for {s.method} indices: {self.n:,} {s.bases}, {self.points:,} points, "
                f"seed {self.seed}")

    def __getstate__(self):
        # A sweep travels to workers and SLURM tasks: the draws are made again
        # there from the file's values, not sent (the bicycle's 25-parameter
        # Sobol' design is 177 MB).
        state = dict(self.__dict__)
        state.pop("draws", None)
        state.pop("unit", None)
        return state

    def canonical(self, draws_digested: bool = False) -> dict:
        """What makes the design: the file's method, n, seed and distributions,
        from which the draws are made again anywhere. Not the draws' bytes (a
        sha256 of 128 MB, 0.25-0.35 s, for 2^23 points of two parameters):
        whether a cube's draws are this process's (another scipy or numpy may
        draw otherwise) is checked where a run resumes it, against the
        checksums of the coordinates its shards wrote (engine.cube.prepare).
        `draws_digested`: as cubes made before 2026-11-29 hashed it, with the
        draws' digest (Sweep.config_hash_drawn)."""
        drawn = {}
        if draws_digested:
            design = self._design()
            if "digest" not in design:
                digest = hashlib.sha256()
                for values in self.draws.values():
                    digest.update(np.ascontiguousarray(values, dtype="<f8").tobytes())
                design["digest"] = digest.hexdigest()
            drawn = {"draws": design["digest"]}
        return {"method": self.method, "n": self.n, "seed": self.seed, "parameters": self.parameters, **drawn,
                # Only where there is one: a [samples] sweep's hash is what it was.
                **({"sensitivity": self.sensitivity.canonical()} if self.sensitivity else {})}


class _Draws(collections.abc.Mapping):
    """A design's drawn parameters by name, each one's draws made only when
    read (Samples.drawn_later): which parameters are drawn, asked without
    drawing them."""

    def __init__(self, samples: Samples):
        self._samples = samples

    def __getitem__(self, name):
        if name not in self._samples.parameters:
            raise KeyError(name)
        return self._samples.draws[name]

    def __contains__(self, name):
        return name in self._samples.parameters

    def __iter__(self):
        return iter(self._samples.parameters)

    def __len__(self):
        return len(self._samples.parameters)


# Designs kept by a process, most recent last: key -> {"unit", "draws",
# "digest"}, each made when first asked for (Samples._design); the designs
# being drawn on a thread (Samples.draw_ahead): key -> its Future.
_DESIGNS: dict[str, dict] = {}
_AHEAD: dict[str, concurrent.futures.Future] = {}
_LOCK = threading.Lock()
DESIGNS_KEPT = 2


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False  # shared by every Samples of the same design in the process
    return values


def unit_draws(method: str, n: int, d: int, seed: int) -> np.ndarray:
    """n points in the unit cube [0, 1)^d, scrambled and seeded (scipy.stats.qmc)."""
    from scipy.stats import qmc

    rng = np.random.default_rng(seed)
    if method == "random":
        return rng.random((n, d))
    engine = {"sobol": qmc.Sobol, "halton": qmc.Halton, "lhs": qmc.LatinHypercube}[method](d, rng=rng)
    return engine.random(n)


def inverse_cdf(spec: dict, unit: np.ndarray) -> np.ndarray:
    """The distribution's values at the unit draws `unit`: its inverse CDF,
    finite at draws of exactly 0 or 1 (OPEN_EDGE)."""
    (kind, args), = spec.items()
    if kind == "uniform":  # scipy.stats.uniform's ppf, bit for bit, without importing scipy.stats
        lower, scale = _uniform(args)
        values = np.multiply(unit, scale, dtype=np.float64)
        values += lower  # in place: one array made, not two (the same two roundings)
        return values
    law = distribution(spec)
    values = _ppf(law, unit)
    infinite = ~np.isfinite(values)
    if infinite.any():
        values[infinite] = law.ppf(np.clip(unit[infinite], OPEN_EDGE, 1.0 - OPEN_EDGE))
    return values


def _ppf(law, unit: np.ndarray) -> np.ndarray:
    """`law.ppf(unit)`, bit for bit, without scipy's per-element argument
    checks where every draw is inside (0, 1): scipy's generic ppf computes
    `_ppf(q, *shapes) * scale + loc` there, and spends 8 times as long on
    masks and copies around it (0.085 s of 884,736 uniform draws; this,
    0.01 s). Any draw at an end, or outside, takes scipy's own path."""
    dist = law.dist
    args, loc, scale = dist._parse_args(*law.args, **law.kwds)
    args = tuple(map(np.asarray, args))
    if not (np.all(dist._argcheck(*args)) and scale > 0 and unit.ndim == 1 and np.all((unit > 0) & (unit < 1))):
        return law.ppf(unit)
    return np.asarray(dist._ppf(unit, *args) * scale + loc, dtype=np.float64)


def _uniform(args) -> tuple[float, float]:
    """A uniform = [lower, upper]'s loc and scale, as scipy.stats.uniform(lower,
    upper - lower) holds them: its ppf is `q * scale + loc` at every q in
    [0, 1] (uniform's own ppf is q), its support (0 * scale + loc, 1 * scale +
    loc)."""
    return float(args[0]), float(args[1]) - float(args[0])


def support(spec: dict) -> tuple[float, float]:
    """The distribution's support, as scipy.stats gives it (a uniform's without
    importing scipy.stats: 0.5-1.5 s of a run)."""
    (kind, args), = spec.items()
    if kind == "uniform":
        loc, scale = _uniform(args)
        return 0.0 * scale + loc, 1.0 * scale + loc
    return distribution(spec).support()


def distribution(spec: dict):
    """The scipy.stats distribution a checked `{name: [arguments]}` table names."""
    from scipy import stats

    (kind, args), = spec.items()
    if kind == "uniform":
        return stats.uniform(args[0], args[1] - args[0])
    if kind == "normal":
        return stats.norm(args[0], args[1])
    if kind == "lognormal":
        return stats.lognorm(s=args[1], scale=math.exp(args[0]))
    if kind == "truncnormal":
        mean, sd, lower, upper = args
        return stats.truncnorm((lower - mean) / sd, (upper - mean) / sd, loc=mean, scale=sd)
    lower, mode, upper = args
    return stats.triang((mode - lower) / (upper - lower), loc=lower, scale=upper - lower)


def parse_samples(table: dict, study, axes_names, fixed_keys: dict, file,
                  sensitivity: Sensitivity | None = None) -> Samples | None:
    """The `[samples]` table checked: keys, method, n, seed, each distribution
    and its arguments, its support inside the parameter's allowed range (or
    truncated to it), a parameter drawn and also swept or fixed. With a
    `sensitivity` (the sweep's `[sensitivity]`), the design is its method's:
    `[samples]` gives its base samples, seed and distributions, no method."""
    def fail(key, reason):
        raise ConfigError(file, key, reason)

    if not table:
        if sensitivity is not None:
            fail("sensitivity", "needs [samples]: n (base samples, or trajectories for morris), seed and "
                 "[samples.parameters], the inputs' distributions")
        return None
    for key in table:
        if key not in SAMPLES_KEYS:
            fail(f"samples.{key}", f"unknown key (expected one of {sorted(SAMPLES_KEYS)})")
    if sensitivity is not None and "method" in table:
        fail("samples.method", f"means nothing with [sensitivity]: the design is {sensitivity.method}'s own "
             f"({'Saltelli' if sensitivity.method == 'sobol' else 'Morris'}'s, drawn by SALib); remove it")
    method = sensitivity.method if sensitivity is not None else table.get("method", "sobol")
    if sensitivity is None and method not in METHODS:
        fail("samples.method", f"{method!r} is not one of {METHODS}")
    n = table.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        fail("samples.n", f"must be a positive integer, got {n!r}")
    if method == "sobol" and n & (n - 1):
        below, above = 1 << (n.bit_length() - 1), 1 << n.bit_length()
        needs = "Saltelli's design on a Sobol' sequence needs" if sensitivity else \
            "a Sobol' sequence needs to keep its balance"
        fail("samples.n", f"{n:,} is not a power of two, which {needs}: use {below:,} or {above:,}" + (
            "" if sensitivity else " (or method = \"lhs\", \"halton\" or \"random\")"))
    if sensitivity is not None and n < 2:
        fail("samples.n", f"must be at least 2 for {method} indices (their confidence intervals resample the "
             f"{sensitivity.bases}), got {n}")
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        fail("samples.seed", f"must be a non-negative integer, got {seed!r}")
    drawn = table.get("parameters")
    if not isinstance(drawn, dict) or not drawn:
        fail("samples.parameters", "must be a table of at least one parameter and its distribution")
    points = n if sensitivity is None else sensitivity.points(n, len(drawn))
    if points * len(drawn) > MAX_DRAWN_VALUES:
        of = "" if sensitivity is None else f" ({n:,} x {sensitivity.group_size(len(drawn))})"
        fail("samples.n", f"{points:,} points{of} of {len(drawn)} drawn parameters exceed the limit of "
             f"{MAX_DRAWN_VALUES:,} drawn values")
    known = study.parameters_by_name
    if SAMPLE in known:
        fail("samples", f"study {study.name!r} has a parameter named {SAMPLE!r}, the sampled design's dimension")
    for name, spec in drawn.items():
        key = f"samples.parameters.{name}"
        if name not in known:
            fail(key, f"unknown parameter of study {study.name!r} (known: {', '.join(known)})")
        if name in axes_names:
            fail(key, f"{name!r} is also an axis in [axes]; a parameter is drawn or swept, not both")
        if name in fixed_keys:
            fail(key, f"{name!r} is also fixed ({fixed_keys[name]}); a drawn parameter cannot be fixed")
        _check_distribution(key, spec, known[name], fail)
    samples = Samples(method, n, seed, {name: {k: [float(a) for a in v] for k, v in spec.items()}
                                        for name, spec in drawn.items()}, sensitivity)
    if all(_inside(spec) and not known[name].integer for name, spec in samples.parameters.items()):
        # Every draw is inside its parameter's allowed range, as its support is
        # (checked above), and none need be a whole number: the draws wait
        # until a run or a reader needs them.
        return samples
    for name, values in samples.draws.items():
        outside = np.flatnonzero(~known[name].admitted(values))
        if outside.size:
            i = int(outside[0])
            fail(f"samples.parameters.{name}", f"draw {values[i]!r} (sample {i}) is outside the allowed range "
                 f"{known[name].domain}{known[name].unit_suffix}")
    return samples


def _inside(spec: dict) -> bool:
    """Whether every draw of the distribution lies in its support as
    _check_distribution checked it against the allowed range: a uniform's, its
    ppf `q * scale + loc` rounded monotonically in q, from loc at q = 0 to at
    most 1 * scale + loc (q < 1) or exactly it (q = 1). Others' draws are
    checked one by one."""
    return next(iter(spec)) == "uniform"


def _check_distribution(key, spec, parameter, fail) -> None:
    if not isinstance(spec, dict) or len(spec) != 1:
        fail(key, f"must be a table with exactly one of {', '.join(DISTRIBUTIONS)}")
    (kind, args), = spec.items()
    if kind not in DISTRIBUTIONS:
        fail(key, f"unknown distribution {kind!r} (expected one of {', '.join(DISTRIBUTIONS)})")
    names = DISTRIBUTIONS[kind]
    if not isinstance(args, list) or len(args) != len(names):
        fail(f"{key}.{kind}", f"must be [{', '.join(names)}]")
    for i, a in enumerate(args):
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a):
            fail(f"{key}.{kind}[{i}]", f"the {names[i]} must be a finite number, got {a!r}")
    if kind in ("normal", "lognormal", "truncnormal") and not args[1] > 0:
        fail(f"{key}.{kind}[1]", f"the standard deviation must be positive, got {args[1]!r}")
    if kind in ("uniform", "truncnormal") and not args[-2] < args[-1]:
        fail(f"{key}.{kind}", f"the lower bound {args[-2]!r} must be below the upper {args[-1]!r}")
    if kind == "triangular" and not (args[0] <= args[1] <= args[2] and args[0] < args[2]):
        fail(f"{key}.{kind}", "must be [lower, mode, upper] with lower <= mode <= upper and lower < upper")
    lower, upper = support(spec)
    allowed = parameter.allowed
    leaves = lower < allowed.lower or upper > allowed.upper or (allowed.lower_open and lower == allowed.lower) or (
        allowed.upper_open and upper == allowed.upper)
    if leaves:
        hint = "truncnormal = [mean, sd, lower, upper] within it" if kind in ("normal", "lognormal") else \
            "bounds within it"
        fail(key, f"{kind} reaches [{lower:g}, {upper:g}], beyond the allowed range "
             f"{parameter.domain}{parameter.unit_suffix}: give {hint}")

"""The study interface: parameters, outputs and the per-point function.

A study is data plus one pure function. The engine vmaps and jits the function
over parameter points; the study never loops over points.
"""

import dataclasses
import functools
import importlib.metadata
import importlib.resources
import math
import pathlib
import re
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from engine.pytree import PytreeDataclass

ENTRY_POINT_GROUP = "rollsweep.studies"


@dataclasses.dataclass(frozen=True)
class Interval:
    """An allowed range, closed unless marked open: Interval(0, 1, lower_open=True) is (0, 1]."""

    lower: float = -math.inf
    upper: float = math.inf
    lower_open: bool = False
    upper_open: bool = False

    def __contains__(self, value: float) -> bool:
        return bool(self.holds(value))

    def holds(self, values):
        """Elementwise membership (numbers or arrays; NaN is never inside)."""
        above = values > self.lower if self.lower_open else values >= self.lower
        below = values < self.upper if self.upper_open else values <= self.upper
        return above & below

    def __str__(self) -> str:
        left = "(" if self.lower_open else "["
        right = ")" if self.upper_open else "]"
        return f"{left}{self.lower:g}, {self.upper:g}{right}"


def dimensionless(unit: str) -> bool:
    """Whether `unit` says "no unit" ("1" or nothing)."""
    return unit in ("", "1")


def unit_suffix(unit: str) -> str:
    """" m/s" after a value; nothing for a dimensionless quantity (unit "1")."""
    return "" if dimensionless(unit) else f" {unit}"


def readable(name: str) -> str:
    """A display label from an identifier: its underscores as spaces."""
    return name.replace("_", " ").strip() or name


def with_unit(label: str, unit: str) -> str:
    """An axis label: "label [unit]" (powers raised: m/s$^{2}$), or the label
    alone for a dimensionless quantity."""
    if dimensionless(unit):
        return label
    return f"{label} [{_POWER.sub(_RAISED, unit)}]"


_POWER, _RAISED = re.compile(r"\^(-?[0-9]+)"), r"$^{\1}$"


def _default_label(declared) -> None:
    # A frozen dataclass: the readable default is set once, where no label was given.
    if not declared.label:
        object.__setattr__(declared, "label", readable(declared.name))


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One scalar input of a study. `symbol` and `source` say where it comes from.

    label: what figures print (matplotlib mathtext allowed, e.g.
    r"rolling resistance $\\delta$"); by default the name, underscores as spaces."""

    name: str
    unit: str
    default: float
    allowed: Interval
    description: str
    symbol: str = ""
    integer: bool = False  # only whole numbers (e.g. a model selector)
    label: str = ""

    def __post_init__(self):
        _default_label(self)
        if not self.admits(self.default):
            raise ValueError(f"default of {self.name!r} lies outside {self.allowed}")

    def admits(self, value: float) -> bool:
        return bool(self.admitted(np.asarray(value, dtype=float)))

    def admitted(self, values, xp=np):
        """Elementwise admits, for a whole axis at once (a 10^5-value axis
        checked value by value cost ~0.1 s of every run); xp=jax.numpy checks
        traced values inside a compiled call the same way."""
        inside = self.allowed.holds(values)
        return inside & xp.isfinite(values) & (values == xp.round(values)) if self.integer else inside

    @property
    def axis_label(self) -> str:
        """The label with its unit, as an axis or a colour bar shows it."""
        return with_unit(self.label, self.unit)

    @property
    def domain(self) -> str:
        return f"{self.allowed}{' (whole numbers)' if self.integer else ''}"

    @property
    def unit_suffix(self) -> str:
        return unit_suffix(self.unit)


# An output's dimension of the sweep's sample times (`[save] times`), e.g.
# Output("x", "m", "...", dims=(TIME,)): a point's states where it passed them.
TIME = ("time", None)


@dataclasses.dataclass(frozen=True)
class Output:
    """One result of a study.

    dims: extra dimensions, each (name, size) or (name, labels) where labels
    (a tuple of strings) become the dimension's coordinate, e.g.
    ("mode", ("weave", "weave_conjugate", "capsize", "caster")); or TIME, the
    sweep's sample times (`[save] times`: the cube's `time` coordinate), last.
    optional: NaN is a legitimate value meaning "absent" (e.g. no weave speed
    in the searched range), not a failure of the point.
    label: what figures print (matplotlib mathtext allowed, e.g.
    r"$\\max_i |f_i|$"); by default the name, underscores as spaces.
    """

    name: str
    unit: str
    description: str
    dims: tuple[tuple[str, int | tuple[str, ...]], ...] = ()
    optional: bool = False
    label: str = ""

    @property
    def axis_label(self) -> str:
        """The label with its unit, as an axis or a colour bar shows it."""
        return with_unit(self.label, self.unit)

    def __post_init__(self):
        _default_label(self)
        sampled = [i for i, dim in enumerate(self.dims) if dim == TIME]
        if sampled and sampled != [len(self.dims) - 1]:
            raise ValueError(f"output {self.name!r}: TIME must be its last dimension, and only once")

    @property
    def sampled(self) -> bool:
        """Whether the output holds a point's values at the sweep's sample times."""
        return TIME in self.dims

    @property
    def shape(self) -> tuple[int, ...]:
        if self.sampled:
            raise ValueError(f"output {self.name!r} is sampled at a sweep's times: its shape is shape_at(times)")
        return self.shape_at(0)

    def shape_at(self, times: int) -> tuple[int, ...]:
        """The shape of one point's value where the sweep samples `times` times."""
        return tuple(times if (name, n) == TIME else n if isinstance(n, int) else len(n) for name, n in self.dims)

    @property
    def unit_suffix(self) -> str:
        return unit_suffix(self.unit)

    @property
    def labels(self) -> dict[str, tuple[str, ...]]:
        return {name: n for name, n in self.dims if isinstance(n, tuple)}


@dataclasses.dataclass(frozen=True)
class Constraint:
    """A condition on several parameters together, checked on every grid point
    before a run: `holds(params) -> bool array` on numpy arrays."""

    parameters: tuple[str, ...]
    holds: Callable
    message: str


class PointResult(PytreeDataclass):
    """What a study's per-point function returns (a pytree of JAX scalars/arrays)."""

    outputs: dict
    status: jax.Array  # int8, a `Status` code
    num_steps: jax.Array = dataclasses.field(default_factory=lambda: jnp.asarray(0, jnp.int32))
    num_events: jax.Array = dataclasses.field(default_factory=lambda: jnp.asarray(0, jnp.int32))


# eq=False: a study is a singleton, hashed by identity (it keys compile caches).
@dataclasses.dataclass(frozen=True, eq=False)
class Study:
    """A registered study.

    `solve_point(params, settings) -> PointResult` is pure: `params` maps each
    parameter name to a scalar, `settings` is a `SolverSettings`.
    `figures(ds) -> dict[str, matplotlib.figure.Figure]` draws its standard figures.
    `demo_configs` are TOML texts: small versions of the study's main figures.
    """

    name: str
    title: str
    source: str
    version: str
    parameters: tuple[Parameter, ...]
    outputs: tuple[Output, ...]
    solve_point: Callable
    figures: Callable | None = None
    demo_configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    constraints: tuple[Constraint, ...] = ()
    # Optional reader of a study-specific parameter file (a sweep's `parameter_file`):
    # path -> {parameter name: value}.
    read_parameter_file: Callable | None = None
    # Points per compiled call on CPU when a sweep does not say. None: the engine's
    # small default, right for vmapped solver loops that run in lockstep; a study
    # without a loop (a closed-form map) gains from wide calls.
    batch_size: int | None = None
    # The study's own `[solver]` values (e.g. {"max_segments": 200} for a model with
    # many events), checked like a sweep's; a sweep's `[solver]` table overrides them.
    solver_defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)
    # The unit of the solve's time (the cube's `time` coordinate), and the
    # times its sampled outputs (Output dims TIME) are sampled at where a sweep
    # selects one and gives no `[save] times`: a table as `[save] times` takes,
    # e.g. {"linspace": [0.0, 2.0, 201]}.
    time_unit: str = "s"
    save_times: Mapping[str, object] | None = None

    def parameter(self, name: str) -> Parameter:
        return self.parameters_by_name[name]

    @property
    def parameters_by_name(self) -> dict[str, Parameter]:
        return {p.name: p for p in self.parameters}

    @property
    def outputs_by_name(self) -> dict[str, Output]:
        return {o.name: o for o in self.outputs}

    @property
    def defaults(self) -> dict[str, float]:
        return {p.name: p.default for p in self.parameters}

    def __reduce__(self):
        # A registered study travels by name (to a dask worker, a SLURM task's
        # resolved sweep) and is the same singleton there; another study (one
        # a notebook built) travels by value.
        try:
            registered = load_study(self.name) is self
        except Exception:  # noqa: BLE001 - no such entry point, or it does not load here
            registered = False
        if registered:
            return load_study, (self.name,)
        return super().__reduce__()


def demo_configs(package: str, folder: str = "demo") -> dict[str, str]:
    """The TOML texts in a study package's demo folder, by file stem."""
    files = importlib.resources.files(package) / folder
    return {f.name.removesuffix(".toml"): f.read_text() for f in files.iterdir() if f.name.endswith(".toml")}


class StudyLoadError(RuntimeError):
    """A registered study's plugin failed to load (its module raised, or it names
    no Study): one line naming the study, its entry point and the error."""


def available_studies() -> dict[str, Callable[[], Study]]:
    """Study loaders registered under the `rollsweep.studies` entry-point group.
    A loader raises StudyLoadError where its plugin fails: one broken plugin
    is that study's error, never every study's."""
    return {ep.name: functools.partial(_load_plugin, ep)
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_plugin(entry_point) -> Study:
    where = f"study {entry_point.name!r} (entry point {entry_point.value})"
    try:
        study = entry_point.load()
    except Exception as err:  # noqa: BLE001 - a plugin's import may raise anything; named, not a traceback
        raise StudyLoadError(f"{where} failed to load: {_one_line(err)}") from err
    if not isinstance(study, Study):
        raise StudyLoadError(f"{where} names a value of type {type(study).__name__!r}, not an engine Study")
    return study


def _one_line(err: BaseException) -> str:
    """`Type: message (file:line)`: the message's first line, and where the
    plugin's own code raised (the innermost frame outside the import machinery)."""
    import traceback

    message = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    text = f"{type(err).__name__}: {message}" if message else type(err).__name__
    if isinstance(err, SyntaxError):  # its message already says where
        return text
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith("<") and "importlib" not in pathlib.PurePath(f.filename).parts
              and f.filename != __file__]
    return text + (f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else "")


@functools.lru_cache(maxsize=1)
def _registered() -> dict[str, Callable[[], Study]]:
    # Scanning the installed distributions takes ~10 ms, paid by every sweep parsed.
    return available_studies()


def load_study(name: str) -> Study:
    loaders = _registered()
    if name not in loaders:
        _registered.cache_clear()  # perhaps installed since the last scan
        loaders = _registered()
    if name not in loaders:
        known = ", ".join(sorted(loaders)) or "none registered"
        raise KeyError(f"unknown study {name!r} (known: {known})")
    return loaders[name]()

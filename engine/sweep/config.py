"""Sweep files (TOML): parsing and validation.

Every problem is reported as a `ConfigError` naming the file, the key and the
reason, before anything is computed or written.
"""

import dataclasses
import functools
import hashlib
import json
import math
import os
import pathlib
import sys
import tomllib

import numpy as np

from engine.errors import ConfigError
from engine.limits import MAX_POINTS, MAX_SHARDS, MAX_WORKERS
from engine.study.interface import Study, load_study
from engine.sweep.layout import Layout, chunk_shape
from engine.sweep.resources import checked as check_slurm_table
from engine.sweep.samples import SAMPLE, Samples, parse_samples
from engine.sweep.sensitivity import Sensitivity, parse_sensitivity
from engine.sweep.settings import DTYPES, SOLVERS, SolverSettings, times_digest, tolerance_ceiling, tolerance_floor

TOP_LEVEL_KEYS = {"study", "outputs", "parameter_file", "parameters", "axes", "solver", "critical", "run", "slurm",
                  "save", "samples", "sensitivity"}
RUN_KEYS = {"shard_size", "batch_size", "batch_solver", "out", "executor", "workers"}
EXECUTORS = ("local", "inline", "slurm")
CRITICAL_KEYS = {"output", "axis", "bracket", "target", "xtol"}
MAX_AXIS_LENGTH = 10_000_000  # an axis is held in memory when the sweep is read
# Sample times a point: each is a constant of the compiled program and a
# column of every point's sampled outputs.
MAX_SAVE_TIMES = 100_000
# Points per shard at least, when neither the sweep nor the study says.
SHARD_SIZE = 4096
# A sweep that sets no shard_size is cut into about this many shards, each at
# least SHARD_SIZE points (or the study's batch) and at most MAX_DEFAULT_SHARD.
SHARDS_PER_SWEEP = 16
MAX_DEFAULT_SHARD = 1 << 20
# The samples of a shard (its points' sampled outputs, `[save] times`) when
# neither the sweep nor the study sets its size: 2^16 points of 201 samples of
# two outputs are 206 MiB, so a million such points are 16 shards as a million
# points without samples are.
MAX_SAMPLED_SHARD_BYTES = 256 << 20
# Step and segment counters are int32 on the device; far below that, a point that
# needs more than this many steps per segment is better given looser tolerances.
MAX_STEPS = 10_000_000
MAX_SEGMENTS = 100_000
# Grid points a constraint is evaluated on at once (engine.study.Constraint): a
# constrained grid of 10^10 points is checked 512 KiB columns at a time, never
# in columns of 80 GB a parameter.
CONSTRAINT_CHUNK = 1 << 16
# Combinations a constraint is checked on above which the check says so (256
# chunks: a second or more; 10^10 take minutes).
CONSTRAINT_NOTICE = 1 << 24
# What the loosest tolerance allows (engine.sweep.settings.tolerance_ceiling), as
# a refusal says it.
LOOSEST = {"rtol": "a step {:.0%} off", "atol": "an error of {:g} a step in states of order one"}
# exponents of 10 that stay normal, finite float64 values
LOG_EXPONENTS = (-307.0, 308.0)
# Out paths that are virtual file systems: writing a store there fails or does harm.
VIRTUAL_ROOTS = ("/proc", "/sys", "/dev")


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str
    values: np.ndarray
    spec: dict  # as written, e.g. {"linspace": [0.0, 3.0, 3001]}


@dataclasses.dataclass(frozen=True)
class Critical:
    output: str
    axis: str
    bracket: tuple[float, float]
    target: float
    xtol: float


@dataclasses.dataclass(frozen=True)
class Sweep:
    file: str
    text: str
    study: Study
    outputs: tuple[str, ...]  # the study's outputs this cube holds
    parameters: dict  # every parameter not swept: the study's default or the override
    axes: tuple[Axis, ...]
    solver: SolverSettings
    critical: Critical | None
    shard_size: int
    batch_size: int | None
    out: pathlib.Path
    executor: str
    workers: int | None
    slurm: dict
    # The batch solver asked for (engine.solve.SOLVERS; None: the device's
    # choice, engine.solve.plan.default_solver). Last: a sweep made in code
    # before it existed still builds.
    batch_solver: str | None = None
    # A sampled design ([samples]): its draws, the leading `sample` axis's
    # coordinates. None: a grid.
    samples: Samples | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def save_times(self) -> tuple[float, ...]:
        return self.solver.save_times

    @property
    def sensitivity(self) -> Sensitivity | None:
        """The sweep's `[sensitivity]` (its design is its samples')."""
        return self.samples.sensitivity if self.samples is not None else None

    def output_shape(self, name: str) -> tuple[int, ...]:
        """One point's value of output `name` in this sweep (its sample times counted)."""
        return self.study.outputs_by_name[name].shape_at(len(self.save_times))

    def run_executor(self, executor: str | None = None, scheduler=None) -> str:
        """The executor a run of this sweep takes: dask's ("local") on an existing
        cluster's `scheduler`, else the one asked for, else the sweep file's."""
        return "local" if scheduler else (executor or self.executor)

    def point_params(self, names, columns, n: int, kinds_only: bool = False) -> dict:
        """The parameters of `n` points: the axes `names` as their `columns`, and
        every fixed parameter as one value seen n times (a read-only view, not n
        copies: a shard of 2^20 points wrote 8 MiB for each, and the solver
        recognises it as fixed: engine.solve.evaluate). `kinds_only`: arguments
        of the same kinds, where values do not matter (a program made ready
        ahead of its calls): a drawn parameter a column of its default, its
        draws not waited for."""
        params = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in self.parameters.items()}
        params.update(dict(zip(names, columns, strict=True)))
        if self.samples is not None:  # the sample index: the drawn parameters' values there
            index = params.pop(SAMPLE)
            if kinds_only:
                params.update({name: np.full(n, float(self.study.parameter(name).default))
                               for name in self.samples.parameters})
            else:
                params.update({name: values[index[:n]] for name, values in self.samples.draws.items()})
        return params

    def canonical(self, draws_digested: bool = False) -> dict:
        """Everything that determines the cube's values and layout (not where or
        how it runs). A sampled design's `sample` axis by its length alone (its
        values are its index) and its design by the file's values
        (Samples.canonical); `draws_digested`: both by their values' digests, as
        cubes made before 2026-11-29 hashed them (config_hash_drawn)."""
        return {
            "study": self.study.name,
            "outputs": list(self.outputs),
            "parameters": {k: float(v) for k, v in sorted(self.parameters.items())},
            # The values' exact float64 bytes, hashed (a million values as JSON text
            # took a second to hash).
            "axes": [[a.name, len(a.values)] if self.samples is not None and a.name == SAMPLE and not draws_digested
                     else [a.name, len(a.values), _digest(a.values)] for a in self.axes],
            "solver": self.solver.asdict(),
            # Sample times, where there are some (cubes without keep their hash).
            **({"save_times": [len(self.solver.save_times), times_digest(self.solver.save_times)]}
               if self.solver.save_times else {}),
            "critical": dataclasses.asdict(self.critical) if self.critical else None,
            "shard_size": self.shard_size,
            # Another solver's results differ in their last digits: a cube is not
            # resumed by another. (Only where asked for: the cubes made before
            # the key keep their hash.)
            **({"batch_solver": self.batch_solver} if self.batch_solver else {}),
            **({"samples": self.samples.canonical(draws_digested)} if self.samples else {}),
        }

    @functools.cached_property
    def config_hash(self) -> str:
        # Cached: it hashes every axis value, and each shard's task key uses it.
        return config_hash_of(self.canonical())

    @functools.cached_property
    def config_hash_drawn(self) -> str | None:
        """A sampled sweep's hash as a cube made before 2026-11-29 records it
        (its draws and sample index digested: canonical(draws_digested=True)),
        which is this sweep's cube too; None for a grid (its hash never changed)."""
        if self.samples is None:
            return None
        return config_hash_of(self.canonical(draws_digested=True))

    def matches_hash(self, found_hash) -> bool:
        """Whether a cube's config_hash attribute `found_hash` is this sweep's
        (in the current form, or a sampled sweep's earlier one)."""
        return found_hash == self.config_hash or (self.samples is not None and found_hash == self.config_hash_drawn)


def config_hash_of(canonical: dict) -> str:
    """A cube's config_hash: the sha256 of a sweep's canonical form (Sweep.canonical) as JSON."""
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def _digest(values) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f8").tobytes()).hexdigest()


def load_sweep(path, *, out=None, writes=True) -> Sweep:
    """`writes`: the cube will be written (its out path is checked); False for a
    command that only reads the sweep."""
    path = pathlib.Path(path)
    try:
        text = path.read_bytes().decode()
    except OSError as err:
        raise ConfigError(path, "<file>", f"cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(path, "<file>", f"not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                          f"{err.start})") from None
    sweep = parse_sweep(text, file=path, out=out)
    if writes:
        check_out(sweep.out, path, "run.out" if out is None else "--out")
    return sweep


def check_workers(workers, file="<command line>", key="--workers") -> None:
    """A worker count given on the command line or in [run]."""
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(file, key, f"must be an integer from 1 to {MAX_WORKERS}, got {workers!r}")


def check_out(out, file, key) -> None:
    """Refuse an out path that can never hold a store, before anything is written:
    one inside a regular file, on a virtual file system, or in a folder this
    process cannot write. (An existing folder that is not a cube is refused when
    the store is prepared, naming what is there.)"""
    if os.path.islink(out) and not os.path.exists(out):
        raise ConfigError(file, key, f"{out} is a link to {os.readlink(out)}, which does not exist; choose another "
                          "path or make its target")
    path = pathlib.Path(os.path.abspath(out))
    if any(path == pathlib.Path(root) or pathlib.Path(root) in path.parents for root in VIRTUAL_ROOTS):
        raise ConfigError(file, key, f"{out} is on a virtual file system ({path.parts[1]}); choose another path")
    if path.exists() and not path.is_dir():
        raise ConfigError(file, key, f"{out} exists and is not a folder; choose another path")
    parent = next(p for p in path.parents if p.exists())
    if not parent.is_dir():
        raise ConfigError(file, key, f"{out} is inside {parent}, which is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(file, key, f"{out}: the folder {parent} is not writable")


def parse_sweep(text: str, *, file="<string>", out=None) -> Sweep:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(file, "<syntax>", f"not valid TOML: {err}") from None
    check = _Checker(file)
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(file, key, f"unknown table or key (expected one of {sorted(TOP_LEVEL_KEYS)})")

    study_name = check.typed(doc, "study", str, required=True)
    try:
        study = load_study(study_name)
    except KeyError as err:
        raise ConfigError(file, "study", err.args[0]) from None

    known = study.parameters_by_name
    from_file, table = check.parameter_file(doc, study), check.table(doc, "parameters")
    overrides = from_file | table  # [parameters] wins over the file
    source = {name: "parameter_file" for name in from_file} | {name: "parameters" for name in table}
    axes_doc = check.table(doc, "axes")
    for name, value in overrides.items():
        key = f"{source[name]}.{name}"
        if name not in known:
            raise ConfigError(file, key, f"unknown parameter of study {study.name!r} (known: {', '.join(known)})")
        if name in axes_doc:
            raise ConfigError(file, key, f"{name!r} is also an axis in [axes]; a swept parameter cannot be fixed")
        check.value_in_range(key, value, known[name])
    sensitivity = parse_sensitivity(check.table(doc, "sensitivity"), study, file)
    samples = parse_samples(check.table(doc, "samples"), study, axes_doc,
                            {name: f"{source[name]}.{name}" for name in overrides}, file, sensitivity)
    if not axes_doc and samples is None:
        raise ConfigError(file, "axes", "no axis given: a sweep needs at least one swept parameter (or [samples])")
    axes = tuple(check.axis(name, spec, known) for name, spec in axes_doc.items())
    if samples is not None:  # the design's leading dimension: its points' index, the draws its coordinates
        axes = (Axis(SAMPLE, np.arange(samples.points), {"samples": samples.points}),) + axes
    check.grid_size(axes)
    drawn = samples.drawn_later if samples is not None else {}  # drawn where a constraint reads them
    parameters = {n: float(overrides.get(n, p.default)) for n, p in known.items()
                  if n not in axes_doc and n not in drawn}
    check_constraints(file, study, parameters, axes[1:] if samples is not None else axes,
                      {name: f"{source[name]}.{name}" for name in overrides}, drawn)
    outputs = check.outputs(doc, study)
    for i, name in enumerate(sensitivity.outputs if sensitivity else ()):
        if name not in outputs:
            raise ConfigError(file, f"sensitivity.outputs[{i}]", f"{name!r} is not among the sweep's selected "
                              f"outputs ({', '.join(outputs)})")

    solver_doc = check.table(doc, "solver")
    solver = _solver_settings(study, check.solver_values(solver_doc))
    solver = dataclasses.replace(solver, save_times=check.save_times(doc, study, outputs, solver))
    _check_resolution(file, study, solver, solver_doc)
    _check_horizon(file, solver)
    critical = check.critical(check.table(doc, "critical"), study, axes)
    if critical:
        _check_xtol(file, critical, solver.dtype, "xtol" in check.table(doc, "critical"))
    if critical and critical.output not in outputs:
        raise ConfigError(file, "critical.output", f"{critical.output!r} is not among the selected outputs")
    run = check.table(doc, "run")
    for key in run:
        if key not in RUN_KEYS:
            raise ConfigError(file, f"run.{key}", f"unknown key (expected one of {sorted(RUN_KEYS)})")
    sampled = sum(len(solver.save_times) for name in outputs if study.outputs_by_name[name].sampled)
    shard_size = check.positive_int(run, "run.shard_size", None) or default_shard_size(
        study, tuple(len(a.values) for a in axes), sampled)
    batch_size = check.positive_int(run, "run.batch_size", None)  # None: chosen by the engine
    # Checked against the study where the run plans (engine.runner.cost.plan_for).
    batch_solver = check.typed(run, "batch_solver", str, prefix="run.")
    # Inline by default: on one machine its threads share one compiled program,
    # where the local cluster pays ~4 s of start-up per run for no gain (200,000
    # rolling-ball points: 0.047x inline). The cluster stays one word away.
    executor = check.typed(run, "executor", str, prefix="run.") or "inline"
    if executor not in EXECUTORS:
        raise ConfigError(file, "run.executor", f"{executor!r} is not one of {EXECUTORS}")
    workers = check.positive_int(run, "run.workers", None)
    check_workers(workers, file, "run.workers")
    check.shard_count(axes, shard_size)
    _check_slurm(check.table(doc, "slurm"), file)
    out_path = out if out is not None else check.typed(run, "out", str, prefix="run.", required=True)
    return Sweep(
        file=str(file),
        text=text,
        study=study,
        outputs=outputs,
        parameters=parameters,
        axes=axes,
        solver=solver,
        critical=critical,
        shard_size=shard_size,
        batch_size=batch_size,
        out=pathlib.Path(out_path),
        executor=executor,
        workers=workers,
        slurm=check.table(doc, "slurm"),
        batch_solver=batch_solver,
        samples=samples,
    )


def check_constraints(file, study, parameters: dict, axes=(), keys=None, drawn=None) -> None:
    """Refuse the values where one of the study's constraints (conditions on
    several parameters together) fails: on every combination of the swept `axes`
    it involves, with the fixed `parameters` (a single point where `axes` is
    empty). One line naming the key of a value involved (its axis, else the key
    in `keys` that set it) and the first point that fails. The one check of a
    sweep's grid and of `rollsweep point`'s point."""
    swept = {axis.name: axis.values for axis in axes}
    keys = keys or {}
    drawn = drawn or {}
    for constraint in study.constraints:
        failed = _first_failure(constraint, parameters, swept, drawn)
        if failed is None:
            continue
        at = ", ".join(f"{name}={value:g}" for name, value in failed.items())
        key = next((f"samples.parameters.{name}" for name in constraint.parameters if name in drawn), None) or next(
            (f"axes.{name}" for name in constraint.parameters if name in swept), None) or next(
            (keys[name] for name in constraint.parameters if name in keys), "parameters")
        raise ConfigError(file, key, f"{constraint.message} (at {at})")


def _first_failure(constraint, parameters: dict, swept: dict, drawn: dict) -> dict | None:
    """The values of the first point (C order of the swept axes involved, the
    samples first where a drawn parameter is) where `constraint` fails, or
    None: evaluated on CONSTRAINT_CHUNK points at a time."""
    uses_draws = any(name in drawn for name in constraint.parameters)
    if uses_draws:  # the drawn parameters vary together, along the sample index
        swept = {SAMPLE: np.arange(len(next(iter(drawn.values()))))} | swept
    varying = ([SAMPLE] if uses_draws else []) + [name for name in constraint.parameters if name in swept]
    shape = tuple(len(swept[name]) for name in varying)
    fixed = {name: parameters[name] for name in constraint.parameters if name not in swept and name not in drawn}
    count = math.prod(shape)
    if count > CONSTRAINT_NOTICE:  # seconds to minutes: said, so the silence is not taken for a hang
        print(f"rollsweep: checking {constraint.message!r} on {count:,} combinations of "
              f"{', '.join(varying)} ...", file=sys.stderr, flush=True)
    for first in range(0, count, CONSTRAINT_CHUNK):
        points = np.arange(first, min(first + CONSTRAINT_CHUNK, count))
        values = fixed | _grid_columns(swept, varying, shape, points)
        if uses_draws:
            index = values.pop(SAMPLE)
            values |= {name: drawn[name][index] for name in constraint.parameters if name in drawn}
        holds = np.broadcast_to(np.asarray(constraint.holds(values)), points.shape)
        if not holds.all():
            i = int(np.argmin(holds))
            return {name: np.ravel(values[name])[i if name in swept or name in drawn else 0]
                    for name in constraint.parameters}
    return None


def _grid_columns(swept: dict, names: list, shape: tuple, points) -> dict:
    """The values of the axes `names` at the grid's `points` (flat indices in
    the C order of a grid of `shape`): a few rows of their mesh, never all of it."""
    if not names:
        return {}  # nothing swept: the one point of a grid of no axes
    indices = np.unravel_index(points, shape)
    return {name: swept[name][index] for name, index in zip(names, indices, strict=True)}


def default_shard_size(study, shape: tuple[int, ...], sampled_values: int = 0) -> int:
    """Points per shard when the sweep does not say: a SHARDS_PER_SWEEP-th of
    the grid (rounded down to a power of two), at least one compiled call of the study's batch
    where it declares one, else SHARD_SIZE, and at most MAX_DEFAULT_SHARD.

    A study declares a small batch because its points are costly (the hoop:
    64), and then shards of one call each keep every core busy on a grid of a
    few hundred points (the hoop's 13 x 9 shapes, 2 cores: one shard of
    SHARD_SIZE points ran on one core, 92 points/s; two of 63 and 54 points on
    both, 135). A large grid of cheap points gets large shards: every shard is
    a chunk file per array and a done marker, and on a 2-core machine creating
    a file costs ~0.9 ms, as much as solving thousands of such points (runs
    solve shards together in tasks, engine.runner.tasks, but write them one file
    each). It depends on the sweep and the study alone, never on the machine:
    a store made on one machine resumes on another with the same shards.
    Doubled while the grid would have more than MAX_SHARDS shards. Measured
    (rolling ball, 400,000 points, 2 cores, one process, warm): a 64th of the
    grid, shards of 4,096, 320k points/s, 35% of the threads' time in the
    store's writes; a 16th, shards of 16,384, 515k points/s, 11%.
    """
    smallest = study.batch_size or SHARD_SIZE
    share = math.prod(shape) // SHARDS_PER_SWEEP
    size = max(smallest, min(MAX_DEFAULT_SHARD, 1 << max(0, share.bit_length() - 1)))
    if sampled_values:
        # A shard's samples (`sampled_values` a point) are held whole while it is
        # written: at most MAX_SAMPLED_SHARD_BYTES of them (a power of two of points).
        room = max(1, MAX_SAMPLED_SHARD_BYTES // (8 * sampled_values))
        size = min(size, 1 << (room.bit_length() - 1))
    while Layout(shape, chunk_shape(shape, size)).n_shards > MAX_SHARDS:
        size *= 2
    return size


def _solver_settings(study, values: dict) -> SolverSettings:
    """The study's solver defaults under the sweep's `[solver]` values (the sweep wins);
    the defaults are checked like a sweep's, an error naming the study."""
    defaults = _Checker(f"study {study.name!r}").solver_values(dict(study.solver_defaults), "solver_defaults")
    return SolverSettings(**(defaults | values))


def _check_resolution(file, study, settings: SolverSettings, written: dict) -> None:
    """Refuse tolerances finer than the sweep's dtype resolves (see
    engine.sweep.settings.tolerance_floor), naming the key, where the value came
    from and the floor."""
    for key in ("rtol", "atol"):
        value, floor = getattr(settings, key), tolerance_floor(settings.dtype, key)
        if value < floor:
            raise ConfigError(file, f"solver.{key}", f"{plain(value)}{_origin(key, written, study)} is below what "
                              f"{settings.dtype} resolves (floor {floor:.3g}){_wider(key, floor, settings.dtype)}")


def _check_xtol(file, critical: "Critical", dtype: str, written: bool) -> None:
    """Refuse an xtol finer than `dtype` resolves on the bracket, or too wide for
    the search to narrow the bracket (engine.sweep.settings.tolerance_ceiling)."""
    floor = tolerance_floor(dtype, "xtol", critical.bracket)
    origin = "" if written else " (the default)"
    if critical.xtol < floor:
        raise ConfigError(file, "critical.xtol", f"{plain(critical.xtol)}{origin} is below what {dtype} resolves on "
                          f"the bracket {list(critical.bracket)} (floor {floor:.3g}){_wider('xtol', floor, dtype)}")
    ceiling = tolerance_ceiling("xtol", critical.bracket)
    if critical.xtol > ceiling:
        raise ConfigError(file, "critical.xtol", f"{plain(critical.xtol)}{origin} is above a quarter of the width of "
                          f"the bracket {list(critical.bracket)}: the search would stop before it located the root; "
                          f"set xtol <= {ceiling:.3g}")


def _check_horizon(file, settings: SolverSettings) -> None:
    """Refuse a t_max the sweep's dtype cannot hold (above 3.4e38 in float32)."""
    largest = float(np.finfo(settings.dtype).max)
    if settings.t_max > largest:
        raise ConfigError(file, "solver.t_max", f"{plain(settings.t_max)} overflows {settings.dtype}: set t_max <= "
                          f"{largest:.3g}")


def _origin(key: str, written: dict, study) -> str:
    if key in written:
        return ""
    return " (the study's default)" if key in study.solver_defaults else " (the default)"


def _wider(key: str, floor: float, dtype: str) -> str:
    hint = f": set {key} >= {floor:.3g}"
    return hint + ' or dtype = "float64"' if dtype != "float64" else hint


def plain(value) -> str:
    """A number as a reader writes it (`1.0`, `-0.3`, `1e-12`), never a numpy repr."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return repr(value)
    return repr(int(value)) if isinstance(value, (int, np.integer)) else repr(float(value))


def _check_slurm(table: dict, file) -> None:
    """The [slurm] table's keys and types, whatever the executor: a typo is
    reported by `validate` and every run, not only when a SLURM run starts."""
    check_slurm_table(table, str(file))


class _Checker:
    """Small typed accessors that raise `ConfigError` with the file and key."""

    def __init__(self, file):
        self.file = file

    def parameter_file(self, doc, study) -> dict:
        name = self.typed(doc, "parameter_file", str)
        if name is None:
            return {}
        if study.read_parameter_file is None:
            self.fail("parameter_file", f"study {study.name!r} reads no parameter files")
        path = pathlib.Path(self.file).parent / name  # relative to the sweep file
        shown = str(path) if str(path).isprintable() else repr(str(path))  # a line break in a name stays one line
        try:
            values = study.read_parameter_file(path)
        except OSError as err:
            self.fail("parameter_file", f"cannot read {shown}: {err.strerror or type(err).__name__}")
        except (ValueError, KeyError) as err:
            self.fail("parameter_file", f"cannot read {shown}: {' '.join(str(err).split())}")
        return values

    def fail(self, key, reason):
        raise ConfigError(self.file, key, reason)

    def table(self, doc, key) -> dict:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.fail(key, f"must be a table, got {type(value).__name__}")
        return value

    def typed(self, doc, key, kind, *, prefix="", required=False):
        if key not in doc:
            if required:
                self.fail(prefix + key, "is required")
            return None
        value = doc[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            self.fail(prefix + key, f"must be {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    def number(self, key, value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"must be a number, got {type(value).__name__} {plain(value)}")
        if not math.isfinite(value):
            self.fail(key, f"must be finite, got {plain(value)}")
        return float(value)

    def positive_int(self, doc, key, default):
        name = key.split(".")[-1]
        if name not in doc:
            return default
        value = doc[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(key, f"must be a positive integer, got {plain(value)}")
        return value

    def value_in_range(self, key, value, parameter):
        value = self.number(key, value)
        if not parameter.admits(value):
            self.fail(key, f"{plain(value)} is outside the allowed range {parameter.domain}{parameter.unit_suffix}")
        return value

    def axis(self, name, spec, known) -> Axis:
        key = f"axes.{name}"
        if name not in known:
            self.fail(key, f"unknown parameter (known: {', '.join(known)})")
        values = self.values(key, spec)
        outside = np.flatnonzero(~known[name].admitted(values))
        if outside.size:
            i = int(outside[0])
            self.fail(key, f"value {plain(values[i])} (index {i}) is outside the allowed range "
                      f"{known[name].domain}{known[name].unit_suffix}")
        return Axis(name, values, spec)

    def values(self, key, spec) -> np.ndarray:
        """The values a table of one of linspace, logspace, values gives: strictly
        increasing or strictly decreasing, finite."""
        if not isinstance(spec, dict) or len(spec) != 1:
            self.fail(key, "must be a table with exactly one of linspace, logspace, values")
        (kind, args), = spec.items()
        if kind == "values":
            if not isinstance(args, list) or not args:
                self.fail(f"{key}.values", "must be a non-empty list of numbers")
            values = np.array([self.number(f"{key}.values[{i}]", v) for i, v in enumerate(args)])
        elif kind in ("linspace", "logspace"):
            if not isinstance(args, list) or len(args) != 3:
                self.fail(f"{key}.{kind}", "must be [start, stop, count]")
            start = self.number(f"{key}.{kind}[0]", args[0])
            stop = self.number(f"{key}.{kind}[1]", args[1])
            count = args[2]
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                self.fail(f"{key}.{kind}[2]", f"count must be a positive integer, got {count!r}")
            if count > MAX_AXIS_LENGTH:
                self.fail(f"{key}.{kind}[2]", f"{count:,} values exceed the limit of {MAX_AXIS_LENGTH:,} per axis")
            if kind == "logspace":
                for i, exponent in enumerate((start, stop)):
                    if not LOG_EXPONENTS[0] <= exponent <= LOG_EXPONENTS[1]:
                        self.fail(f"{key}.logspace[{i}]", f"10**{exponent:g} is not a normal float64 (exponents "
                                  f"must be within [{LOG_EXPONENTS[0]:g}, {LOG_EXPONENTS[1]:g}])")
            with np.errstate(all="ignore"):  # an overflow is reported below, as a reason
                values = (np.linspace if kind == "linspace" else np.logspace)(start, stop, count)
            if not np.all(np.isfinite(values)):
                self.fail(f"{key}.{kind}", f"values from {start:g} to {stop:g} overflow a float64")
        else:
            self.fail(key, f"unknown axis kind {kind!r} (expected linspace, logspace or values)")
        with np.errstate(all="ignore"):  # a step beyond float64 is still a sign
            steps = np.diff(values)
        if len(values) > 1 and not (np.all(steps > 0) or np.all(steps < 0)):
            self.fail(key, "values must be strictly increasing or strictly decreasing")
        return values

    def save_times(self, doc, study, outputs, settings: SolverSettings) -> tuple[float, ...]:
        """The sample times of the sweep's sampled outputs: `[save] times`, else
        the study's default where the sweep selects a sampled output, else none.
        Increasing, within the solve's span [0, t_max]."""
        save = self.table(doc, "save")
        for key in save:
            if key != "times":
                self.fail(f"save.{key}", "unknown key (expected times)")
        sampled = [name for name in outputs if study.outputs_by_name[name].sampled]
        if "times" in save:
            spec, key = save["times"], "save.times"
        elif sampled and study.save_times is not None:
            spec, key = dict(study.save_times), f"the study's save_times (for output {sampled[0]!r})"
        elif sampled:
            i = list(outputs).index(sampled[0])
            self.fail(f"outputs[{i}]", f"{sampled[0]!r} is sampled at times: give them in [save] times = "
                      "{ linspace = [start, stop, count] }")
        else:
            return ()
        if not sampled:
            self.fail(key, f"no selected output of {study.name!r} is sampled at times (sampled: "
                      f"{', '.join(o.name for o in study.outputs if o.sampled) or 'none'})")
        times = self.values(key, spec)
        if len(times) > MAX_SAVE_TIMES:
            self.fail(key, f"{len(times):,} times exceed the limit of {MAX_SAVE_TIMES:,}")
        if len(times) > 1 and not np.all(np.diff(times) > 0):
            self.fail(key, "times must be strictly increasing")
        if times[0] < 0 or times[-1] > settings.t_max:
            bad = times[0] if times[0] < 0 else times[-1]
            self.fail(key, f"time {plain(bad)} is outside the solve's span [0, {plain(settings.t_max)}] "
                      f"(solver.t_max)")
        return tuple(float(t) for t in times.astype(settings.dtype))

    def grid_size(self, axes) -> None:
        points = math.prod(len(a.values) for a in axes)
        if points > MAX_POINTS:
            sizes = " x ".join(f"{len(a.values):,}" for a in axes)
            self.fail("axes", f"{sizes} = {points:,} points exceed the limit of {MAX_POINTS:,} points per cube")

    def shard_count(self, axes, shard_size) -> None:
        layout = Layout(tuple(len(a.values) for a in axes), chunk_shape(tuple(len(a.values) for a in axes), shard_size))
        if layout.n_shards > MAX_SHARDS:
            self.fail("run.shard_size", f"{layout.n_shards:,} shards exceed the limit of {MAX_SHARDS:,} (one task and "
                      f"one file per array each); raise shard_size")

    def outputs(self, doc, study) -> tuple[str, ...]:
        names = [o.name for o in study.outputs]
        if "outputs" not in doc:
            # Sampled outputs where the sweep gives sample times: a sweep
            # written before samples existed makes the cube it made then.
            times = isinstance(doc.get("save"), dict) and "times" in doc["save"]
            return tuple(o.name for o in study.outputs if times or not o.sampled)
        chosen = doc["outputs"]
        if not isinstance(chosen, list) or not chosen or not all(isinstance(x, str) for x in chosen):
            self.fail("outputs", "must be a non-empty list of output names")
        for i, name in enumerate(chosen):
            if name not in names:
                self.fail(f"outputs[{i}]", f"{name!r} is not an output of {study.name!r} ({', '.join(names)})")
        return tuple(n for n in names if n in chosen)  # the study's order

    def solver_values(self, doc, table="solver") -> dict:
        """A `[solver]` table's values, checked (keys, names, bounds)."""
        fields = {f.name: f for f in dataclasses.fields(SolverSettings) if f.name != "save_times"}  # [save]
        kwargs = {}
        for key, value in doc.items():
            full = f"{table}.{key}"
            if key not in fields:
                self.fail(full, f"unknown key (expected one of {sorted(fields)})")
            if key == "solver" and value not in SOLVERS:
                self.fail(full, f"{value!r} is not one of {sorted(SOLVERS)}")
            elif key == "dtype" and value not in DTYPES:
                self.fail(full, f"{value!r} is not one of {DTYPES}")
            elif key in ("max_steps", "max_segments"):
                value = self.positive_int(doc, full, None)
                bound = MAX_STEPS if key == "max_steps" else MAX_SEGMENTS
                if value > bound:
                    self.fail(full, f"{value:,} exceeds the limit of {bound:,}")
            elif key in ("rtol", "atol", "t_max"):
                value = self.number(full, value)
                if value <= 0:
                    self.fail(full, f"must be positive, got {value!r}")
                if key in LOOSEST and value > (ceiling := tolerance_ceiling(key)):
                    self.fail(full, f"{plain(value)} is above {ceiling:g}, the loosest {key} accepted "
                              f"({LOOSEST[key].format(ceiling)}); set {key} <= {ceiling:g}")
            kwargs[key] = value
        return kwargs

    def critical(self, doc, study, axes) -> Critical | None:
        if not doc:
            return None
        for key in doc:
            if key not in CRITICAL_KEYS:
                self.fail(f"critical.{key}", f"unknown key (expected one of {sorted(CRITICAL_KEYS)})")
        output = self.typed(doc, "output", str, prefix="critical.", required=True)
        scalar_outputs = [o.name for o in study.outputs if not o.dims]
        if output not in scalar_outputs:
            known = ", ".join(scalar_outputs)
            self.fail("critical.output", f"{output!r} is not a scalar output of {study.name!r} ({known})")
        axis_name = self.typed(doc, "axis", str, prefix="critical.", required=True)
        axis = next((a for a in axes if a.name == axis_name), None)
        if axis is None:
            self.fail("critical.axis", f"{axis_name!r} is not one of the sweep's axes")
        if "bracket" in doc:
            bracket = doc["bracket"]
            if not isinstance(bracket, list) or len(bracket) != 2:
                self.fail("critical.bracket", "must be [lower, upper]")
            lo, hi = (self.number(f"critical.bracket[{i}]", v) for i, v in enumerate(bracket))
            if not lo < hi:
                self.fail("critical.bracket", f"lower {lo!r} must be below upper {hi!r}")
            parameter = study.parameter(axis_name)
            for v in (lo, hi):
                if not parameter.admits(v):
                    self.fail("critical.bracket", f"{plain(v)} is outside the allowed range "
                              f"{parameter.domain}{parameter.unit_suffix}")
        else:
            lo, hi = float(axis.values.min()), float(axis.values.max())
            if lo == hi:
                self.fail("critical.bracket", f"none given, and the axis {axis_name!r} has a single value: give "
                          "bracket = [lower, upper]")
        target = self.number("critical.target", doc.get("target", 0.0))
        xtol = self.number("critical.xtol", doc.get("xtol", 1e-12))
        if xtol <= 0:
            self.fail("critical.xtol", f"must be positive, got {xtol!r}")
        return Critical(output, axis_name, (lo, hi), target, xtol)

"""Shared helpers of the benchmarks: timing, the engine end to end, the printed table.

Every benchmark measures the engine and the ways a user might do the same sweep
in one run, on the same machine, and prints one table: method | points/s |
ratio to the engine end to end | errors against a reference. Times are the best
of a few calls after an untimed warm-up call (compilation, caches), since the
machine may be shared.
"""

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from engine._jax_setup import configure

configure()  # float64 and the compile cache, as in every solving process

import jax  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

try:
    import numba
except ImportError:  # the bench extra is not installed
    numba = None


# Dormand-Prince 5(4) for the numba peers' sources: stages, 5th-order weights,
# error weights (5th - 4th) and the dense output's coefficients (Hairer and
# Wanner's DOPRI5, CONTD5), as module-level constants of the generated code.
DOPRI5_CONSTANTS = """
A21=1/5; A31=3/40; A32=9/40; A41=44/45; A42=-56/15; A43=32/9
A51=19372/6561; A52=-25360/2187; A53=64448/6561; A54=-212/729
A61=9017/3168; A62=-355/33; A63=46732/5247; A64=49/176; A65=-5103/18656
B1=35/384; B3=500/1113; B4=125/192; B5=-2187/6784; B6=11/84
E1=71/57600; E3=-71/16695; E4=71/1920; E5=-17253/339200; E6=22/525; E7=-1/40
D1=-12715105075/11282082432; D3=87487479700/32700410799; D4=-10690763975/1880347072
D5=701980252875/199316789632; D6=-1453857185/822651844; D7=69997945/29380423
"""


def cuda_device_source(source: str, replacements, what: str) -> str:
    """A numba CPU peer's source made CUDA device functions, for a numba-CUDA
    peer doing the same arithmetic: each (old, new) of `replacements` replaced
    (a RuntimeError naming `what` where `old` is gone: its source changed), and
    its parallel CPU loop, from `@njit(parallel=True` on, cut off (the caller
    appends its kernel)."""
    for old, new in replacements:
        if old not in source:
            raise RuntimeError(f"{what} changed: {old!r} not found")
        source = source.replace(old, new)
    return source[: source.index("@njit(parallel=True")]


def numba_cuda_namespace(source: str, filename: str) -> dict | None:
    """The names a numba-CUDA peer's source defines, compiled as `filename`
    (None: no numba or no CUDA device). numba-cuda (<= 0.30.4) overloads
    np.row_stack, which numpy 2.5 removed: its first kernel compile raises
    AttributeError without this alias."""
    if numba is None:
        return None
    from numba import cuda

    if not cuda.is_available():
        return None
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def add_tests_to_path():
    """The reference values live in tests/ (closed forms, published tables)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


def best_of(fn, repeat=3, warmup=True):
    """Result and the best wall time of `repeat` calls of fn().

    warmup: True calls fn() once, untimed, first (compilation); a callable is
    called instead (e.g. the same function on a few points when one call is
    long); False times the first call as well.
    """
    out = None
    if warmup is True:
        out = fn()
    elif callable(warmup):
        warmup()
    best = math.inf
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def toml_value(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return repr(float(value))


def sweep_text(study, axes, *, out, outputs=None, parameters=None, solver=None, run=None) -> str:
    """A sweep file. axes: name -> {"linspace": [start, stop, count]} or {"values": [...]};
    parameters, solver, run: the [parameters], [solver] and [run] tables (out is added to [run])."""
    lines = [f"study = {toml_value(study)}"]
    if outputs is not None:
        lines.append(f"outputs = {toml_value(list(outputs))}")
    for table, entries in (("parameters", parameters), ("axes", axes), ("solver", solver),
                           ("run", dict(run or {}) | {"out": str(out)})):
        if entries:
            lines.append(f"[{table}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in entries.items()]
    return "\n".join(lines) + "\n"


def engine_end_to_end(make_text, variables, repeat=3, warmup=True, executor="inline", workers=None):
    """`rollsweep run` of the sweep `make_text(out)` into a temporary zarr store.

    Returns ({variable: values of the cube}, seconds of the fastest of `repeat`
    runs, the report of that run). The time is the wall time of the whole `run`
    call: parsing the sweep, creating the store, the executor's start-up, every
    shard and its writes. warmup: an untimed first run (fills the compile
    cache); a callable: make_text for a smaller sweep with the same compiled
    batch, run untimed instead.
    """
    from engine import open_cube, parse_sweep, run

    with tempfile.TemporaryDirectory(prefix="rollsweep_bench_") as tmp:
        def once(tag, text_for=make_text):
            start = time.perf_counter()
            sweep = parse_sweep(text_for(f"{tmp}/{tag}.zarr"))
            report = run(sweep, executor=executor, workers=workers, progress=False)
            return sweep, report, time.perf_counter() - start

        if warmup is True:
            once("warm")
        elif callable(warmup):
            once("warm", warmup)
        sweep, report, seconds = min((once(f"run{k}") for k in range(max(1, repeat))), key=lambda run_: run_[2])
        cube = open_cube(sweep.out)
        values = {name: cube[name].values for name in variables}
    if report.failed_shards:
        print(f"note: {report.failed_shards} shards of the engine run raised (see the store's failure records)")
    return values, seconds, report


def write_registration(folder: pathlib.Path, package: pathlib.Path, entry_points: dict[str, str]) -> pathlib.Path:
    """What `pip install -e` of an outside study's package would add to the
    environment, in `folder` (a path entry of its own, not the shared
    environment): the package (a link to its folder `package`) and its
    distribution's metadata with `entry_points` (study name -> "module:attribute")
    under the `rollsweep.studies` group. Put `folder` on sys.path or PYTHONPATH
    (rollsweep_process) and the engine finds the studies by name, as it finds an
    installed package's."""
    folder.mkdir(parents=True, exist_ok=True)
    package = pathlib.Path(package).resolve()
    link = folder / package.name
    if not link.exists():
        link.symlink_to(package, target_is_directory=True)
    info = folder / f"{package.name}-1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.name}\nVersion: 1\n")
    (info / "entry_points.txt").write_text("[rollsweep.studies]\n" + "".join(
        f"{name} = {target}\n" for name, target in entry_points.items()))
    return folder


def rollsweep_process(*args, path=()) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, the finished process) of one `rollsweep ARGS...` process: the
    CLI of this checkout, whatever Python runs it (no script looked for beside the
    interpreter), with the folders `path` (write_registration's) and this checkout
    on its PYTHONPATH; its output captured. A non-zero exit raises RuntimeError,
    its error's last line first (what a table's FAILED row shows)."""
    command = [sys.executable, "-c", "from engine.cli.commands import program; program()", *args]
    entries = [str(p) for p in path] + [str(ROOT), os.environ.get("PYTHONPATH", "")]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(e for e in entries if e)})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = ([line for line in done.stderr.splitlines() if line.strip()] or [""])[-1]
        what = " ".join(pathlib.Path(a).name if os.sep in str(a) else str(a) for a in args[:2])  # run x.toml
        raise RuntimeError(f"rollsweep {what} exited {done.returncode}: {last}\n{done.stderr[-2000:]}")
    return seconds, done


def in_study_order(study, names) -> tuple[str, ...]:
    """Outputs as a sweep file's `outputs` selects them (the study's order): the same
    compiled program as the engine's run, not a second compilation."""
    return tuple(o.name for o in study.outputs if o.name in names)


def machine() -> str:
    from engine.solve.allocation import cores

    threads = f", numba {numba.get_num_threads()} threads" if numba is not None else ", numba not installed"
    return f"{cores()} cores, jax {jax.__version__} on {jax.devices()[0].platform}{threads}"


def _cell(value, width) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    if isinstance(value, str):
        return f"{value:>{width}}"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):>{width},}"
    return f"{value:>{width}.1e}"


# ROLLSWEEP_BENCH_ROWS=FILE: every table row is also appended to FILE as one JSON
# line, tagged with ROLLSWEEP_BENCH_PART (benchmarks/gpu_lease.sh builds its one
# table from them, and keeps what a part measured before it was cut off).
ROWS_FILE = "ROLLSWEEP_BENCH_ROWS"


def record_row(method, rate=math.nan, *, points=None, ratio=math.nan, errors=(), headers=(), note=None, title=None):
    """Append one measured row to $ROLLSWEEP_BENCH_ROWS (nothing if it is unset)."""
    path = os.environ.get(ROWS_FILE)
    if not path:
        return

    def plain(value):  # JSON has no NaN: None; numpy scalars as Python numbers
        if value is None or isinstance(value, str):
            return value
        value = float(value) if not isinstance(value, (int, np.integer)) else int(value)
        return None if isinstance(value, float) and not math.isfinite(value) else value

    row = {"kind": "row", "part": os.environ.get("ROLLSWEEP_BENCH_PART", ""), "method": method,
           "points": plain(points), "rate": plain(rate), "ratio": plain(ratio),
           "errors": {h: plain(e) for h, e in zip(headers, errors, strict=False)}, "note": note, "title": title}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def print_table(title, rows, reference_row_name, error_headers=("max error vs reference",), record=True):
    """rows: (method, points per second, error, ...) with one error per header
    (None or NaN prints '-'; an int prints as a count). The ratio column divides
    each rate by the rate of the row named `reference_row_name`. record: also
    append the rows to $ROLLSWEEP_BENCH_ROWS (see record_row)."""
    reference = next((r[1] for r in rows if r[0] == reference_row_name), math.nan)
    width = max([len("method")] + [len(r[0]) for r in rows])
    widths = [max(12, len(h)) for h in error_headers]
    print(f"\n{title}")
    print(f"{'method':<{width}} {'points/s':>12} {'vs engine':>10} "
          + " ".join(f"{h:>{w}}" for h, w in zip(error_headers, widths, strict=True)))
    for name, rate, *errors in rows:
        errors = list(errors) + [None] * (len(error_headers) - len(errors))
        print(f"{name:<{width}} {rate:>12,.1f} {rate / reference:>10.3g} "
              + " ".join(_cell(e, w) for e, w in zip(errors, widths, strict=True)))
        if record:
            record_row(name, rate, ratio=rate / reference, errors=errors, headers=error_headers, title=title)
    print(f"'vs engine': points/s against the row '{reference_row_name}'.")


def scaling_line(label, pairs, unit="points/s") -> str:
    """'label: size: rate, size: rate, ...' for the engine's scaling over a setting."""
    return f"{label} ({unit}): " + ", ".join(f"{size:,}: {rate:,.0f}" for size, rate in pairs)


def pad_to_batch(columns, batch):
    """Columns padded (with copies of the first point) to a multiple of batch, and
    the true length: one compiled shape for every call of a baseline."""
    n = len(next(iter(columns.values())))
    extra = (-n) % batch
    return {k: np.concatenate([v, np.full(extra, v[0])]) for k, v in columns.items()}, n

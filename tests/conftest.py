import json
import os
import pathlib
import sys
import textwrap

import numpy as np
import pytest

from engine._jax_setup import configure

# On a GPU machine every JAX process of a test run shares the one GPU: pytest-xdist's
# workers, and the runs and local-cluster workers a test starts (they inherit this
# environment). JAX's default, reserving 75% of the GPU's memory as it starts,
# would leave the others next to none: each process takes memory as it needs it
# instead, and an xdist worker at most its share (which engine.solve.device.detect
# then reports as the device's memory: the batches are sized to it). Read when JAX
# starts a backend (no import above does); nothing changes on CPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS and not {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"} & set(os.environ):
    os.environ["XLA_CLIENT_MEM_FRACTION"] = f"{min(0.75, 0.9 / _WORKERS):.3f}"

configure()  # float64 and the compile cache, as in every solving process


# Each test file's seconds in a measured run (benchmarks/suite_durations.py
# --file-costs). pytest-xdist's `--dist loadfile` hands files to its workers in
# collection order, as each worker comes free: the costliest first, so no
# worker is left with a long file while the others have finished (the longest
# processing time first rule). A file not listed (a new one) goes last.
FILE_COSTS = pathlib.Path(__file__).with_name("file_costs.json")


def _costliest_files_first(items) -> None:
    try:
        costs = json.loads(FILE_COSTS.read_text())
    except (OSError, ValueError):
        return  # no measurement: the collection's order
    root = pathlib.Path(__file__).resolve().parent.parent
    order = {}

    def cost(item):
        path = item.path
        if path not in order:
            try:
                order[path] = -float(costs.get(path.resolve().relative_to(root).as_posix(), 0.0))
            except ValueError:
                order[path] = 0.0
        return order[path]

    items.sort(key=cost)  # stable: a file's tests keep their order


def pytest_collection_modifyitems(config, items):
    """Tests marked cpu_only (pyproject.toml: a test that assumes JAX's default
    device is a CPU) are skipped, with their mark's reason, where it is not: on
    a GPU machine. A cpu_only mark without a reason is an error anywhere. The
    files come costliest first (FILE_COSTS)."""
    _costliest_files_first(items)
    marked = [(item, item.get_closest_marker("cpu_only")) for item in items]
    marked = [(item, mark) for item, mark in marked if mark is not None]
    for item, mark in marked:
        if not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.cpu_only needs reason=: why it assumes a CPU")
    if not marked:
        return
    import jax

    backend = jax.default_backend()  # starts JAX's backends: only where a marked test was collected
    if backend == "cpu":
        return
    for item, mark in marked:
        item.add_marker(pytest.mark.skip(reason=f"cpu_only, and JAX's default backend is {backend}: "
                                                f"{mark.kwargs['reason']}"))


PINGPONG_DEFAULTS = dict(
    mass=0.003, radius=0.02, gravity=9.8, friction=0.3,
    rolling_resistance=0.0002, drag=0.1, initial_speed=1.0, spin_ratio=1.0,
)


def sweep_file(folder: pathlib.Path, body: str, name="sweep.toml") -> pathlib.Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def regime_grid(folder: pathlib.Path, name: str, shard_size: int, spins: int = 21, run: str = ""):
    """A sweep (loaded) of the rebound regime map, spins x 30 points in shards of
    `shard_size`, with more of its [run] table in `run`: a study that compiles fast."""
    from engine.sweep.config import load_sweep

    return load_sweep(sweep_file(folder, f"""
        study = "rebound_regime"
        [axes]
        spin_ratio = {{ linspace = [-1.0, 1.0, {spins}] }}
        incidence_angle = {{ linspace = [0.0, 89.9, 30] }}
        [run]
        shard_size = {shard_size}
        {run}
        out = "{folder / name}.zarr"
        """, name=f"{name}.toml"))


def assert_rolling_ball_closed_form(columns, result, output, closed_form):
    """Every point of a rolling-ball solve a success, and its `output` the closed
    form's (tests/pingpong_closed_form.py) to the solver's accuracy (rtol 1e-10
    by default)."""
    np.testing.assert_array_equal(result.status, 1)  # engine.Status.SUCCESS
    points = [{k: columns[k][i] for k in PINGPONG_DEFAULTS} for i in range(len(result.status))]
    expected = np.array([closed_form(p) for p in points])
    np.testing.assert_allclose(result.outputs[output], expected, rtol=0, atol=1e-9)


def run_marking_slowly(args: list[str]) -> list[str]:
    """The command line of a process running `rollsweep <args>` whose shards are
    marked done 50 ms apart at least: a test that stops it (kill, SIGTERM) after
    its first markers, or asks for its store, finds it still running however
    fast the machine (400 one-point shards once finished within one look at the
    markers; 100 now take 5 s at least)."""
    script = f"""
import time
from engine.cli.commands import program
from engine.cube.markers import Markers
mark_done = Markers.mark_done
def marked_slowly(self, *args):
    mark_done(self, *args)
    time.sleep(0.05)
Markers.mark_done = marked_slowly
program({args!r})  # as `python -m engine.cli` runs it
"""
    return [sys.executable, "-c", script]


def cubes_identical(a, b) -> bool:
    """Bitwise equality of every variable and coordinate of two loaded cubes."""
    names = set(a.variables) | set(b.variables)
    return all(
        name in a.variables and name in b.variables
        and np.array_equal(a[name].values, b[name].values, equal_nan=a[name].dtype.kind == "f")
        for name in names
    )


@pytest.fixture
def children_on_cpu(monkeypatch):
    """The processes the test starts solve on the CPU (JAX_PLATFORMS=cpu in their
    environment): for a test that reads a child's whole stderr, which on a GPU
    machine a process starting JAX's CUDA backend may log to (XLA, CUDA) before
    anything the test looks for. This process's JAX is already started: unchanged.
    Not where a child's results are compared with this process's (other devices)."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")


@pytest.fixture
def fresh_compile_cache(tmp_path, monkeypatch):
    """The test's own compile cache (tmp_path/cache): the engine's programs and
    executables, and JAX's persistent cache, which is process-wide (pointed
    there, then back). For a test that asks what is compiled or kept, which
    depends on what an earlier test or run left in a shared cache."""
    import jax
    from jax._src import compilation_cache

    from engine.solve.evaluate import compiled

    folder = tmp_path / "cache"
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(folder))
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(folder))
    compilation_cache.reset_cache()
    compiled.cache_clear()
    try:
        yield folder
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()
        compiled.cache_clear()


@pytest.fixture
def small_sweep(tmp_path):
    """A small pingpong sweep file whose cube goes to tmp_path/cube.zarr."""
    def make(axes='spin_ratio = { linspace = [0.0, 3.0, 23] }', extra="", shard_size=5):
        return sweep_file(tmp_path, f"""
            study = "pingpong"
            [axes]
            {axes}
            [solver]
            rtol = 1e-10
            atol = 1e-12
            {extra}
            [run]
            shard_size = {shard_size}
            batch_size = 8
            executor = "inline"
            out = "{tmp_path / 'cube.zarr'}"
            """)
    return make


@pytest.fixture
def sbatch_accepting(tmp_path, monkeypatch):
    """An sbatch on PATH that takes every job (`--test-only`: the check a
    SLURM cluster makes before its worker jobs are submitted), for tests that
    make job scripts where no SLURM is installed."""
    folder = tmp_path / "sbatch-bin"
    folder.mkdir()
    script = folder / "sbatch"
    script.write_text("#!/bin/sh\necho 'sbatch: Job 1 to start at now' >&2\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

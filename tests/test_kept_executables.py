"""A kept executable never crashes the process that loads it (engine.solve.executables).

A program calling jaxlib's LAPACK handlers (jnp.linalg: the bicycle_response
study's inverse of its mass matrix) kept as an executable was a "Segmentation
fault" in a later process's first call: LAPACK's pointers are filled in as a
program calling them is lowered, and a loaded executable is not. Here two real
processes run one sweep of a study that inverts a matrix per point on one
fresh cache: the second loads the first's executable (not compiled again),
solves and writes the same cube, bit for bit. (The bicycle_response demo
crashed the same way, but its cold run takes 16-55 s on 2 cores.)"""

import os
import pathlib
import subprocess
import sys
import textwrap
import zlib

import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Study

from conftest import cubes_identical

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent


def _inverse(p, settings):
    """The first column of the inverse of a symmetric 3x3 matrix (jnp.linalg.inv: LU, then triangular solves)."""
    a, b = p["a"], p["b"]
    matrix = jnp.array([[2.0 + a, b, 0.0], [b, 3.0, a], [0.0, a, 4.0 + b]])
    inverse = jnp.linalg.inv(matrix)
    return PointResult(outputs={"x0": inverse[0, 0], "x1": inverse[1, 0]}, status=jnp.int8(1))


LINEAR = Study(name="kept_linear", title="a matrix inverted per point", source="test", version="1",
               parameters=(Parameter("a", "1", 0.5, Interval(0.0, 1.0), "off-diagonal"),
                           Parameter("b", "1", 0.5, Interval(0.0, 1.0), "coupling")),
               outputs=(Output("x0", "1", "inverse's (0, 0)"), Output("x1", "1", "inverse's (1, 0)")),
               solve_point=_inverse)

SWEEP = """
study = "kept_linear"
[axes]
a = { linspace = [0.0, 1.0, 8] }
b = { linspace = [0.0, 1.0, 4] }
"""

# A `rollsweep run` of the sweep in a process of its own, the test's study registered there.
CHILD = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(TESTS)!r})
    from engine.study import interface
    from test_kept_executables import LINEAR

    interface._registered()[LINEAR.name] = lambda: LINEAR
    from engine.cli.commands import entry

    sys.exit(entry(sys.argv[1:]))
    """)


def run_in_a_fresh_process(cache: pathlib.Path, sweep: pathlib.Path, out: pathlib.Path) -> None:
    env = dict(os.environ, ROLLSWEEP_CACHE=str(cache), JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-c", CHILD, "run", str(sweep), "--out", str(out), "--quiet",
                           "--executor", "inline"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"return code {done.returncode}: {done.stderr[-3000:]}"


def test_a_kept_executable_calling_lapack_is_loaded_by_a_second_process(tmp_path):
    import xarray as xr

    cache, sweep = tmp_path / "cache", tmp_path / "linear.toml"
    sweep.write_text(SWEEP)
    run_in_a_fresh_process(cache, sweep, tmp_path / "first.zarr")
    (kept,) = (cache / "programs").glob("*.executable")
    assert b"lapack_dgetrf_ffi" in zlib.decompress(kept.read_bytes())  # (what the test is about)
    made = kept.stat().st_mtime_ns
    run_in_a_fresh_process(cache, sweep, tmp_path / "second.zarr")  # (crashed: return code -11)
    assert kept.stat().st_mtime_ns == made  # loaded, not compiled and kept again
    first, second = (xr.open_zarr(tmp_path / f"{name}.zarr").load() for name in ("first", "second"))
    assert cubes_identical(first, second)

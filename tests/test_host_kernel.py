"""The fused solver's kernel on CPU (engine.solve.kernel.host): its library,
built once and kept, its program exported and read back, and what happens
where building or keeping the library fails. Every failure ends in a result
the engine can stand behind (the same bits as the kernel built normally, or
Pallas's with a warning), never a crash, and never a fallback's program kept
for a process that could build the kernel."""

import os
import pathlib
import stat
import subprocess
import sys

import numpy as np
import pytest
from test_kernel_c import pytestmark as needs_cc  # a C compiler to build the host kernel
from test_outside_models import _columns

import engine.solve.kernel.fused as fused_module
import engine.solve.kernel.host as host
from engine._jax_setup import CACHE_VARIABLE
from engine.solve import evaluate, make_plan
from engine.study.status import Status
from engine.sweep.settings import SolverSettings
from studies.pingpong import STUDY as PINGPONG

pytestmark = [needs_cc, pytest.mark.cpu_only(
    reason="the host kernel is the CPU's: its sweeps, programs and calls here run on JAX's default device, which on "
           "a GPU machine is the GPU (where the fused solver's kernel is the CUDA one: tests/test_kernel_c.py)")]
REPO = pathlib.Path(__file__).resolve().parent.parent
SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12)


@pytest.fixture
def caches(tmp_path, monkeypatch, fresh_compile_cache):
    """Caches of the test's own (programs, executables, JAX's compiled programs,
    traced parts, libraries), and nothing of this process's remembered: each
    solve as a fresh process's."""
    assert os.environ[CACHE_VARIABLE] == str(tmp_path / "cache")  # (fresh_compile_cache's)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user"))
    monkeypatch.delenv("ROLLSWEEP_KERNEL_BACKEND", raising=False)
    _forget(monkeypatch)
    yield tmp_path
    _forget(monkeypatch)


def _forget(monkeypatch):
    """This process's loaded libraries and programs forgotten (registered FFI
    targets stay registered, as they would in a new process after loading)."""
    sys.modules["engine.solve.evaluate"].compiled.cache_clear()
    fused_module._kernel_check.cache_clear()
    monkeypatch.setattr(host, "_loaded", {})


def _solve(columns):
    return evaluate(PINGPONG, SETTINGS, columns, plan=make_plan(PINGPONG, solver="fused", batch=64))


COLUMNS = _columns(PINGPONG, spin_ratio=np.linspace(0.2, 3.0, 50))


def _same(a, b):
    np.testing.assert_array_equal(a.outputs["final_displacement"], b.outputs["final_displacement"])
    np.testing.assert_array_equal(a.num_steps, b.num_steps)


def _programs(folder):
    return sorted((folder / "cache" / "programs").glob("*.stablehlo"))


def test_the_program_is_kept_and_a_warm_solve_loads_the_library_it_names(caches, monkeypatch):
    first = _solve(COLUMNS)
    (program,) = _programs(caches)
    (library,) = (caches / "user" / "rollsweep" / "kernels").glob("rs_*.so")
    assert f"rs_host_{library.stem[3:]}".encode() in program.read_bytes()
    _forget(monkeypatch)
    monkeypatch.setattr(host, "library", lambda *a: pytest.fail("built or generated in a warm solve"))
    _same(_solve(COLUMNS), first)


# A solve in a fresh process (the dynamic loader of this one would hand back a
# library it loaded before from the same path, whatever the file now holds).
CHILD = """
import hashlib, sys
sys.path[:0] = [{tests!r}]
from test_host_kernel import COLUMNS, _solve
found = _solve(COLUMNS)
print(hashlib.sha256(found.outputs["final_displacement"].tobytes() + found.num_steps.tobytes()).hexdigest())
"""


def _solved_in_a_fresh_process() -> str:
    tests = str(pathlib.Path(__file__).parent)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", CHILD.format(tests=tests)], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": path}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1]


def test_a_library_gone_or_damaged_is_built_again(caches):
    first = _solved_in_a_fresh_process()
    (library,) = (caches / "user" / "rollsweep" / "kernels").glob("rs_*.so")
    whole = library.read_bytes()
    for damage in (library.unlink, lambda: library.write_bytes(b""), lambda: library.write_bytes(whole[:100])):
        damage()
        assert _solved_in_a_fresh_process() == first  # the stored program unusable: made again, the library rebuilt
        assert library.read_bytes() == whole


def test_a_kernel_cache_that_cannot_be_written_builds_in_a_folder_of_the_process(caches, monkeypatch):
    first = _solve(COLUMNS)
    blocked = caches / "blocked"
    blocked.write_text("a file, not a folder: no cache below it")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    _forget(monkeypatch)
    _same(_solve(COLUMNS), first)


def test_a_fallback_is_not_kept_for_a_process_that_builds_the_kernel(caches, monkeypatch, tmp_path):
    """A compiler that fails: Pallas runs the kernel, with a warning, and its
    program is not stored under the key a working build's process reads."""
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(failing))
    with pytest.warns(UserWarning, match="host kernel could not be built"):
        fallback = _solve(_columns(PINGPONG, spin_ratio=np.linspace(0.2, 3.0, 8)))
    assert (fallback.status == Status.SUCCESS).all()
    assert _programs(caches) == []
    assert sorted((caches / "cache" / "programs").glob("*.executable")) == []  # nor its executable
    monkeypatch.delenv("CC")
    _forget(monkeypatch)
    _solve(COLUMNS)
    (program,) = _programs(caches)
    assert b"rs_host_" in program.read_bytes()


def test_a_fallback_keeps_nothing_over_what_an_earlier_process_kept(caches, monkeypatch, tmp_path):
    """A process whose kernel library is not where the kept program and
    executable name it (a node's own library folder, a shared cache of programs)
    and that cannot build it either runs Pallas: neither its program nor its
    executable replaces the kept ones, and a process with the library gets the
    kept bits again."""
    first = _solve(COLUMNS)
    (executable,) = sorted((caches / "cache" / "programs").glob("*.executable"))
    (program,) = _programs(caches)
    kept = executable.read_bytes(), program.read_bytes()
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    with monkeypatch.context() as node:
        node.setenv("CC", str(failing))
        node.setenv("XDG_CACHE_HOME", str(tmp_path / "another node"))
        _forget(monkeypatch)
        with pytest.warns(UserWarning, match="host kernel could not be built"):
            fallback = _solve(COLUMNS)
        assert (fallback.status == Status.SUCCESS).all()
    assert (executable.read_bytes(), program.read_bytes()) == kept
    _forget(monkeypatch)
    _same(_solve(COLUMNS), first)


def test_a_call_with_outputs_of_other_dtypes_is_refused(caches):
    """(float32 outputs where the C writes doubles would be written past their end.)"""
    import jax

    from engine.solve.kernel.c_source import KernelSource

    source = KernelSource.of("#include <stdint.h>\nvoid rs_solve_batch(int64_t n, const int32_t* a, "
                             "const double* x, double* y) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }\n",
                             (np.dtype("int32"), np.dtype("float64")), (np.dtype("float64"),))
    kernel = host.HostKernel(source)
    with pytest.raises(ValueError, match="outputs do not have the dtypes"):
        jax.jit(lambda a, x: kernel.block_call(None, [a, x], (np.float32,), 1, False))(
            np.ones(2, np.int32), np.ones(2))
    copied = jax.jit(lambda a, x: kernel.block_call(None, [a, x], (np.float64,), 1, False))(
        np.ones(2, np.int32), np.array([1.5, -2.0]))
    np.testing.assert_array_equal(np.asarray(copied[0]), [1.5, -2.0])


SWEEP = """
study = "pingpong"
[axes]
spin_ratio = {{ linspace = [0.2, 3.0, 37] }}
[solver]
rtol = 1e-10
atol = 1e-12
[run]
shard_size = 8
{batch_solver}
executor = "inline"
out = "{out}"
"""


def test_a_sweep_asks_for_the_fused_solver_and_its_cube_is_that_solver_s(caches, monkeypatch):
    """`run.batch_solver` names the solver of every task (and of every worker,
    which plans from the same sweep); the cube holds what that solver gives,
    and a cube is not resumed by a sweep asking for another."""
    from engine import parse_sweep, run
    from engine.errors import StoreError
    from engine.runner.cost import plan_for

    out = caches / "cube.zarr"
    fused = parse_sweep(SWEEP.format(batch_solver='batch_solver = "fused"', out=out))
    default = parse_sweep(SWEEP.format(batch_solver="", out=out))
    assert plan_for(fused).solver.name == "fused" and plan_for(default).solver.name == "lanes"
    assert "batch_solver" not in default.canonical() and fused.config_hash != default.config_hash
    run(fused, progress=False)
    cube = open_cube_values(out)
    plan = plan_for(fused)
    expected = evaluate(PINGPONG, fused.solver, {"spin_ratio": fused.axes[0].values} | {
        k: np.full(37, v) for k, v in fused.parameters.items()}, plan=plan)
    np.testing.assert_array_equal(cube, expected.outputs["final_displacement"])
    from engine.cube.markers import Markers

    Markers(out).drop_done("grid", 0)  # a shard to solve again (a complete cube is reported as it is)
    with pytest.raises(StoreError, match="another config: run.batch_solver: "):
        run(default, progress=False)
    # Its kernel backend is the cube's too: another would round its points otherwise.
    assert Markers(out).identity()["kernel"] == "host"
    monkeypatch.setenv("ROLLSWEEP_KERNEL_BACKEND", "pallas")
    with pytest.raises(StoreError, match="another config: ROLLSWEEP_KERNEL_BACKEND: this cube's fused kernel ran "
                                         "on the host backend, this run's would run on pallas; "):
        run(fused, progress=False)


def open_cube_values(path):
    from engine import open_cube

    return open_cube(path)["final_displacement"].values


def test_a_program_that_calls_no_host_kernel_names_none(caches, monkeypatch):
    """A program exported after a host kernel was registered in the process
    allows and names only its own calls: naming another's target, it was
    thrown away by every later process whose cache lacked that library. (The
    lanes' program in the fused one's batch, 64: any program without a host
    kernel shows it, and the default plan's, 32768 points in lanes of 1200,
    compiles 5 s longer on 2 cores.)"""
    _solve(COLUMNS)
    _forget(monkeypatch)
    evaluate(PINGPONG, SETTINGS, COLUMNS, plan=make_plan(PINGPONG, solver="lanes", batch=64))
    programs = _programs(caches)
    assert len(programs) == 2
    assert sorted(b"rs_host_" in p.read_bytes() for p in programs) == [False, True]

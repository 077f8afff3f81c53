"""The compiled batch program kept between processes (engine.solve.executables).

A process that compiled a program keeps its executable; a later one (here:
its programs forgotten, the same cache) loads it instead of reading, tracing
and lowering the program, and gets the same bits. Never kept: an executable
read from JAX's persistent cache, which XLA serializes again without some of
its kernels (its later calls fail): such a program is compiled by XLA and not written
into JAX's cache, and one read from there all the same is not kept. A
damaged or lost file is compiled again. An executable is kept with the custom
calls its program makes and loaded only where each is made ready first (a
LAPACK call loaded unready was a segmentation fault: tests/test_kept_executables.py);
a program making any other is not kept."""

import contextlib
import pathlib
import pickle
import types
import zlib

import numpy as np
import pytest
from test_load_ahead import DROP, LOWERED, POINTS, SETTINGS, events

import engine.solve.executables as executables
from engine.solve import make_plan
from engine.solve.device import current_device
from engine.solve.evaluate import compiled, evaluate
from engine.solve.executables import executable_key
from engine.solve.staging import Staging


@pytest.fixture
def cache(fresh_compile_cache):
    return fresh_compile_cache


def kept(cache) -> list:
    return sorted((cache / "programs").glob("*.executable"))


def solve() -> np.ndarray:
    """The drop study's 50 points, as a fresh process would solve them (its programs forgotten)."""
    compiled.cache_clear()
    return evaluate(DROP, SETTINGS, POINTS, plan=make_plan(DROP, points=50)).outputs["bounce"]


def test_a_later_process_loads_the_executable_and_gets_the_same_bits(cache):
    first = solve()
    assert len(kept(cache)) == 1
    with events() as seen:
        again = solve()
    assert seen == []  # nothing lowered (nor compiled)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first, np.sqrt(2 * POINTS["height"] / 9.81) * 2.4, rtol=1e-15)


def test_a_lost_executable_is_compiled_again_and_kept_anew(cache):
    """JAX's cache holds no copy of a kept program (were it read from there and
    kept, its later calls failed: "Function pad_reduce_fusion not found"): where
    the kept file is lost, the next process compiles the program and keeps it."""
    first = solve()
    (path,) = kept(cache)
    assert not any("rollsweep_executable" in entry.name for entry in cache.iterdir())  # not in JAX's cache
    path.unlink()
    np.testing.assert_array_equal(solve(), first)
    assert kept(cache) == [path]
    with events() as seen:
        np.testing.assert_array_equal(solve(), first)
    assert seen == []  # loaded


def test_an_executable_read_from_jax_s_cache_is_not_kept(cache, monkeypatch):
    """Where JAX's cache has the program all the same (written there by a JAX
    whose compile-time threshold is not the thread's), its read is seen and
    nothing is kept; the process solves with what it read, as before."""
    with monkeypatch.context() as patched:
        patched.setattr(executables, "_not_in_jax_cache", contextlib.nullcontext)
        first = solve()
    (path,) = kept(cache)
    assert any("rollsweep_executable" in entry.name for entry in cache.iterdir())  # in JAX's cache too
    path.unlink()
    np.testing.assert_array_equal(solve(), first)
    assert kept(cache) == []
    np.testing.assert_array_equal(solve(), first)  # the next process: JAX's cache again


def test_a_damaged_executable_is_compiled_again(cache):
    first = solve()
    (path,) = kept(cache)
    path.write_bytes(b"not an executable")
    with events() as seen:
        again = solve()
    np.testing.assert_array_equal(again, first)
    assert [event for event, _ in seen].count(LOWERED) >= 1  # made again, not loaded
    assert not path.exists() or path.read_bytes() != b"not an executable"


def test_a_damaged_executable_in_a_cache_it_cannot_change_is_compiled_each_time(cache, monkeypatch):
    """(A shared cache this process may read, not change: the damaged file stays.)"""
    first = solve()
    (path,) = kept(cache)
    path.write_bytes(b"not an executable")
    real = pathlib.Path.unlink

    def refused(self, *args, **kwargs):
        if self == path:
            raise PermissionError(1, "Operation not permitted", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "unlink", refused)
    np.testing.assert_array_equal(solve(), first)
    np.testing.assert_array_equal(solve(), first)


def test_an_executable_calling_what_this_process_cannot_make_ready_is_not_loaded(cache):
    """(A call none of executables._CALLS makes ready, written into the kept file.)"""
    first = solve()
    (path,) = kept(cache)
    serialized, in_tree, out_tree, calls = pickle.loads(zlib.decompress(path.read_bytes()))
    assert calls == []  # the drop study's program calls nothing
    path.write_bytes(zlib.compress(pickle.dumps((serialized, in_tree, out_tree, ["a_library_of_its_own"]))))
    with events() as seen:
        again = solve()
    np.testing.assert_array_equal(again, first)
    assert [event for event, _ in seen].count(LOWERED) >= 1  # made again, not loaded
    assert pickle.loads(zlib.decompress(path.read_bytes()))[3] == []  # and kept anew


def test_a_program_making_a_call_a_later_process_cannot_make_ready_is_not_kept(cache, monkeypatch):
    """Its executable is compiled as any program is (into JAX's cache, which serves the next process)."""
    monkeypatch.setattr(executables, "custom_calls", lambda lowered: ["a_library_of_its_own"])
    first = solve()
    assert kept(cache) == []
    with events() as seen:
        np.testing.assert_array_equal(solve(), first)
    assert [event for event, _ in seen].count(LOWERED) >= 1  # through its program
    assert not executables.keepable(["a_library_of_its_own"])
    assert executables.keepable(["lapack_dgetrf_ffi", "rs_host_" + "0" * 32, "Sharding"])
    assert executables.calls_ready(["lapack_dgetrf_ffi", "lapack_dtrsm_ffi"])
    assert not executables.calls_ready(["rs_host_" + "0" * 32])  # no such kernel library in the cache


def test_the_key_names_what_an_executable_depends_on(monkeypatch):
    import jax

    device = current_device()
    unstaged = Staging()
    base = executable_key("program", device, unstaged)
    assert base != executable_key("another program", device, unstaged)
    for moved in (Staging(results_pinned=True), Staging(inputs_pinned=True),
                  Staging(results_pinned=True, results_packed=True)):  # inputs or results moved through pinned memory
        assert base != executable_key("program", device, moved)
    with monkeypatch.context() as patched:
        patched.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
        assert base != executable_key("program", device, unstaged)
    jax.config.update("jax_enable_pgle", True)  # one of JAX's compile settings
    try:
        assert base != executable_key("program", device, unstaged)
    finally:
        jax.config.update("jax_enable_pgle", False)
    assert executable_key("program", device, unstaged) == base
    assert executable_key(None, device, unstaged) is None  # nothing says when it is stale
    assert executable_key("program", types.SimpleNamespace(platform="gpu"), unstaged) is None  # CPU only
    executables._host_cpu.cache_clear()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(executables, "open", lambda *a, **k: (_ for _ in ()).throw(OSError("none")), raising=False)
            assert executable_key("program", device, unstaged) is None  # the CPU's features unknown: nothing kept
    finally:
        executables._host_cpu.cache_clear()

"""What tracing a study's kernel body decides, kept between processes
(engine.solve.kernel.stored): the fused check and the generated C source are
read, not traced again; made again where the stored file is damaged or does
not fit; stored under what a study is made of (engine.solve.made_of), so that
one made at run time is its own entry, and never for a study holding what
cannot be described or for a check that failed unexpectedly."""


import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from test_kernel_c import _solve
from test_kernel_c import pytestmark as needs_cc  # a C compiler to build the host kernel
from test_lane_structural import _raising
from test_outside_models import NATURAL, SETTINGS, _ball_study, _columns

import engine.solve.kernel.c_source as c_source
import engine.solve.kernel.fused as fused_module
import engine.solve.kernel.stored as stored
from engine._jax_setup import CACHE_VARIABLE
from engine.solve import SOLVERS
from engine.solve.kernel.body import PLEASE_REPORT
from engine.solve.kernel.jaxpr import _STRUCTURAL
from studies.pingpong import STUDY as PINGPONG

FUSED = SOLVERS["fused"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache folder of the test's own, and no check of this process's remembered."""
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    fused_module._kernel_check.cache_clear()
    yield tmp_path / "traced"
    fused_module._kernel_check.cache_clear()


def _new_process():
    fused_module._kernel_check.cache_clear()


def _traced_never(study):
    raise AssertionError("traced again")


def test_a_registered_studys_check_is_read_not_traced_again(store, monkeypatch):
    reason, outside = FUSED.unsupported(PINGPONG), FUSED.outside(PINGPONG)
    assert reason is None
    assert len(list(store.glob("*.check.json"))) == 1
    _new_process()
    monkeypatch.setattr(fused_module, "_traced_check", _traced_never)
    assert FUSED.unsupported(PINGPONG) is None and FUSED.outside(PINGPONG) == outside


def test_a_damaged_check_is_traced_again(store, monkeypatch):
    FUSED.unsupported(PINGPONG)
    (entry,) = store.glob("*.check.json")
    traced = []
    real = fused_module._traced_check
    monkeypatch.setattr(fused_module, "_traced_check", lambda study: traced.append(study) or real(study))
    for damage in ("not json", '{"reason": null}', "[1, 2]"):
        entry.write_text(damage)
        _new_process()
        traced.clear()
        assert FUSED.unsupported(PINGPONG) is None
        assert traced == [PINGPONG], damage


def test_a_study_made_at_run_time_is_stored_by_what_it_is_made_of(store):
    """A study made by code at run time (here a test's factory, of closures) is
    stored under what it is made of: the check of one made alike is read, one
    made with another closed-over function is its own entry, and one holding a
    value that cannot be described is never stored."""
    FUSED.unsupported(NATURAL)
    assert len(list(store.glob("*.check.json"))) == 1
    FUSED.unsupported(ABSOLUTE_NAMED_NATURAL)
    assert len(list(store.glob("*.check.json"))) == 2
    assert stored.key(_ball_study("ball_natural_reset", jnp.abs), made="check") \
        == stored.key(ABSOLUTE_NAMED_NATURAL, made="check")
    opaque = _ball_study("ball_natural_reset", _Opaque())
    assert stored.key(opaque, made="check") is None
    FUSED.unsupported(opaque)
    assert len(list(store.glob("*.check.json"))) == 2


class _Opaque:
    """A reset height nothing can describe (an object of a test's own class)."""

    def __call__(self, h):
        return jnp.zeros_like(h)


# ABSOLUTE's closures under NATURAL's name: another study of the same name and files.
ABSOLUTE_NAMED_NATURAL = _ball_study("ball_natural_reset", jnp.abs)


def test_an_unexpected_failure_of_the_check_is_not_stored(store, monkeypatch):
    monkeypatch.setitem(_STRUCTURAL, lax.slice_p, _raising)
    assert FUSED.unsupported(PINGPONG).endswith(PLEASE_REPORT)
    assert not list(store.glob("*.check.json"))


def test_keys_differ_by_what_the_trace_is_made_with():
    base = stored.key(PINGPONG, made="source", settings="a", selected=["x"], block=32, x64=True)
    assert base == stored.key(PINGPONG, made="source", settings="a", selected=["x"], block=32, x64=True)
    others = [stored.key(PINGPONG, made="check", block=32),
              stored.key(PINGPONG, made="source", settings="b", selected=["x"], block=32, x64=True),
              stored.key(PINGPONG, made="source", settings="a", selected=["y"], block=32, x64=True),
              stored.key(PINGPONG, made="source", settings="a", selected=["x"], block=64, x64=True),
              stored.key(PINGPONG, made="source", settings="a", selected=["x"], block=32, x64=False)]
    assert base not in others and len(set(others)) == len(others)


# ---- the generated source (the host backend: the same C the CUDA backend compiles)


@needs_cc
@pytest.mark.cpu_only(reason="the host backend builds its kernel where the plan's device is the CPU; on a "
                               "GPU machine the plan is the GPU's, and the kernel there is CUDA or Pallas")
def test_the_generated_source_is_read_where_stored(store, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user"))  # the compiled libraries: this test's
    columns = _columns(PINGPONG, spin_ratio=np.linspace(0.2, 3.0, 40))
    first = _solve(PINGPONG, "fused", columns, SETTINGS)
    (entry,) = store.glob("*.c.json")
    real = c_source.generate  # (read by the store where it generates)
    monkeypatch.setattr(c_source, "generate", lambda *args: pytest.fail("generated again"))
    again = _solve(PINGPONG, "fused", columns, SETTINGS)
    np.testing.assert_array_equal(again.outputs["final_displacement"], first.outputs["final_displacement"])
    np.testing.assert_array_equal(again.num_steps, first.num_steps)
    # A stored source for other column dtypes does not fit: generated again.
    entry.write_text(entry.read_text().replace('"<f8"', '"<f4"', 1))
    generated = []
    monkeypatch.setattr(c_source, "generate", lambda *args: generated.append(1) or real(*args))
    third = _solve(PINGPONG, "fused", columns, SETTINGS)
    assert generated == [1]
    np.testing.assert_array_equal(third.outputs["final_displacement"], first.outputs["final_displacement"])

"""A later process loads the exported batch program instead of tracing it
(engine.solve.exported): no trace, bitwise the same results as the traced
program, and never a program made from other code or settings."""

import dataclasses
import enum
import operator
import os
import pathlib
import subprocess
import sys
import textwrap
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from zarr import open_group

from engine import (
    HybridPoint,
    HybridSystem,
    Interval,
    Mode,
    Output,
    Parameter,
    PointResult,
    SolverSettings,
    Start,
    Status,
    Study,
    Transition,
)
from engine.solve import evaluate, exported, make_plan, source_key
from engine.solve.evaluate import compiled

G = 9.81
SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=16)


def _fall(t, y, p):
    return jnp.stack([y[1], -G * jnp.ones_like(y[1])])


def _bounce(t, y, p):
    return jnp.stack([jnp.zeros_like(y[0]), -p["restitution"] * y[1]])


def _start(p, settings):
    return Start(jnp.stack([p["height"], jnp.zeros_like(p["height"])]), 0, p)


def _finish(p, sol, settings):
    return PointResult(outputs={"last_impact": sol.t}, status=sol.status, num_steps=sol.num_steps,
                       num_events=sol.num_events)


GROUND = Transition("ground", lambda t, y, p: y[0], target=0, direction=False, reset=_bounce)
BALL = Study(
    name="warm_ball", title="warm_ball", source="test", version="1",
    parameters=(Parameter("height", "m", 1.0, Interval(0.0, 10.0), "drop height"),
                Parameter("restitution", "1", 0.8, Interval(0.0, 1.0), "restitution")),
    outputs=(Output("last_impact", "s", "time of the last impact"),),
    solve_point=HybridPoint(HybridSystem((Mode("flight", _fall, (GROUND,)),)), _start, _finish),
)
COLUMNS = {"height": np.linspace(0.1, 3.0, 11), "restitution": np.linspace(0.3, 0.9, 11)}


def _fall_time(p, settings):
    """A closed form (quick to compile)."""
    t = jnp.sqrt(2 * p["height"] / G) + 0 * p["restitution"]
    return PointResult(outputs={"last_impact": t}, status=jnp.int8(Status.SUCCESS))


DROP = dataclasses.replace(BALL, name="warm_drop", solve_point=_fall_time)


@pytest.fixture
def traces(monkeypatch):
    """Counts the traces of every batch solver's batch function (its Python runs
    once per trace) and starts with no compiled program in this process."""
    count = []
    for solver in {make_plan(BALL, solver=s, batch=8).solver for s in ("vmapped", "lanes")}:
        original = type(solver).batch_function

        def counting(self, *args, original=original):
            fn = original(self, *args)

            def traced(*inputs):
                count.append(1)
                return fn(*inputs)

            return traced

        monkeypatch.setattr(type(solver), "batch_function", counting)
    compiled.cache_clear()
    yield count
    compiled.cache_clear()


def _new_process():
    """What a new process starts with: no compiled program in memory."""
    compiled.cache_clear()


def _identical(a, b) -> bool:
    same = [np.array_equal(a.outputs[k], b.outputs[k], equal_nan=True) for k in a.outputs]
    counters = ("status", "num_steps", "num_events")
    return all(same) and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in counters)


@pytest.mark.parametrize("solver", ["vmapped", pytest.param("lanes", marks=pytest.mark.slow)])
def test_a_warm_process_does_not_trace_and_gives_the_traced_results(solver, traces, tmp_path, monkeypatch):
    plan = make_plan(BALL, solver=solver, batch=8)
    monkeypatch.setenv("ROLLSWEEP_CACHE", "")  # no cache: the plain traced program
    traced = evaluate(BALL, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 1

    _new_process()
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    cold = evaluate(BALL, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 2  # traced once more, to export it
    assert len(list((tmp_path / "programs").glob("*.stablehlo"))) == 1

    _new_process()
    warm = evaluate(BALL, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 2  # loaded, not traced
    assert _identical(warm, cold) and _identical(warm, traced)
    assert np.all(warm.num_events > 0)  # a real solve: the balls bounced


def test_other_settings_or_plans_are_other_programs(traces, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    plan = make_plan(DROP, solver="vmapped", batch=8)
    evaluate(DROP, SETTINGS, COLUMNS, plan=plan)
    _new_process()
    evaluate(DROP, dataclasses.replace(SETTINGS, rtol=1e-8), COLUMNS, plan=plan)
    _new_process()
    evaluate(DROP, SETTINGS, COLUMNS, plan=make_plan(DROP, solver="vmapped", batch=64))
    assert len(traces) == 3
    assert len(list((tmp_path / "programs").glob("*.stablehlo"))) == 3


def test_a_changed_study_file_is_a_new_key(tmp_path, monkeypatch):
    """Any file of the study's package (code or data) changes the key: a program
    traced from the old files is never loaded."""
    package = tmp_path / "study_package"
    (package / "data").mkdir(parents=True)
    (package / "model.py").write_text("X = 1\n")
    (package / "data" / "table.csv").write_text("1,2\n")
    monkeypatch.setattr(source_key, "study_folder", lambda study: package)
    plan = make_plan(DROP, solver="vmapped", batch=8)
    args = ({"height": np.zeros(8), "restitution": np.zeros(8)}, np.int32(8))

    def key():
        return exported.program_key(BALL, SETTINGS, ("last_impact",), plan, args)

    first = key()
    (package / "data" / "table.csv").write_text("1,3\n")
    second = key()
    (package / "model.py").write_text("X = 2\n")
    third = key()
    assert len({first, second, third}) == 3
    assert key() == third  # and the same files, the same key
    float32 = ({k: v.astype(np.float32) for k, v in args[0].items()}, args[1])
    assert exported.program_key(BALL, SETTINGS, ("last_impact",), plan, float32) != third


def test_a_study_without_source_is_traced_every_time(traces, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    monkeypatch.setattr(source_key, "study_folder", lambda study: None)
    plan = make_plan(DROP, solver="vmapped", batch=8)
    evaluate(DROP, SETTINGS, COLUMNS, plan=plan)
    _new_process()
    evaluate(DROP, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 2
    assert not (tmp_path / "programs").exists()


def test_a_damaged_entry_is_made_again(traces, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    plan = make_plan(DROP, solver="vmapped", batch=8)
    first = evaluate(DROP, SETTINGS, COLUMNS, plan=plan)
    (entry,) = (tmp_path / "programs").glob("*.stablehlo")
    entry.write_bytes(b"not a program")
    for executable in (tmp_path / "programs").glob("*.executable"):  # (else loaded: the program not read)
        executable.unlink()
    _new_process()
    again = evaluate(DROP, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 2 and _identical(first, again)
    assert entry.read_bytes() != b"not a program"


# ---- studies of one name and the same files that differ in what they are made of


def _fall_time_scaled(scale):
    def fall_time(p, settings):
        t = scale * jnp.sqrt(2 * p["height"] / G) + 0 * p["restitution"]
        return PointResult(outputs={"last_impact": t}, status=jnp.int8(Status.SUCCESS))
    return fall_time


def _constant(p, settings):
    return PointResult(outputs={"last_impact": 0 * p["height"] + 7.0}, status=jnp.int8(Status.SUCCESS))


def test_a_study_of_the_same_name_and_files_made_otherwise_is_another_program(traces, tmp_path, monkeypatch):
    """Found on a GPU machine: two studies of one name, made in one test file,
    one finish returning a constant, were one key, and the program stored for
    the first was served for the second. Each is now its own program, in a
    later process too: another function, another closed-over value, another
    parameter range."""
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    same_name = [dataclasses.replace(DROP, solve_point=point) for point in
                 (_fall_time, _constant, _fall_time_scaled(1.0), _fall_time_scaled(2.0))]
    ranged = dataclasses.replace(DROP, parameters=(
        dataclasses.replace(DROP.parameters[0], allowed=Interval(0.0, 5.0)), DROP.parameters[1]))
    studies = same_name + [ranged]
    keys = {source_key.source_key(study, made="a test") for study in studies}
    assert None not in keys and len(keys) == len(studies)
    # A study made again alike has the same key: a later process reads what this one stored.
    assert source_key.source_key(dataclasses.replace(DROP, solve_point=_fall_time_scaled(2.0)), made="a test") \
        == source_key.source_key(studies[3], made="a test")
    fall = np.sqrt(2 * COLUMNS["height"] / G)
    expected = [fall, np.full(11, 7.0), fall, 2 * fall]
    for round_ in range(2):
        for study, want in zip(same_name, expected, strict=True):
            _new_process()
            plan = make_plan(study, solver="vmapped", batch=8)
            np.testing.assert_allclose(evaluate(study, SETTINGS, COLUMNS, plan=plan).outputs["last_impact"], want,
                                       rtol=1e-15)
        assert len(traces) == len(same_name), round_  # the second round: every program read, none traced
    assert len(list((tmp_path / "programs").glob("*.stablehlo"))) == len(same_name)


def test_a_study_holding_what_cannot_be_described_is_never_stored(traces, tmp_path, monkeypatch):
    """A closure over an object of a class nothing can describe: no key, so its
    program is traced in every process and never stored."""
    class Opaque:
        scale = 1.0

    opaque = Opaque()

    def fall_time(p, settings):
        return _fall_time_scaled(opaque.scale)(p, settings)

    study = dataclasses.replace(DROP, solve_point=fall_time)
    assert source_key.source_key(study) is None
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))
    plan = make_plan(study, solver="vmapped", batch=8)
    for _ in range(2):
        _new_process()
        evaluate(study, SETTINGS, COLUMNS, plan=plan)
    assert len(traces) == 2 and not (tmp_path / "programs").exists()


def _scaled_by_global(p, settings):
    return PointResult(outputs={"last_impact": SCALE * p["height"]}, status=jnp.int8(Status.SUCCESS))


SCALE = 1.0


def _with_point(point):
    return dataclasses.replace(DROP, solve_point=point)


def test_what_a_study_is_made_of_is_told_apart(monkeypatch):
    """Each pair traces to other programs, and has other keys: a packaged
    object made with values of its own (an itemgetter), a mapping in another
    order (a trace may follow it), a global its code names set at run time.
    A class made inside a function (its methods' closures unnamed) and an
    object of no known kind are not described: no key."""
    def key(point):
        return source_key.source_key(_with_point(point))

    def picking(picker):
        return lambda p, settings: _fall_time(p, settings) if picker(p) is None else _fall_time(p, settings)

    assert key(picking(operator.itemgetter("height"))) is None  # made with a value: not named by its name
    weights = [{"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}]
    ordered = [key(lambda p, settings, w=w: _fall_time(p, settings) if list(w.values())[0] else None) for w in weights]
    assert None not in ordered and ordered[0] != ordered[1]
    before = key(_scaled_by_global)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 2.0)
    assert key(_scaled_by_global) not in (None, before)

    def local_class():
        class Pick:
            def __call__(self, p):
                return p["height"]
        return Pick()

    picker = local_class()
    assert key(lambda p, settings: _fall_time(p, settings) if picker(p) is None else None) is None
    assert key(jax.jit(_fall_time)) not in (None, key(_fall_time))  # a wrapper, described by what it wraps


def _fall_time_of_a_set(p, settings):
    """A set constant in its code, which its hash order (PYTHONHASHSEED) must
    not reach the key through (marshal writes a frozenset sorted since Python 3.11)."""
    scale = 1.0 if "height" in {"height", "restitution", "drop", "bounce", "rest"} else 2.0
    return _fall_time_scaled(scale)(p, settings)


A_SET = dataclasses.replace(DROP, solve_point=_fall_time_of_a_set)


def test_keys_are_the_same_in_another_process(tmp_path):
    """No memory address or hash order in a description: other interpreters
    (other PYTHONHASHSEEDs) compute the same keys."""
    from test_lazy_imports import ENV
    from test_outside_models import NATURAL

    from studies.pingpong import STUDY

    code = textwrap.dedent("""
        from studies.pingpong import STUDY
        from test_outside_models import NATURAL
        from test_warm_start import A_SET, BALL
        from engine.solve.source_key import source_key
        print([source_key(s, made="a test") for s in (NATURAL, BALL, A_SET, STUDY)])
        """)
    here = [source_key.source_key(s, made="a test") for s in (NATURAL, BALL, A_SET, STUDY)]
    assert None not in here
    tests = pathlib.Path(__file__).resolve().parent
    for seed in ("1", "2", "3"):
        env = ENV | {"PYTHONHASHSEED": seed, "ROLLSWEEP_CACHE": str(tmp_path),
                     "PYTHONPATH": os.pathsep.join((str(tests), ENV["PYTHONPATH"]))}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines()[-1] == str(here), seed


class _Weights(NamedTuple):
    """A NamedTuple of the study's own: its property's code is in the key."""

    a: float
    b: float

    @property
    def total(self):
        return self.a + self.b


def _scaled_by_weights(p, settings):
    return _fall_time_scaled(WEIGHTS.total)(p, settings)


WEIGHTS = _Weights(1.0, 0.0)


def test_more_that_a_study_is_made_of(monkeypatch):
    """A second review's counter-examples: a class of the study's own by its
    methods (a NamedTuple's property changed at run time is another key); an
    object of no known kind named as a global (a namespace of settings) is not
    described, nor is one an attribute names; a jax.custom_jvp by its rule too;
    a weak-typed array is not a strong one."""
    def key(point):
        return source_key.source_key(_with_point(point))

    before = key(_scaled_by_weights)
    assert before is not None
    monkeypatch.setattr(_Weights, "total", property(lambda self: self.a - self.b))
    assert key(_scaled_by_weights) not in (None, before)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", types.SimpleNamespace(value=1.0))
    assert key(_scaled_by_global) is None

    def with_rule(rule):
        @jax.custom_jvp
        def f(x):
            return x

        f.defjvp(rule)
        return lambda p, settings: _fall_time_scaled(1.0)(p, settings) if f(p["height"]) is None else None

    rules = [lambda primals, tangents: (primals[0], tangents[0]),
             lambda primals, tangents: (primals[0], 2 * tangents[0])]
    assert len({key(with_rule(rule)) for rule in rules}) == 2
    weak, strong = jnp.asarray(1 / 3), jnp.asarray(1 / 3, jnp.float64)
    assert len({key(lambda p, s, c=c: _fall_time_scaled(c)(p, s)) for c in (weak, strong)}) == 2


class _Model:
    """A class of the study's own whose method reads a global."""

    def scale(self):
        return SCALE


class _Kind(enum.Enum):
    LOW = 1.0
    HIGH = 2.0


def _scaled_by_a_method(p, settings):
    return _fall_time_scaled(_Model().scale())(p, settings)


def _scaled_by_an_enum(p, settings):
    return _fall_time_scaled(_Kind.HIGH.value)(p, settings)


def test_a_method_reading_what_cannot_be_described_leaves_its_study_undescribed(monkeypatch):
    """A third review's counter-example: a method of the study's own class that
    reads a namespace of settings was kept as "not described", and the key
    stayed the same when the namespace changed. Now the study is undescribed,
    as when the point function reads it itself; an Enum of the study's own is
    described by its members."""
    assert source_key.source_key(_with_point(_scaled_by_a_method)) is not None
    monkeypatch.setattr(sys.modules[__name__], "SCALE", types.SimpleNamespace(value=1.0))
    assert source_key.source_key(_with_point(_scaled_by_a_method)) is None
    assert source_key.source_key(_with_point(_scaled_by_an_enum)) is not None


def _naming_zarrs_function(p, settings):
    """Names a function of an installed package (zarr: not one of the key's)."""
    return _fall_time_scaled(1.0 if open_group else 2.0)(p, settings)


def test_an_installed_packages_version_is_in_the_key(monkeypatch):
    """A package installed in site-packages is named by its version, not walked:
    another version of it is another key."""
    import engine.solve.made_of as made_of_module

    real = made_of_module.package_version
    before = source_key.source_key(_with_point(_naming_zarrs_function))
    monkeypatch.setattr(made_of_module, "package_version", lambda name: "another" if name == "zarr" else real(name))
    assert source_key.source_key(_with_point(_naming_zarrs_function)) not in (None, before)

"""The lane interpreter's structural primitives (engine.solve.kernel.jaxpr):
each one, emitted by a small point function and followed by elementwise
arithmetic on its result, evaluated on lane vectors (eagerly and traced, as
the kernel traces it) against jax.vmap of the same function. Each case checks
that JAX still traces it to its primitive, so a JAX that traces otherwise
fails here rather than passing untested. Then: a study whose field unpacks its
state with jnp.unstack (what jax >= 0.11 traces `h, v = y` to) through the
fused solver, and a failure of the fused check falling back (a reason, never a
crash), on a stubbed GPU too.
"""

import contextlib
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from test_outside_models import _columns, _param, _study

import engine.solve.kernel.fused as fused_module
import engine.solve.kernel.jaxpr as lane_jaxpr
import engine.solve.plan as plan_module
from engine import HybridSystem, Mode, PointResult, SolverSettings, Start, Status, Transition
from engine._jax_setup import CACHE_VARIABLE
from engine.cli.commands import main
from engine.solve import SOLVERS, Device, evaluate, make_plan
from engine.solve.kernel.body import PLEASE_REPORT
from engine.solve.kernel.jaxpr import _STRUCTURAL, LaneFunction, from_list, subjaxprs

LANES = 8


def _primitives(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn.primitive
        for sub in subjaxprs(eqn):
            yield from _primitives(sub)


def _to_lanes(args):
    """Arrays whose last axis is the lanes as object arrays of lane vectors."""
    return jax.tree_util.tree_map(
        lambda a: from_list([jnp.asarray(a[i]) for i in np.ndindex(a.shape[:-1])], a.shape[:-1]), args)


def _from_lanes(out):
    return jax.tree_util.tree_map(
        lambda o: np.array([np.broadcast_to(np.asarray(e), (LANES,)) for e in o.reshape(-1)]).reshape(
            o.shape + (LANES,)), out, is_leaf=lambda x: isinstance(x, np.ndarray))


def _on_lanes(fn, y, p, traced=False):
    """fn on lane vectors as the kernel evaluates it: eagerly, or traced (jit:
    every lane vector a tracer, as in the kernel's body)."""
    examples = (jax.ShapeDtypeStruct((3,), y.dtype), jax.ShapeDtypeStruct((), p.dtype))
    function = LaneFunction(fn, *examples)

    def call(y, p):
        out = function(*_to_lanes((y, p)), lanes=LANES)
        # Constants broadcast to lane vectors, so that jit returns arrays.
        return jax.tree_util.tree_map(
            lambda o: jnp.stack([jnp.broadcast_to(e, (LANES,)) for e in o.reshape(-1)]).reshape(o.shape + (LANES,)),
            out, is_leaf=lambda x: isinstance(x, np.ndarray))

    if traced:
        return jax.jit(call)(y, p)
    return _from_lanes(function(*_to_lanes((y, p)), lanes=LANES))


def _scalar_gather(y):
    """y[1] as a gather whose result is 0-d (offset_dims empty)."""
    numbers = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(y, jnp.array([1]), numbers, slice_sizes=(1,), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _unstack_rows(y, p):
    a, b, c = jnp.unstack(y)  # each a 0-d element of the point
    r0, r1 = jnp.unstack(jnp.outer(y[:2], y), axis=0)
    c0, _, c2 = jnp.unstack(jnp.outer(y[:2], y), axis=1)
    return a * p + b - c, r0 * r1 + p, c0 - c2 * p


def _split(y, p):
    a, b = lax.split(y, (1, 2))
    return a * p, b + 1.0, lax.split(y, (3,))[0] * p


def _barrier(y, p):
    a, b = lax.optimization_barrier((y, p))
    return a * b + lax.optimization_barrier(b) * 2.0


# primitive name -> point functions emitting it (each then computes on its result)
CASES = {
    "broadcast_in_dim": [
        lambda y, p: lax.broadcast_in_dim(p, (2, 3), ()) * y,
        lambda y, p: lax.broadcast_in_dim(y, (2, 3, 1), (1,)) + p,
    ],
    "reshape": [
        lambda y, p: lax.reshape(y, (3, 1)) * p,
        lambda y, p: lax.reshape(y[:1], ()) * p,  # to 0-d
        lambda y, p: lax.reshape(jnp.outer(y, y + p), (9,), dimensions=(1, 0)) * p,  # transposed first
    ],
    "squeeze": [
        lambda y, p: lax.squeeze(y[1:2], (0,)) * p,
        lambda y, p: lax.squeeze(lax.reshape(y, (1, 3, 1)), (0, 2)) - p,
    ],
    "concatenate": [lambda y, p: lax.concatenate([y, y[:1] * p], 0) + 1.0],
    "stack": [
        lambda y, p: jnp.stack([y[0] * p, y[1], p]) * y[2],
        lambda y, p: jnp.stack([y, y * p], axis=1) - 1.0,
    ],
    "unstack": [_unstack_rows],
    "split": [_split],
    "transpose": [lambda y, p: lax.transpose(jnp.outer(y, y + p), (1, 0)) * p],
    "rev": [lambda y, p: lax.rev(y, (0,)) * p],
    "slice": [
        lambda y, p: lax.slice(y, (1,), (3,)) * p,
        lambda y, p: lax.slice(y, (0,), (3,), (2,)) - p,
        lambda y, p: lax.slice(y, (2,), (3,)) * p,  # one element, still an array
    ],
    "dynamic_slice": [
        lambda y, p: lax.dynamic_slice(y, (1,), (2,)) * p,
        lambda y, p: lax.dynamic_slice(y, (5,), (2,)) * p,  # clamped, as XLA does
        lambda y, p: lax.dynamic_index_in_dim(y, 2, keepdims=False) * p,  # then squeezed to 0-d
    ],
    "dynamic_update_slice": [lambda y, p: lax.dynamic_update_slice(y, y[:1] * p, (2,)) + 1.0],
    "gather": [
        lambda y, p: y[jnp.array([2, 0])] * p,
        lambda y, p: _scalar_gather(y) * p,  # a 0-d result
    ],
    "scatter": [lambda y, p: y.at[1].set(p) * 2.0],
    "scatter-add": [lambda y, p: y.at[jnp.array([0, 0, 2])].add(p) * 2.0],
    "iota": [lambda y, p: lax.iota(jnp.float64, 3) * p + y],
    "pad": [
        lambda y, p: lax.pad(y, p, [(1, 2, 1)]) * 2.0,  # the padding value a lane vector
        lambda y, p: lax.pad(y, 0.0, [(-1, 1, 0)]) + p,
    ],
    "copy": [lambda y, p: lax.copy_p.bind(y) * p],
    "stop_gradient": [lambda y, p: lax.stop_gradient(y) * p],
    "optimization_barrier": [_barrier],
}


def test_every_structural_primitive_has_a_case():
    assert set(CASES) == {prim.name for prim in _STRUCTURAL}


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("name, index, fn", [(name, i, fn) for name, fns in CASES.items()
                                             for i, fn in enumerate(fns)],
                         ids=[f"{name}-{i}" for name, fns in CASES.items() for i in range(len(fns))])
def test_structural_primitive_on_lanes_matches_vmap(name, index, fn, traced):
    rng = np.random.default_rng(index)
    y, p = rng.uniform(-1, 1, (3, LANES)), rng.uniform(0.1, 1, LANES)
    emitted = {prim.name for prim in _primitives(jax.make_jaxpr(fn)(y[:, 0], p[0]).jaxpr)}
    assert name in emitted, f"JAX no longer traces this case to {name}: {sorted(emitted)}"
    expected = jax.vmap(fn, in_axes=-1, out_axes=-1)(y, p)
    got = _on_lanes(fn, y, p, traced)
    jax.tree_util.tree_map(lambda g, e: np.testing.assert_allclose(g, e, rtol=0, atol=1e-15), got, expected)


def test_a_rule_returning_a_bare_element_is_normalised(monkeypatch):
    """What a rule returns reaches the next rule as an object array of the
    output's shape (a bare element wrapped; a wrong shape an error, not a
    silent misreading)."""
    def bare(ins, avals, params, eqn):
        return ins[0].reshape(-1)[0]  # the element itself, as np.take gives it

    monkeypatch.setitem(_STRUCTURAL, lax.squeeze_p, bare)
    y, p = np.arange(3.0 * LANES).reshape(3, LANES), np.full(LANES, 2.0)
    np.testing.assert_array_equal(_on_lanes(lambda y, p: y[1] * p, y, p, traced=True), y[1] * p)
    monkeypatch.setitem(_STRUCTURAL, lax.squeeze_p, lambda ins, avals, params, eqn: ins[0])
    with pytest.raises(RuntimeError, match=r"lane rule of squeeze gave shape \(1,\) for \(\)"):
        _on_lanes(lambda y, p: y[1] * p, y, p)


# ---- a user's study whose field unpacks its state with jnp.unstack

G = 9.81


def _slide(t, y, p):
    x, v = jnp.unstack(y)  # what jax >= 0.11 traces `x, v = y` to
    return jnp.stack([v, -p["friction"] * G * jnp.ones_like(x)])


def _stuck(t, y, p):
    return jnp.zeros_like(y)


def _stick(t, y, p):
    x, v = jnp.unstack(y)
    return jnp.stack([x, jnp.zeros_like(v)])


def _stops(t, y, p):
    _, v = jnp.unstack(y)
    return v


def _start(p, settings):
    return Start(jnp.stack([jnp.zeros_like(p["speed"]), p["speed"]]), 0, p, t_end=p["horizon"])


def _finish(p, sol, settings):
    x, _ = jnp.unstack(sol.y)
    return PointResult(outputs={"position": x, "stop_time": sol.event_t[0]}, status=sol.status,
                       num_steps=sol.num_steps, num_events=sol.num_events)


UNSTACK_BLOCK = _study(
    "unstack_block",
    HybridSystem((Mode("slide", _slide, (Transition("stops", _stops, target=1, direction=False, reset=_stick),)),
                  Mode("stuck", _stuck, ends_at_horizon=True))),
    _start, _finish,
    [_param("speed", 2.0, 0.0, 10.0), _param("friction", 0.4, 0.01, 2.0), _param("horizon", 10.0, 0.0, 100)],
    ["position", "stop_time"],
)


def test_a_study_unpacking_its_state_with_unstack_is_fused():
    """Slides to rest at v0 / (mu G) after v0^2 / (2 mu G): fused (interpret
    mode, start and finish inside the kernel), as the closed form and the lanes."""
    assert SOLVERS["fused"].unsupported(UNSTACK_BLOCK) is None
    assert SOLVERS["fused"].outside(UNSTACK_BLOCK) == {}
    speed, friction = np.array([0.5, 2.0, 5.0, 9.0]), np.array([0.1, 0.4, 1.0, 2.0])
    columns = _columns(UNSTACK_BLOCK, speed=speed, friction=friction)
    settings = SolverSettings(rtol=1e-10, atol=1e-12)
    fused = evaluate(UNSTACK_BLOCK, settings, columns, plan=make_plan(UNSTACK_BLOCK, solver="fused", batch=32))
    lanes = evaluate(UNSTACK_BLOCK, settings, columns, plan=make_plan(UNSTACK_BLOCK, solver="lanes", batch=32))
    np.testing.assert_array_equal(fused.status, Status.SUCCESS)
    np.testing.assert_array_equal(fused.num_events, 1)
    np.testing.assert_allclose(fused.outputs["stop_time"], speed / (friction * G), rtol=0, atol=1e-9)
    np.testing.assert_allclose(fused.outputs["position"], speed**2 / (2 * friction * G), rtol=0, atol=1e-9)
    for name in fused.outputs:
        np.testing.assert_allclose(fused.outputs[name], lanes.outputs[name], rtol=0, atol=1e-10, err_msg=name)


# ---- a failure of the fused check is a reason, never a crash

GPU = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)
CPU = Device(platform="cpu", count=1, memory=None, cores=16)


def _raising(ins, avals, params, eqn):
    raise RuntimeError("a rule broke\nsecond line")


@pytest.fixture
def broken_slice(monkeypatch):
    """The lane interpreter's slice rule raising (as an unknown JAX might make
    any rule do), with the fused solver's cached checks set aside."""
    monkeypatch.setitem(_STRUCTURAL, lax.slice_p, _raising)
    with fresh_fused_checks():
        yield


@contextlib.contextmanager
def fresh_fused_checks():
    """The fused solver's checks made afresh inside (neither this process's
    nor one stored by an earlier process: the cache is off), and forgotten after."""
    fused_module._kernel_check.cache_clear()
    before = os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = ""
    try:
        yield
    finally:
        if before is None:
            del os.environ[CACHE_VARIABLE]
        else:
            os.environ[CACHE_VARIABLE] = before
        fused_module._kernel_check.cache_clear()


def test_a_failing_check_is_a_reason_and_a_gpu_plan_falls_back(broken_slice):
    from studies.pingpong import STUDY as PINGPONG

    reason = SOLVERS["fused"].unsupported(PINGPONG)
    assert reason == f"tracing it for the kernel raised RuntimeError: a rule broke {PLEASE_REPORT}"
    assert make_plan(PINGPONG, GPU).solver.name == "vmapped"
    assert make_plan(PINGPONG, CPU).solver.name == "lanes"  # CPU plans never asked the fused solver


def test_a_failing_start_check_runs_the_start_outside(monkeypatch):
    """A part of the solve whose check raises runs outside the kernel, saying why."""
    real = lane_jaxpr.LaneFunction.__call__

    def failing_for_the_start(self, *args, lanes):
        if self.name == "start":
            raise TypeError("no lanes today")
        return real(self, *args, lanes=lanes)

    monkeypatch.setattr(lane_jaxpr.LaneFunction, "__call__", failing_for_the_start)
    with fresh_fused_checks():
        assert SOLVERS["fused"].unsupported(UNSTACK_BLOCK) is None
        assert SOLVERS["fused"].outside(UNSTACK_BLOCK) == {
            "start": f"tracing the start for the kernel raised TypeError: no lanes today {PLEASE_REPORT}"}


@pytest.fixture
def on_gpu(monkeypatch):
    """This process seeing a (stubbed) GPU as its default backend, beside the host's CPU."""
    import engine.runner.execute as execute
    import engine.solve as solve

    def detect(platform=None):
        return GPU if platform in (None, "gpu") else dataclasses.replace(CPU, cores=GPU.cores)

    for module, name in ((plan_module, "detect"), (solve, "detect"), (execute, "detect_device")):
        monkeypatch.setattr(module, name, detect)


def test_the_cli_falls_back_in_one_line_on_a_gpu(broken_slice, on_gpu, small_sweep, capsys):
    path = small_sweep()
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert "valid pingpong sweep" in captured.out
    warning = captured.err.strip()
    assert "\n" not in warning
    assert warning.startswith("rollsweep: warning: study pingpong is not fused on this GPU (tracing it for the "
                              "kernel raised RuntimeError: a rule broke (please report this))")
    assert main(["studies", "pingpong"]) == 0
    captured = capsys.readouterr()
    assert "solver on a GPU: vmapped (not fused: tracing it for the kernel raised RuntimeError" in captured.out
    assert captured.err == ""
    # A small sweep: not fused, so on the host's cores (here, where no GPU is).
    assert main(["run", str(path), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "created; 5 shards, 23 points solved" in captured.out
    assert captured.err.strip() == warning


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="a machine with a GPU says it (the test above)")
def test_the_cli_on_cpu_says_nothing_of_a_failing_check(broken_slice, small_sweep, capsys):
    assert main(["validate", str(small_sweep())]) == 0
    assert capsys.readouterr().err == ""

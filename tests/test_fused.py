"""The fused solver (one kernel solves a batch, a point a lane), on CPU in
Pallas' interpret mode: against the closed forms of the rolling ball (Gao
Yunfeng 2021, eqs. (2)-(8)), against the lanes and vmapped solvers, the
study's functions evaluated on lane vectors against the same functions
vmapped, why a study cannot be fused, and the kernel's CUDA lowering (without
a GPU: the plugin's lowering runs on any machine).

The outside models (tests/test_outside_models.py) run on every registered
solver, the fused one included.
"""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import erf
from shared_solves import solved
from test_fused_outside import UNFUSABLE_ENDS
from test_outside_models import BLOCK, NATURAL, _columns, _param, _study

import engine.solve.kernel.pallas as backend
from engine import HybridSystem, Mode, PointResult, SolverSettings, Start, Status, Transition
from engine.solve import SOLVERS, Device, evaluate, make_plan
from engine.solve.kernel.jaxpr import LaneFunction, Unfusable, from_list
from engine.solve.plan import default_solver
from studies.bicycle import RESPONSE as BICYCLE_RESPONSE
from studies.hoop import STUDY as HOOP
from studies.pingpong import STUDY as PINGPONG
from studies.rebound import LANDING

import pingpong_closed_form as cf
from conftest import PINGPONG_DEFAULTS, assert_rolling_ball_closed_form

GPU = Device(platform="gpu", memory=16 * 2**30)


def _spread(n, seed=0):
    """n rolling-ball points spread over spin, drag and rolling resistance."""
    rng = np.random.default_rng(seed)
    columns = {k: np.full(n, v) for k, v in PINGPONG_DEFAULTS.items()}
    columns["spin_ratio"] = rng.uniform(0.0, 3.0, n)
    columns["drag"] = rng.uniform(0.0, 2.0, n)
    columns["rolling_resistance"] = rng.uniform(2e-5, 1e-3, n)
    return columns


def _solve(study, solver, columns, settings=None, batch=32, width=None):
    settings = settings or SolverSettings()
    return evaluate(study, settings, columns, plan=make_plan(study, solver=solver, batch=batch, width=width))


@pytest.fixture(scope="module")
def ball():
    """48 points in a batch of 64: tests/test_kernel_c.py's, whose lanes solve
    (a compile of 7 s on 2 cores) the two share."""
    columns = _spread(48)
    return columns, {"fused": _solve(PINGPONG, "fused", columns, batch=64),
                     "lanes": solved(PINGPONG, "lanes", columns, SolverSettings(), batch=64)}


@pytest.mark.parametrize("output, closed_form", cf.CLOSED_FORMS)
def test_rolling_ball_matches_closed_forms(ball, output, closed_form):
    columns, results = ball
    assert_rolling_ball_closed_form(columns, results["fused"], output, closed_form)


def _agree(fused, reference):
    np.testing.assert_array_equal(fused.status, reference.status)
    np.testing.assert_array_equal(fused.num_events, reference.num_events)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, reference.outputs[name], rtol=0, atol=1e-10, err_msg=name)


def test_rolling_ball_agrees_with_the_lanes(ball):
    _, results = ball
    _agree(results["fused"], results["lanes"])


@pytest.mark.slow
def test_rolling_ball_agrees_with_vmapped():
    """Against the plain vmapped solve (diffrax's own loop), another tableau."""
    columns, settings = _spread(16, seed=7), SolverSettings(solver="Dopri5")
    _agree(_solve(PINGPONG, "fused", columns, settings), _solve(PINGPONG, "vmapped", columns, settings))


def test_rolling_ball_takes_the_steps_of_the_lanes(ball):
    """The same tableau, step-size control and event rules as the lanes: the
    same number of steps, point for point."""
    _, results = ball
    np.testing.assert_array_equal(results["fused"].num_steps, results["lanes"].num_steps)


@pytest.mark.slow
def test_eighth_order_tableau_matches_closed_forms():
    """Another tableau (Dopri8, 13 stages, not first-same-as-last), tight tolerances."""
    columns = _spread(8, seed=3)
    result = _solve(PINGPONG, "fused", columns, SolverSettings(solver="Dopri8", rtol=1e-12, atol=1e-14), batch=16)
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    points = [{k: columns[k][i] for k in PINGPONG_DEFAULTS} for i in range(8)]
    for output, closed_form in [("slide_end_time", cf.slide_end_time), ("stop_time", cf.stop_time),
                                ("final_displacement", cf.final_displacement)]:
        expected = np.array([closed_form(p) for p in points])
        np.testing.assert_allclose(result.outputs[output], expected, rtol=0, atol=1e-10, err_msg=output)


@pytest.mark.slow
def test_a_point_does_not_depend_on_its_block_or_batch():
    """Bitwise equal results for batches and blocks of other sizes, padding and
    an out-of-range point among them."""
    columns = _spread(20, seed=5)
    columns["spin_ratio"][3] = -5.0  # out of range: solved at the defaults, reported as such
    a = _solve(PINGPONG, "fused", columns, batch=16, width=16)
    b = _solve(PINGPONG, "fused", columns, batch=64, width=32)
    assert a.status[3] == Status.OUT_OF_RANGE and np.isnan(a.outputs["stop_time"][3])
    np.testing.assert_array_equal(a.status, b.status)
    for name in a.outputs:
        np.testing.assert_array_equal(a.outputs[name], b.outputs[name], err_msg=name)


def test_failures_are_reported_not_silent():
    """Out of steps and a horizon reached before the expected event: statuses as
    the lanes report them, outputs NaN."""
    columns = _columns(BLOCK, speed=np.array([2.0, 2.0]), friction=0.4, horizon=np.array([0.1, 10.0]))
    # The block has not stopped by the horizon: its "stuck" mode is never reached.
    short = _solve(BLOCK, "fused", columns)
    assert short.status[0] == Status.EVENT_NOT_FOUND and np.isnan(short.outputs["position"][0])
    assert short.status[1] == Status.SUCCESS
    starved = _solve(NATURAL, "fused", _columns(NATURAL, bounces=3.0), SolverSettings(max_steps=3))
    assert starved.status[0] == Status.MAX_STEPS and np.isnan(starved.outputs["last_impact"][0])


# ---- the study's functions on lane vectors


def _on_lanes(fn, *args):
    """fn evaluated on lane vectors (one point per lane) as the kernel does."""
    lanes = np.shape(jax.tree_util.tree_leaves(args)[0])[-1]
    examples = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a)[:-1], a.dtype), args)
    function = LaneFunction(fn, *examples)
    inputs = jax.tree_util.tree_map(
        lambda a: from_list([jnp.asarray(a[i]) for i in np.ndindex(a.shape[:-1])], a.shape[:-1]), args)
    out = function(*inputs, lanes=lanes)
    return jax.tree_util.tree_map(
        lambda o: np.array([np.broadcast_to(np.asarray(e), (lanes,)) for e in o.reshape(-1)]).reshape(
            o.shape + (lanes,)), out, is_leaf=lambda x: isinstance(x, np.ndarray))


def _vmapped(fn, *args):
    return jax.vmap(fn, in_axes=-1, out_axes=-1)(*args)


@pytest.mark.parametrize("fn", [
    lambda y, p: jnp.stack([y[1], -p * y[0] + jnp.sum(y ** 2), jnp.max(y)]),
    lambda y, p: y.at[2].set(p).at[0].add(0.0),
    lambda y, p: y[jnp.array([2, 0])] * p,  # a gather with constant indices
    lambda y, p: jax.lax.cond(p > 0.5, lambda: y * 2.0, lambda: -y),  # per lane: both branches, selected
    lambda y, p: jnp.where(y > p, jnp.clip(y, 0.1, 0.4), jnp.sign(y) * jnp.abs(y) ** 1.5),
    lambda y, p: jnp.reshape(jnp.outer(y[:2], y[1:]), (-1,))[1:4] + jnp.arange(3.0),
    # Reductions are folded into the operation they repeat, which is what must lower.
    lambda y, p: jnp.where(jnp.any(y > p) & jnp.all(y < 1.0), jnp.prod(y), -y),
    # Matrix products of a point's small arrays, expanded into sums of products.
    lambda y, p: jnp.outer(y, y + p) @ y + y @ jnp.diag(y) - jnp.dot(y, y),
    lambda y, p: jnp.einsum("bij,bj->bi", jnp.stack([jnp.outer(y, y), p * jnp.eye(3)]), jnp.stack([y, y])),
], ids=["stack-reduce", "scatter", "gather", "cond", "where-clip-pow", "reshape-iota", "any-all-prod",
        "matmul", "batched-einsum"])
def test_point_functions_on_lanes_match_vmap(fn):
    rng = np.random.default_rng(0)
    y, p = rng.uniform(-1, 1, (3, 16)), rng.uniform(0, 1, 16)
    # (A matrix product may sum in another order than XLA's dot: an ulp or two.)
    np.testing.assert_allclose(_on_lanes(fn, y, p), _vmapped(fn, y, p), rtol=0, atol=1e-15)


def test_a_loop_in_a_point_function_is_refused():
    def looping(y, p):
        return jax.lax.fori_loop(0, 3, lambda i, v: v * p, y)

    with pytest.raises(Unfusable, match="uses scan, which the fused kernel cannot evaluate"):
        LaneFunction(looping, jax.ShapeDtypeStruct((3,), jnp.float64), jax.ShapeDtypeStruct((), jnp.float64))


def test_what_a_result_does_not_depend_on_is_not_evaluated():
    """Dead code (a LAPACK inverse nothing reads) neither runs nor makes the function unfusable."""
    def with_dead_code(y, p):
        jnp.linalg.inv(jnp.outer(y, y) + p)
        return y * p

    rng = np.random.default_rng(0)
    y, p = rng.uniform(-1, 1, (3, 16)), rng.uniform(0, 1, 16)
    np.testing.assert_array_equal(_on_lanes(with_dead_code, y, p), y * p)


@pytest.mark.parametrize("fn", [
    lambda y, p: y[jnp.asarray(p, jnp.int32)],  # out of range below and above: clamped, as XLA
    lambda y, p: y[jnp.asarray(p, jnp.int32) - 1] * y[1],
    lambda y, p: jax.lax.dynamic_slice(jnp.stack([y, 2 * y]), (jnp.int32(1), jnp.asarray(p, jnp.int32)), (1, 2)),
], ids=["index", "index and constant", "two axes"])
def test_a_slice_at_the_points_own_index(fn):
    """A finish reading its event log at its last event (`sol.event_t[k]`, k a
    point's own): each lane picks its own element."""
    rng = np.random.default_rng(3)
    y, p = rng.uniform(-1, 1, (3, 16)), np.arange(16.0) % 5 - 1
    np.testing.assert_array_equal(_on_lanes(fn, y, p), _vmapped(fn, y, p))


def test_a_narrow_index_into_a_long_axis():
    """An int8 index compared with row 150 of 300: widened first, not wrapped."""
    def fn(y, p):
        return jax.lax.dynamic_slice(y, (jnp.asarray(p, jnp.int8),), (1,))

    y, p = np.random.default_rng(4).uniform(-1, 1, (300, 16)), np.arange(16.0) * 9 - 20
    np.testing.assert_array_equal(_on_lanes(fn, y, p), _vmapped(fn, y, p))


def test_gathers_at_indices_that_depend_on_the_point_are_refused():
    def indexed(y, p):
        return y[jnp.stack([jnp.asarray(p, jnp.int32), 0])]

    function = LaneFunction(indexed, jax.ShapeDtypeStruct((3,), jnp.float64), jax.ShapeDtypeStruct((), jnp.float64))
    lanes = [jnp.zeros(16)] * 3
    with pytest.raises(Unfusable, match="depend on the point"):
        function(from_list(lanes, (3,)), from_list([jnp.ones(16)], ()), lanes=16)


# ---- which studies the fused solver serves, and the default


def _ball_with(field):
    """A ball whose flight follows `field`: a study to test what can be fused."""
    ground = Transition("ground", lambda t, y, p: y[0], target=None, direction=False)
    system = HybridSystem((Mode("flight", field, (ground,)),))

    def start(p, settings):
        return Start(jnp.stack([p["height"], jnp.zeros_like(p["height"])]), 0, p)

    def finish(p, sol, settings):
        return PointResult({"time": sol.t}, sol.status, sol.num_steps, sol.num_events)

    return _study("ball_with_field", system, start, finish, [_param("height", 1.0, 0.0, 10.0)], ["time"])


ERF_BALL = _ball_with(lambda t, y, p: jnp.stack([y[1], -9.81 * erf(1.0 + 0 * y[1])]))
def landing_columns(n=32, seed=1):
    """Serves of the landing map spread over every outcome class."""
    rng = np.random.default_rng(seed)
    columns = {p.name: np.full(n, p.default) for p in LANDING.parameters}
    columns["launch_speed"] = rng.uniform(3.0, 25.0, n)
    columns["elevation"] = rng.uniform(-10.0, 40.0, n)
    columns["topspin"] = rng.uniform(-300.0, 300.0, n)
    return columns


def test_serve_landing_agrees_with_the_lanes():
    """A study with a reset, a terminal net event and an event log read by its
    finish: every outcome class of the landing map (in, net, out, double bounce)."""
    columns = landing_columns()
    fused = _solve(LANDING, "fused", columns)
    lanes = solved(LANDING, "lanes", columns, SolverSettings(), batch=32)  # test_kernel_c.py's too
    assert len(set(lanes.outputs["outcome"][lanes.status == Status.SUCCESS])) >= 3  # several outcome classes
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.outputs["outcome"], lanes.outputs["outcome"])
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, lanes.outputs[name], rtol=0, atol=1e-9, err_msg=name)


# (The loop must do something: JAX forwards an identity loop's carry, leaving the loop dead code.)
LOOP_BALL = _ball_with(lambda t, y, p: jax.lax.fori_loop(0, 2, lambda i, v: 1.0 * v,
                                                          jnp.stack([y[1], -9.81 + 0 * y[0]])))


def test_why_a_study_cannot_be_fused():
    fused = SOLVERS["fused"]
    assert fused.unsupported(PINGPONG) is None
    assert fused.unsupported(NATURAL) is None and fused.unsupported(BLOCK) is None
    assert fused.unsupported(LANDING) is None
    assert "HybridPoint" in fused.unsupported(HOOP)
    assert "erf" in fused.unsupported(ERF_BALL) and "lower" in fused.unsupported(ERF_BALL)
    assert "mode flight uses scan" in fused.unsupported(LOOP_BALL)
    with pytest.raises(ValueError, match="fused solver cannot solve study 'ball_with_field'.*scan"):
        make_plan(LOOP_BALL, solver="fused")


def test_default_solver_is_fused_on_a_gpu_where_the_study_fuses():
    assert default_solver(PINGPONG, GPU) == "fused"
    assert default_solver(LOOP_BALL, GPU) == "vmapped"
    assert default_solver(HOOP, GPU) == "vmapped"
    assert default_solver(PINGPONG, Device()) == "lanes"
    assert default_solver(PINGPONG, Device(platform="tpu")) == "vmapped"  # the kernel backend compiles for GPUs
    plan = make_plan(PINGPONG, GPU)
    assert plan.solver.name == "fused" and plan.width == 32


# ---- the CUDA lowering, on a machine without a GPU


# CI sets ROLLSWEEP_REQUIRE_GPUCHECK=1 where it installed the plug-in: there a
# missing plug-in fails instead of skipping.
CUDA_PLUGIN = importlib.util.find_spec("jax_cuda12_plugin") is not None or bool(
    os.environ.get("ROLLSWEEP_REQUIRE_GPUCHECK"))


@pytest.mark.skipif(not CUDA_PLUGIN, reason="checking the CUDA lowering needs JAX's CUDA plug-in: "
                                            "pip install 'rollsweep[gpucheck]' (no CUDA libraries, no GPU)")
@pytest.mark.parametrize("study, selected, settings", [
    (PINGPONG, ("final_displacement", "slide_end_time", "stop_time", "reverses"), SolverSettings()),
    (PINGPONG, ("stop_time",), SolverSettings(solver="Dopri8", dtype="float32", rtol=1e-6, atol=1e-8)),
    (NATURAL, ("last_impact",), SolverSettings()),
    (BLOCK, ("position", "stop_time"), SolverSettings()),
    (LANDING, ("outcome", "landing_x", "bounce_x", "net_clearance"), SolverSettings(rtol=1e-9, atol=1e-11)),
    # Start and finish outside the kernel (A(v)'s inverse; the weave eigenvalue): XLA around one Triton call.
    (BICYCLE_RESPONSE, tuple(o.name for o in BICYCLE_RESPONSE.outputs if not o.sampled),
     SolverSettings(t_max=5.0, max_segments=24)),
    # Without the weave eigenvalue, the bicycle's finish runs in the kernel.
    (BICYCLE_RESPONSE, ("fall_time", "lean_extrema", "weave_period"), SolverSettings(t_max=5.0, max_segments=24)),
    (UNFUSABLE_ENDS, ("last_zero", "period"), SolverSettings()),
    # Samples at [save] times written from inside the kernel (a select a sample time and row).
    (PINGPONG, ("x", "x_dot", "stop_time"), SolverSettings(save_times=tuple(np.linspace(0.0, 4.0, 21)))),
], ids=["pingpong", "pingpong-dopri8-float32", "ball", "block", "landing", "bicycle-response",
        "bicycle-response-finish-inside", "outside-ends", "pingpong-sampled"])
def test_kernel_lowers_for_cuda(study, selected, settings):
    """The whole batch function exported for CUDA: the kernel is one Triton
    custom call (what Triton cannot lower fails here, not on the GPU); a start
    or finish outside it is plain XLA around that call."""
    plan = make_plan(study, GPU, solver="fused", batch=64)
    fn = plan.solver.batch_function(study, settings, selected, plan)
    params = {p.name: jax.ShapeDtypeStruct((64,), jnp.float64) for p in study.parameters}
    exported = jax.export.export(
        jax.jit(fn), platforms=["cuda"],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(backend.CUSTOM_CALL)],
    )(params, jax.ShapeDtypeStruct((), jnp.int32))
    module = exported.mlir_module()
    assert module.count(backend.CUSTOM_CALL) == 1

"""The fused kernel generated as C (engine.solve.kernel), without a GPU.

The generated source is the one the CUDA backend compiles; here it is built
for the host (ROLLSWEEP_KERNEL_BACKEND=host) and run by the fused solver:
against the rolling ball's closed forms (Gao Yunfeng 2021), the lanes solver
point for point (status, events and steps identical), the serve landing map,
bicycle_response and the outside models. Each semantic corner of the code
generator (XLA's NaN rules, rounding, integer powers, selects, branches,
loops, conversions) against jax on the same inputs, and its refusals. The
CUDA compile check (NVRTC, needs no GPU) runs where cuda-python and NVRTC
are installed (CI: .ci/run), and fails instead of skipping with
ROLLSWEEP_REQUIRE_GPUCHECK=1.
"""

import dataclasses
import os
import pathlib
import shutil
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from shared_solves import solved
from test_fused import landing_columns
from test_fused_outside import RESPONSE_SETTINGS, _response_columns
from test_outside_models import BLOCK, NATURAL, SETTINGS, G, _columns, impact_time

from engine import SolverSettings, Status
from engine._jax_setup import float64_here
from engine.solve import evaluate, exported, make_plan
from engine.solve.kernel.backends import ENV, choose, kernel_backend
from engine.solve.kernel.body import KernelBody
from engine.solve.kernel.c_source import KernelUnsupported, generate, literal
from engine.solve.kernel.host import HostKernel
from engine.solve.kernel.stored import kernel_source
from studies.bicycle import RESPONSE
from studies.pingpong import STUDY as PINGPONG
from studies.rebound import LANDING

import pingpong_closed_form as cf
from conftest import PINGPONG_DEFAULTS, assert_rolling_ball_closed_form

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler to build the generated kernel for the host")


@pytest.fixture(autouse=True, scope="module")
def _kernel_cache(tmp_path_factory):
    """Compiled kernels in a folder of this test run's (not the user's cache)."""
    with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}):
        yield


def _solve(study, solver, columns, settings=None, batch=64):
    """A batch solved; the fused solver's kernel by the host backend. The
    batch function is built afresh (the process's cache of batch functions
    does not name the kernel backend) and not exported (nothing of a test's
    kept in the cache for the next: tests/test_host_kernel.py tests the export)."""
    settings = settings or SolverSettings()
    env = {ENV: "host"} if solver == "fused" else {}
    evaluate_module = sys.modules["engine.solve.evaluate"]
    evaluate_module.compiled.cache_clear()
    try:
        not_kept = mock.patch.object(exported, "program", lambda make, key, args: (make(), False))
        with mock.patch.dict(os.environ, env), not_kept:
            return evaluate(study, settings, columns, plan=make_plan(study, solver=solver, batch=batch))
    finally:
        evaluate_module.compiled.cache_clear()


def test_the_host_backend_is_chosen_when_asked():
    choice = kernel_backend(PINGPONG, "cpu", request="host")
    assert choice.name == "host", choice.why
    assert kernel_backend(PINGPONG, "cpu").name == "host"  # the CPU default
    assert kernel_backend(PINGPONG, "cpu", request="pallas").name == "pallas"
    with mock.patch.dict(os.environ, {ENV: "nonsense"}), pytest.raises(ValueError, match=ENV):
        kernel_backend(PINGPONG, "cpu")


# ---- the studies, solved by the generated kernel


@pytest.fixture(scope="module")
def ball():
    rng = np.random.default_rng(0)
    n = 48
    columns = {k: np.full(n, v) for k, v in PINGPONG_DEFAULTS.items()}
    columns["spin_ratio"] = rng.uniform(0.0, 3.0, n)
    columns["drag"] = rng.uniform(0.0, 2.0, n)
    columns["rolling_resistance"] = rng.uniform(2e-5, 1e-3, n)
    # The lanes' solve is test_fused.py's too (its ball: the same 48 points, batch).
    return columns, {"fused": _solve(PINGPONG, "fused", columns),
                     "lanes": solved(PINGPONG, "lanes", columns, SolverSettings(), batch=64)}


@pytest.mark.parametrize("output, closed_form", cf.CLOSED_FORMS)
def test_rolling_ball_matches_closed_forms(ball, output, closed_form):
    columns, results = ball
    assert_rolling_ball_closed_form(columns, results["fused"], output, closed_form)


def test_rolling_ball_is_the_lanes_solve(ball):
    """The same steps, events and status point for point; outputs to rounding."""
    _, results = ball
    fused, lanes = results["fused"], results["lanes"]
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.num_events, lanes.num_events)
    np.testing.assert_array_equal(fused.num_steps, lanes.num_steps)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, lanes.outputs[name], rtol=1e-12, atol=1e-14, err_msg=name)


def test_serve_landing_agrees_with_the_lanes():
    columns = landing_columns()
    fused = _solve(LANDING, "fused", columns, batch=32)
    lanes = solved(LANDING, "lanes", columns, SolverSettings(), batch=32)  # test_fused.py's too
    assert len(set(lanes.outputs["outcome"][lanes.status == Status.SUCCESS])) >= 3
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.num_events, lanes.num_events)
    np.testing.assert_array_equal(fused.outputs["outcome"], lanes.outputs["outcome"])
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, lanes.outputs[name], rtol=0, atol=1e-9, err_msg=name)


def test_bicycle_response_agrees_with_the_lanes():
    """Its start and finish run outside the kernel (XLA), the system inside.
    Status and events as the lanes'; steps and outputs to the solver's
    accuracy: at 20 m/s (665 steps) the C build takes 2 steps more than XLA
    (libm's arithmetic is not XLA:CPU's to the last bit: its pow, its flushing
    of subnormals), which the Pallas kernel, being XLA, does not."""
    columns = _response_columns()
    fused = _solve(RESPONSE, "fused", columns, RESPONSE_SETTINGS, batch=16)
    lanes = solved(RESPONSE, "lanes", columns, RESPONSE_SETTINGS, batch=16)  # test_fused_outside.py's too
    np.testing.assert_array_equal(fused.status, Status.SUCCESS)
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.num_events, lanes.num_events)
    np.testing.assert_allclose(fused.num_steps, lanes.num_steps, rtol=0.01)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, lanes.outputs[name], rtol=0, atol=1e-9, err_msg=name)


def test_bouncing_ball_many_impacts():
    restitution = np.array([0.95, 0.97, 0.9])
    result = _solve(NATURAL, "fused", _columns(NATURAL, restitution=restitution, bounces=120.0), SETTINGS)
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.num_events, 120)
    expected = [impact_time(1.0, 0.0, e, 120) for e in restitution]
    np.testing.assert_allclose(result.outputs["last_impact"], expected, rtol=0, atol=1e-9)


def test_block_slides_to_rest_and_sticks():
    speed = np.array([0.5, 2.0, 5.0, 9.0])
    friction = np.array([0.1, 0.4, 1.0, 2.0])
    result = _solve(BLOCK, "fused", _columns(BLOCK, speed=speed, friction=friction), SETTINGS)
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.num_events, 1)
    np.testing.assert_allclose(result.outputs["stop_time"], speed / (friction * G), rtol=0, atol=1e-9)
    np.testing.assert_allclose(result.outputs["position"], speed**2 / (2 * friction * G), rtol=0, atol=1e-9)


def test_event_condition_at_the_segment_start():
    """Launched from the ground: the root at t = 0 is not an impact; launched
    downward the ball never crosses, and the horizon ends it unfound."""
    speeds = np.array([1.0, 3.0, 7.0])
    result = _solve(NATURAL, "fused", _columns(NATURAL, height=0.0, speed=speeds, bounces=3.0), SETTINGS)
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_allclose(result.outputs["last_impact"], [impact_time(0.0, v, 0.8, 3) for v in speeds],
                               rtol=0, atol=1e-9)
    down = _solve(NATURAL, "fused", _columns(NATURAL, height=0.0, speed=-1.0, bounces=3.0), SolverSettings(t_max=1.0))
    assert down.status[0] == Status.EVENT_NOT_FOUND and np.isnan(down.outputs["last_impact"][0])


def test_outside_model_agrees_with_the_lanes():
    columns = _columns(NATURAL, height=np.linspace(0.1, 4.0, 40), restitution=np.linspace(0.2, 0.9, 40), bounces=6.0)
    fused, lanes = (_solve(NATURAL, s, columns, SETTINGS, batch=32) for s in ("fused", "lanes"))
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.num_events, lanes.num_events)
    np.testing.assert_array_equal(fused.num_steps, lanes.num_steps)
    np.testing.assert_allclose(fused.outputs["last_impact"], lanes.outputs["last_impact"], rtol=1e-13, atol=0)


def _outside_finish(p, sol, settings):
    """_whole_log_finish with an argmax over the log, which the kernel cannot
    run: the finish runs outside it."""
    from test_event_log import _whole_log_finish

    result = _whole_log_finish(p, sol, settings)
    latest = jnp.argmax(jnp.where(jnp.isfinite(sol.event_t), sol.event_t, -jnp.inf)).astype(sol.t.dtype)
    return dataclasses.replace(result, outputs={**result.outputs, "latest": latest})


WHOLE_LOG_SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=96)


def _whole_log_study(finish):
    """The bouncing ball with a finish reading its whole log, in the kernel or
    outside it (with an argmax: the output `latest` more)."""
    import bouncing_ball as ball
    from test_event_log import _whole_log_finish

    from engine import HybridPoint
    from engine.study.interface import Output

    fn = _whole_log_finish if finish == "inside" else _outside_finish
    names = ["logged", "blank_codes", "sum_t", "sum_speed", "last"] + (["latest"] if finish == "outside" else [])
    study = dataclasses.replace(ball.STUDY, name=f"bouncing_ball_whole_log_{finish}",
                                outputs=tuple(Output(k, "1", k) for k in names),
                                solve_point=HybridPoint(ball.SYSTEM, ball.STUDY.solve_point.start, fn))
    return study, names


@pytest.fixture(scope="module")
def whole_log_per_point():
    """The per-point solve (vmapped) both finishes are checked against, solved
    once (a compile of diffrax's loop): the outside study's, whose finish is
    the inside one's (the same function: the same outputs) with `latest` more."""
    from test_event_log import _logged_columns

    study, _ = _whole_log_study("outside")
    return _solve(study, "vmapped", _logged_columns(40), WHOLE_LOG_SETTINGS, batch=16)


@pytest.mark.parametrize("finish", ["inside", "outside"])
def test_a_long_event_log_is_each_points_own(finish, whole_log_per_point):
    """The generated kernel's log is arrays written in place at each event's
    row: a finish reading every row of every array (blank rows past a point's
    events NaN and -1) gets the per-point solve's values, in the kernel and
    outside it (its log's rows then the kernel's output columns)."""
    from test_event_log import _logged_columns

    settings = WHOLE_LOG_SETTINGS
    study, names = _whole_log_study(finish)
    body = KernelBody(study.solve_point, settings, [p.name for p in study.parameters], names, 1)
    assert ("finish" in body.outside) == (finish == "outside")
    source = kernel_source(body, None).text
    assert (source.count("[96];"), source.count("[192];")) == (2, 1), "the log's times, codes and states as C arrays"
    columns = _logged_columns(40)
    fused, per_point = _solve(study, "fused", columns, settings, batch=16), whole_log_per_point
    np.testing.assert_array_equal(per_point.status, Status.SUCCESS)
    np.testing.assert_array_equal(fused.status, per_point.status)
    np.testing.assert_array_equal(fused.num_events, per_point.num_events)
    assert per_point.num_events.max() > 16  # past the rows the lanes keep per point
    for name in ["logged", "blank_codes"] + (["latest"] if finish == "outside" else []):
        np.testing.assert_array_equal(fused.outputs[name], per_point.outputs[name], err_msg=name)
    np.testing.assert_array_equal(fused.outputs["logged"], fused.num_events)
    np.testing.assert_array_equal(fused.outputs["blank_codes"], 96 - fused.num_events)
    for name in ("sum_t", "sum_speed", "last"):
        np.testing.assert_allclose(fused.outputs[name], per_point.outputs[name], rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("study", [PINGPONG, LANDING], ids=lambda s: s.name)
def test_a_short_event_log_stays_scalars(study):
    """A log of at most 16 rows (the shipped studies': 2 and 8) is no C array:
    a GPU keeps its values in registers, as when its figures were measured."""
    import re

    with float64_here():
        body = KernelBody(study.solve_point, SolverSettings(), [p.name for p in study.parameters],
                          [o.name for o in study.outputs if not o.sampled], 1)
        text = kernel_source(body, None).text
    assert not re.search(r"\b\w+ a\d+\[\d+\];", text)


# ---- the code generator's semantics, against jax on the same inputs


def _host(fn, in_dtypes, out_dtypes):
    return HostKernel(generate(fn, in_dtypes, out_dtypes))


def _reference(fn, columns):
    """fn point by point, each point a one-lane vector (as the kernel sees it),
    by XLA:CPU, whose semantics the host build follows (on an H200, XLA:GPU's
    float64 -> float32 conversion of values beyond float32's range differed)."""
    with float64_here(), jax.default_device(jax.devices("cpu")[0]):
        jitted = jax.jit(fn)
        outs = [jitted(*[jnp.asarray(c[i:i + 1]) for c in columns]) for i in range(len(columns[0]))]
    return [np.concatenate([np.asarray(o[k]) for o in outs]) for k in range(len(outs[0]))]


def _same(fn, columns, out_dtypes):
    """The host-compiled fn equals jax's fn bit for bit (NaNs where jax has NaNs)."""
    columns = [np.asarray(c) for c in columns]
    got = _host(fn, [c.dtype for c in columns], out_dtypes).run_numpy(*columns)
    want = _reference(fn, columns)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        if np.issubdtype(g.dtype, np.floating):
            np.testing.assert_array_equal(np.signbit(g[~np.isnan(w)]), np.signbit(w[~np.isnan(w)]))
        np.testing.assert_array_equal(g, w)


# No subnormals: XLA:CPU flushes them to zero, the generated C (like XLA on a GPU) keeps them.
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.5, -0.5, 0.5, 1e300, -1e-300,
                    2147483647.5, -2147483648.7, 4e9, 1.5e19, -9.3e18])


def test_max_min_propagate_nan_and_order_zeros():
    a = np.repeat(SPECIAL, SPECIAL.size)
    b = np.tile(SPECIAL, SPECIAL.size)
    _same(lambda x, y: (lax.max(x, y), lax.min(x, y), lax.clamp(jnp.float64(-1.0), x, jnp.float64(2.0)),
                        jnp.sign(x)), [a, b], [np.float64] * 4)


def test_round_modes_floor_ceil():
    _same(lambda x: (lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
                     jnp.floor(x), jnp.ceil(x)), [SPECIAL], [np.float64] * 4)


def test_integer_pow_as_xla():
    x = np.array([0.3, -1.7, 2.0, 1e-3, -0.0, 1e100, 3.3, np.nan])
    _same(lambda x: tuple(lax.integer_pow(x, y) for y in (0, 1, 2, 3, 5, 7, 13, -1, -2, -3, -7)), [x],
          [np.float64] * 11)
    n = np.array([0, 1, -3, 7, 1000], np.int32)
    _same(lambda n: (lax.integer_pow(n, 3), lax.integer_pow(n, 5)), [n], [np.int32] * 2)


def test_float_to_int_conversion_saturates():
    """NaN -> 0, out of range -> the nearest end (XLA:CPU's conversion)."""
    _same(lambda x: (x.astype(jnp.int32), x.astype(jnp.int64), x.astype(jnp.uint32), x.astype(jnp.int8),
                     x.astype(bool).astype(jnp.int32), x.astype(jnp.float32).astype(jnp.float64)),
          [SPECIAL], [np.int32, np.int64, np.uint32, np.int8, np.int32, np.float64])


def test_integer_and_boolean_operations():
    a = np.array([7, -7, 0, 5, -2147483647 - 1, 2147483647, 3, -1], np.int32)
    b = np.array([2, 0, 3, -1, -1, 1, 40, -5], np.int32)

    def f(a, b):
        return (lax.div(a, b), lax.rem(a, b), a + b, a * b, -a, jnp.abs(a), a & b, a | b, a ^ b,
                ~a, lax.shift_left(a, b), lax.shift_right_arithmetic(a, b), lax.shift_right_logical(a, b),
                lax.max(a, b), jnp.sign(a), ((a > 0) & ~(b > 0) | (a == b) ^ (b < 0)).astype(jnp.int32))

    _same(f, [a, b], [np.int32] * 16)


def test_float_functions():
    x = np.array([0.1, 0.5, 1.5, 2.0, 10.0, 0.0, -0.3, np.inf, np.nan])
    y = np.array([1.0, -2.0, 0.3, 7.0, 0.1, -0.0, 2.0, 1.0, 1.0])
    def same_everywhere(x, y):
        return (x + y, x - y, x * y, x / y, lax.rem(x, y), jnp.sqrt(x), jnp.abs(x),
                jnp.isfinite(x).astype(jnp.int32), jnp.square(x), lax.nextafter(x, y),
                (x < y).astype(jnp.int32), (x != y).astype(jnp.int32))

    _same(same_everywhere, [x, y], [np.float64] * 7 + [np.int32, np.float64, np.float64, np.int32, np.int32])
    # libm against XLA's own approximations (rsqrt included: XLA's is not 1/sqrt): to a few units in the last place
    def fns(x, y):
        return (lax.rsqrt(x), jnp.exp(x), jnp.log(x), jnp.sin(x), jnp.cos(x), jnp.tan(x), jnp.arctan2(x, y),
                jnp.tanh(x), jnp.expm1(x), jnp.log1p(x), jnp.power(x, y), jnp.cbrt(x), jax.nn.sigmoid(x))

    finite = np.isfinite(x)
    got = _host(fns, [np.float64] * 2, [np.float64] * 13).run_numpy(x[finite], y[finite])
    want = _reference(fns, [x[finite], y[finite]])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-300)


def test_select_n_with_three_cases():
    which = np.array([0, 1, 2, 1, 0], np.int32)
    x = np.array([1.0, 2.0, 3.0, np.nan, -0.0])
    _same(lambda w, x: (lax.select_n(w, x, 2 * x, -x), lax.select_n(w > 0, x, x + 1)), [which, x],
          [np.float64] * 2)


def test_cond_with_three_branches():
    which = np.array([0, 1, 2, 5, -1], np.int32)
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])

    def f(w, x):
        return lax.switch(w[0], [lambda x: (x + 1, w), lambda x: (x * 10, w + 1), lambda x: (-x, w * 3)], x)

    _same(f, [which, x], [np.float64, np.int32])


def test_any_lane_cond_is_a_branch():
    """The kernel's own predicate (jnp.max of a mask over the lanes) is the
    point's own mask with one lane: each point takes its own branch."""
    x = np.array([-1.0, 2.0, -3.0, 4.0])

    def f(x):
        return lax.cond(jnp.max((x > 0).astype(jnp.int32)) > 0, lambda x: jnp.sqrt(x), lambda x: x * x, x)

    _same(lambda x: (f(x),), [x], [np.float64])


def test_while_with_carried_ints_and_bools():
    """Newton's iteration for sqrt(a), counting its steps, with a boolean `done`
    carried and a body that swaps two carried values."""
    a = np.array([2.0, 9.0, 1e-6, 1e6, 0.5])

    def f(a):
        def cond(c):
            x, prev, k, done, s0, s1 = c
            return jnp.max((~done).astype(jnp.int32)) > 0

        def body(c):
            x, prev, k, done, s0, s1 = c
            new = 0.5 * (x + a / x)
            return new, x, k + 1, done | (jnp.abs(new - x) <= 1e-15 * new) | (k >= 60), s1, s0

        x, prev, k, done, s0, s1 = lax.while_loop(cond, body, (a, a, jnp.zeros_like(a, jnp.int32),
                                                               jnp.zeros_like(a, bool), a, -a))
        return x, k, done.astype(jnp.int32), s0

    _same(f, [a], [np.float64, np.int32, np.int32, np.float64])


def _log_loop(x, rows, branches_differ=False):
    """An event log as the kernel carries it (engine.solve.kernel.system._Rows):
    arrays filled once, then in a loop the k-th entry written in place where an
    `event` branch runs; read back one element at a time after the loop.
    branches_differ: the quiet branch returns a fresh array, not its operand's."""
    def cond(c):
        return c[0][0] < 7

    def body(c):
        k, times, codes = c

        def event():
            at = jnp.minimum(k[0], rows - 1)
            return (lax.dynamic_update_slice(times, x * (k + 1).astype(x.dtype), (at,)),
                    lax.dynamic_update_slice(codes, k * 3 - 1, (at + 2,)))  # past the end: clamped as XLA

        def quiet():
            return (lax.full((rows,), -1.0, x.dtype) if branches_differ else times), codes

        times, codes = lax.cond(jnp.max((k % 2 == 0).astype(jnp.int32)) > 0, event, quiet)
        return k + 1, times, codes

    init = (jnp.zeros((1,), jnp.int32), lax.full((rows,), jnp.nan, x.dtype), lax.full((rows,), -1, jnp.int32))
    _, times, codes = lax.while_loop(cond, body, init)
    return tuple(lax.slice_in_dim(times, r, r + 1) for r in range(rows)) + tuple(
        lax.dynamic_slice(codes, (jnp.int32(r),), (1,)) for r in range(rows))


@pytest.mark.parametrize("rows", [1, 3, 6])
@pytest.mark.parametrize("branches_differ", [False, True], ids=["in place", "copied"])
def test_arrays_written_in_place_through_a_loop_and_branches(rows, branches_differ):
    x = np.array([1.5, -2.0, np.inf])
    _same(lambda x: _log_loop(x, rows, branches_differ), [x], [np.float64] * rows + [np.int32] * rows)


def test_arrays_are_written_in_place_without_copies():
    """The log is one C array a loop updates in place: no element-by-element copy."""
    source = generate(lambda x: _log_loop(x, 6), [np.float64], [np.float64] * 6 + [np.int32] * 6).text
    assert source.count("[6];") == 2 and source.count("[q] = a") == 0
    copied = generate(lambda x: _log_loop(x, 6, True), [np.float64], [np.float64] * 6 + [np.int32] * 6).text
    # each branch copies its own into the branches' result, which the loop copies into its carry
    assert copied.count("[q] = a") == 3


def test_an_array_a_loop_only_reads_in_a_branch_is_read_after_it():
    """A table of values made before a loop that its body reads in a branch
    (JAX makes a loop-invariant carry the loop's constant: the fused kernel's
    sample times) is still the table after the loop and its branches."""
    def table_reads(x):
        table = lax.full((5,), 0.0, x.dtype)
        for k in range(5):
            table = lax.dynamic_update_slice(table, x * (k + 1), (jnp.int32(k),))

        def body(c):
            k, total, table = c
            read = lax.cond(jnp.max((k % 2 == 0).astype(jnp.int32)) > 0,
                            lambda: lax.dynamic_slice(table, (k[0],), (1,)), lambda: -x)
            return k + 1, total + read, table

        _, total, table = lax.while_loop(lambda c: c[0][0] < 5, body, (jnp.zeros((1,), jnp.int32), x, table))
        return total, lax.slice_in_dim(table, 4, 5)

    _same(table_reads, [np.array([1.5, -2.0, 0.25])], [np.float64, np.float64])


def test_arrays_used_after_an_update_are_refused():
    """An update in place would change a value still read: refused, with the reason."""
    def read_after_write(x):
        log = lax.full((4,), 0.0, x.dtype)
        written = lax.dynamic_update_slice(log, x, (jnp.int32(1),))
        return lax.slice_in_dim(written, 1, 2) + lax.slice_in_dim(log, 1, 2),

    with pytest.raises(KernelUnsupported, match="read after it was written"):
        generate(read_after_write, [np.float64], [np.float64])

    def swapped(x):
        a, b = lax.full((4,), 1.0, x.dtype), lax.full((4,), 2.0, x.dtype)
        a, b, _ = lax.while_loop(lambda c: c[2][0] < 3, lambda c: (c[1], c[0], c[2] + 1),
                                 (a, b, jnp.zeros((1,), jnp.int32)))
        return lax.slice_in_dim(a, 0, 1),

    with pytest.raises(KernelUnsupported, match="swaps its carried arrays"):
        generate(swapped, [np.float64], [np.float64])
    with pytest.raises(KernelUnsupported, match="a kernel output"):
        generate(lambda x: (lax.full((4,), 1.0, x.dtype),), [np.float64], [np.float64])


def _written(a, x, at=1):
    return lax.dynamic_update_slice(a, x, (jnp.int32(at),))


def _first(a):
    return lax.slice_in_dim(a, 0, 1)


def _outside_array_written_in_a_loop(x):
    """jax writes the outside array afresh in each iteration: 1 x, not 3."""
    outside = lax.full((4,), 0.0, x.dtype)

    def body(c):
        return c[0] + 1, c[1] + _first(_written(outside, x, 0))

    return lax.while_loop(lambda c: c[0][0] < 3, body, (jnp.zeros((1,), jnp.int32), x * 0))[1],


def _condition_writes_its_carry(x):
    def cond(c):
        return (c[0][0] < 2) & (_first(_written(c[1], x, 0))[0] > 0)

    def body(c):
        return c[0] + 1, c[1], c[2] + _first(c[1])

    start = (jnp.zeros((1,), jnp.int32), lax.full((4,), 0.0, x.dtype), x * 0)
    return lax.while_loop(cond, body, start)[2],


def _two_carries_one_array(x):
    log = lax.full((4,), 0.0, x.dtype)

    def body(c):
        return c[0] + 1, lax.full((4,), 5.0, x.dtype), _written(c[2], x, 0)

    return _first(lax.while_loop(lambda c: c[0][0] < 2, body, (jnp.zeros((1,), jnp.int32), log, log))[2]),


def _transposing_reshape(x):
    table = _written(lax.full((6,), 0.0, x.dtype), x).reshape(2, 3)
    return lax.slice_in_dim(lax.reshape(table, (6,), dimensions=(1, 0)), 2, 3),


@pytest.mark.parametrize("fn, reason", [
    (_outside_array_written_in_a_loop, "defined outside it"),
    (_condition_writes_its_carry, "condition writes"),
    (_two_carries_one_array, "one array twice"),
    (_transposing_reshape, "transposes"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else None)
def test_array_uses_an_in_place_update_would_get_wrong_are_refused(fn, reason):
    """Each gives jax's values only with copies: refused, naming why (Pallas then runs it)."""
    with pytest.raises(KernelUnsupported, match=reason):
        generate(fn, [np.float64], [np.float64])
    x = np.array([3.0])
    _reference(fn, [x])  # jax itself takes each


def test_an_unsigned_index_past_the_end_is_the_last_row():
    """XLA clamps an index to the array: an unsigned one past int64's range too."""
    at = np.array([0, 2, 7, 2**63 + 5, 2**64 - 1], np.uint64)
    x = np.arange(5.0)

    def f(at, x):
        log = lax.dynamic_update_slice(lax.full((3,), -1.0, x.dtype), x, (at[0],))
        return tuple(lax.slice_in_dim(log, r, r + 1) for r in range(3)) + (lax.dynamic_slice(log, (at[0],), (1,)),)

    _same(f, [at, x], [np.float64] * 4)


def test_literals_are_exact():
    assert literal(np.pi, np.float64) == "0x1.921fb54442d18p+1"
    assert literal(-0.0, np.float64) == "(-0x0.0p+0)"
    assert literal(np.nan, np.float64).startswith("rs_f64_bits(0x7ff8")
    assert literal(-2**31, np.int32) == "((int32_t)(-2147483647LL - 1))"
    x = np.array([1.0, -2.0])
    _same(lambda x: (x * np.pi + np.float64(1e-300), x + jnp.inf, x * np.float32(0.1).astype(np.float64)),
          [x], [np.float64] * 3)


# ---- refusals


def test_an_unsupported_primitive_is_refused_naming_it():
    with pytest.raises(KernelUnsupported, match="erf_inv"):
        generate(lambda x: (lax.erf_inv(x),), [np.float64], [np.float64])
    with pytest.raises(KernelUnsupported, match=r"shape \(3"):
        generate(lambda x: (jnp.sum(jnp.stack([x, x, x])),), [np.float64], [np.float64])


def test_a_body_that_does_not_generate_falls_back_to_pallas():
    class Body:  # a kernel body as the seam sees one
        input_dtypes = [jnp.dtype(np.float64)]
        out_dtypes = [jnp.dtype(np.float64)]

        def __call__(self, active, x, one_point=False):
            return [lax.erf_inv(x)]

    choice = choose(Body(), "cpu", request="host")
    assert choice.name == "pallas" and "erf_inv" in choice.why
    assert choose(Body(), "cpu", request="cuda").name == "pallas"  # no GPU here


# ---- the CUDA source through NVRTC (no GPU needed)


def _nvrtc_or_skip():
    try:
        from engine.solve.kernel.cuda import _nvrtc

        _nvrtc().nvrtcVersion()
    except Exception as error:  # ImportError, or the NVRTC library not found
        if os.environ.get("ROLLSWEEP_REQUIRE_GPUCHECK") == "1":
            pytest.fail(f"ROLLSWEEP_REQUIRE_GPUCHECK=1 but NVRTC is not usable: {type(error).__name__}: {error}")
        pytest.skip(f"cuda-python (cuda.bindings) with NVRTC is not installed: {type(error).__name__}: {error}")


def _logged_ball():
    import bouncing_ball as ball

    return ball.LOGGED


def _sampled_ball():
    from test_trajectories import SAMPLED_BALL

    return SAMPLED_BALL


# A sweep's sample times ([save] times): the kernel writes its samples from inside the solve.
SAMPLED = {"save_times": tuple(np.linspace(0.0, 4.0, 201))}


@pytest.mark.parametrize("study, settings", [
    (PINGPONG, SolverSettings()), (LANDING, SolverSettings()), (RESPONSE, RESPONSE_SETTINGS), (NATURAL, SETTINGS),
    (_logged_ball(), SolverSettings(rtol=1e-10, atol=1e-12, max_segments=1024)),
    (PINGPONG, SolverSettings(**SAMPLED)),
    (_sampled_ball(), SolverSettings(rtol=1e-10, atol=1e-12, max_segments=64, **SAMPLED)),
    (_sampled_ball(), SolverSettings(solver="Dopri5", max_segments=64, save_times=(0.0, 0.5, 1.0))),
], ids=["pingpong", "landing", "response", "natural", "logged-ball", "pingpong-sampled", "ball-sampled",
        "ball-sampled-dopri5-scalars"])
def test_cuda_source_compiles_with_nvrtc(study, settings):
    """The source the CUDA backend compiles (kernel_source: the event log as
    arrays), a log of 1,024 rows read in the kernel among them; and kernels
    writing samples (201 times: arrays; 3: scalars)."""
    _nvrtc_or_skip()
    from engine.solve.kernel.cuda import compile_cubin

    with float64_here():
        body = KernelBody(study.solve_point, settings, [p.name for p in study.parameters],
                          tuple(o.name for o in study.outputs if settings.save_times or not o.sampled), 1)
    source = kernel_source(body, None)
    cubin = compile_cubin(source, "sm_90")
    assert cubin[:4] == b"\x7fELF"


def _launcher_built(folder, *warnings):
    """A CUDA launcher of a kernel of three inputs and two outputs (its CUBIN a
    stand-in), built into `folder` with the engine's flags (and `warnings`):
    the library's path."""
    import subprocess

    from engine.solve.kernel.c_source import KernelSource, cuda_launcher
    from engine.solve.kernel.cuda import LAUNCHER_LIBS, THREADS
    from engine.solve.kernel.host import FLAGS, compiler

    source = KernelSource.of("/* a kernel body */", [np.int32, np.float64, np.float64], [np.float64, np.int32])
    text = cuda_launcher(source, b"\x7fELF" + bytes(61), THREADS)
    assert "void* params[6]" in text  # the count, then a pointer a column: the inputs, then the outputs
    (folder / "launcher.c").write_text(text)
    built = subprocess.run([compiler(), *FLAGS, *warnings, "-I", jax.ffi.include_dir(), "-o",
                            str(folder / "launcher.so"), str(folder / "launcher.c"), *LAUNCHER_LIBS],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    return folder / "launcher.so"


def test_the_cuda_launcher_compiles_cleanly_and_exports_its_handler_alone(tmp_path):
    """The CUDA kernel's FFI launcher (host C against JAX's FFI header, the
    driver's entry points declared by hand): no warning of the host compiler's
    with -Wall -Wextra, and its FFI handler the one symbol it exports."""
    import subprocess

    from engine.solve.kernel.c_source import CUDA_FFI_HANDLER

    library = _launcher_built(tmp_path, "-Wall", "-Wextra", "-Werror")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    assert [line.split()[-1] for line in symbols.splitlines() if " T " in line] == [CUDA_FFI_HANDLER]


def _real_cuda_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_the_cuda_launcher_drives_the_driver_as_it_should(tmp_path):
    """The launcher's handler called as XLA calls it (tests/cuda_launcher/
    call_handler.c: three inputs and two outputs of n points, XLA's stream,
    twice) against a stand-in for the CUDA driver that prints what it is asked
    (fake_driver.c). One thread a point in blocks of THREADS, the point count
    then the buffers, inputs before outputs, on XLA's stream, the module loaded
    once for both calls; with no context current, the buffers' made current and
    released; a launch that fails, a call of 2^31 points and a missing driver,
    each the call's error, named."""
    import subprocess

    from engine.solve.kernel.c_source import CUDA_ENTRY
    from engine.solve.kernel.cuda import THREADS
    from engine.solve.kernel.host import compiler

    here = pathlib.Path(__file__).parent / "cuda_launcher"
    launcher = _launcher_built(tmp_path)
    (tmp_path / "driver").mkdir()
    (tmp_path / "no driver").mkdir()
    for command in ([compiler(), "-O1", "-fPIC", "-shared", "-o", str(tmp_path / "driver" / "libcuda.so.1"),
                     str(here / "fake_driver.c")],
                    [compiler(), "-O1", "-I", jax.ffi.include_dir(), "-o", str(tmp_path / "call_handler"),
                     str(here / "call_handler.c"), "-ldl"]):
        built = subprocess.run(command, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-3000:]

    def called(n, driver="driver", **env):
        done = subprocess.run([str(tmp_path / "call_handler"), str(launcher), str(n)], capture_output=True,
                              text=True, timeout=60, env=os.environ | env | {"LD_LIBRARY_PATH": str(tmp_path / driver)})
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    launch = (f"launch grid {-(-1000 // THREADS)} 1 1 block {THREADS} 1 1 shared 0 stream 0xabc extra (nil) "
              "n 1000 pointers 0x100 0x200 0x300 0x400 0x500")
    assert called(1000) == ["module_loaded 1", f"function {CUDA_ENTRY}", launch, "ok", launch, "ok"]
    assert called(1000, FAKE_NO_CONTEXT="1") == [
        "pointer_attribute 1 100", "push 0x2000", "module_loaded 1", f"function {CUDA_ENTRY}", launch, "pop", "ok",
        "pointer_attribute 1 100", "push 0x2000", launch, "pop", "ok"]
    failed = "error rollsweep's CUDA kernel: cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
    assert called(1000, FAKE_LAUNCH_FAILS="700") == ["module_loaded 1", f"function {CUDA_ENTRY}", failed, failed]
    assert called(2**31)[-1] == "error rollsweep's CUDA kernel: a call takes fewer than 2^31 - 1 points"
    largest = 2**31 - 2  # the grid counted without overflowing an int
    assert called(largest)[2].startswith(f"launch grid {-(-largest // THREADS)} 1 1 block {THREADS} ")
    if not _real_cuda_driver():  # (where one is installed, the loader finds it)
        assert called(1000, driver="no driver")[-1] == (
            "error rollsweep's CUDA kernel: the CUDA driver library (libcuda.so.1) could not be loaded")


def _cuda_plugin_or_skip():
    import importlib.util

    if importlib.util.find_spec("jax_cuda12_plugin") is None and importlib.util.find_spec("jax_cuda13_plugin") is None:
        if os.environ.get("ROLLSWEEP_REQUIRE_GPUCHECK") == "1":
            pytest.fail("ROLLSWEEP_REQUIRE_GPUCHECK=1 but JAX's CUDA plug-in is not installed")
        pytest.skip("exporting for CUDA needs JAX's CUDA plug-in: pip install 'rollsweep[gpucheck]'")


def test_the_cuda_kernel_is_an_ffi_call_that_a_warm_process_registers(monkeypatch):
    """Built without a GPU (NVRTC for sm_90, the launcher by the host's
    compiler): the kernel is one call of its launcher's FFI target in the
    batch exported for CUDA, so the program is kept between processes; a
    process reading it finds the launcher in the cache and registers it
    (a target whose library is gone: False, the program made again). With
    $ROLLSWEEP_CUDA_LAUNCH=callback, no launcher: a Python callback, as before."""
    import re

    import engine.solve.kernel.host as host
    from engine.solve.kernel.backends import CUDA_LAUNCH_ENV, cuda_launch_requested
    from engine.solve.kernel.cuda import CudaKernel

    _nvrtc_or_skip()
    _cuda_plugin_or_skip()
    with float64_here():
        body = KernelBody(PINGPONG.solve_point, SolverSettings(), [p.name for p in PINGPONG.parameters],
                          tuple(o.name for o in PINGPONG.outputs if not o.sampled), 1)
        kernel = CudaKernel(kernel_source(body, None), "sm_90")
        assert kernel.launch == "its XLA FFI launcher" and kernel.target.startswith("rs_cuda_")
        columns = [jax.ShapeDtypeStruct((256,), jnp.int32)] + [
            jax.ShapeDtypeStruct((256,), d) for d in body.input_dtypes]
        exported_program = jax.export.export(
            jax.jit(lambda *xs: kernel.block_call(body, list(xs), body.out_dtypes, 1, False)), platforms=["cuda"],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(kernel.target)])(*columns)
    assert re.findall(r"custom_call @(\w+)", exported_program.mlir_module()) == [kernel.target]
    blob = bytes(exported_program.serialize())
    monkeypatch.setattr(host, "_loaded", {})  # as a fresh process: the library read from the cache
    assert host.register_targets(blob)
    assert not host.register_targets(blob.replace(kernel.target.encode(), b"rs_cuda_" + b"0" * 32))
    monkeypatch.setenv(CUDA_LAUNCH_ENV, "callback")
    by_callback = CudaKernel(kernel_source(body, None), "sm_90", cuda_launch_requested())
    assert by_callback.target is None and "callback" in by_callback.launch
    monkeypatch.setenv(CUDA_LAUNCH_ENV, "graphs")
    with pytest.raises(ValueError, match="ROLLSWEEP_CUDA_LAUNCH='graphs': expected ffi or callback"):
        cuda_launch_requested()


def test_a_kernel_of_more_columns_than_ctypes_passes_runs_through_xla():
    """A finish outside the kernel that reads an event log of 1024 rows takes
    thousands of columns out of it; ctypes gives a C function at most 1024
    arguments, so through a ctypes callback such a kernel could not run (the
    plan fell back to Pallas). XLA calls the library's FFI handler, which
    passes any number of columns: here 1,100 outputs, each its own value."""
    import jax

    from engine.solve.kernel.c_source import KernelSource

    outs = 1100
    params = ["const int32_t* restrict in0", "const double* restrict in1"] + [
        f"double* restrict out{k}" for k in range(outs)]
    body = "".join(f"    out{k}[i] = in1[i] * {k}.0 + in0[i];\n" for k in range(outs))
    text = ("#include <stdint.h>\n#include <stddef.h>\n"
            f"void rs_solve_batch(int64_t n, {', '.join(params)}) {{\n"
            f"  for (int64_t i = 0; i < n; ++i) {{\n{body}  }}\n}}\n")
    source = KernelSource.of(text, (np.dtype("int32"), np.dtype("float64")), (np.dtype("float64"),) * outs)
    kernel = HostKernel(source)
    with pytest.raises(KernelUnsupported, match="more than ctypes passes"):
        kernel.run_numpy(np.ones(3, np.int32), np.ones(3))
    x = np.array([0.5, 1.5, -2.0])
    active = np.array([1, 0, 1], np.int32)
    with jax.default_device(jax.devices("cpu")[0]):  # the host kernel's target is the CPU's (a GPU machine too)
        found = jax.jit(lambda a, b: kernel.block_call(None, [a, b], source.out_dtypes, 1, False))(active, x)
    assert len(found) == outs
    for k in (0, 1, 517, outs - 1):
        np.testing.assert_array_equal(np.asarray(found[k]), x * k + active)

"""The fused solver with a study's start or finish outside its kernel.

A start or finish that cannot run on lanes in the kernel (a LAPACK solve,
complex numbers, argmax) runs as plain XLA around it, while the hybrid
system stays fused. Checked in Pallas' interpret mode: the bicycle's time
response (Meijaard et al. 2007, section 8: A(v) from a 2x2 inverse, the
weave eigenvalue from the quartic's complex roots) against the lanes and
vmapped solvers, a damped oscillator written as a user would against its
closed form, and a study whose field cannot be fused falling back.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from shared_solves import solved
from test_outside_models import _param, _study

from engine import HybridSystem, Mode, PointResult, SolverSettings, Start, Status, Transition
from engine.solve import SOLVERS, Device, evaluate, make_plan
from engine.solve.plan import default_solver
from studies.bicycle import RESPONSE

GPU = Device(platform="gpu", memory=16 * 2**30)


def _solve(study, solver, columns, settings, batch=16):
    return evaluate(study, settings, columns, plan=make_plan(study, solver=solver, batch=batch))


# ---- the bicycle's time response: A(v) and the weave eigenvalue outside, the system fused

RESPONSE_SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12, t_max=5.0, max_segments=24)


def test_bicycle_response_fuses_its_system():
    fused = SOLVERS["fused"]
    assert fused.unsupported(RESPONSE) is None
    outside = fused.outside(RESPONSE)
    assert list(outside) == ["start", "finish"]
    assert outside["start"].startswith("start uses")  # A(v) = [[0, I], [-M^-1 K, -v M^-1 C1]]: lu, ...
    assert outside["finish"].startswith("finish uses")  # the weave eigenvalue (argmax, complex roots)
    assert default_solver(RESPONSE, GPU) == "fused"


def _response_columns():
    """Speeds below the weave speed (the bicycle falls), in the self-stable
    range 4.29-6.02 m/s, above the capsize speed and backwards, with lean rates
    of both signs."""
    speeds = np.array([-3.0, 0.3, 1.0, 2.0, 3.0, 4.0, 4.6, 5.5, 6.0, 7.0, 9.0, 20.0])
    columns = {p.name: np.full(speeds.size, p.default) for p in RESPONSE.parameters}
    columns["v"] = speeds
    columns["initial_lean_rate"] = np.linspace(-0.8, 0.8, speeds.size)
    return columns


@pytest.fixture(scope="module")
def response():
    """solver -> its results on _response_columns, solved once a module (the
    lanes' once a process: tests/test_kernel_c.py compares with them too)."""
    results = {}

    def solve(solver):
        if solver not in results:
            results[solver] = (solved if solver == "lanes" else _solve)(RESPONSE, solver, _response_columns(),
                                                                        RESPONSE_SETTINGS, batch=16)
        return results[solver]

    return solve


def test_bicycle_response_fused_equals_the_lanes(response):
    """The same rules and tableau as the lanes: the same steps and events point
    for point, outputs to rounding (the field's matrix product sums in another
    order than XLA's dot)."""
    fused, lanes = response("fused"), response("lanes")
    np.testing.assert_array_equal(fused.status, Status.SUCCESS)
    fell = ~np.isnan(fused.outputs["fall_time"])
    assert fell.sum() >= 4 and (~fell).sum() >= 4  # falling and upright points
    assert np.all(fused.outputs["lean_extrema"][~fell] >= 3)  # weave periods measured
    np.testing.assert_array_equal(fused.status, lanes.status)
    np.testing.assert_array_equal(fused.num_events, lanes.num_events)
    # The same steps, but for a point whose step sizes round an ulp apart in
    # the two programs (XLA compiles the arithmetic around each loop its own
    # way): at 20 m/s the lanes took 665 steps, since the lanes' event log is
    # kept a lane (b93c16d) 667, the fused solver 665.
    differ = fused.num_steps != lanes.num_steps
    assert differ.sum() <= 1 and np.all(np.abs(fused.num_steps - lanes.num_steps) <= 2), (fused.num_steps,
                                                                                         lanes.num_steps)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, lanes.outputs[name], rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.slow
def test_bicycle_response_fused_equals_vmapped(response):
    """Against diffrax's own loop (other event location, other steps)."""
    fused, vmapped = response("fused"), response("vmapped")
    np.testing.assert_array_equal(fused.status, vmapped.status)
    np.testing.assert_array_equal(fused.num_events, vmapped.num_events)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, vmapped.outputs[name], rtol=0, atol=1e-10, err_msg=name)


@pytest.mark.slow
def test_bicycle_response_does_not_depend_on_the_block():
    """Bitwise equal in blocks of 16 and 32 lanes of one batch, an out-of-range
    point among them. (Across batch sizes the vmapped start, A(v)'s inverse,
    may round otherwise in the last digit, as on the lanes: a run keeps one batch.)"""
    columns = {p.name: np.full(20, p.default) for p in RESPONSE.parameters}
    columns["v"] = np.linspace(-2.0, 9.0, 20)
    columns["v"][3] = 500.0
    a, b = (evaluate(RESPONSE, RESPONSE_SETTINGS, columns, plan=make_plan(RESPONSE, solver="fused", batch=64,
                                                                          width=width)) for width in (16, 32))
    assert a.status[3] == Status.OUT_OF_RANGE and np.all(np.delete(a.status, 3) == Status.SUCCESS)
    np.testing.assert_array_equal(a.num_steps, b.num_steps)
    for name in a.outputs:
        np.testing.assert_array_equal(a.outputs[name], b.outputs[name], err_msg=name)


# ---- a damped oscillator written as a user might: x'' + 2 zeta w x' + w^2 x = 0
#
# Its motion x(t) = exp(-zeta w t) (a cos(wd t) + b sin(wd t)), wd = w sqrt(1 -
# zeta^2), is given by (a, b); the events are the zeros of x. The field is a
# matrix product with a matrix made by the start, one per point.


def _oscillator(start_solves: bool, finish_complex: bool, field=None):
    def ride(t, y, p):
        return p["K"] @ y

    crossing = Transition("crossing", lambda t, y, p: y[0], target=0)
    system = HybridSystem((Mode("swinging", field or ride, (crossing,), ends_at_horizon=True),))

    def start(p, settings):
        w, zeta = p["omega"], p["zeta"]
        wd = w * jnp.sqrt(1 - zeta**2)
        if start_solves:  # (a, b) = T (x, v): the state solves the linear system
            T = jnp.array([[1.0, 0.0], [zeta * w / wd, 1 / wd]])
            y0 = jnp.linalg.solve(T, jnp.stack([p["a"], p["b"]]))
        else:
            y0 = jnp.stack([p["a"], wd * p["b"] - zeta * w * p["a"]])
        K = jnp.array([[0.0, 1.0], [-(w**2), -2 * zeta * w]])
        return Start(y0, 0, {"K": K}, t_end=p["horizon"])

    def finish(p, sol, settings):
        if finish_complex:  # the last zero by argmax, wd as the imaginary part of a complex root
            last = sol.event_t[jnp.argmax(jnp.where(sol.event_code >= 0, sol.event_t, -jnp.inf))]
            wd = jnp.sqrt((p["zeta"] ** 2 - 1).astype(jnp.complex128)).imag * p["omega"]
        else:
            last = jnp.max(jnp.where(sol.event_code >= 0, sol.event_t, -jnp.inf))
            wd = p["omega"] * jnp.sqrt(1 - p["zeta"] ** 2)
        outputs = {"last_zero": last, "period": 2 * jnp.pi / wd, "final_x": sol.y[0]}
        return PointResult(outputs, sol.status, sol.num_steps, sol.num_events)

    parameters = [_param("omega", 2.0, 0.5, 5.0), _param("zeta", 0.1, 0.0, 0.5), _param("a", 1.0, -2.0, 2.0),
                  _param("b", 0.0, -2.0, 2.0), _param("horizon", 3.0, 0.5, 10.0)]
    name = f"oscillator_{'solving' if start_solves else 'plain'}_{'complex' if finish_complex else 'plain'}"
    return _study(name, system, start, finish, parameters, ["last_zero", "period", "final_x"])


def oscillator_closed_form(omega, zeta, a, b, horizon):
    """Zeros of x: wd t - delta = pi/2 + k pi, x = r exp(-zeta w t) cos(wd t - delta)."""
    wd = omega * np.sqrt(1 - zeta**2)
    delta = np.arctan2(b, a)
    k = np.floor((wd * horizon - delta - np.pi / 2) / np.pi)
    zeros = (delta + np.pi / 2 + np.arange(-2, k + 1) * np.pi) / wd
    zeros = zeros[zeros > 0]
    x = np.exp(-zeta * omega * horizon) * (a * np.cos(wd * horizon) + b * np.sin(wd * horizon))
    return zeros[-1], zeros.size, 2 * np.pi / wd, x


OSCILLATOR_SETTINGS = SolverSettings(rtol=1e-11, atol=1e-13, max_segments=16)
UNFUSABLE_ENDS = _oscillator(start_solves=True, finish_complex=True)


def _oscillator_columns(study, n=8, seed=2):
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(1.0, 4.0, n), "zeta": rng.uniform(0.0, 0.4, n), "a": rng.uniform(-1.5, 1.5, n),
            "b": rng.uniform(-1.5, 1.5, n), "horizon": rng.uniform(2.0, 4.0, n)}


@pytest.mark.parametrize("start_solves, finish_complex, outside", [
    (True, True, ("start", "finish")),
    pytest.param(True, False, ("start",), marks=pytest.mark.slow),
    pytest.param(False, True, ("finish",), marks=pytest.mark.slow),
], ids=["both-outside", "start-outside", "finish-outside"])
def test_unfusable_start_or_finish_runs_outside_the_kernel(start_solves, finish_complex, outside):
    """The system is fused wherever the start or finish is not: against the
    closed form and the vmapped solver."""
    study = UNFUSABLE_ENDS if (start_solves, finish_complex) == (True, True) else _oscillator(
        start_solves, finish_complex)
    assert SOLVERS["fused"].unsupported(study) is None and tuple(SOLVERS["fused"].outside(study)) == outside
    columns = _oscillator_columns(study)
    fused = _solve(study, "fused", columns, OSCILLATOR_SETTINGS)
    np.testing.assert_array_equal(fused.status, Status.SUCCESS)
    expected = [oscillator_closed_form(*(columns[k][i] for k in ("omega", "zeta", "a", "b", "horizon")))
                for i in range(len(fused.status))]
    last, zeros, period, x = (np.array(e) for e in zip(*expected, strict=True))
    np.testing.assert_array_equal(fused.num_events, zeros)
    np.testing.assert_allclose(fused.outputs["last_zero"], last, rtol=0, atol=1e-9)
    np.testing.assert_allclose(fused.outputs["period"], period, rtol=1e-14, atol=0)
    np.testing.assert_allclose(fused.outputs["final_x"], x, rtol=0, atol=1e-9)
    vmapped = _solve(study, "vmapped", columns, OSCILLATOR_SETTINGS)
    np.testing.assert_array_equal(fused.num_events, vmapped.num_events)
    for name, values in fused.outputs.items():
        np.testing.assert_allclose(values, vmapped.outputs[name], rtol=0, atol=1e-10, err_msg=name)


def _kernel_outputs(study, settings, selected, batch=16):
    """The output columns of the kernel in the study's fused batch function."""
    plan = make_plan(study, solver="fused", batch=batch)
    fn = SOLVERS["fused"].batch_function(study, settings, selected, plan)
    params = {p.name: jax.ShapeDtypeStruct((batch,), jnp.float64) for p in study.parameters}
    # The kernel's call, whichever backend runs it: Pallas, or the generated
    # kernel through buffer_callback (the default on a GPU) or XLA's FFI (on CPU).
    kernels = {"pallas_call", "buffer_callback", "ffi_call"}
    (call,) = [e for e in jax.make_jaxpr(fn)(params).jaxpr.eqns if e.primitive.name in kernels]
    return call.outvars


def test_a_finish_outside_reads_only_what_the_kernel_writes():
    """A finish outside the kernel gets the solution's fields it reads for the
    selected outputs: the oscillator's last zero reads the status, counts and
    the event log's times and codes; its final position the state too. Not
    the end time, the mode, nor the event log's states."""
    rows = OSCILLATOR_SETTINGS.max_segments
    assert len(_kernel_outputs(UNFUSABLE_ENDS, OSCILLATOR_SETTINGS, ("last_zero",))) == 3 + 2 * rows
    assert len(_kernel_outputs(UNFUSABLE_ENDS, OSCILLATOR_SETTINGS, ("last_zero", "final_x"))) == 3 + 2 * rows + 2


def test_a_finish_whose_selected_outputs_fuse_runs_in_the_kernel():
    """Only the selected outputs count: without the weave eigenvalue's output,
    the bicycle's finish (event log reductions) runs in the kernel, which then
    writes just the outputs, status, steps and events."""
    selected = ("fall_time", "lean_extrema", "weave_period")
    assert len(_kernel_outputs(RESPONSE, RESPONSE_SETTINGS, selected)) == len(selected) + 3
    assert len(_kernel_outputs(RESPONSE, RESPONSE_SETTINGS, selected + ("weave_period_linear",))) > 2 * 24


@pytest.mark.slow
def test_the_finish_in_the_kernel_gives_what_it_gives_outside(response):
    """(Another program: its roundings may differ in the last digits, and so
    may a step's acceptance.)"""
    selected = ("fall_time", "final_lean", "lean_extrema", "weave_period")
    plan = make_plan(RESPONSE, solver="fused", batch=16)
    inside = evaluate(RESPONSE, RESPONSE_SETTINGS, _response_columns(), outputs=selected, plan=plan)
    outside = response("fused")
    np.testing.assert_array_equal(inside.status, outside.status)
    np.testing.assert_array_equal(inside.num_events, outside.num_events)
    for name in selected:
        np.testing.assert_allclose(inside.outputs[name], outside.outputs[name], rtol=0, atol=1e-12, err_msg=name)


def test_an_unfusable_field_falls_back_naming_the_system():
    """Where the field cannot be fused, the study is not, whatever its start and
    finish: the reason names the system's mode, and a GPU solves it vmapped."""
    solving = _oscillator(True, True, field=lambda t, y, p: jnp.linalg.solve(jnp.eye(2) - 0.0 * p["K"], p["K"] @ y))
    reason = SOLVERS["fused"].unsupported(solving)
    assert reason.startswith("its hybrid system cannot be fused") and "mode swinging uses lu" in reason
    assert "start" not in reason and "finish" not in reason
    assert default_solver(solving, GPU) == "vmapped"

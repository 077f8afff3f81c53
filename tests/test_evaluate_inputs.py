"""evaluate's handling of its inputs: a fixed parameter (a broadcast view, as a
shard passes it) goes to the device once, with bitwise the results of the same
values passed point by point; and the host allocator is set once per process."""

import os
import platform
import sys

import numpy as np
import pytest

from engine import SolverSettings
from engine.solve import evaluate, make_plan
from engine.solve._host_memory import keep_freed_memory
from studies.rebound import REGIME


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_fixed_parameter_gives_the_results_of_its_values_point_by_point(dtype):
    n = 37  # two whole batches of 16 and a padded one
    rng = np.random.default_rng(3)
    axes = {k: np.full(n, v) for k, v in REGIME.defaults.items()} | {
        "spin_ratio": rng.uniform(-1.2, 1.2, n), "incidence_angle": rng.uniform(0, 89.9, n)}
    fixed = {"friction": 0.3, "restitution": 0.7}
    settings = SolverSettings(dtype=dtype)
    views = {k: np.broadcast_to(np.float64(v), (n,)) for k, v in fixed.items()}
    assert all(v.strides == (0,) for v in views.values())
    full = {k: np.full(n, v) for k, v in fixed.items()}
    a = evaluate(REGIME, settings, axes | views, batch_size=16)
    b = evaluate(REGIME, settings, axes | full, batch_size=16)
    assert np.count_nonzero(a.status == 1) > n // 2
    for name in a.outputs:
        assert a.outputs[name].dtype == np.dtype(dtype) and a.outputs[name].shape == (n,)
        np.testing.assert_array_equal(a.outputs[name], b.outputs[name], err_msg=name)
    np.testing.assert_array_equal(a.status, b.status)
    # The fixed values were used: other values give other results.
    c = evaluate(REGIME, settings, axes | full | {"friction": np.full(n, 0.1)}, batch_size=16)
    assert not np.array_equal(a.outputs["out_vx"], c.outputs["out_vx"], equal_nan=True)


@pytest.mark.parametrize("n", [37, 48])  # a padded last call, and whole calls alone
def test_columns_with_room_give_a_copys_results_and_hold_the_padding(n, monkeypatch):
    """A run's task makes its columns call_room long, the room after its points
    padded where it stands as a copy would be (pad_last_call: the last call's
    first point): no call copies a column, and every result is the copied
    way's, bit for bit."""
    evaluate_module = sys.modules["engine.solve.evaluate"]  # engine.solve's `evaluate` is the function
    plan = make_plan(REGIME, batch=16)
    room = evaluate_module.call_room(plan, n)
    assert room == 48
    rng = np.random.default_rng(5)
    varying = {"spin_ratio": rng.uniform(-1.2, 1.2, n), "incidence_angle": rng.uniform(0, 89.9, n)}
    fixed = {k: np.broadcast_to(np.float64(v), (n,)) for k, v in REGIME.defaults.items() if k not in varying}
    roomy = {}
    for k, v in varying.items():
        roomy[k] = np.full(room, np.nan)  # what the room held before
        roomy[k][:n] = v
    evaluate_module.pad_last_call(roomy.values(), n, plan.batch)
    copied = evaluate(REGIME, SolverSettings(), varying | fixed, plan=plan)

    def no_copy(values, batch):
        raise AssertionError("a column with room was copied")

    monkeypatch.setattr(evaluate_module, "_padded", no_copy)
    queued = evaluate_module.queue_calls(REGIME, SolverSettings(), roomy | fixed, plan=plan, points=n)
    result = queued.result()
    for name in copied.outputs:
        assert result.outputs[name].shape == (n,)
        np.testing.assert_array_equal(result.outputs[name], copied.outputs[name], err_msg=name)
    for got, expected in ((result.status, copied.status), (result.num_steps, copied.num_steps),
                          (result.num_events, copied.num_events)):
        np.testing.assert_array_equal(got, expected)
    for k, v in roomy.items():
        np.testing.assert_array_equal(v[:n], varying[k])
        np.testing.assert_array_equal(v[n:], np.full(room - n, v[32]))  # the last call's first point


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_float64_settings_solve_in_float64_without_jax_x64():
    """A process that never enabled JAX's x64 (a notebook calling evaluate
    before any run) still solves float64 settings in float64: the bouncing
    ball's rest time as its closed form, in the steps a float64 solve takes."""
    import subprocess
    import sys

    script = """
import sys
sys.path.insert(0, "tests")
import jax, numpy as np
import bouncing_ball as ball
from engine import SolverSettings
from engine.solve import evaluate, make_plan
from engine.solve.evaluate import load_ahead
assert not jax.config.jax_enable_x64
h, e = np.array([1.0, 2.0, 7.5]), np.array([0.5, 0.6, 0.85])
settings = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=128)
columns = {"height": h, "restitution": e, "min_speed": np.full(3, ball.MIN_SPEED)}
plan = make_plan(ball.STUDY)
load_ahead(ball.STUDY, settings, columns, plan=plan).join()  # the program the evaluate below calls
got = evaluate(ball.STUDY, settings, columns, plan=plan)
rest, impacts = ball.closed_form(h, e)
assert got.outputs["rest_time"].dtype == np.float64, got.outputs["rest_time"].dtype
np.testing.assert_allclose(got.outputs["rest_time"], rest, rtol=1e-11)
np.testing.assert_array_equal(got.num_events, impacts)
assert got.num_steps.max() < 500, got.num_steps
assert not jax.config.jax_enable_x64
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]


def test_freed_host_memory_is_kept_on_glibc():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # once per process, then the cached answer


def test_no_points_is_a_clear_error():
    empty = {k: np.zeros(0) for k in REGIME.defaults}
    with pytest.raises(ValueError, match="rebound_regime.*no points"):
        evaluate(REGIME, SolverSettings(), empty, batch_size=16)


@pytest.mark.cpu_only(reason="compares evaluate's CPU way of copying results out (the default device's plan) with "
                              "the accelerator's way taken on the CPU by a stubbed GPU plan; on a GPU both plans "
                              "are accelerator plans and the CPU way is not run")
@pytest.mark.parametrize("pinned", ["0", ""], ids=["device memory", "pinned host memory (the default)"])
@pytest.mark.parametrize("n", [1000, 3 * 256 + 5])  # one call, and several (the last padded)
def test_an_accelerators_way_of_copying_results_out_gives_the_same_results(n, pinned, monkeypatch):
    """On an accelerator the call itself leaves its results in pinned host
    memory (or, with ROLLSWEEP_PINNED_RESULTS=0, each call's results start
    their copies to the host when the call is queued and come back in one
    device_get); on CPU they are views of the call's buffers. The same points give
    the same bits every way (here the accelerator's ways are taken on the CPU,
    by a plan for a stubbed GPU)."""
    from engine.solve import Device, make_plan
    from engine.solve.evaluate import PINNED_RESULTS, pinned_results

    monkeypatch.setenv(PINNED_RESULTS, pinned)

    spins = np.linspace(-1.0, 1.0, n)
    params = {p.name: np.full(n, p.default) for p in REGIME.parameters} | {"spin_ratio": spins}
    settings = SolverSettings()
    batch = 256 if n > 1000 else 1024
    on_cpu = evaluate(REGIME, settings, params, plan=make_plan(REGIME, solver="vmapped", batch=batch))
    gpu = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)
    plan = make_plan(REGIME, gpu, solver="vmapped", batch=batch)
    assert plan.device.accelerator and pinned_results(plan) == (pinned != "0")
    as_on_gpu = evaluate(REGIME, settings, params, plan=plan)
    for name, values in on_cpu.outputs.items():
        np.testing.assert_array_equal(as_on_gpu.outputs[name], values, err_msg=name)
    for name in ("status", "num_steps", "num_events"):
        np.testing.assert_array_equal(getattr(as_on_gpu, name), getattr(on_cpu, name), err_msg=name)


def test_pinned_results_leave_the_call_in_pinned_host_memory(monkeypatch):
    """On an accelerator plan, by default, every result of a call is in the
    host's pinned memory (the stubbed GPU's calls run on the CPU, whose device
    has that memory too); with ROLLSWEEP_PINNED_RESULTS=0, in the device's own
    memory. A CPU plan's results are never moved."""
    import jax

    from engine.solve import Device, make_plan
    from engine.solve.evaluate import PINNED_RESULTS, compiled, pinned_results

    gpu = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)
    plan = make_plan(REGIME, gpu, solver="vmapped", batch=16)
    args = {p.name: np.full(16, p.default) for p in REGIME.parameters}
    kinds = {}
    for pinned in ("0", "", "1"):
        monkeypatch.setenv(PINNED_RESULTS, pinned)
        results = compiled(REGIME, SolverSettings(), ("regime",), plan)(args, np.int32(16))
        kinds[pinned] = {leaf.sharding.memory_kind for leaf in jax.tree.leaves(results)}
    assert kinds == {"0": {"device"}, "": {"pinned_host"}, "1": {"pinned_host"}}
    monkeypatch.delenv(PINNED_RESULTS)
    on_cpu = make_plan(REGIME, Device(platform="cpu", count=1, cores=2), solver="vmapped", batch=16)
    assert not on_cpu.device.accelerator and not pinned_results(on_cpu)


@pytest.mark.cpu_only(reason="takes an accelerator's way of making a fixed parameter's batch on the CPU, by a "
                              "stubbed device, against the CPU's own way")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_accelerator_makes_a_fixed_parameters_batch_with_the_same_bits(dtype, monkeypatch):
    """On an accelerator a fixed parameter's batch is made on the device (one
    broadcast), not copied in: the same bits as the host's, -0.0 and a NaN's
    payload included."""
    import sys

    import jax

    from engine.solve.device import Device

    module = sys.modules["engine.solve.evaluate"]  # (engine.solve.evaluate, the attribute, is the function)

    values = np.array([-0.0, 1.5, np.nan, 1e-300], dtype)
    values[2] = np.frombuffer(np.uint64(0x7FF8_0000_0000_0ABC).tobytes(), np.float64)[0].astype(dtype)
    on_cpu = [module._filled(64, v.tobytes(), dtype, None, jax.config.jax_enable_x64) for v in values]
    module._filled.cache_clear()
    monkeypatch.setattr(module, "current_device", lambda: Device(platform="gpu"))
    module._broadcast.cache_clear()
    try:
        on_device = [module._filled(64, v.tobytes(), dtype, None, jax.config.jax_enable_x64) for v in values]
    finally:
        module._filled.cache_clear()
    assert module._broadcast.cache_info().currsize == 1  # the device's way was taken
    for host, device, value in zip(on_cpu, on_device, values, strict=True):
        assert np.asarray(device).tobytes() == np.asarray(host).tobytes() == np.full(64, value).tobytes()


def test_a_plans_calls_run_on_its_platform(monkeypatch):
    """evaluate and load_ahead enter the plan's platform, as a run's tasks do:
    a CPU plan on a GPU machine (the host kernel; a sweep too small for the
    GPU) otherwise ran its calls on the GPU. Here, where the CPU is the only
    platform, the platform each entered is recorded."""
    import contextlib
    import sys

    from engine.solve import make_plan
    from engine.solve.evaluate import load_ahead

    evaluate_module = sys.modules["engine.solve.evaluate"]  # engine.solve's `evaluate` is the function

    entered = []
    real = evaluate_module.on_platform

    @contextlib.contextmanager
    def recording(platform):
        entered.append(platform)
        with real(platform):
            yield

    monkeypatch.setattr(evaluate_module, "on_platform", recording)
    plan = make_plan(REGIME, solver="vmapped", batch=8)
    params = {p.name: np.full(8, p.default) for p in REGIME.parameters}
    load_ahead(REGIME, SolverSettings(), params, plan=plan)
    evaluate(REGIME, SolverSettings(), params, plan=plan)
    assert entered == [plan.device.platform] * 2

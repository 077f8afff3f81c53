"""A call's copies through the host's pinned memory (engine.solve.staging):
inputs put there and moved onto the device by the call, results moved there by
the call, packed into one buffer of bytes and read back as views. Every way
gives the bits of the CPU's own way; taken here on the CPU by a plan for a
stubbed GPU (the CPU's device has pinned host memory too)."""

import numpy as np
import pytest

from engine import SolverSettings
from engine.solve import Device, evaluate, make_plan
from engine.solve.staging import (
    PACKED_RESULTS,
    PINNED_INPUTS,
    PINNED_RESULTS,
    Staging,
    call_results_layout,
    results_layout,
    staging_for,
    unpacked,
)
from studies.bicycle import STUDY as BICYCLE
from studies.rebound import REGIME

GPU = Device(platform="gpu", count=1, memory=16 * 2**30, cores=16)

# (results pinned, inputs pinned, results packed) as the switches ask them: "" is the default.
WAYS = {
    "default": {},
    "inputs pinned": {PINNED_INPUTS: "1"},
    "results packed": {PACKED_RESULTS: "1"},
    "inputs pinned, results packed": {PINNED_INPUTS: "1", PACKED_RESULTS: "1"},
    "nothing pinned": {PINNED_RESULTS: "0"},
    "inputs pinned alone": {PINNED_RESULTS: "0", PINNED_INPUTS: "1", PACKED_RESULTS: "1"},
}


def with_switches(monkeypatch, switches: dict):
    for name in (PINNED_RESULTS, PINNED_INPUTS, PACKED_RESULTS):
        monkeypatch.delenv(name, raising=False)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)


def test_the_switches_choose_the_staging(monkeypatch):
    expected = {
        "default": Staging(results_pinned=True),
        "inputs pinned": Staging(results_pinned=True, inputs_pinned=True),
        "results packed": Staging(results_pinned=True, results_packed=True),
        "inputs pinned, results packed": Staging(True, True, True),
        "nothing pinned": Staging(),
        "inputs pinned alone": Staging(inputs_pinned=True),  # packing is a way of pinned results only
    }
    for way, switches in WAYS.items():
        with_switches(monkeypatch, switches)
        assert staging_for(accelerator=True) == expected[way], way
        assert staging_for(accelerator=False) == Staging(), way  # a CPU call reads and writes where it is


def test_a_layout_puts_every_piece_aligned_and_back_to_back():
    shapes = ((5, 4), (5,), (5,), (5,), (5,))
    dtypes = ("float32", "int8", "int32", "float64", "int32")
    layout = results_layout(shapes, dtypes)
    assert [p.dtype.itemsize for p in layout] == sorted((p.dtype.itemsize for p in layout), reverse=True)
    assert sorted(p.index for p in layout) == list(range(5))
    offset = 0
    for piece in layout:
        assert piece.offset == offset and piece.offset % piece.dtype.itemsize == 0
        assert piece.shape == shapes[piece.index] and piece.dtype == np.dtype(dtypes[piece.index])
        offset += piece.nbytes
    # A batch function's results: the outputs, then status (int8), steps and events (int32).
    call = call_results_layout(((), (4,)), "float32", 16)
    assert [(p.index, p.shape, p.dtype.name) for p in sorted(call, key=lambda p: p.index)] == [
        (0, (16,), "float32"), (1, (16, 4), "float32"), (2, (16,), "int8"), (3, (16,), "int32"), (4, (16,), "int32")]


def test_unpacked_views_give_back_every_bit():
    rng = np.random.default_rng(0)
    values = [rng.normal(size=(7, 3)).astype(np.float32), np.array([-0.0, np.nan, np.inf, 1e-310, 1.0, 2.0, 3.0]),
              np.arange(-3, 4, dtype=np.int8), np.arange(7, dtype=np.int32) * -1000003]
    values[1][1] = np.frombuffer(np.uint64(0x7FF8_0000_0000_0ABC).tobytes(), np.float64)[0]  # a NaN's payload
    layout = results_layout(tuple(v.shape for v in values), tuple(v.dtype.name for v in values))
    buffer = np.concatenate([np.frombuffer(values[p.index].tobytes(), np.uint8) for p in layout])
    for got, value in zip(unpacked(buffer, layout), values, strict=True):
        assert got.dtype == value.dtype and got.shape == value.shape and got.tobytes() == value.tobytes()
        assert np.shares_memory(got, buffer)  # views, not copies


@pytest.mark.cpu_only(reason="takes an accelerator's ways on the CPU, by a stubbed GPU plan, against the CPU's own")
@pytest.mark.parametrize("way", list(WAYS))
# One call (padded), and several (the last padded), in batches of 32 both: the same programs.
@pytest.mark.parametrize("n", [20, 3 * 32 + 5])
def test_every_staging_gives_the_cpus_bits(way, n, monkeypatch):
    spins = np.linspace(-1.0, 1.0, n)
    params = {p.name: np.full(n, p.default) for p in REGIME.parameters} | {"spin_ratio": spins}
    batch = 32
    with_switches(monkeypatch, {})
    on_cpu = evaluate(REGIME, SolverSettings(), params, plan=make_plan(REGIME, solver="vmapped", batch=batch))
    with_switches(monkeypatch, WAYS[way])
    as_on_gpu = evaluate(REGIME, SolverSettings(), params, plan=make_plan(REGIME, GPU, solver="vmapped", batch=batch))
    assert np.count_nonzero(on_cpu.status == 1) > n // 2
    for name, values in on_cpu.outputs.items():
        assert as_on_gpu.outputs[name].tobytes() == values.tobytes(), name
    for name in ("status", "num_steps", "num_events"):
        got, expected = getattr(as_on_gpu, name), getattr(on_cpu, name)
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), name


@pytest.mark.cpu_only(reason="takes an accelerator's ways on the CPU, by a stubbed GPU plan, against the CPU's own")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_packed_results_keep_an_outputs_extra_dimension(dtype, monkeypatch):
    """The bicycle's eigenvalues (4 modes a point), packed in float32 and
    float64 beside the int8 status: the bits of the CPU's own way."""
    speeds = {"v": np.linspace(0.0, 10.0, 37)}
    params = {p.name: np.full(37, p.default) for p in BICYCLE.parameters} | speeds
    settings = SolverSettings(dtype=dtype)
    with_switches(monkeypatch, {})
    on_cpu = evaluate(BICYCLE, settings, params, plan=make_plan(BICYCLE, solver="vmapped", batch=16))
    with_switches(monkeypatch, {PINNED_INPUTS: "1", PACKED_RESULTS: "1"})
    packed = evaluate(BICYCLE, settings, params, plan=make_plan(BICYCLE, GPU, solver="vmapped", batch=16))
    assert packed.outputs["eigenvalue_real"].shape == (37, 4)
    for name, values in on_cpu.outputs.items():
        assert packed.outputs[name].dtype == np.dtype(dtype)
        assert packed.outputs[name].tobytes() == values.tobytes(), name
    assert packed.status.tobytes() == on_cpu.status.tobytes()


@pytest.mark.cpu_only(reason="reads where a stubbed GPU plan's call takes its inputs and leaves its results")
def test_a_staged_call_takes_pinned_inputs_and_leaves_one_pinned_buffer(monkeypatch):
    import sys

    import jax

    evaluate_module = sys.modules["engine.solve.evaluate"]  # engine.solve's `evaluate` is the function
    plan = make_plan(REGIME, GPU, solver="vmapped", batch=16)
    fixed = {p.name: np.broadcast_to(np.float64(p.default), (16,)) for p in REGIME.parameters}  # as a shard has them
    params = fixed | {"spin_ratio": np.linspace(-1, 1, 16)}
    put, real = [], evaluate_module.to_pinned

    def recorded(columns):
        pinned = real(columns)
        put.append({k: v.sharding.memory_kind for k, v in pinned.items()})
        return pinned

    monkeypatch.setattr(evaluate_module, "to_pinned", recorded)
    seen = {}
    for way in ("default", "inputs pinned, results packed"):
        with_switches(monkeypatch, WAYS[way])
        queued = evaluate_module.queue_calls(REGIME, SolverSettings(), params, plan=plan)
        (_, _, call), = queued._in_flight
        seen[way] = [leaf.sharding.memory_kind for leaf in jax.tree.leaves(call)]
        seen[way, "put"] = list(put)
        queued.result()
    assert seen["default"] == ["pinned_host"] * (len(REGIME.outputs) + 3)  # each output, status, steps, events
    assert seen["inputs pinned, results packed"] == ["pinned_host"]  # one buffer of bytes
    assert seen["default", "put"] == []  # copied to the device by jax.device_put
    assert seen["inputs pinned, results packed", "put"] == [{"spin_ratio": "pinned_host"}]  # the varying column


# Programs lowered, recorded while a test listens (JAX keeps a listener for the session).
LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_listening: list[list] = []


def _listen():
    import jax

    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kwargs: _listening and event == LOWERED and _listening[-1].append(event))


_listen()


@pytest.mark.cpu_only(reason="a stubbed GPU plan's calls run on the CPU")
def test_pinned_inputs_lower_no_program_but_the_call(fresh_compile_cache, monkeypatch):
    """Columns are put in pinned memory by a copy, not by a program of JAX's
    (device_put to a memory space compiles one, copying through the device);
    the calls after a load ahead use the program it made, lowering nothing."""
    from engine.solve.evaluate import load_ahead
    from engine.solve.staging import to_pinned

    lowered: list = []
    _listening.append(lowered)
    try:
        pinned = to_pinned({"a": np.linspace(0.0, 1.0, 48), "b": np.arange(48, dtype=np.float32)})
        assert {v.sharding.memory_kind for v in pinned.values()} == {"pinned_host"}
        assert lowered == []
        with_switches(monkeypatch, {PINNED_INPUTS: "1", PACKED_RESULTS: "1"})
        params = {p.name: np.full(50, p.default) for p in REGIME.parameters} | {"spin_ratio": np.linspace(-1, 1, 50)}
        plan = make_plan(REGIME, GPU, solver="vmapped", batch=48)
        load_ahead(REGIME, SolverSettings(dtype="float32"), params, plan=plan).join()
        assert lowered  # (the program exported, the staged program around it)
        lowered.clear()
        got = evaluate(REGIME, SolverSettings(dtype="float32"), params, plan=plan)
        assert got.outputs["out_vx"].dtype == np.float32 and np.count_nonzero(got.status == 1) > 25
        assert lowered == []
    finally:
        _listening.remove(lowered)


def test_a_result_unlike_its_declaration_is_a_clear_error():
    import jax.numpy as jnp

    from engine.solve.staging import staged

    def program(args, count):  # an output of 3 values a point where the study declares 1
        x = args["x"]
        return {"y": jnp.stack([x, x, x], axis=1)}, jnp.zeros(4, jnp.int8), jnp.zeros(4, jnp.int32), \
            jnp.zeros(4, jnp.int32)

    layout = call_results_layout(((),), "float64", 4)
    call = staged(program, Staging(results_pinned=True, results_packed=True), layout,
                  lambda results: [results[0]["y"]] + list(results[1:]), ("y", "status", "num_steps", "num_events"))
    with pytest.raises(ValueError, match=r"'y' of a batch of 4 points is float64\[4, 3\], not the "
                                         r"float64\[4\] its study declares"):
        call({"x": np.arange(4.0)}, np.int32(4))


@pytest.mark.cpu_only(reason="a stubbed GPU plan's calls run on the CPU")
def test_a_pipelined_run_with_pinned_inputs_and_packed_results_writes_the_cpus_cube(tmp_path, monkeypatch):
    from engine.cube.store import open_cube
    from engine.runner.execute import run

    from conftest import cubes_identical, regime_grid

    with_switches(monkeypatch, {PINNED_INPUTS: "1", PACKED_RESULTS: "1"})
    staged = regime_grid(tmp_path, "staged", 40)
    report = run(staged, plan=make_plan(staged.study, GPU, solver="vmapped", batch=64), workers=2, progress=False)
    assert report.shards_run == 21 and report.failed_shards == 0
    with_switches(monkeypatch, {})
    on_cpu = regime_grid(tmp_path, "cpu", 40)
    run(on_cpu, progress=False)
    assert cubes_identical(open_cube(staged.out).load().drop_attrs(), open_cube(on_cpu.out).load().drop_attrs())


@pytest.mark.cpu_only(reason="a stubbed GPU plan's calls run on the CPU")
def test_the_program_kept_for_later_processes_takes_its_inputs_in_device_memory(fresh_compile_cache, monkeypatch):
    """With pinned inputs, the program stored between processes (engine.solve.exported)
    is the one every staging calls: its inputs in the device's memory, as the call
    moved them, not in the pinned memory they came from (which a process of another
    staging, sharing its key, would not give it)."""
    from jax import export

    n = 40
    params = {p.name: np.full(n, p.default) for p in REGIME.parameters} | {"spin_ratio": np.linspace(-1, 1, n)}
    with_switches(monkeypatch, {PINNED_INPUTS: "1", PACKED_RESULTS: "1"})
    pinned = evaluate(REGIME, SolverSettings(), params, plan=make_plan(REGIME, GPU, solver="vmapped", batch=16))
    (stored,) = (fresh_compile_cache / "programs").glob("*.stablehlo")
    module = export.deserialize(bytearray(stored.read_bytes())).mlir_module()
    assert "func.func public @main" in module and "memory_kind" not in module
    with_switches(monkeypatch, {})  # a default staging reads the same program and gives the same bits
    again = evaluate(REGIME, SolverSettings(), params, plan=make_plan(REGIME, GPU, solver="vmapped", batch=16))
    assert len(list((fresh_compile_cache / "programs").glob("*.stablehlo"))) == 1
    assert again.outputs["out_vx"].tobytes() == pinned.outputs["out_vx"].tobytes()


def test_columns_go_to_the_pinned_memory_of_the_threads_device():
    """A thread pinned to one of several devices (a run's shard threads) puts its
    columns in that device's pinned memory: two CPU devices, in a process of its own."""
    import os
    import subprocess
    import sys

    script = """
import jax, numpy as np
from engine.solve.staging import to_pinned
devices = jax.devices()
assert len(devices) == 2, devices
for device in devices:
    with jax.default_device(device):
        (column,) = to_pinned({"a": np.arange(4.0)}).values()
    assert column.sharding.memory_kind == "pinned_host" and column.devices() == {device}, (column.sharding, device)
print("each on its own")
"""
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "each on its own", done.stderr[-3000:]

"""The fused kernel writes a point's samples at [save] times from inside its
solve (engine.solve.kernel.system._Samples), on both of its code paths on CPU:
the generated C (the host kernel) and Pallas in interpret mode. Against the
bouncing ball's closed form and the lanes' samples (tests/test_trajectories.py's
sampled ball), at an event's time (the state after the reset) and at the end
(the final state, NaN after it), the same bits whatever the batch; and a
rolling-ball sweep run on the host kernel, against its closed form and cut
into shards of one point."""

import dataclasses
import os
import sys

import bouncing_ball as ball
import jax.numpy as jnp
import numpy as np
import pytest
from test_kernel_c import pytestmark as needs_cc  # a C compiler to build the host kernel
from test_trajectories import OUTPUTS, SAMPLED_BALL, SPINS, _bouncing, _impacts, _sweep

import engine
from engine import HybridPoint, Output, SolverSettings
from engine.solve import Device, evaluate, make_plan
from engine.solve.kernel.body import KernelBody
from engine.solve.kernel.c_source import generate

import pingpong_closed_form as closed_form

pytestmark = [needs_cc, pytest.mark.cpu_only(
    reason="the host kernel and Pallas's interpret mode are the CPU's (on a GPU the fused kernel is CUDA's)")]

HEIGHTS, RESTITUTIONS = np.array([1.0, 0.3, 2.0, 1.5, 0.7]), np.array([0.5, 0.7, 0.3, 0.8, 0.6])
COLUMNS = {"height": HEIGHTS, "restitution": RESTITUTIONS, "min_speed": np.full(len(HEIGHTS), ball.MIN_SPEED)}
# The sample grid of each backend: Pallas's kernel grows with the samples (a
# select a sample time and row, a block's lanes each at their own), and its
# interpret mode compiles the whole of it.
GRIDS = {"host": np.linspace(0.0, 3.0, 97), "pallas": np.linspace(0.0, 3.0, 25)}
SELECTED = ("rest_time", "first_impact", "height", "speed")


def _with_output(study, name: str, output: Output, value):
    """`study` (the sampled ball) with one output more: value(params, solution)."""
    def finish(p, sol, settings):
        result = study.solve_point.finish(p, sol, settings)
        result.outputs[output.name] = value(p, sol)
        return result

    return dataclasses.replace(study, name=name, outputs=study.outputs + (output,),
                               solve_point=HybridPoint(ball.SYSTEM, ball._start, finish))


# The sampled ball, with its first impact's time (what a sample at an event's time needs).
BALL = _with_output(SAMPLED_BALL, "bouncing_ball_sampled_impact",
                    Output("first_impact", "s", "time of the first impact"), lambda p, sol: sol.event_t[0])


def _settings(times):
    return SolverSettings(rtol=1e-10, atol=1e-12, max_segments=64, save_times=tuple(times))


def _solve(solver, times, columns=COLUMNS, batch=None):
    points = len(next(iter(columns.values())))
    return evaluate(BALL, _settings(times), columns, outputs=SELECTED,
                    plan=make_plan(BALL, solver=solver, points=points, batch=batch, sampled=True))


def _on_backend(backend):
    """The fused kernel's backend for what follows ($ROLLSWEEP_KERNEL_BACKEND),
    this process's compiled batch functions forgotten (they do not name it)."""
    os.environ["ROLLSWEEP_KERNEL_BACKEND"] = backend
    sys.modules["engine.solve.evaluate"].compiled.cache_clear()


@pytest.fixture(scope="module", params=["host", "pallas"])
def solved(request):
    """The ball's samples on the grid and at each point's first impact and
    end (times the grid's first solve found: a solve's steps do not depend on
    its sample times), by the fused kernel on `backend` and by the lanes."""
    before = os.environ.get("ROLLSWEEP_KERNEL_BACKEND")
    _on_backend(request.param)
    try:
        grid = GRIDS[request.param]
        first = _solve("fused", grid)
        times = np.unique(np.concatenate([grid, first.outputs["first_impact"], first.outputs["rest_time"]]))
        yield request.param, times, _solve("fused", times), _solve("lanes", times)
    finally:
        if before is None:
            os.environ.pop("ROLLSWEEP_KERNEL_BACKEND", None)
        else:
            os.environ["ROLLSWEEP_KERNEL_BACKEND"] = before
        sys.modules["engine.solve.evaluate"].compiled.cache_clear()


def test_the_samples_match_the_parabolas_between_events_and_the_lanes_everywhere(solved):
    backend, times, fused, lanes = solved
    assert np.all(fused.status == engine.Status.SUCCESS)
    for i, (height, e) in enumerate(zip(HEIGHTS, RESTITUTIONS, strict=True)):
        exact = np.array([_bouncing(t, height, e) for t in times])
        # a sample within a step's rounding of an impact may hold either side of it
        away = np.array([min(abs(t - impact) for impact in _impacts(height, e)) > 1e-9 for t in times])
        live = away & (times < fused.outputs["rest_time"][i])
        for j, name in enumerate(("height", "speed")):
            np.testing.assert_allclose(fused.outputs[name][i][live], exact[live, j], rtol=0, atol=1e-9)
    # against the lanes on the grid (at an event's or the end's time, each its own
    # located time: the two agree within the solver's tolerance, not to the bit)
    grid = np.isin(times, GRIDS[backend])
    for name in ("height", "speed"):
        ours, theirs = fused.outputs[name][:, grid], lanes.outputs[name][:, grid]
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12, err_msg=name)


def test_a_sample_at_an_event_holds_the_state_after_its_reset(solved):
    _, times, fused, _ = solved
    for i, e in enumerate(RESTITUTIONS):
        at = np.flatnonzero(times == fused.outputs["first_impact"][i])[0]
        impact_speed = np.sqrt(2 * ball.G * HEIGHTS[i])
        assert fused.outputs["height"][i, at] == 0.0  # the reset's, not the flight's last
        np.testing.assert_allclose(fused.outputs["speed"][i, at], e * impact_speed, rtol=1e-9)  # upward again


def test_the_end_holds_the_final_state_and_after_it_nan(solved):
    _, times, fused, _ = solved
    for i in range(len(HEIGHTS)):
        end = fused.outputs["rest_time"][i]
        at = np.flatnonzero(times == end)[0]
        assert abs(fused.outputs["height"][i, at]) < 1e-9 and fused.outputs["speed"][i, at] < 0  # before the reset
        for name in ("height", "speed"):
            assert np.all(np.isnan(fused.outputs[name][i, at + 1:])) and not np.any(np.isnan(
                fused.outputs[name][i, :at + 1]))


def test_a_points_samples_do_not_depend_on_its_batch(solved):
    """The same bits alone as among others (one thread a point in C; in
    Pallas a lane of a block in lockstep, the others padding)."""
    backend, times, fused, _ = solved
    alone = _solve("fused", times, {k: v[2:3] for k, v in COLUMNS.items()})
    for name in SELECTED:
        np.testing.assert_array_equal(alone.outputs[name][0], fused.outputs[name][2], err_msg=f"{backend} {name}")


def test_a_finish_reading_one_component_gets_its_samples_alone(solved):
    """Selected without `height`, the finish reads the samples' speed only:
    the kernel makes and writes that component alone, no modes (the lanes'
    samples_read), and its samples are the same bits as beside the height."""
    backend, times, fused, _ = solved
    names = [p.name for p in BALL.parameters]
    assert KernelBody(BALL.solve_point, _settings(times), names, ("rest_time", "speed"), 1).solve.samples_read == (
        (1,), False)
    alone = evaluate(BALL, _settings(times), COLUMNS, outputs=("rest_time", "speed"),
                     plan=make_plan(BALL, solver="fused", points=len(HEIGHTS), sampled=True))
    np.testing.assert_array_equal(alone.outputs["speed"], fused.outputs["speed"], err_msg=backend)


# The time of its highest sample: an argmax, which the kernel cannot take.
OUTSIDE = _with_output(BALL, "bouncing_ball_sampled_outside", Output("highest_at", "s", "its highest sample's time"),
                       lambda p, sol: jnp.nan if sol.saved_y is None else sol.saved_t[
                           jnp.argmax(jnp.nan_to_num(sol.saved_y[:, 0], nan=-jnp.inf))])


def test_a_finish_outside_the_kernel_reads_the_samples_and_their_times(monkeypatch):
    """The kernel writes the samples the finish reads as columns, the finish
    runs after it (XLA), the times put back: the lanes' results."""
    from engine.solve import SOLVERS

    monkeypatch.delenv("ROLLSWEEP_KERNEL_BACKEND", raising=False)
    names = [p.name for p in OUTSIDE.parameters]
    assert "finish" in KernelBody(OUTSIDE.solve_point, _settings(GRIDS["host"]), names, SELECTED + ("highest_at",),
                                  1).outside
    assert SOLVERS["fused"].unsupported(OUTSIDE) is None
    fused, lanes = (evaluate(OUTSIDE, _settings(GRIDS["host"]), COLUMNS, outputs=SELECTED + ("highest_at",),
                             plan=make_plan(OUTSIDE, solver=solver, points=len(HEIGHTS), sampled=True))
                    for solver in ("fused", "lanes"))
    np.testing.assert_array_equal(fused.outputs["highest_at"], lanes.outputs["highest_at"])
    assert set(fused.outputs["highest_at"]) <= set(GRIDS["host"]) and fused.outputs["highest_at"][0] == 0.0
    np.testing.assert_allclose(fused.outputs["height"], lanes.outputs["height"], rtol=0, atol=1e-12)


def test_a_sweep_without_samples_generates_no_sample_code():
    """The kernel of a sweep without [save] is the one before samples: the
    sampled one has one loop more (a step's samples)."""
    names = [p.name for p in BALL.parameters]

    def loops(settings, selected):
        body = KernelBody(BALL.solve_point, settings, names, selected, 1)
        return generate(lambda *a: body(*a, one_point=True), [np.int32] + body.input_dtypes,
                        body.out_dtypes).text.count("for (;;)")

    assert loops(_settings(GRIDS["host"]), SELECTED) == loops(_settings(()), ("rest_time", "first_impact")) + 1


def test_a_sampled_sweeps_default_plan_on_a_gpu_is_the_fused_kernel():
    """Where the study fuses and the kernel can read the solver's dense output
    (Tsit5's, Dopri5's); else vmapped. (On CPU: tests/test_trajectories.py.)"""
    gpu = Device(platform="gpu", memory=16 * 2**30)
    assert make_plan(BALL, gpu, points=100, sampled=True).solver.name == "fused"
    assert make_plan(engine.load_study("pingpong"), gpu, points=100, sampled=True).solver.name == "fused"
    assert make_plan(BALL, gpu, points=100, sampled=True, integrator="Dopri5").solver.name == "fused"
    assert make_plan(BALL, gpu, points=100, sampled=True, integrator="Dopri8").solver.name == "vmapped"
    with pytest.raises(ValueError, match="fused solver writes samples .* of Tsit5 and Dopri5 only, not Dopri8's"):
        make_plan(BALL, solver="fused", sampled=True, integrator="Dopri8")


def test_a_rolling_ball_sweep_on_the_host_kernel_matches_its_closed_form_in_any_shards(tmp_path, monkeypatch):
    """tests/test_trajectories.py's sweep (201 samples a point) with
    batch_solver = "fused": within 1e-9 of Gao's closed form, and the same
    cube bit for bit in shards of one point, and in shards of two on two
    worker processes (the local executor)."""
    monkeypatch.delenv("ROLLSWEEP_KERNEL_BACKEND", raising=False)
    engine.run(_sweep(tmp_path, "whole.zarr", run='batch_solver = "fused"'), progress=False)
    engine.run(_sweep(tmp_path, "one.zarr", run='batch_solver = "fused"\nshard_size = 1'), progress=False)
    engine.run(_sweep(tmp_path, "workers.zarr", run='batch_solver = "fused"\nshard_size = 2'), executor="local",
               workers=2, progress=False)
    whole = engine.open_cube(tmp_path / "whole.zarr")
    times = whole.time.values
    for q in SPINS:
        exact = np.array([closed_form.centre(t, spin_ratio=q) for t in times])
        point = whole.sel(spin_ratio=q)
        np.testing.assert_allclose(point.x.values, exact[:, 0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(point.x_dot.values, exact[:, 1], rtol=0, atol=1e-9)
    for cut in ("one.zarr", "workers.zarr"):
        cube = engine.open_cube(tmp_path / cut)
        for name in OUTPUTS:
            np.testing.assert_array_equal(cube[name].values, whole[name].values, err_msg=f"{cut} {name}")


def test_a_kernel_of_many_columns_leaves_the_host_by_rows_a_buffer_per_dtype():
    """More than ROW_OUTPUTS output columns (the samples') leave the host
    kernel's FFI handler as a (points, columns) buffer per dtype, each
    column at its place in its dtype's row; fewer, a buffer each. (The
    tests above read every sample through it: the ball's 194 columns and
    more, the rolling ball's 402.)"""
    from engine.solve.kernel.c_source import ROW_OUTPUTS, KernelSource, row_groups

    names = [p.name for p in BALL.parameters]
    body = KernelBody(BALL.solve_point, _settings(GRIDS["host"]), names, SELECTED, 1)
    source = generate(lambda *a: body(*a, one_point=True), [np.int32] + body.input_dtypes, body.out_dtypes)
    assert len(source.out_dtypes) > ROW_OUTPUTS and source.by_rows
    # a source without the rows' entry (written by hand, as test_kernel_c's) keeps its columns
    assert not KernelSource.of("void rs_solve_batch(void) {}", source.in_dtypes, source.out_dtypes).by_rows
    assert row_groups([np.float64] * ROW_OUTPUTS) is None
    dtypes = [np.float64] * ROW_OUTPUTS + [np.int32, np.float64, np.int32]
    assert row_groups(dtypes) == [(np.dtype(np.float64), [*range(ROW_OUTPUTS), ROW_OUTPUTS + 1]),
                                  (np.dtype(np.int32), [ROW_OUTPUTS, ROW_OUTPUTS + 2])]

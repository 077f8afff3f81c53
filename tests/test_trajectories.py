"""Sampled outputs: a sweep's `[save] times`, a point's states there, the
cube's `time` dimension.

Checked against closed forms: the rolling table-tennis ball's centre (Gao
2021, the sliding stage eq. (2) and the rolling stage eq. (7), as Figs 6-9
draw them: displacement and speed against time), and an outside study, a
ball bouncing to rest (tests/bouncing_ball: tens of events a point, a
parabola between them).
"""

import dataclasses
import math

import bouncing_ball as ball
import numpy as np
import pytest

import engine
from engine import TIME, ConfigError, HybridPoint, Output, SolverSettings, parse_sweep
from engine.solve import evaluate, make_plan

import pingpong_closed_form as closed_form
from conftest import sweep_file

SPINS = (0.5, 1.0, 1.7706, 2.0, 2.5, 3.0)  # both of Gao's cases: it stops ahead (q < 1.77), it comes back
TIMES = {"linspace": [0.0, 4.0, 201]}  # the sliding stage, the rolling stage, at rest after 3.8 s at most
OUTPUTS = ("final_displacement", "stop_time", "x", "x_dot")
SWEEP = f"""
study = "pingpong"
outputs = {list(OUTPUTS)}
[axes]
spin_ratio = {{ values = {list(SPINS)} }}
[save]
times = {{ linspace = {TIMES["linspace"]} }}
[run]
out = "OUT"
RUN
"""


def _sweep(folder, name="ball.zarr", run=""):
    text = SWEEP.replace("OUT", str(folder / name)).replace("RUN", run)
    return engine.load_sweep(sweep_file(folder, text, name=f"{name}.toml"))


# Every solver that samples, on the CPU: the lanes (the default path) and vmapped.
SAMPLING = ("lanes", "vmapped")


@pytest.fixture(scope="module", params=SAMPLING)
def solver(request):
    return request.param


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory, solver):
    folder = tmp_path_factory.mktemp(f"trajectories-{solver}")
    engine.run(_sweep(folder, run=f'batch_solver = "{solver}"'), progress=False)
    return folder / "ball.zarr"


@pytest.fixture(scope="module")
def cube(cube_path):
    return engine.open_cube(cube_path)


def test_the_rolling_balls_samples_match_the_closed_form_in_both_stages_and_at_rest(cube):
    """Gao 2021 Figs 6-9: x(t) and xdot(t) against the analytical solution, at
    every one of 201 samples (rtol 1e-10, atol 1e-12: within 1e-9)."""
    times = cube.time.values
    worst = 0.0
    for q in SPINS:
        exact = np.array([closed_form.centre(t, spin_ratio=q) for t in times])
        point = cube.sel(spin_ratio=q)
        worst = max(worst, np.max(np.abs(point.x.values - exact[:, 0])),
                    np.max(np.abs(point.x_dot.values - exact[:, 1])))
        # at rest after the stop: the final position held, speed zero
        resting = times > float(point.stop_time.values)
        assert np.all(point.x.values[resting] == float(point.final_displacement.values))
        assert np.all(point.x_dot.values[resting] == 0.0)
    assert worst < 1e-9


def test_the_cube_has_a_time_dimension_with_the_sweeps_times_and_unit(cube):
    assert cube.x.dims == ("spin_ratio", "time")
    assert cube.x.shape == (len(SPINS), 201)
    np.testing.assert_array_equal(cube.time.values, np.linspace(0.0, 4.0, 201))
    assert cube.time.attrs["units"] == "s"
    assert cube.final_displacement.dims == ("spin_ratio",)
    assert np.all(cube.status.values == engine.Status.SUCCESS)


def test_shards_of_one_point_give_the_same_cube_bit_for_bit(cube, tmp_path, solver):
    """A point's samples depend on neither the shard nor its neighbours (on
    the lanes: nor on the lane it ran on, or the step its neighbours finish at)."""
    report = engine.run(_sweep(tmp_path, "one.zarr", run=f'shard_size = 1\nbatch_solver = "{solver}"'),
                        progress=False)
    assert report.shards_run == len(SPINS)
    one = engine.open_cube(tmp_path / "one.zarr")
    for name in OUTPUTS:
        np.testing.assert_array_equal(one[name].values, cube[name].values)


def test_evaluate_gives_the_runs_samples(cube, solver):
    """The same points through engine.solve.evaluate (a notebook's call) as
    through a run."""
    study = engine.load_study("pingpong")
    settings = SolverSettings(save_times=tuple(cube.time.values))
    params = {p.name: np.full(len(SPINS), p.default) for p in study.parameters} | {"spin_ratio": np.array(SPINS)}
    result = evaluate(study, settings, params, outputs=OUTPUTS,
                      plan=make_plan(study, solver=solver, points=len(SPINS), sampled=True))
    np.testing.assert_array_equal(result.outputs["x"], cube.x.values)


def test_a_sampled_sweeps_default_plan_on_the_cpu_is_the_host_kernel_where_it_fuses(monkeypatch):
    """On the CPU the fused kernel compiled for the host (it writes the samples
    inside its loop); with an integrator whose dense output it does not write,
    or no C compiler, the lanes as without samples; a study neither solves,
    as without samples."""
    from engine.solve.device import detect
    from engine.solve.kernel import host

    study = engine.load_study("pingpong")
    if detect().accelerator:
        pytest.skip("the CPU's default")
    if host.compiler() is None:
        pytest.skip("no C compiler")
    assert make_plan(study, points=100).solver.name == "lanes"
    assert make_plan(study, points=100, sampled=True).solver.name == "fused"
    assert make_plan(study, points=100, sampled=True, integrator="Dopri5").solver.name == "fused"
    assert make_plan(study, points=100, sampled=True, integrator="Bosh3").solver.name == "lanes"
    closed = engine.load_study("rebound_table1")
    assert make_plan(closed, points=100, sampled=True).solver.name == make_plan(closed, points=100).solver.name
    monkeypatch.setattr(host, "compiler", lambda: None)
    assert make_plan(study, points=100, sampled=True).solver.name == "lanes"


def test_a_sampled_sweep_whose_kernel_does_not_generate_as_c_is_not_the_host_kernels(tmp_path, monkeypatch):
    """A study the fused kernel takes (Pallas lowers it) but whose kernel the C
    generator cannot write (a primitive without a C rule) would run in
    Pallas's interpret mode on CPU: its sampled sweep's default is the lanes."""
    from jax import lax

    from engine.solve.device import detect
    from engine.solve.plan import SOLVERS

    if detect().accelerator:
        pytest.skip("the CPU's default")
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(tmp_path))  # the kernel's check traced here, not read

    def fall(t, y, args):
        return ball.SYSTEM.modes[0].vector_field(t, y, args) + lax.erf_inv(0.0 * y)

    system = engine.HybridSystem((dataclasses.replace(ball.SYSTEM.modes[0], vector_field=fall),))
    study = dataclasses.replace(ball.STUDY, name="bouncing_ball_erf_inv",
                                solve_point=HybridPoint(system, ball._start, ball._finish))
    assert SOLVERS["fused"].unsupported(study) is None
    assert "no rule for the primitive erf_inv" in SOLVERS["fused"].host_unsupported(study)
    assert make_plan(study, points=100, sampled=True).solver.name == "lanes"
    assert make_plan(ball.STUDY, points=100, sampled=True).solver.name == "fused"


# An outside study sampled: the bouncing ball's height and speed at the times.
def _finish_sampled(p, sol, settings):
    result = ball._finish(p, sol, settings)
    if sol.saved_y is not None:
        result.outputs.update(height=sol.saved_y[:, 0], speed=sol.saved_y[:, 1])
    return result


SAMPLED_BALL = dataclasses.replace(
    ball.STUDY, name="bouncing_ball_sampled",
    outputs=ball.STUDY.outputs + (Output("height", "m", "height at the sample times", dims=(TIME,)),
                                  Output("speed", "m/s", "vertical speed at the sample times", dims=(TIME,))),
    solve_point=HybridPoint(ball.SYSTEM, ball._start, _finish_sampled))


def _bouncing(t, height, e, min_speed=ball.MIN_SPEED):
    """(h, v) at time t of a ball dropped from rest at `height`, or NaN after its last impact."""
    v1 = math.sqrt(2 * ball.G * height)
    if t <= v1 / ball.G:
        return height - ball.G * t * t / 2, -ball.G * t
    start, speed = v1 / ball.G, v1 * e  # the first rebound: its start and its upward speed
    while True:
        if speed / e < min_speed:  # the impact that began this flight was the last
            return math.nan, math.nan
        flight = 2 * speed / ball.G
        if t <= start + flight:
            s = t - start
            return speed * s - ball.G * s * s / 2, speed - ball.G * s
        start, speed = start + flight, speed * e


@pytest.mark.parametrize("solver", SAMPLING)
def test_a_bouncing_balls_samples_match_its_parabolas_between_its_events_and_end_in_nan(solver):
    heights, restitutions = np.array([1.0, 0.3, 2.0]), np.array([0.5, 0.7, 0.3])
    times = np.linspace(0.0, 3.0, 97)
    settings = SolverSettings(rtol=1e-10, atol=1e-12, max_segments=64, save_times=tuple(times))
    columns = {"height": heights, "restitution": restitutions, "min_speed": np.full(3, ball.MIN_SPEED)}
    result = evaluate(SAMPLED_BALL, settings, columns, outputs=("rest_time", "height", "speed"),
                      plan=make_plan(SAMPLED_BALL, solver=solver, points=3, sampled=True))
    assert np.all(result.status == engine.Status.SUCCESS)
    for i in range(3):
        exact = np.array([_bouncing(t, heights[i], restitutions[i]) for t in times])
        rest = result.outputs["rest_time"][i]
        # a sample within a step's rounding of an impact may hold either side of it
        away = np.array([min(abs(t - impact) for impact in _impacts(heights[i], restitutions[i])) > 1e-9
                         for t in times])
        ended = times > rest
        np.testing.assert_allclose(result.outputs["height"][i][away & ~ended], exact[away & ~ended, 0], rtol=0,
                                   atol=1e-9)
        np.testing.assert_allclose(result.outputs["speed"][i][away & ~ended], exact[away & ~ended, 1], rtol=0,
                                   atol=1e-9)
        assert ended.any() and np.all(np.isnan(result.outputs["height"][i][ended]))


@pytest.mark.parametrize("integrator", ["Tsit5", "Dopri5"])
def test_the_lanes_and_vmapped_give_the_same_samples_of_the_bouncing_ball(integrator):
    """Tens of events a point, a log too long to keep a column a point (the
    lanes finish each point as it ends, its samples a column of its lane):
    the same samples within the solver's tolerances, NaN after the same end."""
    heights, restitutions = np.array([1.0, 0.3, 2.0, 1.5, 0.7]), np.array([0.5, 0.7, 0.3, 0.8, 0.6])
    times = np.linspace(0.0, 3.0, 97)
    settings = SolverSettings(solver=integrator, rtol=1e-10, atol=1e-12, max_segments=64, save_times=tuple(times))
    columns = {"height": heights, "restitution": restitutions, "min_speed": np.full(5, ball.MIN_SPEED)}
    lanes, vmapped = (evaluate(SAMPLED_BALL, settings, columns, outputs=("rest_time", "height", "speed"),
                               plan=make_plan(SAMPLED_BALL, solver=solver, points=5, sampled=True))
                      for solver in ("lanes", "vmapped"))
    for name in ("height", "speed"):
        ended = np.isnan(vmapped.outputs[name])
        assert ended.any() and np.array_equal(np.isnan(lanes.outputs[name]), ended)
        np.testing.assert_allclose(lanes.outputs[name][~ended], vmapped.outputs[name][~ended], rtol=0, atol=1e-9)


def _impacts(height, e, min_speed=ball.MIN_SPEED):
    v1 = math.sqrt(2 * ball.G * height)
    impacts, t, speed = [v1 / ball.G], v1 / ball.G, v1
    while speed >= min_speed:
        speed *= e
        t += 2 * speed / ball.G
        impacts.append(t)
    return impacts


@pytest.mark.parametrize("times, key, says", [
    ("{ values = [0.0, 2.0, 1.0] }", "save.times", "strictly increasing"),
    ("{ values = [0.0, 1.0, 1.0] }", "save.times", "strictly increasing"),
    ("{ values = [-1.0, 1.0] }", "save.times", "outside the solve's span [0, 1000.0]"),
    ("{ linspace = [0.0, 2000.0, 3] }", "save.times", "outside the solve's span"),
    ("{ values = [0.0, nan] }", "save.times.values[1]", "must be finite"),
    ("{ linspace = [0.0, 1.0, 200000] }", "save.times", "exceed the limit of 100,000"),
    ("{ spaced = [0.0, 1.0] }", "save.times", "unknown axis kind"),
])
def test_bad_sample_times_are_one_line_naming_the_key(tmp_path, times, key, says):
    text = f'study = "pingpong"\n[axes]\nspin_ratio = {{ values = [1.0] }}\n[save]\ntimes = {times}\n' \
           f'[run]\nout = "{tmp_path / "c.zarr"}"\n'
    with pytest.raises(ConfigError, match=f"{key}.*{says}".replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")) as error:
        parse_sweep(text, file="s.toml")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "c.zarr").exists()


def test_a_sampled_output_without_times_and_times_without_a_sampled_output_are_refused():
    base = 'study = "pingpong"\n[axes]\nspin_ratio = { values = [1.0] }\n[run]\nout = "c.zarr"\n'
    with pytest.raises(ConfigError, match=r"outputs\[1\].*'x' is sampled at times: give them in \[save\] times"):
        parse_sweep('outputs = ["stop_time", "x"]\n' + base, file="s.toml")
    with pytest.raises(ConfigError, match=r"save.times.*no selected output of 'pingpong' is sampled"):
        parse_sweep('outputs = ["stop_time"]\n' + base + '[save]\ntimes = { values = [1.0] }\n', file="s.toml")


def test_a_sweep_without_save_keeps_its_outputs_and_its_identity():
    """A sweep written before samples existed: the same outputs (no sampled
    one), the same settings' repr and config hash as then."""
    sweep = parse_sweep('study = "pingpong"\n[axes]\nspin_ratio = { values = [1.0] }\n[run]\nout = "c.zarr"\n')
    assert not any(sweep.study.outputs_by_name[name].sampled for name in sweep.outputs)
    assert "save" not in repr(sweep.solver) and "save_times" not in sweep.canonical()
    assert "save_times" not in sweep.canonical()["solver"]


@pytest.fixture
def fused_writes_no_samples(monkeypatch):
    """A solver that writes no samples, as the fused one did before issue 56
    (every solver writes them now: the refusal stays for one that will not)."""
    import engine.solve.plan as plan_module

    monkeypatch.setattr(plan_module, "SAMPLING_SOLVERS", ("lanes", "vmapped"))


@pytest.mark.parametrize("solver", ["fused"])
def test_solvers_that_write_no_samples_are_refused_naming_the_key(tmp_path, solver, fused_writes_no_samples):
    sweep = _sweep(tmp_path, run=f'batch_solver = "{solver}"')
    with pytest.raises(ConfigError, match=rf"run.batch_solver.*the {solver} solver does not yet write samples"):
        engine.run(sweep, progress=False)
    assert not (tmp_path / "ball.zarr").exists()


def test_the_bicycles_lean_and_steer_are_its_linear_motion_until_it_falls():
    """Meijaard et al. 2007, section 8: released upright at lean rate 0.5 rad/s,
    x(t) = expm(A(v) t) x0 (the linearised bicycle), below (falls), inside and
    above the self-stable speed range; NaN after a fall."""
    from scipy.linalg import expm

    from studies.bicycle._canonical import state_matrix
    from studies.bicycle._parameters import DESIGN_NAMES

    study = engine.load_study("bicycle_response")
    speeds, times = np.array([3.0, 4.6, 8.0]), np.linspace(0.0, 5.0, 101)
    settings = SolverSettings(t_max=5.0, max_segments=24, save_times=tuple(times))
    params = {p.name: np.full(3, p.default) for p in study.parameters} | {"v": speeds}
    result = evaluate(study, settings, params, outputs=("fall_time", "lean", "steer"),
                      plan=make_plan(study, points=3, sampled=True))
    assert np.all(result.status == engine.Status.SUCCESS)
    design = {name: float(study.parameter(name).default) for name in DESIGN_NAMES}
    x0 = np.array([0.0, 0.0, study.parameter("initial_lean_rate").default, 0.0])
    fell = ~np.isnan(result.outputs["fall_time"])
    assert list(fell) == [True, False, False]  # below the self-stable range only
    for i, v in enumerate(speeds):
        a = np.asarray(state_matrix(design, v))
        exact = np.array([expm(a * t) @ x0 for t in times])
        riding = times < (result.outputs["fall_time"][i] if fell[i] else np.inf)
        np.testing.assert_allclose(result.outputs["lean"][i][riding], exact[riding, 0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(result.outputs["steer"][i][riding], exact[riding, 1], rtol=0, atol=1e-9)
        assert np.all(np.isnan(result.outputs["lean"][i][times > result.outputs["fall_time"][i]]))


def test_verify_and_status_read_a_sampled_cube_as_sound(cube_path, capsys):
    from engine.cli.commands import main

    assert main(["verify", str(cube_path)]) == 0
    assert "sound" in capsys.readouterr().out
    assert main(["status", str(cube_path)]) == 0
    assert "complete" in capsys.readouterr().out


def test_a_closed_form_study_gets_the_times_in_its_settings():
    """x(t) = v t for t in settings.save_times: a study without a solve."""
    import jax.numpy as jnp

    from engine import Interval, Parameter, PointResult, Status, Study

    study = Study(name="uniform_motion", title="x = v t", source="closed form", version="1",
                  parameters=(Parameter("v", "m/s", 1.0, Interval(-10.0, 10.0), "speed"),),
                  outputs=(Output("x", "m", "position at the sample times", dims=(TIME,)),),
                  solve_point=lambda p, s: PointResult({"x": p["v"] * jnp.asarray(s.save_times)},
                                                       jnp.int8(Status.SUCCESS)))
    times = (0.0, 0.5, 2.0)
    result = evaluate(study, SolverSettings(save_times=times), {"v": np.array([1.0, -2.0])},
                      plan=make_plan(study, points=2, sampled=True))
    np.testing.assert_array_equal(result.outputs["x"], np.outer([1.0, -2.0], times))


def test_a_sampled_program_holds_no_host_callback():
    """A program with a host callback cannot be exported, so it is compiled
    again by every process: diffrax's check that the saved times lie in the
    solve's span was one (equinox's error_if on traced bounds)."""
    import jax

    study = engine.load_study("pingpong")
    settings = SolverSettings(save_times=tuple(np.linspace(0.0, 4.0, 21)))
    point = {p.name: jax.ShapeDtypeStruct((), "float64") for p in study.parameters}
    program = str(jax.make_jaxpr(lambda p: study.solve_point(p, settings))(point))
    assert "callback" not in program


def test_a_study_with_a_parameter_named_sample_sweeps_it_as_an_axis(tmp_path):
    """The rebound table's `sample` parameter (a row of the paper's Table 1) is
    an axis like any other where the sweep draws nothing."""
    from engine.runner.point import select_point

    sweep = parse_sweep('study = "rebound_table1"\n[axes]\nsample = { values = [1.0, 2.0] }\n'
                        f'[run]\nout = "{tmp_path / "c.zarr"}"\n')
    assert sweep.samples is None
    params = sweep.point_params(("sample",), [np.array([1.0, 2.0])], 2)
    np.testing.assert_array_equal(params["sample"], [1.0, 2.0])
    assert select_point(sweep, [], 1)["sample"] == 2.0


def test_evaluate_on_a_plan_that_writes_no_samples_is_refused(fused_writes_no_samples):
    """A notebook's evaluate with sample times on a fused plan made without
    sampled=True: one error, not a finish reading samples that are not there."""
    study = engine.load_study("pingpong")
    params = {p.name: np.full(2, p.default) for p in study.parameters}
    with pytest.raises(ValueError, match="the fused solver does not yet write samples at \\[save\\] times"):
        evaluate(study, SolverSettings(save_times=(0.0, 1.0)), params, plan=make_plan(study, solver="fused"))


def test_the_lanes_keep_the_samples_the_finish_reads():
    """The lanes keep, of each sample, the state's components its finish reads
    (static slices of saved_y) and its mode only where the finish reads it:
    the rolling ball's x and x_dot, not its spin; any other read of saved_y,
    or the solution returned whole, keeps every component and the mode."""
    import jax
    import jax.numpy as jnp

    from engine.solve.hybrid import solution_shapes
    from engine.solve.lanes.batch import samples_read

    solution = solution_shapes(jax.ShapeDtypeStruct((5,), jnp.float64), 2, 7)
    row = {"v": jax.ShapeDtypeStruct((), jnp.float64)}
    assert samples_read(lambda p, sol: sol.saved_y[:, 1] * p["v"] + sol.saved_y[:, 0], row, solution) == ((0, 1), False)
    assert samples_read(lambda p, sol: (sol.saved_y[:, 3:5], sol.saved_mode), row, solution) == ((3, 4), True)
    assert samples_read(lambda p, sol: sol.saved_y.sum(axis=0), row, solution) == ((0, 1, 2, 3, 4), False)
    assert samples_read(lambda p, sol: sol, row, solution) == ((0, 1, 2, 3, 4), True)
    assert samples_read(lambda p, sol: sol.t, row, solution) == ((), True)
    study = engine.load_study("pingpong")
    settings = SolverSettings(save_times=(0.0, 1.0))
    pingpong_row = {p.name: jax.ShapeDtypeStruct((), jnp.float64) for p in study.parameters}
    assert samples_read(lambda p, sol: study.solve_point.finish(p, sol, settings).outputs, pingpong_row,
                        solution_shapes(jax.ShapeDtypeStruct((5,), jnp.float64), 2, 2)) == ((0, 1), False)


def test_the_lanes_samples_are_the_same_when_the_last_points_run_gathered():
    """The batch's last points finish on lanes gathered out of the full width
    (their columns elsewhere); on 16 lanes that narrow loop is as wide as the
    full one. Their samples are those of the same points on 48 lanes, bit for
    bit: each point's copied out of its own lane's column. 37 and 53 points
    (a batch of 53 with a count of each: one program a width)."""
    import jax
    import jax.numpy as jnp

    from engine.solve.lanes import solve_batch

    study = engine.load_study("pingpong")
    settings = SolverSettings(save_times=tuple(np.linspace(0.0, 4.0, 41)))
    params = {p.name: jnp.full(53, p.default) for p in study.parameters}
    params["spin_ratio"] = jnp.linspace(0.2, 3.0, 53)
    solve = jax.jit(lambda p, count, lanes: solve_batch(study.solve_point, p, settings, lanes, count),
                    static_argnums=2)
    for points in (37, 53):
        narrow, wide = solve(params, points, 16), solve(params, points, 48)
        for name in ("saved_y", "saved_mode", "y", "t"):
            np.testing.assert_array_equal(getattr(narrow, name)[:points], getattr(wide, name)[:points],
                                          err_msg=f"{name}, {points} points")
        assert np.isfinite(narrow.saved_y[:points, 0]).all()

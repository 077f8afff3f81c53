"""Flight with bounces: closed-form ballistics where drag and Magnus vanish."""

import jax.numpy as jnp
import numpy as np

from engine import SolverSettings, Status
from engine.solve import evaluate, make_plan
from studies.rebound import LANDING
from studies.rebound._bounce import table_bounce
from studies.rebound._fit import learned_coefficients
from studies.rebound._flight import DOUBLE_BOUNCE, IN, NET_FAULT, NET_HEIGHT

SETTINGS = SolverSettings(rtol=1e-12, atol=1e-14, t_max=3.0, max_segments=8)
G, R = 9.81, 0.02


def run(**overrides):
    columns = {k: np.array([v]) for k, v in (LANDING.defaults | overrides).items()}
    result = evaluate(LANDING, SETTINGS, columns, batch_size=1)
    return {k: float(v[0]) for k, v in result.outputs.items()}, int(result.status[0])


def impact(position, velocity):
    """Time and state when the centre reaches z = r on a parabola."""
    z, vz = position[2] - R, velocity[2]
    t = (vz + np.sqrt(vz**2 + 2 * G * z)) / G
    p = position + velocity * t + np.array([0, 0, -G * t**2 / 2])
    return t, p, velocity + np.array([0, 0, -G * t])


def test_serve_without_air_is_two_parabolas():
    launch = dict(x0=-0.2, y0=0.1, z0=0.3, launch_speed=4.5, elevation=-6.0, azimuth=2.0, topspin=0.0,
                  sidespin=0.0, drag_coefficient=0.0, magnus_coefficient=0.0)
    out, status = run(**launch)
    assert status == Status.SUCCESS and out["outcome"] == IN

    el, az = np.radians(-6.0), np.radians(2.0)
    v0 = 4.5 * np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    t1, p1, v1 = impact(np.array([-0.2, 0.1, 0.3]), v0)
    assert 0 < p1[0] < 1.37  # the serve's own-half bounce
    assert abs(out["bounce_x"] - p1[0]) < 1e-9 and abs(out["bounce_y"] - p1[1]) < 1e-9

    v_out, _, _ = table_bounce(jnp.asarray(v1), jnp.zeros(3), 0.8788, 0.1049, R, 0, jnp.asarray(learned_coefficients()))
    t2, p2, _ = impact(p1, np.asarray(v_out))
    assert 1.37 < p2[0] < 2.74
    assert abs(out["landing_x"] - p2[0]) < 1e-9 and abs(out["landing_y"] - p2[1]) < 1e-9
    assert abs(out["flight_time"] - (t1 + t2)) < 1e-9


def test_parabola_between_launch_and_net():
    """Height at the net plane equals the closed form (clearance output)."""
    launch = dict(x0=0.5, y0=0.0, z0=0.3, launch_speed=5.0, elevation=15.0, topspin=0.0, sidespin=0.0,
                  drag_coefficient=0.0, magnus_coefficient=0.0)
    out, _ = run(**launch)
    vx, vz = 5.0 * np.cos(np.radians(15.0)), 5.0 * np.sin(np.radians(15.0))
    t = (1.37 - 0.5) / vx
    z = 0.3 + vz * t - G * t**2 / 2
    assert abs(out["net_clearance"] - (z - NET_HEIGHT - R)) < 1e-9


def test_low_ball_is_a_net_fault_and_topspin_dips():
    out, _ = run(x0=0.5, z0=0.16, launch_speed=8.0, elevation=-2.0, topspin=0.0)
    assert out["outcome"] == NET_FAULT and np.isnan(out["landing_x"])
    flat, _ = run(x0=0.2, z0=0.3, launch_speed=7.0, elevation=3.0, topspin=0.0)
    top, _ = run(x0=0.2, z0=0.3, launch_speed=7.0, elevation=3.0, topspin=150.0)
    # Magnus lift of topspin pulls the ball down: clear without spin, into the net with it.
    assert flat["outcome"] == IN and flat["net_clearance"] > 0
    assert top["outcome"] == NET_FAULT and top["net_clearance"] < 0 and top["flight_time"] < flat["flight_time"]


def test_second_contact_on_the_near_half_ends_the_flight_as_a_fault():
    """A slow serve bounces twice before the net: the flight ends at the second
    contact (outcome 4), where the parabola after the first bounce lands."""
    launch = dict(x0=-0.2, y0=0.0, z0=0.3, launch_speed=2.0, elevation=-10.0, azimuth=0.0, topspin=0.0,
                  sidespin=0.0, drag_coefficient=0.0, magnus_coefficient=0.0)
    out, status = run(**launch)
    assert status == Status.SUCCESS and out["outcome"] == DOUBLE_BOUNCE and out["lands_in"] == 0

    v0 = 2.0 * np.array([np.cos(np.radians(-10.0)), 0.0, np.sin(np.radians(-10.0))])
    t1, p1, v1 = impact(np.array([-0.2, 0.0, 0.3]), v0)
    v_out, _, _ = table_bounce(jnp.asarray(v1), jnp.zeros(3), 0.8788, 0.1049, R, 0, jnp.asarray(learned_coefficients()))
    t2, p2, _ = impact(p1, np.asarray(v_out))
    assert 0 < p1[0] < p2[0] < 1.37  # both contacts before the net
    assert abs(out["bounce_x"] - p1[0]) < 1e-9 and abs(out["landing_x"] - p2[0]) < 1e-9
    assert abs(out["flight_time"] - (t1 + t2)) < 1e-9


def test_lanes_agree_with_the_per_point_solve():
    """The study runs on refilling lanes on CPU: the same outcomes, landings and
    times as the plain per-point solve (vmapped), to the solver's tolerance."""
    speed, elevation = np.meshgrid(np.linspace(3.0, 15.0, 4), np.linspace(-20.0, 12.0, 4))
    columns = {k: np.full(speed.size, v) for k, v in LANDING.defaults.items()} | {
        "launch_speed": speed.ravel(), "elevation": elevation.ravel(), "topspin": np.tile([-150.0, 150.0], 8)}
    on_lanes = evaluate(LANDING, SETTINGS, columns, plan=make_plan(LANDING, solver="lanes", batch=16))
    per_point = evaluate(LANDING, SETTINGS, columns, plan=make_plan(LANDING, solver="vmapped", batch=16))
    np.testing.assert_array_equal(on_lanes.status, per_point.status)
    np.testing.assert_array_equal(on_lanes.num_events, per_point.num_events)
    np.testing.assert_array_equal(on_lanes.outputs["outcome"], per_point.outputs["outcome"])
    assert len(set(on_lanes.outputs["outcome"])) >= 3  # in, net and out among them
    for name, value in per_point.outputs.items():
        np.testing.assert_allclose(on_lanes.outputs[name], value, rtol=0, atol=1e-9, err_msg=name)

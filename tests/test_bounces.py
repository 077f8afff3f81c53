"""The many-events benchmark's study (tests/bouncing_ball: tens of impacts a
point), its closed form and its numba peers (benchmarks/bench_bounces.py)
against each other: a benchmark row against a wrong reference or a wrong peer
would be meaningless."""

import importlib.metadata
import math
import os
import pathlib
import subprocess
import sys

import bouncing_ball as ball
import numpy as np
import pytest

import engine.study.interface
from engine import SolverSettings, Status
from engine.solve import evaluate, make_plan

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_bounces  # noqa: E402

# The benchmark's tolerances; 128 segments leave room for the grid's 92 impacts at most.
SETTINGS = SolverSettings(rtol=bench_bounces.RTOL, atol=bench_bounces.ATOL, max_segments=128)


def _points():
    """16 points of the benchmark grid, its corners among them (the most impacts: 10 m, e = 0.9)."""
    return bench_bounces.grid(4, 4)


def _engine(heights, restitutions, study=ball.STUDY):
    columns = {"height": heights, "restitution": restitutions, "min_speed": np.full(heights.size, ball.MIN_SPEED)}
    return evaluate(study, SETTINGS, columns, plan=make_plan(study, points=heights.size))


def test_closed_form_against_the_flights_summed():
    """The geometric sum's form against the flights added one by one (exactly,
    math.fsum) and the impacts counted by the stop rule on e^k v1."""
    heights, restitutions = bench_bounces.grid(7, 9)
    rest, impacts = ball.closed_form(heights, restitutions)
    for h, e, t, n in zip(heights, restitutions, rest, impacts, strict=True):
        v1 = math.sqrt(2 * ball.G * h)
        count = next(k for k in range(1000) if e**k * v1 < ball.MIN_SPEED) + 1
        assert n == count
        flights = [v1 / ball.G] + [2 * e**k * v1 / ball.G for k in range(1, count)]
        assert t == pytest.approx(math.fsum(flights), rel=1e-15)
    whole_grid = ball.closed_form(*bench_bounces.grid(100, 100))[1]
    assert whole_grid.max() == 92 and 20 < whole_grid.mean() < 21  # tens of impacts a point


@pytest.mark.parametrize("study", [ball.STUDY, ball.LOGGED], ids=lambda s: s.name)
def test_engine_matches_the_closed_form(study):
    """The default plan's solve of 16 points (up to 92 impacts each): every
    impact count exact, the time to rest (the solution's end, or the event
    log's last) within 1e-11 relative."""
    heights, restitutions = _points()
    result = _engine(heights, restitutions, study)
    rest, impacts = ball.closed_form(heights, restitutions)
    np.testing.assert_array_equal(result.status, Status.SUCCESS)
    np.testing.assert_array_equal(result.outputs["impacts"], impacts)
    np.testing.assert_array_equal(result.num_events, impacts)
    np.testing.assert_allclose(result.outputs["rest_time"], rest, rtol=1e-11, atol=0)


def test_registration_is_found_like_an_installed_package(tmp_path, monkeypatch):
    """The benchmark's registration (what `pip install -e` of the study's package
    writes) is an entry point the engine loads by name, to the same study."""
    folder = bench_bounces.write_registration(tmp_path / "site")
    monkeypatch.syspath_prepend(str(folder))
    engine.study.interface._registered.cache_clear()
    try:
        names = {ep.name for ep in importlib.metadata.entry_points(group=engine.study.interface.ENTRY_POINT_GROUP)}
        assert {"bouncing_ball", "bouncing_ball_logged"} <= names
        assert engine.study.interface.load_study("bouncing_ball") is ball.STUDY
        assert engine.study.interface.load_study("bouncing_ball_logged") is ball.LOGGED
    finally:
        engine.study.interface._registered.cache_clear()


def test_numba_peer_matches_the_engine_and_the_closed_form():
    """The numba Dormand-Prince peer (no closed form inside) on the same points:
    the closed form's impacts, times within 1e-12 relative, the engine's within
    1e-11. (numba compiles it in ~3 s, once: its cache keeps it.)"""
    pytest.importorskip("numba")
    heights, restitutions = _points()
    peer_rest, peer_impacts, steps = bench_bounces.numba_sweep()(heights, restitutions)
    rest, impacts = ball.closed_form(heights, restitutions)
    np.testing.assert_array_equal(peer_impacts, impacts)
    np.testing.assert_allclose(peer_rest, rest, rtol=1e-12, atol=0)
    assert np.all(steps >= impacts)
    result = _engine(heights, restitutions)
    np.testing.assert_array_equal(result.outputs["impacts"], peer_impacts)
    np.testing.assert_allclose(result.outputs["rest_time"], peer_rest, rtol=1e-11, atol=0)


@pytest.mark.slow
def test_numba_cuda_peer_in_the_simulator():
    """The numba-CUDA peer's kernel (the same source) in numba's CUDA simulator."""
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(BENCHMARKS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "bench_bounces.py", "--cudasim-check"], cwd=BENCHMARKS, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

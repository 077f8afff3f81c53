"""`rollsweep demo`'s output, read by a new user after `make demo`: one line a
sweep and a closing summary, no progress bars; every shipped study has a demo."""

import jax.numpy as jnp
import pytest

import engine.study.interface
from engine import Interval, Output, Parameter, PointResult, Status, Study
from engine.cli.demo import run_demo
from engine.study.interface import available_studies


def _solve(p, settings):
    return PointResult(outputs={"y": 2 * p["a"]}, status=jnp.asarray(Status.SUCCESS, jnp.int8))


def _figures(ds):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ds["y"].plot(ax=ax)
    return {"line": fig}


def _sweep(name, points):
    return (f'study = "doubler"\n[axes]\na = {{ linspace = [0.0, 1.0, {points}] }}\n'
            f'[run]\nshard_size = 4\nexecutor = "inline"\nout = "{name}.zarr"\n')


DOUBLER = Study(
    name="doubler", title="twice a", source="tests", version="1",
    parameters=(Parameter("a", "1", 0.5, Interval(0.0, 1.0), "the input"),),
    outputs=(Output("y", "1", "twice a"),), solve_point=_solve, figures=_figures,
    demo_configs={"small": _sweep("small", 5), "larger": _sweep("larger", 9)},
)


@pytest.fixture
def doubler(monkeypatch):
    """DOUBLER registered (plot_cube finds a cube's study by its name)."""
    registered = {"doubler": lambda: DOUBLER}
    monkeypatch.setattr(engine.study.interface, "_registered", lambda: registered)
    return registered


def test_demo_prints_one_line_a_sweep_and_a_summary(doubler, tmp_path, capsys):
    written = run_demo(tmp_path / "demo", studies=doubler)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 3, out  # two sweeps, the summary
    assert lines[0].startswith("larger: 9 points in ") and lines[0].endswith(" -> larger_line.png")
    assert lines[1].startswith("small: 5 points in ") and lines[1].endswith(" -> small_line.png")
    assert lines[2].startswith(f"demo: 2 sweeps, 14 points, 2 figures in {tmp_path / 'demo'}/ ("), lines[2]
    assert err == "", err  # no progress bar: its redrawn lines would outnumber the rest
    assert sorted(p.name for p in written) == ["larger_line.png", "small_line.png"]


def test_a_demo_line_names_why_its_points_had_no_success(monkeypatch, tmp_path, capsys):
    """A point outside the model's range is not a solver's failure: the line says
    which statuses the points without success have, and the summary points to them."""
    def solve(p, settings):
        status = jnp.where(p["a"] > 0.65, Status.OUT_OF_RANGE, jnp.where(p["a"] < 0.1, Status.MAX_STEPS,
                                                                          Status.SUCCESS))
        return PointResult(outputs={"y": 2 * p["a"]}, status=status.astype(jnp.int8))

    import dataclasses

    study = dataclasses.replace(DOUBLER, solve_point=solve, demo_configs={"small": _sweep("small", 11)})
    registered = {"doubler": lambda: study}
    monkeypatch.setattr(engine.study.interface, "_registered", lambda: registered)
    run_demo(tmp_path / "demo", studies=registered)
    lines = capsys.readouterr().out.splitlines()
    assert ", 5 without success (1 max_steps, 4 out_of_range) -> " in lines[0], lines[0]
    assert ", 5 of them without success (each sweep's line says why" in lines[1], lines[1]


def test_every_shipped_study_has_a_demo_sweep_and_figures():
    """The README says `make demo` runs every study's demo sweeps."""
    import importlib.metadata

    from engine.study.interface import ENTRY_POINT_GROUP

    shipped = {ep.name: ep.load() for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
               if ep.value.startswith("studies.")}  # an entry point's "module:attribute"
    assert {"pingpong", "bicycle", "rebound", "hoop"} <= set(shipped)
    assert not [name for name, study in shipped.items() if not study.demo_configs or study.figures is None]


def test_rebound_demo_draws_its_figure(tmp_path, capsys):
    """The rebound study's own demos: the table bounce by model against incoming
    spin, and its outgoing angle and spin under measurement uncertainty."""
    rebound = {"rebound": available_studies()["rebound"]}
    written = run_demo(tmp_path, executor="inline", studies=rebound)
    assert [p.name for p in written] == ["rebound_spin_bounce.png", "rebound_uncertainty_uncertainty.png"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rebound_spin: 363 points in ")
    assert lines[1].startswith("rebound_uncertainty: 3,072 points in ")

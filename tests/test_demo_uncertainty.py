"""The demos of sampled designs and global sensitivity (issue 57, part C):
the bicycle's design sensitivity, its eigenvalue bands from design
uncertainty, the rebound model under measurement uncertainty. Each demo
config (and its full size in configs/) validates, and a tiny version of it
solves and draws its figure through the study's figures (rollsweep plot)."""

import pathlib

import pytest

import engine
from engine import parse_sweep
from engine.cube.plot import plot_cube
from engine.study.interface import load_study

CONFIGS = pathlib.Path(__file__).parent.parent / "configs"
# demo -> (study, full-size config, the tiny version's changes, the figure drawn)
DEMOS = {
    "bicycle_sensitivity": ("bicycle", "n = 32768", (("n = 256 ", "n = 4 "),), "sensitivity"),
    "bicycle_eigen_bands": ("bicycle", "n = 4096", (("n = 256", "n = 4"), ("10.0, 101", "10.0, 11")),
                            "eigenvalue_bands"),
    "rebound_uncertainty": ("rebound", "n = 65536", (("n = 1024", "n = 16"),), "uncertainty"),
}


def _demo(name) -> str:
    study = load_study(DEMOS[name][0])
    return study.demo_configs[name]


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_the_demo_and_its_full_size_validate(name):
    demo = parse_sweep(_demo(name), file=f"{name}.toml")
    full = parse_sweep((CONFIGS / f"{name}.toml").read_text(), file=f"configs/{name}.toml")
    assert DEMOS[name][1] in (CONFIGS / f"{name}.toml").read_text()
    assert demo.samples is not None and full.samples.parameters == demo.samples.parameters
    assert full.samples.points > demo.samples.points


def test_the_bicycle_sensitivity_is_of_25_design_parameters_within_5_percent():
    from studies.bicycle._parameters import BENCHMARK

    sweep = parse_sweep(_demo("bicycle_sensitivity"))
    assert len(sweep.samples.parameters) == 25 and "g" not in sweep.samples.parameters
    assert sweep.sensitivity.method == "sobol" and not sweep.sensitivity.second_order
    assert sweep.sensitivity.failed == "drop"
    assert set(sweep.sensitivity.outputs) == {"weave_speed", "capsize_speed", "stable_speed_width"}
    for name, spec in sweep.samples.parameters.items():
        low, high = spec["uniform"]
        value = BENCHMARK[name]
        assert min(0.95 * value, 1.05 * value) - 1e-15 <= low < high <= max(0.95 * value, 1.05 * value) + 1e-15


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_a_tiny_version_of_the_demo_draws_its_figure(name, tmp_path):
    text = _demo(name)
    for old, new in DEMOS[name][2]:
        assert old in text
        text = text.replace(old, new)
    sweep = parse_sweep(text, out=tmp_path / f"{name}.zarr")
    engine.run(sweep, progress=False)
    written = plot_cube(tmp_path / f"{name}.zarr", tmp_path)
    assert [p.name for p in written] == [f"{name}_{DEMOS[name][3]}.png"]
    assert written[0].stat().st_size > 10_000

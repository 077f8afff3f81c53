"""Every device of a machine solves: shards spread over all local devices, one
shard thread (inline) or worker process (local cluster) per device, and the cube
bitwise equal to a one-device run.

The devices are CPU devices forced by XLA_FLAGS (and JAX_PLATFORMS=cpu, so a
GPU machine runs the same test), which must be set before JAX starts: every run
is a subprocess.
"""

import os
import subprocess
import sys

import pytest

from engine.cube.devices import solving_devices
from engine.cube.lock import locked
from engine.cube.markers import Markers
from engine.cube.prepare import prepare
from engine.cube.store import Cube, open_cube
from engine.runner.execute import pending_shards
from engine.runner.slurm import write_share
from engine.runner.submit import write_sweep
from engine.sweep.config import load_sweep

from conftest import cubes_identical, sweep_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def regime_sweep(folder, name, executor="inline"):
    """A small sweep of a study that compiles fast, in 21 shards."""
    return sweep_file(folder, f"""
        study = "rebound_regime"
        [axes]
        spin_ratio = {{ linspace = [-1.0, 1.0, 21] }}
        incidence_angle = {{ linspace = [0.0, 89.9, 10] }}
        [run]
        shard_size = 10
        executor = "{executor}"
        out = "{folder / name}.zarr"
        """, name=f"{name}.toml")


def run_on_devices(config, devices: int, *args, command=("run",), module=True):
    """The command line's `command` (module=False: python's own, `-c SOURCE`) on
    `config`, in a process of `devices` CPU devices."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, (REPO, os.environ.get("PYTHONPATH")))))
    program = ("-m", "engine.cli") if module else ()
    done = subprocess.run([sys.executable, *program, *command, str(config), *args],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def one_device_cube(tmp_path_factory):
    folder = tmp_path_factory.mktemp("one")
    run_on_devices(regime_sweep(folder, "one"), 1, "--quiet")
    return open_cube(folder / "one.zarr").load()


def test_inline_shards_spread_over_every_device(tmp_path, one_device_cube):
    config = regime_sweep(tmp_path, "four")
    run_on_devices(config, 4, "--quiet")
    out = tmp_path / "four.zarr"
    solved = solving_devices(Markers(out))
    assert set(solved) == {f"cpu:cpu #{i}" for i in range(4)}, solved
    assert sum(solved.values()) == 21
    cube = open_cube(out).load()
    assert cube.attrs["device"] == "cpu:cpu x4"
    assert cubes_identical(cube, one_device_cube)


# A run as an accelerator's pipeline (engine.runner.pipeline), on these CPU devices.
PIPELINED_RUN = """
import sys
import engine.runner.execute as execute
from engine.sweep.config import load_sweep

execute.pipelined = lambda device: True
execute.run(load_sweep(sys.argv[1]), progress=False)
"""


def test_a_pipeline_feeds_every_device_and_its_markers_name_them(tmp_path, one_device_cube):
    """The feeding thread queues the tasks' calls on the devices in turn; each
    task's writer works on its task's device: the calls it queues as earlier
    ones end (16 points a call: several a task) go there, and its markers name it."""
    config = regime_sweep(tmp_path, "piped")
    config.write_text(config.read_text().replace("[run]\n", "[run]\nbatch_size = 16\n"))
    run_on_devices(config, 2, command=("-c", PIPELINED_RUN), module=False)
    out = tmp_path / "piped.zarr"
    solved = solving_devices(Markers(out))
    assert set(solved) == {"cpu:cpu #0", "cpu:cpu #1"}, solved
    assert cubes_identical(open_cube(out).load(), one_device_cube)


@pytest.mark.slow
def test_local_cluster_starts_a_worker_per_device(tmp_path, one_device_cube):
    config = regime_sweep(tmp_path, "two", executor="local")
    run_on_devices(config, 2, "--quiet")
    out = tmp_path / "two.zarr"
    assert set(solving_devices(Markers(out))) == {"cpu:cpu #0", "cpu:cpu #1"}
    assert cubes_identical(open_cube(out).load(), one_device_cube)


def test_one_device_is_named_as_before(one_device_cube):
    assert one_device_cube.attrs["device"] == "cpu:cpu"


def test_a_slurm_array_task_solves_on_every_device_it_was_given(tmp_path, one_device_cube):
    """`rollsweep work` (one array task's share of the shards) spreads them over
    its devices as the inline executor does."""
    sweep = load_sweep(regime_sweep(tmp_path, "task"))
    with locked(sweep.out):
        prepare(sweep, sweep.out)
    share = write_share(Markers(sweep.out).slurm_folder, pending_shards(Cube(sweep.out, sweep)), 1)
    write_sweep(share, sweep)
    run_on_devices(sweep.out, 4, "--task", "0", "--share", str(share), command=("work",))
    assert set(solving_devices(Markers(sweep.out))) == {f"cpu:cpu #{i}" for i in range(4)}
    assert cubes_identical(open_cube(sweep.out).load(), one_device_cube)

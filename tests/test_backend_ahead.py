"""JAX's backend started beside a command's imports (engine._jax_setup.start_backend).

In the program's own process, a command that plans or solves imports JAX,
starts its backend on a thread of its own and imports the rest meanwhile;
the command asks for its devices as before and gets the ones that thread
made. Each check runs the command in a fresh interpreter (this one started
its backend long ago), with a spy on `jax.local_devices` naming the thread of
each call: the first is the backend thread's where the start is ahead, the
main thread's where it is not.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from engine.cube.store import open_cube

from conftest import cubes_identical, sweep_file

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))

# In the child: the spy, then the command (`entry`: the program's own process, or
# `main`: a caller's, such as a notebook), then what the spy saw.
CHILD = """
    import json, sys, threading
    import jax

    callers = []
    real = jax.local_devices

    def spy(*args, **kwargs):
        callers.append(threading.current_thread().name)
        return real(*args, **kwargs)

    jax.local_devices = spy
    from engine.cli import commands

    code = getattr(commands, sys.argv[1])(sys.argv[2:])
    alive = [t.name for t in threading.enumerate() if t.name == "rollsweep-backend" and t.is_alive()]
    print(json.dumps({"code": code, "callers": callers, "alive": alive}))
    """


def child(how: str, *argv, tmp_path, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), how, *map(str, argv)], cwd=tmp_path,
                          env=ENV | {"ROLLSWEEP_CACHE": str(tmp_path / "cache")} | env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}


def regime(tmp_path, name: str) -> pathlib.Path:
    return sweep_file(tmp_path, f"""
        study = "rebound_regime"
        [axes]
        spin_ratio = {{ linspace = [-1.0, 1.0, 7] }}
        incidence_angle = {{ linspace = [0.0, 89.9, 5] }}
        [run]
        out = "{tmp_path / name}.zarr"
        """, name=f"{name}.toml")


def test_a_run_s_backend_starts_on_its_own_thread_and_the_run_is_the_same(tmp_path):
    ahead = child("entry", "run", regime(tmp_path, "ahead"), "--quiet", tmp_path=tmp_path)
    assert ahead["code"] == 0
    assert ahead["callers"][0] == "rollsweep-backend"
    assert "MainThread" in ahead["callers"]  # the run's own detect, after the start
    assert ahead["alive"] == []  # waited for before the command returned
    serial = child("entry", "run", regime(tmp_path, "serial"), "--quiet", tmp_path=tmp_path,
                   ROLLSWEEP_BACKEND_AHEAD="0")
    assert serial["code"] == 0
    assert serial["callers"][0] == "MainThread"
    assert "rollsweep-backend" not in serial["callers"]
    assert cubes_identical(open_cube(tmp_path / "ahead.zarr").load(), open_cube(tmp_path / "serial.zarr").load())


@pytest.mark.parametrize("command", ["validate", "studies"])
def test_only_a_command_that_asks_for_devices_starts_them_ahead(tmp_path, command):
    args = [regime(tmp_path, "v")] if command == "validate" else []
    seen = child("entry", command, *args, tmp_path=tmp_path)
    assert seen["code"] == 0
    if command == "validate":
        assert seen["callers"][0] == "rollsweep-backend"
    else:  # lists the studies: no device asked for, none started
        assert seen["callers"] == []


def test_a_caller_s_process_is_left_as_it_is(tmp_path):
    """`main` (a notebook's or a test's call) starts no thread: its caller's JAX
    may be set up otherwise."""
    seen = child("main", "run", regime(tmp_path, "caller"), "--quiet", tmp_path=tmp_path)
    assert seen["code"] == 0
    assert seen["callers"][0] == "MainThread"
    assert "rollsweep-backend" not in seen["callers"]


@pytest.mark.parametrize("ahead", ["1", "0"])
@pytest.mark.parametrize("platforms", ["no_such_platform", "cpu,no_such_platform"])
def test_a_backend_that_cannot_start_is_one_line_and_nothing_is_written(tmp_path, ahead, platforms):
    """(With "cpu,no_such_platform" JAX keeps the CPU's backend, started first:
    asked again, it would hand the run the CPU without the platform that failed.)"""
    done = subprocess.run([sys.executable, "-m", "engine.cli", "run", str(regime(tmp_path, "none")), "--quiet"],
                          cwd=tmp_path, env=ENV | {"JAX_PLATFORMS": platforms,
                                                   "ROLLSWEEP_BACKEND_AHEAD": ahead,
                                                   "ROLLSWEEP_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("rollsweep: error: JAX could not start its devices: ")
    assert "no_such_platform" in lines[0]
    assert not (tmp_path / "none.zarr").exists()

"""The command line where the machine or the installation is at fault, not
the sweep: a study plugin that does not load, JAX platforms that do not start,
a compile cache that cannot be used, a long `point`, Ctrl-C while the program
imports, an address-space limit; and what `validate` says of the compile.
Each is one line (no traceback), exit 1 (2 for bad input), nothing written.
No test compiles a JAX program but `point --compiled`'s (one closed-form point)."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import engine.cli.commands as commands
import engine.study.interface as interface
from engine.cli.commands import main

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
SWEEP = """
    study = "rebound_regime"
    [axes]
    spin_ratio = {{ linspace = [0.0, 3.0, 4] }}
    [run]
    out = "{out}"
    """


@pytest.fixture
def sweep(tmp_path) -> pathlib.Path:
    path = tmp_path / "sweep.toml"
    path.write_text(textwrap.dedent(SWEEP.format(out=tmp_path / "cube.zarr")))
    return path


def _program(*args, env=None, cwd, limit_mb=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m engine.cli ARGS` in a process of its own (under an
    address-space limit of `limit_mb`, set by the process itself: a fork's
    preexec_fn is no friend of JAX's threads in this one)."""
    start = "import runpy, sys\n"
    if limit_mb is not None:
        start += (f"import resource\n"
                  f"resource.setrlimit(resource.RLIMIT_AS, ({limit_mb} * 2**20, resource.RLIM_INFINITY))\n")
    start += "sys.argv = ['-m', *sys.argv[1:]]\nrunpy.run_module('engine.cli', run_name='__main__', alter_sys=True)\n"
    return subprocess.run([sys.executable, "-c", start, *map(str, args)], env=ENV | (env or {}), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


# Plugins

@pytest.fixture
def broken_plugins(tmp_path, monkeypatch):
    """Two studies registered as `pip install` would: one whose module raises
    as it is imported, one naming something that is not a Study."""
    site = tmp_path / "site"
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rollsweep.studies]\nbroken = broken_study:STUDY\n"
                                           "not_a_study = odd_study:STUDY\n")
    (site / "broken_study.py").write_text("import math\n\nSTUDY = math.no_such_thing\n")
    (site / "odd_study.py").write_text("STUDY = 3\n")
    monkeypatch.syspath_prepend(str(site))
    interface._registered.cache_clear()
    yield site
    interface._registered.cache_clear()
    for module in ("broken_study", "odd_study"):
        sys.modules.pop(module, None)


def test_studies_lists_the_others_and_names_each_broken_plugin(broken_plugins, capsys):
    assert main(["studies"]) == 1
    out, err = capsys.readouterr()
    assert "rebound_regime:" in out and "hoop:" in out and "broken" not in out
    assert "Traceback" not in err
    assert err.splitlines() == [
        "rollsweep: error: study 'broken' (entry point broken_study:STUDY) failed to load: AttributeError: module "
        f"'math' has no attribute 'no_such_thing' ({broken_plugins / 'broken_study.py'}:3)",
        "rollsweep: error: study 'not_a_study' (entry point odd_study:STUDY) names a value of type 'int', not an "
        "engine Study",
    ]


def test_a_command_using_a_broken_plugin_names_it(broken_plugins, tmp_path, capsys):
    config = tmp_path / "broken.toml"
    out = tmp_path / "c.zarr"
    config.write_text(f'study = "broken"\n[axes]\nx = {{ linspace = [0, 1, 3] }}\n[run]\nout = "{out}"\n')
    for command in (["studies", "broken"], ["validate", str(config)], ["run", str(config), "--quiet"]):
        assert main(command) == 1, command
        assert "study 'broken' (entry point broken_study:STUDY) failed to load: AttributeError" in \
            _one_line(capsys.readouterr().err)
    assert not (tmp_path / "c.zarr").exists() and not (tmp_path / "c.zarr.lock").exists()


# Devices and environment

@pytest.mark.cpu_only(reason="JAX_PLATFORMS=cuda must name a platform this machine lacks")
def test_jax_platforms_naming_a_missing_platform_is_one_line(sweep, tmp_path):
    done = _program("validate", sweep, env={"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": ""}, cwd=tmp_path)
    assert done.returncode == 1
    assert _one_line(done.stderr) == (
        "rollsweep: error: JAX could not start its devices: JAX_PLATFORMS='cuda' names no platform it can start "
        "here (cuda needs a visible NVIDIA GPU and its driver): set JAX_PLATFORMS=cpu, or unset it for JAX to "
        "choose what this machine has")


def test_an_unusable_compile_cache_is_one_warning_and_the_command_goes_on(sweep, tmp_path):
    """A file where the cache's folder belongs (root may write anywhere: a
    mode would not stop it): one warning, the command done without a cache."""
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    done = _program("validate", sweep, env={"ROLLSWEEP_CACHE": str(blocked)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _one_line(done.stderr) == (
        f"rollsweep: warning: the compile cache {blocked} cannot be used (not a folder); running without it, every "
        "program compiled afresh: set ROLLSWEEP_CACHE to a writable folder (or to '' for none)")
    assert "programs         to compile: no compile cache" in done.stdout
    assert blocked.read_text() == "not a folder"


def test_an_unwritable_cache_is_left_for_the_rest_of_the_process(tmp_path, monkeypatch, capsys):
    from engine._jax_setup import CACHE_VARIABLE, cache_dir, usable_cache_dir

    monkeypatch.setenv(CACHE_VARIABLE, "/proc/rollsweep-cache")  # a folder nobody can make
    assert usable_cache_dir() is None
    assert "the compile cache /proc/rollsweep-cache cannot be used" in _one_line(capsys.readouterr().err)
    assert os.environ[CACHE_VARIABLE] == "" and cache_dir() is None  # and its workers: nothing said again
    assert usable_cache_dir() is None and capsys.readouterr().err == ""


# point

def test_a_long_eager_point_says_what_it_is_doing(sweep, monkeypatch, capsys):
    import engine.runner.point as point

    solve = point.solve_eagerly
    monkeypatch.setattr(commands, "POINT_QUIET_S", 0.05)
    monkeypatch.setattr(point, "solve_eagerly", lambda *args: (time.sleep(0.5), solve(*args))[1])
    assert main(["point", str(sweep), "--index", "1"]) == 0
    out, err = capsys.readouterr()
    assert "status      " in out and "outputs" in out
    assert _one_line(err).startswith("rollsweep point: still solving eagerly after 0.05 s")


def test_a_quick_eager_point_says_nothing_more(sweep, capsys):
    assert main(["point", str(sweep), "--index", "1"]) == 0
    assert capsys.readouterr().err == ""


def test_point_compiled_solves_the_same_point(sweep, capsys):
    assert main(["point", str(sweep), "--index", "2"]) == 0
    eager = capsys.readouterr().out
    assert main(["point", str(sweep), "--index", "2", "--compiled"]) == 0
    out, err = capsys.readouterr()
    assert _one_line(err).startswith("rollsweep point: compiling the point's solve")
    numbers, words = _values(out), _values(eager)
    assert {k: v for k, v in numbers.items() if isinstance(v, str)} == {k: v for k, v in words.items()
                                                                         if isinstance(v, str)}
    assert {k: v for k, v in numbers.items() if not isinstance(v, str)} == pytest.approx(
        {k: v for k, v in words.items() if not isinstance(v, str)}, rel=1e-12)  # XLA's arithmetic: last digits


def _values(report: str) -> dict:
    """point's lines `name  number [unit]` (status and counts too), by name."""
    values = {}
    for line in report.splitlines():
        words = line.split()
        if len(words) >= 2:
            try:
                values[words[0]] = float(words[1].strip("()"))
            except ValueError:
                values[words[0]] = words[1]
    return values


@pytest.mark.parametrize("command, line", [
    ("point", "rollsweep: interrupted"),
    ("validate", "rollsweep: interrupted"),
    ("run", "rollsweep: interrupted; run the same command again to resume"),
])
def test_ctrl_c_offers_to_resume_only_what_resumes(sweep, monkeypatch, capsys, command, line):
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, {"point": "_point", "validate": "_validate", "run": "_run"}[command], stopped)
    monkeypatch.setattr(commands, "parser", _parser_with(command, stopped))
    argv = [command, str(sweep)] + (["--index", "0"] if command == "point" else [])
    assert main(argv) == 130
    assert _one_line(capsys.readouterr().err) == line


def _parser_with(command: str, fn):
    """commands.parser, its `command` calling `fn`."""
    make = commands.parser

    def parser():
        top = make()
        top._subparsers._group_actions[0].choices[command].set_defaults(fn=fn)
        return top

    return parser


# Ctrl-C as the program imports

STOP_AT_IMPORT = """
import importlib.abc, os, signal, sys

signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own (the tests' shell may ignore Ctrl-C)

class StopAt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == sys.argv[1]:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, taken at the import's next step
        return None

sys.meta_path.insert(0, StopAt())
sys.argv = ["rollsweep", *sys.argv[2:]]  # as the console script's process
from engine.cli import program
program()
"""


@pytest.mark.parametrize("module", ["engine.cli.commands", "argparse"])
def test_ctrl_c_while_the_program_imports_is_one_line(tmp_path, module):
    done = subprocess.run([sys.executable, "-c", STOP_AT_IMPORT, module, "studies"], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr, done.stdout) == (130, "rollsweep: interrupted\n", "")


def test_the_early_stop_is_the_programs_alone():
    """A process that imports the engine (a notebook, this test) keeps Python's Ctrl-C."""
    import engine.cli  # noqa: F401

    assert signal.getsignal(signal.SIGINT) is not engine.cli.stops._stopped_early


# Memory limits

def test_an_address_space_too_small_for_the_libraries_is_one_line(sweep, tmp_path):
    done = _program("validate", sweep, cwd=tmp_path, limit_mb=200)
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith("rollsweep: error: ") and \
        "could not be loaded under this process's address-space limit (ulimit -v 204800 KiB, 0.20 GiB)" in line
    assert "raise it (ulimit -v unlimited)" in line


@pytest.mark.parametrize("limit, advice", [
    ("ulimit -v 1048576 KiB, 1.00 GiB", "under this process's address-space limit (ulimit -v 1048576 KiB, 1.00 GiB)"),
    (None, "lower the sweep's [run] shard_size or batch_size, or run where more memory is free"),
])
def test_memory_running_out_is_one_line(sweep, monkeypatch, capsys, limit, advice):
    def exhausted(args):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(commands, "_address_limit", lambda: limit)
    monkeypatch.setattr(commands, "parser", _parser_with("validate", exhausted))
    assert main(["validate", str(sweep)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("rollsweep: error: out of memory (MemoryError: std::bad_alloc)") and advice in line


# validate's word on the compile

@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("ROLLSWEEP_CACHE", str(folder))
    return folder


def test_validate_says_a_cold_run_compiles_and_what_it_took_before(sweep, own_cache, capsys):
    assert main(["validate", str(sweep)]) == 0
    assert ("programs         to compile (cold), its time not known here: no cold run of this study, solver and "
            "device noted yet") in capsys.readouterr().out
    from engine.runner.cost import compile_kind, plan_for
    from engine.sweep.config import load_sweep

    kind = compile_kind(load_sweep(sweep), plan_for(load_sweep(sweep)))
    (own_cache / "programs").mkdir(parents=True)
    (own_cache / "programs" / "compile-seconds.json").write_text(json.dumps({kind: 12.5}))
    assert main(["validate", str(sweep)]) == 0
    assert f"to compile (cold), about 12.5 s: what a cold run of {kind} compiled in here last" in \
        capsys.readouterr().out


def test_validate_says_a_warm_run_compiles_nothing(sweep, own_cache, monkeypatch, capsys):
    import engine.solve.executables as executables

    monkeypatch.setattr(executables, "stored", lambda key: key is not None)
    assert main(["validate", str(sweep)]) == 0
    assert "programs         kept (warm): their compiled executables load from the cache, nothing to compile" in \
        capsys.readouterr().out


def test_a_runs_compiles_are_noted_under_its_kind(own_cache):
    import engine.solve.executables as executables

    executables.note_compiles_as("toy/lanes/cpu")
    try:
        executables._note_compile(1.25)
        executables._note_compile(2.0)
    finally:
        executables.note_compiles_as(None)
    executables._note_compile(9.0)  # no run's: not noted
    assert executables.compile_times() == {"toy/lanes/cpu": 3.2}


# Paths a command is given that hold no cube: one line saying why

def test_a_path_that_holds_no_cube_says_why(sweep, tmp_path, capsys):
    (tmp_path / "inside.zarr" / "_rollsweep").mkdir(parents=True)
    (tmp_path / "inside.zarr" / "final_displacement").mkdir()
    (tmp_path / "nowhere.zarr").symlink_to(tmp_path / "gone")
    cases = {
        tmp_path / "inside.zarr" / "final_displacement": f"a folder inside the cube {tmp_path / 'inside.zarr'}",
        tmp_path / "nowhere.zarr": f"a link to {tmp_path / 'gone'}, which does not exist",
        tmp_path / "absent.zarr": "no such folder",
    }
    for path, why in cases.items():
        assert main(["status", str(path)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "not a rollsweep cube" in line and why in line, line
    assert main(["run", str(sweep), "--out", str(tmp_path / "nowhere.zarr")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out: {tmp_path / 'nowhere.zarr'} is a link to {tmp_path / 'gone'}, which does not exist" in line
    assert not (tmp_path / "gone").exists() and not list(tmp_path.glob("*.lock"))


@pytest.mark.parametrize("command", ["status", "verify", "plot"])
@pytest.mark.parametrize("path", ["", ".", "/"], ids=["empty", "current folder", "root"])
def test_an_empty_current_or_root_path_is_one_line_and_nothing_written(command, path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([command, path]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "not a rollsweep cube" in line and "Traceback" not in line, line
    assert list(tmp_path.iterdir()) == [] and not pathlib.Path("/.lock").exists()


def test_plot_into_a_cube_is_refused_and_writes_nothing(tmp_path, capsys):
    """Figures go beside a cube, never into one (its own folder, or a folder
    inside it or another cube)."""
    from engine.runner.execute import run

    from conftest import regime_grid

    sweep = regime_grid(tmp_path, "regime", shard_size=64, spins=3)
    run(sweep, progress=False)
    cube = pathlib.Path(sweep.out)
    before = sorted(p.relative_to(cube) for p in cube.rglob("*"))
    for out in (cube, cube / "figures", cube / "spin_ratio"):
        assert main(["plot", str(cube), "--out", str(out)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"inside the cube {cube}" in line and "choose another --out" in line, line
    assert sorted(p.relative_to(cube) for p in cube.rglob("*")) == before
    assert main(["plot", str(cube), "--out", str(tmp_path / "figures")]) == 0
    assert list((tmp_path / "figures").glob("*.png"))

"""Bad input, generated: sweep files and command lines that hypothesis makes
up, run through the `rollsweep` command in this process.

Whatever it is given, a command that reads input ends with exit code 0 (the
input was good) or 2 (it was not), says why in at most one line, never shows
a traceback, and writes nothing when it refuses. The commands chosen here
never solve (validate, status, verify, plot, submit --dry-run, and run,
point and submit on inputs that cannot be sweeps), so that a few thousand
examples run within seconds; tests/test_config_fuzz.py runs mutated sweeps
through `run` as well.
"""

import contextlib
import io
import pathlib
import tomllib

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import available_studies
from engine.cli.commands import main

SWEEPS = [text for name, load in sorted(available_studies().items()) for text in load().demo_configs.values()]
EXAMPLES = settings(max_examples=1000, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Text a user (or a hostile file) may put anywhere: control characters, shell
# metacharacters, paths, numbers written as text, nothing at all.
NASTY = st.sampled_from(["", " ", "\n", "\r\n", "\x00", "\t", "\x1b[2J", "; rm -rf ~", "$(touch x)", "`id`",
                         "&&", "|", "../..", "/", ".", "~", "-1", "0", "1e400", "nan", "inf", "é", "🚲"])
TEXT = st.one_of(NASTY, st.text(max_size=12), st.builds(str.__add__, st.text(max_size=6), NASTY))
NUMBER = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0, 1, -1, 2**31, 2**63, 1e-300, 1e300, 1e10]))
VALUE = st.one_of(
    NUMBER, TEXT, st.booleans(),
    st.lists(st.one_of(NUMBER, TEXT), max_size=4),
    st.dictionaries(st.sampled_from(["linspace", "logspace", "values", "uniform", "x"]),
                    st.lists(st.one_of(st.integers(-3, 10**4), st.floats(-5, 5), TEXT), max_size=4), max_size=2),
)
# The tables and keys a sweep file has (and a few it has not).
KEYS = {
    "solver": ["solver", "rtol", "atol", "max_steps", "max_segments", "t_max", "dtype", "x"],
    "critical": ["output", "axis", "bracket", "target", "xtol"],
    "run": ["shard_size", "batch_size", "batch_solver", "executor", "workers", "out", "outputs"],
    "slurm": ["partition", "account", "cores", "memory", "walltime", "gpus", "tasks", "extra_directives",
              "setup", "interface", "python"],
    "parameters": ["speed", "v", "spin_ratio", "trail", "mass"],
    "axes": ["spin_ratio", "v", "speed", "incidence_angle"],
}


def toml_value(value):
    """`value` as tomli_w can write it, or None where TOML cannot hold it."""
    try:
        tomli_w.dumps({"v": value})
        return value
    except (TypeError, ValueError):
        return None


@st.composite
def sweep_documents(draw):
    """A shipped demo sweep with one to four of its keys replaced, deleted or
    added, the [run] table kept inside the test's folder."""
    doc = tomllib.loads(draw(st.sampled_from(SWEEPS)))
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from([*KEYS, None]))
        value = toml_value(draw(VALUE))
        if table is None:  # a top-level key
            key = draw(st.sampled_from(["study", "parameter_file", "extra"]))
            target = doc
        else:
            target = doc.setdefault(table, {})
            if not isinstance(target, dict):
                continue
            key = draw(st.sampled_from(KEYS[table] + list(target)))
        if draw(st.booleans()) and key in target:
            del target[key]
        elif value is not None:
            target[key] = value
    return doc


def run_command(argv: list[str]) -> tuple[int, str]:
    """(exit code, what went to stderr) of `rollsweep ARGV` in this process;
    any exception but the exit argparse raises fails the test as it is."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse: --help (0), a bad flag (2)
            code = stop.code
    return code, err.getvalue()


def files_under(folder: pathlib.Path) -> set:
    return {p.relative_to(folder) for p in folder.rglob("*")}


def assert_clean(code, err, argv):
    assert code in (0, 2), (code, argv, err)
    assert "Traceback" not in err, (argv, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) <= 1, (argv, err)
    if code == 2:
        assert lines and "error" in lines[0], (argv, err)


@EXAMPLES
@given(doc=sweep_documents())
def test_a_generated_sweep_file_validates_or_is_refused_in_one_line(doc, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    if isinstance(doc.get("run"), dict):
        doc["run"]["out"] = str(folder / "cube.zarr")  # never write outside the test's folder
    path = folder / "sweep.toml"
    path.write_text(tomli_w.dumps(doc))
    before = files_under(folder)
    code, err = run_command(["validate", str(path)])
    assert_clean(code, err, doc)
    assert files_under(folder) == before, "validate wrote a file"


# What the commands are given where a path is asked for: nothing there, an
# empty file or folder, a file of other text, a cube-like folder that is not one.
PATH_KINDS = ["missing", "empty file", "folder", "text file", "not a cube", "empty name", "link to nowhere"]


def make_path(folder: pathlib.Path, kind: str) -> str:
    path = folder / "thing"
    if kind == "empty file":
        path.write_text("")
    elif kind == "folder":
        path.mkdir()
    elif kind == "text file":
        path.write_text("study = \n[[[\n")
    elif kind == "not a cube":
        path.mkdir()
        (path / "zarr.json").write_text("{not json")
    elif kind == "empty name":
        return ""
    elif kind == "link to nowhere":
        path.symlink_to(folder / "nowhere")
    return str(path)


FLAGS = {
    "validate": ["--out", "--workers"],
    "run": ["--out", "--workers", "--scheduler", "--connect-timeout", "--lost-after", "--executor", "--overwrite",
            "--quiet", "--cores", "--memory", "--walltime", "--gpus", "--tasks", "--partition", "--account"],
    "submit": ["--out", "--dry-run", "--cores", "--memory", "--walltime", "--gpus", "--tasks", "--partition",
               "--account"],
    "point": ["--at", "--index"],
    "status": [],
    "verify": [],
    "plot": ["--out"],
}
SWITCHES = {"--overwrite", "--quiet", "--dry-run"}


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = [command, draw(st.sampled_from(PATH_KINDS))]
    flags = st.lists(st.sampled_from(FLAGS[command]), max_size=3) if FLAGS[command] else st.just([])
    for flag in draw(flags):
        argv.append(flag)
        if flag not in SWITCHES:
            argv.append(draw(st.one_of(TEXT, NUMBER.map(str))))
    return argv


@EXAMPLES
@given(argv=command_lines())
def test_a_generated_command_line_is_refused_in_one_line(argv, tmp_path_factory):
    folder = tmp_path_factory.mktemp("command")
    argv = [argv[0], make_path(folder, argv[1]), *argv[2:]]
    argv = [a.replace("\x00", "") for a in argv]  # a command line cannot hold NUL
    before = files_under(folder)
    code, err = run_command(argv)
    assert_clean(code, err, argv)
    assert code == 2, (argv, err)  # none of these inputs is a sweep or a cube
    assert files_under(folder) == before, f"{argv} wrote a file"

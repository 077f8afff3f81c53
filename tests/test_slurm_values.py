"""Every [slurm] value is checked for what it is before it is written into a
job script, whichever layer it came from, and the script is checked again as it
is rendered: a shared sweep file cannot add a line of shell to anyone's job.

The golden scripts (tests/golden/) are the reference for what a script may
hold: a script rendered from any value that is not refused is the golden one
with that value in its place, and nothing else.
"""

import pathlib
import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli.commands import main
from engine.errors import ConfigError
from engine.runner.slurm import array_script, check_script, jobqueue_cluster, render, resolve
from engine.sweep.config import load_sweep
from engine.sweep.resources import FIELDS, Resources, checked, duration_seconds, memory_bytes

from conftest import sweep_file

GOLDEN = pathlib.Path(__file__).parent / "golden"
PYTHON = "/opt/rollsweep/.venv/bin/python"
STORE = pathlib.Path("/scratch/results/pingpong_spin_ratio.zarr")
FOLDER = STORE / "_rollsweep" / "slurm"
SHARE = FOLDER / "share-20260101T000000-1.json"
JOB = "rollsweep-pingpong-0123abcd"
SWEEP = "shared-sweep.toml"
COMMAND_LINE = "<command line>"
NO_USER_FILE = pathlib.Path(__file__).parent / "no-such-slurm.toml"

INJECTIONS = ["\n", "\r", "\x00", "\t", "; rm -rf ~", "$(touch x)", "`id`", "&&", "|"]
CONTROL = ("\n", "\r", "\x00", "\t")
# A good value of every key, to which an injection is added.
GOOD = {"partition": "gpu", "account": "mech-lab", "interface": "ib0", "memory": "4G", "walltime": "01:00:00",
        "python": PYTHON, "cores": 1, "gpus": 0, "tasks": 8, "extra_directives": ["--qos=low"],
        "setup": ["module load cuda"]}
LISTS = ("extra_directives", "setup")
# Keys whose values are code by design, written as one shell line or one quoted
# word: from the user's own layers only control characters are refused.
CODE = ("python", "setup")


def test_every_key_has_a_good_value_here():
    assert set(GOOD) == set(FIELDS)


def injected(key: str, injection: str, appended: bool):
    """The key's good value with the injection appended (or the injection alone);
    a list's single entry so; an integer key gets text."""
    good = GOOD[key]
    if isinstance(good, list):
        return [good[0] + injection if appended else injection]
    return f"{good}{injection}" if appended else injection


def layered(key: str, value, layer: str) -> Resources:
    if layer == "sweep":
        return resolve({key: value}, {}, SWEEP, user_file=NO_USER_FILE)
    return resolve({}, {key: value}, SWEEP, user_file=NO_USER_FILE)


def refused(key: str, injection: str, layer: str) -> bool:
    return layer == "sweep" or key not in CODE or injection in CONTROL


CASES = [(key, injection, layer, appended) for key in sorted(FIELDS) for injection in INJECTIONS
         for layer in ("sweep", "command line") for appended in (True, False)]


@pytest.mark.parametrize("key, injection, layer, appended",
                         [c for c in CASES if refused(*c[:3])], ids=repr)
def test_injected_value_is_refused_naming_key_and_origin(key, injection, layer, appended):
    with pytest.raises(ConfigError) as err:
        layered(key, injected(key, injection, appended), layer)
    origin = SWEEP if layer == "sweep" else COMMAND_LINE
    assert (err.value.file, err.value.key) == (origin, f"slurm.{key}")
    message = str(err.value)
    assert message.startswith(f"{origin}: slurm.{key}: ") and "\n" not in message and "\r" not in message


@pytest.mark.parametrize("key, injection, layer, appended",
                         [c for c in CASES if not refused(*c[:3])], ids=repr)
def test_code_from_your_own_layers_stays_one_line_or_one_word(key, injection, layer, appended):
    """setup lines are shell by design and the Python's path is shell-quoted:
    from the command line (or Python) their shell characters are kept, where
    they were put and nowhere else."""
    value = injected(key, injection, appended)
    resources = resolve({}, {"python": PYTHON, key: value}, SWEEP, user_file=NO_USER_FILE)
    script = array_script(resources, STORE, SHARE, JOB, 8, FOLDER)
    assert script == expected_script("array_default", resources)
    exec_line = script.splitlines()[-1]
    assert shlex.split(exec_line)[1] == resources.python


def test_the_reported_sweep_file_is_refused_before_anything_runs(tmp_path):
    path = sweep_file(tmp_path, f"""
        study = "pingpong"
        [axes]
        spin_ratio = {{ linspace = [0.0, 3.0, 11] }}
        [run]
        shard_size = 4
        out = "{tmp_path / 'out.zarr'}"
        [slurm]
        partition = "gpu\\nrm -rf $HOME/important"
        """)
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    assert (err.value.file, err.value.key) == (str(path), "slurm.partition")


def test_submit_flags_are_checked_as_the_command_line(tmp_path, capsys):
    path = sweep_file(tmp_path, f"""
        study = "pingpong"
        [axes]
        spin_ratio = {{ linspace = [0.0, 3.0, 11] }}
        [run]
        shard_size = 4
        out = "{tmp_path / 'out.zarr'}"
        """)
    for flag, value in [("--walltime", "two days"), ("--memory", "lots"), ("--partition", "gpu;id")]:
        assert main(["submit", str(path), flag, value, "--dry-run"]) != 0
        err = capsys.readouterr().err
        assert err.startswith(f"rollsweep: error: {COMMAND_LINE}: slurm.{flag[2:]}: ") and err.count("\n") == 1
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("walltime, seconds", [
    ("30", 1800), ("90", 5400), ("30:15", 1815), ("01:00:00", 3600), ("36:00:00", 129600), ("1-0", 86400),
    ("2-12", 216000), ("1-02:30", 95400), ("2-00:00:00", 172800), ("1-23:59:59", 172799),
])
def test_walltime_in_slurm_forms(walltime, seconds):
    assert duration_seconds(walltime) == seconds
    assert checked({"walltime": walltime}, SWEEP) == {"walltime": walltime}


@pytest.mark.parametrize("walltime", [
    "forever", "two days", "-5", "-01:00:00", "", " 01:00:00", "01:00:00 ", "0", "00:00:00", "0-0",
    "00:60", "01:60:00", "01:00:60", "1-24", "1-00:60", "1-00:00:60", "1-2-3", "1:2:3:4", "5-", "1-",
    "1.5", "UNLIMITED", "INFINITE", "\u0661\u0662",
])
def test_walltime_not_a_slurm_duration_is_refused(walltime):
    with pytest.raises(ConfigError, match="not a SLURM time limit") as err:
        checked({"walltime": walltime}, SWEEP)
    assert err.value.key == "slurm.walltime"


@pytest.mark.parametrize("memory, size", [
    ("4G", 4 << 30), ("4g", 4 << 30), ("4GB", 4 << 30), ("512M", 512 << 20), ("4096", 4096 << 20),
    ("1T", 1 << 40), ("100K", 100 << 10), ("16gb", 16 << 30),
])
def test_memory_in_slurm_forms(memory, size):
    assert memory_bytes(memory) == size
    assert checked({"memory": memory}, SWEEP) == {"memory": memory}


@pytest.mark.parametrize("memory", ["lots", "4 GB", "4 G", "0", "0G", "-1G", "4.5G", "4GiB", "G", "", "4P",
                                    "4GBB", "4\uff27"])
def test_memory_not_a_slurm_size_is_refused(memory):
    with pytest.raises(ConfigError, match="not a SLURM memory size") as err:
        checked({"memory": memory}, SWEEP)
    assert err.value.key == "slurm.memory"


@pytest.mark.parametrize("key, value", [
    ("partition", "gpu"), ("partition", "gpu,gpu-long"), ("partition", "a100_80g"), ("account", "mech-lab"),
    ("account", "proj.2026+x"), ("interface", "ib0"), ("interface", "enp0s31f6"), ("interface", "lo"),
])
def test_names(key, value):
    assert checked({key: value}, SWEEP) == {key: value}


@pytest.mark.parametrize("key, value", [
    ("partition", ""), ("partition", "gpu long"), ("partition", "gpu,"), ("partition", ",gpu"),
    ("partition", "-gpu"), ("partition", "gpu#x"), ("partition", "gp\u00fc"), ("account", "a,b"),
    ("account", "x'y"), ("interface", "eth0:1"), ("interface", "lo/"),
])
def test_names_outside_the_allowed_characters_are_refused(key, value):
    with pytest.raises(ConfigError, match="letters, digits") as err:
        checked({key: value}, SWEEP)
    assert err.value.key == f"slurm.{key}"


@pytest.mark.parametrize("option", ["--qos=low", "--constraint=avx512", "--constraint=avx512&ib",
                                    "--constraint=[rack1|rack2]", "--exclusive", "--nodelist=node[01-04]",
                                    "--mail-type=END,FAIL", "--signal=B:USR1@60", "--begin=now+60"])
def test_resource_options_from_a_sweep_file(option):
    assert checked({"extra_directives": [option]}, SWEEP) == {"extra_directives": (option,)}


@pytest.mark.parametrize("option, reason", [
    ("-q low", "one sbatch option"), ("--qos low", "one sbatch option"), ("qos=low", "one sbatch option"),
    ("--qos=", "an option's value"), ("--qos=low #x", "an option's value"), ('--comment="a b"', "an option's value"),
    ("--qos=low\\", "an option's value"), ("--qos=a&b", "an option's value"), ("--QOS=low", "one sbatch option"),
    ("--time=forever", "slurm.walltime"), ("--mem=lots", "slurm.memory"), ("--partition=x", "slurm.partition"),
    ("--cpus-per-task=4", "slurm.cores"), ("--output=/home/me/.bashrc", "written by rollsweep"),
    ("--export=ALL,BASH_ENV=/scratch/x.sh", "a sweep file may add only"), ("--chdir=/scratch/x", "may add only"),
    ("--chd=/scratch/x", "may add only"), ("--open-mode=append", "may add only"), ("--mail-user=x@y.org", "only"),
])
def test_options_a_sweep_file_may_not_add(option, reason):
    with pytest.raises(ConfigError) as err:
        checked({"extra_directives": [option]}, SWEEP)
    assert err.value.key == "slurm.extra_directives" and reason in err.value.reason


def test_your_own_file_may_add_any_well_formed_option_but_the_scripts_own(tmp_path):
    user = tmp_path / "slurm.toml"
    user.write_text('[slurm]\nextra_directives = ["--export=ALL,OMP_NUM_THREADS=1", "--chdir=/scratch/me"]\n'
                    'setup = ["module load cuda/12.6 && echo ok"]\npython = "/opt/my env/bin/python"\n')
    resources = resolve({}, {}, SWEEP, user_file=user)
    assert resources.extra_directives == ("--export=ALL,OMP_NUM_THREADS=1", "--chdir=/scratch/me")
    assert resources.setup == ("module load cuda/12.6 && echo ok",)
    script = array_script(resources, STORE, SHARE, JOB, 8, FOLDER)
    assert shlex.split(script.splitlines()[-1])[1] == "/opt/my env/bin/python"
    user.write_text('[slurm]\nextra_directives = ["--time=forever"]\n')
    with pytest.raises(ConfigError, match="slurm.walltime") as err:
        resolve({}, {}, SWEEP, user_file=user)
    assert err.value.file == str(user)


@pytest.mark.parametrize("key", ["setup", "python"])
def test_code_is_not_taken_from_a_sweep_file(key):
    with pytest.raises(ConfigError, match="slurm.toml") as err:
        resolve({key: GOOD[key]}, {}, SWEEP, user_file=NO_USER_FILE)
    assert (err.value.file, err.value.key) == (SWEEP, f"slurm.{key}")


def test_an_empty_setup_in_a_sweep_file_is_nothing_to_refuse():
    assert resolve({"setup": []}, {}, SWEEP, user_file=NO_USER_FILE).setup == ()


def test_resources_made_in_python_are_checked():
    assert Resources(setup=["module load cuda"], python=PYTHON).setup == ("module load cuda",)
    for field, value in [("partition", "gpu\nrm -rf ~"), ("walltime", "forever"), ("memory", "lots"),
                         ("setup", ("module load cuda\nrm -rf ~",)), ("extra_directives", ("--qos=low --wrap=id",)),
                         ("python", "python\n"), ("cores", 0)]:
        with pytest.raises(ConfigError) as err:
            Resources(**{field: value})
        assert (err.value.file, err.value.key) == ("Resources(...)", f"slurm.{field}")


def unchecked(**values) -> Resources:
    """Resources holding values no check saw (set past the frozen dataclass)."""
    resources = Resources(python=PYTHON)
    for field, value in values.items():
        object.__setattr__(resources, field, value)
    return resources


@pytest.mark.parametrize("values", [
    {"partition": "gpu\nrm -rf ~"}, {"partition": "gpu --wrap=id"}, {"memory": "4G\nid"}, {"walltime": "1:00 #"},
    {"setup": ("module load cuda\nrm -rf ~",)}, {"setup": ("a\rb",)}, {"extra_directives": ("--qos=a\nid",)},
    {"extra_directives": ("--qos=a --wrap=id",)}, {"python": "python\nid"}, {"account": 'a"b'},
    {"extra_directives": ("",)}, {"setup": ("a\u2028b",)},
], ids=repr)
def test_render_refuses_what_would_not_stay_in_its_place(values):
    with pytest.raises(ConfigError):
        render("array.sbatch", unchecked(**values), job_name=JOB, last_task=7, store=STORE, share=SHARE,
               log_dir=FOLDER)


@pytest.mark.parametrize("fields, key", [
    ({"store": "/scratch/x\nrm -rf ~"}, "run.out"), ({"log_dir": "/scratch/my results"}, "run.out"),
    ({"log_dir": "/scratch/x#y"}, "run.out"), ({"job_name": "job\nid"}, "study"), ({"last_task": "7 --wrap=id"},
                                                                                  "last_task"),
])
def test_render_refuses_fields_that_would_not_stay_in_their_place(fields, key):
    base = dict(job_name=JOB, last_task=7, store=STORE, share=SHARE, log_dir=FOLDER)
    with pytest.raises(ConfigError) as err:
        render("array.sbatch", Resources(python=PYTHON), **(base | fields))
    assert err.value.key == key and err.value.file == "<job script array.sbatch>"


def test_a_store_path_with_a_space_is_quoted_in_shell_and_refused_on_sbatch_lines():
    store = pathlib.Path("/scratch/my results/x.zarr")
    script = render("array.sbatch", Resources(python=PYTHON), job_name=JOB, last_task=7, store=store,
                    share=SHARE, log_dir=FOLDER)
    assert shlex.split(script.splitlines()[-1])[5] == str(store)
    with pytest.raises(ConfigError, match="#SBATCH line"):
        array_script(Resources(python=PYTHON), store, SHARE, JOB, 8, store / "_rollsweep" / "slurm")


def test_jobqueue_worker_jobs_ask_memory_as_slurm_reads_it(sbatch_accepting):
    pytest.importorskip("dask_jobqueue")
    resources = Resources(memory="4096", python="/opt/my env/python", walltime="1-00:00", partition="gpu")
    with jobqueue_cluster(resources, "/tmp") as cluster:
        script = cluster.job_script()
    assert "#SBATCH --mem=4096\n" in script and "#SBATCH -t 1-00:00\n" in script
    assert shlex.split(script.splitlines()[-1])[:3] == ["/opt/my env/python", "-m", "distributed.cli.dask_worker"]
    with pytest.raises(ConfigError, match="#SBATCH line"):
        jobqueue_cluster(resources, "/tmp/my logs")


# --- any text -------------------------------------------------------------

STRING_KEYS = ("partition", "account", "interface", "memory", "walltime", "python", "extra_directives", "setup")
SBATCH_WORD = re.compile(r'[^\s"#\\]+')


def golden_lines(name: str) -> list[str]:
    return (GOLDEN / f"{name}.sbatch").read_text().split("\n")


def expected_script(golden: str, resources: Resources) -> str:
    """The golden script of default resources with `resources`' values in their
    places: its memory and time lines, the blank lines that stand for the
    directives and the setup, the Python of its last line."""
    solves = golden.startswith("array")
    lines = golden_lines(golden)
    set_line = lines.index("set -euo pipefail")
    directives = resources.directives(gpus=solves) or [""]
    setup = [*resources.setup, *(resources.environment() if solves else [])] or [""]
    assert lines[set_line - 1] == lines[set_line + 1] == ""
    lines = lines[:set_line - 1] + directives + [lines[set_line]] + setup + lines[set_line + 2:]
    lines = [f"#SBATCH --mem={resources.memory}" if line == "#SBATCH --mem=4G" else line for line in lines]
    lines = [f"#SBATCH --time={resources.walltime}" if line == "#SBATCH --time=01:00:00" and solves else line
             for line in lines]
    lines = [line.replace(f"exec {PYTHON} ", f"exec {shlex.quote(resources.python)} ", 1) for line in lines]
    return "\n".join(lines)


def texts():
    """Text of any kind, and text made mostly of the characters that matter here."""
    matters = st.sampled_from(list("aZ09_-.,+:=@%/[]&|*()#\"'\\$`;<>!?~{} \n\r\t\x00\x0b\x85\u2028\u202e"))
    return st.one_of(
        st.text(max_size=30),
        st.text(matters, max_size=16),
        st.from_regex(r"--[a-z]{1,8}(=[a-z0-9&|: ]{0,6})?", fullmatch=True),
        st.from_regex(r"[0-9]{1,3}(-[0-9]{1,2})?(:[0-9]{1,2}){0,2}|[0-9]{1,4}[KMGTkmgt]?[Bb]?", fullmatch=True),
    )


def assert_script_is_the_templates(resources: Resources):
    """The array and check scripts are the golden ones with the values in their
    places (so exactly their lines), each #SBATCH line one sbatch argument, and
    the Python one shell word."""
    for golden, script in [
        ("array_default", array_script(resources, STORE, SHARE, JOB, 8, FOLDER)),
        ("check", check_script(resources, STORE, JOB, "4242", FOLDER)),
    ]:
        assert len(script.splitlines()) == len(golden_lines(golden)) - 1  # one value each: no line more
        assert script == expected_script(golden, resources)
        for line in script.split("\n"):
            if line.startswith("#SBATCH"):
                assert SBATCH_WORD.fullmatch(line.removeprefix("#SBATCH ")), line
        assert shlex.split(script.splitlines()[-1])[1] == resources.python


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(STRING_KEYS), text=texts(), layer=st.sampled_from(["sweep", "command line"]))
def test_any_text_is_refused_or_written_only_where_the_template_puts_it(key, text, layer):
    value = [text] if key in LISTS else text
    table = {key: value}
    try:
        if layer == "sweep":
            resources = resolve(table, {"python": PYTHON} if key != "python" else {}, SWEEP, user_file=NO_USER_FILE)
        else:
            resources = resolve({}, {"python": PYTHON} | table, SWEEP, user_file=NO_USER_FILE)
    except ConfigError as err:
        assert err.key == f"slurm.{key}" and err.file == (SWEEP if layer == "sweep" else COMMAND_LINE)
        return
    assert_script_is_the_templates(resources)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(STRING_KEYS), text=texts())
def test_render_alone_refuses_or_keeps_the_template_lines(key, text):
    """Values no check saw (Resources set past its own check): render's own check
    is enough to keep every value in its place."""
    resources = unchecked(**{key: (text,) if key in LISTS else text})
    try:
        assert_script_is_the_templates(resources)
    except ConfigError as err:
        assert err.file.startswith("<job script ")

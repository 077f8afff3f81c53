"""Job scripts and SLURM settings, without a cluster.

Rendered scripts are compared with committed golden files in tests/golden/; a
missing golden file is a failure (write it on purpose, after reading it).
"""

import pathlib

import pytest

from engine.runner.slurm import Resources, array_script, check_script, resolve
from engine.sweep.config import ConfigError

GOLDEN = pathlib.Path(__file__).parent / "golden"
PYTHON = "/opt/rollsweep/.venv/bin/python"
STORE = pathlib.Path("/scratch/results/pingpong_spin_ratio.zarr")
FOLDER = STORE / "_rollsweep" / "slurm"

RESOURCE_SETS = {
    "array_default": Resources(python=PYTHON),
    "array_gpu": Resources(partition="gpu", gpus=1, cores=8, memory="32G", walltime="04:00:00", tasks=4,
                           setup=("module load cuda/12.6",), python=PYTHON),
    "array_account_extra": Resources(partition="long", account="mech-lab", memory="16G", walltime="2-00:00:00",
                                     extra_directives=("--qos=low", "--constraint=avx512"), tasks=16,
                                     python=PYTHON),
}


def golden(name: str) -> str:
    path = GOLDEN / f"{name}.sbatch"
    assert path.exists(), f"golden file missing: {path} (render it, read it, commit it)"
    return path.read_text()


@pytest.mark.parametrize("name", sorted(RESOURCE_SETS))
def test_array_script_matches_golden(name):
    resources = RESOURCE_SETS[name]
    script = array_script(resources, STORE, FOLDER / "share-20260101T000000-1.json", "rollsweep-pingpong-0123abcd",
                          min(resources.tasks, 10), FOLDER)
    assert script == golden(name)


def test_check_script_matches_golden():
    script = check_script(RESOURCE_SETS["array_default"], STORE, "rollsweep-pingpong-0123abcd", "4242", FOLDER)
    assert script == golden("check")


def test_rendering_is_pure():
    r = RESOURCE_SETS["array_gpu"]
    first = array_script(r, STORE, "s.json", "job", 3, FOLDER)
    assert first == array_script(r, STORE, "s.json", "job", 3, FOLDER)
    assert r == RESOURCE_SETS["array_gpu"]  # frozen, untouched


def test_settings_resolve_keyword_then_sweep_then_user_file(tmp_path):
    user = tmp_path / "slurm.toml"
    user.write_text('[slurm]\npartition = "user-part"\naccount = "user-acct"\nmemory = "8G"\n')
    resources = resolve({"partition": "sweep-part", "memory": "6G"}, {"memory": "2G", "cores": None}, "s.toml",
                        user_file=user)
    assert (resources.partition, resources.account, resources.memory) == ("sweep-part", "user-acct", "2G")
    assert resources.cores == 1 and resources.walltime == "01:00:00"  # defaults


@pytest.mark.parametrize("table, key, reason", [
    ({"queue": "x"}, "slurm.queue", "unknown key"),
    ({"cores": 0}, "slurm.cores", "an integer from 1 to 1,024"),
    ({"extra_directives": "--qos=low"}, "slurm.extra_directives", "list of strings"),
    ({"memory": 4}, "slurm.memory", "must be a string"),
    ({"memory": "lots"}, "slurm.memory", "not a SLURM memory size"),
    ({"walltime": "forever"}, "slurm.walltime", "not a SLURM time limit"),
    ({"partition": "gpu\nrm -rf $HOME/important"}, "slurm.partition", "not a partition name"),
    ({"setup": ["module load cuda"]}, "slurm.setup", "not taken from a sweep file"),
])
def test_bad_slurm_settings_name_the_key(tmp_path, table, key, reason):
    with pytest.raises(ConfigError) as err:
        resolve(table, {}, "sweep.toml", user_file=tmp_path / "none.toml")
    assert err.value.key == key and reason in err.value.reason and err.value.file == "sweep.toml"


# Long options of sbatch (SLURM 22.05 - 24.11 man pages) that job scripts may carry.
SBATCH_OPTIONS = {
    "account", "acctg-freq", "array", "batch", "bb", "begin", "chdir", "clusters", "comment", "constraint",
    "container", "contiguous", "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task",
    "deadline", "delay-boot", "dependency", "distribution", "error", "exclude", "exclusive", "export",
    "get-user-env", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task",
    "gres", "gres-flags", "hint", "hold", "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type",
    "mail-user", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "nice", "no-requeue", "nodefile",
    "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket",
    "open-mode", "output", "overcommit", "oversubscribe", "partition", "power", "priority", "profile",
    "propagate", "qos", "reboot", "requeue", "reservation", "signal", "sockets-per-node", "spread-job",
    "switches", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid", "wait", "wait-all-nodes",
    "wckey",
}


SHORT = {"A": "account", "c": "cpus-per-task", "e": "error", "J": "job-name", "n": "ntasks", "N": "nodes",
         "o": "output", "p": "partition", "t": "time"}


def sbatch_options(script: str) -> list[tuple[str, str]]:
    """(option, value) of each #SBATCH line, checking that sbatch reads them all:
    it stops at the first line that is neither blank nor a comment."""
    options, body_started = [], False
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            assert not body_started, f"#SBATCH after the first command is ignored by sbatch: {line}"
            option = line.removeprefix("#SBATCH").strip()
            if option.startswith("--"):
                assert "=" in option, f"not a --long=value option: {line}"
                name, value = option[2:].split("=", 1)
            else:
                flag, _, value = option.partition(" ")
                name = SHORT[flag.removeprefix("-")]
            options.append((name, value))
        elif line.strip() and not line.startswith("#"):
            body_started = True
    return options


def rendered_scripts():
    for name, r in sorted(RESOURCE_SETS.items()):
        yield name, r, array_script(r, STORE, FOLDER / "share.json", "job", min(r.tasks, 10), FOLDER)
        yield f"{name}-check", r, check_script(r, STORE, "job", "4242", FOLDER)


@pytest.mark.parametrize("name, resources, script", [pytest.param(*s, id=s[0]) for s in rendered_scripts()])
def test_rendered_scripts_follow_sbatch_rules(name, resources, script):
    options = sbatch_options(script)
    names = [n for n, _ in options]
    assert options and set(names) <= SBATCH_OPTIONS, set(names) - SBATCH_OPTIONS
    assert len(names) == len(set(names)), f"an option given twice: {names}"
    # The per-task GPU form binds GPUs to tasks; a job with no --ntasks gets a site's
    # default task layout, which some sites reject or misbind.
    assert "gpus-per-task" not in names or "ntasks" in names
    solves = not name.endswith("-check")
    gpus = [v for n, v in options if n == "gres" and v.startswith("gpu")]
    assert gpus == ([f"gpu:{resources.gpus}"] if resources.gpus and solves else [])
    assert ("ROLLSWEEP_REQUIRE_GPU=1" in script) == bool(resources.gpus and solves)


def test_jobqueue_worker_jobs_ask_gpus_portably(sbatch_accepting):
    pytest.importorskip("dask_jobqueue")
    from engine.runner.slurm import jobqueue_cluster

    r = RESOURCE_SETS["array_gpu"]
    with jobqueue_cluster(r, "/tmp") as cluster:
        script = cluster.job_script()
    names = [n for n, _ in sbatch_options(script)]
    assert set(names) <= SBATCH_OPTIONS, set(names) - SBATCH_OPTIONS
    assert "gres" in names and "gpus-per-task" not in names
    assert "export ROLLSWEEP_REQUIRE_GPU=1" in script

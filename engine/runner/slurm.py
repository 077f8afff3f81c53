"""SLURM: resources, job scripts, job-array submission, and the dask-jobqueue cluster.

Settings resolve keyword (command line) > the sweep's [slurm] table > the user
file ~/.config/rollsweep/slurm.toml > defaults. Job scripts are text rendered
by a pure function from a frozen `Resources` and the templates in slurm/
(installed as the package engine.slurm_templates); every value is checked
before it is written (engine.sweep.resources) and again as it is (`render`).
"""

import importlib.resources
import json
import os
import pathlib
import re
import shlex
import shutil
import string
import subprocess
import time
import tomllib

from engine.errors import ConfigError, SchedulerError
from engine.sweep.resources import FIELDS, Resources, checked, memory_bytes, shown, unprintable

_CHECKOUT = pathlib.Path(__file__).resolve().parents[2]  # engine/runner/slurm.py -> the checkout
_CONFIG_HOME = pathlib.Path(os.environ.get("XDG_CONFIG_HOME", pathlib.Path.home() / ".config"))
USER_FILE = _CONFIG_HOME / "rollsweep" / "slurm.toml"


def resolve(sweep_table: dict, keywords: dict, sweep_file: str, user_file: pathlib.Path = USER_FILE) -> Resources:
    """The settings of a run's jobs, each layer checked as what it is: the user's
    own file and the keywords (command line, Python) may carry code (`setup`,
    `python`); the sweep's table, which others may have written, may not."""
    layers = {}
    if user_file.exists():
        try:
            table = tomllib.loads(user_file.read_text()).get("slurm", {})
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(user_file, "<syntax>", f"not valid TOML: {err}") from None
        layers |= checked(table, str(user_file), shared=False)
    layers |= checked(sweep_table, sweep_file, shared=True)
    layers |= checked({k: v for k, v in keywords.items() if v is not None}, "<command line>", shared=False)
    return Resources(**layers)


def template_text(name: str) -> str:
    """A job template. From a source checkout (engine/ beside slurm/, as on
    PYTHONPATH or in another worktree) its own slurm/ folder, which an editable
    install elsewhere must not shadow; otherwise the installed package's copy."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "slurm" / name).is_file():
        return (_CHECKOUT / "slurm" / name).read_text()
    return importlib.resources.files("engine.slurm_templates").joinpath(name).read_text()


# Fields a template writes in shell code, shell-quoted there. Every other field is
# written on an #SBATCH line, where shell quoting would be read literally (sbatch
# splits the line at whitespace, groups with double quotes and stops at "#"), so
# there a value must be one plain word: `Resources` checks its own values that
# strictly, and render checks every value again.
_SHELL_FIELDS = ("python", "store", "share")
# Placeholders that stand alone on their line and become one line per entry (a
# blank line when there is none).
_BLOCKS = ("directives", "setup")
_SBATCH_WORD_BREAKERS = re.compile(r'[\s"#\\]')
# The key a user sets for a field, named when a value cannot be written.
_FIELD_KEYS = {"store": "run.out", "share": "run.out", "log_dir": "run.out", "job_name": "study",
               "directives": "slurm.extra_directives", "setup": "slurm.setup"}


def render(template: str, resources: Resources, **fields) -> str:
    """Job script text: a pure function of the template, resources and fields.
    Raises ConfigError when a value would not stay where the template puts it
    (a second line, a second #SBATCH argument): checked here as well as in
    `Resources`, so that nothing reaches a script unchecked."""
    solves = template == "array.sbatch"
    blocks = {"directives": resources.directives(gpus=solves),
              "setup": [*resources.setup, *(resources.environment() if solves else [])]}
    fields = {"cores": resources.cores, "memory": resources.memory, "walltime": resources.walltime,
              "python": resources.python} | fields
    origin = f"<job script {template}>"
    for name, value in fields.items():
        (_check_one_line if name in _SHELL_FIELDS else _check_sbatch_word)(origin, name, str(value))
    for line in blocks["directives"]:
        _check_sbatch_word(origin, "directives", line.removeprefix("#SBATCH "))
    for line in blocks["setup"]:
        _check_one_line(origin, "setup", line)
    text = template_text(template)
    values = {name: shlex.quote(str(value)) if name in _SHELL_FIELDS else value for name, value in fields.items()}
    script = string.Template(text).substitute(values | {name: "\n".join(blocks[name]) for name in _BLOCKS})
    _check_line_count(origin, text, script, blocks)
    return script


def _field_key(name: str) -> str:
    return _FIELD_KEYS.get(name, f"slurm.{name}" if name in FIELDS else name)


def _check_one_line(origin: str, name: str, value: str) -> None:
    """A value written shell-quoted, or a setup line (code by design): one line."""
    if unprintable(value):
        raise ConfigError(origin, _field_key(name), f"{shown(value)} holds a control character; a job script "
                                                    "takes one line per value")


def sbatch_word(value: str) -> bool:
    """Whether `value` is read by sbatch as one argument, as written, on an
    #SBATCH line: not empty, no whitespace, double quote, backslash or "#"
    (which group, escape or end the line's arguments), no control character."""
    return bool(value) and not unprintable(value) and not _SBATCH_WORD_BREAKERS.search(value)


def _check_sbatch_word(origin: str, name: str, value: str) -> None:
    if not sbatch_word(value):
        raise ConfigError(origin, _field_key(name), f"{shown(value)} cannot be written on an #SBATCH line: it must be "
                                                    "one word, without whitespace, quotes, '#', backslashes or "
                                                    "control characters")


def _check_line_count(origin: str, text: str, script: str, blocks: dict) -> None:
    """The script has the template's lines, its blocks' placeholder lines each
    made one line per entry (one blank line when empty), and nothing more."""
    added = sum(max(1, len(lines)) - 1 for lines in blocks.values())
    # Both counts: splitlines also breaks at "\r", "\v", "\x85", U+2028 ..., bash only at "\n".
    if (len(script.splitlines()), script.count("\n")) != (len(text.splitlines()) + added, text.count("\n") + added):
        raise ConfigError(origin, "<lines>", f"{len(script.splitlines())} lines rendered where the template makes "
                                             f"{len(text.splitlines()) + added}: a value holds a line break")


def array_script(resources: Resources, store, share, job_name: str, tasks: int, log_dir) -> str:
    return render("array.sbatch", resources, job_name=job_name, last_task=tasks - 1, store=store, share=share,
                  log_dir=log_dir)


def check_script(resources: Resources, store, job_name: str, array_job: str, log_dir) -> str:
    return render("check.sbatch", resources, job_name=job_name, array_job=array_job, store=store, log_dir=log_dir)


def sbatch(script: str, cwd, *options: str) -> str:
    """Submit a script text; returns the job id (`--test-only`: the script only
    checked against the cluster, nothing queued, and no id)."""
    if shutil.which("sbatch") is None:
        raise SchedulerError("sbatch not found: SLURM's commands are not on this machine's PATH; "
                             "`rollsweep submit --dry-run` prints the job script")
    out = subprocess.run(["sbatch", "--parsable", *options], input=script, text=True, capture_output=True, cwd=cwd)
    if out.returncode != 0:
        said = " ".join(out.stderr.split()) or f"exit code {out.returncode}"  # its lines as one
        raise SchedulerError(f"sbatch refused the job: {said}")
    return out.stdout.strip().split(";")[0]


def write_share(folder: pathlib.Path, pending, tasks: int) -> pathlib.Path:
    """The pending shards at submit time, split round-robin over the tasks: every
    task reads the same fixed list, so no shard is missed or done twice."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"share-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
    shares = [[[kind, shard] for kind, shard, _ in pending[i::tasks]] for i in range(tasks)]
    path.write_text(json.dumps(shares))
    return path


def read_share(path, task: int) -> list[tuple[str, int]]:
    """Task `task`'s shards of the share file `path`."""
    try:
        shares = json.loads(pathlib.Path(path).read_text())
    except OSError as err:
        raise ConfigError("<command line>", "--share", f"cannot read {path}: {err.strerror}") from None
    except ValueError:
        raise ConfigError("<command line>", "--share",
                          f"{path} is not a share file written by rollsweep submit") from None
    if not 0 <= task < len(shares):
        raise ConfigError("<command line>", "--task", f"{task} is not a task of {path} (0 to {len(shares) - 1})")
    return [(kind, shard) for kind, shard in shares[task]]


def jobqueue_cluster(resources: Resources, log_dir):
    """Worker jobs whose logs go to `log_dir` (the store's, like the job array's),
    not to slurm-<id>.out files in the directory the run was started from.
    dask-jobqueue writes its values bare: on #SBATCH lines (`Resources` checked
    those, and log_dir is checked here) and in the worker's command line, where
    the Python's path is written shell-quoted."""
    from dask_jobqueue import SLURMCluster

    _check_sbatch_word("<dask-jobqueue worker job>", "log_dir", str(log_dir))
    cluster = SLURMCluster(
        queue=resources.partition,
        account=resources.account,
        cores=resources.cores,
        processes=1,  # one worker process per job: one JAX runtime (one GPU) each
        # dask reads "4G" as 4e9 bytes and "4096" as bytes; SLURM as 4 GiB and 4096 MiB.
        # The worker's limit is given in bytes as SLURM reads the size, and the job
        # asks for the size as written.
        memory=str(memory_bytes(resources.memory)),
        job_mem=resources.memory,
        walltime=resources.walltime,
        interface=resources.interface,
        python=shlex.quote(resources.python),
        job_extra_directives=[*resources.extra_directives, *resources.gpu_options()],
        job_script_prologue=[*resources.setup, *resources.environment()],
        worker_extra_args=["--nthreads", "1"],
        log_directory=str(log_dir),
    )
    # A worker job the cluster would refuse (or no controller answering) is one
    # line here: dask-jobqueue would retry its submission forever, a traceback each.
    try:
        sbatch(cluster.job_script(), os.getcwd(), "--test-only")
    except SchedulerError:
        cluster.close()
        raise
    return cluster

"""SLURM: resources, job scripts, job-array submission, and the dask-jobqueue cluster.

Settings resolve keyword (command line) > the sweep's [slurm] table > the user
file ~/.config/rollsweep/slurm.toml > defaults. Job scripts are text rendered
by a pure function from a frozen `Resources` and the templates in slurm/
(installed as the package engine.slurm_templates).
"""

import importlib.resources
import json
import os
import pathlib
import shlex
import string
import subprocess
import time
import tomllib

from engine.errors import ConfigError
from engine.sweep.resources import Resources, checked

_CHECKOUT = pathlib.Path(__file__).resolve().parents[2]  # engine/runner/slurm.py -> the checkout
_CONFIG_HOME = pathlib.Path(os.environ.get("XDG_CONFIG_HOME", pathlib.Path.home() / ".config"))
USER_FILE = _CONFIG_HOME / "rollsweep" / "slurm.toml"


def resolve(sweep_table: dict, keywords: dict, sweep_file: str, user_file: pathlib.Path = USER_FILE) -> Resources:
    layers = {}
    if user_file.exists():
        try:
            layers |= checked(tomllib.loads(user_file.read_text()).get("slurm", {}), str(user_file))
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(user_file, "<syntax>", f"not valid TOML: {err}") from None
    layers |= checked(sweep_table, sweep_file)
    layers |= checked({k: v for k, v in keywords.items() if v is not None}, "<command line>")
    return Resources(**layers)


def template_text(name: str) -> str:
    """A job template. From a source checkout (engine/ beside slurm/, as on
    PYTHONPATH or in another worktree) its own slurm/ folder, which an editable
    install elsewhere must not shadow; otherwise the installed package's copy."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "slurm" / name).is_file():
        return (_CHECKOUT / "slurm" / name).read_text()
    return importlib.resources.files("engine.slurm_templates").joinpath(name).read_text()


def render(template: str, resources: Resources, **fields) -> str:
    """Job script text: a pure function of the template, resources and fields."""
    text = template_text(template)
    solves = template == "array.sbatch"
    values = {
        "cores": resources.cores,
        "memory": resources.memory,
        "walltime": resources.walltime,
        "directives": "\n".join(resources.directives(gpus=solves)),
        "setup": "\n".join(list(resources.setup) + (resources.environment() if solves else [])),
        "python": shlex.quote(resources.python),
    } | {k: shlex.quote(str(v)) if k in ("store", "share", "log_dir") else v for k, v in fields.items()}
    return string.Template(text).substitute(values).replace("\n\n\n", "\n\n")


def array_script(resources: Resources, store, share, job_name: str, tasks: int, log_dir) -> str:
    return render("array.sbatch", resources, job_name=job_name, last_task=tasks - 1, store=store, share=share,
                  log_dir=log_dir)


def check_script(resources: Resources, store, job_name: str, array_job: str, log_dir) -> str:
    return render("check.sbatch", resources, job_name=job_name, array_job=array_job, store=store, log_dir=log_dir)


def sbatch(script: str, cwd) -> str:
    """Submit a script text; returns the job id."""
    out = subprocess.run(["sbatch", "--parsable"], input=script, text=True, capture_output=True, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"sbatch failed: {out.stderr.strip()}")
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
    return [(kind, shard) for kind, shard in json.loads(pathlib.Path(path).read_text())[task]]


def jobqueue_cluster(resources: Resources, log_dir):
    """Worker jobs whose logs go to `log_dir` (the store's, like the job array's),
    not to slurm-<id>.out files in the directory the run was started from."""
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(
        queue=resources.partition,
        account=resources.account,
        cores=resources.cores,
        processes=1,  # one worker process per job: one JAX runtime (one GPU) each
        memory=resources.memory,
        walltime=resources.walltime,
        interface=resources.interface,
        python=resources.python,
        job_extra_directives=[*resources.extra_directives, *resources.gpu_options()],
        job_script_prologue=[*resources.setup, *resources.environment()],
        worker_extra_args=["--nthreads", "1"],
        log_directory=str(log_dir),
    )

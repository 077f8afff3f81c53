"""What one SLURM job asks for (`Resources`), and the check of a `[slurm]`
table: the sweep layer checks a sweep's table when it reads the sweep; the run
layer (engine.runner.slurm) resolves the layers and submits."""

import dataclasses
import sys

from engine._jax_setup import REQUIRE_GPU
from engine.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one SLURM job (an array task, or one dask worker) asks for."""

    partition: str | None = None
    account: str | None = None
    cores: int = 1
    memory: str = "4G"
    walltime: str = "01:00:00"
    gpus: int = 0  # one dask worker / array task per GPU
    tasks: int = 8  # array tasks (submit) or worker jobs (dask executor)
    extra_directives: tuple[str, ...] = ()  # further "#SBATCH ..." lines, e.g. "--qos=short"
    setup: tuple[str, ...] = ()  # shell lines run first, e.g. "module load cuda"
    interface: str | None = None  # network interface of dask workers ("lo" on a single machine)
    python: str = sys.executable

    def gpu_options(self) -> list[str]:
        """The GPUs of one job (array task or worker job), which runs one task: a
        generic resource per node. `--gpus-per-task` without `--ntasks` is
        rejected or misbound by some sites' SLURM."""
        return [f"--gres=gpu:{self.gpus}"] if self.gpus else []

    def directives(self, gpus: bool = True) -> list[str]:
        """#SBATCH lines beyond the template's; `gpus=False` for jobs that solve
        nothing (the completion check)."""
        options = [f"--partition={self.partition}"] if self.partition else []
        options += [f"--account={self.account}"] if self.account else []
        options += self.gpu_options() if gpus else []
        return [f"#SBATCH {option}" for option in options + list(self.extra_directives)]

    def environment(self) -> list[str]:
        """Shell lines for a job that solves: a job given GPUs fails its first
        shard with one line when JAX sees none (rather than solving on the CPU)."""
        return [f"export {REQUIRE_GPU}=1"] if self.gpus else []


FIELDS = {f.name: f for f in dataclasses.fields(Resources)}


def checked(table: dict, origin: str) -> dict:
    """Validate one layer of settings, naming where a bad key came from."""
    values = {}
    for key, value in table.items():
        if key not in FIELDS:
            raise ConfigError(origin, f"slurm.{key}", f"unknown key (expected one of {sorted(FIELDS)})")
        kind = FIELDS[key].type
        if key in ("extra_directives", "setup"):
            if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
                raise ConfigError(origin, f"slurm.{key}", "must be a list of strings")
            value = tuple(value)
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "gpus" else 1):
                raise ConfigError(origin, f"slurm.{key}", f"must be a positive integer, got {value!r}")
        elif not isinstance(value, str):
            raise ConfigError(origin, f"slurm.{key}", f"must be a string, got {value!r}")
        values[key] = value
    return values

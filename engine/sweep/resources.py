"""What one SLURM job asks for (`Resources`), and the check of a `[slurm]`
table: the sweep layer checks a sweep's table when it reads the sweep; the run
layer (engine.runner.slurm) resolves the layers and submits.

Every value is written into a job script, so every value is checked for what
it is (a time limit, a memory size, a name, one sbatch option, one shell line)
before it gets there, by one function (`checked`) whichever way it came: a
sweep file, the user's own file, the command line, or a `Resources` made in
Python. A sweep file is something people share: it may not carry what runs as
code in a job (`setup`, `python`), nor sbatch options that choose a job's
files, directory or environment; those come from the user's own file
(~/.config/rollsweep/slurm.toml), the command line or Python.
"""

import dataclasses
import re
import sys
import unicodedata

from engine._jax_setup import REQUIRE_GPU
from engine.errors import ConfigError
from engine.limits import MAX_GPUS, MAX_SHARDS, MAX_WORKERS

USER_FILE_SHOWN = "~/.config/rollsweep/slurm.toml"  # where a message sends what a sweep file may not carry
PYTHON_ORIGIN = "Resources(...)"  # the origin named for a value made in Python


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one SLURM job (an array task, or one dask worker) asks for. Made in
    Python it is checked as a layer of the user's own settings is."""

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

    def __post_init__(self):
        values = checked({name: getattr(self, name) for name in FIELDS}, PYTHON_ORIGIN, shared=False)
        for name, value in values.items():  # lists made tuples: a frozen value
            object.__setattr__(self, name, value)

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


def checked(table: dict, origin: str, shared: bool = True) -> dict:
    """Validate one layer of settings, naming where a bad value came from.
    `shared`: the layer is a sweep file (the default, as the sweep layer calls
    this), which may not carry code (`setup`, `python`) nor options that choose
    a job's files or environment; False for the user's own file, the command
    line and Python."""
    layer = _Layer(str(origin), shared)
    values = {}
    for key, value in table.items():
        if key not in FIELDS:
            layer.refuse(key, f"unknown key (expected one of {sorted(FIELDS)})")
        values[key] = _CHECKS[key](key, value, layer)
    return values


@dataclasses.dataclass(frozen=True)
class _Layer:
    origin: str
    shared: bool

    def refuse(self, key: str, reason: str):
        raise ConfigError(self.origin, f"slurm.{key}", reason)


def shown(value) -> str:
    """A value in a one-line message: its repr (a newline shows as \\n), cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unprintable(text: str) -> bool:
    """Whether `text` holds a control, format, private or unassigned character, or
    a line or paragraph separator: anything that ends a line (for bash "\\n"; for
    editors and readers also "\\r", "\\v", "\\x85", U+2028 ...), or hides what a
    line says (a bidirectional override)."""
    return any(unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") for c in text)


# --- numbers ---------------------------------------------------------------

# The ranges the command line's --cores, --gpus and --tasks have (engine.limits).
_COUNT_RANGES = {"cores": (1, MAX_WORKERS), "gpus": (0, MAX_GPUS), "tasks": (1, MAX_SHARDS)}


def _count(key, value, layer):
    least, most = _COUNT_RANGES[key]
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        layer.refuse(key, f"must be an integer from {least} to {most:,}, got {shown(value)}")
    return value


# --- strings ---------------------------------------------------------------

def _text(key, value, layer) -> str:
    if not isinstance(value, str):
        layer.refuse(key, f"must be a string, got {shown(value)}")
    return value


# A field after the first of a time limit is one or two digits; the first is
# bounded (nine digits) only to keep absurd lengths out.
_LEADING_FIELD = re.compile(r"[0-9]{1,9}")
_CLOCK_FIELD = re.compile(r"[0-9]{1,2}")


def duration_seconds(text: str) -> int | None:
    """Seconds of a SLURM time limit as sbatch --time takes it: "MM", "MM:SS",
    "HH:MM:SS", "D-HH", "D-HH:MM" or "D-HH:MM:SS"; None when `text` is none of
    these. Minutes and seconds after the first field are below 60, hours after
    days below 24 (a first field is not bounded: "90" is 90 minutes, "36:00:00"
    36 hours, as SLURM reads them). SLURM's words ("UNLIMITED") are not taken."""
    days, dash, clock = text.partition("-")
    fields = clock.split(":") if dash else text.split(":")
    leading = days if dash else fields[0]
    rest = fields if dash else fields[1:]
    if len(fields) > 3 or not _LEADING_FIELD.fullmatch(leading) or not all(map(_CLOCK_FIELD.fullmatch, rest)):
        return None
    numbers = [int(field) for field in rest]
    if dash:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = numbers + [0] * (3 - len(numbers))
        if hours >= 24 or minutes >= 60 or seconds >= 60:
            return None
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if any(n >= 60 for n in numbers):  # MM[:SS] or HH:MM:SS
        return None
    first = int(leading)
    if len(fields) == 3:  # HH:MM:SS
        return (first * 60 + numbers[0]) * 60 + numbers[1]
    return first * 60 + sum(numbers)  # MM or MM:SS


def _walltime(key, value, layer) -> str:
    # Zero is refused too: to SLURM it means "no limit", not a duration.
    if not duration_seconds(_text(key, value, layer)):
        layer.refuse(key, f"{shown(value)} is not a SLURM time limit above zero: MM, MM:SS, HH:MM:SS, D-HH, "
                          "D-HH:MM or D-HH:MM:SS (minutes and seconds below 60, hours below 24 after days)")
    return value


# As sbatch --mem reads a size: a whole number, then K, M, G or T in either case
# and an optional B; megabytes without a unit (SLURM's str_to_mbytes).
_MEMORY = re.compile(r"([0-9]{1,15})([KMGTkmgt][Bb]?)?")


def memory_bytes(text: str) -> int | None:
    """Bytes of a SLURM memory size ("4G", "512M", "4096": megabytes); None when
    `text` is not one."""
    match = _MEMORY.fullmatch(text)
    if match is None:
        return None
    unit = (match[2] or "M")[0].upper()
    return int(match[1]) * 1024 ** ("KMGT".index(unit) + 1)


def _memory(key, value, layer) -> str:
    # Zero is refused: to SLURM --mem=0 means "all of a node's memory".
    if not memory_bytes(_text(key, value, layer)):
        layer.refuse(key, f"{shown(value)} is not a SLURM memory size above zero: a whole number with an "
                          "optional unit K, M, G or T and no spaces (megabytes without one), e.g. 4G")
    return value


# SLURM documents no character set for a partition or account name (slurm.conf's
# PartitionName, sacctmgr's accounts) and Linux allows nearly anything in an
# interface name; the names sites use are letters, digits and "_", ".", "-" (some
# "+"), and sbatch --partition takes a comma-separated list. Nothing more is taken:
# these values are written bare on #SBATCH lines, which sbatch splits at whitespace
# and cuts at "#" and where shell quotes would be read literally, and into the
# dask worker's command line. This check is what keeps each of them one word. A
# first character that is a letter, digit or "_" keeps a name from reading as an
# option after dask-jobqueue's "-p" and "-A".
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"
_NAMES = {
    "partition": (re.compile(rf"{_NAME}(?:,{_NAME})*"), "a partition name, or several separated by commas"),
    "account": (re.compile(_NAME), "an account name"),
    "interface": (re.compile(_NAME), "a network interface name"),
}


def _name(key, value, layer):
    if value is None and FIELDS[key].default is None:  # unset: SLURM's default (no line written)
        return None
    pattern, what = _NAMES[key]
    if not pattern.fullmatch(_text(key, value, layer)):
        layer.refuse(key, f"{shown(value)} is not {what}: letters, digits, '_', '.', '+' and '-', "
                          "starting with a letter, digit or '_'")
    return value


def _python(key, value, layer) -> str:
    # The program every job runs: from a shared sweep file that is someone else's code.
    if layer.shared:
        layer.refuse(key, f"the Python a job runs is not taken from a sweep file; set it in your own "
                          f"{USER_FILE_SHOWN} ([slurm] python) or from Python")
    if not _text(key, value, layer) or unprintable(value):
        layer.refuse(key, f"must be the path of a Python, without control characters, got {shown(value)}")
    return value  # any other character: it is written shell-quoted


# --- lists -----------------------------------------------------------------

def _strings(key, value, layer) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        layer.refuse(key, "must be a list of strings")
    return tuple(value)


def _setup(key, value, layer) -> tuple[str, ...]:
    """Shell lines are code by design ("module load cuda"): taken only from the
    user's own file, the command line layer and Python, never from a sweep file,
    which others write. Each must still be one line."""
    lines = _strings(key, value, layer)
    if lines and layer.shared:
        layer.refuse(key, f"shell lines run in every job are not taken from a sweep file; put them in your own "
                          f"{USER_FILE_SHOWN} ([slurm] setup) or pass them from Python")
    for line in lines:
        if unprintable(line):
            layer.refuse(key, f"each entry must be one shell line without control characters, got {shown(line)}")
    return lines


# One sbatch option: --name or --name=value, one word on its #SBATCH line. sbatch
# reads an #SBATCH line as arguments split at whitespace (double quotes group,
# a backslash escapes) up to an unquoted "#"; none of those may appear, so what is
# written is exactly one option. The value's characters are those options take
# (lists, node ranges, counts, times, addresses); no shell metacharacter is needed,
# except SLURM's feature operators in a constraint ("avx512&ib", "[a|b]", "a*2"):
# harmless on an #SBATCH line, which bash reads as a comment.
_OPTION = re.compile(r"--([a-z][a-z0-9_-]*)(?:=(.*))?", re.DOTALL)
_OPTION_VALUE = re.compile(r"[A-Za-z0-9_.,:=@%/+\[\]-]+")
_CONSTRAINT_VALUE = re.compile(r"[A-Za-z0-9_.,:=@%/+\[\]&|*()-]+")
_CONSTRAINT_OPTIONS = ("constraint", "cluster-constraint")

# Options the job scripts write themselves: another line would override the
# checked value silently (sbatch keeps the last), so each is refused, naming the
# key that sets it.
_OWNED_OPTIONS = {
    "partition": "set it with slurm.partition", "account": "set it with slurm.account",
    "cpus-per-task": "set it with slurm.cores", "mem": "set it with slurm.memory",
    "time": "set it with slurm.walltime", "job-name": "rollsweep names the jobs",
    "array": "rollsweep sizes the array (slurm.tasks)", "output": "rollsweep writes the logs beside the store",
    "dependency": "rollsweep chains the check job",
}

# What a sweep file may add: requests for resources and scheduling. Options that
# choose a job's files, directory, environment or identity could make someone
# else's sweep run code or write files as you (--export=BASH_ENV=FILE is read by
# the job's bash; --chdir decides what `python -m` imports first; --output and
# --open-mode write where they say); they come from your own file or Python. Names
# match whole: sbatch takes any unambiguous prefix of an option (--chd is
# --chdir), so a name not listed is refused, abbreviations included.
SHARED_OPTIONS = frozenset({
    "acctg-freq", "begin", "cluster-constraint", "comment", "constraint", "contiguous", "core-spec",
    "cores-per-socket", "cpu-freq", "cpus-per-gpu", "deadline", "delay-boot", "distribution", "exclude",
    "exclusive", "gpu-bind", "gpu-freq", "gpus-per-node", "gres", "gres-flags", "hint", "hold",
    "kill-on-invalid-dep", "licenses", "mail-type", "mem-bind", "mem-per-gpu", "mincpus", "nice", "no-requeue",
    "nodelist", "nodes", "ntasks", "ntasks-per-node", "oversubscribe", "profile", "qos", "requeue",
    "reservation", "signal", "sockets-per-node", "spread-job", "switches", "thread-spec", "threads-per-core",
    "time-min", "tmp", "wckey",
})


def _directive(key, option: str, layer) -> str:
    match = _OPTION.fullmatch(option)
    if match is None or unprintable(option):
        layer.refuse(key, f"each entry must be one sbatch option, --name or --name=value, got {shown(option)}")
    name, value = match[1], match[2]
    if name in _OWNED_OPTIONS:
        layer.refuse(key, f"{shown(option)}: --{name} is written by rollsweep; {_OWNED_OPTIONS[name]}")
    if layer.shared and name not in SHARED_OPTIONS:
        layer.refuse(key, f"{shown(option)}: a sweep file may add only resource and scheduling options "
                          f"(--qos, --constraint, --exclusive ...), not --{name}; put it in your own {USER_FILE_SHOWN}")
    allowed = _CONSTRAINT_VALUE if name in _CONSTRAINT_OPTIONS else _OPTION_VALUE
    if value is not None and not allowed.fullmatch(value):
        layer.refuse(key, f"{shown(option)}: an option's value is letters, digits and _ . , : = @ % / + [ ] - "
                          "(a constraint's also & | * ( )), without spaces or quotes")
    return option


def _directives(key, value, layer) -> tuple[str, ...]:
    return tuple(_directive(key, option, layer) for option in _strings(key, value, layer))


_CHECKS = {
    "partition": _name, "account": _name, "interface": _name,
    "cores": _count, "gpus": _count, "tasks": _count,
    "memory": _memory, "walltime": _walltime, "python": _python,
    "extra_directives": _directives, "setup": _setup,
}
assert set(_CHECKS) == set(FIELDS), "every field of Resources is checked"

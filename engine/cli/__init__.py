"""The `rollsweep` command (engine.cli.commands) and the demo it runs.

Ctrl-C is taken from the package's first line (stops.early): the command's
modules are imported after it, on first use of `entry`, `main` or `program`."""

from engine.cli import stops as _stops

_stops.early()

_COMMANDS = ("entry", "main", "program")


def __getattr__(name: str):
    if name not in _COMMANDS:
        raise AttributeError(f"module 'engine.cli' has no attribute {name!r}")
    from engine.cli import commands

    return getattr(commands, name)


def __dir__():
    return sorted(set(globals()) | set(_COMMANDS))

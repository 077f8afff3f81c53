"""`python -m engine.cli`: the `rollsweep` command (what job scripts run)."""

from engine.cli.commands import program

program()

"""The `rollsweep` command (engine.cli.commands) and the demo it runs."""

from engine.cli.commands import entry as entry
from engine.cli.commands import main as main
from engine.cli.commands import program as program

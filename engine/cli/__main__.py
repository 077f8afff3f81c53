"""`python -m engine.cli`: the `rollsweep` command (what job scripts run)."""

import sys

from engine.cli.commands import entry

sys.exit(entry())

"""The errors several layers raise; imports nothing of the engine's."""

# Ends the reason of a failure that is the engine's, not the study's (a check
# that raised unexpectedly): here, where a message can test for it without
# importing what raised it (the fused kernel's modules, Pallas among them).
PLEASE_REPORT = "(please report this)"


class ConfigError(ValueError):
    """A sweep file is invalid: `file: key: reason`."""

    def __init__(self, file, key: str, reason: str):
        self.file, self.key, self.reason = str(file), key, reason
        super().__init__(f"{file}: {key}: {reason}")


class StoreError(RuntimeError):
    """A store cannot be used for this run (another config, not a cube, in use, ...)."""


class SchedulerError(RuntimeError):
    """The batch scheduler (SLURM) refused or could not be reached: nothing was
    submitted. One line, the scheduler's own words in it."""

"""The limits a sweep file and the command line share, in a module that
imports nothing: parsing a command line (and `--help`) does not pay for numpy
and the studies' interface, which the sweep layer imports."""

# The whole grid: every shard is a scheduler task and a chunk file per array, and
# the list of pending shards is held in memory, so their count is bounded; the
# points bound keeps one output array within what a disk holds (8e10 bytes).
MAX_POINTS = 10_000_000_000
MAX_SHARDS = 1_000_000  # a SLURM task has a shard at least: also the most tasks
MAX_WORKERS = 1024  # worker processes or threads of one run; a job's cores
MAX_GPUS = 64  # a job's GPUs: no node has as many; a mistyped count is refused before SLURM queues it

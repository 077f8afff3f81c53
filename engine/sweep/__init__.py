"""The sweep layer: a sweep file read and checked once into a `Sweep` (study,
axes, fixed parameters, solver settings, run and SLURM settings), its grid's
layout and shard sizes. Below the store, the solvers and the runs."""

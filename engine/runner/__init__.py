"""The runner layer: a sweep's plan made once, its pending shards grouped into
tasks, each task solved and its shards written (inline, on a dask cluster or
as SLURM array tasks), the cost model that sizes them."""

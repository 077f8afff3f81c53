"""Process-wide JAX set-up, done once in every process that solves (client or worker)."""

import os
import pathlib

# A dask worker that owns one CPU core should not start a thread pool of its own.
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def cache_dir() -> pathlib.Path:
    default = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "rollsweep" / "jax"
    return pathlib.Path(os.environ.get("ROLLSWEEP_JAX_CACHE", default))


def configure() -> None:
    import jax

    # float64 is the default dtype of every sweep; float32 sweeps cast explicitly.
    jax.config.update("jax_enable_x64", True)
    # Workers compile the same shard function; the persistent cache lets all but
    # the first (and every later run) load it instead.
    jax.config.update("jax_compilation_cache_dir", str(cache_dir()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

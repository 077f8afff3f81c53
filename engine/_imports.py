"""Importing the engine's heavy modules: with Python's cyclic collector
paused, and JAX's scan of every installed package made short.

What they import (JAX, diffrax, zarr: some 200,000 objects that live as long
as the process) would otherwise be traversed by every collection started on
the way. Measured on 2 cores: `rollsweep run` of 100,000 points, whole
processes, 0.1 s less. The collector's state is restored however the import ends.

JAX's import (jax._src.numpy.array_constructors, jax 0.10-0.12) looks for a
ROCm plug-in by reading the metadata of every installed distribution and
keeping those named `jax-rocm*-plugin`. Each METADATA file is parsed whole,
long descriptions included: on a GPU image of 239 distributions that was 0.8 s
of every process (cProfile of a warm `rollsweep run`, one H100, 2026-11-27),
a quarter of a warm 1M-point run. A distribution's name is also in its
folder's name, read without opening a file, so that scan is handed only the
distributions that may be such a plug-in: what it finds is the same.
"""

import gc
import importlib
import sys

# The module of JAX that scans the installed distributions at its import.
_PLUGIN_SCAN = "jax._src.numpy.array_constructors"


def import_paused(module: str):
    """`importlib.import_module(module)` with the cyclic collector paused
    (and JAX's plug-in scan short, where JAX is not imported yet)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        if "jax" not in sys.modules:
            shorten_plugin_scan()
        return importlib.import_module(module)
    finally:
        if collecting:
            gc.enable()


def shorten_plugin_scan() -> None:
    """Until JAX's plug-in scan has run, `importlib.metadata.distributions`
    hands that scan (alone: any other caller gets every distribution, as
    before) only the distributions that may be ROCm plug-ins; then the
    original is put back."""
    import importlib.metadata as metadata

    if getattr(metadata.distributions, "_shortens_plugin_scan", False):
        return
    original = metadata.distributions

    def distributions(**kwargs):
        if sys._getframe(1).f_globals.get("__name__") != _PLUGIN_SCAN:
            return original(**kwargs)
        if metadata.distributions is distributions:  # not where another wrapper came since
            metadata.distributions = original
        return (dist for dist in original(**kwargs) if _may_be_rocm_plugin(dist))

    distributions._shortens_plugin_scan = True
    distributions.__wrapped__ = original
    metadata.distributions = distributions


def _may_be_rocm_plugin(dist) -> bool:
    """Whether `dist` may be named `jax-rocm*-plugin`: its normalised name as its
    folder gives it (`jax_rocm7_plugin-0.10.0.dist-info`), its metadata read only
    where the folder does not say."""
    name = getattr(dist, "_normalized_name", None)
    return not isinstance(name, str) or name.startswith("jax_rocm")

"""Importing the engine's heavy modules with Python's cyclic collector paused.

What they import (JAX, diffrax, zarr: some 200,000 objects that live as long
as the process) would otherwise be traversed by every collection started on
the way. Measured on 2 cores: `rollsweep run` of 100,000 points, whole
processes, 0.1 s less. The collector's state is restored however the import ends.
"""

import gc
import importlib


def import_paused(module: str):
    """`importlib.import_module(module)` with the cyclic collector paused."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        if collecting:
            gc.enable()

"""Byte code for every module a rollsweep process imports, where the machine
lacks it (its packages were installed without, and PYTHONDONTWRITEBYTECODE
keeps processes from writing it): benchmarks/gpu_install.sh runs this once a
machine, so that each measured process reads byte code as on a user's
installation. Prints how many modules it wrote."""

import importlib
import importlib.util
import os
import py_compile
import sys

# What the benchmarks' processes import: the command line, a run's modules on
# every solver and executor, the studies, the peers and the figures.
MODULES = (
    "engine.cli.commands", "engine.runner.execute", "engine.runner.ahead", "engine.cube.store",
    "engine.cube.chunks", "engine.cube.verify", "engine.solve.kernel.fused", "engine.solve.kernel.cuda",
    "engine.solve.kernel.pallas", "engine.solve.kernel.host", "engine.solve.lanes.batch", "engine.solve.vmapped",
    "studies", "studies.pingpong", "studies.rebound", "studies.hoop", "studies.bicycle",
    "xarray", "dask.array", "distributed", "matplotlib.pyplot", "scipy.integrate", "numba", "numba.cuda",
    "diffrax", "pytest", "xdist",
)


def main() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - a module this machine lacks: the rest still counts
            print(f"gpu_byte_code: {name} not imported ({type(error).__name__}: {error})")
    try:
        import jax

        jax.devices()  # the plug-ins' modules, imported when the backend starts
    except Exception as error:  # noqa: BLE001
        print(f"gpu_byte_code: no JAX backend ({error})")
    written = failed = 0
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        cached = importlib.util.cache_from_source(path)
        if os.path.exists(cached):
            continue
        try:
            py_compile.compile(path, cfile=cached, doraise=True)
            written += 1
        except (OSError, py_compile.PyCompileError):  # a read-only folder: that module stays as it was
            failed += 1
    print(f"gpu_byte_code: byte code written for {written} modules ({failed} could not be)")


if __name__ == "__main__":
    main()

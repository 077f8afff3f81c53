"""rollsweep's engine: generic machinery for batch parameter studies.

The public names (`engine.run`, `engine.open_cube`, `Study`, ...) are imported
on first use, not with the package: `import engine` is what every `rollsweep`
command pays, and most of them never touch xarray, dask or the solvers
(measured on 2 cores: `import engine.cli.commands` 1.5 s before, when this
imported them all). The accessor `ds.rollsweep` is registered as soon as
xarray is imported, by whoever imports it (engine.cube.accessor.when_imported).
"""

from engine._imports import import_paused as _import_paused
from engine._version import __version__ as __version__

# name -> the module that defines it
_PUBLIC = {
    "open_cube": "engine.cube.store",
    "ConfigError": "engine.errors",
    "StoreError": "engine.errors",
    "RunReport": "engine.runner.execute",
    "run": "engine.runner.execute",
    "HybridPoint": "engine.solve.hybrid",
    "HybridSolution": "engine.solve.hybrid",
    "HybridSystem": "engine.solve.hybrid",
    "Mode": "engine.solve.hybrid",
    "Start": "engine.solve.hybrid",
    "Transition": "engine.solve.hybrid",
    "Constraint": "engine.study.interface",
    "Interval": "engine.study.interface",
    "Output": "engine.study.interface",
    "Parameter": "engine.study.interface",
    "PointResult": "engine.study.interface",
    "Study": "engine.study.interface",
    "TIME": "engine.study.interface",
    "available_studies": "engine.study.interface",
    "demo_configs": "engine.study.interface",
    "load_study": "engine.study.interface",
    "Status": "engine.study.status",
    "Sweep": "engine.sweep.config",
    "load_sweep": "engine.sweep.config",
    "parse_sweep": "engine.sweep.config",
    "SolverSettings": "engine.sweep.settings",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(_import_paused(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


def _register_accessor() -> None:
    from engine.cube.accessor import when_imported

    when_imported()


_register_accessor()

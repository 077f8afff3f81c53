"""rollsweep's engine: generic machinery for batch parameter studies."""

import gc

# The imports below (JAX, diffrax, zarr, xarray: some 220,000 objects that live as
# long as the process) run with the cyclic collector paused: each collection it
# started on the way traversed everything imported so far. Measured on 2 cores:
# `rollsweep run` of 100,000 points, whole processes, 0.1 s less. The collector's
# state is restored however the imports end.
_collecting = gc.isenabled()
gc.disable()
try:
    import engine.cube.accessor  # noqa: F401 - registers ds.rollsweep
    from engine._version import __version__ as __version__
    from engine.cube.store import open_cube as open_cube
    from engine.errors import ConfigError as ConfigError
    from engine.errors import StoreError as StoreError
    from engine.runner.execute import RunReport as RunReport
    from engine.runner.execute import run as run
    from engine.solve.hybrid import HybridPoint as HybridPoint
    from engine.solve.hybrid import HybridSolution as HybridSolution
    from engine.solve.hybrid import HybridSystem as HybridSystem
    from engine.solve.hybrid import Mode as Mode
    from engine.solve.hybrid import Start as Start
    from engine.solve.hybrid import Transition as Transition
    from engine.study.interface import Constraint as Constraint
    from engine.study.interface import Interval as Interval
    from engine.study.interface import Output as Output
    from engine.study.interface import Parameter as Parameter
    from engine.study.interface import PointResult as PointResult
    from engine.study.interface import Study as Study
    from engine.study.interface import available_studies as available_studies
    from engine.study.interface import demo_configs as demo_configs
    from engine.study.interface import load_study as load_study
    from engine.study.status import Status as Status
    from engine.sweep.config import Sweep as Sweep
    from engine.sweep.config import load_sweep as load_sweep
    from engine.sweep.config import parse_sweep as parse_sweep
    from engine.sweep.settings import SolverSettings as SolverSettings
finally:
    if _collecting:
        gc.enable()
    del _collecting

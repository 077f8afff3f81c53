"""rollsweep's engine: generic machinery for batch parameter studies."""

from . import _accessor  # noqa: F401 - registers ds.rollsweep
from ._config import Sweep as Sweep
from ._config import load_sweep as load_sweep
from ._config import parse_sweep as parse_sweep
from ._cube import open_cube as open_cube
from ._execute import RunReport as RunReport
from ._execute import run as run
from ._status import Status as Status
from ._study import Constraint as Constraint
from ._study import Interval as Interval
from ._study import Output as Output
from ._study import Parameter as Parameter
from ._study import PointResult as PointResult
from ._study import Study as Study
from ._study import available_studies as available_studies
from ._study import demo_configs as demo_configs
from ._study import load_study as load_study
from .errors import ConfigError as ConfigError
from .errors import StoreError as StoreError
from .solve.hybrid import HybridPoint as HybridPoint
from .solve.hybrid import HybridSolution as HybridSolution
from .solve.hybrid import HybridSystem as HybridSystem
from .solve.hybrid import Mode as Mode
from .solve.hybrid import Start as Start
from .solve.hybrid import Transition as Transition
from .solve.settings import SolverSettings as SolverSettings

__version__ = "0.1.0"

"""rollsweep's engine: generic machinery for batch parameter studies."""

from ._hybrid import HybridSolution as HybridSolution
from ._hybrid import HybridSystem as HybridSystem
from ._hybrid import Mode as Mode
from ._hybrid import Transition as Transition
from ._solver import SolverSettings as SolverSettings
from ._status import Status as Status
from ._study import Interval as Interval
from ._study import Output as Output
from ._study import Parameter as Parameter
from ._study import PointResult as PointResult
from ._study import Study as Study
from ._study import available_studies as available_studies
from ._study import load_study as load_study

__version__ = "0.1.0"

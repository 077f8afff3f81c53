"""Solving a batch of points: knows nothing of stores, shards or dask.

The seam: a `Plan` (engine.solve.plan.make_plan, made once per run from the
study and the `Device`) names a `BatchSolver` (vmapped, lanes, fused) and the batch
and width every shard uses; `evaluate` drives it over any number of points.
"""

from .base import BatchSolver as BatchSolver
from .base import Plan as Plan
from .device import Device as Device
from .device import detect as detect
from .evaluate import Evaluation as Evaluation
from .evaluate import evaluate as evaluate
from .plan import SOLVERS as SOLVERS
from .plan import make_plan as make_plan

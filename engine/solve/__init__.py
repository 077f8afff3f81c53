"""Solving a batch of points: knows nothing of stores, shards or dask.

The seam: a `Plan` (engine.solve.plan.make_plan, made once per run from the
study and the `Device`) names a `BatchSolver` (vmapped, lanes, fused) and the batch
and width every shard uses; `evaluate` drives it over any number of points.
"""

from engine.solve.base import BatchSolver as BatchSolver
from engine.solve.base import Plan as Plan
from engine.solve.device import Device as Device
from engine.solve.device import detect as detect
from engine.solve.evaluate import Evaluation as Evaluation
from engine.solve.evaluate import evaluate as evaluate
from engine.solve.plan import SOLVERS as SOLVERS
from engine.solve.plan import make_plan as make_plan

"""Spinning-ball rebound on a table or racket (Ren, Xu, Tan), with flight to the landing point."""

from ._fit import fit_learned as fit_learned
from ._fit import fit_physical as fit_physical
from ._fit import load_table1 as load_table1
from ._fit import model_comparison as model_comparison
from ._flight import LANDING as LANDING
from ._study import REBOUND as REBOUND
from ._study import REGIME as REGIME
from ._study import TABLE1 as TABLE1

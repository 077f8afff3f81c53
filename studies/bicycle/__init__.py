"""Whipple bicycle benchmark: eigenvalues against speed, stability speeds, design maps
(Meijaard, Papadopoulos, Ruina, Schwab 2007)."""

from ._parameters import BENCHMARK as BENCHMARK
from ._parameters import load_design as load_design
from ._response import RESPONSE as RESPONSE
from ._study import STUDY as STUDY

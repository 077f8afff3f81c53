"""Heavy hoop rolling on a curved track, constraint-stabilised (Matrosov, Morozov, Pesterev 2021)."""

from ._study import STUDY as STUDY

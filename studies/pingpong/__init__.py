"""Rolling table-tennis ball flicked with backspin (Gao Yunfeng 2021)."""

from ._study import STUDY as STUDY

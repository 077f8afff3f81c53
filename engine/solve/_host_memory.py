"""Freed host memory kept for the next compiled call on CPU.

XLA:CPU allocates every call's buffers (inputs copied in, temporaries,
outputs) with malloc and frees them when the call ends. glibc hands freed
memory at the top of a heap back to the kernel once it exceeds its trim
threshold, which it sets to twice the largest buffer it has seen, so the
next call faults the same pages in again, zeroed. Measured on the rebound
regime map (one core, process CPU time, 16,384 points a call): 50 ns a
point with glibc's defaults, 31 with the thresholds below; the study's own
work (its arithmetic and libm calls) is the rest.

The thresholds are the largest glibc's own adaptive rule reaches (allocations
below 32 MiB from the heap, trimmed past 64 MiB free), set from the start and
kept, so a process holds at most that much freed memory an arena beyond its
peak. Elsewhere than glibc (no mallopt) nothing is changed.
"""

import ctypes
import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit hosts
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # its dynamic rule's ratio


@functools.cache
def keep_freed_memory() -> bool:
    """Set the thresholds once per process; whether they were set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

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

import contextlib
import ctypes
import functools
import math
import os
import threading

import numpy as np

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


# Free arrays kept for later tasks: at most this many bytes.
KEPT_BYTES = 2 * 2**30


class _FreeArrays:
    """Large host arrays given back by tasks, by shape and dtype."""

    def __init__(self):
        self.lock = threading.Lock()
        self.arrays: dict[tuple, list[np.ndarray]] = {}
        self.nbytes = 0

    def take(self, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
        with self.lock:
            kept = self.arrays.get((shape, dtype.str))
            if not kept:
                return None
            array = kept.pop()
            self.nbytes -= array.nbytes
            return array

    def give_back(self, arrays) -> None:
        with self.lock:
            for array in arrays:
                if self.nbytes + array.nbytes <= KEPT_BYTES:
                    self.arrays.setdefault((array.shape, array.dtype.str), []).append(array)
                    self.nbytes += array.nbytes

    def clear(self) -> None:
        with self.lock:
            self.arrays.clear()
            self.nbytes = 0


_free = _FreeArrays()


def _forget_in_child() -> None:
    """In a forked child: its parent's threads (and a lock one may have held) are not in it."""
    global _free
    _free = _FreeArrays()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@contextlib.contextmanager
def reused_arrays():
    """`empty(shape, dtype)` for one task's large host arrays (its parameter
    columns, its whole results): each array of MMAP_THRESHOLD bytes or more is
    given back when the block ends and handed to a later task asking for the
    same shape and dtype (smaller ones come from malloc's heap, which reuses
    them itself: keep_freed_memory).

    Why: glibc maps every allocation of 32 MiB or more afresh and unmaps it when
    it is freed, so each task faulted its arrays in page by page, zeroed by the
    kernel, its threads taking the address space's lock in turn. Measured on 2
    cores, a 2^22-point float64 array filled by a copy: 7.0 GB/s fresh, 25.5
    GB/s reused (one thread); four threads at once 12.9 against 25.4 GB/s.

    The arrays must not outlive the block: a task's writes have ended when it
    returns (engine.runner.shard). At most KEPT_BYTES of free arrays are kept,
    arrays the process's tasks held at once, and a run drops them at its end
    (engine.runner.execute.run)."""
    taken = []

    def empty(shape, dtype) -> np.ndarray:
        shape, dtype = tuple(shape), np.dtype(dtype)
        if math.prod(shape) * dtype.itemsize < MMAP_THRESHOLD:
            return np.empty(shape, dtype)
        array = _free.take(shape, dtype)
        if array is None:
            array = np.empty(shape, dtype)
        taken.append(array)
        return array

    try:
        yield empty
    finally:
        _free.give_back(taken)


def forget_reused_arrays() -> None:
    """Every free array kept by reused_arrays dropped (a run's end; tests)."""
    _free.clear()

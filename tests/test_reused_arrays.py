"""A task's large host arrays are earlier tasks' (engine.solve._host_memory.reused_arrays):
handed out again only once given back, never to two tasks at once, and every
element written again, so a cube made of reused arrays is the same bits."""

import numpy as np
import pytest

import engine.solve._host_memory as host_memory
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.solve._host_memory import forget_reused_arrays, reused_arrays

from conftest import cubes_identical, regime_grid


@pytest.fixture
def small_threshold(monkeypatch):
    """Arrays of 1 KiB or more count as large (instead of 32 MiB), none kept before or after."""
    monkeypatch.setattr(host_memory, "MMAP_THRESHOLD", 1024)
    forget_reused_arrays()
    yield
    forget_reused_arrays()


def test_a_large_array_given_back_is_handed_to_the_next_task_asking_for_its_shape(small_threshold):
    with reused_arrays() as empty:
        first = empty((256,), np.float64)
        small = empty((8,), np.float64)
    with reused_arrays() as empty:
        assert empty((256,), np.float64) is first
        assert empty((256,), np.float64) is not first  # one array, one task at a time
        assert empty((8,), np.float64) is not small  # small arrays are malloc's to reuse
        assert empty((256,), np.int32).dtype == np.int32  # another dtype: another array


def test_two_tasks_at_once_never_share_an_array(small_threshold):
    with reused_arrays() as one:
        a = one((512,), np.float64)
    with reused_arrays() as one, reused_arrays() as two:
        b, c = one((512,), np.float64), two((512,), np.float64)
        assert b is a and c is not a


def test_free_arrays_kept_are_bounded(small_threshold, monkeypatch):
    monkeypatch.setattr(host_memory, "KEPT_BYTES", 3 * 1024 * 8)
    with reused_arrays() as empty:
        arrays = [empty((1024,), np.float64) for _ in range(5)]
    with reused_arrays() as empty:
        again = [empty((1024,), np.float64) for _ in range(5)]
    assert sum(any(x is y for y in arrays) for x in again) == 3


def test_an_array_is_given_back_when_its_task_raises(small_threshold):
    with pytest.raises(RuntimeError), reused_arrays() as empty:
        first = empty((300,), np.float64)
        raise RuntimeError("a study's bug")
    with reused_arrays() as empty:
        assert empty((300,), np.float64) is first


def test_a_run_of_reused_arrays_writes_the_cube_of_fresh_ones(tmp_path, small_threshold, monkeypatch):
    """Many tasks on two threads, every column and whole result array (1 KiB or
    more) reused, each poisoned when given back: an element a task did not write
    again would show in the cube."""
    def sweep(name, shard_size):
        return regime_grid(tmp_path, name, shard_size, spins=41, run="batch_size = 64\nworkers = 2")

    give_back, take = host_memory._free.give_back, host_memory._free.take
    poisoned, handed_again = [], []

    def poison_then_give_back(arrays):
        for array in arrays:
            array.fill(7)
            poisoned.append(array.shape)
        give_back(arrays)

    def counted_take(shape, dtype):
        array = take(shape, dtype)
        if array is not None:
            handed_again.append(shape)
        return array

    monkeypatch.setattr(host_memory._free, "give_back", poison_then_give_back)
    monkeypatch.setattr(host_memory._free, "take", counted_take)
    reused = sweep("reused", 240)
    run(reused, progress=False)
    assert len(poisoned) > 10 and len(handed_again) > 10  # each task's columns and whole results

    monkeypatch.setattr(host_memory, "MMAP_THRESHOLD", 2**62)  # nothing reused
    fresh = sweep("fresh", 240)
    run(fresh, progress=False)
    assert cubes_identical(open_cube(reused.out).load().drop_attrs(), open_cube(fresh.out).load().drop_attrs())

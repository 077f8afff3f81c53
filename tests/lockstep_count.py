"""Lockstep loop iterations of a compiled call, shared by the tests and the
lockstep benchmark (benchmarks/lockstep.py).

Under vmap a `while_loop` runs until its slowest lane is done and every lane
pays each iteration: a callback in each loop's body runs once per lockstep
iteration, whatever the batch width, so counting its calls counts them.
"""

import collections
import contextlib
import pathlib
import traceback

import jax

# Frames of these packages (and of this file) do not name a loop: the first
# frame outside them, from the innermost, is the code that runs it.
_PLUMBING = ("/jax/", "/jaxlib/", "/equinox/", "/contextlib.py", str(pathlib.Path(__file__)))


def _loop_site() -> str:
    """The function that runs the while_loop being traced, as 'folder/file.py:function'."""
    for frame in reversed(traceback.extract_stack()):
        if not any(part in frame.filename for part in _PLUMBING):
            path = pathlib.Path(frame.filename)
            return f"{path.parent.name}/{path.name}:{frame.name}"
    return "?"


@contextlib.contextmanager
def counting_loops(counts: collections.Counter):
    """Every while_loop traced inside the block adds one to `counts[site]` per
    lockstep iteration when the program runs (site: the code that runs the loop)."""
    original = jax.lax.while_loop

    def counted(cond, body, init):
        site = _loop_site()

        def body_counted(carry):
            jax.debug.callback(lambda: counts.update([site]))
            return body(carry)

        return original(cond, body_counted, init)

    jax.lax.while_loop = counted
    try:
        yield
    finally:
        jax.lax.while_loop = original


def lockstep_iterations_by_loop(fn, *args) -> collections.Counter:
    """Iterations of one call of jax.jit(fn)(*args), by the code that runs each loop."""
    counts = collections.Counter()
    with counting_loops(counts):
        # A fresh function: a cached trace would have no callbacks into `counts`.
        jax.block_until_ready(jax.jit(lambda *a: fn(*a))(*args))
    jax.effects_barrier()
    return counts


def lockstep_iterations(fn, *args) -> int:
    """Iterations of every while loop of one call of jax.jit(fn)(*args)."""
    return sum(lockstep_iterations_by_loop(fn, *args).values())

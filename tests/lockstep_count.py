"""Lockstep loop iterations of a compiled call, shared by the tests and the
lockstep benchmark (benchmarks/lockstep.py).

Under vmap a `while_loop` runs until its slowest lane is done and every lane
pays each iteration: a callback in each loop's body runs once per lockstep
iteration, whatever the batch width, so counting its calls counts them.
"""

import contextlib

import jax


@contextlib.contextmanager
def counting_loops(counts: list):
    """Every while_loop traced inside the block appends to `counts` once per
    lockstep iteration when the program runs."""
    original = jax.lax.while_loop

    def counted(cond, body, init):
        def body_counted(carry):
            jax.debug.callback(lambda: counts.append(1))
            return body(carry)

        return original(cond, body_counted, init)

    jax.lax.while_loop = counted
    try:
        yield
    finally:
        jax.lax.while_loop = original


def lockstep_iterations(fn, *args) -> int:
    """Iterations of every while loop of one call of jax.jit(fn)(*args)."""
    counts = []
    with counting_loops(counts):
        jax.block_until_ready(jax.jit(fn)(*args))
    jax.effects_barrier()
    return len(counts)

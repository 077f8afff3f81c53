"""A study with nothing to solve: its outputs are arithmetic of its parameters.

What a `rollsweep run` of it costs is the engine's own work a point, the host
side alone: reading the sweep, planning, packing the points into calls, the
compiled calls (two floating-point operations a point), copying the results
back, writing them into the cube and marking the shards done
(benchmarks/host_cost.py). Written as a study package outside rollsweep would
be (only `engine`'s public names, a plain `solve_point`, not a HybridPoint, no
`batch_size`: what a new user writes), and registered the way such a package
is, under the `rollsweep.studies` entry point:

    [project.entry-points."rollsweep.studies"]
    nothing_to_solve = "nothing_to_solve:STUDY"

(benchmarks/host_cost.py writes the distribution's metadata that
`pip install -e` would, in a folder of its own, rather than install into the
shared environment).

Outputs: `sum` = a + b and `product` = a * b, one IEEE operation each, so a
run's cube equals numpy's a + b and a * b bit for bit (tests/test_host_cost.py).
"""

import jax.numpy as jnp

from engine import Interval, Output, Parameter, PointResult, Status, Study


def _solve(p, settings):
    """Both outputs of one point; always a success."""
    return PointResult(outputs={"sum": p["a"] + p["b"], "product": p["a"] * p["b"]},
                       status=jnp.asarray(Status.SUCCESS, jnp.int8))


STUDY = Study(
    name="nothing_to_solve",
    title="Nothing to solve: the sum and product of two numbers",
    source="arithmetic",
    version="1",
    parameters=(
        Parameter("a", "1", 1.0, Interval(-1e6, 1e6), "the first number"),
        Parameter("b", "1", 1.0, Interval(-1e6, 1e6), "the second number"),
    ),
    outputs=(Output("sum", "1", "a + b"), Output("product", "1", "a * b")),
    solve_point=_solve,
)

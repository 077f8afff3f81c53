"""Lanes that refill: many hybrid solves in one loop, without lockstep waste.

`jax.vmap` of a per-point solve runs every point of a batch in lockstep: the
batch takes as many loop iterations as its slowest point, and lanes that
finished early idle (a third of all lane-steps on the rolling-ball sweep, and
one point that never converges stalls the whole batch). Here one
`lax.while_loop` advances `lanes` solves by one solver step per iteration; a
lane that finishes writes its solution and takes the next point of the batch at
once, so every lane works until the batch runs out of points.

Each iteration, every running lane takes one regular adaptive step (the
solver's Butcher tableau and the arithmetic of diffrax's `PIDController`, on
all lanes at once). A lane whose step crossed a transition's condition does not
take it but parks. Parked and finished lanes wait for a flush, which runs when
half of the lanes wait: the parked ones, gathered into a narrow loop,
locate their crossings; finished ones are written out and take new points.
Locating is a Newton iteration on the crossing time by re-steps from the same
(exact) step start, the slope along the flow coming from the vector field at
the iterate; the first iterate is the root of the cubic through the
condition's values and slopes at the step's ends (one re-step of the whole
step gives the end's), and two Newton re-steps, each aimed a rounding tolerance
past the crossing, locate it to rounding. The event state is an
exact solver step: accurate to solver tolerance, like the state at any step end
(HybridSystem.solve locates the same way, by re-steps). Keeping the locating
logic out of the every-step loop keeps that loop to a plain adaptive step: the
logic costs more than the step itself.

The solution of each point is the same `HybridSolution` that HybridSystem.solve
returns, and the tests compare the two. One difference: a step whose state is
not finite is rejected and shrunk (up to `max_steps`) rather than taken as a
failed solve.

Layout: every lane array has the lane axis last (a state vector is a
(components, lanes) array), and the step is written on whole lanes rather than
as `jax.vmap` of a one-lane step. XLA:CPU then runs each operation as a
contiguous, vectorised loop over lanes; vmap would put the lane axis first and
loop over lanes with the few components innermost. Together with the
work-arounds for XLA:CPU's fusion noted in the code (`_lane_last`, `_once`,
`_sum_rows`), this made a solver step of the rolling-ball sweep ~3x cheaper
(benchmarks/bench_pingpong.py).
"""

from engine.solve.lanes.batch import solve_batch as solve_batch
from engine.solve.lanes.solver import CPU_BATCH as CPU_BATCH
from engine.solve.lanes.solver import MAX_LANES as MAX_LANES
from engine.solve.lanes.solver import LanesSolver as LanesSolver

"""The per-run Plan: which batch solver, how many points per call, how many in
flight. The one place where the engine's choices depend on the device."""

from engine.solve.base import BatchSolver, Plan, whole_vectors
from engine.solve.device import Device, detect
from engine.solve.kernel.fused import FusedSolver
from engine.solve.lanes import LanesSolver
from engine.solve.vmapped import VmappedSolver

SOLVERS: dict[str, BatchSolver] = {s.name: s for s in (VmappedSolver(), LanesSolver(), FusedSolver())}


# The solvers that write a point's states at a sweep's sample times (`[save]
# times`): every one (the fused kernel from inside its solve, since issue 56). A
# sampled sweep's default plan is the fused kernel where the study fuses (on a
# GPU as without samples; on CPU compiled for the host: default_solver), else
# the one without samples where its solver writes them, vmapped otherwise.
SAMPLING_SOLVERS = ("lanes", "vmapped", "fused")


def writes_samples(solver: str, integrator: str) -> bool:
    """Whether `solver` writes the samples of a sweep whose [solver] is
    `integrator`: the fused kernel reads them from the dense output of the
    integrators written out elementwise (engine.solve.lanes.dense.ELEMENTWISE)."""
    from engine.solve.lanes.dense import ELEMENTWISE

    return solver in SAMPLING_SOLVERS and (solver != "fused" or integrator in ELEMENTWISE)


def writes_no_samples(solver: str, integrator: str = "Tsit5") -> str:
    """Why `solver` cannot solve a sweep with [save] times (of `integrator`)."""
    if solver in SAMPLING_SOLVERS:
        from engine.solve.lanes.dense import ELEMENTWISE

        return f"the {solver} solver writes samples at [save] times from the dense output of " \
            f"{' and '.join(ELEMENTWISE)} only, not {integrator}'s"
    return f"the {solver} solver does not yet write samples at [save] times (the {', '.join(SAMPLING_SOLVERS)} " \
        "solvers do)"


def default_solver(study, device: Device, sampled: bool = False, integrator: str = "Tsit5") -> str:
    """On a GPU the fused kernel for a study it can fuse; on CPU refilling lanes
    for a study that supports them (a sweep with [save] times: the fused
    kernel compiled for the host where it can, `_samples_on_host`); vmapped
    otherwise.

    On an accelerator the lanes lose: measured on one H100 (float64, rolling
    ball, 1M points), lanes 11k points/s against vmapped 1.58M (the lanes'
    flushes run as conditionals, each a round trip to the host). The fused
    kernel keeps a point's whole solve on the device, with no such round trip
    and no per-step traffic to memory (its speed against vmapped is not yet
    measured on a GPU: benchmarks/bench_gpu.py). Why a study falls back to
    vmapped: SOLVERS["fused"].unsupported(study).
    """
    if device.accelerator:
        fused = device.platform == "gpu" and SOLVERS["fused"].unsupported(study) is None
        return "fused" if fused else "vmapped"
    if sampled and _samples_on_host(study, integrator):
        return "fused"
    if SOLVERS["lanes"].unsupported(study) is None:
        return "lanes"
    return "vmapped"


def _samples_on_host(study, integrator: str) -> bool:
    """Whether a sampled sweep on CPU is solved by the fused kernel compiled for
    the host (generated C): it writes each point's samples from inside its
    loop, while the lanes write them in passes of XLA kernels after every step.
    Measured (benchmarks/bench_trajectories.py --points 100000 --grid 16, 2
    cores): the rolling ball's 201 samples of x and x_dot, 190,000 points/s
    fused against 70,000 on the lanes; the bouncing ball's, 70,000 against
    11,500. Where the integrator's dense output is not written out for the
    kernel, the study does not fuse, its kernel does not generate as C or no C
    compiler is found (it would run in Pallas's interpret mode), the lanes as
    without samples."""
    if not writes_samples("fused", integrator):
        return False
    from engine.solve.kernel.host import compiler

    return compiler() is not None and SOLVERS["fused"].host_unsupported(study) is None


# On a GPU, a sweep solved by the vmapped solver (not fused) with fewer points
# than this runs on the host's cores instead. The vmapped solve runs its points
# in lockstep, one small kernel per operation of a step, so a few hundred heavy
# points leave the GPU idle between launches: measured on one H100 machine,
# the hoop's 12 shapes at 1.2 points/s against 300 for numba on its 16 CPU
# threads. A GPU needs tens of thousands of points in flight to be busy. (The
# crossover is not yet measured; the fused kernel is exempt: its whole solve
# is one launch.)
GPU_MIN_POINTS = 1 << 14


def solving_device(study, points: int | None, default: Device, host: Device) -> Device:
    """Where a sweep of `points` points of `study` solves: the default device, or
    the host's CPU cores (`host`) for a small vmapped sweep on a GPU."""
    small = points is not None and points < GPU_MIN_POINTS
    if default.platform == "gpu" and host.platform == "cpu" and small and default_solver(study, default) != "fused":
        return host
    return default


def _bucket(points: int) -> int:
    """points rounded up to a power of two: sweeps of similar sizes share one
    compiled program, and a small sweep is not padded to a large batch."""
    return 1 << max(0, points - 1).bit_length()


def make_plan(
    study,
    device: Device | None = None,
    *,
    solver: str | None = None,
    batch: int | None = None,
    width: int | None = None,
    points: int | None = None,
    sampled: bool = False,
    integrator: str = "Tsit5",
) -> Plan:
    """The plan for solving `study` on `device` (default: this process's).

    solver, batch, width: the sweep's or caller's choices (None: the engine's).
    points: the whole sweep's grid points, so that a small sweep gets a small
    batch (and, on a GPU, a small vmapped sweep solves on the CPU cores:
    `solving_device`). The batch never depends on the shard size: a point's result must
    not depend on how the grid was cut (XLA compiles other programs for other
    shapes, and their roundings can differ). On CPU, batch and width are whole
    vectors (see engine.solve.base.VECTOR). sampled: the sweep has [save]
    times, read from the dense output of its [solver] `integrator`.
    """
    device = device or solving_device(study, points, detect(), detect("cpu"))
    name = solver or default_solver(study, device, sampled, integrator)
    if sampled and not solver and not writes_samples(name, integrator):
        name = "vmapped"
    if name not in SOLVERS:
        raise ValueError(f"unknown batch solver {name!r} (known: {', '.join(SOLVERS)})")
    if sampled and not writes_samples(name, integrator):
        raise ValueError(writes_no_samples(name, integrator))
    implementation = SOLVERS[name]
    reason = implementation.unsupported(study)
    if reason:
        raise ValueError(f"the {name} solver cannot solve study {study.name!r}: {reason}")
    if batch is None:
        batch = implementation.default_batch(study, device)
        if points:
            batch = min(batch, _bucket(points))
    width = min(batch, width or implementation.default_width(batch, device))
    if not device.accelerator:
        batch, width = whole_vectors(batch), whole_vectors(width)
    return Plan(solver=implementation, batch=batch, width=width, device=device)

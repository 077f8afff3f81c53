"""The GPU path's host side, measured on any machine: a stubbed GPU plan's run.

On an accelerator a run is a pipeline (engine.runner.pipeline: one thread packs
each task's points and queues its calls, writer threads gather, write and mark)
and its calls' copies go as engine.solve.staging says. On a CPU, `rollsweep
run` takes another path (task threads, calls reading the host's memory where
it is), so host_cost.py's figure is not that of the GPU's host side. Here the
same sweep of the study with nothing to solve (tests/nothing_to_solve: sum =
a + b, product = a * b) is run in this process under a plan made for a GPU of
80 GiB (an H100's) with this machine's cores: the pipeline, its tasks' sizes,
its staging, every copy and write a GPU run makes, with the calls running on
the CPU device (a closed form: microseconds). What it costs is the engine's
host side on the GPU path, less the device's own time.

Alternating rounds at two sizes (default 1e6 and 1e7 points, the sweep a user
writes: no shard_size, no batch_size), best of the rounds, each run's "solved
in" (from the first task handed out to the last one's report):
- the CPU's own default path (task threads), the baseline;
- the stubbed GPU plan, staging as on a GPU by default (results moved by the
  call into pinned host memory);
- the same with ROLLSWEEP_PINNED_INPUTS=1 and ROLLSWEEP_PACKED_RESULTS=1.
Every cube is checked equal, bit for bit, to the CPU's. The stubbed runs' task
stages of the fastest round are printed: where the pipeline's host time goes.

Rows go to $ROLLSWEEP_BENCH_ROWS (_common.record_row).

Run: python benchmarks/host_pipeline.py [--sizes 1000000 10000000] [--repeat 3] [--quick]
"""

import argparse
import contextlib
import math
import os
import pathlib
import sys
import tempfile

import host_cost  # the study's registration, its grid and sweep (as host_cost.py runs it)
from _common import machine, record_row

GPU_MEMORY = 80 * 2**30  # an H100's
# (name, environment): the ways of running a sweep, the CPU's first (the baseline).
WAYS = (
    ("CPU default path (task threads)", None),
    ("stubbed GPU plan: pipeline, default staging", {}),
    ("stubbed GPU plan: pipeline, pinned inputs and packed results",
     {"ROLLSWEEP_PINNED_INPUTS": "1", "ROLLSWEEP_PACKED_RESULTS": "1"}),
)
TITLE = "the GPU path's host side on this machine: nothing to solve, a stubbed GPU plan (host_pipeline.py)"


@contextlib.contextmanager
def environment(values: dict):
    """os.environ with `values` set, restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def gpu_plan(sweep):
    """The plan a GPU of GPU_MEMORY would make for `sweep` (as engine.runner.cost.plan_for
    makes a run's), with this machine's cores."""
    from engine.solve.allocation import cores
    from engine.solve.device import Device
    from engine.solve.plan import make_plan

    gpu = Device(platform="gpu", count=1, memory=GPU_MEMORY, cores=cores())
    return make_plan(sweep.study, gpu, solver=sweep.batch_solver, batch=sweep.batch_size,
                     points=math.prod(sweep.shape))


def one_run(text: str, out: pathlib.Path, staging: dict | None):
    """(report, plan's batch or None) of one run of the sweep `text` into a new store at `out`."""
    from engine import parse_sweep, run

    sweep = parse_sweep(text)
    if staging is None:
        return run(sweep, progress=False, overwrite=True), None
    with environment(staging):
        plan = gpu_plan(sweep)
        return run(sweep, plan=plan, progress=False, overwrite=True), plan.batch


def stage_text(report) -> str:
    """A run's task stages as shares of its threads' time."""
    total = sum(report.task_stages.values()) or math.nan
    return ", ".join(f"{name} {seconds / total:.0%}" for name, seconds in
                     sorted(report.task_stages.items(), key=lambda item: -item[1]) if seconds / total >= 0.005)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=(1_000_000, 10_000_000), metavar=("N1", "N2"))
    parser.add_argument("--repeat", type=int, default=3, help="rounds, each running every size and way once")
    parser.add_argument("--quick", action="store_true", help="1e4 and 1e5 points, one round: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat = (10_000, 100_000), 1

    with tempfile.TemporaryDirectory(prefix="rollsweep_pipeline_") as tmp:
        folder = pathlib.Path(tmp)
        sys.path.insert(0, str(host_cost.write_registration(folder / "site")))  # before the engine's first look
        from engine import open_cube

        print(f"{TITLE}; {machine()}", flush=True)
        shapes = [host_cost.grid_shape(n) for n in args.sizes]
        sizes = [a * b for a, b in shapes]
        texts = {(n, k): host_cost.sweep_toml(shape, folder / f"{n}_{k}.zarr")
                 for shape, n in zip(shapes, sizes, strict=True) for k in range(len(WAYS))}
        for (n, k), text in texts.items():  # untimed: every program compiled, the file cache warm
            one_run(text, folder / f"{n}_{k}.zarr", WAYS[k][1])
        best = {}  # (n, way) -> (seconds, report, batch)
        for round_ in range(args.repeat):
            for n in sizes:
                line = []
                for k, (_, staging) in enumerate(WAYS):
                    report, batch = one_run(texts[n, k], folder / f"{n}_{k}.zarr", staging)
                    seconds = report.stages["solving"]
                    if (n, k) not in best or seconds < best[n, k][0]:
                        best[n, k] = (seconds, report, batch)
                    line.append(f"{seconds:.3f} s")
                print(f"round {round_ + 1}, {n:,} points, solved in: " + ", ".join(line), flush=True)
            for n in sizes:  # the cubes of the last round: each way's the CPU's, bit for bit
                cpu = open_cube(folder / f"{n}_0.zarr").load().drop_attrs()
                for k in range(1, len(WAYS)):
                    other = open_cube(folder / f"{n}_{k}.zarr").load().drop_attrs()
                    if not cpu.identical(other):
                        raise SystemExit(f"{WAYS[k][0]}, {n:,} points: the cube differs from the CPU's")

        print(f"\n{TITLE}; best of {args.repeat} alternating rounds, every cube the CPU's bit for bit")
        rows = []
        for n in sizes:
            base = best[n, 0][0]
            for k, (name, _) in enumerate(WAYS):
                seconds, report, batch = best[n, k]
                calls = f"calls of {batch:,} points, " if batch else ""
                rows.append((name, n, n / seconds, base / seconds,
                             f"solved in {seconds:.3f} s; {calls}{report.threads} threads: {stage_text(report)}"))
        width = max(len(r[0]) for r in rows)
        print(f"{'method':<{width}} {'points':>12} {'points/s':>14} {'vs CPU':>7}  note")
        for method, n, value, ratio, note in rows:
            print(f"{method:<{width}} {n:>12,} {value:>14,.0f} {ratio:>7.3g}  {note}")
            record_row(method, value, points=n, ratio=ratio, note=note, title=TITLE)
        print("vs CPU: the way's 'solved in' points/s against the CPU's default path in the same rounds.")


if __name__ == "__main__":
    main()

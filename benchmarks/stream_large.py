"""A 100-million-point sweep streams to disk: memory stays at a few shards.

Runs `rollsweep run` (inline executor, a shard per core) on the rebound regime
map (a cheap closed-form study) over a 10,000 x 10,000 grid of spin ratio x
incidence angle, in a child process, and reports its peak resident memory next
to the size of the cube it wrote: the cube is never held in memory, each shard
is solved, written to its zarr chunks and dropped. Then checks the finished
cube (`rollsweep verify`: every shard done, values present) and reads a few
rows back lazily.

`--study pingpong` streams the rolling ball instead (spin ratio x initial
speed, an adaptive hybrid solve a point): the end-to-end run of 1e8 points a
GPU is meant for (on 2 CPU cores, try --side 1000).

Run: `python benchmarks/stream_large.py [--study NAME] [--side N] [--workers N] [--keep DIR]`
(N x N points; default 10,000: about 1.6 GB of disk).
"""

import argparse
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

# What each study's sweep writes, and its two axes (the first: the row read back).
SWEEPS = {
    # The rebound regime map: a closed form, so the store's writes are what is measured.
    "rebound_regime": (["out_vx", "out_vz", "out_wy"],
                       {"spin_ratio": (-1.0, 1.0), "incidence_angle": (0.5, 89.5)}),
    # The rolling ball (slide, roll, stop: an adaptive hybrid solve a point), the
    # GPU's main target: 1e8 points end to end.
    "pingpong": (["final_displacement", "stop_time"],
                 {"spin_ratio": (0.2, 3.0), "initial_speed": (0.5, 5.0)}),
}


# Peak memory is checked against the cube held in memory from this size on.
CHECKED_FROM = 2**30

# The CLI as this interpreter runs it, from this checkout: never a `rollsweep`
# looked for beside sys.executable (on a machine whose Python has no such
# script, or another version of it, that lookup fails or runs the wrong code).
ROLLSWEEP = [sys.executable, "-c", "from engine.cli.commands import program; program()"]
CHILD_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    filter(None, [str(pathlib.Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")])))


def sweep_text(study: str, side: int, out: pathlib.Path, shard_size: int, workers: int | None = None) -> str:
    outputs, axes = SWEEPS[study]
    lines = "\n".join(f"{name} = {{ linspace = [{lo}, {hi}, {side}] }}" for name, (lo, hi) in axes.items())
    return f"""study = "{study}"
outputs = {outputs}

[axes]
{lines}

[run]
shard_size = {shard_size}
executor = "inline"
out = "{out}"
""" + (f"workers = {workers}\n" if workers else "")


def disk_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", choices=sorted(SWEEPS), default="rebound_regime")
    parser.add_argument("--side", type=int, default=10_000, help="points per axis (default 10,000: 1e8 points)")
    parser.add_argument("--shard-size", type=int, default=2**20)
    parser.add_argument("--workers", type=int, help="shard threads (default: the engine's)")
    parser.add_argument("--keep", help="write the cube into this folder and keep it")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "stream_large.zarr"
        config = folder / "stream_large.toml"
        config.write_text(sweep_text(args.study, args.side, out, args.shard_size, args.workers))
        outputs, axes = SWEEPS[args.study]
        points = args.side**2
        print(f"{args.study}: {points:,} points, shards of {args.shard_size:,}, outputs {', '.join(outputs)}")
        subprocess.run([*ROLLSWEEP, "validate", config], check=True, env=CHILD_ENV)

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        # --profile: the run's stages (where a 1e8-point stream spends its time) printed at its end.
        subprocess.run([*ROLLSWEEP, "run", config, "--quiet", "--overwrite", "--profile"], check=True, env=CHILD_ENV)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU time of the run (all its threads): on a shared machine, a measure of
        # the work done that other processes' load does not inflate as much as wall time.
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        # ru_maxrss of the waited-for children (KiB on Linux): the run's peak.
        peak = after.ru_maxrss * 1024
        subprocess.run([*ROLLSWEEP, "verify", out], check=True, env=CHILD_ENV)

        import numpy as np
        import xarray as xr

        cube = xr.open_zarr(out)
        values = sum(cube[name].dtype.itemsize for name in [*outputs, "status", "num_steps", "num_events"])
        in_memory = points * values
        first = next(iter(axes))
        row = cube[outputs[0]].isel({first: args.side // 2}).values  # one lazy row read back
        success = int((cube["status"].isel({first: slice(0, 16)}) == 1).sum())

        print(f"run:             {seconds:,.1f} s, {points / seconds:,.0f} points/s end to end; "
              f"CPU {cpu:,.1f} s ({points / cpu:,.0f} points per CPU second, start-up and compile included)")
        print(f"cube in memory:  {in_memory / 2**30:,.2f} GiB if it were held (values + status + counts)")
        print(f"cube on disk:    {disk_bytes(out) / 2**30:,.2f} GiB (zarr, compressed)")
        print(f"peak memory:     {peak / 2**30:,.2f} GiB resident, the whole run "
              f"({peak / in_memory:.1%} of the cube)")
        print(f"read back:       row of {row.size:,} values, finite {np.isfinite(row).all()}; "
              f"first 16 rows {success:,} / {16 * args.side:,} SUCCESS")
        if in_memory < CHECKED_FROM:  # the interpreter with JAX loaded holds more than such a cube
            print(f"memory check:    not made (a cube under {CHECKED_FROM / 2**30:.0f} GiB)")
            return 0
        return 0 if peak < in_memory else 1


if __name__ == "__main__":
    sys.exit(main())

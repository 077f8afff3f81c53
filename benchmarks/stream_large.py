"""A 100-million-point sweep streams to disk: memory stays at a few shards.

Runs `rollsweep run` (inline executor, a shard per core) on the rebound regime
map (a cheap closed-form study) over a 10,000 x 10,000 grid of spin ratio x
incidence angle, in a child process, and reports its peak resident memory next
to the size of the cube it wrote: the cube is never held in memory, each shard
is solved, written to its zarr chunks and dropped. Then checks the finished
cube (`rollsweep verify`: every shard done, values present) and reads a few
rows back lazily.

Run: `python benchmarks/stream_large.py [--side N] [--workers N] [--keep DIR]`
(N x N points; default 10,000: about 1.6 GB of disk).
"""

import argparse
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

OUTPUTS = ["out_vx", "out_vz", "out_wy"]


def sweep_text(side: int, out: pathlib.Path, shard_size: int, workers: int | None = None) -> str:
    return f"""study = "rebound_regime"
outputs = {OUTPUTS}

[axes]
spin_ratio = {{ linspace = [-1.0, 1.0, {side}] }}
incidence_angle = {{ linspace = [0.5, 89.5, {side}] }}

[run]
shard_size = {shard_size}
executor = "inline"
out = "{out}"
""" + (f"workers = {workers}\n" if workers else "")


def disk_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=10_000, help="points per axis (default 10,000: 1e8 points)")
    parser.add_argument("--shard-size", type=int, default=2**20)
    parser.add_argument("--workers", type=int, help="shard threads (default: the engine's)")
    parser.add_argument("--keep", help="write the cube into this folder and keep it")
    args = parser.parse_args()
    rollsweep = pathlib.Path(sys.executable).with_name("rollsweep")

    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "stream_large.zarr"
        config = folder / "stream_large.toml"
        config.write_text(sweep_text(args.side, out, args.shard_size, args.workers))
        points = args.side**2
        print(f"{points:,} points, shards of {args.shard_size:,}, outputs {', '.join(OUTPUTS)}")
        subprocess.run([rollsweep, "validate", config], check=True)

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([rollsweep, "run", config, "--quiet", "--overwrite"], check=True)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU time of the run (all its threads): on a shared machine, a measure of
        # the work done that other processes' load does not inflate as much as wall time.
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        # ru_maxrss of the waited-for children (KiB on Linux): the run's peak.
        peak = after.ru_maxrss * 1024
        subprocess.run([rollsweep, "verify", out], check=True)

        import numpy as np
        import xarray as xr

        cube = xr.open_zarr(out)
        values = sum(cube[name].dtype.itemsize for name in [*OUTPUTS, "status", "num_steps", "num_events"])
        in_memory = points * values
        row = cube["out_vz"].isel(spin_ratio=args.side // 2).values  # one lazy row read back
        success = int((cube["status"].isel(spin_ratio=slice(0, 16)) == 1).sum())

        print(f"run:             {seconds:,.1f} s, {points / seconds:,.0f} points/s end to end; "
              f"CPU {cpu:,.1f} s ({points / cpu:,.0f} points per CPU second, start-up and compile included)")
        print(f"cube in memory:  {in_memory / 2**30:,.2f} GiB if it were held (values + status + counts)")
        print(f"cube on disk:    {disk_bytes(out) / 2**30:,.2f} GiB (zarr, compressed)")
        print(f"peak memory:     {peak / 2**30:,.2f} GiB resident, the whole run "
              f"({peak / in_memory:.1%} of the cube)")
        print(f"read back:       row of {row.size:,} values, finite {np.isfinite(row).all()}; "
              f"first 16 rows {success:,} / {16 * args.side:,} SUCCESS")
        return 0 if peak < in_memory else 1


if __name__ == "__main__":
    sys.exit(main())

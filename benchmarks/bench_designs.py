"""A drawn design against a grid of as many points, end to end.

`rollsweep run` (the default path, no shard_size or batch_size) of the same
study over N points twice: once as a grid of its two axes (sqrt N x sqrt N),
once as a `[samples]` design drawing the same two parameters (scrambled
Sobol', uniform on the same ranges), in alternating rounds in child
processes. The draws (scipy.stats imported for its Sobol' engine, on a
thread of the run's own), the sample coordinates (written by the shards, with
their outputs) and the per-point parameter columns are the design's costs
beyond the grid's: the ratios are the drawn design's rates over the grid's,
end to end (the whole process) and streamed to the store (the run's solving
stage: solves and writes, the coordinates among them, shard by shard).

With --sensitivity, the same with a `[sensitivity]` Sobol' design (Saltelli's
N (D + 2) points, SALib's analysis at the end) against a grid of as many
points: the analysis is inside the drawn run's time.

With --bicycle, the bicycle's 25 design parameters (their ranges from
configs/bicycle_sensitivity.toml, its three outputs) drawn as a `[samples]`
Sobol' design of 2^LOG2 points (default 20), against two grids of as many:
one of w, c and rR (the other 22 parameters fixed, so what depends on them
alone is computed once a call, not once a point), and one of all 25 (LOG2
of them at two values, the rest at one), whose points cost what the
design's do: the design's own costs (its draws, its 26 coordinates) are its
difference from that one.

Run: `python benchmarks/bench_designs.py [--log2 23] [--rounds 2] [--sensitivity | --bicycle]`
(--quick: 2^16 points, one round: a smoke test).
"""

import argparse
import json
import math
import pathlib
import re
import shutil
import sys
import tempfile
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _common import ROOT, machine, print_table, rollsweep_process  # noqa: E402

STUDY = "rebound_regime"  # a closed form: the design's and the store's costs are what is measured
RANGES = {"spin_ratio": (-1.0, 1.0), "incidence_angle": (0.5, 89.5)}


def grid_text(points: int, out: pathlib.Path) -> str:
    side = math.isqrt(points)
    lines = [f'study = "{STUDY}"', "[axes]"]
    lines += [f"{name} = {{ linspace = [{lo!r}, {hi!r}, {side if i == 0 else points // side}] }}"
              for i, (name, (lo, hi)) in enumerate(RANGES.items())]
    return "\n".join(lines + ["[run]", f'out = "{out}"']) + "\n"


def drawn_text(points: int, out: pathlib.Path, sensitivity: bool) -> str:
    # Sobol' with [sensitivity]: N (D + 2) points for N base samples, D = 2.
    n = points // (len(RANGES) + 2) if sensitivity else points
    lines = [f'study = "{STUDY}"', "[samples]"]
    lines += ([] if sensitivity else ['method = "sobol"']) + [f"n = {n}", "seed = 1", "[samples.parameters]"]
    lines += [f"{name} = {{ uniform = [{lo!r}, {hi!r}] }}" for name, (lo, hi) in RANGES.items()]
    if sensitivity:
        lines += ["[sensitivity]", 'method = "sobol"', 'outputs = ["out_vx", "out_wy"]']
    return "\n".join(lines + ["[run]", f'out = "{out}"']) + "\n"


def bicycle_texts(log2: int, folder: pathlib.Path) -> dict[str, str]:
    """--bicycle's sweeps: the grid of w, c and rR, the grid of all 25
    parameters and the drawn design, each of 2^log2 points."""
    spec = tomllib.loads((ROOT / "configs" / "bicycle_sensitivity.toml").read_text())
    ranges = {name: law["uniform"] for name, law in spec["samples"]["parameters"].items()}
    if log2 > len(ranges):
        raise SystemExit(f"--bicycle: at most 2^{len(ranges)} points (a grid of the 25 at two values each)")
    head = ['study = "bicycle"', f"outputs = {json.dumps(spec['outputs'])}"]

    def text(lines, name):
        return "\n".join(head + lines + ["[run]", f'out = "{folder / name}.zarr"']) + "\n"

    sizes = {"w": log2 - 2 * (log2 // 3), "c": log2 // 3, "rR": log2 // 3}  # powers of two, 2^log2 points
    grid3 = ["[axes]"] + [f"{n} = {{ linspace = [{ranges[n][0]!r}, {ranges[n][1]!r}, {1 << k}] }}"
                          for n, k in sizes.items()]
    grid25 = ["[axes]"] + [f"{n} = {{ values = [{lo!r}, {hi!r}] }}" if i < log2 else
                           f"{n} = {{ values = [{(lo + hi) / 2!r}] }}"
                           for i, (n, (lo, hi)) in enumerate(ranges.items())]
    drawn = ["[samples]", 'method = "sobol"', f"n = {1 << log2}", "seed = 1", "[samples.parameters]"]
    drawn += [f"{n} = {{ uniform = [{lo!r}, {hi!r}] }}" for n, (lo, hi) in ranges.items()]
    return {"grid of w, c and rR": text(grid3, "grid"), "grid of all 25": text(grid25, "grid25"),
            "drawn": text(drawn, "drawn")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2", type=int, help="points: 2^LOG2 (default 23: 8.4 million; --bicycle: 20)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sensitivity", action="store_true", help="a [sensitivity] design instead of [samples]")
    parser.add_argument("--bicycle", action="store_true",
                        help="the bicycle's 25 design parameters drawn, against two grids (default 2^20 points)")
    parser.add_argument("--quick", action="store_true", help="2^16 points, one round")
    args = parser.parse_args()
    if args.log2 is None:
        args.log2 = 20 if args.bicycle else 23
    log2, rounds = (16, 1) if args.quick else (args.log2, args.rounds)
    if args.sensitivity:
        log2 += 2  # N (D + 2) = 4 N points: N = 2^log2 / 4 a power of two
    points = 1 << log2
    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-designs-"))
    try:
        texts = bicycle_texts(log2, folder) if args.bicycle else {
            "grid": grid_text(points, folder / "grid.zarr"),
            "drawn": drawn_text(points, folder / "drawn.zarr", args.sensitivity)}
        files = {}
        for name, text in texts.items():
            files[name] = folder / f"{len(files)}.toml"
            files[name].write_text(text)
        for path in files.values():  # untimed: each program compiled into the cache
            rollsweep_process("run", str(path), "--quiet", "--overwrite")
        best = dict.fromkeys(files, math.inf)
        streamed = dict.fromkeys(files, math.inf)
        for _ in range(rounds):
            for name, path in files.items():
                seconds, done = rollsweep_process("run", str(path), "--quiet", "--overwrite")
                best[name] = min(best[name], seconds)
                # The run's own line: its solving stage (solves and writes, streamed shard by shard).
                streamed[name] = min(streamed[name], float(re.search(r"solved in ([0-9.]+) s", done.stdout)[1]))
        what = "[sensitivity] Sobol' design (analysis included)" if args.sensitivity else "[samples] Sobol' design"
        study = "bicycle (25 parameters)" if args.bicycle else STUDY
        print(f"{study}, {points:,} points; {machine()}; best of {rounds} rounds, each a `rollsweep run` process")
        for reference in [name for name in files if name != "drawn"]:
            rows = [(reference, best[reference]), ("drawn design", best["drawn"])]
            print_table(f"{what} against a {reference} of as many points (end to end, the default path)",
                        [(name, points / seconds) for name, seconds in rows], reference, error_headers=())
            rows = [(reference, streamed[reference]), ("drawn design", streamed["drawn"])]
            print_table(f"{what} against a {reference}: streamed to the store (the run's solving stage, its "
                        "own line)", [(name, points / seconds) for name, seconds in rows], reference,
                        error_headers=())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

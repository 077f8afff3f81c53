"""The engine's own cost a point: `rollsweep run` of a study with nothing to solve.

The study (tests/nothing_to_solve: parameters a and b, outputs sum = a + b and
product = a * b, a plain solve_point) is registered as an outside package is,
under the `rollsweep.studies` entry point (_common.write_registration), and
swept on a 2-axis grid as a user writes it, the default path (no shard_size,
no batch_size), at two sizes (default 1e6 = 1000 x 1000 and 1e7 = 1000 x
10000 points). What a run costs is the host side alone: reading and planning
the sweep, packing the points into calls, copying results back, writing the
cube, marking the shards done. On a CPU it stands for a GPU's host side; on a
GPU it is the ceiling of every study.

Each size runs as a whole `rollsweep run` process (an untimed first run fills
the compile cache), in --repeat rounds that alternate the sizes (a slow spell
of a shared machine falls on both), best of the rounds. Per size: the rate of
the run's own "solved in" figure (its summary line's points/s), the whole
process's wall time and rate; between the two sizes the marginal rate (points
difference / wall difference: the start-up cancels). Every run is a `rollsweep
run --profile` (the stages are measured in every run; the flag prints them):
the fastest round's stage table of each size is printed, where the host time
goes.

Beside it, in the same rounds, what a user would write instead: numpy
computing the same two outputs and writing them into a zarr v3 store with the
cube's chunks and codecs (zarr.create_array, then one write of the whole
array), in a python process of its own (numpy and zarr imported, not jax): its
own time from the imports on, and its whole process's. The ratio engine /
numpy+zarr of each figure is printed (the engine also writes each point's
status, steps and events; the peer only the two outputs).

Rows go to $ROLLSWEEP_BENCH_ROWS (_common.record_row) as gpu_lease.sh's part
`host` reads them.

Run: python benchmarks/host_cost.py [--sizes 1000000 10000000] [--repeat 3] [--quick]
"""

import argparse
import json
import math
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import gpu_table  # its reading of a --profile table (standard library only)
from _common import ROOT, TESTS, machine, record_row, rollsweep_process, sweep_text
from _common import write_registration as register

STUDY = "nothing_to_solve"
A_RANGE, B_RANGE = (0.5, 2.0), (-3.0, 3.0)
SUMMARY = re.compile(r"([\d,]+) points solved in ([\d.]+) s \(([\d,]+) points/s\)")
OWN = re.compile(r"computed and written in ([\d.]+) s")

# What a user writes instead: numpy and zarr, nothing else imported.
PEER_SOURCE = r'''
import json, sys, time
start = time.perf_counter()
import numpy as np
import zarr
imported = time.perf_counter()
(n_a, n_b), (a0, a1), (b0, b1), layout, out = json.loads(sys.argv[1]), *map(json.loads, sys.argv[2:5]), sys.argv[5]
a = np.linspace(a0, a1, n_a)[:, None]
b = np.linspace(b0, b1, n_b)[None, :]
compressors = [c for c in layout["codecs"] if c["name"] != "bytes"]
group = zarr.open_group(out, mode="w")
for name, values in (("sum", lambda: a + b), ("product", lambda: a * b)):
    array = group.create_array(name, shape=(n_a, n_b), chunks=layout["chunks"], dtype="float64",
                               compressors=compressors, fill_value=np.nan)
    array[...] = values()
print(f"computed and written in {time.perf_counter() - imported:.6f} s (imports {imported - start:.3f} s)")
'''


def write_registration(folder: pathlib.Path) -> pathlib.Path:
    """The study's package registered in `folder` as `pip install -e` would (a path entry of its own)."""
    return register(folder, TESTS / STUDY, {STUDY: f"{STUDY}:STUDY"})


def grid_shape(points: int) -> tuple[int, int]:
    """Two axes of about `points` in all: 10^(digits // 2) values of a, the rest b
    (1e4: 100 x 100, 1e5: 100 x 1000, 1e6: 1000 x 1000, 1e7: 1000 x 10000)."""
    first = 10 ** (int(math.log10(max(points, 1))) // 2)
    return first, max(1, round(points / first))


def sweep_toml(shape, out) -> str:
    """The sweep a user writes: no shard_size, no batch_size."""
    return sweep_text(STUDY, {"a": {"linspace": [*A_RANGE, shape[0]]}, "b": {"linspace": [*B_RANGE, shape[1]]}},
                      out=out)


def cube_layout(out) -> dict:
    """The chunks and codecs of the cube's `sum` array (the peer writes the same)."""
    meta = json.loads((pathlib.Path(out) / "sum" / "zarr.json").read_text())
    return {"chunks": meta["chunk_grid"]["configuration"]["chunk_shape"], "codecs": meta["codecs"]}


def peer_process(shape, layout, out) -> tuple[float, float]:
    """(wall seconds, its own seconds from the imports on) of the numpy + zarr peer, a process of its own."""
    command = [sys.executable, "-c", PEER_SOURCE, json.dumps(list(shape)), json.dumps(A_RANGE), json.dumps(B_RANGE),
               json.dumps(layout), str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = ([line for line in done.stderr.splitlines() if line.strip()] or [""])[-1]
        raise RuntimeError(f"the numpy + zarr peer exited {done.returncode}: {last}\n{done.stderr[-2000:]}")
    return seconds, float(OWN.search(done.stdout).group(1))


def solved_seconds(output: str, points: int) -> float:
    """The run's own 'solved in' seconds, from its summary's rate (the seconds it
    prints have two decimals: 0.03 s at 3e7 points/s)."""
    summary = SUMMARY.search(output)
    if not summary:
        return math.nan
    rate = float(summary.group(3).replace(",", ""))
    return points / rate if rate else float(summary.group(2))


def profile_lines(output: str) -> list[str]:
    """`rollsweep run --profile`'s table: its first line and the indented ones after it."""
    lines = output.splitlines()
    first = next((k for k, line in enumerate(lines) if line.startswith("where the time went")), None)
    if first is None:
        return []
    table = [lines[first]]
    for line in lines[first + 1:]:
        if not line.startswith(" "):
            break
        table.append(line)
    return table


def engine_process(sweep, registration, *extra) -> tuple[float, float, str]:
    """(wall seconds, 'solved in' seconds, stdout) of one `rollsweep run` process."""
    seconds, done = rollsweep_process("run", str(sweep), "--quiet", "--overwrite", *extra, path=[registration])
    points = int(SUMMARY.search(done.stdout).group(1).replace(",", "")) if SUMMARY.search(done.stdout) else 0
    return seconds, solved_seconds(done.stdout, points), done.stdout


def rate(points, seconds) -> float:
    return points / seconds if seconds and seconds > 0 and math.isfinite(seconds) else math.nan


def marginal(sizes, seconds) -> float:
    """Points/s between the two sizes: (n2 - n1) / (t2 - t1); NaN where the larger was not slower."""
    (n1, n2), (t1, t2) = sizes, seconds
    return (n2 - n1) / (t2 - t1) if t2 > t1 else math.nan


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=(1_000_000, 10_000_000), metavar=("N1", "N2"),
                        help="the two grids' points (each a x b: see grid_shape)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, each running every size once (best of)")
    parser.add_argument("--quick", action="store_true", help="1e4 and 1e5 points, one round: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat = (10_000, 100_000), 1
    shapes = [grid_shape(n) for n in args.sizes]
    sizes = [a * b for a, b in shapes]
    print(f"the engine's own cost a point: `rollsweep run` of a study with nothing to solve ({STUDY}: sum = a + b, "
          f"product = a * b), default path; {machine()}", flush=True)

    with tempfile.TemporaryDirectory(prefix="rollsweep_host_") as tmp:
        folder = pathlib.Path(tmp)
        registration = write_registration(folder / "site")
        sweeps, layouts = [], []
        for (n_a, n_b), n in zip(shapes, sizes, strict=True):
            sweep = folder / f"{STUDY}_{n_a}x{n_b}.toml"
            sweep.write_text(sweep_toml((n_a, n_b), folder / f"{STUDY}_{n}.zarr"))
            engine_process(sweep, registration)  # untimed: fills the compile cache
            sweeps.append(sweep)
            layouts.append(cube_layout(folder / f"{STUDY}_{n}.zarr"))
        walls, solved, peer_walls, peer_own = ([[] for _ in sizes] for _ in range(4))
        profiles = [None] * len(sizes)  # the fastest run's stage table (--profile costs a run nothing: it prints)
        peer_process(shapes[0], layouts[0], folder / "peer_warm.zarr")  # untimed: the file cache warm
        for round_ in range(args.repeat):
            for k, (shape, n) in enumerate(zip(shapes, sizes, strict=True)):
                wall, solved_in, output = engine_process(sweeps[k], registration, "--profile")
                if not walls[k] or wall < min(walls[k]):
                    profiles[k] = profile_lines(output)
                walls[k].append(wall)
                solved[k].append(solved_in)
                wall, own = peer_process(shape, layouts[k], folder / f"peer_{n}.zarr")
                peer_walls[k].append(wall)
                peer_own[k].append(own)
                print(f"round {round_ + 1}, {n:,} points: rollsweep run {walls[k][-1]:.2f} s (solved in "
                      f"{solved[k][-1]:.3f} s); numpy + zarr {peer_walls[k][-1]:.2f} s (own {own:.3f} s)", flush=True)
        title = f"{TITLE}; best of {args.repeat} alternating rounds"
        report(title, shapes, sizes, walls, solved, peer_walls, peer_own, layouts)
        for k, n in enumerate(sizes):
            print(f"\n`rollsweep run --profile`, {n:,} points ({shapes[k][0]} x {shapes[k][1]}), the fastest round's:")
            print("\n".join(profiles[k]) if profiles[k] else "(no profile printed)")
            record_row("rollsweep run --profile, the fastest round's stages", points=n, title=title,
                       note=gpu_table.profile_note("\n".join(profiles[k] or [])).removeprefix("; "))


TITLE = "the engine's own cost a point: nothing to solve, `rollsweep run` (host_cost.py)"


def report(title, shapes, sizes, walls, solved, peer_walls, peer_own, layouts) -> None:
    """The table (printed, and each row recorded): per size the engine's rates and
    the peer's, the ratio engine / peer of each; the marginal rates between the sizes."""
    best = {name: [min(t) for t in times] for name, times in
            (("wall", walls), ("solved", solved), ("peer wall", peer_walls), ("peer own", peer_own))}
    rows = []  # (method, points, points/s, engine / peer, note)
    for k, n in enumerate(sizes):
        grid = f"{shapes[k][0]} x {shapes[k][1]}, chunks {tuple(layouts[k]['chunks'])}"
        own, whole = rate(n, best["solved"][k]), rate(n, best["wall"][k])
        peer_own_rate, peer_whole = rate(n, best["peer own"][k]), rate(n, best["peer wall"][k])
        rows += [
            ("rollsweep run, its own 'solved in'", n, own, own / peer_own_rate,
             f"{grid}; solved in {best['solved'][k]:.3f} s; ratio: against numpy + zarr's own time"),
            ("rollsweep run, whole process", n, whole, whole / peer_whole,
             f"{grid}; {best['wall'][k]:.2f} s; ratio: against numpy + zarr's whole process"),
            ("numpy + zarr (same chunks and codecs), own time after imports", n, peer_own_rate, math.nan,
             f"{best['peer own'][k]:.3f} s"),
            ("numpy + zarr, whole python process", n, peer_whole, math.nan, f"{best['peer wall'][k]:.2f} s"),
        ]
    if len(sizes) == 2:
        span = f"{sizes[0]:,} -> {sizes[1]:,}"
        engine_margin, peer_margin = marginal(sizes, best["wall"]), marginal(sizes, best["peer wall"])
        rows += [
            (f"rollsweep run, marginal rate between the sizes ({span})", sizes[1], engine_margin,
             engine_margin / peer_margin, f"whole processes {best['wall'][0]:.2f} -> {best['wall'][1]:.2f} s"),
            (f"numpy + zarr, marginal rate between the sizes ({span})", sizes[1], peer_margin, math.nan,
             f"whole processes {best['peer wall'][0]:.2f} -> {best['peer wall'][1]:.2f} s"),
        ]
    width = max(len(r[0]) for r in rows)
    print(f"\n{title}")
    print(f"{'method':<{width}} {'points':>12} {'points/s':>14} {'engine/peer':>12}  note")
    for method, n, value, ratio, note in rows:
        ratio_text = f"{ratio:.3g}" if math.isfinite(ratio) else "-"
        value_text = f"{value:,.0f}" if math.isfinite(value) else "-"
        print(f"{method:<{width}} {n:>12,} {value_text:>14} {ratio_text:>12}  {note}")
        record_row(method, value, points=n, ratio=ratio, note=note, title=title)
    print("engine/peer: the engine's points/s against numpy + zarr's in the same figure (own time, whole "
          "process, marginal). The engine writes status, steps and events besides the two outputs.")


if __name__ == "__main__":
    main()

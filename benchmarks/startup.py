"""Time to first shard: `rollsweep run` of every demo config, cold and warm.

For each study's demo configs, two fresh processes run the config in a row with
one new, empty compile cache: the first (cold) traces and compiles, the second
(warm) finds everything it can in the cache. Printed for each: seconds from the
process's start (the parent's clock just before it is spawned, so interpreter
start-up counts) to the end of its first solved shard, the times of its main
stages on the way (imports, sweep parsed, store created), the end of the
command (`end`) and of the process (`process`: the interpreter's exit
included); and the CPU seconds (all threads) the process had used by the end
of its first shard, steadier than wall times on a shared machine. Run as

    python benchmarks/startup.py [--study pingpong] [--repeat 3] [--cores 2]
    python benchmarks/startup.py --config my_sweep.toml --cores 0   (any sweep file)

`--cores` pins the children to that many cores (taskset), as on a small
machine. Times are wall clock on a possibly shared machine: compare medians.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Runs in the child: the CLI's own `run`, with the end of the first shard
# (engine.runner.shard._finish, after its region is written) and the stages before it
# time-stamped on the wall clock, written to a JSON file at exit.
CHILD = r"""
import json, sys, time
stamps = {}
import atexit
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(stamps)))
import engine.cli.commands as cli
stamps["cli imported"] = time.time()
import engine.runner.shard as shard, engine.runner.execute as execute
finish, prepare = shard._finish, execute.prepare
def timed_finish(*args, **kwargs):
    out = finish(*args, **kwargs)
    stamps.setdefault("first shard", time.time())
    stamps.setdefault("first shard cpu", time.process_time())
    return out
def timed_prepare(*args, **kwargs):
    stamps.setdefault("sweep parsed", time.time())
    out = prepare(*args, **kwargs)
    stamps.setdefault("store ready", time.time())
    return out
shard._finish, execute.prepare = timed_finish, timed_prepare
code = cli.entry(sys.argv[2:])
stamps["end"] = time.time()
sys.exit(code)
"""


def demo_configs(only: str | None) -> list[pathlib.Path]:
    found = sorted((ROOT / "studies").glob("*/demo/**/*.toml"))
    return [f for f in found if only is None or f.relative_to(ROOT / "studies").parts[0] == only]


def run_once(config: pathlib.Path, out: pathlib.Path, cache: pathlib.Path, cores: int | None) -> dict:
    stamps_file = out.with_suffix(".json")
    # The checkout first, then whatever PYTHONPATH already holds (on a GPU machine,
    # the folder of the installed packages): extended, never replaced.
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    env = dict(os.environ, ROLLSWEEP_CACHE=str(cache), PYTHONPATH=path)
    command = [sys.executable, "-c", CHILD, str(stamps_file), "run", str(config), "--out", str(out),
               "--overwrite", "--quiet", "--executor", "inline"]
    if cores:
        command = ["taskset", "-c", ",".join(map(str, range(cores)))] + command
    start = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    ended = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{config.name}: exit {done.returncode}\n{done.stderr[-2000:]}")
    stamps = json.loads(stamps_file.read_text())
    stamps["process"] = ended  # the interpreter's exit included
    return {k: v if k.endswith("cpu") else v - start for k, v in stamps.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", help="only this study's demo configs")
    parser.add_argument("--config", type=pathlib.Path, action="append",
                        help="time this sweep file instead of the demo configs (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="cold + warm pairs per config (medians printed)")
    parser.add_argument("--cores", type=int, default=2, help="cores the runs may use (0: all)")
    parser.add_argument("--cache", type=pathlib.Path, help="keep the caches in this folder (a second call of the "
                        "benchmark then measures warm runs only)")
    args = parser.parse_args(argv)
    stages = ("cli imported", "sweep parsed", "store ready", "first shard", "end", "process", "first shard cpu")
    print(f"{'config':<28} {'run':<5} " + " ".join(f"{s:>16}" for s in stages) + "  exported programs")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for config in args.config or demo_configs(args.study):
            rows = {"cold": [], "warm": []}
            for r in range(args.repeat):
                cache = (args.cache or tmp) / f"cache-{config.stem}-{r}"
                for kind in ("cold", "warm"):
                    rows[kind].append(run_once(config, tmp / f"{config.stem}.zarr", cache, args.cores or None))
                # Programs the cold run exported (0: none could be, and every run traces).
                rows["warm"][-1]["programs"] = len(list((cache / "programs").glob("*.stablehlo")))
                if args.cache is None:
                    shutil.rmtree(cache, ignore_errors=True)
            for kind, runs in rows.items():
                cells = [statistics.median(run.get(s, float("nan")) for run in runs) for s in stages]
                stored = f"  {min(run['programs'] for run in runs)}" if kind == "warm" else ""
                print(f"{config.stem:<28} {kind:<5} " + " ".join(f"{c:>15.2f}s" for c in cells) + stored, flush=True)



if __name__ == "__main__":
    main()

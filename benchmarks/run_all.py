"""Run every benchmark (benchmarks/bench_*.py, host_cost.py and host_pipeline.py) in turn, each with its defaults.

Each script runs in its own process (a fresh JAX runtime and numba thread pool)
with this interpreter; their tables print as they come. --quick is passed on
to the scripts that accept it (small grids, a smoke test); the others run with
their defaults. Exit status: non-zero if any benchmark failed.

Run: python benchmarks/run_all.py [--quick] [NAME ...]   (NAME: e.g. hoop for bench_hoop.py, host_cost, host_pipeline)
"""

import argparse
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
# Benchmarks run beside the bench_*.py ones, by their file's stem: the engine's own
# cost a point (a study with nothing to solve, against numpy + zarr).
OTHERS = ("host_cost.py", "host_pipeline.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="run only these (bench_NAME.py, host_cost or host_pipeline)")
    parser.add_argument("--quick", action="store_true", help="small grids, where a benchmark offers --quick")
    args = parser.parse_args()
    scripts = sorted(HERE.glob("bench_*.py")) + [HERE / name for name in OTHERS]
    if args.names:
        known = {s.stem.removeprefix("bench_"): s for s in scripts}
        unknown = [name for name in args.names if name not in known]
        if unknown:
            parser.error(f"no benchmark {', '.join(unknown)} (known: {', '.join(known)})")
        scripts = [known[name] for name in args.names]
    summary = []
    for script in scripts:
        command = [sys.executable, str(script)]
        if args.quick and "--quick" in script.read_text():
            command.append("--quick")
        print(f"\n===== {script.name} {' '.join(command[2:])}".rstrip(), flush=True)
        start = time.perf_counter()
        code = subprocess.call(command, cwd=HERE.parent)
        summary.append((script.name, code, time.perf_counter() - start))
    print("\n===== summary")
    for name, code, seconds in summary:
        print(f"{name:<24} {'ok' if code == 0 else f'FAILED (exit {code})':<18} {seconds:7.0f} s")
    return max((1 for _, code, _ in summary if code), default=0)


if __name__ == "__main__":
    sys.exit(main())

"""Each shipped study's first `evaluate` in a fresh process with no compile
cache: what a user waits for before the first result (tracing and XLA's
compile), on every solver path the CPU takes for it. Run it with two
interpreters to compare JAX lines in the same run, e.g. the README's venv
(jax 0.10) against one of Python 3.12 (the newest JAX):

    python benchmarks/first_evaluate.py --python /path/to/py312/venv/bin/python

Each row is the best of --repeat fresh processes; the ratio column is the other
interpreter's time over this one's.
"""

import argparse
import json
import os
import subprocess
import sys

POINTS = 17  # the bicycle's Table 2 speeds and v = 0: more than one call of 16
BATCH = 16

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
from engine import SolverSettings
from engine._jax_setup import configure
from engine.solve import evaluate
from engine.study.interface import load_study
configure()
import jax
name, solver, points, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
study = load_study(name)
columns = {k: np.full(points, v) for k, v in study.defaults.items()}
imported = time.perf_counter()
evaluate(study, SolverSettings(), columns, batch_size=batch, solver=solver)
done = time.perf_counter()
print(json.dumps({"jax": jax.__version__, "first_evaluate": done - imported, "imports": imported - start}))
"""

STUDIES = ("pingpong", "bicycle", "bicycle_response", "rebound", "rebound_regime", "rebound_table1",
           "rebound_landing", "hoop")


def paths(python):
    """(study, solver) pairs: each study's CPU solvers (vmapped always; lanes where it supports them)."""
    code = ("import json; from engine.solve import SOLVERS; from engine.study.interface import load_study; "
            f"print(json.dumps([[s, n] for s in {STUDIES!r} for n in ('vmapped', 'lanes') "
            "if SOLVERS[n].unsupported(load_study(s)) is None]))")
    return [tuple(p) for p in json.loads(subprocess.run([python, "-c", code], check=True, capture_output=True,
                                                        text=True).stdout)]


def first_evaluate(python, study, solver, repeat, timeout):
    env = dict(os.environ, ROLLSWEEP_CACHE="", JAX_PLATFORMS="cpu")  # no compile cache: XLA compiles
    best = None
    for _ in range(repeat):
        try:
            out = subprocess.run([python, "-c", CHILD, study, solver, str(POINTS), str(BATCH)], env=env,
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"> {timeout} s"
        if out.returncode != 0:
            return None, "FAILED: " + out.stderr.strip().splitlines()[-1]
        row = json.loads(out.stdout.strip().splitlines()[-1])
        best = row if best is None or row["first_evaluate"] < best["first_evaluate"] else best
    return best, f"{best['first_evaluate']:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="a second interpreter (another JAX) to compare with, same rows")
    parser.add_argument("--only", nargs="*", help="study names (default: every shipped study)")
    parser.add_argument("--repeat", type=int, default=2, help="fresh processes per row; the best counts")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a row is given up")
    args = parser.parse_args()
    pythons = [sys.executable] + ([args.python] if args.python else [])
    rows = [p for p in paths(sys.executable) if not args.only or p[0] in args.only]
    versions = [subprocess.run([p, "-c", "import jax; print(jax.__version__)"], capture_output=True, text=True,
                               check=True).stdout.strip() for p in pythons]
    print(f"first evaluate of {POINTS} points (batch {BATCH}), no compile cache, best of {args.repeat}")
    print("| study | solver | " + " | ".join(f"jax {v}" for v in versions) + (" | ratio |" if args.python else " |"))
    print("|---" * (2 + len(pythons) + bool(args.python)) + "|")
    for study, solver in rows:
        cells, times = [], []
        for python in pythons:
            row, text = first_evaluate(python, study, solver, args.repeat, args.timeout)
            cells.append(text)
            times.append(row["first_evaluate"] if row else None)
        ratio = [f"{times[1] / times[0]:.2f}" if None not in times else "-"] if args.python else []
        print("| " + " | ".join([study, solver, *cells, *ratio]) + " |", flush=True)


if __name__ == "__main__":
    main()

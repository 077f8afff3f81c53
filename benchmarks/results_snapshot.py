"""Every result the engine gives, saved, and two saves compared byte for byte.

For a change that must not change results (a refactor): save before, save
after, compare. A save runs every installed study's demo sweeps through
`engine.run` (the default path; the cubes' variables are saved) and
evaluates the first POINTS points of each demo grid with every batch solver
the study supports (the fused one with each CPU kernel backend: Pallas in
interpret mode and the host-compiled C).

Run from the checkout under test (its engine is the one imported):
    python benchmarks/results_snapshot.py save before.npz
    python benchmarks/results_snapshot.py compare before.npz after.npz
"""

import argparse
import dataclasses
import os
import pathlib
import sys
import tempfile

import numpy as np

POINTS = 257  # not a whole number of vectors or blocks: padding is exercised
KERNEL_BACKENDS = ("pallas", "host")


def demo_grid(sweep) -> dict:
    """The first POINTS points of a sweep's grid, every parameter a column."""
    grids = np.meshgrid(*[a.values for a in sweep.axes], indexing="ij")
    columns = [g.reshape(-1)[:POINTS] for g in grids]
    # As a shard has them: fixed parameters, the axes' columns, a drawn design's values.
    params = sweep.point_params([a.name for a in sweep.axes], columns, len(columns[0]))
    return {k: np.array(v, dtype=float) for k, v in params.items()}


def save(path: str) -> None:
    import engine
    from engine._jax_setup import configure
    from engine.solve import evaluate, make_plan
    from engine.solve.plan import SOLVERS, writes_samples

    configure()  # float64, as a run has it
    arrays = {}
    with tempfile.TemporaryDirectory(prefix="rollsweep_snapshot_") as folder:
        for name, load in sorted(engine.available_studies().items()):
            study = load()
            for demo, text in sorted(study.demo_configs.items()):
                sweep = engine.parse_sweep(text, file=f"{name}:demo/{demo}.toml")
                sweep = dataclasses.replace(sweep, out=pathlib.Path(folder) / sweep.out.name)
                engine.run(sweep, overwrite=True, progress=False)
                cube = engine.open_cube(sweep.out)
                arrays |= {f"cube/{demo}/{v}": np.asarray(cube[v].values) for v in sorted(cube.data_vars)}
                params = demo_grid(sweep)
                for solver, implementation in SOLVERS.items():
                    samples_unwritten = sweep.save_times and not writes_samples(solver, sweep.solver.solver)
                    if implementation.unsupported(study) or samples_unwritten:
                        continue
                    for backend in KERNEL_BACKENDS if solver == "fused" else (None,):
                        if backend:
                            os.environ["ROLLSWEEP_KERNEL_BACKEND"] = backend
                        plan = make_plan(study, solver=solver, batch=64 if solver == "fused" else None)
                        result = evaluate(study, sweep.solver, params, outputs=sweep.outputs, plan=plan)
                        key = f"eval/{demo}/{solver}{'-' + backend if backend else ''}"
                        arrays |= {f"{key}/{k}": np.asarray(v) for k, v in result.outputs.items()}
                        arrays |= {f"{key}/{k}": np.asarray(getattr(result, k))
                                   for k in ("status", "num_steps", "num_events")}
                print(f"{demo}: saved", flush=True)
    np.savez(path, **arrays)
    print(f"{len(arrays)} arrays saved to {path}")


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool((a == b).all()) if a.dtype == object else a.tobytes() == b.tobytes()


def compare(first: str, second: str) -> int:
    a, b = np.load(first, allow_pickle=True), np.load(second, allow_pickle=True)
    missing = sorted(set(a.files) ^ set(b.files))
    for key in missing:
        print(f"only in {first if key in a.files else second}: {key}")
    common = sorted(set(a.files) & set(b.files))
    differ = [key for key in common if not same_bytes(a[key], b[key])]
    for key in differ:
        x, y = a[key], b[key]
        if x.dtype.kind == "f" and x.shape == y.shape:
            with np.errstate(invalid="ignore", divide="ignore"):
                relative = np.nanmax(np.abs(x - y) / np.abs(x))
            print(f"differs: {key}: largest relative difference {relative:.1e}")
        else:
            print(f"differs: {key}")
    print(f"{len(common) - len(differ)} of {len(common)} arrays equal byte for byte")
    return 1 if differ or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("save").add_argument("path")
    compared = commands.add_parser("compare")
    compared.add_argument("first")
    compared.add_argument("second")
    args = parser.parse_args()
    if args.command == "save":
        save(args.path)
        return 0
    return compare(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())

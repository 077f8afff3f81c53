"""Results do not depend on batching, shard size or worker count.

One sweep file gives one compiled program per worker, so reruns, resumes and
worker counts agree bit for bit. Another shard or batch size compiles another
program (other vector widths in XLA's code), which may round differently:
those agree to rounding.
"""

import jax
import numpy as np
import pytest

from engine import SolverSettings
from engine.cube.store import open_cube
from engine.runner.execute import run
from engine.solve import evaluate, make_plan
from engine.solve.vmapped import VmappedSolver
from engine.sweep.config import load_sweep
from studies.pingpong import STUDY

from conftest import PINGPONG_DEFAULTS, cubes_identical, sweep_file

SETTINGS = SolverSettings(rtol=1e-10, atol=1e-12)


def test_vmapped_equals_per_point_loop():
    q = np.linspace(0.0, 3.0, 11)
    columns = {k: np.full(q.size, v) for k, v in PINGPONG_DEFAULTS.items()} | {"spin_ratio": q}
    batched = evaluate(STUDY, SETTINGS, columns, batch_size=4, solver="vmapped")
    plan = make_plan(STUDY, solver="vmapped", batch=1)
    unsampled = tuple(o.name for o in STUDY.outputs if not o.sampled)
    single = jax.jit(VmappedSolver().batch_function(STUDY, SETTINGS, unsampled, plan))
    for i in range(q.size):
        outputs, status, steps, events = jax.tree_util.tree_map(
            lambda a: a[0], single({k: v[i : i + 1] for k, v in columns.items()})
        )
        assert status == batched.status[i] and steps == batched.num_steps[i]
        for name, value in outputs.items():
            # Same arithmetic, different program: equal to rounding.
            np.testing.assert_allclose(batched.outputs[name][i], value, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("batch", ["", "batch_size = 8"])
def test_shard_sizes_give_identical_cubes(tmp_path, batch):
    """A point's result depends on its parameters alone, not on how the grid was
    cut: bitwise equal cubes for shard sizes 1, 7, 1000 and the default, with the
    engine's batch or the sweep's (critical search included)."""
    cubes = []
    for shard_size in (1, 7, 1000, None):
        shard = f"shard_size = {shard_size}" if shard_size else ""
        path = sweep_file(tmp_path, f"""
            study = "pingpong"
            [axes]
            spin_ratio = {{ linspace = [0.0, 3.0, 13] }}
            drag = {{ values = [0.05, 0.1] }}
            [critical]
            output = "final_displacement"
            axis = "spin_ratio"
            bracket = [1.0, 3.0]
            [run]
            {shard}
            {batch}
            executor = "inline"
            out = "{tmp_path / f's{shard_size}.zarr'}"
            """, name=f"s{shard_size}.toml")
        sweep = load_sweep(path)
        run(sweep, progress=False)
        cubes.append(open_cube(sweep.out).load())
    for other in cubes[1:]:
        assert cubes_identical(cubes[0].drop_attrs(), other.drop_attrs())


def test_identical_when_run_again(small_sweep, tmp_path):
    path = small_sweep(shard_size=7)
    cubes = []
    for name in ("first", "again"):
        sweep = load_sweep(path, out=str(tmp_path / f"{name}.zarr"))
        run(sweep, progress=False)
        cubes.append(open_cube(sweep.out).load())
    assert cubes_identical(*cubes)


@pytest.mark.parametrize("executor, workers", [("inline", 2), ("local", 1), ("local", 2)])
def test_identical_for_worker_counts(small_sweep, tmp_path, executor, workers):
    path = small_sweep(shard_size=4)
    inline = load_sweep(path, out=str(tmp_path / "inline.zarr"))
    run(inline, workers=1, progress=False)  # one shard after another
    other = load_sweep(path, out=str(tmp_path / f"{executor}{workers}.zarr"))
    run(other, executor=executor, workers=workers, progress=False)
    assert cubes_identical(open_cube(inline.out).load(), open_cube(other.out).load())

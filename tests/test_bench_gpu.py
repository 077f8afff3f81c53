"""The GPU benchmark's hand-written numba CUDA kernel (benchmarks/bench_gpu.py),
run in numba's CUDA simulator on a few points against the rolling ball's closed
form (Gao Yunfeng 2021): a baseline that is wrong would make its row meaningless."""

import os
import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
def test_numba_cuda_kernel_matches_the_closed_form_in_the_simulator():
    pytest.importorskip("numba")
    pytest.importorskip("optimistix")  # bench_pingpong's baselines import it
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(BENCHMARKS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "bench_gpu.py", "--cudasim-check"], cwd=BENCHMARKS, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    error = float(done.stdout.strip().rsplit("=", 1)[1])
    assert error < 1e-9

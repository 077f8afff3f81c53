#!/usr/bin/env bash
# The GPU measurements and checks, in parts that each fit a 10-minute command
# on a GPU machine; every log goes to $OUT (default: gpu-logs/).
#
#   bash benchmarks/gpu_lease.sh tests     # GPU-relevant tests, compiled for the GPU (no interpret mode)
#   bash benchmarks/gpu_lease.sh rolling   # bench_gpu.py: every solver, jit(vmap(diffrax)), numba CPU and CUDA, 1e4..1e7
#   bash benchmarks/gpu_lease.sh studies   # each study's benchmark (bicycle, hoop, landing, rebound) on this machine
#   bash benchmarks/gpu_lease.sh stream    # 1e8 points end to end into a zarr cube, peak host memory
#   bash benchmarks/gpu_lease.sh all       # the four in turn (about 30 minutes: more than one command)
#
# Needs jax with CUDA, numba (with its CUDA target), zarr, xarray, dask and
# this checkout installed; nothing here assumes which GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
PY=${PYTHON:-python}

environment() {
    { date -u; nvidia-smi || true; $PY -c 'import jax; print(jax.__version__, jax.devices())'; } >"$OUT/environment.log" 2>&1
}

tests() {
    $PY -m pytest -p no:cacheprovider -q -x tests/test_fused.py tests/test_outside_models.py tests/test_lanes.py \
        tests/test_hybrid.py tests/test_device_sizing.py tests/test_shard_independence.py tests/test_cli.py \
        tests/test_multidevice.py tests/test_bicycle_response.py >"$OUT/tests.log" 2>&1
}

rolling() {
    $PY benchmarks/bench_gpu.py --sizes 10000 100000 1000000 10000000 >"$OUT/bench_gpu.log" 2>&1
}

studies() {
    $PY benchmarks/run_all.py bicycle hoop landing rebound >"$OUT/studies.log" 2>&1
}

stream() {
    $PY benchmarks/stream_large.py >"$OUT/stream_regime.log" 2>&1
    $PY benchmarks/stream_large.py --study pingpong >"$OUT/stream_pingpong.log" 2>&1
}

environment
case "${1:-all}" in
    tests) tests ;;
    rolling) rolling ;;
    studies) studies ;;
    stream) stream ;;
    all) tests; rolling; studies; stream ;;
    *) echo "usage: $0 tests|rolling|studies|stream|all" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Every GPU measurement and check in one command of under 9 minutes, ending
# with one table (also $OUT/table.md). Run from anywhere on the GPU machine:
#
#   bash benchmarks/gpu_lease.sh            # the device run (carry .gpu: bash benchmarks/gpu_wheels.sh .gpu)
#   SMALL=1 bash benchmarks/gpu_lease.sh    # a trial of the script itself: tiny sizes, GPU-only rows skipped
#
# Each part runs under its own `timeout`, most important first (the whole default
# test suite, 180 s of the budget, then the benchmarks), so that a part
# that hangs or fails costs only itself (and the least important ones); a
# failure is a FAILED row and the script goes on, always exiting 0. The
# timeouts add up to at most BUDGET_S (default 495 s: the command stays under
# 8.5 minutes); the last part gets whatever the others left of it.
# Logs, in $OUT (default gpu-logs/ in the checkout), few files since at most 8
# come back from the machine: setup.log, tests.log, bench.log (bench_gpu,
# bench_kernel, gpu_landing), runs.log (the `rollsweep run`s, host_cost and the 1e8
# stream), rows.jsonl (the rows the table is made of), table.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
SMALL=${SMALL:-0}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROWS=$OUT/rows.jsonl
: >"$ROWS"
rm -f "$OUT"/{setup,tests,bench,runs}.log "$OUT/table.md"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BUDGET_S=${BUDGET_S:-510}  # seconds for all parts (+5 s of a last kill: < 8.75 minutes)
DEADLINE=$((SECONDS + BUDGET_S))
# Benchmarks append each row they measure to $ROWS (benchmarks/_common.py: record_row).
export ROLLSWEEP_BENCH_ROWS=$ROWS

# part NAME LOG TIMEOUT_S COMMAND...: COMMAND under `timeout` (never past the
# deadline), its output appended to $OUT/LOG; its status and what its output
# says are recorded for the table. A failure is a row, never the end.
part() {
    local name=$1 log=$2 limit=$3 left=$((DEADLINE - SECONDS))
    shift 3
    # PARTS="tests run1m ...": only those parts (a follow-up run on a lent machine).
    if [ -n "${PARTS:-}" ] && [[ " $PARTS " != *" ${name%%-*} "* ]]; then return; fi
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        python3 benchmarks/gpu_table.py skip "$ROWS" "$name" "no time left of the $BUDGET_S s budget"
        return
    fi
    echo "===== $name ($(date -u +%T), timeout ${limit} s): $*" | tee -a "$OUT/$log"
    echo "$*" >"$WORK/$name.out"  # its first line: the command, for the table
    local start end rc
    start=$(date +%s.%N)
    # -k: a child that ignores SIGTERM (a dask worker, a stuck CUDA call) is killed 5 s later.
    ROLLSWEEP_BENCH_PART=$name timeout -k 5 "$limit" "$@" </dev/null 2>&1 | tee -a "$OUT/$log" >>"$WORK/$name.out"
    rc=${PIPESTATUS[0]}
    end=$(date +%s.%N)
    echo "===== $name: exit $rc" | tee -a "$OUT/$log"
    python3 benchmarks/gpu_table.py record "$ROWS" "$name" "$rc" "$(awk "BEGIN {print $end - $start}")" "$limit" \
        "$WORK/$name.out" "$(basename "$log")"
}

# ---- set-up: the carried wheels (once a machine; they are for Python 3.12, that machine's),
# then the environment of every part.
if [ -d .gpu ] && python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    # Installed in a child under a timeout (pip could hang), then sourced for its exports only.
    part install setup.log 60 bash -c 'source benchmarks/gpu_install.sh .gpu'
    if [ -f /tmp/site/.ok ]; then source benchmarks/gpu_install.sh .gpu; else echo "install failed: see setup.log"; fi
fi
# `rollsweep` as the wrapper on PATH puts it, else this tree's CLI: never a script beside sys.executable.
if command -v rollsweep >/dev/null; then ROLLSWEEP=(rollsweep); else
    ROLLSWEEP=(python3 -c 'import sys; from engine.cli.commands import entry; sys.exit(entry())'); fi
cat >"$WORK/environment.py" <<'EOF'
import importlib.metadata as metadata, os, platform, jax
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"
names = ["numpy", "diffrax", "numba", "numba-cuda", "zarr", "dask", "xarray"]
print(f"machine: {jax.devices()[0].device_kind} ({jax.default_backend()}), {os.cpu_count()} cores, "
      f"python {platform.python_version()}, jax {jax.__version__}, " + ", ".join(f"{n} {version(n)}" for n in names))
print("backend", jax.default_backend())
EOF
part setup setup.log 20 bash -c "date -u; nvidia-smi || true; python3 '$WORK/environment.py';
    echo PYTHONDONTWRITEBYTECODE=\${PYTHONDONTWRITEBYTECODE:-unset}"
GPU=0
grep -q '^backend gpu' "$WORK/setup.out" 2>/dev/null && GPU=1
if [ "$SMALL" = 1 ]; then
    ROLLING_SIZES="1000 10000"; RUN_POINTS=10000; KERNEL_SIZES="1000 10000"; LANDING=(--quick); SIDE=100
else
    ROLLING_SIZES="1000000 10000000"; RUN_POINTS=1000000; KERNEL_SIZES="1000000 10000000"
    LANDING=(); SIDE=10000
fi

# ---- 1. the whole default test suite (not slow, not slurm) on this device, first: what
# every change of the engine needs checked where its GPU paths run. Across the cores
# (pytest-xdist, a process per core but two; each takes its share of the GPU's memory:
# tests/conftest.py), under a timeout that leaves the benchmarks most of the budget
# (TESTS_S: another). Its row counts the tests passed, failed and skipped, and says
# whether the suite finished in time (else the counts until it was cut off); the log
# lists each skip's reason (tests marked cpu_only) and the 20 slowest tests.
# ROLLSWEEP_BENCH_ROWS unset: a test that runs a benchmark's code adds no row here.
CORES=$(nproc 2>/dev/null || echo 4)
PYTEST=(env -u ROLLSWEEP_BENCH_ROWS python3 -m pytest -p no:cacheprovider -p no:benchmark
        -m "not slow and not slurm" --durations=20)
# -v under xdist: each test's result is a line as it ends, so that a suite cut off by its
# timeout still names the tests that failed (the summary comes only at the end).
if python3 -c 'import xdist' 2>/dev/null; then PYTEST+=(-v -n "$((CORES > 3 ? CORES - 2 : 1))"); else PYTEST+=(-q); fi
[ "$SMALL" = 1 ] && PYTEST+=(-k default_solver)  # the trial: a few quick tests, the same parsing
# TESTS="tests/test_a.py tests/test_b.py::test_c": those alone (a follow-up run: few
# enough to finish within the timeout, so that the log ends with each failure's traceback).
# shellcheck disable=SC2206
[ -n "${TESTS:-}" ] && PYTEST+=(--tb=short $TESTS)
part tests tests.log "${TESTS_S:-180}" "${PYTEST[@]}"

# ---- 2. rolling ball: each engine solver's compiled calls, plain jit(vmap(diffrax)), numba
# on the CPU threads and numba-CUDA, against the closed form.
# shellcheck disable=SC2086
part rolling bench.log 150 python3 benchmarks/bench_gpu.py --sizes $ROLLING_SIZES --budget 20

# ---- 3. `rollsweep run` end to end, 1M points, the engine's own shards and batch (no
# shard_size or batch_size), the tolerances of bench_gpu.py: a first run (a fresh
# machine: it traces and compiles), the same again (--overwrite: what a user's next
# sweep pays), then 4M points (the rate between the two sizes has no start-up in it).
source benchmarks/rolling_toml.sh
for n in "$RUN_POINTS" "$((4 * RUN_POINTS))"; do
    rolling_toml "$n" "$WORK/run$n.zarr" >"$WORK/run$n.toml"
done
RS=$(printf '%q ' "${ROLLSWEEP[@]}")
# KERNEL_BACKENDS="cuda pallas": the runs again with each kernel backend of the fused
# solver (ROLLSWEEP_KERNEL_BACKEND); default: the engine's own choice.
# (`&& true`: else bash execs the last run in its own process, whose start-up stage, counted
# from the process's start, would then hold the two runs before it.)
for backend in ${KERNEL_BACKENDS:-default}; do
    part "run1m-$backend" runs.log 75 env ROLLSWEEP_KERNEL_BACKEND="${backend/default/}" bash -c "
        $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
        $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
        $RS run $WORK/run$((4 * RUN_POINTS)).toml --quiet --overwrite --profile && true"
done
# The same runs with each call's varying columns put in pinned host memory and moved onto the device
# by the call, and its results moved out as one buffer (ROLLSWEEP_PINNED_INPUTS=1
# ROLLSWEEP_PACKED_RESULTS=1, engine.solve.staging; off by default until measured here).
part run1m-staged runs.log 60 env ROLLSWEEP_PINNED_INPUTS=1 ROLLSWEEP_PACKED_RESULTS=1 bash -c "
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
    $RS run $WORK/run$((4 * RUN_POINTS)).toml --quiet --overwrite --profile && true"
# The same runs with the calls' results left in device memory and copied out after each call
# (ROLLSWEEP_PINNED_RESULTS=0, engine.solve.evaluate; the default moves them into pinned host memory).
part run1m-device runs.log 60 env ROLLSWEEP_PINNED_RESULTS=0 bash -c "
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
    $RS run $WORK/run$((4 * RUN_POINTS)).toml --quiet --overwrite --profile && true"

# The same runs as task threads, each task whole on one (ROLLSWEEP_PIPELINE=0), not the pipeline
# (engine.runner.pipeline: this thread queues the calls, writer threads write).
part run1m-threads runs.log 60 env ROLLSWEEP_PIPELINE=0 bash -c "
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
    $RS run $WORK/run$((4 * RUN_POINTS)).toml --quiet --overwrite --profile && true"

# The same warm run twice with JAX's backend started where the run first asks for its devices,
# after its imports (ROLLSWEEP_BACKEND_AHEAD=0), not beside them (engine._jax_setup.start_backend).
part run1m-serial runs.log 45 env ROLLSWEEP_BACKEND_AHEAD=0 bash -c "
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile &&
    $RS run $WORK/run$RUN_POINTS.toml --quiet --overwrite --profile && true"

# ---- 3b. where the 1M-point run's process spends its time: imports, sweep parsed, store
# ready, first shard, end, exit; a cold process (fresh caches: traces, generates, compiles)
# and a warm one (benchmarks/startup.py, every core).
part startup runs.log 60 python3 benchmarks/startup.py --config "$WORK/run$RUN_POINTS.toml" --cores 0

# ---- 4. the fused solver's kernel backends (cuda, pallas), where a colleague's bench_kernel.py
# exists (without a GPU it runs its host and interpret-mode stand-ins: a smoke test).
if [ -f benchmarks/bench_kernel.py ]; then
    # shellcheck disable=SC2086
    part kernel bench.log 45 python3 benchmarks/bench_kernel.py --sizes $KERNEL_SIZES --budget 15
else
    python3 benchmarks/gpu_table.py skip "$ROWS" kernel "benchmarks/bench_kernel.py not in this checkout"
fi

# ---- 4b. many events a point (tests/bouncing_ball: 20.6 impacts a point, 92 at most): the
# engine's compiled calls (the study as written and reading its event log, max_segments 512,
# 128, 1024) against numba DP5 on every CPU thread and numba-CUDA, errors against the closed
# form; 10^6 points (SMALL: 16 x 16).
BOUNCES=(--calls-only --grid 1000 --rounds 2)
[ "$SMALL" = 1 ] && BOUNCES=(--calls-only --quick)
part bounces bench.log 90 python3 benchmarks/bench_bounces.py "${BOUNCES[@]}"

# ---- 5. the bicycle's (trail, speed) map, 10^6 points, as its config file says.
BICYCLE=configs/bicycle_trail_speed.toml
if [ "$SMALL" = 1 ]; then  # 101 speeds instead of 10,001: 10^4 points
    sed 's/10001\]/101]/' "$BICYCLE" >"$WORK/bicycle.toml"
    BICYCLE=$WORK/bicycle.toml
fi
# A first run (traces and compiles), then the same again (--overwrite: the compile cache
# warm), each a part of its own: its whole process's wall time is the part's.
part bicycle runs.log 30 "${ROLLSWEEP[@]}" run "$BICYCLE" --out "$WORK/bicycle.zarr" --quiet --profile
part bicycle-warm runs.log 30 "${ROLLSWEEP[@]}" run "$BICYCLE" --out "$WORK/bicycle.zarr" --quiet --overwrite --profile

# ---- 6. the serve landing map: the engine's compiled calls against plain jit(vmap(diffrax))
# (gpu_landing.py: bench_landing.py's grid and reference, without its many other compilations).
part landing bench.log 40 python3 benchmarks/gpu_landing.py "${LANDING[@]}"

# ---- 6b. the engine's own cost a point: `rollsweep run` of an outside study with nothing to
# solve (tests/nothing_to_solve: sum and product of two parameters) at 1e6 and 1e7 points, the
# default path, whole processes in two alternating rounds, against numpy + zarr writing the same
# values; each run's --profile stages (benchmarks/host_cost.py; SMALL: 1e4 and 1e5, one round).
HOST=(--repeat 2)
[ "$SMALL" = 1 ] && HOST=(--quick)
part host runs.log 60 python3 benchmarks/host_cost.py "${HOST[@]}"

# ---- 7. 1e8 points end to end into a zarr cube, peak host memory: with pinned inputs and packed
# results (engine.solve.staging), as task threads (ROLLSWEEP_PIPELINE=0), then the default way
# in whatever time is left.
part stream-staged runs.log 40 env ROLLSWEEP_PINNED_INPUTS=1 ROLLSWEEP_PACKED_RESULTS=1 \
    python3 benchmarks/stream_large.py --study pingpong --side "$SIDE"
part stream-threads runs.log 40 env ROLLSWEEP_PIPELINE=0 python3 benchmarks/stream_large.py --study pingpong \
    --side "$SIDE"
part stream runs.log $((DEADLINE - SECONDS)) python3 benchmarks/stream_large.py --study pingpong --side "$SIDE"

python3 benchmarks/gpu_table.py table "$ROWS" | tee "$OUT/table.md"
exit 0

#!/usr/bin/env bash
# Where a warm `rollsweep run` process spends its time on this machine, in
# detail: every import it makes (python -X importtime, sorted), and a cProfile
# of its main thread (the start-up, planning and program stages), after a first
# run has filled the caches. One short command for a lent GPU machine (about
# 40 s; carry .gpu), or any machine:
#
#   bash benchmarks/gpu_profile.sh            # 1M rolling-ball points
#   N=10000 bash benchmarks/gpu_profile.sh    # a trial of the script itself
#
# Writes $OUT (default gpu-logs/): profile.log (the runs' --profile reports, the
# sorted imports, the profile's top functions) and run.prof (pstats).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
N=${N:-1000000}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/profile.log
: >"$LOG"
if [ -d .gpu ] && python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    source benchmarks/gpu_install.sh .gpu >>"$LOG" 2>&1
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source benchmarks/rolling_toml.sh
rolling_toml "$N" "$WORK/run.zarr" >"$WORK/run.toml"
# The CLI as a file, so that cProfile and importtime see the whole process.
cat >"$WORK/cli.py" <<'EOF'
import sys
from engine.cli.commands import entry
sys.exit(entry())
EOF
ARGS=(run "$WORK/run.toml" --quiet --overwrite --profile)
{
    echo "== first run (fills the caches), then a warm one"
    timeout 90 python3 "$WORK/cli.py" "${ARGS[@]}"
    timeout 60 python3 "$WORK/cli.py" "${ARGS[@]}"
    echo "== warm run under -X importtime: the 40 slowest imports (cumulative us, self us)"
    timeout 60 python3 -X importtime "$WORK/cli.py" "${ARGS[@]}" 2>"$WORK/imports.txt" >/dev/null
    grep '^import time:' "$WORK/imports.txt" | sed 1d | sort -t'|' -k2 -n -r | head -40
    echo "== warm run under cProfile (main thread)"
    timeout 60 python3 -m cProfile -o "$OUT/run.prof" "$WORK/cli.py" "${ARGS[@]}"
    python3 - "$OUT/run.prof" <<'EOF'
import pstats, sys
stats = pstats.Stats(sys.argv[1])
stats.sort_stats("cumulative").print_stats(70)
stats.sort_stats("tottime").print_stats(30)
EOF
} >>"$LOG" 2>&1
echo "profile: $LOG"

#!/usr/bin/env bash
# demo.sh: the main job in one command (make demo): the seed scenario, shortened, through the
# -30! gateway model (gw30) and through qgate, with the same fast client straight to a worker
# as the baseline. Workers are qworker, a C stand-in for q/worker.q (10M-row tbl2).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${DEMO_SECONDS:-20}
RESULTS=${DEMO_RESULTS:-bench/results}
OUT=$RESULTS/demo-$(date +%Y-%m-%d-%H%M%S)
mkdir -p "$RESULTS" # git-ignored: absent on a fresh clone
ROWS_SHOWN=$(printf "%'d" "${DEMO_ROWS:-10000000}")
echo "demo: two workers (stand-ins for q worker.q, $ROWS_SHOWN rows each); for ${SECS}s per target:"
echo "      big every 4000 ms and fast every 500 ms, straight to the workers, through gw30"
echo "      (a model of the -30! gateway), through qgate, and through qgate with the workers over"
echo "      their Unix sockets (qgate-unix); one target after the other"
SEED_SECS=$SECS ROWS=${DEMO_ROWS:-10000000} BIN=${BIN:-build/rel} bench/run --out "$OUT" seed > "$OUT.log" 2>&1 || { cat "$OUT.log"; exit 1; }
echo
grep -E '^\|( scenario|---| seed)' "$OUT/summary.md"
echo
echo "demo: the fast client's latency over time, per target: $OUT/seed_fast_latency.png"
echo "demo: every sample: $OUT/samples.csv; the run's log: $OUT.log"

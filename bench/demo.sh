#!/usr/bin/env bash
# demo.sh: the main job in one command (make demo). For now: a qworker stand-in with the
# seed's tbl2 and the seed's pair of clients straight to it.
set -euo pipefail
BIN=${BIN:-build/rel}
SECS=${DEMO_SECONDS:-10}
TMP=$(mktemp -d /tmp/qgate-demo.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT

"$BIN/qworker" -p 127.0.0.1:0 --no-uds --quiet > "$TMP/w.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do grep -q listening "$TMP/w.out" && break; sleep 0.05; done
PORT=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$TMP/w.out")
echo "demo: qworker (stand-in for q/worker.q) on 127.0.0.1:$PORT: $(cat "$TMP/w.out")"
"$BIN/qclient" -g "127.0.0.1:$PORT" big 4000 --seconds "$SECS" > "$TMP/big.out" 2> "$TMP/big.err" &
PIDS+=($!)
"$BIN/qclient" -g "127.0.0.1:$PORT" fast 500 --seconds "$SECS" > "$TMP/fast.out" 2> "$TMP/fast.err"
wait "${PIDS[1]}"
tail -n 3 "$TMP/big.out" "$TMP/fast.out"
cat "$TMP/big.err" "$TMP/fast.err"

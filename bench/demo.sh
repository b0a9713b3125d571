#!/usr/bin/env bash
# demo.sh: the main job in one command (make demo). Two qworkers (stand-ins for q worker.q,
# 10M rows), qgate in front of them, the seed's pair of clients through qgate (big every
# 4000 ms, fast every 500 ms), and the same fast client straight to an idle worker; then the
# fast client's latency both ways.
set -euo pipefail
BIN=${BIN:-build/rel}
SECS=${DEMO_SECONDS:-30}
ROWS=${DEMO_ROWS:-10000000}
TMP=$(mktemp -d /tmp/qgate-demo.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

start_worker() { # start_worker NAME: sets port in $TMP/NAME.port
    "$BIN/qworker" -p 127.0.0.1:0 --no-uds --quiet --rows "$ROWS" > "$TMP/$1.out" 2>&1 &
    PIDS+=($!)
}
port_of() {
    for _ in $(seq 1 600); do grep -q listening "$TMP/$1.out" 2>/dev/null && break; sleep 0.05; done
    sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$TMP/$1.out"
}

echo "demo: starting 3 qworkers (stand-ins for q worker.q, $ROWS rows of tbl2 each)"
start_worker w1; start_worker w2; start_worker idle
W1=$(port_of w1); W2=$(port_of w2); WI=$(port_of idle)
"$BIN/qgate" -p 0 --workers "127.0.0.1:$W1,127.0.0.1:$W2" > "$TMP/gw.out" 2> "$TMP/gw.log" &
GWPID=$!
PIDS+=($GWPID)
for _ in $(seq 1 200); do grep -q listening "$TMP/gw.out" 2>/dev/null && break; sleep 0.05; done
GP=$(sed -n 's/^qgate listening on .*:\([0-9]*\)$/\1/p' "$TMP/gw.out")
for _ in $(seq 1 200); do [ "$(grep -c 'connected (capability' "$TMP/gw.log")" -ge 2 ] && break; sleep 0.05; done
echo "demo: qgate on port $GP in front of workers $W1 and $W2; an idle worker on $WI"
echo "demo: for ${SECS}s: big every 4000 ms and fast every 500 ms through qgate,"
echo "      and the same fast client straight to the idle worker"

"$BIN/qclient" -g "127.0.0.1:$GP" big 4000 --seconds "$SECS" --csv "$TMP/big.csv" > "$TMP/big.out" 2> "$TMP/big.err" &
c1=$!
"$BIN/qclient" -g "127.0.0.1:$GP" fast 500 --seconds "$SECS" --csv "$TMP/fast_gw.csv" > "$TMP/fast_gw.out" 2> "$TMP/fast_gw.err" &
c2=$!
"$BIN/qclient" -g "127.0.0.1:$WI" fast 500 --seconds "$SECS" --csv "$TMP/fast_direct.csv" > "$TMP/fast_direct.out" 2> "$TMP/fast_direct.err" &
c3=$!
peak=0
while kill -0 "$c1" 2>/dev/null || kill -0 "$c2" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$GWPID/status" 2>/dev/null || echo 0)
    [ "${rss:-0}" -gt "$peak" ] && peak=$rss
    sleep 0.2
done
wait "$c1" "$c2" "$c3"

echo
echo "big through qgate (10M rows, about 150 MB each):"
sed 's/^/  /' "$TMP/big.out"
echo
stats() { # stats CSV LABEL
    awk -F, 'NR > 1 && $3 == "ok" { print $5 }' "$1" | sort -n | awk -v label="$2" '
        { v[++n] = $1 }
        END {
            if (!n) { printf "  %-22s no successful requests\n", label; exit }
            over = 0; for (i = 1; i <= n; i++) if (v[i] > 100000) over++
            i99 = int(0.99 * n); if (i99 < 0.99 * n) i99++
            printf "  %-22s n=%-4d p50=%8.3f ms  p99=%8.3f ms  max=%8.3f ms  over 100 ms: %d\n",
                   label, n, v[int((n + 1) / 2)] / 1000, v[i99] / 1000, v[n] / 1000, over
        }'
}
echo "fast client latency (stand-in workers; both runs at the same time on this machine):"
stats "$TMP/fast_direct.csv" "straight to a worker"
stats "$TMP/fast_gw.csv" "through qgate"
echo "  qgate peak RSS during the run: $((peak / 1024)) MiB"
failed=$(cat "$TMP"/*.csv | awk -F, 'NR > 1 && $3 != "ok" && $3 != "status"' | wc -l)
echo "  failed requests: $failed"

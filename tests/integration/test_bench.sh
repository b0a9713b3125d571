#!/usr/bin/env bash
# bench/run --quick: one short run per target (the throughput scenario, 1 s at 1 and 64 clients),
# each producing its rows: requests/s, latency, the gateway's CPU per request and system calls,
# the one-hop cost. (Not a measurement: timings are never checked. make bench-smoke runs every
# scenario against every target.)
. "$(dirname "$0")/lib.sh"

BIN=$BIN bench/run --quick --out "$TMP/results" all > "$TMP/bench.log" 2>&1 || { tail -n 30 "$TMP/bench.log"; fail "bench/run --quick all"; }
R="$TMP/results"
for s in "throughput 64 clients|qgate|requests/s" "throughput 64 clients|qgate|gateway CPU us/request" \
         "throughput 1 clients|qgate|p50 us" "one hop|qgate|added p50 us at 1 client" "syscalls|qgate|calls/request, 64 clients"; do
    scen=${s%%|*}; rest=${s#*|}; target=${rest%%|*}; metric=${rest#*|}
    [ "$metric" = "$rest" ] && metric=""
    grep -q "^| $scen | $metric" "$R/summary.md" || fail "summary.md has no row for $scen $metric"
done
for t in direct gw30 haproxy qgate qgate-alog qgate-unix qgate-unix-p3; do
    grep -q "^$t,64,[0-9.]*,[0-9]*,[0-9]*," "$R/throughput.csv" || fail "throughput.csv lacks $t at 64 clients"
    grep -q "^$t,1,[0-9.]*,[0-9]*,[0-9]*," "$R/throughput.csv" || fail "throughput.csv lacks $t at 1 client"
done
for t in haproxy qgate qgate-alog qgate-unix qgate-unix-p3; do # a gateway's CPU per request, and its system calls
    grep -qE "^$t,64,[0-9.]+,[0-9]+,[0-9]+,[0-9.]+$" "$R/throughput.csv" || fail "no CPU per request for $t"
    if command -v strace > /dev/null; then
        grep -qE "^$t,64,(read|recvfrom),[0-9.]+$" "$R/syscalls.csv" || fail "no system-call counts for $t"
    fi
done
grep -q "^| throughput 64 clients | requests/s .* |$" "$R/summary.md" && grep -q "qgate-alog / qgate" "$R/summary.md" ||
    fail "summary.md has no qgate-alog / qgate column"
if command -v gnuplot > /dev/null; then
    for p in throughput_latency throughput_rps; do
        [ -s "$R/$p.png" ] || fail "$p.png missing"
    done
fi
pass "bench/run --quick: one short run per target, each in throughput.csv, syscalls.csv and summary.md"

# bench/pending: a row per pending_max, the bound's bytes in it (not a measurement: RSS unchecked)
BIN=$BIN bench/pending --clients 3 --size 300000 --settle 2 500000 > "$TMP/pending.log" 2>&1 ||
    { cat "$TMP/pending.log"; fail "bench/pending"; }
grep -qE '^\| qgate \| 500000 \| [0-9]+ \| 300029 \| [12] \|$' "$TMP/pending.log" ||
    fail "bench/pending: $(tail -n 3 "$TMP/pending.log")"
pass "bench/pending: peak RSS and pending_bytes under a small pending_max (one request read, two waiting)"

# bench/cpu: a row per target and round, the floor (qfloor) among them, each answering (not a
# measurement: the figures are unchecked)
BIN=$BIN bench/cpu --clients 4 --rounds 1 --seconds 1 > "$TMP/cpu.log" 2>&1 || { cat "$TMP/cpu.log"; fail "bench/cpu"; }
for t in haproxy qgate qgate-unix floor floor-unix; do
    grep -qE "^4 +1 +$t +[0-9.]+ +[0-9.]+ " "$TMP/cpu.log" || fail "bench/cpu: no row for $t: $(tail -n 6 "$TMP/cpu.log")"
done
pass "bench/cpu: a row for HAProxy, qgate and the floor (qfloor), over TCP and Unix sockets"

#!/usr/bin/env bash
# bench/run --quick: every scenario against its targets (slow and nplus1 against qgate alone),
# briefly and on small data, produces its rows, its samples and its plots. (Not a measurement:
# timings are never checked. make bench-smoke runs every scenario against every target.)
. "$(dirname "$0")/lib.sh"

BIN=$BIN bench/run --quick --out "$TMP/results" all > "$TMP/bench.log" 2>&1 || { tail -n 30 "$TMP/bench.log"; fail "bench/run --quick all"; }
R="$TMP/results"
for s in "seed|direct|fast p99 ms" "seed|gw30|fast p99 ms" "seed|qgate|fast p99 ms" "slow|qgate" "nplus1|qgate" \
         "throughput 64 clients|qgate|requests/s" "throughput 64 clients|qgate|gateway CPU us/request" \
         "one hop|qgate|added p50 us at 1 client" "syscalls|qgate|calls/request, 64 clients" "bigreply|qgate|peak RSS" "mix|qgate|fast share" "mix|gw30|ping share" \
         "connections|qgate|RSS per idle client" "connections|gw30|handshakes/s" "fanout|fan-out (4 x" "fanout|fast p99 ms"; do
    scen=${s%%|*}; rest=${s#*|}; target=${rest%%|*}; metric=${rest#*|}
    [ "$metric" = "$rest" ] && metric=""
    grep -q "^| $scen | $metric" "$R/summary.md" || fail "summary.md has no row for $scen $metric"
done
for t in direct gw30 qgate; do
    grep -q "^seed,$t,fast," "$R/samples.csv" || fail "no seed samples for $t"
    grep -q "^fanout,$t,fanout,.*,ok$" "$R/samples.csv" || fail "no fan-out answered for $t"
done
for t in direct gw30 haproxy qgate qgate-alog qgate-unix qgate-unix-p3; do
    grep -q "^$t,64,[0-9.]*,[0-9]*,[0-9]*," "$R/throughput.csv" || fail "throughput.csv lacks $t at 64 clients"
done
for t in haproxy qgate qgate-alog qgate-unix qgate-unix-p3; do # a gateway's CPU per request, and its system calls
    grep -qE "^$t,64,[0-9.]+,[0-9]+,[0-9]+,[0-9.]+$" "$R/throughput.csv" || fail "no CPU per request for $t"
    grep -qE "^$t,64,(read|recvfrom),[0-9.]+$" "$R/syscalls.csv" || fail "no system-call counts for $t"
done
for t in qgate qgate-unix; do
    grep -q "^seed,$t,fast," "$R/samples.csv" || fail "no seed samples for $t"
    grep -q "^bigreply,$t,big,.*,ok$" "$R/samples.csv" || fail "no 10M-row-scenario reply for $t"
done
grep -q "^| throughput 64 clients | requests/s .* |$" "$R/summary.md" && grep -q "qgate-alog / qgate" "$R/summary.md" ||
    fail "summary.md has no qgate-alog / qgate column"
if command -v gnuplot > /dev/null; then
    for p in seed_fast_latency throughput_latency throughput_rps; do
        [ -s "$R/$p.png" ] || fail "$p.png missing"
    done
fi
pass "bench/run --quick all: every scenario and its targets in summary.md, samples and plots"

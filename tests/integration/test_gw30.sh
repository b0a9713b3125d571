#!/usr/bin/env bash
# gw30, the model of the -30! gateway, answers every qclient mode with the same reply bytes as
# qgate and as a worker straight, and serves big and fast clients side by side.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 300000
start_worker W2 --rows 300000
"$BIN/gw30" -p 127.0.0.1:0 --workers "127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT" > "$TMP/G30.out" 2> "$TMP/G30.log" &
PIDS+=($!)
wait_line "$TMP/G30.out" "gw30 listening on" 20
G30=$(sed -n 's/^gw30 listening on .*:\([0-9]*\) .*/\1/p' "$TMP/G30.out")
start_gateway QG --workers "127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT"

for m in fast big smallbig med bigbig bigsmall ss throw:boom ssthrow:bang; do
    name=${m%%:*}
    for t in direct gw30 qgate; do
        case $t in direct) p=$W1_PORT ;; gw30) p=$G30 ;; qgate) p=$QG_PORT ;; esac
        timeout --foreground 120 "$BIN/qclient" -g "127.0.0.1:$p" "$m" 0 --count 1 --dump "$TMP/$name.$t" > "$TMP/$name.$t.out" 2> /dev/null \
            || fail "qclient $m via $t"
    done
    cmp -s "$TMP/$name.direct" "$TMP/$name.gw30" || fail "$m: gw30's reply differs from the worker's"
    cmp -s "$TMP/$name.direct" "$TMP/$name.qgate" || fail "$m: qgate's reply differs from the worker's"
    sed 's/ in dur :: .*//' "$TMP/$name.direct.out" > "$TMP/a"; sed 's/ in dur :: .*//' "$TMP/$name.gw30.out" > "$TMP/b"
    cmp -s "$TMP/a" "$TMP/b" || fail "$m: printed lines differ"
done
pass "every qclient mode: gw30, qgate and a worker give identical reply bytes"

# big and fast side by side through gw30: every request answered (how long fast waits is
# for bench/run to measure, not for a test)
"$BIN/qclient" -g "127.0.0.1:$G30" big 0 --count 4 --quiet 2> /dev/null &
pb=$!
wait_any ": big" 30 "$TMP/W1.log" "$TMP/W2.log"   # big is under way
"$BIN/qclient" -g "127.0.0.1:$G30" fast 20 --count 30 --csv "$TMP/f30.csv" --quiet 2> /dev/null
wait $pb
grep -q "ok,1," "$TMP/f30.csv" || fail "fast via gw30 failed"
pass "gw30 serves fast and big side by side"

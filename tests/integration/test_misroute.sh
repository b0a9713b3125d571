#!/usr/bin/env bash
# A q worker may answer sync requests out of order: .z.pg defers one with -30!(::) and answers
# it later with -30!(h;0b;x) while it goes on reading and answering others, on the same handle
# too; every -30! gateway tier does this. A reply must still reach its own client: qgate
# carries one request per worker connection at a time, whatever pipeline says.
#
# Two workers that answer out of order, each behind qgate at the defaults (pipeline 1), at
# pipeline 1, 2 and 3 with pipeline_wait 0 (so that requests do go to a busy worker), and at
# pipeline 3 with the learned-fast rule (pipeline_wait 1000 ms, wide enough that every echo is
# learned fast on any machine):
#   (a) a qworker with --defer 50:3 (every 50th sync request answered 3 ms later);
#   (b) bench/gw30 (the model of q/30gw.q, which defers every reply) over two qworkers.
# 12 qsoak connections each send 150 requests "echo ID|PAD" (through gw30 as
# (`.gateway.exec; "echo ID|PAD")) and check that every reply is their own; the run ends when
# all are answered. Every request must be answered with its own reply: none misrouted, lost,
# closed or answered twice; at pipeline >= 2, .qgate.totals[] must show requests pipelined.
# Every case runs; the failure names each failed case with its misrouted count. On qgate 0.12.0,
# which stacked requests on one worker connection and matched replies by order, every
# pipeline >= 2 case failed (hundreds of the 1,800 replies misrouted) and pipeline 1 passed.
. "$(dirname "$0")/lib.sh"

CONNS=12
PER=150
start_worker D --rows 1000 --defer 50:3
start_worker W1 --rows 1000
start_worker W2 --rows 1000
"$BIN/gw30" -p 127.0.0.1:0 --workers "127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT" > "$TMP/G30.out" 2> "$TMP/G30.log" &
PIDS+=($!)
wait_line "$TMP/G30.out" "gw30 listening on" 20
G30_PORT=$(sed -n 's/^gw30 listening on .*:\([0-9]*\) .*/\1/p' "$TMP/G30.out")

# pipelined: .qgate.totals[] pipelined of the gateway at $G
pipelined() {
    timeout --foreground 5 "$BIN/qsend" -g "$G" ".qgate.totals[]" |
        awk -F'!' '{ nk = split($1, k, "`"); split($2, v, " "); for (i = 2; i <= nk; i++) if (k[i] == "pipelined") print v[i - 1] }'
}

FAILED=()
# bad WHAT: a case failed; the others still run, and the test fails at the end naming them all
bad() { echo "not ok - $*" >&2; FAILED+=("$*"); }

# run SETUP PIPELINE|default: qgate over SETUP's worker with that pipeline, then the soak
run() {
    local setup=$1 pl=$2 name port args=() keys="" what how
    case $setup in
        a) port=$D_PORT; what="qworker --defer 50:3" ;;
        b) port=$G30_PORT; what="gw30 over two qworkers"; args=(--exec) ;;
    esac
    case $pl in
        default) how="the defaults (pipeline 1)" ;;
        1) keys="pipeline = 1"; how="pipeline 1" ;;
        learn) keys=$(printf 'pipeline = 3\npipeline_wait = 1000'); how="pipeline 3, pipeline_wait 1000 (learned fast)" ;;
        *) keys=$(printf 'pipeline = %s\npipeline_wait = 0' "$pl"); how="pipeline $pl, pipeline_wait 0" ;;
    esac
    what="($setup) $what, $how"
    name=Q$setup$pl
    printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group main]\nworkers = 127.0.0.1:%s\n%s\n' "$port" "$keys" > "$TMP/$name.conf"
    start_gateway "$name" -c "$TMP/$name.conf"
    wait_line "$TMP/$name.log" "connected \(capability" 10
    G="127.0.0.1:$(eval echo "\$${name}_PORT")"
    # --cycle: each connection repeats 10 requests, so that pipeline_wait (the learn case)
    # learns them fast and sends requests to a busy worker
    timeout --foreground 60 "$BIN/qsoak" -g "$G" -c "$CONNS" --requests "$PER" --cycle 10 --max-pad 65536 --seconds 30 --drain 5 \
        "${args[@]}" > "$TMP/$name.soak" 2> "$TMP/$name.soak.err" || true
    local line mis p ok=1 total=$((CONNS * PER))
    line=$(grep '^qsoak requests=' "$TMP/$name.soak" || true)
    p=$(pipelined)
    if [ -z "$line" ]; then
        bad "$what: qsoak printed no summary: $(tail -3 "$TMP/$name.soak.err" | tr '\n' ' ')"
        ok=0
    else
        line=${line%% rss_kb_min=*}
        mis=$(sed -n 's/.* misrouted=\([0-9]*\).*/\1/p' <<< "$line")
        if [ "$mis" != 0 ]; then
            bad "$what: $mis of $total replies misrouted (handed to another client): $line; pipelined=$p"
            ok=0
        elif ! grep -qE "^qsoak requests=$total ok=$total qerrors=0 closed=0 lost=0 duplicated=0 misrouted=0\$" <<< "$line"; then
            bad "$what: not every request answered with its own reply: $line"
            ok=0
        fi
    fi
    if [ "$pl" = 1 ] || [ "$pl" = default ]; then
        [ "$p" = 0 ] || { bad "$what: $p requests went to a busy worker"; ok=0; }
    elif ! { [ -n "$p" ] && [ "$p" -gt 0 ]; }; then
        bad "$what: nothing was pipelined (.qgate.totals[] pipelined=${p:-none}): the case shows nothing"
        ok=0
    fi
    local pid
    pid=$(eval echo "\$${name}_PID")
    kill -TERM "$pid"
    wait_exit "$pid" 30
    [ "$EXIT_STATUS" = 0 ] || { bad "$what: qgate exited $EXIT_STATUS on SIGTERM"; ok=0; }
    [ $ok = 0 ] || pass "$what: $total requests from $CONNS clients, each answered with its own reply (pipelined=$p)"
}

for setup in a b; do
    for pl in default 1 2 3 learn; do
        run "$setup" "$pl"
    done
done
# --- async = broadcast: a worker owing a broadcast when a client's request is given to it sends
# the broadcast and its chaser (a sync "") first; a worker that defers a reply may answer the
# chaser after the request. Per round: C holds the worker, A broadcasts, B's sync echo waits,
# the hold ends. The request goes once the chaser is back (0.12's successors sent all three at
# once and took the first reply for the chaser: B got the chaser's :: and its reply was dropped,
# in every round whose chaser the worker deferred) -----------------------------------------
start_worker DB --rows 10 --defer 2:300
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\nasync = broadcast\n' "$DB_PORT" > "$TMP/db.conf"
start_gateway GB -c "$TMP/db.conf" --loglevel debug
wait_line "$TMP/GB.log" "connected \\(capability 3\\)" 10
for i in 1 2 3 4; do
    timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$GB_PORT" "hold h$i" > "$TMP/C$i.out" 2>&1 &
    pc=$!
    wait_count "$TMP/DB.log" "hold h" "$i" 10
    timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$GB_PORT" "neg:echo bcast$i" > /dev/null 2>&1
    wait_count "$TMP/GB.log" ": async, [0-9]+ bytes" "$i" 10
    timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$GB_PORT" "echo reply$i" > "$TMP/B$i.out" 2>&1 &
    pb=$!
    wait_count "$TMP/GB.log" ": sync, [0-9]+ bytes" $((2 * i)) 10
    release "h$i" "$DB_PORT"
    wait "$pc" "$pb" || true
    grep -qx "\"reply$i\"" "$TMP/B$i.out" || fail "round $i: B sent echo reply$i and got: $(cat "$TMP/B$i.out")"
done
grep -c "echo bcast" "$TMP/DB.log" | grep -qx 4 || fail "the worker ran $(grep -c "echo bcast" "$TMP/DB.log") of the 4 broadcasts"
pass "a broadcast group's worker that defers replies: a request given with a broadcast owed goes after its chaser's reply, and gets its own reply (4 rounds)"

# --- async = broadcast, two senders owed at once: a worker that defers its sync replies ran the
# second sender's broadcast while the first's chaser was still unanswered, and what that
# broadcast published went to the first sender (qgate sent both runs, each with its chaser, in
# one go). Per round: C holds the worker, A and B each broadcast a publish (notify 1) and then
# ask a sync echo, the hold ends. One sender's run goes at a time now, the next once the chaser
# is back: each sender gets its own publish and nobody else's --------------------------------
start_worker DM --rows 10 --defer 1:200
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\nasync = broadcast\n' "$DM_PORT" > "$TMP/dm.conf"
start_gateway GM -c "$TMP/dm.conf" --loglevel debug
wait_line "$TMP/GM.log" "connected \\(capability 3\\)" 10
for i in 1 2 3; do
    timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$GM_PORT" "hold m$i" > "$TMP/MC$i.out" 2>&1 &
    pc=$!
    wait_count "$TMP/DM.log" "hold m" "$i" 10
    pids=()
    for s in A B; do
        timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$GM_PORT" --pipeline "neg:notify 1 pub$s$i" "echo done$s$i" > "$TMP/M$s$i.out" 2>&1 &
        pids+=($!)
    done
    wait_count "$TMP/GM.log" ": async, [0-9]+ bytes" $((2 * i)) 10
    release "m$i" "$DM_PORT"
    wait "$pc" "${pids[@]}" || true
    for s in A B; do
        o=$(tr '\n' ' ' < "$TMP/M$s$i.out")
        grep -q "pub$s$i" "$TMP/M$s$i.out" || fail "round $i: $s broadcast notify 1 pub$s$i and did not get its publish: $o"
        grep -q "pub[AB]$i" <(grep -v "pub$s$i" "$TMP/M$s$i.out") && fail "round $i: $s got another sender's publish: $o"
        grep -qx "\"done$s$i\"" "$TMP/M$s$i.out" || fail "round $i: $s sent echo done$s$i and got: $o"
    done
done
grep -q "defer: sync request" "$TMP/DM.log" || fail "the worker deferred nothing: the case shows nothing"
pass "a broadcast group's worker that defers replies, two senders' broadcasts owed: each sender gets its own publish and nobody else's (3 rounds)"

[ ${#FAILED[@]} = 0 ] || fail "${#FAILED[@]} of 10 cases failed:$(printf '\n  %s' "${FAILED[@]}")"

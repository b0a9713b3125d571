#!/usr/bin/env bash
# reuseport = 1: two qgates on one port, each with its own worker. --check accepts the key;
# without it a second process on a port fails to start, saying why; with it the kernel spreads
# 200 clients over both; a reload of one, under load, costs no client of either an error; q's
# Unix socket for the port is served by one of them, and taken over by the other when it stops.
. "$(dirname "$0")/lib.sh"

start_worker WA --rows 1000
start_worker WB --rows 1000
# distinct free ports: the shared one and each gateway's metrics port
PORT=$(pick_port)
MA=$(pick_port)
while [ "$MA" = "$PORT" ]; do MA=$(pick_port); done
MB=$(pick_port)
while [ "$MB" = "$PORT" ] || [ "$MB" = "$MA" ]; do MB=$(pick_port); done
# conf FILE WORKER_PORT METRICS_PORT REUSEPORT [MAX_QUEUE]
conf() {
    printf '[gateway]\nbind = 127.0.0.1\nreuseport = %s\nmetrics_port = %s\nmax_queue = %s\n[group main]\nworkers = 127.0.0.1:%s\n' \
        "$4" "$3" "${5:-1000}" "$2" > "$1"
}
# accepted METRICS_PORT: the client connections that gateway accepted
accepted() { METRICS_PORT=$1 metric qgate_connections_accepted_total; }
# served_by PORT...: the gateway answering .qgate.stats[] on q's Unix socket lists PORT's worker
served_by() {
    timeout --foreground 10 "$BIN/qsend" -g "unix:$PORT" ".qgate.stats[]" > "$TMP/stats.out" 2>&1 || return 1
    grep -q "127.0.0.1:$1" "$TMP/stats.out"
}
conf "$TMP/a.conf" "$WA_PORT" "$MA" 1
conf "$TMP/b.conf" "$WB_PORT" "$MB" 1

# --- --check and --print-config know the key -----------------------------------------------------
"$BIN/qgate" --check -c "$TMP/a.conf" > "$TMP/out" 2>&1 || fail "--check refused reuseport = 1: $(cat "$TMP/out")"
expect_file_has "$TMP/out" "configuration ok"
printf '[gateway]\nreuseport = maybe\n' > "$TMP/bad.conf"
set +e; "$BIN/qgate" --check -c "$TMP/bad.conf" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "--check accepted reuseport = maybe"
expect_file_has "$TMP/err" "bad.conf:2: reuseport: 'maybe' is not a boolean"
"$BIN/qgate" --print-config > "$TMP/ref"
grep -qx "reuseport = 0" "$TMP/ref" || fail "--print-config has no 'reuseport = 0'"
pass "--check accepts reuseport = 1 and names a bad value; --print-config documents it (default 0)"

# --- without reuseport a second process on the port does not start --------------------------------
conf "$TMP/plain.conf" "$WA_PORT" 0 0
start_gateway GP -c "$TMP/plain.conf" -p "$PORT"
[ "$GP_PORT" = "$PORT" ] || fail "the first gateway listens on $GP_PORT, not $PORT"
# start_second NAME CONF: a second qgate on PORT; it must exit 1 (EXIT_STATUS), log in $TMP/NAME.log
start_second() {
    "$BIN/qgate" -c "$2" -p "$PORT" > "$TMP/$1.out" 2> "$TMP/$1.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_exit "$pid" 30
    [ "$EXIT_STATUS" -eq 1 ] || fail "$1: a second qgate on port $PORT exited $EXIT_STATUS, want 1"
}
start_second P2 "$TMP/plain.conf"
expect_file_has "$TMP/P2.log" "error cannot listen on 127.0.0.1:$PORT: Address already in use\$"
# one with reuseport cannot join a port held without it, and says what it needs
conf "$TMP/rp.conf" "$WA_PORT" 0 1
start_second R2 "$TMP/rp.conf"
expect_file_has "$TMP/R2.log" \
    "cannot listen on 127.0.0.1:$PORT: Address already in use \\(every process sharing a port must set reuseport = 1"
kill -TERM "$GP_PID"
wait_exit "$GP_PID" 30
[ "$EXIT_STATUS" -eq 0 ] || fail "the plain gateway exited $EXIT_STATUS on SIGTERM"
pass "without reuseport a second qgate on a port exits 1: 'cannot listen on 127.0.0.1:$PORT: Address already in use'"

# --- two with reuseport share it; the first has q's Unix socket, the second says it has not -------
start_gateway GA -c "$TMP/a.conf" -p "$PORT"
wait_line "$TMP/GA.log" "connected \\(capability 3\\)" 10
start_gateway GB -c "$TMP/b.conf" -p "$PORT"
wait_line "$TMP/GB.log" "connected \\(capability 3\\)" 10
[ "$GA_PORT" = "$PORT" ] && [ "$GB_PORT" = "$PORT" ] || fail "the gateways listen on $GA_PORT and $GB_PORT, not $PORT"
expect_file_has "$TMP/GA.log" "listening on 127.0.0.1:$PORT and q's Unix socket\$"
expect_file_has "$TMP/GB.log" "warn  q's Unix socket @.*/kx\\.$PORT is held by another process .*serves TCP clients only"
expect_file_has "$TMP/GB.log" "listening on 127.0.0.1:$PORT\$"
served_by "$WA_PORT" || fail "q's Unix socket is not served by the first gateway: $(cat "$TMP/stats.out")"
grep -q "127.0.0.1:$WB_PORT" "$TMP/stats.out" && fail "the first gateway's .qgate.stats[] lists the other's worker"
pass "two qgates with reuseport = 1 listen on port $PORT; the second warns that it serves TCP only"

# --- 200 clients spread over both ------------------------------------------------------------------
a0=$(accepted "$MA")
b0=$(accepted "$MB")
"$BIN/qload" -g "127.0.0.1:$PORT" --class s:text=echo\ 1:200 --warmup 0 --seconds 2 > "$TMP/load.out" 2> "$TMP/load.err" \
    || fail "qload: $(cat "$TMP/load.out" "$TMP/load.err")"
expect_file_has "$TMP/load.out" "conns=200 requests=[1-9][0-9]* .* qerrors=0 failed=0\$"
a1=$(accepted "$MA")
b1=$(accepted "$MB")
da=$((a1 - a0))
db=$((b1 - b0))
[ "$da" -gt 0 ] && [ "$db" -gt 0 ] || fail "200 connections: the first gateway accepted $da, the second $db"
[ $((da + db)) -eq 200 ] || fail "the gateways accepted $da + $db connections, qload opened 200"
ea=$(grep -c "echo 1" "$TMP/WA.log" || true)
eb=$(grep -c "echo 1" "$TMP/WB.log" || true)
[ "$ea" -gt 0 ] && [ "$eb" -gt 0 ] || fail "the workers ran $ea and $eb of the requests"
pass "200 connections to port $PORT: $da accepted by one qgate, $db by the other; each one's worker served ($ea, $eb)"

# --- a reload of one under load: no client of either sees an error ---------------------------------
"$BIN/qload" -g "127.0.0.1:$PORT" --class r:text=echo\ 2:40 --warmup 0 --seconds 6 > "$TMP/load.out" 2> "$TMP/load.err" &
lp=$!
PIDS+=("$lp")
wait_count "$TMP/WA.log" "echo 2" 50 20                               # the load is on, through both
wait_count "$TMP/WB.log" "echo 2" 50 20
conf "$TMP/a.conf" "$WA_PORT" "$MA" 0 500                   # a restart key and a live one changed
kill -HUP "$GA_PID"
wait_line "$TMP/GA.log" "reload: done" 20
kill -0 "$lp" 2> /dev/null || fail "the load ended before the reload was done"
expect_file_has "$TMP/GA.log" "warn  reload: port, bind, unix_socket, reuseport, metrics_port, metrics_bind and thread counts change only on restart; kept as running until a restart: reuseport"
na=$(grep -c "echo 2" "$TMP/WA.log" || true)
nb=$(grep -c "echo 2" "$TMP/WB.log" || true)
wait_count "$TMP/WA.log" "echo 2" $((na + 50)) 20                     # both go on serving
wait_count "$TMP/WB.log" "echo 2" $((nb + 50)) 20
wait "$lp" || fail "qload during the reload: $(cat "$TMP/load.out" "$TMP/load.err")"
expect_file_has "$TMP/load.out" "conns=40 requests=[1-9][0-9]* .* qerrors=0 failed=0\$"
grep -q "SIGHUP\|reload" "$TMP/GB.log" && fail "the other gateway saw a reload: $(grep "SIGHUP\|reload" "$TMP/GB.log")"
a2=$(accepted "$MA")
"$BIN/qload" -g "127.0.0.1:$PORT" --class t:text=echo\ 3:50 --warmup 0 --seconds 1 > "$TMP/load.out" 2> "$TMP/load.err" \
    || fail "qload after the reload: $(cat "$TMP/load.out" "$TMP/load.err")"
[ "$(accepted "$MA")" -gt "$a2" ] || fail "the reloaded gateway no longer gets new connections of port $PORT"
pass "SIGHUP of one under load through both: 0 errors in 40 clients, the other untouched, reuseport kept until restart"

# --- the holder of q's Unix socket stops: the other takes the socket over and all of the port ------
kill -TERM "$GA_PID"
wait_exit "$GA_PID" 30
[ "$EXIT_STATUS" -eq 0 ] || fail "the first gateway exited $EXIT_STATUS on SIGTERM"
wait_line "$TMP/GB.log" "listening on q's Unix socket @.*/kx\\.$PORT: its holder released it" 10
served_by "$WB_PORT" || fail "q's Unix socket is not served by the second gateway: $(cat "$TMP/stats.out")"
b2=$(accepted "$MB")
"$BIN/qload" -g "127.0.0.1:$PORT" --class u:text=echo\ 4:20 --warmup 0 --seconds 1 > "$TMP/load.out" 2> "$TMP/load.err" \
    || fail "qload with one gateway left: $(cat "$TMP/load.out" "$TMP/load.err")"
expect_file_has "$TMP/load.out" "conns=20 .* qerrors=0 failed=0\$"
[ $(($(accepted "$MB") - b2)) -eq 20 ] || fail "the remaining gateway accepted $(($(accepted "$MB") - b2)) of 20"
pass "the first stops: the second takes q's Unix socket over and every new connection of port $PORT"

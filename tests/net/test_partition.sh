#!/usr/bin/env bash
# A worker cut off without a word, in network namespaces: its host's port on the switch goes
# down, so nothing arrives from it, not even a FIN or a reset, as when a host dies or a network
# is cut. With the system's TCP times qgate would wait two hours (an idle connection) or about
# fifteen minutes (a request sent into the cut) before it saw the worker was gone.
#  - idle: keepalive finds it in keepalive_idle + keepalive_interval x keepalive_count; the
#    worker is marked lost, requests go to the worker still reachable, and it is connected
#    again once the link is back;
#  - holding a request (sent after the cut): tcp_user_timeout gives the connection up; the
#    client gets 'qgate: worker ... lost, and its next request runs;
#  - a long query running when the cut comes: keepalive finds it, the client is told;
#  - a reload sets the keys on the connections already open, not only on new ones (ss shows
#    the keepalive timer of a connection the reload found);
#  - a client on a third host cut off: keepalive finds it, the worker its session held serves
#    the next client;
#  - node-q, a real kdb+ client: the q error at the cut, then answers on the same connection;
#  - a broadcast group's connection left for the worker to close (broadcasts not known to have
#    run) is given up when the worker's host is cut off, not waited on for hours.
. "$(dirname "$0")/lib.sh"

host gw 10.77.1.20
host far 10.77.1.30
host cli 10.77.1.40
ns_worker far W1 10.77.1.30:5001
ns_worker gw W2 127.0.0.1:5002
# cut [HOST], heal [HOST]: HOST's port on the switch down, up (the far worker's host by default)
cut() { ip -n "$NETP-sw" link set "p-${1:-far}" down; }
heal() { ip -n "$NETP-sw" link set "p-${1:-far}" up; }
# far_up LOG: the gateway of LOG has its connection to the far worker up again after a cut it has
# seen: the last line of LOG about that connection says it connected (attempts made during the
# cut may have failed since)
is_up() { grep -E "10\.77\.1\.30:5001: (connected \(capability 3\)|connection closed)" "$1" | tail -n 1 | grep -q connected; }
far_up() { wait_for 60 "the far worker up again in $1" is_up "$1"; }
# ask PORT QUERY: qsend through the gateway on PORT of host gw, its output in $TMP/q.out
ask() { on gw timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$1" "$2" > "$TMP/q.out" 2>&1 || true; }

# --- idle: keepalive ------------------------------------------------------------------------------
printf '[gateway]\nport = 8821\nbind = 127.0.0.1\nkeepalive_idle = 1s\nkeepalive_interval = 1s\nkeepalive_count = 2\n[group main]\nworkers = 10.77.1.30:5001,127.0.0.1:5002\n' > "$TMP/A.conf"
ns_gateway gw GA "$TMP/A.conf"
wait_count "$TMP/GA.log" "connected \\(capability 3\\)" 2 20
on gw ss -tnoH state established "dport = :5001" > "$TMP/ss.a"
grep -qE "timer:\(keepalive,[0-9]+ms," "$TMP/ss.a" || fail "the worker's connection has no keepalive timer under a second (keepalive_idle = 1s): $(cat "$TMP/ss.a")"
cut
wait_line "$TMP/GA.log" "10\\.77\\.1\\.30:5001.*connection closed: Connection timed out" 30
for i in 1 2 3 4 5 6; do
    ask 8821 "echo x$i"
    grep -q "x$i" "$TMP/q.out" || fail "request $i after the cut: $(cat "$TMP/q.out")"
done
pass "an idle worker cut off is found by keepalive and marked lost; requests go to the one still reachable"
heal
wait_count "$TMP/GA.log" "10\\.77\\.1\\.30:5001.*connected \\(capability 3\\)" 2 60
pass "the cut worker is connected again once the link is back"

# --- a request sent into the cut: tcp_user_timeout; keepalive off --------------------------------
printf '[gateway]\nport = 8822\nbind = 127.0.0.1\nkeepalive_idle = 0\ntcp_user_timeout = 2s\n[group main]\nworkers = 10.77.1.30:5001\n' > "$TMP/B.conf"
ns_gateway gw GB "$TMP/B.conf"
wait_line "$TMP/GB.log" "connected \\(capability 3\\)" 20
# ssof PID: the established connections to the far worker of the qgate with this pid, as ss -o shows them
ssof() { on gw ss -tnopH state established "dport = :5001" | grep "pid=$1," || true; }
ssof "$GB_PID" > "$TMP/ss.b"
[ -s "$TMP/ss.b" ] || fail "no connection of GB to the far worker in ss"
! grep -q 'timer:(keepalive' "$TMP/ss.b" || fail "keepalive_idle = 0, yet a keepalive timer: $(cat "$TMP/ss.b")"
ask 8822 "echo before"
grep -q before "$TMP/q.out" || fail "GB before the cut: $(cat "$TMP/q.out")"
cut
ask 8822 "echo into-the-cut"
grep -q "'qgate: worker 10.77.1.30:5001 lost" "$TMP/q.out" || fail "a request sent into the cut: $(cat "$TMP/q.out")"
expect_lines "$TMP/GB.log" "10\\.77\\.1\\.30:5001.*connection closed: Connection timed out" 1
pass "a request sent into the cut: tcp_user_timeout gives the connection up, the client gets 'qgate: worker 10.77.1.30:5001 lost"
heal
wait_count "$TMP/GB.log" "connected \\(capability 3\\)" 2 60
ask 8822 "echo after"
grep -q after "$TMP/q.out" || fail "GB after the link is back: $(cat "$TMP/q.out")"
pass "the next request runs once the worker is connected again"

# --- a reload sets keepalive on the connections already open --------------------------------------
sed -i 's/^keepalive_idle = 0$/keepalive_idle = 1s\nkeepalive_interval = 1s\nkeepalive_count = 2/' "$TMP/B.conf"
kill -HUP "$GB_PID"
wait_line "$TMP/GB.log" "reload: done" 20
ssof "$GB_PID" > "$TMP/ss.b2"
grep -qE 'timer:\(keepalive,[0-9]+ms,' "$TMP/ss.b2" || fail "after the reload, no keepalive timer under a second on the open connection: $(cat "$TMP/ss.b2")"
pass "a reload sets keepalive on the connection already open (ss: $(grep -oE 'timer:\([^)]*\)' "$TMP/ss.b2"))"

# --- a long query running when the cut comes: keepalive -------------------------------------------
ask 8822 "hold h1" &
hold=$!
wait_line "$TMP/W1.log" "hold h1" 20
cut
wait "$hold" || true
grep -q "'qgate: worker 10.77.1.30:5001 lost" "$TMP/q.out" || fail "a query running at the cut: $(cat "$TMP/q.out")"
pass "a query running when the cut comes: keepalive finds the worker gone, the client is told"
heal

# --- a client cut off: keepalive frees the worker its session held ------------------------------
printf '[gateway]\nport = 8823\nbind = 0.0.0.0\nloglevel = debug\nkeepalive_idle = 1s\nkeepalive_interval = 1s\nkeepalive_count = 2\n[group main]\nworkers = 127.0.0.1:5002\npool = session\n' > "$TMP/C.conf"
ns_gateway gw GC "$TMP/C.conf"
wait_line "$TMP/GC.log" "connected \\(capability 3\\)" 20
# on a third host, a client that starts a session ("echo s"), then stays without a word
bg cli FAR bash -c 'exec 3<>/dev/tcp/10.77.1.20/8823 && printf "far\003\000" >&3 && head -c 1 <&3 > /dev/null &&
    printf "%b%s" "\x01\x01\x00\x00\x14\x00\x00\x00\x0a\x00\x06\x00\x00\x00" "echo s" >&3 && exec sleep 600'
wait_line "$TMP/GC.log" "session: given to .*10\\.77\\.1\\.40" 20
: > "$TMP/queued.out"
on gw timeout --foreground 60 "$BIN/qsend" -g 127.0.0.1:8823 "echo queued" > "$TMP/queued.out" 2>&1 &
queued=$!
wait_line "$TMP/GC.log" "127\\.0\\.0\\.1:[0-9]+: request 0 queued" 20
[ ! -s "$TMP/queued.out" ] || fail "answered while the only worker is in the cut-off client's session: $(cat "$TMP/queued.out")"
cut cli
wait_line "$TMP/GC.log" "10\\.77\\.1\\.40.*input ended.*Connection timed out" 30
wait "$queued" || true
grep -q queued "$TMP/queued.out" || fail "the request waiting for the session's worker: $(cat "$TMP/queued.out")"
pass "a client cut off is found by keepalive: the worker its session held runs the next client's request"
heal cli

# --- node-q, a real kdb+ client, through the cut ---------------------------------------------------
[ -d tests/interop/node_modules/node-q ] || fail "node-q missing: run tests/deps.sh (npm ci)"
mkfifo "$TMP/np.in"
far_up "$TMP/GB.log"
(cd tests/interop && on gw timeout --foreground 120 node partition.js 127.0.0.1 8822 10.77.1.30:5001) < "$TMP/np.in" > "$TMP/np.out" 2> "$TMP/np.err" &
np=$!
exec 5> "$TMP/np.in"
wait_line "$TMP/W1.log" "hold n1" 20
cut
wait_line "$TMP/np.out" "query running at the cut fails" 30
heal
far_up "$TMP/GB.log"
echo go >&5
exec 5>&-
wait "$np" || fail "node-q through the cut: $(cat "$TMP/np.out" "$TMP/np.err")"
cat "$TMP/np.out"
pass "node-q: a q error naming the lost worker at the cut, then answers on the same connection"

# --- the old connection of a broadcast group, left for the worker to close, when the cut comes ------
# (q closes it once it has run what it read from it: only then may a new connection carry more
# broadcasts. Its host cut off, it would never close: keepalive and tcp_user_timeout give it up.)
# Keepalive is off until a reload made while the connection waits turns it on: that sets it too.
printf '[gateway]\nport = 8824\nbind = 127.0.0.1\nquery_timeout = 1s\nkeepalive_idle = 0\n[group bc]\nworkers = 10.77.1.30:5001\nasync = broadcast\n' > "$TMP/D.conf"
ns_gateway gw GD "$TMP/D.conf"
wait_line "$TMP/GD.log" "connected \\(capability 3\\)" 20
ask 8824 "neg:hold d1" # a broadcast the worker holds: no reply byte to the chaser behind it
wait_line "$TMP/GD.log" "connecting again once it has closed its end" 20
sed -i 's/^keepalive_idle = 0$/keepalive_idle = 1s\nkeepalive_interval = 1s\nkeepalive_count = 2\ntcp_user_timeout = 3s/' "$TMP/D.conf"
kill -HUP "$GD_PID"
wait_line "$TMP/GD.log" "reload: done" 20
cut
wait_line "$TMP/GD.log" "10\\.77\\.1\\.30:5001: the old connection, left for the worker to close, failed \\(Connection timed out\\): connecting again" 30
heal
on gw timeout --foreground 10 "$BIN/qsend" -g 10.77.1.30:5001 "release d1" > /dev/null || fail "release d1"
far_up "$TMP/GD.log"
ask 8824 "echo after-remnant"
grep -q after-remnant "$TMP/q.out" || fail "GD after the link is back: $(cat "$TMP/q.out")"
pass "the connection left for a cut-off worker to close is given up (Connection timed out), keepalive set on it by a reload, not waited on for hours; the group serves again once the link is back"

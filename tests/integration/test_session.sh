#!/usr/bin/env bash
# pool = session: a client keeps one worker from its first request until it goes, as if it
# had opened that q itself. State across requests, every message to the one worker, a session
# waiting for a free worker, the reset query, pushes, the worker lost mid-session, stats.
. "$(dirname "$0")/lib.sh"

# conf FILE WORKERS [GROUPKEY=VALUE...]: one group, its keys as given
conf() {
    local f=$1 workers=$2 kv
    shift 2
    { printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group main]\nworkers = %s\n' "$workers"
      for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}"; done; } > "$f"
}
# raw_query FD TEXT BYTES: a sync char vector on raw client FD, and the BYTES of its reply
raw_query() {
    raw_text 1 "$2" "$1"
    timeout --foreground 10 head -c "$3" <&"$1" > "$TMP/raw$1.out" || fail "no reply to '$2' on fd $1"
}

start_worker W1 --rows 1000
start_worker W2 --rows 1000
TWO="127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT"

# --- the configuration: session and broadcast do not mix --------------------------------
conf "$TMP/bad.conf" "$TWO" pool=session async=broadcast
set +e; "$BIN/qgate" --check -c "$TMP/bad.conf" 2> "$TMP/err"; rc=$?; set -e
[ $rc -ne 0 ] || fail "--check accepted pool = session with async = broadcast"
expect_file_has "$TMP/err" "group main: pool = session .*async = broadcast does not apply"
pass "pool = session with async = broadcast is refused by --check"

# --- request mode (the default): state set by one request is not seen by the next ---------
conf "$TMP/r.conf" "$TWO"
start_gateway R -c "$TMP/r.conf"
wait_count "$TMP/R.log" "connected \(capability" 2   # both idle: the next request takes the other
G="127.0.0.1:$R_PORT"
q "a:1" "a"
expect_lines "$TMP/q.out" '^"1"$' 1
expect_lines "$TMP/q.out" "^'a\$" 1
pass "pool = request: h\"a:1\" then h\"a\" ran on two workers ('a), as before"

# --- session: one worker for everything the client sends ---------------------------------
conf "$TMP/s.conf" "$TWO" pool=session
start_gateway S -c "$TMP/s.conf" --loglevel debug
wait_count "$TMP/S.log" "connected \(capability" 2
G="127.0.0.1:$S_PORT"
q "a:1" "a" "neg:n1:1" "neg:n2:1" "neg:n3:1" "neg:n4:1" "n4" "a"
expect_lines "$TMP/q.out" '^"1"$' 4
grep -q "'" "$TMP/q.out" && fail "a session request failed: $(cat "$TMP/q.out")"
sets1=$(grep -c "set n[1-4]$" "$TMP/W1.log" || true)
sets2=$(grep -c "set n[1-4]$" "$TMP/W2.log" || true)
[ "$sets1/$sets2" = "4/0" ] || [ "$sets1/$sets2" = "0/4" ] ||
    fail "a session's async messages were split over the workers: $sets1 / $sets2"
wait_line "$TMP/S.log" "session: c1 .* has gone, the worker is free"
pass "pool = session: state survives across requests; sync and async went to one worker"

# --- a session holds its worker while idle: the next client waits; stats show the pair ----
conf "$TMP/one.conf" "127.0.0.1:$W1_PORT" pool=session
start_gateway O -c "$TMP/one.conf" --loglevel debug
G="127.0.0.1:$O_PORT"
raw_open "$O_PORT" 3
raw_hs "alice:x" 3
raw_query 3 "x:1" 15                        # "1": 8 + 6 + 1 bytes
wait_line "$TMP/O.log" "session: given to c1 "
timeout --foreground 60 "$BIN/qsend" -g "$G" "x" > "$TMP/c2.out" 2>&1 3<&- &   # not holding the raw fd
C2=$!
wait_line "$TMP/O.log" "c2 .*: request 0 queued in group main"
q ".qgate.stats[]"                          # answered by the gateway: no worker needed
expect_file_has "$TMP/q.out" '`dropped `session `transport `client `started \| ,`127\.0\.0\.1:[0-9]+ \| ,`main \| ,`pinned \|.* \| ,1 \| ,`tcp \| ,0N \| ,0N$'
kill -0 $C2 2>/dev/null || fail "the second client did not wait for the session's worker"
raw_close 3                                 # the session ends: the waiting client gets the worker
wait $C2 || true
expect_lines "$TMP/c2.out" '^"1"$' 1        # no reset query: the first session's x is there
pass "an idle session keeps its worker; the next client waits in the queue, then gets it; .qgate.stats[] shows pinned to client 1"

# --- queue_timeout applies to a client waiting for a session's worker ------------------
conf "$TMP/qt.conf" "127.0.0.1:$W1_PORT" pool=session
printf 'queue_timeout = 300\n' > "$TMP/qt.gw"
sed -i "/^\[gateway\]/r $TMP/qt.gw" "$TMP/qt.conf"
start_gateway T -c "$TMP/qt.conf"
raw_open "$T_PORT" 3
raw_hs "alice:x" 3
raw_query 3 "x:2" 15
G="127.0.0.1:$T_PORT"
q "x"
expect_lines "$TMP/q.out" "^'qgate: timeout \\(queued [0-9]+ ms\\)\$" 1
raw_close 3
pass "queue_timeout: a client waiting for a free session worker is told"

# --- reset_query runs when a session ends, before the worker is given again -------------
conf "$TMP/rs.conf" "127.0.0.1:$W2_PORT" pool=session 'reset_query=delete x from `.'
start_gateway X -c "$TMP/rs.conf" --loglevel debug
G="127.0.0.1:$X_PORT"
q "x:3" "x"
expect_lines "$TMP/q.out" '^"3"$' 2
q "x"
expect_lines "$TMP/q.out" "^'x\$" 1
expect_file_has "$TMP/W2.log" "deleted x$"
expect_file_has "$TMP/X.log" "session ended: running the reset query"
pass "reset_query: the next session starts clean"

# ... and when qgate itself drops the session's connection (query_timeout), its q still holds
# what the session left: the reset query runs on the next connection before anyone has it (at
# b0e81e8 the next session got the worker without it, and read the last one's x)
conf "$TMP/rt.conf" "127.0.0.1:$W2_PORT" pool=session 'reset_query=delete x from `.'
printf 'query_timeout = 300\n' > "$TMP/rt.gw"
sed -i "/^\[gateway\]/r $TMP/rt.gw" "$TMP/rt.conf"
n0=$(grep -c "deleted x$" "$TMP/W2.log" || true)
start_gateway RT -c "$TMP/rt.conf"
G="127.0.0.1:$RT_PORT"
q "x:secret" "sleep 1000"
expect_lines "$TMP/q.out" '^"secret"$' 1
expect_lines "$TMP/q.out" "^'qgate: timeout " 1
expect_file_has "$TMP/RT.log" "what a session sent on this connection may still run at the worker: connecting again"
wait_line "$TMP/RT.log" "qgate dropped its last connection before the reset query ran: the reset query runs first"
q "x"
expect_lines "$TMP/q.out" "^'x\$" 1
# (the first connection's reset query, as what ran there before this qgate had it is not known, found no x)
[ "$(grep -c "deleted x$" "$TMP/W2.log")" = $((n0 + 1)) ] || fail "x deleted $(($(grep -c "deleted x$" "$TMP/W2.log") - n0)) times, want 1"
pass "a session whose connection qgate dropped (query_timeout): the reset query runs on the next connection first; the next session starts clean"

# ... and a worker new to this qgate: what ran in its q before (another gateway's session, a
# client of its own) is not known, so the reset query runs before the first session (at b0e81e8
# the first session read it)
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$W2_PORT" "x:left" > /dev/null || fail "x set directly"
start_gateway RN -c "$TMP/rs.conf"
G="127.0.0.1:$RN_PORT"
q "x"
expect_lines "$TMP/q.out" "^'x\$" 1
pass "a worker new to qgate runs the reset query before its first session"

# ... a reset query that calls back (.z.w) is told no client answers it, in words that say so
# (before: "the client of this request has gone, or sent a bad message", of a client that never was)
start_worker WC --rows 1000
conf "$TMP/rc.conf" "127.0.0.1:$WC_PORT" pool=session 'reset_query=callback rcb'
start_gateway RC -c "$TMP/rc.conf"
G="127.0.0.1:$RC_PORT"
q "echo rc"
expect_lines "$TMP/q.out" '^"rc"$' 1
wait_line "$TMP/WC.log" "callback answered with an error: 'qgate: no client answers a callback from the reset query" 10
q "echo rc2"
expect_lines "$TMP/q.out" '^"rc2"$' 1
pass "a reset query that calls back is told no client answers it; the next session is served"

# ... and a reload that makes a request pool a session pool: what its clients ran as a request
# pool is in the worker's q, so the reset query runs before a session is given it (at 51520a0 the
# first session read it)
conf "$TMP/fp.conf" "127.0.0.1:$W2_PORT"
start_gateway FP -c "$TMP/fp.conf"
G="127.0.0.1:$FP_PORT"
q "x:pooled"
expect_lines "$TMP/q.out" '^"pooled"$' 1
conf "$TMP/fp.conf" "127.0.0.1:$W2_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FP_PID"
wait_line "$TMP/FP.log" "reload: done" 10
q "x"
expect_lines "$TMP/q.out" "^'x\$" 1
expect_file_has "$TMP/FP.log" "its q may hold what ran outside a session.*: the reset query runs before a session is given it"
expect_file_has "$TMP/FP.log" "reload: group main: pool request -> session, reset_query set\$"
pass "a reload that makes a request pool a session pool: the reset query runs before the first session"

# ... and a reload that gives a session pool a reset query: what the sessions before it left is
# reset first (at 51520a0 the worker was taken as clean: the next session read it)
conf "$TMP/fe.conf" "127.0.0.1:$W2_PORT" pool=session
start_gateway FE -c "$TMP/fe.conf"
G="127.0.0.1:$FE_PORT"
q "x:kept"
expect_lines "$TMP/q.out" '^"kept"$' 1
wait_line "$TMP/FE.log" "session: c1 .* has gone, the worker is free"
q "x"
expect_lines "$TMP/q.out" '^"kept"$' 1      # no reset query: the last session's x is there
conf "$TMP/fe.conf" "127.0.0.1:$W2_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FE_PID"
wait_line "$TMP/FE.log" "reload: done" 10
q "x"
expect_lines "$TMP/q.out" "^'x\$" 1
pass "a reload that sets a session pool's reset query: the sessions before it are reset before the next"
# ... and one that sets it while qgate has dropped a session's connection (query_timeout) whose
# messages its q has not yet run: qgate connects again only once q has closed that connection, so
# the reset query runs after them, not before (at d1d7b32, with no reset query when it dropped
# the connection, it connected again at once, and the reload's reset query ran on the new one
# while q held the old one's x:secret: the next session read it; the long simulation, seed 1266694)
start_worker WD --rows 10
conf "$TMP/fd.conf" "127.0.0.1:$WD_PORT" pool=session
printf 'query_timeout = 300\nloglevel = debug\n' > "$TMP/fd.gw"
sed -i "/^\[gateway\]/r $TMP/fd.gw" "$TMP/fd.conf"
start_gateway FD -c "$TMP/fd.conf"
wait_line "$TMP/FD.log" "connected \\(capability 3\\)" 10
timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$FD_PORT" "neg:hold fd1" "neg:x:secret" > /dev/null 2>&1 || true
# (the worker reads nothing more of that connection until "release fd1"; the client has gone)
wait_line "$TMP/FD.log" "no reply byte for 300 ms: dropping the connection" 10
conf "$TMP/fd.conf" "127.0.0.1:$WD_PORT" pool=session 'reset_query=delete x from `.'
sed -i "/^\[gateway\]/r $TMP/fd.gw" "$TMP/fd.conf"
kill -HUP "$FD_PID"
wait_line "$TMP/FD.log" "reload: done" 10
timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$FD_PORT" "x" "wait:$TMP/fd.goB" "x" > "$TMP/fdb.out" 2>&1 & fdb=$!
wait_line "$TMP/FD.log" "c2 .*request 0: sync" 10
release fd1 "$WD_PORT"              # its q runs x:secret, reads the close, closes
wait_line "$TMP/WD.log" "handle closed" 10   # (after x:secret)
touch "$TMP/fd.goB"
wait "$fdb" || true
printf '%s\n' "'x" "'x" | cmp -s - "$TMP/fdb.out" || fail "the next session read: $(cat "$TMP/fdb.out")"
expect_file_has "$TMP/FD.log" "what a session sent on this connection may still run at the worker: connecting again once it has closed its end"
kill "$FD_PID" "$WD_PID"
pass "... and one that sets it while qgate has dropped a session's connection q has not finished: the reset query runs after what q still had of it"

# x_old_behind GW W SLEEP: gateway GW (config $TMP/GW.conf) over worker W alone, pipeline 2: a
# sleep on W's first connection, then x:old on its second, whose reply W defers (--defer 2:MS);
# FA and FB the two clients, G the gateway
x_old_behind() {
    local gw=$1 w=$2 wp gp
    wp=$(eval echo "\$${w}_PORT")
    conf "$TMP/$gw.conf" "127.0.0.1:$wp" pipeline=2 pipeline_wait=0
    start_gateway "$gw" -c "$TMP/$gw.conf" --loglevel debug
    wait_count "$TMP/$gw.log" "state HANDSHAKE -> IDLE" 2
    gp=$(eval echo "\$${gw}_PORT")
    G="127.0.0.1:$gp"
    timeout --foreground 20 "$BIN/qsend" -g "$G" "sleep $3" > "$TMP/fa.out" 2>&1 &
    FA=$!
    wait_line "$TMP/$w.log" "sleep $3 ms"
    timeout --foreground 20 "$BIN/qsend" -g "$G" "x:old" > "$TMP/fb.out" 2>&1 &
    FB=$!
    wait_line "$TMP/$w.log" "defer: sync request #2 "
}

# ... and a reload that makes a pipelined request pool a session pool while a request runs on
# the worker's second connection: that connection goes once its run has ended (its reset query
# run after it), and no session is given the worker until it has gone. The worker defers every
# second sync request's reply (-30!): x:old, on the second connection, is answered 1.5 s late. At
# 51520a0 plus this stop's other fixes the next session was given the first connection at once,
# set x, and lost it to the reset query the second connection ran when x:old's reply came.
start_worker W9 --rows 1000 --defer 2:1500
x_old_behind FS W9 600
conf "$TMP/FS.conf" "127.0.0.1:$W9_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FS_PID"
wait_line "$TMP/FS.log" "reload: done" 10
q "x:mine" "x"
expect_lines "$TMP/q.out" '^"mine"$' 2
wait $FA $FB || true
expect_lines "$TMP/fb.out" '^"old"$' 1
pass "a reload that makes a pipelined request pool a session pool: no session is given a worker whose other connection still runs"

# ... and a worker removed by a reload while its second connection still runs (x:old, its reply
# deferred), then put back by the next, which makes the group a session pool: the new connection
# is given to no session until the old one has gone (at 099d614 it was given at once, and the old
# connection's reset query, run when x:old's reply came, deleted the session's x)
start_worker W10 --rows 1000 --defer 2:2000
start_worker W11 --rows 1000
x_old_behind FR W10 300
conf "$TMP/FR.conf" "127.0.0.1:$W11_PORT" pipeline=2 pipeline_wait=0
kill -HUP "$FR_PID"
wait_line "$TMP/FR.log" "w 127.0.0.1:$W10_PORT: connection closed: removed from the configuration" 10
conf "$TMP/FR.conf" "127.0.0.1:$W10_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FR_PID"
wait_count "$TMP/FR.log" "reload: done" 2 10
q "x:mine" "x" "sleep 2000" "x"
expect_lines "$TMP/q.out" '^"mine"$' 3
wait $FA $FB || true
expect_lines "$TMP/fb.out" '^"old"$' 1
pass "a worker removed and put back while its old connection still runs: no session is given it until that has gone"

# ... and one whose address a reload spells another way (127.0.0.1:P, then localhost:P) while
# its old connection still runs: the same q, known by its resolved address (at 154943c the text
# differed, the session was given it at once, and lost its x to the old connection's reset query)
start_worker W12 --rows 1000 --defer 2:2000
x_old_behind FL2 W12 300
conf "$TMP/FL2.conf" "localhost:$W12_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FL2_PID"
wait_line "$TMP/FL2.log" "reload: done" 10
q "x:mine" "x" "sleep 2000" "x"
expect_lines "$TMP/q.out" '^"mine"$' 3
wait $FA $FB || true
pass "... and one whose address a reload spells another way: the same q, passed over until the old connection has gone"

# ... and while a session lives on a worker, a reload spells its address another way: the new
# connection to the same q runs its first reset query only once the session's connection has
# gone (at 30f67ef it ran it at once, and the live session lost its x)
start_worker W13 --rows 1000
conf "$TMP/fm.conf" "127.0.0.1:$W13_PORT" pool=session 'reset_query=delete x from `.'
start_gateway FM -c "$TMP/fm.conf" --loglevel debug
G="127.0.0.1:$FM_PORT"
timeout --foreground 30 "$BIN/qsend" -g "$G" "x:A" "hold fm1" "x" > "$TMP/fm.out" 2>&1 &
FMA=$!
wait_line "$TMP/W13.log" "hold fm1"
conf "$TMP/fm.conf" "localhost:$W13_PORT" pool=session 'reset_query=delete x from `.'
kill -HUP "$FM_PID"
wait_line "$TMP/FM.log" "w localhost:$W13_PORT: state HANDSHAKE -> IDLE" 10
release fm1 "$W13_PORT"
wait "$FMA" || true
expect_lines "$TMP/fm.out" '^"A"$' 2
pass "... and a session whose worker a reload respells: the new connection's reset query waits for it"

# --- pushes: what a session's worker publishes later reaches that client ----------------
G="127.0.0.1:$S_PORT"
raw_open "$S_PORT" 3
raw_hs "alice:x" 3
raw_open "$S_PORT" 4
raw_hs "bob:x" 4
raw_query 3 "a:1" 15
raw_query 4 "b:1" 15                        # two sessions, one worker each
raw_text 1 "later 100 tick3" 3
raw_text 1 "later 50 tick4" 4
timeout --foreground 10 head -c $((17 + 19)) <&3 > "$TMP/p3.out" || fail "client 3 got no publish"
timeout --foreground 10 head -c $((17 + 19)) <&4 > "$TMP/p4.out" || fail "client 4 got no publish"
grep -aq "tick3" "$TMP/p3.out" && ! grep -aq "tick4" "$TMP/p3.out" || fail "client 3 got $(od -c "$TMP/p3.out" | head -3)"
grep -aq "tick4" "$TMP/p4.out" && ! grep -aq "tick3" "$TMP/p4.out" || fail "client 4 got $(od -c "$TMP/p4.out" | head -3)"
raw_close 3
raw_close 4
pass "each session's worker publishes to its own client, after the reply"

# --- what a session's worker sent for a client that went, unread, never reaches the next ---
# The first client takes no byte: its output passes client_high_water and the gateway stops
# reading the worker, so what the worker publishes for it meanwhile waits in the socket. The
# gateway closes it (client_stall_timeout) while the next client waits for the worker: that
# session's first reply must be its own, not those publishes (0.13 handed the worker on at
# once, and the next client read them first: the simulation, seed 103221).
start_worker W7 --rows 1000
conf "$TMP/lv.conf" "127.0.0.1:$W7_PORT" pool=session
printf 'client_high_water = 65536\nclient_low_water = 0\nclient_stall_timeout = 3000\n' > "$TMP/lv.gw"
sed -i "/^\[gateway\]/r $TMP/lv.gw" "$TMP/lv.conf"
start_gateway LV -c "$TMP/lv.conf" --loglevel debug
raw_open "$LV_PORT" 3
raw_hs "alice:x" 3
raw_query 3 "x:1" 15
BIG=$(head -c 100000 /dev/zero | tr '\0' a)
for i in $(seq 1 ${LV_TELLS:-60}); do   # 6 MB published to client 3, which reads none of it: more than
    timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$W7_PORT" "tell LEFT$i$BIG" > /dev/null 2>&1 || fail "tell $i"
done                                    # the kernel's buffers between them hold
wait_line "$TMP/LV.log" "paused: c1 "
for i in 1 2 3; do timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$W7_PORT" "tell LEFTOVER$i" > /dev/null 2>&1; done
wait_count "$TMP/W7.log" 'tell: publishing "LEFTOVER' 3
raw_open "$LV_PORT" 4       # the next session's client waits for the worker meanwhile
raw_hs "bob:x" 4
raw_text 1 "x" 4
wait_line "$TMP/LV.log" "c2 .*: request 0 queued in group main"
wait_line "$TMP/LV.log" "c1 .*: closed: stalled"
timeout --foreground 10 head -c 15 <&4 > "$TMP/raw4.out" || fail "the next session got no reply"
grep -aq LEFT "$TMP/raw4.out" && fail "the next session got the last one's publishes first: $(head -c 40 "$TMP/raw4.out" | od -c | head -3)"
raw_query 4 "x" 15
grep -aq LEFT "$TMP/raw4.out" && fail "the next session got the last one's publishes"
[ "$(od -An -c "$TMP/raw4.out" | tr -d ' \n')" = "$(printf '\001\002\000\000\017\000\000\000\n\000\001\000\000\0001' | od -An -c | tr -d ' \n')" ] ||
    fail "the next session's reply: $(od -c "$TMP/raw4.out" | head -3)"
raw_close 3
raw_close 4
expect_file_has "$TMP/LV.log" "connection closed: its session ended: a new connection for the next"
pass "a session's client closed with the worker's publishes unread: they are dropped, the next session gets only its own replies"

# --- what a session set up on its worker's handle (a publish for later) goes with it ---------
# Its q sees the handle close (.z.pc), as for a client of its own: the next session, on a new
# connection, never gets it. The next client keeps the worker busy past the moment it was due
# ("sleep 500"): on the old handle the worker would publish it right after that reply, before
# it reads the next request (0.13 kept the connection, and the next client got it).
start_worker W8 --rows 1000
conf "$TMP/zp.conf" "127.0.0.1:$W8_PORT" pool=session
start_gateway ZP -c "$TMP/zp.conf" --loglevel debug
raw_open "$ZP_PORT" 3
raw_hs "alice:x" 3
raw_query 3 "later 300 SUBA" 17
raw_close 3
wait_line "$TMP/ZP.log" "session: c1 .* has gone"
raw_open "$ZP_PORT" 4
raw_hs "bob:x" 4
raw_query 4 "sleep 500" 17
raw_query 4 "echo MINE" 18
grep -aq SUBA "$TMP/raw4.out" && fail "the next session got the first one's publish"
grep -aq MINE "$TMP/raw4.out" || fail "the next session's own reply: $(od -c "$TMP/raw4.out" | head -3)"
raw_close 4
expect_file_has "$TMP/ZP.log" "connection closed: its session ended: a new connection for the next"
pass "a publish a session set up on its worker goes with the session (a new connection for the next: .z.pc)"

# --- the worker lost in the middle of a session: told, then closed, as if q had died ----
start_worker W3 --rows 1000
conf "$TMP/l.conf" "127.0.0.1:$W3_PORT" pool=session
start_gateway L -c "$TMP/l.conf"
G="127.0.0.1:$L_PORT"
timeout --foreground 60 "$BIN/qsend" -g "$G" "y:1" "hold lost1" "y" > "$TMP/l1.out" 2>&1 &
L1=$!
wait_line "$TMP/W3.log" "hold lost1"
kill -9 "$W3_PID"
set +e; wait $L1; rc=$?; set -e
expect_lines "$TMP/l1.out" "^'qgate: worker 127\\.0\\.0\\.1:$W3_PORT lost\$" 1
expect_lines "$TMP/l1.out" "^'close\$" 1
expect_file_has "$TMP/L.log" "session: worker 127\\.0\\.0\\.1:$W3_PORT lost"
[ $rc -ne 0 ] || fail "the client's connection was not closed after its session's worker died"
pass "the worker lost mid-request: 'qgate: worker host:port lost, then the connection closes"

# ... the same for a client that has shut its sending side (a half-close): it is told too
start_worker W3H --rows 1000
conf "$TMP/lh.conf" "127.0.0.1:$W3H_PORT" pool=session
start_gateway LH -c "$TMP/lh.conf"
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$LH_PORT" --shut "y:1" "hold losth" "y" > "$TMP/lh.out" 2>&1 &
L1=$!
wait_line "$TMP/W3H.log" "hold losth"
kill -9 "$W3H_PID"
set +e; wait $L1; set -e
[ "$(tr '\n' '|' < "$TMP/lh.out")" = "\"1\"|'qgate: worker 127.0.0.1:$W3H_PORT lost|'close|" ] || fail "half-closed: $(cat "$TMP/lh.out")"
pass "... and to a client that has shut its sending side"

start_worker W4 --rows 1000
conf "$TMP/l2.conf" "127.0.0.1:$W4_PORT" pool=session
start_gateway M -c "$TMP/l2.conf"
raw_open "$M_PORT" 3
raw_hs "alice:x" 3
raw_query 3 "z:1" 15
kill -9 "$W4_PID"
timeout --foreground 10 cat <&3 > "$TMP/m.out" || fail "the gateway kept an idle session whose worker died"
[ ! -s "$TMP/m.out" ] || fail "an idle session got bytes when its worker died: $(od -c "$TMP/m.out" | head -2)"
raw_close 3
expect_file_has "$TMP/M.log" "c1 .*: session: worker 127\\.0\\.0\\.1:$W4_PORT lost"
pass "the worker lost while the session is idle: the client's connection closes"

# --- a request routed into a session group from outside its sessions: the reset query runs ---
# after it, before a session is given that worker (0.12.0 ran it on a free worker with no reset,
# and the next session's client read what it left: a:444)
start_worker W5 --rows 1000
start_worker W6 --rows 1000
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\nusers = alice\n[group solo]\nworkers = 127.0.0.1:%s\npool = session\nusers = alice,sam\nreset_query = delete a from `.\n' \
    "$W5_PORT" "$W6_PORT" > "$TMP/rt.conf"
start_gateway RT -c "$TMP/rt.conf" --loglevel debug
wait_count "$TMP/RT.log" "connected \\(capability" 2
G="127.0.0.1:$RT_PORT"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:x "on:solo:a:444" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"444"$' 1
expect_file_has "$TMP/W6.log" "set a$"
wait_line "$TMP/RT.log" "its q may hold what ran outside its sessions: the reset query runs next" 10
wait_line "$TMP/W6.log" "deleted a$" 10
timeout --foreground 10 "$BIN/qsend" -g "$G" -u sam:x "a" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^'a\$" 1
expect_file_has "$TMP/RT.log" "session: given to c2 "
pass "a request routed into a session group from outside: the reset query runs after it; the next session starts clean"

# --- a reload makes the group a request pool while a session holds its worker: the client's
# async (`.qgate.all; `main; q) goes to the workers no session holds (it was queued on the
# session's worker too, which runs nothing owed while it is held: the client's turn never came
# back, its next request hung, and its worker stayed pinned after it left) ------------------
conf "$TMP/flip.conf" "127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT" pool=session
start_gateway FL -c "$TMP/flip.conf"
wait_count "$TMP/FL.log" "connected \\(capability" 2
raw_open "$FL_PORT"
raw_hs "u:p"
raw_text 1 "a:mine"
raw_msg "$TMP/flip.out" || fail "no reply to a:mine"
sed -i 's/^pool = session$/pool = request/' "$TMP/flip.conf"
kill -HUP "$FL_PID"
wait_line "$TMP/FL.log" "reload: done" 10
# neg[h](`.qgate.all; `main; "echo y"): a general list of 3, two symbols and a string
printf '\001\000\000\000\054\000\000\000\000\000\003\000\000\000\365.qgate.all\000\365main\000\012\000\006\000\000\000echo y' >&3
raw_text 1 "echo z"
raw_msg "$TMP/flip.out" || fail "the session's next request was not answered"
grep -aq "z" "$TMP/flip.out" || fail "echo z: $(od -c "$TMP/flip.out" | tail -3)"
raw_close
wait_line "$TMP/FL.log" "closed: client closed the connection" 10
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$FL_PORT" ".qgate.stats[]" > "$TMP/q.out" 2>&1 || true
grep -q "pinned" "$TMP/q.out" && fail "a worker stays pinned after its client left: $(cat "$TMP/q.out")"
pass "a group made a request pool under a session: the session's async .qgate.all runs on the other workers, its next request is answered, its worker freed"

# --- ... and its sessions end: the worker a client idle in its session held goes back to the
# pool, as when a session's client leaves (its q sees the handle close; the reset query the
# session lived under runs, though the new configuration has none, pool = request having no use
# for it), so another client is served at once, and the first one's next request too (before:
# the worker stayed pinned to the idle client, and every other client waited for as long as it
# stayed connected) ------------------------------------------------------------------------
conf "$TMP/flip1.conf" "127.0.0.1:$W1_PORT" pool=session 'reset_query=delete fl from `.'
start_gateway F1 -c "$TMP/flip1.conf"
wait_count "$TMP/F1.log" "connected \\(capability" 1
raw_open "$F1_PORT"
raw_hs "u:p"
raw_text 1 "fl:mine"
raw_msg "$TMP/flip1.out" || fail "no reply to fl:mine"
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$F1_PORT" ".qgate.stats[]" > "$TMP/q.out" 2>&1 || true
grep -q "pinned" "$TMP/q.out" || fail "the session's worker is not pinned: $(cat "$TMP/q.out")"
conf "$TMP/flip1.conf" "127.0.0.1:$W1_PORT" pool=request
kill -HUP "$F1_PID"
wait_line "$TMP/F1.log" "reload: done" 10
expect_file_has "$TMP/F1.log" "session: .* ends: a reload made its group a request pool, the worker is free"
wait_line "$TMP/W1.log" "deleted fl$" 10
timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$F1_PORT" --timeout 10000 "echo other" "fl" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"other"$' 1
expect_lines "$TMP/q.out" "^'fl\$" 1 # (the reset ran)
raw_text 1 "echo again"
: > "$TMP/flip1.out"
raw_msg "$TMP/flip1.out" || fail "the first client's next request was not answered"
grep -aq "again" "$TMP/flip1.out" || fail "echo again: $(od -c "$TMP/flip1.out" | tail -3)"
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$F1_PORT" ".qgate.stats[]" > "$TMP/q.out" 2>&1 || true
grep -q "pinned" "$TMP/q.out" && fail "a worker stays pinned in a request pool: $(cat "$TMP/q.out")"
raw_close
pass "a group made a request pool: its sessions end (their reset query run), their workers serve anyone, their clients' next requests run"

# --- a drain with a client idle in its session and another's request waiting for its worker:
# the idle one is closed, as the drain would at its end, so that the received request runs (the
# drain waited the whole drain_timeout for a worker that was never let go) ------------------
conf "$TMP/dr.conf" "127.0.0.1:$W1_PORT" pool=session
printf 'drain_timeout = 600000\n' > "$TMP/dr.gw"
sed -i "/^\[gateway\]/r $TMP/dr.gw" "$TMP/dr.conf"
start_gateway DR -c "$TMP/dr.conf" --loglevel debug
raw_open "$DR_PORT" 3
raw_hs "idle:x" 3
raw_query 3 "echo idle" 18                  # "idle": 8 + 6 + 4 bytes; then it holds the worker, idle
wait_line "$TMP/DR.log" "session: given to c1 "
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$DR_PORT" "echo waiting" > "$TMP/dr2.out" 2>&1 3<&- & C2=$!
wait_line "$TMP/DR.log" "c2 .*: request 0 queued in group main"
kill -TERM "$DR_PID"
wait_exit "$DR_PID" 60 || fail "the drain waited for a worker an idle session held"
[ "$EXIT_STATUS" = 0 ] || fail "exit status $EXIT_STATUS after the drain"
wait $C2 || true
expect_lines "$TMP/dr2.out" '^"waiting"$' 1
expect_file_has "$TMP/DR.log" "c1 .*idle: closed: drained: closed"
raw_close 3
pass "a drain closes a client idle in its session when another's received request waits for its worker, which then runs it"

# --- a drain with a subscriber in its session, its worker publishing without end and the
# subscriber reading slowly: its request is answered, so the drain does not wait for the
# publishes after it (at b0e81e8 it waited the whole drain_timeout, then said 'work in flight')
conf "$TMP/sub.conf" "127.0.0.1:$W1_PORT" pool=session
printf 'drain_timeout = 600000\n' > "$TMP/sub.gw"
sed -i "/^\[gateway\]/r $TMP/sub.gw" "$TMP/sub.conf"
start_gateway SB -c "$TMP/sub.conf"
# drain_subscriber GW OUT QUERY FILE REGEX [QSLOW_ARGS...]: a subscriber (qslow sending QUERY,
# reading 16 KB every 10 ms unless QSLOW_ARGS say otherwise, its line in OUT) on gateway GW; once
# FILE has REGEX, SIGTERM: GW must exit 0 (the subscriber, $SL, is left to the caller)
drain_subscriber() {
    local port=${1}_PORT pid=${1}_PID out=$2 query=$3 file=$4 re=$5
    shift 5
    [ $# -gt 0 ] || set -- -r 16384 -t 10
    timeout --foreground 120 "$BIN/qslow" -g "127.0.0.1:${!port}" -q "$query" "$@" -s 100 > "$TMP/$out" 2>&1 & SL=$!
    PIDS+=($SL)
    wait_line "$file" "$re"
    kill -TERM "${!pid}"
    wait_exit "${!pid}" 60 || fail "the drain with a subscriber ($query) did not end"
    [ "$EXIT_STATUS" = 0 ] || fail "exit status $EXIT_STATUS after the drain"
}
drain_subscriber SB sub.out "flood 65536" "$TMP/W1.log" "flood 65536: publishing"
wait "$SL" || true
expect_lines "$TMP/sub.out" "reply=ok closed=yes" 1
expect_lines "$TMP/SB.log" "drain_timeout reached" 0
pass "a drain with a subscriber reading slowly, its worker publishing on: its reply went, the publishes after it not waited for"

# ... and another client's request waiting for that subscriber's worker: the subscriber, owed
# nothing, is closed, and the waiting request runs (at 82a91bd the drain kept the subscriber for
# its publishes, and the waiting request got the close at drain_timeout)
start_gateway SW -c "$TMP/sub.conf" --loglevel debug
timeout --foreground 120 "$BIN/qslow" -g "127.0.0.1:$SW_PORT" -q "flood 65536" -r 16384 -t 10 -s 100 > "$TMP/sub2.out" 2>&1 & SL=$!
PIDS+=($SL)
wait_count "$TMP/W1.log" "flood 65536: publishing" 2
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$SW_PORT" "echo waiter" > "$TMP/waiter.out" 2>&1 & WQ=$!
wait_line "$TMP/SW.log" "c2 .*: request 0 queued in group main" 30
kill -TERM "$SW_PID"
wait_exit "$SW_PID" 60 || fail "the drain waited while a request waited for a subscriber's worker"
[ "$EXIT_STATUS" = 0 ] || fail "exit status $EXIT_STATUS after the drain"
wait $SL $WQ || true
expect_lines "$TMP/waiter.out" '^"waiter"$' 1
expect_lines "$TMP/sub2.out" "reply=ok closed=yes" 1
pass "... and with another's request waiting for its worker: the subscriber closed, the waiting request answered"

# --- a reload that makes a session pool a request pool while its worker is half way through a
# publish to the session's client (paused: the client reads nothing). The session ends when that
# message has: the client stays linked to the worker till then. At a1547e5 it ended at once: with
# a reset query the worker went on streaming into the client after the client closed (ASan's
# heap-use-after-free, the gateway gone: helper round 34a); without one, the new connection cut
# the client's stream in the middle of a message.
conf "$TMP/ps.conf" "127.0.0.1:$W1_PORT" pool=session 'reset_query=delete a from `.'
printf 'client_high_water = 65536\nclient_low_water = 16384\n' > "$TMP/ps.gw"
sed -i "/^\[gateway\]/r $TMP/ps.gw" "$TMP/ps.conf"
sed -e 's/^pool = session$/pool = request/' -e '/^reset_query/d' "$TMP/ps.conf" > "$TMP/pr.conf"
cp "$TMP/ps.conf" "$TMP/pp.conf"
start_gateway PP -c "$TMP/pp.conf" --loglevel debug
# flip_mid_publish CLIENT OUT SIZE QSLOW_ARGS...: a subscriber (qslow, "flood SIZE") on PP, client
# CLIENT there, its worker paused half way through a message to it; then the reload to a request pool
flip_mid_publish() {
    local cl=$1 out=$2 size=$3
    shift 3
    timeout --foreground 120 "$BIN/qslow" -g "127.0.0.1:$PP_PORT" -q "flood $size" "$@" > "$TMP/$out" 2>&1 & SL=$!
    PIDS+=($SL)
    wait_line "$TMP/PP.log" "paused: $cl "
    cp "$TMP/pr.conf" "$TMP/pp.conf"
    kill -HUP "$PP_PID"
}
flip_mid_publish c1 pp.out 33554432 -r 1 -t 100000 -s 100 # (a message larger than the kernel's buffers
                                                         # take: the pause is never at its end)
wait_line "$TMP/PP.log" "reload: done"
expect_file_has "$TMP/PP.log" "session: c1 .* ends: a reload made its group a request pool once the message being streamed to it has ended"
"$BIN/qsend" -g "127.0.0.1:$W1_PORT" "a:42" > /dev/null # (in the session's q: its reset query deletes it)
kill "$SL"
wait_line "$TMP/PP.log" "session: c1 .* has gone, the worker is free"
"$BIN/qsend" -g "127.0.0.1:$PP_PORT" "echo after" > "$TMP/pp2.out" 2>&1 || fail "no answer after the subscriber closed: $(tail -n 5 "$TMP/PP.log")"
expect_lines "$TMP/pp2.out" '^"after"$' 1
"$BIN/qsend" -g "127.0.0.1:$PP_PORT" "a" > "$TMP/pp3.out" 2>&1 || true
expect_lines "$TMP/pp3.out" "^'a$" 1 # (at 811dec9: 42, the request pool's reset query, none, taken)
pass "a reload that makes a session pool a request pool mid-publish: the session lasts till the message ends; the subscriber's close drains the rest, and the reset query it lived under runs"

# ... the subscriber reading: the message it was being sent comes whole, then the session ends
# (the worker's new connection); every byte it got is whole messages and the reply
cp "$TMP/ps.conf" "$TMP/pp.conf"
kill -HUP "$PP_PID"
wait_count "$TMP/PP.log" "reload: done" 2
flip_mid_publish c4 pq.out 1000000 -r 16384 -t 10 -s 5
wait_line "$TMP/PP.log" "session: c4 .* ends: a reload made its group a request pool, the worker is free"
wait "$SL" || true
read -r m b < <(sed -n 's/^qslow messages=\([0-9]*\) bytes=\([0-9]*\) .*/\1 \2/p' "$TMP/pq.out")
[ -n "$m" ] && [ "$m" -ge 1 ] && [ "$b" = $((m * 1000014 + 17)) ] ||
    fail "the subscriber's stream: $(cat "$TMP/pq.out") (want whole 1000014-byte messages and a 17-byte reply)"
pass "... and with the subscriber reading: $m whole messages, then its session ended"

# --- SIGTERM while a subscriber's worker is half way through a publish to it (the subscriber
# reading): the drain's FIN comes after that message's last byte, and no publish after it (at
# 811dec9 the subscriber got half a message, then the FIN: helper round 34c)
start_gateway PD -c "$TMP/ps.conf" --loglevel debug
drain_subscriber PD pd.out "flood 1000000" "$TMP/PD.log" "paused: c1 "
wait "$SL" || true
read -r m b < <(sed -n 's/^qslow messages=\([0-9]*\) bytes=\([0-9]*\) .*/\1 \2/p' "$TMP/pd.out")
[ -n "$m" ] && [ "$b" = $((m * 1000014 + 17)) ] && grep -q "closed=yes" "$TMP/pd.out" ||
    fail "the subscriber's stream at the drain: $(cat "$TMP/pd.out") (want whole 1000014-byte messages, the 17-byte reply, then the close)"
expect_lines "$TMP/PD.log" "drain_timeout reached" 0
pass "a drain with a subscriber's worker half way through a publish to it: $m whole messages, then the close"

# ... and a subscriber that reads nothing: the drain ends at drain_timeout, and says so as it is
# (at da96caa: "with work in flight", then "drained: exiting": helper round 34d)
sed 's/^\[gateway\]$/[gateway]\ndrain_timeout = 1000/' "$TMP/ps.conf" > "$TMP/pt.conf"
start_gateway PT -c "$TMP/pt.conf" --loglevel debug
drain_subscriber PT pt.out "flood 33554432" "$TMP/PT.log" "paused: c1 " -r 1 -t 100000 # (never paused at a message's end)
kill "$SL" 2> /dev/null || true # (it would read what the kernel holds, a byte at a time, before the close)
wait "$SL" 2> /dev/null || true
expect_lines "$TMP/PT.log" "drain_timeout reached with publishes still on their way to 1 clients: exiting, their streams cut" 1
expect_lines "$TMP/PT.log" "with work in flight|drained: exiting" 0
pass "... and with one that reads nothing: the drain ends at drain_timeout, saying publishes were on their way"

# --- a reload that makes a paused session pool a request pool: a session's next request, held
# for its worker by the pause, waits in the group's queue then, as any request (the simulation,
# 2026-12-07: it stayed on the held list, a session's no more, till the resume)
printf 'alice:x\nop:pw\tadmin=1\n' > "$TMP/hq.users"
conf "$TMP/hq.conf" "127.0.0.1:$W1_PORT" pool=session
sed -i "s|^\[gateway\]\$|[gateway]\nusers_file = $TMP/hq.users|" "$TMP/hq.conf"
start_gateway HQ -c "$TMP/hq.conf" --loglevel debug
raw_open "$HQ_PORT" 5
raw_hs "alice:x" 5
raw_query 5 "x:5" 15
wait_line "$TMP/HQ.log" "session: given to c1 "
"$BIN/qsend" -g "127.0.0.1:$HQ_PORT" -u op:pw ".qgate.pause[\`main]" > "$TMP/hq.p" 2>&1 || true
expect_lines "$TMP/hq.p" '^1b$' 1
raw_text 1 "x" 5
wait_line "$TMP/HQ.log" "c1 .*request 1 held: group main is paused"
sed 's/^pool = session$/pool = request/' "$TMP/hq.conf" > "$TMP/hq2.conf" && mv "$TMP/hq2.conf" "$TMP/hq.conf"
kill -HUP "$HQ_PID"
wait_line "$TMP/HQ.log" "session: c1 .* ends: a reload made its group a request pool, the worker is free"
wait_line "$TMP/HQ.log" "reload: done"
"$BIN/qsend" -g "127.0.0.1:$HQ_PORT" -u op:pw ".qgate.resume[\`main]" > "$TMP/hq.r" 2>&1 || true
expect_lines "$TMP/hq.r" '^1b$' 1
expect_file_has "$TMP/HQ.log" "group main resumed by .*: 1 requests queued, 0 held"
timeout --foreground 10 head -c 15 <&5 > "$TMP/hq.out" || fail "no reply to x after the resume"
expect_lines "$TMP/hq.out" '"?5' 1
raw_close 5
pass "a reload that ends a session whose next request a pause holds: the request waits in the queue, then runs"

# --- a .qgate.all accepted by a request pool whose part runs after a reload made the pool a
# session pool: what the part left in q is reset before a session is given the worker (at
# 5a51eb2 the next session read it: only requests and async messages from outside a session
# made a worker dirty)
# held_gateway NAME WORKER GROUPKEY TAG: worker WORKER, gateway NAME (its configuration
# $TMP/NAME.conf, debug log) with one group of it and the key line GROUPKEY; a client's "hold TAG"
# running on the worker ($TMP/TAG.out, its PID $held)
held_gateway() {
    local name=$1 wk=$2 key=$3 tag=$4 wp gp
    start_worker "$wk" --rows 10
    wp=${wk}_PORT
    printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\n[group main]\nworkers = 127.0.0.1:%s\n%s\n' "${!wp}" "$key" \
        > "$TMP/$name.conf"
    start_gateway "$name" -c "$TMP/$name.conf"
    gp=${name}_PORT
    timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:${!gp}" "hold $tag" > "$TMP/$tag.out" 2>&1 & held=$!
    PIDS+=($held)
    wait_line "$TMP/$name.log" "running sync request 0 of c1 "
}
held_gateway FA W3 'reset_query = delete fz from `.' fa1
fa1=$held
timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$FA_PORT" "all:main:fz:9" > "$TMP/fa2.out" 2>&1 & fa2=$!
PIDS+=($fa2)
wait_line "$TMP/FA.log" "c2 .*request 0: on the 1 workers of group main up"
sed -i 's/^\[group main\]$/[group main]\npool = session/' "$TMP/FA.conf"
kill -HUP "$FA_PID"
wait_line "$TMP/FA.log" "reload: done"
"$BIN/qsend" -g "127.0.0.1:$W3_PORT" "release fa1" > /dev/null 2>&1
wait "$fa1" "$fa2" || true
expect_lines "$TMP/fa1.out" '^"fa1"$' 1
expect_lines "$TMP/fa2.out" '^"9"$' 1
"$BIN/qsend" -g "127.0.0.1:$FA_PORT" "fz" > "$TMP/fa3.out" 2>&1 || true
expect_lines "$TMP/fa3.out" "^'fz$" 1
pass "a .qgate.all's part run on a worker of a pool a reload has made a session pool: the reset query runs before a session has it"

# --- a request pool with async = broadcast made a session pool by reload, its worker owing
# broadcasts from before: they all run, on the connection they were sent for, then the first
# session gets a connection of its own (helper round 35a: at 7ebf571 the session was given the
# worker between two of them, and its next request waited for ever when a reload ended the
# session while the second ran; since then a session never gets a connection that carried
# requests outside one, and a session's end moves its client's waiting request on)
held_gateway OB W4 'async = broadcast' ob1
"$BIN/qsend" -g "127.0.0.1:$OB_PORT" "neg:sleep 1" > /dev/null 2>&1      # two broadcasts, owed by the
wait_line "$TMP/OB.log" "c2 .*request 0: async"                          # busy worker
"$BIN/qsend" -g "127.0.0.1:$OB_PORT" "neg:sleep 300" > /dev/null 2>&1
wait_line "$TMP/OB.log" "c3 .*request 0: async"
sed -i 's/^async = broadcast$/pool = session/' "$TMP/OB.conf"
kill -HUP "$OB_PID"
wait_line "$TMP/OB.log" "reload: done"
timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$OB_PORT" "echo s1" "echo s2" > "$TMP/obs.out" 2>&1 & obs=$!
PIDS+=($obs)
wait_line "$TMP/OB.log" "c4 .*request 0: sync"
"$BIN/qsend" -g "127.0.0.1:$W4_PORT" "release ob1" > /dev/null 2>&1
wait "$obs" || true
expect_lines "$TMP/obs.out" '^"s[12]"$' 2
expect_lines "$TMP/W4.log" "sleep (1|300) ms$" 2
expect_file_has "$TMP/OB.log" "its connection has carried requests outside a session: a new one before a session is given it"
n1=$(grep -n "its connection has carried requests outside a session" "$TMP/OB.log" | head -1 | cut -d: -f1)
n2=$(grep -n "session: given to c4 " "$TMP/OB.log" | head -1 | cut -d: -f1)
[ -n "$n1" ] && [ -n "$n2" ] && [ "$n1" -lt "$n2" ] || fail "the session was given the worker before its connection was made again"
pass "a request pool with owed broadcasts made a session pool: they run, then the first session gets a new connection"

# --- a reload that makes a session pool a request pool and sends the session's user to another
# group, its worker half way through a publish to it: when that message has ended and the session
# with it, the client is in the group the file names (helper round 35a: at 7ebf571 it stayed)
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\nclient_high_water = 65536\nclient_low_water = 16384\n[group ga]\nworkers = 127.0.0.1:%s\npool = session\nusers = u\n[group gb]\nworkers = 127.0.0.1:%s\n' \
    "$W3_PORT" "$W4_PORT" > "$TMP/rg.conf"
start_gateway RG -c "$TMP/rg.conf"
raw_open "$RG_PORT" 6
raw_hs "u:x" 6
raw_text 1 "flood 33554432" 6 # (reads nothing yet: the gateway pauses half way through a publish, one
                               # larger than what the kernel buffers take, so never at its end)
wait_line "$TMP/RG.log" "paused: c1 "
sed -e 's/^pool = session$/users = other/' -e 's/^users = u$//' "$TMP/rg.conf" > "$TMP/rg2.conf"
printf 'users = u\n' >> "$TMP/rg2.conf"
mv "$TMP/rg2.conf" "$TMP/rg.conf"
kill -HUP "$RG_PID"
wait_line "$TMP/RG.log" "user u's session stays on group ga until it ends"
timeout --foreground 30 cat <&6 > /dev/null & rgc=$!                   # now it reads
PIDS+=($rgc)
wait_line "$TMP/RG.log" "session: c1 .* ends: a reload made its group a request pool, the worker is free"
wait_line "$TMP/RG.log" "c1 .*: reload: group gb from now on \(was ga\)"
kill "$rgc" 2> /dev/null || true
raw_text 1 "echo after" 6
wait_line "$TMP/RG.log" "w 127.0.0.1:$W4_PORT: running sync request 1 of c1 "
raw_close 6
pass "... and sends its user to another group: once the message being streamed has ended, the client is there"

# --- a reload that makes a request pool a session pool: a session gets a connection of its own,
# not one that carried requests (helper round 35d: at 95e0eaa the publishes of a flood a request
# had left running on the worker's connection reached the first session's client)
start_worker W5 --rows 10
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\n[group main]\nworkers = 127.0.0.1:%s\nreset_query = delete a from `.\n' \
    "$W5_PORT" > "$TMP/rf.conf"
start_gateway RF -c "$TMP/rf.conf"
"$BIN/qsend" -g "127.0.0.1:$RF_PORT" "flood 100" > "$TMP/rf1.out" 2>&1 || true   # its client gone, the
wait_line "$TMP/RF.log" "async message while it ran no client's request"         # flood goes on
sed -i 's/^\[group main\]$/[group main]\npool = session/' "$TMP/rf.conf"
kill -HUP "$RF_PID"
wait_line "$TMP/RF.log" "reload: done"
timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$RF_PORT" "echo hi" "echo there" > "$TMP/rf2.out" 2>&1 || true
[ "$(tr '\n' '|' < "$TMP/rf2.out")" = '"hi"|"there"|' ] || fail "the first session after the reload got: $(head -c 300 "$TMP/rf2.out")"
expect_file_has "$TMP/RF.log" "its connection has carried requests outside a session: a new one before a session is given it"
expect_file_has "$TMP/RF.log" "connection closed: it carried requests outside a session: a new connection for the next"
pass "a reload that makes a request pool a session pool: the first session has a connection of its own (a flood left running there reaches nobody)"

# --- one message at a time into a client: a session's worker publishing while the client's request
# routed to another group (.qgate.on) replies (helper round 36c: at 9a0f2e2 the reply's bytes went
# into the middle of a 32 MiB publish, 5 runs in 5; the client read a header made of text) ---------
start_worker WIA
start_worker WIB --rows 1000
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\n[group main]\nworkers = 127.0.0.1:%s\npool = session\n[group g2]\nworkers = 127.0.0.1:%s\n' \
    "$WIA_PORT" "$WIB_PORT" > "$TMP/il.conf"
start_gateway IL -c "$TMP/il.conf"
wait_count "$TMP/IL.log" "connected \(capability" 2
# a q client in python: a flood of 32 MiB publishes (more than the kernel's buffers take, so the
# worker pauses in the middle of one), then (`.qgate.on; `g2; "rows 1000") and "stop", reading
# every message and checking each header, each publish whole, then the two replies in order
cat > "$TMP/il.py" <<'PY'
import re, struct, sys, time
from qwire import Q, cv, route
port, log = int(sys.argv[1]), sys.argv[2]
def wait_log(pat):
    for _ in range(600):
        if re.search(pat, open(log, errors="replace").read()):
            return
        time.sleep(0.05)
    sys.exit("timed out waiting for /%s/ in the log" % pat)
pubs, SIZE = 0, 32 << 20
q = Q(port)
def frame():
    t, n = q.header()
    if n > SIZE + 14:
        sys.exit("a header of %d bytes after %d publishes" % (n, pubs))
    return t, q.recvn(n - 8)
assert q.recvn(1) == b"\3"
q.send(cv("flood %d" % SIZE))
if frame()[0] != 2:
    sys.exit("the flood's answer did not come first")
wait_log(r"paused: c[0-9]+ ")
q.send(route("g2", "rows 1000"))
q.send(cv("stop"))
replies = []
while len(replies) < 2:
    t, b = frame()
    if t == 0 and (b[0] != 10 or struct.unpack("<i", b[2:6])[0] != SIZE):
        sys.exit("a publish of type %d after %d publishes" % (b[0], pubs))
    pubs += t == 0
    if t == 2:
        replies.append(b[0])
print("ok publishes=%d replies=%s" % (pubs, replies))
PY
PYTHONPATH="$IT_DIR" timeout --foreground 60 python3 "$TMP/il.py" "$IL_PORT" "$TMP/IL.log" > "$TMP/il.out" 2>&1 || fail "$(cat "$TMP/il.out")"
expect_lines "$TMP/il.out" '^ok publishes=[0-9]+ replies=\[98, 249\]$' 1 # (a table, then stop's long)
pass "a session's worker publishing while its client's request routed to another group replies: each message whole"

# --- a reset query that fails is said (helper round 36c: at 1961613 nothing was logged, and every
# session found what the last one left) -----------------------------------------------------------
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\npool = session\nreset_query = err rfail\n' \
    "$WIA_PORT" > "$TMP/rq.conf"
start_gateway RQ -c "$TMP/rq.conf"
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$RQ_PORT" "echo one" > /dev/null
wait_line "$TMP/RQ.log" "warn  w 127\\.0\\.0\\.1:$WIA_PORT: the reset query failed \\('rfail\\): what ran in its q before may still be there for the next session"
pass "a reset query answered with a q error: a warning says the next session may find what the last left"

# --- a session's worker lost in the middle of a message to its client: what was queued for the
# client ahead of that message still goes, then the close (helper round 36e: at e80cc18 the close
# dropped the client's output queue, whole replies in it: the client read what the kernel held,
# then the close in the middle of the first) -------------------------------------------------------
cut_run WTL "pool = session\n" "its session's worker was lost"
pass "a session's worker lost in the middle of a reply: the reply queued ahead of it still goes whole, then the close"

# --- a callback waiting in its client's output, behind what that client is still owed and reading
# slowly: its worker's query_timeout waits too (helper round 36e: at e80cc18 a routed worker timed
# out while its callback sat behind a slow reader's earlier messages, the client never having seen
# it); but not behind a client that takes nothing (helper round 37b: with client_stall_timeout = 0,
# at 6a9ad9c, that held the worker for good) ------------------------------------------------------
# (query_timeout is 5 s: it times WQA's "text 16000000" too, whose first byte an ASan qworker sent
# 0.5 s after the request on a quiet machine and over 1 s beside two busy loops: helper round 38a,
# 3 failures in 8 runs with 1 s, the session lost and the callback never sent; with 3 s, helper
# round 39a saw it at 2.66 s beside two busy loops and a second test_session)
start_worker WQA
start_worker WQB
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\nquery_timeout = 5000\nclient_stall_timeout = 0\nclient_high_water = 40000000\nclient_low_water = 30000000\nsplice = false\n[group main]\nworkers = 127.0.0.1:%s\npool = session\n[group g2]\nworkers = 127.0.0.1:%s\n' \
    "$WQA_PORT" "$WQB_PORT" > "$TMP/cq.conf"
start_gateway CQ -c "$TMP/cq.conf"
wait_count "$TMP/CQ.log" "connected \(capability" 2
# a q client in python: "text 16000000" in its session, then (`.qgate.on; `g2; "callback echo hi");
# then, until told to go on, it reads 64 KiB every 20 ms (slow) or nothing (none); then the reply,
# the callback (answered "pong"), and the routed reply
cat > "$TMP/cq.py" <<'PY'
import select, sys, time
from qwire import Q, cv, route
size = 6000000 if sys.argv[2] == "steady" else 16000000
q = Q(int(sys.argv[1]), rcvbuf=65536)
q.send(cv("text %d" % size))
q.send(route("g2", "callback echo hi"))
print("sent", flush=True)
if sys.argv[2] == "steady":  # 64 KiB every 50 ms, to the callback's last byte
    while len(q.buf) < 1 + 8 + size + 6 + 8 + 13:
        time.sleep(0.05)
        q.slurp(65536, 5)
else:
    while not select.select([sys.stdin], [], [], 0.02)[0]:
        if sys.argv[2] in ("slow", "late", "early"):
            q.slurp(65536, 0.02)
    sys.stdin.readline()
assert q.recvn(1) == b"\3"
t, b = q.frame()
if t != 2 or len(b) != size + 6:
    sys.exit("the first reply: type %d, %d bytes" % (t, len(b)))
t, b = q.frame()
if t != 1 or b != cv("echo hi"):
    sys.exit("not the callback: type %d %r" % (t, b[:40]))
if sys.argv[2] in ("late", "early"):  # the callback had: answered once told to
    print("got", flush=True)
    sys.stdin.readline()
q.send(cv("pong"), t=2)
t, b = q.frame()
print("ok type=%d reply=%r" % (t, b))
PY
# cq_run MODE: the client above, until its worker's clock is seen to wait (slow) or run out (none),
# or to its end (steady)
cq_run() {
    local held reached called
    held=$(grep -c "its callback waits in" "$TMP/CQ.log" || true)
    called=$(grep -c "w 127\\.0\\.0\\.1:$WQB_PORT: busy SENT -> CALLED" "$TMP/CQ.log" || true)
    reached=$(grep -c "its callback has reached" "$TMP/CQ.log" || true)
    coproc CQPY { PYTHONPATH="$IT_DIR" timeout --foreground 120 python3 "$TMP/cq.py" "$CQ_PORT" "$1" 2>&1; }
    PIDS+=("$CQPY_PID")
    read -r -t 60 line <&"${CQPY[0]}" || fail "the python client did not start"
    [ "$line" = sent ] || fail "the python client: $line $(cat <&"${CQPY[0]}")"
    if [ "$1" = steady ]; then
        :
    elif [ "$1" = early ]; then
        wait_count "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: busy SENT -> CALLED" $((called + 1))
    elif [ "$1" = slow ] || [ "$1" = late ]; then
        wait_count "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: its callback waits in c[0-9]+ .*'s output \\([0-9]+ bytes in its socket's send buffer\\): its query_timeout waits too" $((held + 1))
    else
        wait_line "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: no reply byte for 5000 ms"
    fi
    echo go >&"${CQPY[1]}"
    if [ "$1" = late ] || [ "$1" = early ]; then # it has the callback: answered once qgate has seen that it has it
        read -r -t 60 line <&"${CQPY[0]}" || fail "the python client: no callback"
        [ "$line" = got ] || fail "the python client: $line $(cat <&"${CQPY[0]}")"
        wait_count "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: its callback has reached c[0-9]+ .*: its query_timeout runs from now" $((reached + 1))
        echo answer >&"${CQPY[1]}"
    fi
    cat <&"${CQPY[0]}" > "$TMP/cq.$1" || true
}
cq_run slow
expect_lines "$TMP/cq.slow" "^ok type=2 reply=b'\\\\n\\\\x00\\\\x04\\\\x00\\\\x00\\\\x00pong'\$" 1
expect_lines "$TMP/CQ.log" "no reply byte" 0
pass "a callback behind its client's earlier reply, read slowly: its worker's query_timeout waits until the client has it; the client answers it, and the reply is that answer"
# ... and once it has the callback, its client has a whole query_timeout to answer (helper round
# 38b: at 3f24ada the clock ran from the last look that saw it on its way, and an answer sent
# before query_timeout had passed since the client got it came too late)
cq_run late
expect_lines "$TMP/cq.late" "^ok type=2 reply=b'\\\\n\\\\x00\\\\x04\\\\x00\\\\x00\\\\x00pong'\$" 1
pass "... and once the client has the callback, it has a whole query_timeout to answer it"
# ... and so when it got there before the worker's clock first looked (helper round 38c: at e404dc8
# only a look that had held it restarted the clock)
cq_run early
expect_lines "$TMP/cq.early" "^ok type=2 reply=b'\\\\n\\\\x00\\\\x04\\\\x00\\\\x00\\\\x00pong'\$" 1
pass "... and when it got there before the clock's first look"
cq_run none
expect_lines "$TMP/cq.none" "^ok type=2 reply=b.*qgate: timeout" 1 # (the callback answered after its worker was dropped)
pass "... and behind a client that reads nothing: the worker times out at query_timeout, client_stall_timeout 0 or not"
# ... and once the callback is in the client's socket's send buffer, behind megabytes ahead of it
# there, read at 1.3 MB/s (helper round 37d: at f63ad4d the worker timed out at query_timeout, as
# qgate saw no more of the callback; now the send buffer's count, SIOCOUTQ, says where it is)
cq_run steady
expect_lines "$TMP/cq.steady" "^ok type=2 reply=b'\\\\n\\\\x00\\\\x04\\\\x00\\\\x00\\\\x00pong'\$" 1
expect_file_has "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: its callback waits in c[0-9]+ .*'s output \\([1-9][0-9]{5,} bytes in its socket's send buffer\\)"
expect_lines "$TMP/CQ.log" "w 127\\.0\\.0\\.1:$WQB_PORT: no reply byte" 1 # (cq_run none's)
pass "... and a callback behind over 100 KB in its client's socket's send buffer, read at 1.3 MB/s: its worker waits for it"

# --- a callback its client has, unanswered, while its session's worker floods it with publishes
# that qgate pushes whole (the client has capability 1) and the client reads them: its worker is
# timed out at query_timeout (helper round 38c: at e404dc8 each publish moved the client's owed
# mark, the callback looked on its way for good, the worker held as long as the client read)
start_worker WHA
start_worker WHB
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\nquery_timeout = 1000\n[group main]\nworkers = 127.0.0.1:%s\npool = session\n[group g2]\nworkers = 127.0.0.1:%s\n' \
    "$WHA_PORT" "$WHB_PORT" > "$TMP/wh.conf"
start_gateway WH -c "$TMP/wh.conf"
wait_count "$TMP/WH.log" "connected \(capability" 2
cat > "$TMP/wh.py" <<'PY'
import select, socket, sys, time
from qwire import Q, cv, route
q = Q.__new__(Q)
q.buf = bytearray()
q.s = socket.socket()
q.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
q.s.connect(("127.0.0.1", int(sys.argv[1])))
q.s.sendall(b"t:t\1\0")  # capability 1
q.send(cv("flood 100"), t=0)
q.send(route("g2", "callback echo hi"))
told = False
while not select.select([sys.stdin], [], [], 0)[0]:  # 16 KiB every 50 ms, never answering
    q.slurp(16384, 0.01)
    time.sleep(0.05)
    if not told and b"echo hi" in q.buf:
        print("callback", flush=True)
        told = True
    if len(q.buf) > 1000000:
        del q.buf[:500000]
PY
coproc WHPY { PYTHONPATH="$IT_DIR" timeout --foreground 120 python3 "$TMP/wh.py" "$WH_PORT" 2>&1; }
PIDS+=("$WHPY_PID")
read -r -t 60 line <&"${WHPY[0]}" || fail "the python client: no callback"
[ "$line" = callback ] || fail "the python client: $line"
wait_line "$TMP/WH.log" "w 127\\.0\\.0\\.1:$WHB_PORT: no reply byte for 1000 ms" 20
echo stop >&"${WHPY[1]}"
pass "a callback its client has, unanswered, while publishes pushed whole flow to it and it reads them: its worker times out"

# --- a paused group starts nothing new: a session's worker that connects again dirty (its query
# timed out, the session lost) runs its reset query only once a session is given it, after the
# resume (helper round 36c: at e80cc18 it ran it at once, inside a completed pause) ---------------
start_worker WPR
printf 'alice:x\nop:pw\tadmin=1\n' > "$TMP/prz.users"
printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\nusers_file = %s\nquery_timeout = 500\n[group main]\nworkers = 127.0.0.1:%s\npool = session\nreset_query = delete a from `.\n' \
    "$TMP/prz.users" "$WPR_PORT" > "$TMP/prz.conf"
start_gateway PRZ -c "$TMP/prz.conf"
wait_line "$TMP/PRZ.log" "connected \(capability"
timeout --foreground 20 "$BIN/qsend" -g "127.0.0.1:$PRZ_PORT" -u alice:x "a:1" "hold prz" > "$TMP/prz1.out" 2>&1 &
PRQ=$!
wait_line "$TMP/WPR.log" "hold prz"
wait_line "$TMP/PRZ.log" "no reply byte for 500 ms" # (it connects again once its q has closed the old one)
wait "$PRQ" || true
expect_lines "$TMP/prz1.out" "^'qgate: timeout" 1
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$PRZ_PORT" -u op:pw ".qgate.pause[\`main]" > "$TMP/prz.p" 2>&1 || true
expect_lines "$TMP/prz.p" '^1b$' 1
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$WPR_PORT" "release prz" > /dev/null # its query ends
wait_line "$TMP/PRZ.log" "w 127\\.0\\.0\\.1:$WPR_PORT: its group is paused: the reset query runs before a session is given it, after the resume"
expect_lines "$TMP/PRZ.log" "qgate dropped its last connection before the reset query ran: the reset query runs first" 0
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$PRZ_PORT" -u op:pw ".qgate.resume[\`main]" > "$TMP/prz.r" 2>&1 || true
expect_lines "$TMP/prz.r" '^1b$' 1
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$PRZ_PORT" -u alice:x "a" > "$TMP/prz2.out" 2>&1 || true
expect_lines "$TMP/prz2.out" "^'a\$" 1 # (the reset query ran before this session: a is gone)
expect_lines "$TMP/PRZ.log" "its q may hold what ran outside a session, or what the last one left: the reset query runs before a session is given it" 1
pass "a paused session pool: a worker connecting again dirty runs its reset query after the resume, before the next session"

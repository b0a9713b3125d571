#!/usr/bin/env bash
# What a worker publishes, and what a client's output may hold. In a pool = request group no
# client owns an idle worker: what it sends then (a timer, a subscription) belongs to nobody,
# and is dropped, counted and logged with the fix, never handed to another user; in a session
# group it goes to the session's client. Every byte queued for a client counts against
# client_high_water: a worker publishing faster than its subscriber reads is paused, so the
# gateway's memory stays bounded however long it runs; a client that keeps more than
# client_high_water waiting (a reply made whole here, read slowly) for client_stall_timeout is
# closed. Each case failed on qgate 0.12.0: the idle publish went to the client served last
# (another user), the gateway's memory grew by hundreds of MB a second behind a slow
# subscriber, and a client reading a little at a time was never closed.
. "$(dirname "$0")/lib.sh"

start_worker W --rows 1000
start_worker W2 --rows 1000
conf() { # conf FILE POOL [KEY=VALUE...]: one group over W
    local f=$1 pool=$2 kv
    shift 2
    { printf '[gateway]\nbind = 127.0.0.1\nunix_socket = 0\n'
      for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}"; done
      printf '[group main]\nworkers = 127.0.0.1:%s\npool = %s\n' "$W_PORT" "$pool"; } > "$f"
}
dropped_is() { timeout --foreground 5 "$BIN/qsend" -g "$G" ".qgate.stats[]" 2>/dev/null | grep -qE "\\| ,$1 \\| ,0N \\| ,\`tcp \\| ,0N \\| ,0N\$"; }
hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# --- pool = request: alice's publish, due while the worker is idle, never reaches bob --------
METRICS_PORT=$(pick_port)
conf "$TMP/r.conf" request metrics_port="$METRICS_PORT" metrics_bind=127.0.0.1
start_gateway R -c "$TMP/r.conf" --loglevel debug
wait_line "$TMP/R.log" "connected \\(capability"
G="127.0.0.1:$R_PORT"
raw_open "$R_PORT" 3
raw_hs alice:pw 3
raw_open "$R_PORT" 4
raw_hs bob:pw 4
# The worker publishes when the test says (tell, from a connection of its own), never on a timer
# that could fire while bob's request is on it (that publish would be his run's: the race
# docs/usage.md describes)
for i in 1 2 3; do
    raw_text 1 "echo a$i" 3             # alice is served, then bob: he is the one served last
    timeout --foreground 10 head -c 16 <&3 > "$TMP/a$i.out" || fail "no reply to alice's echo a$i"
    raw_text 1 "echo b$i" 4
    timeout --foreground 10 head -c 16 <&4 > "$TMP/b$i.out" || fail "no reply to bob's echo b$i"
    grep -aq "b$i" "$TMP/b$i.out" || fail "bob's reply: $(od -c "$TMP/b$i.out" | head -2)"
    timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$W_PORT" "tell tick-$i" > "$TMP/tell.out" # the worker idle
    expect_lines "$TMP/tell.out" '^1$' 1  # published on the gateway's one connection
    wait_for 10 "publish $i counted as dropped" dropped_is "$i"
done
raw_text 1 "echo last" 4               # what bob reads next is this reply: no tick before it
timeout --foreground 10 head -c 18 <&4 > "$TMP/b.out" || fail "no reply to bob's echo last"
raw_text 1 "echo last" 3
timeout --foreground 10 head -c 18 <&3 > "$TMP/a.out" || fail "no reply to alice's echo last"
grep -aq tick "$TMP/a.out" "$TMP/b.out" && fail "a publish of an idle worker reached a client"
grep -aq last "$TMP/b.out" && grep -aq last "$TMP/a.out" || fail "the replies are not what came next"
raw_close 3
raw_close 4
expect_file_has "$TMP/R.log" "async message while it ran no client's request \\(pool = request\\): dropped \\(a worker that publishes to its subscribers belongs in a pool = session group\\)"
m=$(metric "qgate_worker_async_dropped_total{group=\"main\",worker=\"127.0.0.1:$W_PORT\"}")
[ "$m" = 3 ] || fail "qgate_worker_async_dropped_total is '$m', not 3"
pass "pool = request: 3 publishes of an idle worker (bob served last before each) reached nobody, counted dropped 3 (and in the metrics), logged with the fix"

# --- pool = session: the same publish reaches alice, whose session it is ---------------------
conf "$TMP/s.conf" session
start_gateway S -c "$TMP/s.conf"
wait_line "$TMP/S.log" "connected \\(capability"
raw_open "$S_PORT" 3
raw_hs alice:pw 3
raw_text 1 "later 50 tick-s" 3
timeout --foreground 10 head -c $((17 + 20)) <&3 > "$TMP/s.out" || fail "alice got no publish in her session"
raw_close 3
grep -aq "tick-s" "$TMP/s.out" || fail "alice's session got $(od -c "$TMP/s.out" | head -3)"
pass "pool = session: the worker's later publish reaches its session's client"

# --- a slow subscriber: the publishing worker is paused, the gateway's memory bounded -------
# (64 KiB messages as fast as the worker's socket takes them; the subscriber reads 16 KiB every
# 10 ms; client_high_water 1 MiB. The subscriber runs for 4 s: a length of run, not a bound
# asserted on time; on 0.12.0 the gateway grew by 200 to 400 MB a second)
conf "$TMP/f.conf" session client_high_water=1048576 client_low_water=262144
start_gateway F -c "$TMP/f.conf" --loglevel debug
wait_line "$TMP/F.log" "connected \\(capability"
idle=$(rss_kb "$F_PID")
timeout --foreground 60 "$BIN/qslow" -g "127.0.0.1:$F_PORT" -q "flood 65536" -r 16384 -t 10 -s 4 > "$TMP/slow.out" 2> "$TMP/slow.err" ||
    fail "qslow: $(cat "$TMP/slow.out" "$TMP/slow.err")"
peak=$(hwm_kb "$F_PID")
expect_file_has "$TMP/slow.out" "^qslow messages=[1-9][0-9]* bytes=[0-9]+ reply=ok closed=no "
expect_file_has "$TMP/F.log" "w 127.0.0.1:$W_PORT: paused: c1 .* has [0-9]+ bytes unsent"
[ $((peak - idle)) -lt $((48 * 1024)) ] || fail "qgate's peak RSS grew by $(((peak - idle) / 1024)) MiB behind a slow subscriber (idle $((idle / 1024)) MiB)"
pass "a slow subscriber for 4 s: $(sed -n 's/^qslow messages=\([0-9]*\) bytes=\([0-9]*\).*/\1 messages, \2 bytes/p' "$TMP/slow.out"), not closed; qgate's peak RSS $(((peak - idle) / 1024)) MiB over idle (client_high_water 1 MiB; ASan build)"

# --- a client keeping more than client_high_water waiting for client_stall_timeout: closed --
# (a .qgate.all's merged reply of 20 MB, made whole on a writer thread, read at 50 KB/s: bytes
# are accepted all along, but over 64 KiB stay waiting for more than 1 s)
printf '[gateway]\nbind = 127.0.0.1\nunix_socket = 0\nclient_high_water = 65536\nclient_low_water = 16384\nclient_stall_timeout = 1000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$W_PORT" "$W2_PORT" > "$TMP/h.conf"
start_gateway H -c "$TMP/h.conf"
wait_count "$TMP/H.log" "connected \\(capability" 2
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$H_PORT" --read-rate 50000 "all:main:text 10000000" > "$TMP/h.out" 2>&1 &
slow=$!
wait_line "$TMP/H.log" "closed: stalled: its output accepted no byte, or stayed over client_high_water, for client_stall_timeout" 30
kill "$slow" 2>/dev/null || true # it reads on what the kernel holds for it at 50 KB/s
wait "$slow" || true
grep -q "^read " "$TMP/h.out" || fail "the slow reader read nothing: $(head -c 300 "$TMP/h.out")"
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$H_PORT" "echo next" > "$TMP/q.out" || true
expect_lines "$TMP/q.out" '^"next"$' 1
pass "a client that reads, but keeps over client_high_water waiting for client_stall_timeout, is closed; the next is served"

# ... one that takes client_high_water bytes of it every client_stall_timeout is reading on, and
# gets it all (a 20 MB merged reply at 5 MB/s, 1 MiB a 1 s bound: at 93feb81 it was closed after
# 1 s, though a reply streamed through, or straight from the worker, reached it)
sed -e 's/^client_high_water = .*/client_high_water = 1048576/' -e 's/^client_low_water = .*/client_low_water = 262144/' \
    "$TMP/h.conf" > "$TMP/h2.conf"
start_gateway H2 -c "$TMP/h2.conf"
wait_count "$TMP/H2.log" "connected \\(capability" 2
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$H2_PORT" --read-rate 5000000 "all:main:text 10000000" > "$TMP/h2.out" 2>&1 &
slow=$!
wait_line "$TMP/h2.out" "^read 20000014\$" 30 # (the whole merged reply: it reads on until a close)
kill "$slow" 2>/dev/null || true
wait "$slow" || true
grep -q "closed" "$TMP/h2.out" && fail "a reader taking client_high_water a second was closed: $(cat "$TMP/h2.out")"
expect_lines "$TMP/H2.log" "closed: stalled" 0
pass "a client that takes client_high_water bytes of a reply held whole every client_stall_timeout reads it all"

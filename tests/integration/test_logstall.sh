#!/usr/bin/env bash
# A log reader that stops (a stalled journald, `qgate 2>&1 | tee` behind a stopped pager) costs
# log lines, counted, never service: qgate's stderr is a FIFO whose reader is stopped (SIGSTOP)
# while one client floods it with response messages nobody asked for and 16 clients run
# thousands of requests at loglevel debug (megabytes of lines); every request is answered and a
# new client is served meanwhile. Once the reader goes on, the log says how many lines it
# dropped, and the flood left a few rate-limited warnings with the count of the rest. Under
# systemd (JOURNAL_STREAM set) each line starts with its priority, <4> for a warning.
. "$(dirname "$0")/lib.sh"

start_worker W1
start_worker W2
WORKERS="127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT"

# raw_msg TYPE TEXT: the bytes of a char vector message of TYPE (2: a response) for printf %b
raw_msg() { printf '%s' "\\x01\\x0$1\\x00\\x00$(le32 $((14 + ${#2})))\\x0a\\x00$(le32 ${#2})$2"; }
UNASKED=$(raw_msg 2 x)
UNASKED_RE="response message nobody asked for: dropped"

# --- under systemd: lines start with their priority ---------------------------------------
export JOURNAL_STREAM=8:1234
start_gateway J --workers "$WORKERS"
unset JOURNAL_STREAM
wait_count "$TMP/J.log" "connected \\(capability 3\\)" 2
raw_open "$J_PORT" 4
raw_hs u:p 4
printf '%b' "$UNASKED" >&4
wait_line "$TMP/J.log" "$UNASKED_RE"
raw_close 4
grep -E "$UNASKED_RE" "$TMP/J.log" | grep -qE '^<4>[0-9]{4}-' \
    || fail "a warning under JOURNAL_STREAM does not start with <4>: $(grep -E "$UNASKED_RE" "$TMP/J.log")"
grep -E " info  listening on " "$TMP/J.log" | grep -qE '^<6>[0-9]{4}-' || fail "an info line does not start with <6>"
grep -vE '^<[3467]>[0-9]{4}-' "$TMP/J.log" && fail "a line without its priority under JOURNAL_STREAM"
kill -TERM "$J_PID"
wait_exit "$J_PID" 30
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate under JOURNAL_STREAM exited $EXIT_STATUS"
pass "JOURNAL_STREAM set: every line starts with its priority (<4> warn, <6> info)"

# --- stderr on a FIFO whose reader stops ----------------------------------------------------
mkfifo "$TMP/fifo"
cat "$TMP/fifo" > "$TMP/gw.log" &
READER=$!
PIDS+=("$READER")
# fail_cont MSG: the reader goes on first, so that the log above can be read
fail_cont() { kill -CONT "$READER" 2>/dev/null || true; fail "$@"; }
METRICS_PORT=$(pick_port)
printf '[gateway]\nmetrics_port = %s\nmetrics_bind = 127.0.0.1\n[group main]\nworkers = %s\n' "$METRICS_PORT" "$WORKERS" > "$TMP/stall.conf"
"$BIN/qgate" -c "$TMP/stall.conf" -p 0 --bind 127.0.0.1 --loglevel debug > "$TMP/gw.out" 2> "$TMP/fifo" &
GW_PID=$!
PIDS+=("$GW_PID")
wait_line "$TMP/gw.out" "qgate listening on"
G="127.0.0.1:$(sed -n 's/^qgate listening on .*:\([0-9]*\)$/\1/p' "$TMP/gw.out")"
wait_count "$TMP/gw.log" "connected \\(capability 3\\)" 2
kill -STOP "$READER"

# 32768 response messages nobody asked for, then a sync request on the same connection: its
# reply says the gateway has read them all
printf '%b' "$UNASKED" > "$TMP/flood"
for i in $(seq 1 15); do cat "$TMP/flood" "$TMP/flood" > "$TMP/flood2"; mv "$TMP/flood2" "$TMP/flood"; done
FLOOD=32768
raw_open "${G#*:}" 3
raw_hs u:p 3
timeout --foreground 30 cat "$TMP/flood" >&3 || fail_cont "the gateway stopped reading the flood (the log blocked it?)"
raw_text 1 "echo flood"
timeout --foreground 30 head -c 19 <&3 > "$TMP/flood.reply" || true
[ "$(tail -c 5 "$TMP/flood.reply")" = flood ] \
    || fail_cont "no reply after $FLOOD unsolicited responses with the log reader stopped"

# thousands of requests from 16 clients, each logging ~500 bytes at debug: megabytes, far past
# the pipe's 64 KiB and the queue's 1 MiB; every one answered
total=0
for run in $(seq 1 30); do
    timeout --foreground 60 "$BIN/qload" -g "$G" --class s:text=echo\ 1:16 --warmup 0 --seconds 1 \
        > "$TMP/load.out" 2> "$TMP/load.err" || fail_cont "qload exited $?: $(cat "$TMP/load.out" "$TMP/load.err")"
    grep -q " qerrors=0 failed=0" "$TMP/load.out" || fail_cont "qload: $(cat "$TMP/load.out")"
    grep -q "unanswered_at_end" "$TMP/load.err" && fail_cont "requests unanswered: $(cat "$TMP/load.err")"
    n=$(sed -n 's/.* requests=\([0-9]*\) .*/\1/p' "$TMP/load.out")
    [ "${n:-0}" -gt 0 ] || fail_cont "qload got no reply: $(cat "$TMP/load.out")"
    total=$((total + n))
    [ "$total" -ge 8000 ] && break
done
[ "$total" -ge 8000 ] || fail_cont "only $total requests in 30 runs"
pass "reader stopped: $FLOOD unsolicited responses and $total requests by 16 clients, every one answered"

# a new client: handshake and query, the reader still stopped
timeout --foreground 30 "$BIN/qsend" -g "$G" "echo new" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"new"$' 1
[ "$(sed -n 's/^.*) \(.\) .*/\1/p' "/proc/$READER/stat")" = T ] || fail_cont "the reader is not stopped"
pass "a new client is served while the log reader is stopped"

kill -CONT "$READER"
wait_line "$TMP/gw.log" "[0-9]+ log lines dropped: the log was behind"
dropped=$(sed -n 's/.* \([0-9]*\) log lines dropped: the log was behind$/\1/p' "$TMP/gw.log" | head -n 1)
pass "the reader back: the log says $dropped lines were dropped"

# the count exported: .qgate.totals[] log_dropped is what the log has said it dropped
log_dropped_said() {
    T=$(timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.totals[]" | awk -F'!' '{ nk = split($1, k, "`"); split($2, v, " ")
        for (i = 2; i <= nk; i++) if (k[i] == "log_dropped") print v[i - 1] }')
    SAID=$(sed -n 's/.* \([0-9]*\) log lines dropped: the log was behind$/\1/p' "$TMP/gw.log" | awk '{ s += $1 } END { print s + 0 }')
    M=$(curl -s --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "qgate_log_dropped_total" { print $2 }')
    [ "${T:-0}" -gt 0 ] && [ "$T" -eq "$SAID" ] && [ "${M:-0}" -eq "$SAID" ]
}
wait_for 30 ".qgate.totals[] log_dropped and qgate_log_dropped_total = the dropped lines said" log_dropped_said
pass ".qgate.totals[] log_dropped and qgate_log_dropped_total: $T, as the log said"

# the flood's warnings: one a second at most; the next one says how many were not logged
unasked_counted() { printf '%b' "$UNASKED" >&3; grep -qE "$UNASKED_RE \\(and [0-9]+ more not logged" "$TMP/gw.log"; }
wait_for 30 "a warning counting the unsolicited responses not logged" unasked_counted
raw_close 3
lines=$(grep -cE "$UNASKED_RE" "$TMP/gw.log" || true)
counted=$(sed -n "s/.*$UNASKED_RE (and \\([0-9]*\\) more not logged.*/\\1/p" "$TMP/gw.log" | awk '{s += $1} END {print s + 0}')
[ "$lines" -le 10 ] || fail "$lines warnings for $FLOOD unsolicited responses"
[ $((lines + counted)) -ge "$FLOOD" ] || fail "$lines warnings + $counted counted < $FLOOD sent"
pass "$FLOOD unsolicited responses: $lines warnings, $counted more counted"

kill -TERM "$GW_PID"
wait_exit "$GW_PID" 30
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS"
wait_exit "$READER" 30 # the FIFO's end of file
has_line "$TMP/gw.log" "drained: exiting" || fail "the last lines were not written at exit"
pass "SIGTERM: exits 0, the queued lines written"

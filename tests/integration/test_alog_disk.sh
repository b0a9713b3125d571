#!/usr/bin/env bash
# The access log when its file misbehaves (docs/design.md: "a stalled journald, a FIFO nobody
# reads, a hung NFS mount or a full disk costs lines, counted, never service"): a full disk (a 256 KiB tmpfs; /dev/full) counts
# lines written and dropped truly, never glues a line to a fragment, and costs no reply; a FIFO
# nobody reads (writer_threads = 1) and one nobody opens hold neither the loop nor the writer
# pool, a SIGUSR1 while stuck included, and qgate still exits on SIGTERM.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 100
W="127.0.0.1:$W1_PORT"

# a whole record: every key, in order (test_access.sh)
V='([^ "=]*|"([^"\\]|\\.)*")'
LINE="^time=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z client=[0-9]+ user=$V peer=$V group=$V worker=$V type=(sync|async) req_bytes=[0-9]+ reply_bytes=[0-9]+ queued_us=[0-9]+ run_us=[0-9]+ outcome=(ok|error|gwerror|gone|closed)( error=$V)?\$"

# gateway NAME ACCESS_LOG [MORE CONFIG LINES]: start qgate NAME with its metrics on METRICS_PORT
gateway() {
    local name=$1 alog=$2
    shift 2
    METRICS_PORT=$(pick_port)
    { printf '[gateway]\nmetrics_port = %s\nmetrics_bind = 127.0.0.1\naccess_log = %s\n' "$METRICS_PORT" "$alog"
      for l in "$@"; do printf '%s\n' "$l"; done
      printf '[group main]\nworkers = %s\n' "$W"; } > "$TMP/$name.conf"
    start_gateway "$name" -c "$TMP/$name.conf"
    local port="${name}_PORT"
    G="127.0.0.1:${!port}"
    wait_line "$TMP/$name.log" "connected \\(capability 3\\)" 10
}
# counts: R (requests ended), L (access log lines written), D (dropped), E (errors), Q (lines
# waiting for the access log's thread) from one page
counts() {
    read -r R L D E Q < <(curl -s --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics" | awk '
        $1 ~ /^qgate_requests_total\{/ { r += $2 }
        $1 == "qgate_access_log_lines_total" { l = $2 }
        $1 == "qgate_access_log_dropped_total" { d = $2 }
        $1 == "qgate_access_log_errors_total" { e = $2 }
        $1 == "qgate_access_log_queued" { q = $2 }
        END { print r + 0, l + 0, d + 0, (e == "" ? "none" : e), (q == "" ? "none" : q) }')
}
# settled [FILE]: the access log's thread has nothing left to write, and every request ended is a
# line written or dropped but, on a full disk, a line cut just before its newline: it waits for
# that newline (a line once it is written), the file ending in it; PENDING is 1 then
settled() {
    counts
    [ "$Q" = 0 ] || return 1
    PENDING=$((R - L - D))
    [ "$R" -gt 0 ] && { [ "$PENDING" -eq 0 ] || { [ "$PENDING" -eq 1 ] && [ -n "${1:-}" ] && [ -n "$(tail -c 1 "$1")" ]; }; }
}
# ping: .qgate.ping[] answered within 10 s
ping_ok() { timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.ping[]" 2>&1 | grep -qx '1b'; }
# alog_totals: "LINES DROPPED ERRORS" as .qgate.totals[] says (one request: its own line comes after)
alog_totals() {
    timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.totals[]" | awk -F'!' '{ nk = split($1, k, "`"); split($2, v, " ")
        for (i = 2; i <= nk; i++) t[k[i]] = v[i - 1]
        print t["alog_lines"] "/" t["alog_dropped"] "/" t["alog_errors"] }'
}
# soak_with_pings TAG CONNS PER: qsoak CONNS x PER requests "echo ID|PAD", pinging the gateway
# all along (each ping answered within 10 s); its summary in $TMP/TAG.soak
soak_with_pings() {
    local tag=$1 conns=$2 per=$3 pings=0
    timeout --foreground 120 "$BIN/qsoak" -g "$G" -c "$conns" --requests "$per" --max-pad 100 --seconds 100 --drain 10 \
        > "$TMP/$tag.soak" 2> "$TMP/$tag.soak.err" & local sp=$!
    while kill -0 "$sp" 2>/dev/null; do
        ping_ok || fail "$tag: .qgate.ping[] not answered within 10 s under load"
        pings=$((pings + 1))
    done
    wait "$sp" || fail "$tag: qsoak exited $?: $(cat "$TMP/$tag.soak" "$TMP/$tag.soak.err" | tail -3)"
    grep -qE "^qsoak requests=$((conns * per)) ok=$((conns * per)) " "$TMP/$tag.soak" ||
        fail "$tag: not every request answered: $(cat "$TMP/$tag.soak")"
    PINGS=$pings
}
# check_file FILE: every line of FILE is a whole record but fragments (cut writes, ended by a
# newline): none holds two records; WHOLE = whole lines, FRAGS = the others
check_file() {
    local glued
    if [ -n "$(tail -c 1 "$1")" ]; then # its last line still open (PENDING): only the ended ones
        head -n "$(wc -l < "$1")" "$1" > "$TMP/ended"
        set -- "$TMP/ended"
    fi
    glued=$(grep -c 'time=.*time=' "$1" || true)
    [ "$glued" -eq 0 ] || fail "$1: $glued lines hold two records (glued to a fragment): $(grep -m 2 'time=.*time=' "$1")"
    WHOLE=$(grep -cE "$LINE" "$1" || true)
    FRAGS=$(($(awk 'END { print NR }' "$1") - WHOLE))
}

# --- a 256 KiB tmpfs, filled under load ----------------------------------------------------------
DISK="$TMP/disk"
mkdir "$DISK"
unmount_disk() { if mountpoint -q "$DISK"; then umount "$DISK" || umount -l "$DISK"; fi; }
CLEANUP_HOOK=unmount_disk
mount -t tmpfs -o size=256k tmpfs "$DISK"
dd if=/dev/zero of="$DISK/filler" bs=1k count=160 status=none # room for about 500 lines
A="$DISK/access.log"
gateway GD "$A"
soak_with_pings disk 6 500 # 3,000 requests: about 600 KB of lines
wait_for 30 "lines written + dropped = requests ended" settled "$A"
echo "# full disk: $R requests ended, $L lines written, $D dropped, $E errors; $PINGS pings during the load"
check_file "$A"
[ "$WHOLE" -eq "$L" ] || fail "the file holds $WHOLE whole lines, the metrics say $L written ($D dropped, $R requests)"
[ "$D" -gt 0 ] || fail "nothing dropped: the disk never filled ($L lines)"
[ "$FRAGS" -le 1 ] || fail "$FRAGS fragments in the file"
[ "$E" != none ] && [ "$E" -gt 0 ] || fail "qgate_access_log_errors_total is $E on a full disk"
expect_file_has "$TMP/GD.log" "access log $A: No space left on device: lines dropped \\([0-9]+ write errors, [0-9]+ lines dropped so far\\)"
pass "a full disk: lines in the file ($WHOLE) + dropped ($D) = requests ended ($R), none glued, every ping answered"

# space again: the next lines are whole, the fragment (if any) ended first
rm "$DISK/filler"
R0=$R L0=$L D0=$D P0=$PENDING
qs=()
for i in $(seq 1 100); do qs+=("echo $i"); done
timeout --foreground 30 "$BIN/qsend" -g "$G" --pipeline "${qs[@]}" > "$TMP/q.out"
expect_lines "$TMP/q.out" '^"[0-9]+"$' 100
wait_for 30 "lines written + dropped = requests ended" settled
[ "$D" -eq "$D0" ] && [ $((L - L0)) -eq $((R - R0 + P0)) ] ||
    fail "with space again: $((R - R0)) requests, $((L - L0)) lines written, $((D - D0)) dropped"
check_file "$A"
[ "$WHOLE" -eq "$L" ] || fail "the file holds $WHOLE whole lines, the metrics say $L written"
[ -z "$(tail -c 1 "$A")" ] || fail "the file does not end in a whole line"
tail -n 100 "$A" | grep -cvE "$LINE" > "$TMP/bad" || true
[ "$(cat "$TMP/bad")" -eq 0 ] || fail "of the last 100 lines, $(cat "$TMP/bad") are not whole records: $(tail -n 100 "$A" | grep -vE "$LINE" | head -2)"
t=$(alog_totals)
[ "$t" = "$L/$D/$E" ] || fail ".qgate.totals[] alog_lines/alog_dropped/alog_errors: $t, the metrics: $L/$D/$E"
pass "space again: the next 100 lines whole, after the fragment ended; .qgate.totals[] says the same"
kill -TERM "$GD_PID"
wait_exit "$GD_PID" 30

# --- /dev/full: nothing written, everything dropped, every reply --------------------------------
gateway GF /dev/full
timeout --foreground 30 "$BIN/qsend" -g "$G" --pipeline "${qs[@]}" ".qgate.ping[]" > "$TMP/q.out"
expect_lines "$TMP/q.out" '^"[0-9]+"$' 100
expect_lines "$TMP/q.out" '^1b$' 1
wait_for 30 "lines written + dropped = requests ended" settled
[ "$L" -eq 0 ] && [ "$D" -eq "$R" ] && [ "$E" != none ] && [ "$E" -gt 0 ] ||
    fail "/dev/full: $R requests, $L lines written, $D dropped, $E errors"
t=$(alog_totals)
[ "$t" = "0/$D/$E" ] || fail ".qgate.totals[] alog_lines/alog_dropped/alog_errors on /dev/full: $t, the metrics: 0/$D/$E"
expect_file_has "$TMP/GF.log" "access log /dev/full: No space left on device: lines dropped"
pass "/dev/full: $R requests answered, 0 lines written, $D dropped, $E write errors"
kill -TERM "$GF_PID"
wait_exit "$GF_PID" 30

# --- a file-size limit (ulimit -f, systemd's LimitFSIZE=): the write fails (EFBIG), as on a full
# disk, and costs lines, never service (before: SIGXFSZ's default action killed qgate, every
# client cut off mid-request: helper round 15) -------------------------------------------------
ulimit -S -f 8 # 8 KiB, for the qgate started now only
gateway GZ "$TMP/limited.log"
ulimit -S -f unlimited
timeout --foreground 30 "$BIN/qsend" -g "$G" --pipeline "${qs[@]}" ".qgate.ping[]" > "$TMP/q.out"
expect_lines "$TMP/q.out" '^"[0-9]+"$' 100
expect_lines "$TMP/q.out" '^1b$' 1
wait_for 30 "lines written + dropped = requests ended" settled "$TMP/limited.log"
[ "$L" -gt 0 ] && [ "$D" -gt 0 ] && [ "$E" != none ] && [ "$E" -gt 0 ] ||
    fail "a file-size limit: $R requests, $L lines written, $D dropped, $E errors"
[ "$(stat -c %s "$TMP/limited.log")" -le 8192 ] || fail "the access log passed the file-size limit"
expect_file_has "$TMP/GZ.log" "access log $TMP/limited.log: File too large: lines dropped"
ping_ok || fail "no answer after the access log met its file-size limit"
pass "a file-size limit (ulimit -f): $R requests answered, $L lines written, $D dropped, $E write errors; qgate serves on"
kill -TERM "$GZ_PID"
wait_exit "$GZ_PID" 30

# --- a FIFO nobody reads, writer_threads = 1 ----------------------------------------------------
FIFO="$TMP/fifo"
mkfifo "$FIFO"
sleep 600 <> "$FIFO" & PIDS+=("$!") # holds it open, never reads
gateway GP "$FIFO" "writer_threads = 1"
soak_with_pings fifo 6 1000 # 6,000 requests: about 1.2 MB of lines for a pipe of 64 KiB
counts
[ "$L" -lt "$R" ] || fail "the FIFO took every line ($L of $R): it was never stuck"
timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.ping[]" ".qgate.stats[]" "err boom" > "$TMP/q.out" || fail "no reply with the access log stuck"
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" '^table\[1\] `address' 1
expect_lines "$TMP/q.out" "^'boom\$" 1
pass "a FIFO nobody reads (writer_threads = 1): $PINGS pings during 6,000 requests, .qgate.stats[] after ($L of $R lines written)"

# SIGUSR1 while stuck: the reopen waits for the thread; the loop does not
mv "$FIFO" "$FIFO.old"
mkfifo "$FIFO" # nobody will open this one to read
kill -USR1 "$GP_PID"
timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.ping[]" "echo after usr1" > "$TMP/q.out" || fail "no reply after SIGUSR1"
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" '^"after usr1"$' 1
pass "SIGUSR1 with the access log stuck: the next query answered"

kill -TERM "$GP_PID"
wait_exit "$GP_PID" 20
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS"
expect_file_has "$TMP/GP.log" "access log: [0-9]+ lines not written at exit \\(dropped\\)"
pass "SIGTERM with the access log stuck: qgate exits 0, saying how many lines it dropped"

# --- a reload that moves the access log off a FIFO nobody reads to a file: the thread leaves the
# FIFO, and the lines after the reload reach the file (at 92529d0 the thread stayed stuck in
# write(), the file got nothing until a restart, and every line after was dropped) ----------------
FIFO2="$TMP/fifo2"
mkfifo "$FIFO2"
sleep 600 <> "$FIFO2" & PIDS+=("$!") # holds it open, never reads
gateway GM "$FIFO2"
texts=()
for i in $(seq 1 1000); do texts+=("echo $i"); done
timeout --foreground 60 "$BIN/qsend" -g "$G" "${texts[@]}" > "$TMP/q.out" # about 190 KB of lines for 64 KiB
expect_lines "$TMP/q.out" '^"[0-9]+"$' 1000
MOVED="$TMP/moved.log"
sed -i "s#^access_log = .*#access_log = $MOVED#" "$TMP/GM.conf"
kill -HUP "$GM_PID"
wait_line "$TMP/GM.log" "access log reopened: $MOVED" 20
timeout --foreground 10 "$BIN/qsend" -g "$G" "echo moved" > "$TMP/q.out" || fail "no reply after the reload"
expect_lines "$TMP/q.out" '^"moved"$' 1
wait_line "$MOVED" "req_bytes=24 .*outcome=ok" 20
pass "a reload that moves the access log off a FIFO nobody reads: the next lines reach the new file"
kill -TERM "$GM_PID"
wait_exit "$GM_PID" 20
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS"

# --- a reopen onto a FIFO nobody opens: the loop goes on; once it opens, the lines come -------------
B="$TMP/access.log"
gateway GR "$B"
timeout --foreground 10 "$BIN/qsend" -g "$G" "echo before" > /dev/null
wait_line "$B" "req_bytes=25 .*outcome=ok" 10
mv "$B" "$B.1"
mkfifo "$B"
kill -USR1 "$GR_PID"
timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.ping[]" "echo while" "echo opening" > "$TMP/q.out" || fail "no reply while the reopen hangs"
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" '^"(while|opening)"$' 2
wait_line "$TMP/GR.log" "access log $B: a FIFO with no reader: its lines wait for one\$" 10 # (said: at a
# reload nothing said so, and the lines queued for it read as a slow file's: helper round 20)
cat "$B" > "$TMP/fifo.out" & PIDS+=("$!") # a reader at last
wait_line "$TMP/GR.log" "access log reopened: $B\$" 10
wait_count "$TMP/fifo.out" "$LINE" 3 10
expect_lines "$TMP/fifo.out" "req_bytes=(24|26) .*outcome=ok" 2
expect_lines "$B.1" "$LINE" 1
pass "SIGUSR1 onto a FIFO nobody opens: queries answered meanwhile; once it is opened, the lines queued arrive"
kill -TERM "$GR_PID"
wait_exit "$GR_PID" 20
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS"

# lib.sh: helpers for integration tests: real processes on ephemeral loopback ports, always
# cleaned up. Source it; BIN names the build folder (build/asan by default).
set -euo pipefail
BIN=${BIN:-build/asan}
IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) # (its python clients' qwire.py: PYTHONPATH="$IT_DIR")
TMP=$(mktemp -d /tmp/qgate-it.XXXXXX)
PIDS=()
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=66:quarantine_size_mb=16}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

cleanup() {
    local rc=$? p i
    # SIGTERM first, so that qgate drains and exits and the sanitizers report (leaks too)
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
    done
    for i in $(seq 1 100); do
        local alive=0
        for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.05
    done
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if [ -n "${CLEANUP_HOOK:-}" ]; then "$CLEANUP_HOOK" || rc=1; fi # e.g. tests/net: the namespaces
    local logs=() f
    for f in "$TMP"/*.log "$TMP"/*.err; do [ -f "$f" ] && logs+=("$f"); done # files only: a FIFO would block
    if [ ${#logs[@]} -gt 0 ] && grep -lE "ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:" "${logs[@]}" 2>/dev/null; then
        echo "FAIL: a sanitizer reported in the logs above:" >&2
        grep -hE -A12 "ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:" "${logs[@]}" 2>/dev/null | head -60 >&2
        rc=1
    fi
    if [ "${KEEP_TMP:-}" = "" ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
    exit $rc
}
trap cleanup EXIT
# a command that fails outside a condition ends the test (set -e): say which
trap 'rc_=$?; [[ $- == *e* ]] && echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $rc_" >&2' ERR

fail() {
    echo "FAIL: $*" >&2
    for f in "$TMP"/*.log; do
        if [ -f "$f" ]; then echo "--- $f (tail)" >&2; tail -n 20 "$f" >&2; fi
    done
    exit 1
}
pass() { echo "ok - $*"; }

# wait_for SECONDS WHAT COMMAND...: run COMMAND every 50 ms until it succeeds; fail after
# SECONDS naming WHAT. The waits below are this one loop with different conditions.
wait_for() {
    local t=$1 what=$2 i=0
    shift 2
    until "$@"; do
        sleep 0.05
        i=$((i + 1))
        if [ $i -gt $((t * 20)) ]; then fail "timed out waiting for $what"; fi
    done
    return 0
}
has_line() { grep -qE "$2" "$1" 2>/dev/null; }
count_at_least() { [ "$(grep -cE "$2" "$1" 2>/dev/null || true)" -ge "$3" ]; }

# wait_line FILE REGEX [SECONDS]: wait until FILE has a line matching REGEX
wait_line() { wait_for "${3:-30}" "/$2/ in $1" has_line "$1" "$2"; }

# fresh_output NAME: empty $TMP/NAME.out and NAME.log before a process of that name starts in the
# background. Its own redirection empties them only once it runs, so a wait for its "listening
# on" line could find the line of an earlier process of the same name (test_failures.sh starts
# two gateways named H: once, on a loaded machine, the port read was empty)
fresh_output() { : > "$TMP/$1.out"; : > "$TMP/$1.log"; }

# start_worker NAME ARGS...: start a qworker on an ephemeral port (AT=host:port names one), on
# TCP only (UDS=1: on q's Unix socket for its port too, as q is); sets NAME_PORT, NAME_PID
start_worker() {
    local name=$1 uds=(--no-uds)
    shift
    [ "${UDS:-0}" = 1 ] && uds=()
    fresh_output "$name"
    "$BIN/qworker" -p "${AT:-127.0.0.1:0}" "${uds[@]}" "$@" >"$TMP/$name.out" 2>"$TMP/$name.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_line "$TMP/$name.out" "listening on" 60
    local port
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$TMP/$name.out" | head -n 1)
    printf -v "${name}_PORT" '%s' "$port"
    printf -v "${name}_PID" '%s' "$pid"
}

# expect_lines FILE REGEX COUNT: exactly COUNT lines of FILE match REGEX
expect_lines() {
    local n
    n=$(grep -cE "$2" "$1" || true)
    [ "$n" -eq "$3" ] || fail "$1: $n lines match /$2/, want $3: $(head -n 5 "$1")"
}

# expect_file_has FILE REGEX: at least one line matches, or will within 10 s (the gateway's log
# is written by its own thread: a line about what a client has just seen may still be on its way)
expect_file_has() {
    local i=0
    until grep -qE "$2" "$1" 2> /dev/null; do
        i=$((i + 1))
        [ $i -le 200 ] || fail "$1 has no line matching /$2/: $(head -n 5 "$1")"
        sleep 0.05
    done
}

# start_gateway NAME ARGS...: start qgate on an ephemeral port (-p 0 unless ARGS set one);
# sets NAME_PORT, NAME_PID. The log is $TMP/NAME.log.
start_gateway() {
    local name=$1
    shift
    fresh_output "$name"
    "$BIN/qgate" -p 0 "$@" --bind 127.0.0.1 >"$TMP/$name.out" 2>"$TMP/$name.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_line "$TMP/$name.out" "qgate listening on" 30
    local port
    port=$(sed -n 's/^qgate listening on .*:\([0-9]*\)$/\1/p' "$TMP/$name.out" | head -n 1)
    printf -v "${name}_PORT" '%s' "$port"
    printf -v "${name}_PID" '%s' "$pid"
}

# wait_exit PID SECONDS: wait for a process to exit; its status in EXIT_STATUS
wait_exit() {
    local pid=$1 t=${2:-30} i=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.05
        i=$((i + 1))
        if [ $i -gt $((t * 20)) ]; then fail "process $pid still running after ${t}s"; fi
    done
    set +e
    wait "$pid"
    EXIT_STATUS=$?
    set -e
}

# pick_port: a loopback port nothing listens on (for metrics_port, which takes no 0)
# pick_port: a TCP port on 127.0.0.1 that nothing listens on, below the kernel's ephemeral range
# (ip_local_port_range): one from inside it can be any connection's source port meanwhile, and
# a bind to it then fails (EADDRINUSE: test_faults' metrics port, once)
pick_port() {
    local p i lo
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || echo 32768)
    [ "$lo" -gt 12000 ] || lo=32768
    for i in $(seq 1 100); do
        p=$((10000 + RANDOM % (lo - 10000)))
        if ! (exec 9<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    fail "no free port found"
}
# metric 'NAME{LABELS}': its value on the metrics page at 127.0.0.1:$METRICS_PORT
metric() { curl -s --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
# total KEY [HOST:PORT [USER:PW]]: KEY of .qgate.totals[] at the gateway $G (or HOST:PORT), asked as USER
total() {
    timeout --foreground 10 "$BIN/qsend" -g "${2:-$G}" ${3:+-u "$3"} ".qgate.totals[]" | awk -F'!' -v key="$1" '{ nk = split($1, k, "`")
        split($2, v, " "); for (i = 2; i <= nk; i++) if (k[i] == key) print v[i - 1] }'
}
# total_is KEY N [HOST:PORT], total_at_least KEY N [HOST:PORT] (for wait_for)
total_is() { [ "$(total "$1" "${3:-}")" = "$2" ]; }
total_at_least() { local v; v=$(total "$1" "${3:-}"); [ -n "$v" ] && [ "$v" -ge "$2" ]; }
# metric_at_least 'NAME{LABELS}' N: is it N or more? (for wait_for)
metric_at_least() { local v; v=$(metric "$1"); [ -n "$v" ] && [ "${v%.*}" -ge "$2" ]; }

# q TEXT...: qsend to the gateway G (host:port), output in $TMP/q.out
q() { timeout --foreground 60 "$BIN/qsend" -g "$G" "$@" > "$TMP/q.out" 2>&1 || true; }

# wait_count FILE REGEX N [SECONDS]: wait until at least N lines of FILE match REGEX
wait_count() { wait_for "${4:-30}" "$3 lines /$2/ in $1" count_at_least "$1" "$2" "$3"; }

# wait_any REGEX SECONDS FILE...: wait until one of the files has a line matching REGEX
wait_any() {
    local re=$1 t=$2
    shift 2
    wait_for "$t" "/$re/ in $*" grep -qE "$re" "$@"
}

# The timespan client.q prints: 0D00:00:00.000395000
TS='0D[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9}'

# run_mode SPEC COUNT [QCLIENT ARGS...]: qclient SPEC against $G, COUNT requests, back to back;
# its printed lines in $TMP/out
run_mode() {
    local spec=$1 count=$2
    shift 2
    timeout --foreground 120 "$BIN/qclient" -g "$G" "$spec" 0 --count "$count" "$@" > "$TMP/out" 2> "$TMP/err" \
        || fail "qclient $spec exited $?: $(cat "$TMP/err")"
}

# check_client_modes ROWS: every mode of client.q but fast, slow and killer against $G (whose
# workers hold ROWS rows, at least 3,000,000), each line as client.q prints it
check_client_modes() {
    local rows=$1
    run_mode big 2;          expect_lines "$TMP/out" "^big got :: $rows in dur :: $TS\$" 2
    run_mode smallbig 1;     expect_lines "$TMP/out" "^smallbig got :: $rows in dur :: $TS\$" 1
    run_mode med 1;          expect_lines "$TMP/out" "^med got :: 3000000 in dur :: $TS\$" 1
    run_mode bigbig 1;       expect_lines "$TMP/out" "^bigbig got :: $rows in dur :: $TS\$" 1
    run_mode bigsmall 2;     expect_lines "$TMP/out" "^bigsmall got :: 6 rows in dur :: $TS\$" 2
    run_mode ss 3;           expect_lines "$TMP/out" "^ss got :: 5 rows in dur :: $TS\$" 3
    run_mode throw:boom 2;   expect_lines "$TMP/out" "^throw error :: boom in dur :: $TS\$" 2
    run_mode ssthrow:bang 2; expect_lines "$TMP/out" "^ssthrow error :: bang in dur :: $TS\$" 2
}

# release TAG PORT...: end the "hold TAG" request on whichever of these qworkers runs it
release() {
    local tag=$1 p
    shift
    for p in "$@"; do timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$p" "release $tag" > /dev/null || true; done
}

# ---- raw clients on fd 3 (or FD), for bytes qsend would not send --------------------------
export LC_ALL=C
# raw_open PORT [FD]: connect; raw_close [FD]
raw_open() { eval "exec ${2:-3}<>/dev/tcp/127.0.0.1/$1"; }
raw_close() { eval "exec ${1:-3}<&- ${1:-3}>&-"; }
# raw_hs USER:PASS [FD]: q's handshake with capability 3, and its answer byte
raw_hs() { printf '%s\003\000' "$1" >&"${2:-3}"; head -c 1 <&"${2:-3}" > /dev/null; }
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)); }
# raw_text TYPE TEXT [FD]: a char vector message of TYPE (0 async, 1 sync)
raw_text() {
    local n=${#2}
    printf '%b%s' "\\x01\\x0$1\\x00\\x00$(le32 $((14 + n)))\\x0a\\x00$(le32 "$n")" "$2" >&"${3:-3}"
}
# raw_read FILE SECONDS [FD]: what arrives within SECONDS (or until the gateway closes)
raw_read() { timeout --foreground "$2" cat <&"${3:-3}" > "$1" || true; }
# raw_msg FILE [FD]: exactly one kdb+ message (as long as its header says; dd reads no byte
# past it), appended to FILE; fails if none comes whole within 10 s
raw_msg() {
    local fd=${2:-3} len
    timeout --foreground 10 dd bs=8 count=1 iflag=fullblock status=none <&"$fd" > "$1.hdr" || return 1
    len=$(od -An -tu4 -j4 -N4 "$1.hdr" | tr -d ' ')
    [ -n "$len" ] && [ "$len" -ge 9 ] || return 1
    cat "$1.hdr" >> "$1"
    timeout --foreground 10 dd bs=$((len - 8)) count=1 iflag=fullblock status=none <&"$fd" >> "$1"
}

# client_id FILE COLUMN VALUE: the id of the row whose symbol COLUMN (3 user, 6 state) is VALUE, in
# the two-row .qgate.clients[] table qsend printed into FILE
client_id() {
    local line ids vals v i
    line=$(grep '^table\[2\]' "$1") || fail "clients: $(cat "$1")"
    read -ra ids <<< "$(awk -F' [|] ' '{print $2}' <<< "$line")"
    v=$(awk -F' [|] ' -v c="$2" '{print $c}' <<< "$line")
    IFS='`' read -ra vals <<< "${v#\`}"
    for i in "${!vals[@]}"; do [ "${vals[$i]}" = "$3" ] && { echo "${ids[$i]}"; return 0; }; done
    fail "no client whose column $2 is $3 in .qgate.clients[]: $line"
}

# cut_start NAME GROUP_EXTRA WHY [GATEWAY_EXTRA]: a worker (NAME) behind gateway NAME-G (users file: t:t, and op:pw an
# admin); a client (user t) sends "text 16000000" and "crash 1000000" (the worker writes half that
# reply and exits) and reads nothing until the gateway has closed it (why), so that the first reply
# waits in the gateway, past what the kernel holds (client_low_water above it lets the second
# request start; splice off, as a reply spliced waits in a 1 MiB pipe, its worker paused until the
# client reads). Returns with the client cut, its output left to write (tail.h), unread. CUT_G is
# the gateway's host:port; "echo go >&${CUT[1]}" has the client read.
cut_start() {
    local w=$1 extra=$2 why=$3 gwextra=${4:-} gwn=${1}G port line
    start_worker "$w"
    port=${w}_PORT
    printf 't:t\nop:pw\tadmin=1\n' > "$TMP/$w.users"
    printf '[gateway]\nbind = 127.0.0.1\nloglevel = debug\nusers_file = %s\nclient_high_water = 40000000\nclient_low_water = 30000000\nsplice = false\n%b[group main]\nworkers = 127.0.0.1:%s\n%b' \
        "$TMP/$w.users" "$gwextra" "${!port}" "$extra" > "$TMP/$w.conf"
    start_gateway "$gwn" -c "$TMP/$w.conf"
    port=${gwn}_PORT
    CUT_G="127.0.0.1:${!port}"
    wait_line "$TMP/$gwn.log" "connected \(capability"
    coproc CUT { PYTHONPATH="$IT_DIR" timeout --foreground 120 python3 "$IT_DIR/cut_client.py" "${!port}" "text 16000000" "crash 1000000" 2>&1; }
    PIDS+=("$CUT_PID")
    read -r -t 60 line <&"${CUT[0]}" || fail "the python client did not start"
    [ "$line" = sent ] || fail "the python client: $line $(cat <&"${CUT[0]}")"
    wait_line "$TMP/$w.log" "crash 1000000: writing"
    wait_line "$TMP/$gwn.log" "closed: $why"
}

# cut_end FILE: the cut client reads to the close, its lines into FILE; it is waited for (a second
# coproc CUT started while bash still holds the first lost its variables when that one was reaped)
cut_end() {
    local pid=$CUT_PID
    echo go >&"${CUT[1]}"
    cat <&"${CUT[0]}" > "$1" || true
    wait "$pid" 2>/dev/null || true
}

# cut_run NAME GROUP_EXTRA WHY: cut_start, then the client's row still in .qgate.clients[] (state
# closing) while its output is written; then it reads to the close: the first reply whole, the
# second cut
cut_run() {
    local w=$1 gwn=${1}G
    cut_start "$@"
    timeout --foreground 10 "$BIN/qsend" -g "$CUT_G" -u op:pw ".qgate.clients[]" > "$TMP/$w.clients"
    expect_file_has "$TMP/$w.clients" '^table\[2\] .*`closing'
    cut_end "$TMP/$w.cut"
    expect_lines "$TMP/$w.cut" '^ok whole=2 lens=16000000 cut=[1-9][0-9]*$' 1 # the first whole, the second cut
    wait_line "$TMP/$gwn.log" "\\(its last output\\): closed: its last output written, then the peer closed"
    [ "$(total cut_streams "$CUT_G" op:pw)" = 1 ] || fail "cut_streams: $(total cut_streams "$CUT_G" op:pw)"
}

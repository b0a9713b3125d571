#!/usr/bin/env bash
# Workers over Unix sockets: unix://PORT (q's abstract socket for a port), unix:///path, and
# local_workers = unix choosing it for a worker on this host; TCP when that socket refuses or
# does not answer the handshake; reconnects over each; a large reply streamed over it byte
# for byte; .qgate.stats[] `transport.
. "$(dirname "$0")/lib.sh"

# conf FILE WORKERS [GATEWAYKEY=VALUE...]
conf() {
    local f=$1 workers=$2 kv
    shift 2
    { printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\nreconnect_max = 200\n'
      for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}"; done
      printf '[group main]\nworkers = %s\n' "$workers"; } > "$f"
}
# transport_is WANT: the gateway G's one worker shows `transport WANT in .qgate.stats[]
transport_is() {
    q ".qgate.stats[]"
    grep -qE "^table\\[1\\] .*\`transport \`client \`started \\| .* \\| ,\`$1 \\| ,0N \\| ,0N\$" "$TMP/q.out"
}
# served_over NAME WHAT: the worker NAME's log shows a request from a peer of kind WHAT
# (unix, or 127.0.0.1 for TCP)
served_over() { grep -qE "qworker $2[^ ]*: .*echo $3" "$TMP/$1.log"; }
# reached GW WORKERS CONNECTED WORKER PEER VIA [GATEWAYKEY=VALUE...]: a gateway GW in front of
# WORKERS logs "connected (capability 3) over CONNECTED" (a regex); "echo GW" through it is
# answered, seen by WORKER from a PEER (unix or 127.0.0.1), and .qgate.stats[] says VIA
reached() {
    local gw=$1 workers=$2 connected=$3 worker=$4 peer=$5 via=$6
    shift 6
    conf "$TMP/$gw.conf" "$workers" "$@"
    start_gateway "$gw" -c "$TMP/$gw.conf"
    wait_line "$TMP/$gw.log" "connected \(capability 3\) over $connected"
    local port=${gw}_PORT
    G="127.0.0.1:${!port}"
    q "echo $gw"
    expect_lines "$TMP/q.out" "^\"$gw\"\$" 1
    served_over "$worker" "$peer" "$gw" || fail "$gw: echo $gw did not reach $worker from $peer: $(tail -3 "$TMP/$worker.log")"
    transport_is "$via" || fail "$gw: stats: $(cat "$TMP/q.out")"
}

UDS=1 start_worker U --rows 1000000
start_worker T --rows 1000            # TCP only: its Unix socket refuses
UDS=1 start_worker M --rows 1000 --uds-mute   # its Unix socket closes at once
UDS=1 start_worker P --rows 1000 --uds-path "$TMP/p.sock"

# --- unix://PORT: q's abstract socket -------------------------------------------------------
reached A "unix://$U_PORT" "unix @/tmp/kx.$U_PORT\$" U unix unix
pass "unix://PORT: the worker is reached over @/tmp/kx.PORT; .qgate.stats[] says \`unix"

# --- unix:///path: a filesystem socket ----------------------------------------------------
reached PG "unix://$TMP/p.sock" "unix $TMP/p.sock\$" P unix unix
pass "unix:///path: the worker is reached over the socket file"

# --- 127.0.0.1:PORT with local_workers = unix (the default): its Unix socket ---------------
reached L "127.0.0.1:$U_PORT" "unix @/tmp/kx.$U_PORT\$" U unix unix
reached LH "localhost:$U_PORT" "unix @/tmp/kx.$U_PORT\$" U unix unix
pass "127.0.0.1:PORT and localhost:PORT go over q's Unix socket when it answers"

# --- another loopback address is another q's: 127.0.0.2:PORT over TCP, though the q at
# 127.0.0.1:PORT holds @/tmp/kx.PORT (before: every 127/8 address took that socket, and the
# queries went to the other q)
AT="127.0.0.2:$U_PORT" start_worker O --rows 1000 # (TCP only)
reached OG "127.0.0.2:$U_PORT" "tcp 127.0.0.2:$U_PORT\$" O 127.0.0 tcp
served_over U unix OG && fail "127.0.0.2:$U_PORT was reached through @/tmp/kx.$U_PORT"
pass "127.0.0.2:PORT is another q's: over TCP, not the Unix socket of 127.0.0.1:PORT's q"

# --- local_workers = tcp: TCP, always ------------------------------------------------------
reached TG "127.0.0.1:$U_PORT" "tcp 127.0.0.1:$U_PORT\$" U 127.0.0.1 tcp local_workers=tcp
pass "local_workers = tcp: a local worker is reached over TCP; stats say \`tcp"

# --- fallback: the Unix socket refuses, or accepts and does not answer the handshake -------
conf "$TMP/f.conf" "127.0.0.1:$T_PORT"
start_gateway F -c "$TMP/f.conf"
wait_line "$TMP/F.log" "connected \(capability 3\) over tcp 127.0.0.1:$T_PORT; its Unix socket @/tmp/kx.$T_PORT: Connection refused"
G="127.0.0.1:$F_PORT"
q "echo f1"
expect_lines "$TMP/q.out" '^"f1"$' 1
transport_is tcp || fail "stats: $(cat "$TMP/q.out")"
conf "$TMP/m.conf" "127.0.0.1:$M_PORT"
start_gateway MG -c "$TMP/m.conf"
wait_line "$TMP/MG.log" "connected \(capability 3\) over tcp 127.0.0.1:$M_PORT; its Unix socket @/tmp/kx.$M_PORT: (closed during the handshake|peer closed|Broken pipe|Connection reset by peer)"
G="127.0.0.1:$MG_PORT"
q "echo m1"
expect_lines "$TMP/q.out" '^"m1"$' 1
served_over M 127.0.0.1 m1 || fail "the fallback did not go over TCP"
pass "fallback to TCP when the Unix socket refuses, and when it closes during the handshake"

# --- a large reply over the Unix socket: spliced, byte for byte what the worker sends -------
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$U_PORT" --raw "$TMP/direct.bin" "rows 1000000" > /dev/null
G="127.0.0.1:$A_PORT"
timeout --foreground 60 "$BIN/qsend" -g "$G" --raw "$TMP/gw.bin" "rows 1000000" > "$TMP/q.out" 2>&1 || true
[ -s "$TMP/gw.bin" ] && cmp -s "$TMP/direct.bin" "$TMP/gw.bin" ||
    fail "the 1000000-row reply over the Unix socket differs from the worker's ($(stat -c %s "$TMP/gw.bin" 2>/dev/null) bytes)"
pass "a $(stat -c %s "$TMP/gw.bin")-byte reply over the Unix socket arrives byte for byte"

# --- backpressure over it: a client that does not read stops the worker's reads, then gets
# --- every byte (splice = 0 streams through qgate's buffers and says when it pauses)
conf "$TMP/b.conf" "unix://$U_PORT" splice=0 client_high_water=65536 client_low_water=16384
start_gateway B -c "$TMP/b.conf" --loglevel debug
wait_line "$TMP/B.log" "connected \(capability 3\) over unix"
raw_open "$B_PORT" 3
raw_hs "u:p" 3
raw_text 1 "rows 1000000" 3
wait_line "$TMP/B.log" "w unix://$U_PORT: paused: c1 .* has [0-9]+ bytes unsent"
timeout --foreground 30 head -c "$(stat -c %s "$TMP/direct.bin")" <&3 > "$TMP/slow.bin" || true
raw_close 3
cmp -s "$TMP/direct.bin" "$TMP/slow.bin" || fail "the reply read after the pause differs from the worker's"
pass "backpressure over the Unix socket: the worker's reads pause for a client that does not read; every byte arrives"

# --- reconnect over each: the worker restarts on its port, or at its path ------------------
kill -9 "$U_PID"
wait_line "$TMP/A.log" "w unix://$U_PORT: connection closed"
wait_line "$TMP/L.log" "w 127.0.0.1:$U_PORT: connection closed"
wait_line "$TMP/TG.log" "w 127.0.0.1:$U_PORT: connection closed"
# while it is down, .qgate.stats[] names no transport (at 560656a: `tcp, its last attempt's, for a
# worker reached over its Unix socket; helper round 40a)
G="127.0.0.1:$L_PORT"
for i in $(seq 1 100); do
    q ".qgate.stats[]"
    grep -q '| ,`down |' "$TMP/q.out" && break
    sleep 0.05
done
grep -qE "^table\\[1\\] .*\`transport \`client \`started \\| .* \\| ,\`down \\| .* \\| ,\` \\| ,0N \\| ,0N\$" "$TMP/q.out" ||
    fail "a worker down: its transport in .qgate.stats[]: $(cat "$TMP/q.out")"
AT="127.0.0.1:$U_PORT" UDS=1 start_worker U2 --rows 1000
wait_count "$TMP/A.log" "connected \(capability 3\) over unix @/tmp/kx.$U_PORT\$" 2
wait_count "$TMP/L.log" "connected \(capability 3\) over unix @/tmp/kx.$U_PORT\$" 2
wait_count "$TMP/TG.log" "connected \(capability 3\) over tcp 127.0.0.1:$U_PORT\$" 2
for gw in A L TG; do
    p=${gw}_PORT
    G="127.0.0.1:${!p}"
    q "echo r$gw"
    expect_lines "$TMP/q.out" "^\"r$gw\"\$" 1
done
served_over U2 unix rA && served_over U2 unix rL && served_over U2 127.0.0.1 rTG ||
    fail "after the restart the requests did not come over the transports chosen: $(grep echo "$TMP/U2.log")"
kill -9 "$P_PID"
wait_line "$TMP/PG.log" "w unix://$TMP/p.sock: connection closed"
UDS=1 start_worker P2 --rows 1000 --uds-path "$TMP/p.sock"
wait_count "$TMP/PG.log" "connected \(capability 3\) over unix $TMP/p.sock\$" 2
G="127.0.0.1:$PG_PORT"
q "echo rp"
expect_lines "$TMP/q.out" '^"rp"$' 1
served_over P2 unix rp || fail "the path worker's restart was not reached over its socket"
pass "a worker restarted is reconnected over unix://PORT, the path, the automatic choice and TCP; down, stats name no transport"

# --- a worker restarted without its Unix socket: the automatic choice goes to TCP ------------
kill -9 "$U2_PID"
wait_count "$TMP/L.log" "w 127.0.0.1:$U_PORT: connection closed" 2
AT="127.0.0.1:$U_PORT" start_worker U3 --rows 1000
wait_line "$TMP/L.log" "connected \(capability 3\) over tcp 127.0.0.1:$U_PORT; its Unix socket @/tmp/kx.$U_PORT: Connection refused"
G="127.0.0.1:$L_PORT"
transport_is tcp || fail "stats: $(cat "$TMP/q.out")"
pass "a restarted worker without its Unix socket is reached over TCP, and stats say so"

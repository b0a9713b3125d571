#!/usr/bin/env bash
# Several qgates behind HAProxy, in network namespaces: deploy/haproxy.cfg itself (its
# addresses, certificate and socket path replaced) on host lb, in front of qgates on gw1 and
# gw2, both using the q workers of w1 and w2. Checks: HAProxy's q health check (handshake, then
# .qgate.ping[]) marks both UP, and a q process that is not a qgate DOWN; node-q over TLS, the
# certificate verified, runs the seed modes through HAProxy -> qgate -> workers on connections
# spread over both qgates; a qgate killed under 64 reconnecting clients: those on it reconnect
# to the other, none fails, nothing is answered twice, the other's clients are untouched; a
# rolling restart (SIGTERM, DOWN, exit 0, start, UP; then the other) under 64 clients: no
# failure, no error, every request answered exactly once. Every wait is on an event: HAProxy's
# stats socket, a log line, a process exit, a count.
. "$(dirname "$0")/lib.sh"

HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$HAPROXY" ] || fail "haproxy missing: run tests/deps.sh"
for t in openssl socat; do command -v $t > /dev/null || fail "$t missing: run tests/deps.sh"; done
[ -d tests/interop/node_modules/node-q ] || fail "node-q missing: run tests/deps.sh (npm ci)"

LB=10.77.0.30
host client 10.77.0.10
host lb $LB
host gw1 10.77.0.21
host gw2 10.77.0.22
host w1 10.77.0.31
host w2 10.77.0.32
ns_worker w1 W1 10.77.0.31:5001 --rows 100000 --quiet
ns_worker w2 W2 10.77.0.32:5001 --rows 100000 --quiet
first=$(on gw1 "$BIN/qsend" -g 10.77.0.31:5001 "rows 1" | sed -n 's/^table\[1\] `a | ,"\([a-z]*\)"$/\1/p')
[ -n "$first" ] || fail "could not read the first row"

# start_gw HOST NAME: a qgate NAME on HOST:8811 with both workers and its own access log
# ($TMP/NAME.access); returns once both workers are connected. Its pid in NAME_PID.
start_gw() {
    printf '[gateway]\nport = 8811\nbind = 0.0.0.0\naccess_log = %s\ndrain_timeout = 20000\nproxy_from = %s\n[group main]\nworkers = 10.77.0.31:5001,10.77.0.32:5001\n' \
        "$TMP/$2.access" "$LB" > "$TMP/$2.conf"
    ns_gateway "$1" "$2" "$TMP/$2.conf"
    wait_count "$TMP/$2.log" "connected \\(capability 3\\)" 2 20
}
pid_of() { local v="$1_PID"; echo "${!v}"; }
start_gw gw1 gw1a
start_gw gw2 gw2a

# --- HAProxy: the example's file, with this network's addresses and a certificate made here -----
# subjectAltName IP:$LB: node-q verifies the name it connects to against it
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=qgate test lb" -addext "subjectAltName=IP:$LB" \
    -keyout "$TMP/lb.key" -out "$TMP/ca.pem" 2> "$TMP/openssl.err" || fail "openssl: $(cat "$TMP/openssl.err")"
cat "$TMP/ca.pem" "$TMP/lb.key" > "$TMP/lb.pem"
# The test runs as root in namespaces of its own: no chroot or haproxy user assumed. maxconn is
# the file's own: HAProxy must start within this machine's descriptor limit with it.
sed -E -e "s|/etc/haproxy/certs/qgate.pem|$TMP/lb.pem|" -e "s|/run/haproxy/qgate.sock|$TMP/hap.sock|" \
    -e 's|10\.0\.0\.21:8811|10.77.0.21:8811|' -e 's|10\.0\.0\.22:8811|10.77.0.22:8811|' \
    -e '/^[[:space:]]*(chroot|user|group)[[:space:]]/d' deploy/haproxy.cfg > "$TMP/haproxy.cfg"
for want in "crt $TMP/lb.pem" "stats socket $TMP/hap.sock" "server gw1 10.77.0.21:8811" "server gw2 10.77.0.22:8811" \
        "send-proxy-v2 check-send-proxy"; do
    grep -qF "$want" "$TMP/haproxy.cfg" || fail "deploy/haproxy.cfg changed: no line for '$want' after the test's edits"
done
! grep -q '10\.0\.0\.' "$TMP/haproxy.cfg" || fail "deploy/haproxy.cfg has an address the test does not replace"
"$HAPROXY" -c -q -f "$TMP/haproxy.cfg" > "$TMP/hapcheck.err" 2>&1 || fail "haproxy -c: $(cat "$TMP/hapcheck.err")"
bg lb HAP "$HAPROXY" -db -f "$TMP/haproxy.cfg"

# hap CMD: a command on HAProxy's runtime API
hap() { echo "$1" | timeout --foreground 10 socat -t 5 stdio "UNIX-CONNECT:$TMP/hap.sock"; }
hap_ready() {
    kill -0 "$HAP_PID" 2> /dev/null || fail "haproxy exited: $(tail -n 5 "$TMP/HAP.log")"
    [ -S "$TMP/hap.sock" ] && hap "show info" 2> /dev/null | grep -q '^Name: HAProxy'
}
# srv SRV: "STATUS CHECK_STATUS SESSIONS" of server SRV of backend qgates (show stat)
srv() {
    hap "show stat" | awk -F, -v s="$1" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $1 == "qgates" && $2 == s { c = $col["check_status"]; sub(/^\* /, "", c); print $col["status"], c, $col["scur"] }'
}
# srv_is SRV "STATUS CHECK_STATUS": is it so now? (for wait_for)
srv_is() { [[ "$(srv "$1")" == "$2 "* ]]; }
sessions() { srv "$1" | awk '{print $3}'; }
# wait_srv SECONDS SRV "STATUS CHECK_STATUS" WHAT: wait until HAProxy shows SRV so
wait_srv() {
    local _
    for _ in $(seq 1 $(($1 * 20))); do
        srv_is "$2" "$3" && return 0
        sleep 0.05
    done
    fail "timed out waiting for $4: HAProxy shows $2 as '$(srv "$2")', want '$3'"
}
wait_for 20 "HAProxy's stats socket" hap_ready

# --- b. the q health check: both UP, a q worker that is not a qgate DOWN -----------------------
wait_srv 30 gw1 "UP L7OK" "gw1 UP by the q check"
wait_srv 30 gw2 "UP L7OK" "gw2 UP by the q check"
# A q process answers the handshake (03) but not .qgate.ping[] with 1b: the check waits for
# those 10 bytes until timeout check (L7TOUT). (A server added at run time is in maintenance:
# checked, never given a client.)
hap "add server qgates/probe 10.77.0.31:5001 check inter 300ms fall 1 rise 1" > "$TMP/probe.out"
hap "enable health qgates/probe" >> "$TMP/probe.out"
wait_srv 20 probe "MAINT L7TOUT" "the probe of a plain q worker failing its check"
hap "disable health qgates/probe" > /dev/null
hap "del server qgates/probe" >> "$TMP/probe.out"
expect_file_has "$TMP/probe.out" "Server deleted"
expect_file_has "$TMP/gw1a.access" "user=haproxy .* outcome=ok"
pass "HAProxy's q check (handshake, .qgate.ping[] answered 1b): gw1 and gw2 UP (L7OK); a plain q worker fails it (L7TOUT: no 1b)"

# --- a. node-q over TLS through HAProxy, on 4 connections spread over both qgates -------------
(cd tests/interop && on client timeout --foreground 120 node interop.js --host $LB --ca "$TMP/ca.pem" --conns 4 8843 "$first" 100000) \
    > "$TMP/tls.out" 2>&1 || fail "node-q over TLS through HAProxy: $(cat "$TMP/tls.out")"
expect_lines "$TMP/tls.out" "^ok - node-q TLSv1\\.[23] to $LB:8843, certificate verified \\(IP Address:$LB\\)" 4
expect_lines "$TMP/tls.out" "^ok - node-q (fast|100000 rows|error query|throw mode|echo) \\(connection [1-4]\\)\$" 20
# each connection's 5 requests in the access log of the qgate it went to
interop_lines() { cat "$TMP/gw1a.access" "$TMP/gw2a.access" | grep -c "user=interop .* outcome=" || true; }
interop_at() { [ "$(interop_lines)" -ge 20 ]; }
wait_for 10 "node-q's 20 requests in the access logs" interop_at
[ "$(interop_lines)" -eq 20 ] || fail "$(interop_lines) requests of node-q in the access logs, want 20"
clients_of() { grep "user=interop " "$TMP/$1.access" | sed 's/.* client=\([0-9]*\) .*/\1/' | sort -u | wc -l; }
c1=$(clients_of gw1a) c2=$(clients_of gw2a)
[ "$c1" -ge 1 ] && [ "$c2" -ge 1 ] && [ $((c1 + c2)) -eq 4 ] || fail "node-q's connections: $c1 on gw1, $c2 on gw2 (want 4, both used)"
! grep "user=interop " "$TMP/gw1a.access" "$TMP/gw2a.access" | grep -v "outcome=ok\|outcome=error" || fail "a node-q request ended neither ok nor in its q error"
pass "node-q over TLS (certificate verified) through HAProxy: the seed modes on 4 connections, $c1 on gw1 and $c2 on gw2"

# --- the PROXY protocol: the client host's address, not HAProxy's; a header only from HAProxy ----
n_client=$(cat "$TMP/gw1a.access" "$TMP/gw2a.access" | grep -c "user=interop peer=10\.77\.0\.10:[0-9]* " || true)
[ "$n_client" -eq 20 ] || fail "node-q's requests with peer=10.77.0.10 (the client host, through HAProxy): $n_client of 20"
grep -q "user=interop peer=$LB:" "$TMP/gw1a.access" "$TMP/gw2a.access" && fail "a request logged with HAProxy's address"
expect_file_has "$TMP/gw1a.log" "c[0-9]+ 10\\.77\\.0\\.10:[0-9]+ interop: closed"
# a client that sends a PROXY header itself, straight to gw1, claiming to be 10.77.0.99: closed
# before its handshake is answered (no capability byte comes back)
sig='\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\x21\x11\x00\x0c\x0a\x4d\x00\x63\x0a\x4d\x00\x15\x9c\x40\x22\x6b'
on client timeout 10 bash -c "exec 3<>/dev/tcp/10.77.0.21/8811; printf '$sig' >&3; printf 'x:y\\x03\\x00' >&3; cat <&3" > "$TMP/spoof.out" || true
[ ! -s "$TMP/spoof.out" ] || fail "a PROXY header from the client host was answered: $(od -An -tx1 "$TMP/spoof.out")"
wait_line "$TMP/gw1a.log" "a PROXY header from 10\\.77\\.0\\.10:[0-9]+, which proxy_from does not list: closed" 10
grep -q "10\\.77\\.0\\.99" "$TMP/gw1a.log" && fail "the address a spoofing client claimed reached the log"
# HAProxy's host itself, without a header: closed too (proxy_from says every connection from it has one)
on lb timeout --foreground 10 "$BIN/qsend" -g 10.77.0.21:8811 ".qgate.ping[]" > "$TMP/nohdr.out" 2>&1 || true
grep -q "^1b$" "$TMP/nohdr.out" && fail "a connection from HAProxy's host without a header was served"
# (the second refusal in the same second is counted, not logged: one line a second per kind)
two_refused() { on gw1 timeout --foreground 10 "$BIN/qsend" -g 127.0.0.1:8811 ".qgate.totals[]" | grep -q '`refused_proxy.*!' &&
                [ "$(on gw1 timeout --foreground 10 "$BIN/qsend" -g 127.0.0.1:8811 ".qgate.totals[]" |
                     awk -F'!' '{ n = split(substr($1, 2), k, "`"); split($2, v, " "); for (i = 1; i <= n; i++) if (k[i] == "refused_proxy") print v[i] }')" = 2 ]; }
wait_for 10 "gw1's refused_proxy at 2" two_refused
pass "the PROXY protocol (send-proxy-v2): qgate logs the client host 10.77.0.10 for node-q's 20 requests, never HAProxy; a header from the client host itself refused, a connection from HAProxy's host without one refused"

# ---- 64 reconnecting clients through the plain frontend ---------------------------------------
# load NAME USER: qload --reconnect, 64 closed-loop connections of "sleep 1" (about 1 ms of a
# worker each), until SIGINT (--seconds is only a bound); output in $TMP/NAME.out and .log
load() {
    bg client "$1" "$BIN/qload" -g "$LB:8811" -u "$2:pw" --class "s:text=sleep 1:64" --warmup 0 --seconds 300 --reconnect
}
# served FILE USER N: FILE has at least N requests of USER that ended
served() { [ "$(grep -c "user=$2 .* outcome=" "$1" 2> /dev/null || true)" -ge "$3" ]; }
# serving NAME USER N: N more requests of USER in qgate NAME's access log from now on
serving() {
    local n
    n=$(grep -c "user=$2 .* outcome=" "$TMP/$1.access" 2> /dev/null || true)
    wait_for 30 "$3 more requests of $2 on $1" served "$TMP/$1.access" "$2" $((n + $3))
}
# stop_load NAME: SIGINT (qload stops sending, awaits every outstanding reply) and its exit 0
stop_load() {
    local p
    p=$(pid_of "$1")
    kill -INT "$p"
    wait_exit "$p" 30
    [ "$EXIT_STATUS" -eq 0 ] || fail "qload $1 exited $EXIT_STATUS: $(cat "$TMP/$1.out" "$TMP/$1.log")"
}
field() { sed -n "s/^qload class=s .* $2=\\([0-9]*\\).*/\\1/p" "$TMP/$1.out"; }
errfield() { sed -n "s/^qload class=s: .*$2=\\([0-9]*\\).*/\\1/p" "$TMP/$1.log"; }
# totals HOST: .qgate.totals[] of the qgate on HOST as key=value lines (the first 20 keys)
totals() {
    on "$1" timeout --foreground 10 "$BIN/qsend" -g 127.0.0.1:8811 ".qgate.totals[]" |
        awk -F'!' '{ n = split(substr($1, 2), k, "`"); m = split($2, v, " ");
                     for (i = 1; i <= n && i <= m; i++) print k[i] "=" v[i] }'
}

# --- c. a qgate killed: its clients reconnect to the other; nothing fails or is answered twice --
load K9 kill9
serving gw1a kill9 200
serving gw2a kill9 200
all_on() { [ $(($(sessions gw1) + $(sessions gw2))) -eq 64 ]; }
wait_for 20 "HAProxy's sessions to gw1 and gw2 making 64" all_on
on_gw1=$(sessions gw1)
[ "$on_gw1" -ge 1 ] && [ "$(sessions gw2)" -ge 1 ] || fail "sessions: gw1 $on_gw1, gw2 $(sessions gw2): not both used"
killed=$(pid_of gw1a)
kill -9 "$killed"
{ wait "$killed"; } 2> /dev/null || true # (without the shell's "Killed" line)
wait_srv 20 gw1 "DOWN L4CON" "HAProxy marking the killed gw1 DOWN (connection refused)"
on_all() { [ "$(sessions gw2)" -eq 64 ]; }
wait_for 30 "all 64 clients on gw2" on_all
serving gw2a kill9 500
start_gw gw1 gw1b
wait_srv 30 gw1 "UP L7OK" "the restarted gw1 UP"
stop_load K9
expect_lines "$TMP/K9.out" "^qload class=s .* qerrors=0 failed=0 retried=[0-9]+ extra=0\$" 1
retried=$(field K9 retried) reconnects=$(errfield K9 reconnects)
[ "$reconnects" -eq "$on_gw1" ] || fail "$reconnects connections reopened, but $on_gw1 were on the killed gw1"
[ "$retried" -ge 1 ] && [ "$retried" -le "$reconnects" ] || fail "retried=$retried with $reconnects reconnects"
totals gw2 > "$TMP/gw2.totals"
expect_lines "$TMP/gw2.totals" "^(gone|closed)=0\$" 2
! grep "user=kill9 " "$TMP/gw2a.access" | grep -v "outcome=ok" || fail "a request on the surviving gw2 did not end ok"
pass "gw1 killed (kill -9) under 64 clients: its $on_gw1 reconnected through HAProxy to gw2, $retried requests in flight sent again, requests=$(field K9 requests) failed=0 extra=0; gw2's clients untouched (gone=0 closed=0); gw1 DOWN, restarted, UP"

# --- d. a rolling restart under 64 clients: no failure, no error, each request answered once ----
load RR rolling
serving gw1b rolling 200
serving gw2a rolling 200
drained=()
# restart HOST OLD NEW: SIGTERM qgate OLD on HOST; HAProxy marks it DOWN (its listener is
# closed: the check is refused); it exits 0 having answered all it read; NEW starts, UP again
restart() {
    local h=$1 old=$2 new=$3 p
    p=$(pid_of "$old")
    kill -TERM "$p"
    wait_srv 20 "$h" "DOWN L4CON" "HAProxy marking the draining $old DOWN (connection refused)"
    wait_exit "$p" 30
    [ "$EXIT_STATUS" -eq 0 ] || fail "the draining $old exited $EXIT_STATUS"
    expect_file_has "$TMP/$old.log" "SIGTERM: draining"
    expect_file_has "$TMP/$old.log" "drained: exiting"
    drained+=("$old")
    start_gw "$h" "$new"
    wait_srv 30 "$h" "UP L7OK" "the restarted $new UP"
}
restart gw1 gw1b gw1c
serving gw2a rolling 200   # every client now on gw2
restart gw2 gw2a gw2b
serving gw1c rolling 200   # every client now on gw1
stop_load RR
expect_lines "$TMP/RR.out" "^qload class=s .* qerrors=0 failed=0 retried=[0-9]+ extra=0\$" 1
for g in "${drained[@]}"; do
    ! grep "user=rolling " "$TMP/$g.access" | grep -v "outcome=ok" || fail "$g: a request did not end ok while it drained"
done
# every reply qload got is one request a qgate ran and logged, and no request was run twice
replies=$(errfield RR replies)
ran() { cat "$TMP"/gw*.access | grep -c "user=rolling .* outcome=ok" || true; }
ran_all() { [ "$(ran)" -ge "$replies" ]; }
wait_for 10 "the access logs of the $replies replies" ran_all
[ "$(ran)" -eq "$replies" ] || fail "the qgates ran $(ran) requests of qload, which had $replies replies"
pass "rolling restart (gw1 then gw2: SIGTERM, DOWN, drained, exit 0, start, UP) under 64 clients: requests=$(field RR requests) replies=$replies retried=$(field RR retried) failed=0 qerrors=0 extra=0; the qgates ran each request once ($(ran)); no request closed"

#!/usr/bin/env bash
# The PROXY protocol on loopback (tests/net/test_haproxy.sh has it through a real HAProxy on
# hosts of their own): a header that arrives in pieces, as bash's printf sends one (a write per
# line) and as TCP may deliver any. From a source proxy_from does not list, the start of a v2
# header is never taken for a handshake (its NUL is at byte 5, where a q handshake ends): it is
# closed once it is whole, unanswered. From a listed source, a v1 header cut anywhere is
# waited for, and the client address it carries is the one the access log names.
. "$(dirname "$0")/lib.sh"

start_worker W1
W="127.0.0.1:$W1_PORT"
# gw NAME PROXY_FROM: a qgate with proxy_from and an access log
gw() {
    printf '[gateway]\nproxy_from = %s\naccess_log = %s\n[group main]\nworkers = %s\n' "$2" "$TMP/$1.access" "$W" > "$TMP/$1.conf"
    start_gateway "$1" -c "$TMP/$1.conf"
    wait_line "$TMP/$1.log" "connected \\(capability 3\\)" 10
}
# read_by_gateway PORT: until the gateway's end of the one connection to PORT has nothing
# unread (what was sent has been read: a socket state, not a time)
unread() { ss -Htn state established "( sport = :$1 )" | awk '{ print $1 }' | head -n 1; }
read_by_gateway() {
    local port=$1
    all_read() { [ "$(unread "$port")" = 0 ]; }
    wait_for 10 "the gateway read what was sent" all_read
}

# --- an unlisted source, the v2 signature in pieces --------------------------------------------
gw PU 127.0.0.2 # only 127.0.0.2 may send a header; this client is 127.0.0.1
raw_open "$PU_PORT"
printf '\r\n\r\n\000\r\n' >&3 # 7 bytes: a q handshake would have ended at the NUL
read_by_gateway "$PU_PORT"
# the rest, claiming 10.77.0.99 (printf writes it a line at a time: once the header is whole the
# gateway closes, and what follows may meet a closed socket)
(trap '' PIPE; printf 'QUIT\n\041\021\000\014\012\115\000\143\012\115\000\025\234\100\042\153' >&3) 2> /dev/null || true
raw_read "$TMP/pu.out" 10 2> /dev/null # until the gateway closes (reset: it leaves what we sent unread)
raw_close
[ ! -s "$TMP/pu.out" ] || fail "the start of a PROXY v2 header from an unlisted source was answered: $(od -An -tx1 "$TMP/pu.out" | head -2)"
wait_line "$TMP/PU.log" "a PROXY header from 127\\.0\\.0\\.1:[0-9]+, which proxy_from does not list: closed" 10
! grep -q "10\\.77\\.0\\.99" "$TMP/PU.log" || fail "the address the header claimed reached the log"
pass "a PROXY v2 header from a source proxy_from does not list, arriving in pieces: never taken for a handshake, closed unanswered"

# --- a listed source, a v1 header cut anywhere --------------------------------------------------
gw PL 127.0.0.1
raw_open "$PL_PORT"
printf 'PRO' >&3
read_by_gateway "$PL_PORT"
printf 'XY TCP4 10.1.2.3 127.0.0.1 5555 %s\r' "$PL_PORT" >&3
read_by_gateway "$PL_PORT"
printf '\n' >&3
raw_hs pl:pw
raw_text 1 "echo via"
timeout --foreground 10 head -c 17 <&3 > "$TMP/pl.out" || true # the reply: "via", 17 bytes
raw_close
grep -aq "via" "$TMP/pl.out" || fail "no reply through a PROXY v1 header sent in pieces: $(od -An -c "$TMP/pl.out" | head -2)"
wait_line "$TMP/PL.access" "user=pl peer=10\\.1\\.2\\.3:5555 " 10
pass "a PROXY v1 header from a listed source in pieces (PRO|XY ... \\r|\\n): waited for, the client's 10.1.2.3:5555 in the access log"

# --- proxy_from = unix: a balancer on q's Unix socket (HAProxy's abns@ server with send-proxy):
# its header is taken, the client's address the one it carries; a connection over that socket
# without one is closed (before: unix was taken by the check and never applied: a header over
# the socket was refused, a connection without one let in)
gw PX unix
python3 - "$PX_PORT" > "$TMP/px.out" 2>&1 << 'PY' || fail "over the Unix socket with proxy_from = unix: $(cat "$TMP/px.out")"
import socket, struct, sys
port = int(sys.argv[1])
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect("\0/tmp/kx.%d" % port)
    return s
def recv_all(s, n):
    b = b""
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            break
        b += x
    return b
s = conn()
s.sendall(b"PROXY TCP4 10.1.2.4 127.0.0.1 5556 %d\r\n" % port + b"px:pw\x03\x00")
assert recv_all(s, 1) == b"\x03", "no handshake answer after the header"
q = b"echo viaunix"
s.sendall(struct.pack("<BBBBI", 1, 1, 0, 0, 14 + len(q)) + struct.pack("<BBI", 10, 0, len(q)) + q)
r = recv_all(s, 8 + 6 + 7)
assert r.endswith(b"viaunix"), "reply %r" % r
s.close()
s = conn() # no header: closed unanswered
s.sendall(b"px:pw\x03\x00")
assert recv_all(s, 1) == b"", "answered without a PROXY header"
print("ok")
PY
wait_line "$TMP/PX.access" "user=px peer=10\\.1\\.2\\.4:5556 " 10
wait_line "$TMP/PX.log" "from unix \\(proxy_from\\): .*: closed" 10
pass "proxy_from = unix: a PROXY header over q's Unix socket taken (the client's 10.1.2.4:5556 in the access log); one without a header closed"

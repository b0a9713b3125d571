#!/usr/bin/env bash
# qgate as a drop-in q endpoint: every client.q mode through it, gateway commands, the Unix
# socket, async semantics, nested requests, N+1 dispatch, ordering, and 50 clients x 200.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 3500000
start_worker W2 --rows 3500000
cat > "$TMP/gw.conf" <<CONF
[gateway]
bind = 127.0.0.1
[group main]
workers = 127.0.0.1:$W1_PORT, 127.0.0.1:$W2_PORT
CONF
"$BIN/qgate" --check -c "$TMP/gw.conf" > "$TMP/check.out" || fail "--check"
expect_lines "$TMP/check.out" "configuration ok: port 8811, 1 group, 2 workers, any credentials and no admin \\(no users_file\\)$" 1
start_gateway GW -c "$TMP/gw.conf"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10

# --- every mode of client.q, through the gateway, as against a worker ---------------------
run_mode fast 5; expect_lines "$TMP/out" "^fast got :: 1 rows in dur :: $TS\$" 5
check_client_modes 3500000
pass "fast big smallbig med bigbig bigsmall ss throw ssthrow through qgate"

# the same reply bytes through the gateway as straight from a worker
for t in "rows 3" "echo same" "err same" "" "notify 2 n" "callback cb"; do
    "$BIN/qsend" -g "127.0.0.1:$W1_PORT" "$t" > "$TMP/direct.out"
    "$BIN/qsend" -g "$G" "$t" > "$TMP/via.out"
    cmp -s "$TMP/direct.out" "$TMP/via.out" || fail "reply to '$t' differs: $(cat "$TMP/direct.out") vs $(cat "$TMP/via.out")"
done
expect_lines "$TMP/via.out" '^"qsend got: cb"$' 1
pass "replies, q errors, async messages from the worker and nested requests pass unchanged"

# --- a client that calls the gateway from inside a worker's callback (q's .z.pg on the same
# handle): q runs what it sends nested, on the worker waiting in that callback, a sync one
# answered before the callback is; through qgate the same lines as straight to a worker, deeper
# callbacks too. (Before: it waited behind the request that called back, for ever.)
nest_same() { # nest_same ARGS...: qsend ARGS straight to a worker, then through the gateway
    timeout --foreground 30 "$BIN/qsend" -g "127.0.0.1:$W1_PORT" --timeout 20000 "$@" > "$TMP/direct.out" 2>&1 || true
    timeout --foreground 30 "$BIN/qsend" -g "$G" --timeout 20000 "$@" > "$TMP/via.out" 2>&1 || true
    cmp -s "$TMP/direct.out" "$TMP/via.out" || fail "qsend $*: $(cat "$TMP/direct.out") vs $(cat "$TMP/via.out")"
}
nest_same --nest "echo inner" "callback outer" "echo after"
printf '%s\n' 'nested: "inner"' '"qsend got: outer"' '"after"' | cmp -s - "$TMP/via.out" || fail "$(cat "$TMP/via.out")"
nest_same --nest "neg:nx:5||nx||err inner" "callback outer" "echo after"
printf '%s\n' 'nested: "5"' "nested: 'inner" '"qsend got: outer"' '"after"' | cmp -s - "$TMP/via.out" ||
    fail "$(cat "$TMP/via.out")"
nest_same --nest "callback deeper" --nest "echo innermost" "callback outer" "echo after"
printf '%s\n' 'nested: "innermost"' 'nested: "qsend got: deeper"' '"qsend got: outer"' '"after"' |
    cmp -s - "$TMP/via.out" || fail "$(cat "$TMP/via.out")"
total_is nested 6 || fail "nested: $(total nested)"
pass "a client's requests from inside a callback run nested on the worker that called back, as in q"
# ... and what a pipelining client sent behind the request that called back, before the callback
# reached it: on q's handle ahead of the answer, so it runs nested too, in the order sent, and
# the replies come in that order (at 797271b they waited behind the request, and what the client
# sent from inside the callback was answered before them: helper round 23b). qsend, blocking in
# its callback as q does, takes the first reply for its nested call's, as it would straight to q.
nest_same --pipeline --nest "echo C" "callback T" "echo B" "neg:echo D" "echo E"
printf '%s\n' 'nested: "B"' '"E"' '"C"' '"qsend got: T"' | cmp -s - "$TMP/via.out" || fail "$(cat "$TMP/via.out")"
total_is nested 10 || fail "nested: $(total nested)"
# ... one over 16 KiB among them too (validated on a reader first, in its place, the client read
# no further meanwhile: at fbf8731 it waited behind the request, and what came after it went
# ahead: helper round 25a)
big=$(printf 'x%.0s' $(seq 1 20000))
nest_same --pipeline --nest "echo C" "callback T" "echo $big" "echo E"
[ "$(cut -c1-16 "$TMP/via.out" | tr '\n' ' ')" = 'nested: "xxxxxxx "E" "C" "qsend got: T" ' ] || fail "$(cut -c1-40 "$TMP/via.out")"
total_is nested 13 || fail "nested: $(total nested)"
# ... a compressed async route among them waits its turn, the rest go (at 19229d1 it was sent to
# a reader again and again, the client read no more, and the request that called back hung:
# helper round 26a); and a command among them does not stop what is behind it (there, the second
# and third of three requests over 16 KiB ran after the request that called back)
long=$(printf 'y%.0s' $(seq 1 3000))
timeout --foreground 20 "$BIN/qsend" -g "$G" --timeout 10000 --pipeline --compress "callback cb" "echo a" "neg:on:main:a:\"$long\"" \
    "echo e" > "$TMP/cr.out" 2> /dev/null || fail "a compressed async route behind a callback: $(cat "$TMP/cr.out")"
printf '%s\n' '"a"' '"e"' '"qsend got: cb"' | cmp -s - "$TMP/cr.out" || fail "$(cat "$TMP/cr.out")"
timeout --foreground 30 python3 - "${G##*:}" > "$TMP/cb3.out" 2>&1 <<'PY' || fail "a command and three big requests behind a callback: $(cat "$TMP/cb3.out")"
import socket, struct, sys
def cv(s):
    s = s.encode()
    return b'\x0a\x00' + struct.pack('<i', len(s)) + s
def m(b, t=1):
    return struct.pack('<BBBBI', 1, t, 0, 0, 8 + len(b)) + b
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
s.sendall(b'u:p\x03\x00'); s.recv(1); s.settimeout(20)
s.sendall(b''.join(m(cv(x)) for x in ['callback cb', '.qgate.ping[]'] + ['echo B%d' % i + 'x' * 30000 for i in (1, 2, 3)]))
buf, got = b'', []
while len(got) < 5:
    while len(buf) < 8 or len(buf) < struct.unpack('<I', buf[4:8])[0]:
        d = s.recv(1 << 20)
        if not d:
            sys.exit('closed')
        buf += d
    n = struct.unpack('<I', buf[4:8])[0]
    x, buf = buf[:n], buf[n:]
    if x[1] == 1:
        s.sendall(m(cv('answer'), 2))
        continue
    got.append('1b' if x[8] == 0xff else x[14:16].decode())
worker = [g for g in got if g != '1b']  # (the gateway's own answer may come anywhere before the last)
print(' '.join(worker), 'ping last' if got[-1] == '1b' else '')
PY
[ "$(cat "$TMP/cb3.out")" = "B1 B2 B3 an " ] || fail "a command and three big requests behind a callback: $(cat "$TMP/cb3.out")"
pass "... and what a pipelining client sent behind the request before the callback came: nested too, in order, as in q"
# ... behind async messages that call back too: a sync request sent right behind them runs inside
# their callbacks, so it calls back third and takes the first answer, as on q (at 335b660 it waited
# for their run's end, its callback never came before the answers, and it took the third)
cat > "$TMP/nest.py" <<'PY'
# nest.py: a raw client for the scripts below (argv[1] the port): cv(text, type) makes a message;
# upto(n) reads until out holds n items: "call X" for a callback, X for a char vector reply, 1b,
# or an error's text
import socket, struct, sys
def cv(s, t):
    b = s.encode()
    return struct.pack('<bbhibbi', 1, t, 0, 14 + len(b), 10, 0, len(b)) + b
k = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
k.settimeout(10)
k.sendall(b'u:p\x03\x00'); k.recv(1)
buf, out = b'', []
def upto(n):
    global buf
    while len(out) < n:
        d = k.recv(65536)
        if not d:
            sys.exit('closed: ' + ' | '.join(out))
        buf += d
        while len(buf) >= 8 and len(buf) >= struct.unpack_from('<i', buf, 4)[0]:
            n2 = struct.unpack_from('<i', buf, 4)[0]
            m, buf = buf[:n2], buf[n2:]
            out.append(('call ' if m[1] == 1 else '') + (m[14:].decode() if m[8] == 10 else '1b' if m[8] == 0xff else
                        m[9:-1].decode() if m[8] == 0x80 else '?'))
PY
cat > "$TMP/ac.py" <<'PY'
import socket, struct, sys
from nest import cv, k
k.sendall(cv('callback a1', 0) + cv('callback a2', 0) + cv('callback c', 1))
buf = b''
def msg():
    global buf
    while len(buf) < 8 or len(buf) < struct.unpack_from('<i', buf, 4)[0]:
        try:
            d = k.recv(65536)
        except socket.timeout:
            d = b''
        if not d:
            return None
        buf += d
    n = struct.unpack_from('<i', buf, 4)[0]
    m, buf = buf[:n], buf[n:]
    return m
calls = []
while len(calls) < 3:  # every callback before any answer
    m = msg()
    if m is None:
        sys.exit('%d callbacks came: %s' % (len(calls), calls))
    calls.append(m[14:].decode())
for c in calls:
    b = ('ans:' + c).encode()
    k.sendall(struct.pack('<bbhibbi', 1, 2, 0, 14 + len(b), 10, 0, len(b)) + b)
m = msg()
print(' '.join(calls), m[14:].decode() if m else 'no reply')
PY
timeout --foreground 30 python3 "$TMP/ac.py" "$W1_PORT" > "$TMP/direct.out" 2>&1 || true
timeout --foreground 30 python3 "$TMP/ac.py" "$GW_PORT" > "$TMP/via.out" 2>&1 || true
cmp -s "$TMP/direct.out" "$TMP/via.out" || fail "$(cat "$TMP/direct.out") vs $(cat "$TMP/via.out")"
echo 'a1 a2 c ans:a1' | cmp -s - "$TMP/via.out" || fail "$(cat "$TMP/via.out")"
total_is nested 20 || fail "nested: $(total nested)"
pass "... and a sync request behind async messages that call back: inside their callbacks, the first answer its, as in q"
# ... and in a callback made by a call the client sent nested (two deep), what it calls the gateway
# for there is answered before that call's reply, as q answers what comes inside a callback before
# the call that made it returns (at 83c161f the call's reply went first, so a client pairing
# replies in order took 1b for the call's reply and the call's for the ping's: helper round 28a)
cat > "$TMP/n2.py" <<'PY'
from nest import cv, k, out, upto
k.sendall(cv('callback a', 1)); upto(1)
k.sendall(cv('callback b', 1)); upto(2)  # nested: its worker calls back again
k.sendall(cv('echo x', 1) + cv('.qgate.ping[]', 1) + cv('B', 2))  # inside b's callback, then its answer
upto(5)
k.sendall(cv('A', 2)); upto(6)
print(out[0], out[1], ' '.join(sorted(out[2:4])), out[4], out[5])  # (x and the ping: each side's as made)
PY
for i in 1 2 3; do
    timeout --foreground 30 python3 "$TMP/n2.py" "$GW_PORT" > "$TMP/n2.out" 2>&1 || true
    echo 'call a call b 1b x B A' | cmp -s - "$TMP/n2.out" || fail "run $i: $(cat "$TMP/n2.out")"
done
pass "... and what a client calls the gateway for inside a callback two deep: answered before the reply of the call that made that callback, as in q"
# ... also when the client, unwaited, answers that callback and sends more to the worker behind the
# answer: the call's reply waits all the same (at b04af49 it went first in 3 runs of 20 here, as the
# count of calls owed took what was sent behind the answer for calls around it: helper round 28c)
cat > "$TMP/d2p.py" <<'PY'
from nest import cv, k, out, upto
k.sendall(cv('callback a', 1)); upto(1)
k.sendall(cv('callback b', 1)); upto(2)
k.sendall(cv('.qgate.ping[]', 1) + cv('B', 2) + cv('echo a1', 1) + cv('.qgate.ping[]', 1) + cv('A', 2))
upto(7)
print('ping first' if out.index('1b') < out.index('B') else ' | '.join(out))  # the ping sent inside b before b's reply
PY
for i in $(seq 1 12); do
    timeout --foreground 30 python3 "$TMP/d2p.py" "$GW_PORT" > "$TMP/d2p.out" 2>&1 || true
    echo 'ping first' | cmp -s - "$TMP/d2p.out" || fail "run $i: $(cat "$TMP/d2p.out")"
done
pass "... and when it answers that callback and sends more behind the answer: the ping sent inside it before that call's reply"
# ... and those count no more against client_max_pending once they have gone: 600 tiny requests
# (13 KB, 180 KB as held) framed behind a held callback request, with client_max_pending 64 KiB:
# the callback is answered, not given up as 'the client sent twice client_max_pending ... and no
# answer' (at 0e4e1a9 it was, the bound checked while they went: helper round 24a)
printf 'op:pw\tadmin=1\nu:p\n' > "$TMP/cp.users"
printf '[gateway]\nbind = 127.0.0.1\nclient_max_pending = 64k\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s\n' \
    "$TMP/cp.users" "$W1_PORT" > "$TMP/cp.conf"
start_gateway CP -c "$TMP/cp.conf"
wait_line "$TMP/CP.log" "connected \\(capability 3\\)" 10
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$CP_PORT" -u op:pw ".qgate.pause[]" > /dev/null
timeout --foreground 60 python3 - "$CP_PORT" > "$TMP/cp.out" 2>&1 <<'PY' &
import socket, struct, sys
def cv(s, t=1):
    b = s.encode()
    return struct.pack('<bbhibbi', 1, t, 0, 14 + len(b), 10, 0, len(b)) + b
k = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
k.sendall(b'u:p\x03\x00'); k.recv(1)
n = 600
k.sendall(cv('callback A') + b''.join(cv('echo %d' % i) for i in range(n)))  # (one write: framed at once)
buf, out = b'', []
while len(out) < n + 1:
    while len(buf) < 8 or len(buf) < struct.unpack_from('<i', buf, 4)[0]:
        d = k.recv(65536)
        if not d:
            sys.exit('closed after %d replies' % len(out))
        buf += d
    size = struct.unpack_from('<i', buf, 4)[0]
    m, buf = buf[:size], buf[size:]
    if m[1] == 1:  # the callback: answered
        k.sendall(struct.pack('<bbhibbi', 1, 2, 0, 17, 10, 0, 3) + b'ans')
        continue
    out.append(m[14:].decode() if m[8] == 10 else "'" + m[9:-1].decode())
print(out[-1])  # (the 600 ran nested, inside the callback, before its answer: their replies first)
print('in order' if out[:-1] == [str(i) for i in range(n)] else 'out of order')
PY
cp=$!
cp_framed() { [ "$(timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$CP_PORT" -u op:pw ".qgate.totals[]" |
    awk -F'!' '{ nk = split($1, k, "`"); split($2, v, " "); for (i = 2; i <= nk; i++) if (k[i] == "pending_bytes") print v[i - 1] }')" -ge 13000 ]; }
wait_for 10 "600 requests framed behind the held one" cp_framed
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$CP_PORT" -u op:pw ".qgate.resume[]" > /dev/null
wait "$cp" || fail "the client: $(cat "$TMP/cp.out")"
printf '%s\n' ans 'in order' | cmp -s - "$TMP/cp.out" || fail "$(cat "$TMP/cp.out")"
kill "$CP_PID"
pass "... and those, gone nested, count no more against client_max_pending: the callback is answered"

# ... and what the gateway answers itself: a command runs then and there; a route cannot run
# inside the callback (the request that called back holds the client's place), so it is answered
# at once with an error; all before the callback's answer. (Before: they waited behind the
# request that called back, for ever with query_timeout = 0, the default.)
timeout --foreground 30 "$BIN/qsend" -g "$G" --timeout 20000 --nest ".qgate.ping[]||on:main:echo routed||.qgate.bogus[]||neg:.qgate.ping[]" \
    "callback outer" "echo after" > "$TMP/via.out" 2>&1 || true
printf '%s\n' 'nested: 1b' "nested: 'qgate: a route cannot run inside a callback (the request that called back holds its place); send it after the callback's answer" \
    "nested: 'qgate: unknown command .qgate.bogus[]" '"qsend got: outer"' '"after"' | cmp -s - "$TMP/via.out" ||
    fail "$(cat "$TMP/via.out")"
total_is nested 81 || fail "nested: $(total nested)"
pass "gateway commands from inside a callback run at once, a route is refused at once: nothing waits for ever"
# --- an answer the client sends before the callback asks for it (in the same write as the request
# that calls back, say): on q it waits on the handle behind what was sent before it, and the
# callback reads it in its place; through qgate the same (at 591b525 it was dropped as a response
# nobody asked for, and the callback waited for ever: helper round 28c). One sent behind a request
# that does not call back is read by no callback: dropped, as q's main loop reads it.
cat > "$TMP/pre.py" <<'PY'
import struct, sys
from nest import cv, k, out, upto
case = sys.argv[2]
if case == 'alone':
    k.sendall(cv('callback a', 1) + cv('A', 2)); upto(2)
elif case == 'behind':  # what was sent before the answer runs nested first
    k.sendall(cv('callback a', 1) + cv('echo x', 1) + cv('A', 2)); upto(3)
elif case == 'before':  # what was sent after it waits for the request
    k.sendall(cv('callback a', 1) + cv('A', 2) + cv('echo x', 1)); upto(3)
elif case == 'unread':  # no callback reads it: the next callback is answered as usual
    k.sendall(cv('echo y', 1) + cv('Y', 2) + cv('callback a', 1)); upto(2); k.sendall(cv('C', 2)); upto(3)
elif case == 'async':
    k.sendall(cv('callback a', 0) + cv('A', 2) + cv('echo z', 1)); upto(2)
elif case == 'two':  # one callback, two answers: the second is read by none
    k.sendall(cv('callback a', 1) + cv('A1', 2) + cv('A2', 2)); upto(2); k.sendall(cv('echo w', 1)); upto(3)
elif case == 'deep':  # a nested call's callback and both answers, in one write
    k.sendall(cv('callback a', 1) + cv('callback b', 1) + cv('B', 2) + cv('A', 2)); upto(4)
elif case == 'deepecho':  # b's answer sent ahead, a request, then a's: in the order q reads them
    k.sendall(cv('callback a', 1) + cv('callback b', 1) + cv('B', 2) + cv('echo m', 1) + cv('A', 2)); upto(5)
elif case == 'aheadlate':  # sent while an answer ahead waits for the request sent nested before it:
    k.sendall(cv('callback a', 1) + cv('sleep 300', 1) + cv('A', 2)); k.sendall(cv('echo c', 1)); upto(4)
elif case == 'aheadlatecb':  # behind it (nested at once, c came before A: the answer held, nothing else)
    k.sendall(cv('callback a', 1) + cv('sleep 300', 1) + cv('A', 2))
    k.sendall(cv('callback b', 1) + cv('B', 2) + cv('echo c', 1)); upto(6)
elif case == 'aheadhalf':  # ... its side shut while it waits: all still read, in order (at 83f6b20 the
    k.sendall(cv('callback a', 1) + cv('sleep 1000', 1) + cv('A', 2) + cv('echo c', 1)); upto(1)  # answer
    k.shutdown(1); upto(4); out.append('closed' if k.recv(1) == b'' else 'open')  # was dropped: round 31c)
elif case == 'aheadflood':  # (client_max_pending 64k) 200 KB behind an answer that waits: no give-up (at
    k.sendall(cv('callback a', 1) + cv('sleep 500', 1) + cv('A', 2) + cv('echo ' + 'y' * 200000, 1))  # 83f6b20
    upto(4)  # the callback was told its answer was not coming: helper round 31c)
elif case == 'aheadkill':  # the worker (pid argv[3], the group's only one) is lost while the answer
    import os, signal  # waits: it is read, the errors go (at d6aa6f4 they waited for it for ever)
    k.sendall(cv('callback a', 1) + cv('sleep 5000', 1) + cv('A', 2) + cv('echo c', 1)); upto(1)
    os.kill(int(sys.argv[3]), signal.SIGKILL); upto(4); k.sendall(cv('echo d', 1)); upto(5)
    out = ['cblost' if 'called back was lost' in o else 'lost' if o.startswith('qgate: worker') and o.endswith(' lost')
           else 'noworker' if o.startswith('qgate: no worker') else o for o in out]
elif case == 'twocalls':  # two callbacks, the first answer sent ahead
    k.sendall(cv('twocalls t', 1) + cv('T1', 2)); upto(2); k.sendall(cv('T2', 2)); upto(3)
elif case == 'big':  # over 16 KiB: validated on a reader, then held
    k.sendall(cv('callback a', 1) + cv('A' * 20000, 2) + cv('echo x', 1)); upto(3)
elif case == 'half':  # then its side shut, before the callback came: its answer still read
    k.sendall(cv('echo s', 1) + cv('callback a', 1) + cv('A', 2)); k.shutdown(1); upto(3)
    out.append('closed' if k.recv(1) == b'' else 'open')
elif case == 'nine':  # nine callbacks, each made inside the last, all nine answers ahead
    k.sendall(b''.join(cv('callback a%d' % i, 1) for i in range(9)) + b''.join(cv('A%d' % i, 2) for i in range(9)))
    upto(18)
elif case == 'halffew':  # side shut, one answer for two callbacks: both shown, the inner takes it
    k.sendall(cv('callback a', 1) + cv('callback b', 1) + cv('B', 2)); k.shutdown(1); upto(4)
    out.append('closed' if k.recv(1) == b'' else 'open')
elif case == 'halfbig':  # side shut, no answer, a 20 KB message behind (checked on a reader): it runs
    k.sendall(cv('callback a', 1) + cv('notify 2 ' + 'y' * 20000, 0) + cv('echo last', 1)); k.shutdown(1); upto(5)
    out.append('closed' if k.recv(1) == b'' else 'open')
elif case == 'bigbad':  # a malformed message over 16 KiB behind the request: found bad in its place,
    body = struct.pack('<bbi', 10, 0, 30000) + b'z' * 20000  # nothing behind it runs (a count past the end)
    k.sendall(cv('callback a', 1) + struct.pack('<bbhi', 1, 1, 0, 8 + len(body)) + body + cv('echo after', 1) +
              struct.pack('<bbhi', 1, 1, 0, 8 + len(body)) + body)
    upto(3); out.append('closed' if k.recv(1) == b'' else 'open')
    out = ['badmsg' if o.startswith('qgate: badmsg') else o for o in out]
elif case == 'badz':  # a malformed message right behind the request, under 16 KiB: found bad in its place
    body = struct.pack('<bbi', 10, 0, 60) + b'z' * 10  # (a count past the end)
    k.sendall(cv('callback a', 1) + cv('echo z', 1) + struct.pack('<bbhi', 1, 1, 0, 8 + len(body)) + body)
    upto(4); out.append('closed' if k.recv(1) == b'' else 'open')
    out = ['badmsg' if o.startswith('qgate: badmsg') else o for o in out]
elif case == 'bigahead':  # (client_max_pending 64k) an answer of 200 KB: an answer, no flood of requests
    k.sendall(cv('callback a', 1) + cv('Q' * 200000, 2) + cv('echo z', 1)); upto(3)
elif case.startswith('badans'):  # a malformed answer: read in its place, a bad message there (nothing after runs)
    n = 20000 if case.endswith('big') else 10  # (over 16 KiB: found bad on a reader)
    bad = struct.pack('<bbi', 10, 0, n + 50) + b'z' * n  # (a count past the end)
    bad = struct.pack('<bbhi', 1, 2, 0, 8 + len(bad)) + bad
    if case in ('badans', 'badansbig'):  # sent before the callback asks
        k.sendall(cv('callback a', 1) + bad + cv('echo after', 1)); upto(3)
    elif case == 'badanslive':  # sent when it asks
        k.sendall(cv('callback a', 1)); upto(1); k.sendall(bad + cv('echo after', 1)); upto(3)
    elif case == 'badansbehind':  # what was sent before it runs nested first
        k.sendall(cv('callback a', 1) + cv('echo x', 1) + bad + cv('echo after', 1)); upto(4)
    elif case == 'badansunread':  # no callback reads it: a bad message once the request before it is done
        k.sendall(cv('echo y', 1) + bad + cv('callback a', 1) + cv('echo after', 1)); upto(2)
    elif case == 'badanshalf':  # then its side shut: the callback still shown, and reads it
        k.sendall(cv('echo s', 1) + cv('callback a', 1) + bad); k.shutdown(1); upto(4)
    elif case == 'badanshdr':  # a bad header behind the request: its callback still shown (q sends it
        k.sendall(cv('callback a', 1) + struct.pack('<bbhi', 1, 3, 0, 20)); upto(3)  # before it reads on)
    elif case == 'badanshdrans':  # ... and reads the answer sent before the bad header
        k.sendall(cv('callback a', 1) + cv('A', 2) + struct.pack('<bbhi', 1, 3, 0, 20)); upto(3)
    elif case == 'badanshdrnest':  # ... after what was sent between, which runs nested (at 4f50da8 only
        k.sendall(cv('callback a', 1) + cv('echo m', 1) + cv('echo n', 1) + cv('A', 2) +  # the first did,
                  struct.pack('<bbhi', 1, 3, 0, 20)); upto(5)  # the answer never went: a hang, helper round 30a)
    elif case == 'badanstwo':  # a malformed answer, then a bad header: never read (at 4f50da8 a second badmsg)
        k.sendall(cv('callback a', 1) + bad + struct.pack('<bbhi', 1, 3, 0, 20)); upto(3)
    elif case == 'badansbodyhdr':  # a malformed body found in its place, then a bad header: one badmsg
        k.sendall(cv('callback a', 1) + bad[:1] + b'\1' + bad[2:] + struct.pack('<bbhi', 1, 3, 0, 20)); upto(3)
    elif case == 'badansorder':  # b's answer sent ahead, then a bad message: read inside a's callback,
        k.sendall(cv('callback a', 1) + cv('callback b', 1) + cv('A', 2) + bad[:1] + b'\1' + bad[2:])  # after
        upto(5)  # b's reply (at 490dbb3 the answer was paired with a's callback, the badmsg came first: 30c)
    elif case == 'badanshold':  # a bad header while an answer sent ahead waits: read after it (at
        k.sendall(cv('callback a', 1) + cv('sleep 1000', 1) + cv('A', 2)); upto(1)  # 83f6b20 the answer
        k.sendall(struct.pack('<bbhi', 1, 3, 0, 20)); upto(4)  # was dropped, the callback told none came)
    elif case == 'badansecho':  # a's answer behind a request sent nested that does not call back: read
        k.sendall(cv('callback a', 1) + cv('echo b', 1) + cv('A', 2) + bad[:1] + b'\1' + bad[2:]); upto(4)
    elif case == 'badansnest':  # a callback made inside a callback, a bad message behind what runs there
        k.sendall(cv('callback x', 1) + cv('callback y', 1) + cv('echo a1', 1) + bad[:1] + b'\1' + bad[2:] +
                  cv('echo after', 1)); upto(6)
    out.append('closed' if k.recv(1) == b'' else 'open')
    out = ['badmsg' if o.startswith('qgate: badmsg') else o for o in out]
    if case == 'badansnest':  # (the order of the badmsg and y's error: usage.md, "Every message is checked")
        out = out[:3] + sorted(out[3:6], key=lambda o: o != 'badmsg') + out[6:]
# (the error of a callback nobody answers: q's 'close, qgate's 'qgate: no answer comes ...)
out = ['err' if o == 'close' or o.startswith('qgate: no answer comes') else o for o in out]
print(' '.join(o if len(o) < 20 else 'len%d' % len(o) for o in out))
PY
start_worker W3 --rows 10 # (a worker of their own: its log says 'qgate: no answer comes ...)
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\n' "$W3_PORT" > "$TMP/pre.conf"
start_gateway PRE -c "$TMP/pre.conf"
wait_line "$TMP/PRE.log" "connected \\(capability 3\\)" 10
while read -r case want; do
    timeout --foreground 30 python3 "$TMP/pre.py" "$W3_PORT" "$case" > "$TMP/direct.out" 2>&1 || true
    timeout --foreground 30 python3 "$TMP/pre.py" "$PRE_PORT" "$case" > "$TMP/via.out" 2>&1 || true
    cmp -s "$TMP/direct.out" "$TMP/via.out" || fail "$case: $(cat "$TMP/direct.out") vs $(cat "$TMP/via.out")"
    echo "$want" | cmp -s - "$TMP/via.out" || fail "$case: $(cat "$TMP/via.out")"
done <<'CASES'
alone call a A
behind call a x A
before call a A x
unread y call a C
async call a z
two call a A1 w
deep call a call b B A
twocalls call t call t T2
big call a len20000 x
half s call a A closed
halffew call a call b B err closed
halfbig call a len20000 len20000 last err closed
halfbig call a len20000 len20000 last err closed
halfbig call a len20000 len20000 last err closed
deepecho call a call b B m A
aheadlate call a ? A c
aheadlatecb call a ? A call b B c
aheadhalf call a ? A c closed
nine call a0 call a1 call a2 call a3 call a4 call a5 call a6 call a7 call a8 A0 A1 A2 A3 A4 A5 A6 A7 A8
CASES
printf '[gateway]\nbind = 127.0.0.1\nclient_max_pending = 64k\n[group main]\nworkers = 127.0.0.1:%s\n' "$W3_PORT" > "$TMP/cp2.conf"
start_gateway CP2 -c "$TMP/cp2.conf"
wait_line "$TMP/CP2.log" "connected \\(capability 3\\)" 10
# (q closes on a malformed message: qgate answers it 'qgate: badmsg, in its place, runs nothing after
# it, and closes; at 9116339 'echo after' ran, and the second bad message got a second badmsg: 29e)
timeout --foreground 30 python3 "$TMP/pre.py" "$PRE_PORT" bigbad > "$TMP/via.out" 2>&1 || true
echo 'call a badmsg err closed' | cmp -s - "$TMP/via.out" || fail "bigbad: $(cat "$TMP/via.out")"
# ... and one under 16 KiB, sent with the request that calls back: found bad inside the callback, in
# its place (at 9116339 it was answered as it came: the callback never shown, z after the request)
timeout --foreground 30 python3 "$TMP/pre.py" "$PRE_PORT" badz > "$TMP/via.out" 2>&1 || true
echo 'call a z badmsg err closed' | cmp -s - "$TMP/via.out" || fail "badz: $(cat "$TMP/via.out")"
timeout --foreground 30 python3 "$TMP/pre.py" "$W3_PORT" bigahead > "$TMP/direct.out" 2>&1 || true
timeout --foreground 30 python3 "$TMP/pre.py" "$CP2_PORT" bigahead > "$TMP/via.out" 2>&1 || true
echo 'call a len200000 z' | cmp -s - "$TMP/via.out" || fail "bigahead: $(cat "$TMP/direct.out") vs $(cat "$TMP/via.out")"
timeout --foreground 30 python3 "$TMP/pre.py" "$CP2_PORT" aheadflood > "$TMP/via.out" 2>&1 || true
echo 'call a ? A len200000' | cmp -s - "$TMP/via.out" || fail "aheadflood: $(cat "$TMP/via.out")"
# a malformed answer sent before the callback asks is read in its place, as on q: the callback is
# shown, what was sent before it runs nested, then it is a bad message (as one sent when asked is),
# nothing after it runs (at fdf37cf it was a bad message as it came: the callback never shown, a
# request sent between ran on its own: helper rounds 29a, 29b, 29f)
while read -r case want; do
    timeout --foreground 30 python3 "$TMP/pre.py" "$PRE_PORT" "$case" > "$TMP/via.out" 2>&1 || true
    echo "$want" | cmp -s - "$TMP/via.out" || fail "$case: $(cat "$TMP/via.out")"
done <<'CASES'
badanslive call a err badmsg closed
badans call a err badmsg closed
badansbig call a err badmsg closed
badansbehind call a x err badmsg closed
badansunread y badmsg closed
badanshalf s call a err badmsg closed
badanshdr call a err badmsg closed
badanshdrans call a A badmsg closed
badansnest call x call y a1 badmsg err err closed
badanshdrnest call a m n A badmsg closed
badanstwo call a err badmsg closed
badansorder call a call b A badmsg err closed
badansecho call a b A badmsg closed
badanshold call a ? A badmsg closed
badansbodyhdr call a badmsg err closed
CASES
start_worker W4 --rows 10 # (killed inside a callback: the group's only worker)
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\n' "$W4_PORT" > "$TMP/kl.conf"
start_gateway KL -c "$TMP/kl.conf"
wait_line "$TMP/KL.log" "connected \\(capability 3\\)" 10
timeout --foreground 30 python3 "$TMP/pre.py" "$KL_PORT" aheadkill "$W4_PID" > "$TMP/via.out" 2>&1 || true
echo "call a cblost lost noworker noworker" | cmp -s - "$TMP/via.out" || fail "aheadkill: $(cat "$TMP/via.out")"
kill "$CP2_PID" "$PRE_PID" "$KL_PID"
pass "an answer sent before the callback asks: the callback reads it in its place, as on q (after a shut side, or over client_max_pending too)"
# --- a request over 16 KiB queued behind async messages that call back, a small one behind it: both
# run nested, in order, the callback answered at once (at b65b2b7 the small one went nested ahead of
# the big one, validated on a reader only once the run had ended: helper round 27a)
nest_same --pipeline "neg:callback acb" "neg:echo ae" "echo $big" "echo x"
[ "$(cut -c1-8 "$TMP/via.out" | tr '\n' ' ')" = '"xxxxxxx "x" ' ] || fail "$(cut -c1-40 "$TMP/via.out")"
pass "a big request and a small one queued behind async messages that call back: answered in order, as in q"
# ... a command compressed (as q sends one of over 2000 bytes, so a bad command) too: the gateway's,
# never the worker's (at fc5f796 a compressed one went to the worker that called back)
long=$(printf 'a%.0s' $(seq 1 3000))
timeout --foreground 30 "$BIN/qsend" -g "$G" --timeout 20000 --compress --nest ".qgate.ping[] / $long" "callback outer" > "$TMP/via.out" 2> "$TMP/via.err" || true
expect_lines "$TMP/via.err" "^sent: [0-9]+ bytes compressed " 1
printf '%s\n' "nested: 'qgate: bad command: a command is .qgate.name[] or (\`.qgate.name; arg), under 1024 bytes" \
    '"qsend got: outer"' | cmp -s - "$TMP/via.out" || fail "$(cat "$TMP/via.out")"
grep -q "qgate" "$TMP/W1.log" "$TMP/W2.log" && fail "a nested compressed command reached a worker"
pass "... a command compressed too: answered by the gateway, never run on the worker"

# --- a callback from an async message: the worker is inside it until its client answers, so the
# chaser sent behind the message runs inside the callback too and its reply proves nothing. No
# other client's request goes to that worker meanwhile, and what the client sends from inside the
# callback runs nested there, its reply its own (before: the chaser's reply ended the run, the
# worker was given another client's request, and the two clients' callback answers crossed:
# helper round 10a) ---------------------------------------------------------------------------
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\n' "$W1_PORT" > "$TMP/ac.conf"
start_gateway AC -c "$TMP/ac.conf"
wait_line "$TMP/AC.log" "connected \\(capability 3\\)" 10
rm -f "$TMP/goA"
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$AC_PORT" --timeout 30000 --nest "echo inner||wait:$TMP/goA" "neg:callback cbA" \
    "serve:$TMP/goA" "echo a-after" > "$TMP/a.out" 2>&1 & pa=$! # (a-after sent once the callback is answered:
    # sent before the callback reached the client, it would run inside it, as straight to q)
wait_line "$TMP/a.out" 'nested: "inner"' 10 # (A is inside the callback: what it sent there ran there)
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$AC_PORT" --timeout 30000 "callback cbB" > "$TMP/b.out" 2>&1 & pb=$!
b_waits() { timeout --foreground 5 "$BIN/qsend" -g "127.0.0.1:$AC_PORT" ".qgate.pools[]" | grep -qE "\\| ,\`main \\| ,0b \\| ,1 \\|"; }
wait_for 10 "B waiting while the worker is inside A's callback" b_waits
[ ! -s "$TMP/b.out" ] || fail "B ran while the worker was inside A's callback: $(cat "$TMP/b.out")"
touch "$TMP/goA"
wait "$pa" "$pb"
printf '%s\n' 'nested: "inner"' '"a-after"' | cmp -s - "$TMP/a.out" || fail "A: $(cat "$TMP/a.out")"
printf '%s\n' '"qsend got: cbB"' | cmp -s - "$TMP/b.out" || fail "B: $(cat "$TMP/b.out")"
kill "$AC_PID"
pass "a callback from an async message: the worker is given no one else until it is answered; what is sent inside it runs there"

# --- gateway commands, answered by qgate itself ------------------------------------------
q ".qgate.ping[]" ".qgate.stats[]" ".qgate.ping[ ]" ".qgate.bogus[]"
expect_lines "$TMP/q.out" '^1b$' 2
expect_lines "$TMP/q.out" '^table\[2\] `address `group `state `served `errors `inflight `queued `p50_us `p99_us `dropped `session `transport `client `started \| `127\.0\.0\.1:[0-9]+`127\.0\.0\.1:[0-9]+ \| `main`main \| `idle`idle \| [0-9]+ [0-9]+ \| [0-9]+ [0-9]+ \| 0 0 \| 0 0 \| [0-9]+ [0-9]+ \| [0-9]+ [0-9]+ \| 0 0 \| 0N 0N \| `tcp`tcp \| 0N 0N \| 0N 0N$' 1
expect_lines "$TMP/q.out" "^'qgate: unknown command .qgate.bogus\\[\\]\$" 1
grep -q "qgate" "$TMP/W1.log" "$TMP/W2.log" && fail "a gateway command reached a worker"
pass ".qgate.ping[] and .qgate.stats[] answered by the gateway"
# --- a bad message two callbacks deep: its badmsg before the replies of the calls whose callbacks it came
# inside (at 63c4f19 it waited for them, so a client pairing in order took each for the other's:
# helper round 28b); and one sent right after the client answered the inner callback comes after
# that call's reply (its callback answered, it is inside the outer one only)
printf '\x01\x01\x00\x00\x11\x00\x00\x00\x0a\x00\x64\x00\x00\x00abc' > "$TMP/bad3.bin" # 100 chars claimed, 3 sent
timeout --foreground 30 "$BIN/qsend" -g "$G" --timeout 20000 --nest "callback b" --nest "bytes:$TMP/bad3.bin" "callback a" > "$TMP/d2.out" 2>&1 || true
printf '%s\n' "nested: 'qgate: badmsg count past end of message at byte 10" \
    "nested: 'qgate: no answer comes: the client of this request has gone, or sent a bad message" \
    "'qgate: no answer comes: the client of this request has gone, or sent a bad message" | cmp -s - "$TMP/d2.out" ||
    fail "two deep: $(cat "$TMP/d2.out")"
cat > "$TMP/ab.py" <<'PY'
import sys
from nest import cv, k, out, upto
k.sendall(cv('callback a', 1)); upto(1)
k.sendall(cv('callback b', 1)); upto(2)
k.sendall(cv('B', 2) + open(sys.argv[2], 'rb').read())  # b answered, then a bad message inside a
upto(4)
print(' | '.join(x[:13] for x in out[:4]))
PY
for i in 1 2 3; do
    timeout --foreground 30 python3 "$TMP/ab.py" "$GW_PORT" "$TMP/bad3.bin" > "$TMP/ab.out" 2>&1 || true
    echo 'call a | call b | B | qgate: badmsg' | cmp -s - "$TMP/ab.out" || fail "run $i: $(cat "$TMP/ab.out")"
done
pass "... and a bad message there: its badmsg before the replies of the calls around it, after that of a call whose callback was answered"

# --- q's Unix socket for the same port ----------------------------------------------------
"$BIN/qsend" -g "unix:$GW_PORT" "echo over uds" > "$TMP/q.out"
expect_lines "$TMP/q.out" '^"over uds"$' 1
pass "abstract Unix socket"

# --- async: runs on a worker in the client's order; the worker is busy until it has ------
# the sync chaser proves it: the echo is answered only after the async sleep ran
q --pipeline "neg:sleep 300" "neg:echo ignored" "echo after"
expect_lines "$TMP/q.out" '^"after"$' 1
grep -q "sleep 300 ms" "$TMP/W1.log" "$TMP/W2.log" || fail "the async message did not run"
pass "async messages run, unanswered, before the client's next request"

# --- N+1: two workers busy; the third request goes to whichever frees first ---------------
"$BIN/qsend" -g "$G" "hold n1" > "$TMP/n1.out" & p1=$!
"$BIN/qsend" -g "$G" "hold n2" > "$TMP/n2.out" & p2=$!
wait_any "hold n1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold n2" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" "sleep 1" > "$TMP/n3.out" & p3=$!   # the third: logged by the worker that runs it
one_queued() { timeout --foreground 5 "$BIN/qsend" -g "$G" ".qgate.stats[]" | grep -qE '\| 1 1 \| [0-9]+ [0-9]+ \| [0-9]+ [0-9]+ \| 0 0 \| 0N 0N \| `tcp`tcp \| [0-9]+ [0-9]+ \| [0-9]+ [0-9]+$'; }
wait_for 10 "the third request queued" one_queued
release n2 "$W1_PORT" "$W2_PORT"                          # n2's worker frees first
wait "$p3"
expect_lines "$TMP/n3.out" '^1$' 1
freed=$(grep -l "hold n2" "$TMP/W1.log" "$TMP/W2.log")
sed -n '/released n2/,$p' "$freed" > "$TMP/after_n2" # (a file: see test_pipeline.sh's --print-config)
grep -q "sleep 1 ms" "$TMP/after_n2" || fail "the third request did not go to the worker that freed first"
release n1 "$W1_PORT" "$W2_PORT"
wait "$p1" "$p2"
pass "N+1: the third request is served by the first worker to free, not the slowest"

# --- ordering: pipelined requests with async ones among them ------------------------------
args=(); want=()
for i in $(seq 1 60); do
    if [ $((i % 7)) -eq 0 ]; then args+=("neg:echo skip$i"); continue; fi
    if [ $((i % 11)) -eq 0 ]; then args+=("err e$i"); want+=("'e$i"); continue; fi
    args+=("echo m$i"); want+=("\"m$i\"")
done
q --pipeline "${args[@]}"
printf '%s\n' "${want[@]}" | diff -u - "$TMP/q.out" || fail "pipelined replies out of order"
pass "a client's replies come in the order of its requests"

# --- 50 clients x 200 requests with unique payloads: every reply matches its request ------
cpids=()
for c in $(seq 1 50); do
    args=()
    for k in $(seq 1 200); do args+=("echo c$c-r$k-$RANDOM"); done
    printf '%s\n' "${args[@]}" | sed 's/^echo \(.*\)$/"\1"/' > "$TMP/want$c"
    timeout --foreground 120 "$BIN/qsend" -g "$G" "${args[@]}" > "$TMP/got$c" &
    cpids+=($!)
done
wait "${cpids[@]}"
for c in $(seq 1 50); do
    cmp -s "$TMP/want$c" "$TMP/got$c" || fail "client $c got replies that are not its own"
done
pass "50 clients x 200 requests: every reply matched its request"

# --- broadcast group: async messages reach every worker, in order --------------------------
cat > "$TMP/bc.conf" <<CONF
[gateway]
bind = 127.0.0.1
[group replicas]
workers = 127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT
async = broadcast
CONF
start_gateway BC -c "$TMP/bc.conf"
G="127.0.0.1:$BC_PORT"
wait_count "$TMP/BC.log" "connected \\(capability 3\\)" 2 10
q --pipeline "neg:sleep 11" "neg:sleep 12" "neg:sleep 13" "echo done"
expect_lines "$TMP/q.out" '^"done"$' 1
for w in W1 W2; do
    grep -oE "sleep 1[123] ms" "$TMP/$w.log" | tr '\n' ' ' > "$TMP/order"
    [ "$(cat "$TMP/order")" = "sleep 11 ms sleep 12 ms sleep 13 ms " ] || fail "$w saw: $(cat "$TMP/order")"
done
pass "broadcast: every worker ran the async messages, in order"

# ... one sent from inside a callback too: it waits its turn and reaches every worker, not only
# the one that called back, where it would have run nested (the replicas then disagreed)
q --nest "neg:nb:fromcb" "callback cb" "echo after"
printf '%s\n' '"qsend got: cb"' '"after"' | cmp -s - "$TMP/q.out" || fail "$(cat "$TMP/q.out")"
for w in W1 W2; do
    p="${w}_PORT"
    timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:${!p}" "nb" > "$TMP/nb.out" 2>&1 || true
    expect_lines "$TMP/nb.out" '^"fromcb"$' 1
done
pass "broadcast: an async message sent from inside a callback reaches every worker"

# ... a broadcast that calls back: nobody answers (its sender waits for nothing), and each worker
# is told so in words that say it (before: "the client of this request has gone"); what the
# sender sends next runs after every worker is done with it
q --pipeline "neg:callback bcb" "echo after"
expect_lines "$TMP/q.out" '^"after"$' 1
for w in W1 W2; do
    wait_line "$TMP/$w.log" "callback answered with an error: 'qgate: no client answers a callback from a broadcast" 10
done
pass "broadcast: a callback from it is answered at once, saying no client answers it"

# --- a malformed message sent from inside a callback, and waited for there: 'qgate: badmsg as its
# answer at once, then the reply of the request that called back (its worker told no answer
# comes), then the close. At 3929a8f the badmsg went after that reply, so the client read each as
# the other's (helper round 20): checked on the loop (small), and on a reader (over 16 KiB) ------
python3 -c "
import struct, sys
for name, n in (('small', 3), ('large', 20000)):
    b = b'\x0a\x00' + struct.pack('<i', n) + b'a' * n + b'JUNK'  # a char vector, then 4 bytes after it
    open(sys.argv[1] + '/bad-' + name + '.bin', 'wb').write(bytes([1, 1, 0, 0]) + struct.pack('<I', 8 + len(b)) + b)
" "$TMP"
for size in small large; do
    timeout --foreground 30 "$BIN/qsend" -g "$G" --timeout 20000 --nest "bytes:$TMP/bad-$size.bin" "callback outer" "echo after" \
        > "$TMP/nb.out" 2>&1 || true
    at=$([ $size = small ] && echo 17 || echo 20014)
    printf '%s\n' "nested: 'qgate: badmsg bytes after object at byte $at" \
        "'qgate: no answer comes: the client of this request has gone, or sent a bad message" |
        cmp -s - <(head -n 2 "$TMP/nb.out") || fail "$size: $(cat "$TMP/nb.out")"
    grep -q '"after"' "$TMP/nb.out" && fail "$size: a request after the bad message ran: $(cat "$TMP/nb.out")"
done
q "echo still"
expect_lines "$TMP/q.out" '^"still"$' 1
pass "a malformed sync message from inside a callback: its badmsg at once, as the nested call's answer, then the reply of the request that called back, then the close"
# ... sent right behind a call it made nested there, without waiting for that call's reply (a
# pipelining client): the badmsg after that reply, as q reads the bad message after it has run
# the call (at 52a7b1c it overtook the reply, so the client read each as the other's; the
# simulation, seed 2310)
raw_open "${G##*:}"
raw_hs "u:p"
raw_text 1 "callback pipelined"
: > "$TMP/pb.cb"
raw_msg "$TMP/pb.cb" || fail "no callback came"
{ raw_text 1 "sleep 200"; cat "$TMP/bad-small.bin"; } >&3
: > "$TMP/pb.1" && raw_msg "$TMP/pb.1" || fail "no first reply"
: > "$TMP/pb.2" && raw_msg "$TMP/pb.2" || fail "no second reply"
raw_close
[ "$(od -An -tx1 -j8 "$TMP/pb.1" | tr -d ' \n')" = f9c800000000000000 ] || # 200 (the sleep's reply, a long)
    fail "the first reply is not the nested call's: $(od -c "$TMP/pb.1" | head -3)"
grep -aq "qgate: badmsg bytes after object at byte 17" "$TMP/pb.2" || fail "the second reply: $(od -c "$TMP/pb.2" | head -3)"
pass "... and one sent right behind a nested call, unwaited: its badmsg after that call's reply"

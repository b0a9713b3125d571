#!/usr/bin/env bash
# Fan-out: (`.qgate.all; `group; query[; `list]) runs query on every worker of the group and
# answers with the replies merged (q's raze) or listed; all or an error: a worker down, or lost
# midway, fails it, unless `partial asks for the answer of the workers up, which names them;
# errors, merge_max; neg[h] the same without a reply.
. "$(dirname "$0")/lib.sh"

ROWS=${FANOUT_ROWS:-1000000}
for i in 1 2 3 4; do start_worker W$i --rows "$ROWS" --seed $((i * 7)); done
ALL="127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT,127.0.0.1:$W3_PORT,127.0.0.1:$W4_PORT"
printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group main]\nworkers = %s\n' "$ALL" > "$TMP/gw.conf"
start_gateway G -c "$TMP/gw.conf" --loglevel debug
wait_count "$TMP/G.log" "connected \\(capability" 4
G="127.0.0.1:$G_PORT"

# --- 4 workers x 1,000,000 rows: the merged table is the 4 direct answers, razed -------------
for i in 1 2 3 4; do
    p="W${i}_PORT"
    timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:${!p}" --raw "$TMP/d$i.bin" "rows $ROWS" > /dev/null
done
timeout --foreground 120 "$BIN/qsend" -g "$G" --raw "$TMP/f.bin" "all:main:rows $ROWS" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^table\\[$((4 * ROWS))\\] \`a" 1
# q's bytes of raze: a one-column table of strings is header, 17 bytes (98 0 99, the names,
# the list of columns), the column's type, attribute and count, then its items: the merge is
# the first's 17 bytes, the count of all, every worker's items in worker order
items=0
for i in 1 2 3 4; do
    tail -c +32 "$TMP/d$i.bin" > "$TMP/items$i.bin"
    items=$((items + $(stat -c %s "$TMP/items$i.bin")))
done
le32() { printf '%08x' "$1" | sed 's/\(..\)\(..\)\(..\)\(..\)/\\x\4\\x\3\\x\2\\x\1/'; }
{ printf '\x01\x02\x00\x00'; printf "$(le32 $((8 + 17 + 6 + items)))"
  head -c 25 "$TMP/d1.bin" | tail -c 17; printf '\x00\x00'; printf "$(le32 $((4 * ROWS)))"
  cat "$TMP/items1.bin" "$TMP/items2.bin" "$TMP/items3.bin" "$TMP/items4.bin"; } > "$TMP/want.bin"
cmp "$TMP/want.bin" "$TMP/f.bin" || fail "the merged reply is not the four direct answers razed"
pass ".qgate.all over 4 workers x $ROWS rows: byte for byte the raze of the 4 direct answers"

# --- lists joined, `list, errors, async -------------------------------------------------
q "all:main:echo ab" "all-list:main:echo ab" "all:main:err boom" "all:nosuch:x" "neg:all:main:k:1" "all-list:main:k" \
  "all-list:main:err boom2"
expect_lines "$TMP/q.out" '^"abababab"$' 1
expect_lines "$TMP/q.out" '^\("ab";"ab";"ab";"ab"\)$' 1
expect_lines "$TMP/q.out" "^'boom\$" 1
expect_lines "$TMP/q.out" "^'boom2\$" 1 # `list too: no q list holds an error
expect_lines "$TMP/q.out" "^'qgate: no group nosuch\$" 1
expect_lines "$TMP/q.out" '^\("1";"1";"1";"1"\)$' 1
pass "lists joined; \`list gives each reply; the first q error wins (\`list too); neg[h] runs on every worker, no reply"

# --- what a worker sends while it runs its part reaches the .qgate.all's client, as it reaches a
# client of that worker: its publishes, and its callbacks, each answered back to the worker that
# asked (qsend answers "qsend got: X"; a qworker's "callback X" asks X with %p its port, and
# answers the answer)
q "all:main:notify 2 pub" "all:main:callback cb" "all-list:main:callback cb %p" "echo after"
grep -c '^async: "pub"$' "$TMP/q.out" | grep -qx 8 || fail "8 publishes, got: $(cat "$TMP/q.out")"
expect_lines "$TMP/q.out" '^2 2 2 2$' 1
expect_lines "$TMP/q.out" '^"qsend got: cbqsend got: cbqsend got: cbqsend got: cb"$' 1
expect_lines "$TMP/q.out" "^\\(\"qsend got: cb $W1_PORT\";\"qsend got: cb $W2_PORT\";\"qsend got: cb $W3_PORT\";\"qsend got: cb $W4_PORT\"\\)\$" 1
expect_lines "$TMP/q.out" '^"after"$' 1
pass "a .qgate.all's workers publish to its client and call it back, each answer to the worker that asked"

# ... and from inside each callback the client calls the gateway on the same handle (q's .z.pg):
# a gateway command runs, a request for a worker is refused at once (the .qgate.all's workers
# wait on the client), both before the callback's answer. The callbacks reach the client one at
# a time (the next once the last is answered): a q client blocked in a call runs a callback it
# reads meanwhile nested and answers it first, and answers are matched to callbacks in order.
# (Before: the nested calls waited behind the .qgate.all, for ever.)
timeout --foreground 60 "$BIN/qsend" -g "$G" --timeout 30000 --nest ".qgate.ping[]||echo inner" "all-list:main:callback cb %p" \
    "echo after" > "$TMP/n.out" 2>&1 || true
{ for i in 1 2 3 4; do
      printf '%s\n' 'nested: 1b' "nested: 'qgate: a request cannot run inside a .qgate.all's callback (its workers wait on this client); send it after the callback's answer"
  done
  printf '%s\n' "(\"qsend got: cb $W1_PORT\";\"qsend got: cb $W2_PORT\";\"qsend got: cb $W3_PORT\";\"qsend got: cb $W4_PORT\")" '"after"'
} | cmp -s - "$TMP/n.out" || fail "$(cat "$TMP/n.out")"
expect_file_has "$TMP/G.log" "its callback waits: .* answers another part's first"
pass "calls to the gateway from inside a .qgate.all's callbacks answered at once; each callback's answer to the worker that asked"
# ... and answers sent before the callbacks ask, in the same write as the .qgate.all, a command
# between: each callback takes the next answer, the command waits its turn (at 4f99181 the answers
# waited behind the command, which could not go nested, and the .qgate.all hung: helper round 29a)
cat > "$TMP/fa.py" <<'PY'
import socket, struct, sys
def cv(s, t):
    b = s.encode()
    return struct.pack('<bbhibbi', 1, t, 0, 14 + len(b), 10, 0, len(b)) + b
q = b'callback a'
body = struct.pack('<bbi', 0, 0, 3) + b'\xf5.qgate.all\x00\xf5main\x00' + struct.pack('<bbi', 10, 0, len(q)) + q
fan = struct.pack('<bbhi', 1, 1, 0, 8 + len(body)) + body
badhdr = struct.pack('<bbhi', 1, 3, 0, 20)  # (message type 3)
bad = struct.pack('<bbi', 10, 0, 60) + b'z' * 10  # (a count past the end)
big = struct.pack('<bbi', 10, 0, 20050) + b'z' * 20000  # (over 16 KiB: a reader checks it)
big = struct.pack('<bbhi', 1, 1, 0, 8 + len(big)) + big
badans = bad[:1] + b'\2' + bad[2:]
bad = struct.pack('<bbhi', 1, 1, 0, 8 + len(bad)) + bad
k = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
k.settimeout(20)
k.sendall(b'u:p\x03\x00'); k.recv(1)
case, n = sys.argv[2], int(sys.argv[3])
k.sendall(fan + {'ahead': cv('.qgate.ping[]', 1) + b''.join(cv(a, 2) for a in 'ABCD'),
                 'aheadhdr': cv('A', 2) + cv('B', 2) + badhdr, 'badfirst': bad + cv('A', 2), 'bad': bad,
                 'aheadbad': cv('A', 2) + bad, 'bigfirst': big + cv('A', 2), 'badans': badans}[case])
buf, out = b'', []
while len(out) < n:
    d = k.recv(65536)
    if not d:
        sys.exit('closed: %s' % out)
    buf += d
    while len(buf) >= 8 and len(buf) >= struct.unpack_from('<i', buf, 4)[0]:
        n2 = struct.unpack_from('<i', buf, 4)[0]
        m, buf = buf[:n2], buf[n2:]
        out.append('call' if m[1] == 1 else '1b' if m[8] == 0xff else ''.join(sorted(m[14:].decode())) if m[8] == 10 else
                   'badmsg' if m[9:].startswith(b'qgate: badmsg') else 'err' if m[8] == 0x80 else '?')
if case != 'ahead':
    out.append('closed' if k.recv(1) == b'' else 'open')
print(' '.join(out))
PY
timeout --foreground 30 python3 "$TMP/fa.py" "$G_PORT" ahead 6 > "$TMP/ahead.out" 2>&1 || true
echo 'call call call call ABCD 1b' | cmp -s - "$TMP/ahead.out" || fail "answers sent ahead of a .qgate.all's callbacks: $(cat "$TMP/ahead.out")"
pass "... and answers sent before its callbacks ask, a command between: each callback takes the next, the command after"
# ... and a bad message behind them: the callbacks that read an answer sent before it pass, and
# the next (shown: its answer does not come), then no more, as after a half-close; one read inside
# the first callback, before an answer sent after it: that answer is never read (at 204a891 no
# callback was shown and both answers were dropped; the answer after the bad message was read,
# and without one the worker waited in its callback: helper round 30b)
# (aheadbad, bigfirst, badans: at 38fdc95 the first hung, a worker held in its callback for good;
# the second read A and hung; the third passed a second callback: helper round 30c)
for c in "aheadhdr 5 call call call err badmsg closed" "badfirst 3 call err badmsg closed" "bad 3 call err badmsg closed" \
    "aheadbad 4 call call err badmsg closed" "bigfirst 3 call err badmsg closed" "badans 3 call err badmsg closed"; do
    set -- $c
    timeout --foreground 30 python3 "$TMP/fa.py" "$G_PORT" "$1" "$2" > "$TMP/fa.out" 2>&1 || true
    shift 2
    echo "$*" | cmp -s - "$TMP/fa.out" || fail "a bad message behind a .qgate.all's callbacks: $(cat "$TMP/fa.out")"
done
pass "... and a bad message behind them: read in its place, no further callback passed, no answer after it read"
# ... and what only a reader can check from inside them is checked before it is answered: a
# compressed gateway command runs (q compresses only messages over 2000 bytes: a bad command);
# a malformed message over 16 KiB is a bad message, 'qgate: badmsg at once (the client waits
# for it inside the callback), then the close, as anywhere (before: "cannot run inside a
# .qgate.all's callback" for both, and the connection kept)
A3K=$(printf 'a%.0s' $(seq 1 3000))
timeout --foreground 60 "$BIN/qsend" -g "$G" --timeout 30000 --compress --nest ".qgate.ping[] / $A3K" "all-list:main:callback cb %p" \
    > "$TMP/n.out" 2> /dev/null || true
[ "$(grep -c "^nested: 'qgate: bad command: a command is .qgate.name\[\] or (\`.qgate.name; arg), under 1024 bytes\$" "$TMP/n.out")" = 4 ] ||
    fail "a compressed command inside a .qgate.all's callback: $(cut -c1-120 "$TMP/n.out")"
python3 -c "import struct, sys; b = b'\x0a\x00' + struct.pack('<i', 30000) + b'a' * 20000
sys.stdout.buffer.write(b'\x01\x01\x00\x00' + struct.pack('<i', 8 + len(b)) + b)" > "$TMP/bad20k.bin" # (count past its end)
timeout --foreground 60 "$BIN/qsend" -g "$G" --timeout 30000 --nest "bytes:$TMP/bad20k.bin" "all-list:main:callback cb %p" "echo after" \
    > "$TMP/n.out" 2>&1 || true
printf '%s\n' "nested: 'qgate: badmsg count past end of message at byte 10" \
    "'qgate: no answer comes: the client of this request has gone, or sent a bad message" "'close" | cmp -s - "$TMP/n.out" ||
    fail "a malformed message inside a .qgate.all's callback: $(cut -c1-120 "$TMP/n.out")"
q "echo still"
expect_lines "$TMP/q.out" '^"still"$' 1
pass "inside a .qgate.all's callback, what a reader checks is checked first: a compressed command runs; a malformed message over 16 KiB: 'qgate: badmsg at once, then the close"

# ... and when the worker whose callback the client is in is lost meanwhile: the client still owes
# that answer (its .z.pg runs on), so the other part's callback waits for it, and what the client
# sends meanwhile is nested (at 6507bd2 the other's callback went at once; the client, answering the
# innermost first, had its answer dropped as the lost one's, and its answer to the lost worker given
# to the other)
start_worker FA --rows 10
start_worker FB --rows 10
printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 60000\nreconnect_max = 60000\n[group fan]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$FA_PORT" "$FB_PORT" > "$TMP/fl.conf"
start_gateway FL -c "$TMP/fl.conf" --loglevel debug
wait_count "$TMP/FL.log" "connected \\(capability" 2 10
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$FL_PORT" --timeout 30000 --nest "wait:$TMP/fl.go||.qgate.ping[]" \
    "all-partial:fan:callback cb %p" > "$TMP/fl.out" 2>&1 & fl=$!
wait_line "$TMP/FL.log" "its callback waits: .* answers another part's first" 20
second=$(sed -n 's/.*w 127\.0\.0\.1:\([0-9]*\): its callback waits.*/\1/p' "$TMP/FL.log" | head -n 1)
if [ "$second" = "$FA_PORT" ]; then first=$FB_PORT; kill -9 "$FB_PID"; else first=$FA_PORT; kill -9 "$FA_PID"; fi
wait_line "$TMP/FL.log" "w 127\\.0\\.0\\.1:$first: connection closed" 20
touch "$TMP/fl.go"
wait "$fl" || true
expect_lines "$TMP/fl.out" '^nested: 1b$' 2
expect_lines "$TMP/fl.out" "qsend got: cb $second" 1
grep -q "qsend got: cb $first" "$TMP/fl.out" && fail "the lost worker's answer went to the other: $(cat "$TMP/fl.out")"
pass "a .qgate.all's worker lost while the client is in its callback: the other's callback waits for that answer; each answer where it belongs"

# --- counted as the requests they are: a .qgate.all answered with a q error is one of
# .qgate.totals[]'s errors, and each worker's part is one of its group's (and its own) requests
totals() { timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.totals[]" | awk -F'!' '{ nk = split($1, k, "`"); split($2, v, " ")
               for (i = 2; i <= nk; i++) t[k[i]] = v[i - 1]; print t["requests"], t["ok"], t["errors"] }'; }
pools() { timeout --foreground 10 "$BIN/qsend" -g "$G" ".qgate.pools[]" | awk -F' [|] ,' '{ print $10, $11 }'; }
read -r r0 ok0 e0 <<< "$(totals)"
read -r s0 pe0 <<< "$(pools)"
q "all:main:err boom3" "all:main:echo z"
read -r r1 ok1 e1 <<< "$(totals)"
read -r s1 pe1 <<< "$(pools)"
# between the two: the first totals (ok), the pools (ok), the two .qgate.all (an error, an ok)
[ "$((r1 - r0)) $((ok1 - ok0)) $((e1 - e0))" = "4 3 1" ] || fail "totals moved by $((r1 - r0)) $((ok1 - ok0)) $((e1 - e0)) (requests ok errors), want 4 3 1"
[ "$((s1 - s0)) $((pe1 - pe0))" = "8 4" ] || fail "the group's served/errors moved by $((s1 - s0))/$((pe1 - pe0)), want 8/4"
pass "a .qgate.all answered with a q error counts as one in .qgate.totals[]; each part as its worker's request in .qgate.pools[]"

# --- the 4th item read as q reads it: `partial, `list`partial; a query of any size ----------
# (`partial answers `workers`result!(the workers' addresses; what it would answer without it))
q "all-partial:main:echo ab" "all-list-partial:main:echo ab"
WS="\`127.0.0.1:$W1_PORT\`127.0.0.1:$W2_PORT\`127.0.0.1:$W3_PORT\`127.0.0.1:$W4_PORT"
expect_lines "$TMP/q.out" "^\`workers\`result!\($WS;\"abababab\"\)\$" 1
expect_lines "$TMP/q.out" "^\`workers\`result!\($WS;\(\"ab\";\"ab\";\"ab\";\"ab\"\)\)\$" 1
BIG=$(head -c 30000 /dev/zero | tr '\0' y)
for z in "" --compress; do
    rm -f "$TMP/big.bin"
    timeout --foreground 60 "$BIN/qsend" -g "$G" $z --raw "$TMP/big.bin" "all:main:echo $BIG" > "$TMP/q.out" 2>&1 || true
    [ "$(stat -c %s "$TMP/big.bin")" -eq $((8 + 6 + 4 * 30000)) ] && [ "$(tail -c 120000 "$TMP/big.bin" | tr -d y | wc -c)" -eq 0 ] ||
        fail ".qgate.all of a 30 KB query ${z:-plain}: $(head -c 200 "$TMP/q.out")"
done
pass "\`partial and \`list\`partial read; a .qgate.all of a 30 KB query (plain, compressed) runs on every worker, merged"

# --- a worker lost midway: the whole request fails (with `partial, the others answer) ------
timeout --foreground 60 "$BIN/qsend" -g "$G" "all:main:hold fo1" "echo after" > "$TMP/l.out" 2>&1 &
L=$!
for i in 1 2 3 4; do wait_line "$TMP/W$i.log" "hold fo1"; done
timeout --foreground 60 "$BIN/qsend" -g "$G" "all-list-partial:main:hold fo2" > "$TMP/lp.out" 2>&1 & # behind fo1 (if it starts
LP=$!                                                                        # after the kill, on 3 of 4)
kill -9 "$W4_PID"
wait_line "$TMP/l.out" "qgate: worker 127\\.0\\.0\\.1:$W4_PORT lost"
release fo1 "$W1_PORT" "$W2_PORT" "$W3_PORT"
for i in 1 2 3; do wait_line "$TMP/W$i.log" "hold fo2"; done # owed, it runs before "echo after"
release fo2 "$W1_PORT" "$W2_PORT" "$W3_PORT"
wait $L $LP || true
expect_lines "$TMP/l.out" "^'qgate: worker 127\\.0\\.0\\.1:$W4_PORT lost\$" 1
expect_lines "$TMP/l.out" '^"after"$' 1
WS3="\`127.0.0.1:$W1_PORT\`127.0.0.1:$W2_PORT\`127.0.0.1:$W3_PORT"
expect_lines "$TMP/lp.out" "^\`workers\`result!\($WS3;\(\"fo2\";\"fo2\";\"fo2\"\)\)\$" 1
pass "a worker lost midway: 'qgate: worker host:port lost for the whole request; with \`partial the others' replies, naming them"

# --- all or an error: a worker of the group down fails a .qgate.all before anything is sent ---
q "all-list:main:echo x" "all:main:echo y" "all-partial:main:echo z" "echo still"
expect_lines "$TMP/q.out" "^'qgate: group main: 3 of 4 workers up\$" 2
expect_lines "$TMP/q.out" "^\`workers\`result!\($WS3;\"zzz\"\)\$" 1
expect_lines "$TMP/q.out" '^"still"$' 1
grep -qE "echo (x|y)\$" "$TMP/W1.log" "$TMP/W2.log" "$TMP/W3.log" && fail "a .qgate.all refused for a worker down ran on the others"
pass ".qgate.all with 3 of 4 workers up: 'qgate: group main: 3 of 4 workers up, nothing sent; \`partial: the 3 answer, named"

# --- merge_max -----------------------------------------------------------------------------
printf '[gateway]\nbind = 127.0.0.1\nmerge_max = 10000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$W1_PORT" "$W2_PORT" > "$TMP/small.conf"
start_gateway S -c "$TMP/small.conf"
wait_count "$TMP/S.log" "connected \\(capability" 2
G="127.0.0.1:$S_PORT"
q "all:main:rows 1000" "all:main:echo fits"
expect_lines "$TMP/q.out" "^'qgate: merge too large \\(over merge_max, 10000 bytes\\)\$" 1
expect_lines "$TMP/q.out" '^"fitsfits"$' 1
pass "replies over merge_max: 'qgate: merge too large; the next fan-out is served"

# merge_max holds for what the replies stand for: two workers that compress ("text N" is N bytes
# that compress to a few hundred), merge_max 1 MB: 2 x 600 KB is too large however few bytes came
start_worker Z1 --rows 10 --compress
start_worker Z2 --rows 10 --compress
printf '[gateway]\nbind = 127.0.0.1\nmerge_max = 1000000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$Z1_PORT" "$Z2_PORT" > "$TMP/z.conf"
start_gateway Z -c "$TMP/z.conf"
wait_count "$TMP/Z.log" "connected \\(capability" 2
G="127.0.0.1:$Z_PORT"
q "all:main:text 600000" "all:main:echo fits"
expect_lines "$TMP/q.out" "^'qgate: merge too large \\(over merge_max, 1000000 bytes\\)\$" 1
expect_lines "$TMP/q.out" '^"fitsfits"$' 1
timeout --foreground 30 "$BIN/qsend" -g "$G" --raw "$TMP/z.bin" "all:main:text 400000" > /dev/null 2>&1 || true
[ "$(stat -c %s "$TMP/z.bin")" -eq $((8 + 6 + 800000)) ] || fail "2 x 400 KB merged: $(stat -c %s "$TMP/z.bin") bytes"
pass "merge_max checked at the replies' decompressed size: 2 x 600 KB sent compressed is too large, 2 x 400 KB fits"

# ... before hold_max, which may be below it (at 52e6d45 the client was told 'busy' for a merge
# that can never fit); and one over hold_max by itself is too large, not busy (helper round 23a)
printf '[gateway]\nbind = 127.0.0.1\nmerge_max = 1000000\nhold_max = 500000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$Z1_PORT" "$Z2_PORT" > "$TMP/zh.conf"
start_gateway ZH -c "$TMP/zh.conf" --loglevel info
wait_count "$TMP/ZH.log" "connected \\(capability" 2
G="127.0.0.1:$ZH_PORT"
q "all:main:text 600000" "all:main:text 200000" "all:main:echo fits"
expect_lines "$TMP/q.out" "^'qgate: merge too large \\(over merge_max, 1000000 bytes\\)\$" 1
expect_lines "$TMP/q.out" "^'qgate: too large to hold whole \\([0-9]+ bytes, over hold_max, 500000 bytes\\)\$" 1
expect_lines "$TMP/q.out" '^"fitsfits"$' 1
expect_file_has "$TMP/ZH.log" "over hold_max \\(500000 bytes\\) by itself: a .qgate.all's merge of 400028 bytes refused"
# ... and plain parts that pass hold_max together, nothing else held: too large too, not busy (at
# 0e4e1a9 the second part was refused 'busy' for the room the first held: helper round 24a)
printf '[gateway]\nbind = 127.0.0.1\nhold_max = 100000\nmerge_max = 200000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$W1_PORT" "$W2_PORT" > "$TMP/ph.conf"
start_gateway PH -c "$TMP/ph.conf"
wait_count "$TMP/PH.log" "connected \\(capability" 2
G="127.0.0.1:$PH_PORT"
q "all:main:text 60000" "all:main:echo fits"
expect_lines "$TMP/q.out" "^'qgate: too large to hold whole \\(120028 bytes, over hold_max, 100000 bytes\\)\$" 1
expect_file_has "$TMP/PH.log" "over hold_max \\(100000 bytes\\) by itself: a .qgate.all's part of 60014 bytes \\(120028 with the parts before it\\) refused"
expect_lines "$TMP/q.out" '^"fitsfits"$' 1
pass "a merge over merge_max is too large; one over hold_max by itself (its parts together too) too large to hold, not busy"

# --- a reload removes a worker that owes its part of a .qgate.all: the part runs first, then the
# worker goes (it failed the request as 'qgate: worker host:port lost, the part never sent) ------
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' "$W1_PORT" "$W2_PORT" > "$TMP/r.conf"
start_gateway R -c "$TMP/r.conf" --loglevel debug
wait_count "$TMP/R.log" "connected \\(capability" 2
G="127.0.0.1:$R_PORT"
for t in r1 r2; do
    timeout --foreground 60 "$BIN/qsend" -g "$G" "hold $t" > "$TMP/$t.out" 2>&1 &
    eval "P_$t=\$!"
done
wait_any "hold r1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold r2" 10 "$TMP/W1.log" "$TMP/W2.log"
timeout --foreground 60 "$BIN/qsend" -g "$G" "all:main:echo rm" "echo after" > "$TMP/rm.out" 2>&1 &
RM=$!
wait_line "$TMP/R.log" "on the 2 workers of group main up"
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\n' "$W1_PORT" > "$TMP/r.conf"
kill -HUP "$R_PID"
wait_line "$TMP/R.log" "reload: group main: removing worker 127\\.0\\.0\\.1:$W2_PORT"
release r1 "$W1_PORT" "$W2_PORT"
release r2 "$W1_PORT" "$W2_PORT"
wait "$P_r1" "$P_r2" "$RM" || true
expect_lines "$TMP/rm.out" '^"rmrm"$' 1
expect_lines "$TMP/rm.out" '^"after"$' 1
wait_line "$TMP/R.log" "127\\.0\\.0\\.1:$W2_PORT.*connection closed: removed from the configuration"
q "all:main:echo one"
expect_lines "$TMP/q.out" '^"one"$' 1
pass "a reload removes a worker owing its part of a .qgate.all: the part runs, the answer is whole, then the worker goes"

# --- another client's query timing out on a worker that owes a part: the .qgate.all fails saying
# its part was not sent, not as a timeout of its own (it said 'qgate: timeout), nor as the worker
# lost (it said that, of a worker qgate had dropped a connection to, its part never sent) -------
printf '[gateway]\nbind = 127.0.0.1\nquery_timeout = 3000\n[group main]\nworkers = 127.0.0.1:%s\n' "$W1_PORT" > "$TMP/t.conf"
start_gateway T -c "$TMP/t.conf" --loglevel debug
wait_count "$TMP/T.log" "connected \\(capability" 1
G="127.0.0.1:$T_PORT"
timeout --foreground 60 "$BIN/qsend" -g "$G" "hold tq" > "$TMP/tq.out" 2>&1 &
TQ=$!
wait_line "$TMP/W1.log" "hold tq"
timeout --foreground 60 "$BIN/qsend" -g "$G" "all:main:echo fan" > "$TMP/tf.out" 2>&1 &
TF=$!
wait "$TQ" "$TF" || true
release tq "$W1_PORT"
expect_lines "$TMP/tq.out" "^'qgate: timeout \\(127\\.0\\.0\\.1:$W1_PORT sent nothing for 3000 ms\\)\$" 1
expect_lines "$TMP/tf.out" "^'qgate: worker 127\\.0\\.0\\.1:$W1_PORT: its connection was dropped \\(the request it ran sent nothing for query_timeout\\) before this \\.qgate\\.all's part was sent: not run there\$" 1
pass "a .qgate.all whose part waited behind another client's query that timed out: told its part was not sent there, not a timeout of its own"

# --- a drain (SIGTERM) while a .qgate.all runs: its merged reply, made after the signal, is
# written whole before the close (at 82a91bd the drain took it for a publish: 'close, 0 bytes) --
start_worker D1 --rows 10 --defer 1:300
start_worker D2 --rows 10 --defer 1:300
printf '[gateway]\nbind = 127.0.0.1\ndrain_timeout = 600000\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$D1_PORT" "$D2_PORT" > "$TMP/d.conf"
start_gateway DG -c "$TMP/d.conf"
wait_count "$TMP/DG.log" "connected \\(capability" 2
rm -f "$TMP/d.raw"
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$DG_PORT" --raw "$TMP/d.raw" "all:main:text 1000000" > /dev/null 2>&1 &
DQ=$!
wait_line "$TMP/D1.log" "defer: sync request #1 "
wait_line "$TMP/D2.log" "defer: sync request #1 "
kill -TERM "$DG_PID"
wait_exit "$DG_PID" 60 || fail "the drain did not end"
[ "$EXIT_STATUS" = 0 ] || fail "exit status $EXIT_STATUS after the drain"
wait "$DQ" || true
[ "$(stat -c %s "$TMP/d.raw" 2> /dev/null || echo 0)" = 2000014 ] || fail "the merged reply came as $(stat -c %s "$TMP/d.raw" 2> /dev/null || echo 0) bytes, want 2000014"
pass "a drain while a .qgate.all runs: its 2 MB merged reply, made after SIGTERM, written whole, then the close"

# --- `partial: a worker whose part is done is removed by a reload before the last part ends: the
# answer names it (at 5b2c56c its address was read from the freed worker: ASan's use-after-free,
# the gateway gone; helper round 33d) -----------------------------------------------------------
start_worker R1 --rows 10
start_worker R2 --rows 10
rconf() { printf '[gateway]\nbind = 127.0.0.1\n[group fan]\nworkers = %s\n' "$1" > "$TMP/r.conf"; }
rconf "127.0.0.1:$R1_PORT,127.0.0.1:$R2_PORT"
start_gateway RG -c "$TMP/r.conf" --loglevel debug
wait_count "$TMP/RG.log" "connected \\(capability" 2
timeout --foreground 60 "$BIN/qsend" -g "127.0.0.1:$RG_PORT" "all-partial:fan:hold rm1" > "$TMP/rm.out" 2>&1 &
RM=$!
wait_line "$TMP/R1.log" "hold rm1"
wait_line "$TMP/R2.log" "hold rm1"
release rm1 "$R1_PORT"                   # R1's part done, R2's running
wait_line "$TMP/RG.log" "w 127\\.0\\.0\\.1:$R1_PORT: state BUSY -> IDLE" # (its reply taken)
rconf "127.0.0.1:$R2_PORT"
kill -HUP "$RG_PID"
wait_line "$TMP/RG.log" "w 127\\.0\\.0\\.1:$R1_PORT: connection closed: removed from the configuration"
wait_line "$TMP/RG.log" "reload: done"
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$RG_PORT" ".qgate.ping[]" > "$TMP/q.out" 2>&1 || true # (a loop
expect_lines "$TMP/q.out" '^1b$' 1                                 # iteration after: R1 freed)
kill -9 "$R2_PID"                        # the last part ends: lost
wait "$RM" || true
expect_lines "$TMP/rm.out" "^\`workers\`result!\(,\`127\\.0\\.0\\.1:$R1_PORT;\"rm1\"\)\$" 1
grep -q AddressSanitizer "$TMP/RG.log" && fail "a sanitizer report: $(grep -A5 AddressSanitizer "$TMP/RG.log" | head -8)"
pass "\`partial: a worker whose part was done, removed by a reload before the last part ended (lost): the answer names it"

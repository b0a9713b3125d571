#!/usr/bin/env bash
# Per-query routing: (`.qgate.on; `group; query) runs query on a worker of group, answered as
# if it had been sent plainly; neg[h] the same without a reply; users limited to groups by
# users = route only to groups that admit them; in order with everything else a client sends.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 1000
start_worker W2 --rows 1000
start_worker W3 --rows 1000
start_worker W4 --rows 1000
start_worker W5 --rows 1000
cat > "$TMP/gw.conf" <<EOF
[gateway]
bind = 127.0.0.1
[group main]
workers = 127.0.0.1:$W1_PORT
[group hdb]
workers = 127.0.0.1:$W2_PORT
[group priv]
workers = 127.0.0.1:$W3_PORT
users = bob
[group pair]
workers = 127.0.0.1:$W4_PORT,127.0.0.1:$W5_PORT
EOF
start_gateway G -c "$TMP/gw.conf" --loglevel debug
wait_count "$TMP/G.log" "connected \\(capability" 5
G="127.0.0.1:$G_PORT"

# --- a sync route runs on the group named, a plain request on the client's own ---------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x "on:hdb:k:1" "k" "on:hdb:k" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"1"$' 2
expect_lines "$TMP/q.out" "^'k\$" 1          # main's worker has no k
expect_file_has "$TMP/W2.log" "set k$"
grep -q "set k$" "$TMP/W1.log" && fail "the routed assignment ran on main's worker"
grep -q "qgate" "$TMP/W2.log" && fail "hdb's worker saw the route's wrapper, not the query alone"
expect_file_has "$TMP/G.log" "c1 .*: request 0: routed to group hdb"
pass "(\`.qgate.on; \`hdb; query): query alone ran on hdb's worker, answered as if sent plainly"

# --- async: neg[h] the same, no reply; in order with what follows ----------------------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x "neg:on:hdb:j:5" "on:hdb:j" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"5"$' 1
pass "neg[h] (\`.qgate.on; \`hdb; query) runs without a reply, before what follows"

# --- replies in the order of the requests, whatever group runs each -------------------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x --pipeline "on:hdb:sleep 200" "echo two" "on:hdb:echo three" "echo four" \
    > "$TMP/q.out" 2>&1 || true
[ "$(tr '\n' ' ' < "$TMP/q.out")" = '200 "two" "three" "four" ' ] || fail "replies out of order: $(cat "$TMP/q.out")"
pass "pipelined requests over two groups: replies in request order"

# --- unknown groups, users limited to their groups ----------------------------------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x "on:nosuch:echo x" "on:priv:echo x" "echo still here" \
    > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^'qgate: no group nosuch\$" 1
expect_lines "$TMP/q.out" "^'qgate: access: group priv does not admit user 'alice'\$" 1
expect_lines "$TMP/q.out" '^"still here"$' 1
timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:x "on:priv:echo b" "on:main:echo m" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"b"$' 1
expect_lines "$TMP/q.out" "^'qgate: access: group main does not admit user 'bob'\$" 1
timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x "neg:on:nosuch:x:1" "echo after" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"after"$' 1
# "not routed" is logged once a second at most: sent again until it is
async_logged() {
    timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:x "neg:on:nosuch:x:1" "echo after" > "$TMP/q.out" 2>&1 || true
    grep -qE "request 0 not routed \\(async: dropped\\)" "$TMP/G.log"; }
wait_for 30 "an async route to nowhere, logged" async_logged
pass "'qgate: no group G; users listed for a group route only there (others not to it); an async route to nowhere is dropped, logged"

# --- routes are read as q reads them: a malformed one never reaches a worker ------------------
# (`.qgate.all; `pair; QUERY; "AB\xf5list\x00"): a 4th item, a string, whose last bytes are
# those of `list (f5 "list" 00); cut off there, the rest would reach both workers malformed and
# each would close, as q does. exploit_msg FILE QUERY: that message in FILE (qsend bytes:FILE)
exploit_msg() {
    local q=$2
    { printf '%b' "\\x00\\x00$(le32 4)\\xf5.qgate.all\\x00\\xf5pair\\x00\\x0a\\x00$(le32 ${#q})"
      printf '%s' "$q"
      printf '%b' "\\x0a\\x00$(le32 8)AB\\xf5list\\x00"; } > "$1.body"
    { printf '%b' "\\x01\\x01\\x00\\x00$(le32 $(($(stat -c %s "$1.body") + 8)))"; cat "$1.body"; } > "$1"
}
# pair_intact: both of pair's workers answer, and neither was ever lost or sent a bad message
pair_intact() {
    q "all-list:pair:echo both"
    expect_lines "$TMP/q.out" '^\("both";"both"\)$' 1
    grep -E "127\.0\.0\.1:($W4_PORT|$W5_PORT).*connection closed" "$TMP/G.log" && fail "a worker of pair was lost"
    grep -h "badmsg" "$TMP/W4.log" "$TMP/W5.log" && fail "a worker of pair was sent a bad message"
    return 0
}
BAD_ALL="^'qgate: bad route: the 4th item is not \`list, \`partial or \`list\`partial; it is \\(\`.qgate.all; \`group; query\\)"
exploit_msg "$TMP/exploit.bin" "echo x"
q "bytes:$TMP/exploit.bin" "echo still here"
expect_lines "$TMP/q.out" "$BAD_ALL" 1
expect_lines "$TMP/q.out" '^"still here"$' 1
pair_intact
q "neg:bytes:$TMP/exploit.bin" "echo after"     # async: dropped, logged
expect_lines "$TMP/q.out" '^"after"$' 1
exploit_logged() { q "neg:bytes:$TMP/exploit.bin" "echo after"; grep -qE "not routed \\(async: dropped\\): bad route: the 4th item is not" "$TMP/G.log"; }
wait_for 30 "the async malformed route, logged" exploit_logged
pair_intact
pass "a .qgate.all whose 4th item is a string ending in the bytes of \`list: 'qgate: bad route (async: dropped, logged); both workers still up"

# --- routes over 16 KiB (read on a reader): sync, async, .qgate.all, compressed ---------------
xs() { head -c "$1" /dev/zero | tr '\0' x; }
BIG=$(xs 20000)
# reply_is FILE N: FILE (qsend --raw) holds one reply, the string of N x's
reply_is() {
    [ "$(stat -c %s "$1")" -eq $((8 + 6 + $2)) ] || fail "$1: $(stat -c %s "$1") bytes, not a string of $2"
    [ "$(tail -c "$2" "$1")" = "$(xs "$2")" ] || fail "$1: not the string of $2 x's"
}
timeout --foreground 60 "$BIN/qsend" -g "$G" --raw "$TMP/r1.bin" "on:hdb:echo $BIG" > "$TMP/q.out" 2>&1 || true
reply_is "$TMP/r1.bin" 20000
expect_file_has "$TMP/W2.log" "echo x{60}$"
pass "a sync (\`.qgate.on; \`hdb; query) of 20 KB: run on hdb's worker, answered"

# neg[h](`.qgate.on; `hdb; "big:X"), X 24,000 bytes: set on hdb's worker from the query alone
# (with the wrapper, or on main's worker, it would set nothing)
timeout --foreground 60 "$BIN/qsend" -g "$G" --raw "$TMP/r2.bin" "neg:on:hdb:big:$(xs 24000)" "on:hdb:big" > "$TMP/q.out" 2>&1 || true
reply_is "$TMP/r2.bin" 24000
expect_file_has "$TMP/W2.log" "set big$"
grep -q "async message" "$TMP/W1.log" && fail "main's worker got an async message: the route went to the client's own group"
pass "an async (\`.qgate.on; \`hdb; query) of 24 KB: on hdb's worker, the query alone"

timeout --foreground 60 "$BIN/qsend" -g "$G" --raw "$TMP/r3.bin" "all:pair:echo $BIG" "all-list:pair:echo $BIG" > "$TMP/q.out" 2>&1 || true
[ "$(stat -c %s "$TMP/r3.bin")" -eq $((8 + 6 + 40000 + 8 + 6 + 2 * (6 + 20000))) ] ||
    fail "(\`.qgate.all; \`pair; 20 KB query): $(stat -c %s "$TMP/r3.bin") bytes of replies: $(head -c 300 "$TMP/q.out")"
head -c $((8 + 6 + 40000)) "$TMP/r3.bin" > "$TMP/r3a.bin"
reply_is "$TMP/r3a.bin" 40000
pass "(\`.qgate.all; \`pair; query) of 20 KB, merged and listed"

# compressed (as a remote q sends a large message): routed, and the exploit refused likewise
timeout --foreground 60 "$BIN/qsend" -g "$G" --compress --raw "$TMP/r4.bin" "on:hdb:echo $BIG" "neg:on:hdb:bigz:$(xs 24000)" \
    "on:hdb:bigz" "all:pair:echo $BIG" > "$TMP/q.out" 2> "$TMP/q.err" || true
expect_lines "$TMP/q.err" "^sent: [0-9]+ bytes compressed" 3 # all but the short on:hdb:bigz
[ "$(stat -c %s "$TMP/r4.bin")" -eq $((3 * (8 + 6) + 20000 + 24000 + 40000)) ] || fail "compressed routes: $(head -c 300 "$TMP/q.out")"
head -c $((8 + 6 + 20000 + 8 + 6 + 24000)) "$TMP/r4.bin" | tail -c $((8 + 6 + 24000)) > "$TMP/r4b.bin"
reply_is "$TMP/r4b.bin" 24000
exploit_msg "$TMP/exploit-big.bin" "echo $BIG"
timeout --foreground 60 "$BIN/qsend" -g "$G" --compress "bytes:$TMP/exploit-big.bin" "neg:bytes:$TMP/exploit-big.bin" "echo last" \
    > "$TMP/q.out" 2> "$TMP/q.err" || true
expect_lines "$TMP/q.err" "^sent: [0-9]+ bytes compressed" 2
expect_lines "$TMP/q.out" "$BAD_ALL" 1
expect_lines "$TMP/q.out" '^"last"$' 1
q "bytes:$TMP/exploit-big.bin"
expect_lines "$TMP/q.out" "$BAD_ALL" 1
pair_intact
pass "compressed routes of 20 KB (sync, async, .qgate.all) routed; the exploit of 20 KB, compressed or not: 'qgate: bad route"

# --- a reload moves connected users as the file says: what bob sends after it goes to the group
# the file sends him to now (taken off priv: main; then priv renamed vault: vault), what he sent
# before ran where it was sent; a group the file no longer has is not where users go (before:
# bob's plain requests went on to priv's worker after the reload took him off it, and a renamed
# group's users to the old one) ---------------------------------------------------------------
rm -f "$TMP/go1" "$TMP/go2"
timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:x "echo b-before" "wait:$TMP/go1" "echo b-between" "wait:$TMP/go2" \
    "echo b-after" "on:priv:echo b-stale" > "$TMP/b.out" 2>&1 & bp=$!
wait_line "$TMP/W3.log" "echo b-before" 10
sed -i 's/^users = bob$/users = carol/' "$TMP/gw.conf"
kill -HUP "$G_PID"
wait_count "$TMP/G.log" "reload: done" 1 10
expect_file_has "$TMP/G.log" "reload: group main from now on \\(was priv\\)"
touch "$TMP/go1"
wait_line "$TMP/W1.log" "echo b-between" 10
sed -i 's/^\[group priv\]$/[group vault]/; s/^users = carol$/users = bob/' "$TMP/gw.conf"
kill -HUP "$G_PID"
wait_count "$TMP/G.log" "reload: done" 2 10
expect_file_has "$TMP/G.log" "reload: group priv is no longer configured"
touch "$TMP/go2"
wait "$bp"
expect_lines "$TMP/b.out" '^"b-(before|between|after)"$' 3
expect_lines "$TMP/b.out" "^'qgate: access: group priv does not admit user 'bob'\$" 1 # (it kept carol)
grep -q "echo b-after" "$TMP/W3.log" || fail "bob's request after the rename did not run on vault's worker"
grep -c "echo b-" "$TMP/W3.log" | grep -qx 2 || fail "W3: $(grep "echo b-" "$TMP/W3.log")"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u carol:x "on:priv:echo c-stale" > "$TMP/c.out" 2>&1 # (reached by name)
expect_lines "$TMP/c.out" '^"c-stale"$' 1
timeout --foreground 10 "$BIN/qsend" -g "$G" -u bob:x "echo b-new" > /dev/null # (a new connection: vault, not priv)
grep -q "echo b-new" "$TMP/W3.log" || fail "bob's new connection not on vault's worker"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:x "echo a-new" > /dev/null
grep -q "echo a-new" "$TMP/W1.log" || fail "alice no longer on main"
pass "a reload moves connected users to the groups the file sends them to now (a session excepted); a group no longer in the file gets no one by default"

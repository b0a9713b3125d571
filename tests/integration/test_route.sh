#!/usr/bin/env bash
# Per-query routing: (`.qgate.on; `group; query) runs query on a worker of group, answered as
# if it had been sent plainly; neg[h] the same without a reply; users limited to groups by
# users = route only to groups that admit them; in order with everything else a client sends.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 1000
start_worker W2 --rows 1000
start_worker W3 --rows 1000
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
EOF
start_gateway G -c "$TMP/gw.conf" --loglevel debug
wait_count "$TMP/G.log" "connected \\(capability" 3
G="127.0.0.1:$G_PORT"

# --- a sync route runs on the group named, a plain request on the client's own ---------------
timeout 60 "$BIN/qsend" -g "$G" -u alice:x "on:hdb:k:1" "k" "on:hdb:k" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"1"$' 2
expect_lines "$TMP/q.out" "^'k\$" 1          # main's worker has no k
expect_file_has "$TMP/W2.log" "set k$"
grep -q "set k$" "$TMP/W1.log" && fail "the routed assignment ran on main's worker"
grep -q "qgate" "$TMP/W2.log" && fail "hdb's worker saw the route's wrapper, not the query alone"
expect_file_has "$TMP/G.log" "c1 .*: request 0: routed to group hdb"
pass "(\`.qgate.on; \`hdb; query): query alone ran on hdb's worker, answered as if sent plainly"

# --- async: neg[h] the same, no reply; in order with what follows ----------------------------
timeout 60 "$BIN/qsend" -g "$G" -u alice:x "neg:on:hdb:j:5" "on:hdb:j" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"5"$' 1
pass "neg[h] (\`.qgate.on; \`hdb; query) runs without a reply, before what follows"

# --- replies in the order of the requests, whatever group runs each -------------------------
timeout 60 "$BIN/qsend" -g "$G" -u alice:x --pipeline "on:hdb:sleep 200" "echo two" "on:hdb:echo three" "echo four" \
    > "$TMP/q.out" 2>&1 || true
[ "$(tr '\n' ' ' < "$TMP/q.out")" = '200 "two" "three" "four" ' ] || fail "replies out of order: $(cat "$TMP/q.out")"
pass "pipelined requests over two groups: replies in request order"

# --- unknown groups, users limited to their groups ----------------------------------------
timeout 60 "$BIN/qsend" -g "$G" -u alice:x "on:nosuch:echo x" "on:priv:echo x" "echo still here" \
    > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^'qgate: no group nosuch\$" 1
expect_lines "$TMP/q.out" "^'qgate: access: group priv does not admit user 'alice'\$" 1
expect_lines "$TMP/q.out" '^"still here"$' 1
timeout 60 "$BIN/qsend" -g "$G" -u bob:x "on:priv:echo b" "on:main:echo m" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"b"$' 1
expect_lines "$TMP/q.out" "^'qgate: access: group main does not admit user 'bob'\$" 1
timeout 60 "$BIN/qsend" -g "$G" -u alice:x "neg:on:nosuch:x:1" "echo after" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"after"$' 1
expect_file_has "$TMP/G.log" "request 0 not routed \\(async: dropped\\)"
pass "'qgate: no group G; users listed for a group route only there (others not to it); an async route to nowhere is dropped, logged"

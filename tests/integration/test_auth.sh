#!/usr/bin/env bash
# Authentication beyond the handshake: per-user max_conns and max_inflight from the users
# file, and gateway commands that change state or show other users only for admins.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 100
start_worker W2 --rows 100
printf 'alice:%s\tadmin=1\nbob:bobpw\tmax_conns=2,max_inflight=1\ncarol:%s\n' \
    "$(printf 'wonder' | sha1sum | cut -d' ' -f1)" "$(printf 'carolpw' | md5sum | cut -d' ' -f1)" > "$TMP/users"
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' "$TMP/users" "$W1_PORT" "$W2_PORT" > "$TMP/gw.conf"
start_gateway GW -c "$TMP/gw.conf" --loglevel debug
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10

# --- max_conns: the third connection of bob is closed without a byte -----------------------
"$BIN/qsend" -g "$G" -u bob:bobpw "hold b1" > "$TMP/b1.out" & b1=$!
"$BIN/qsend" -g "$G" -u bob:bobpw "hold b2" > "$TMP/b2.out" & b2=$!
wait_count "$TMP/GW.log" " bob: request 0: sync" 2 10    # both connected, both asked
timeout --foreground 5 "$BIN/qsend" -g "$G" -u bob:bobpw "echo third" > "$TMP/b3.out" || true
expect_lines "$TMP/b3.out" "^'access\$" 1
expect_file_has "$TMP/GW.log" "user 'bob' already has 2 connections \\(max_conns\\): refused"

# --- max_inflight: bob's second request waits while carol's runs on the other worker -------
timeout --foreground 10 "$BIN/qsend" -g "$G" -u carol:carolpw "sleep 300" > "$TMP/c1.out"
expect_lines "$TMP/c1.out" '^300$' 1
timeout --foreground 5 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.clients[]" > "$TMP/cl.out" || true
# the two bob clients: one running, one with its request held back (requests 1, running 0)
expect_file_has "$TMP/cl.out" "^table\\[3\\] \`id \`user \`peer \`group \`state \`requests \`running"
grep -q '`bob`bob' "$TMP/cl.out" || grep -q '`bob`alice`bob\|`alice`bob`bob\|`bob`alice' "$TMP/cl.out" || fail "clients table: $(cat "$TMP/cl.out")"
running=$(awk -F' [|] ' '/^table/ {print $8}' "$TMP/cl.out") # the column running
[ "$(echo "$running" | tr ' ' '\n' | grep -c 1)" -eq 1 ] || fail "exactly one bob request should run: $(cat "$TMP/cl.out")"
held=$(grep -h -o "hold b[12]" "$TMP/W1.log" "$TMP/W2.log")
[ "$(echo "$held" | wc -l)" -eq 1 ] || fail "both of bob's requests reached a worker: $held"
release "${held#hold }" "$W1_PORT" "$W2_PORT"                   # the first ends: the second runs
other=$([ "${held#hold }" = b1 ] && echo b2 || echo b1)
wait_any "hold $other" 10 "$TMP/W1.log" "$TMP/W2.log"
release "$other" "$W1_PORT" "$W2_PORT"
wait "$b1" "$b2"
expect_lines "$TMP/b1.out" '^"b1"$' 1
expect_lines "$TMP/b2.out" '^"b2"$' 1
pass "max_conns closes the extra connection; max_inflight holds a user's second request back"

# --- admin-only commands ---------------------------------------------------------------------
timeout --foreground 5 "$BIN/qsend" -g "$G" -u carol:carolpw ".qgate.reload[]" ".qgate.clients[]" ".qgate.disconnect[1]" ".qgate.ping[]" > "$TMP/q.out" || true
expect_lines "$TMP/q.out" "^'qgate: access \\(admin only\\): " 3
expect_lines "$TMP/q.out" '^1b$' 1
timeout --foreground 5 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.reload[]" > "$TMP/q.out" || true
expect_lines "$TMP/q.out" '^1b$' 1
expect_file_has "$TMP/GW.log" "qgate.reload\\[\\] by admin alice"
# alice disconnects a waiting client of carol's by its id
"$BIN/qsend" -g "$G" -u carol:carolpw "hold c2" > "$TMP/c2.out" & c2=$!
wait_any "hold c2" 10 "$TMP/W1.log" "$TMP/W2.log"
timeout --foreground 5 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.clients[]" > "$TMP/cl.out" || true
# columns after " | ": ids, then users; carol's id is at her position among the users
cid=$(awk -F' [|] ' '{ n = split($2, ids, " "); split(substr($3, 2), us, "`"); for (i = 1; i <= n; i++) if (us[i] == "carol") print ids[i] }' "$TMP/cl.out")
[ -n "$cid" ] || fail "no client of carol's in: $(cat "$TMP/cl.out")"
timeout --foreground 5 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.disconnect[$cid]" ".qgate.disconnect[9999]" > "$TMP/q.out" || true
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" "^'qgate: no client 9999\$" 1
wait "$c2" || true
expect_lines "$TMP/c2.out" "^'close\$" 1
release c2 "$W1_PORT" "$W2_PORT"
expect_file_has "$TMP/GW.log" "disconnecting client $cid .* as admin alice asked"
pass "reload, clients and disconnect only for admins"

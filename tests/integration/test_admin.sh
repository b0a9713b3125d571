#!/usr/bin/env bash
# Admin where it belongs (issue 23): admin_from limits where an admin's commands are accepted
# (here q's Unix socket only: the same admin over TCP is refused, and nothing of it reaches a
# worker); a users-file monitor (monitor=1, HAProxy's health check) runs gateway commands and
# nothing else, its connections closing at debug, its requests left out of the access log
# (access_log_monitors = 0); the access log names each request's query (access_log_query).
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 1000
printf 'alice:pw\tadmin=1\nmon:pw\tmonitor=1\nbob:pw\njos\303\251:pw\n' > "$TMP/users"
A="$TMP/access.log"
cat > "$TMP/gw.conf" <<CONF
[gateway]
bind = 127.0.0.1
users_file = $TMP/users
admin_from = unix
access_log = $A
access_log_monitors = 0
access_log_query = text
loglevel = debug
[group main]
workers = 127.0.0.1:$W1_PORT
CONF
start_gateway GW -c "$TMP/gw.conf"
wait_line "$TMP/GW.log" "connected \\(capability 3\\)" 10
G="127.0.0.1:$GW_PORT"

# --- admin_from = unix ---------------------------------------------------------------------------
timeout --foreground 30 "$BIN/qsend" -g "$G" -u alice:pw ".qgate.pause[\`main]" ".qgate.clients[]" ".qgate.pools[]" "echo hi" > "$TMP/tcp.out" 2>&1 || true
expect_lines "$TMP/tcp.out" "^'qgate: access \\(admin commands are accepted only from unix\\): \\.qgate\\.(pause|clients)" 2
expect_lines "$TMP/tcp.out" '^table\[1\] `group `paused' 1 # a command for anyone: answered
expect_lines "$TMP/tcp.out" '^"hi"$' 1
wait_line "$TMP/GW.log" "refused \\.qgate\\.pause\\[\`main\\]: 127\\.0\\.0\\.1:[0-9]+ is not in admin_from" 10
timeout --foreground 30 "$BIN/qsend" -g "unix:$GW_PORT" -u alice:pw ".qgate.pause[\`main]" ".qgate.resume[\`main]" > "$TMP/uds.out" 2>&1 || true
expect_lines "$TMP/uds.out" '^1b$' 2
grep -q "qgate" "$TMP/W1.log" && fail "a gateway command reached the worker"
pass "admin_from = unix: the admin's commands refused over TCP (a command for anyone, and a query, answered), accepted over q's Unix socket"

# --- a monitor: gateway commands only -------------------------------------------------------------
timeout --foreground 30 "$BIN/qsend" -g "$G" -u mon:pw ".qgate.ping[]" "echo no" "on:main:echo no" ".qgate.pools[]" ".qgate.kill[1]" \
    > "$TMP/mon.out" 2>&1 || true
expect_lines "$TMP/mon.out" '^1b$' 1
expect_lines "$TMP/mon.out" "^'qgate: access: user mon is a monitor \\(gateway commands only\\)$" 2
expect_lines "$TMP/mon.out" '^table\[1\] `group `paused' 1
expect_lines "$TMP/mon.out" "^'qgate: access \\(admin only\\): \\.qgate\\.kill" 1
timeout --foreground 10 "$BIN/qsend" -g "$G" -u mon:pw --async "neg:echo async" ".qgate.ping[]" > /dev/null 2>&1 || true
grep -qE "echo (no|async)" "$TMP/W1.log" && fail "a monitor's request reached the worker: $(cat "$TMP/W1.log")"
wait_line "$TMP/GW.log" "debug c[0-9]+ 127\\.0\\.0\\.1:[0-9]+ mon: closed: client closed the connection" 10
grep -qE "info  c[0-9]+ [^ ]+ mon: closed" "$TMP/GW.log" && fail "a monitor's close logged at info"
pass "a monitor (monitor=1): .qgate.ping[] and .qgate.pools[] answered, anything for a worker refused (sync told, async dropped), admin commands refused; its closes at debug"

# --- the access log: monitors left out, each request's query named ---------------------------------
timeout --foreground 30 "$BIN/qsend" -g "$G" -u bob:pw "echo x" "echo x" > /dev/null 2>&1 || true
wait_count "$A" " user=bob .*outcome=ok" 2 10
expect_lines "$A" " user=bob .*outcome=ok query=\"echo x\"\$" 2
expect_lines "$A" " user=alice .*outcome=ok query=\"echo hi\"\$" 1
grep -q " user=mon " "$A" && fail "the monitor's requests are in the access log: $(grep ' user=mon ' "$A")"
pass "the access log: the query's first bytes (access_log_query = text); no line for the monitor's requests (access_log_monitors = 0)"

# --- a q error's bytes that are not UTF-8: escaped, in the access log and the log; UTF-8 kept ------
timeout --foreground 30 "$BIN/qsend" -g "$G" -u bob:pw $'err caf\xc3\xa9\xff' > /dev/null 2>&1 || true
wait_count "$A" " user=bob .*outcome=error" 1 10
expect_lines "$A" " user=bob .*outcome=error error=\"caf$(printf '\xc3\xa9')\\\\xff\" query=" 1
python3 -c 'import sys; [l.decode("utf-8") for l in open(sys.argv[1], "rb")]; [l.decode("utf-8") for l in open(sys.argv[2], "rb")]' "$A" "$TMP/GW.log" ||
    fail "a line that is not UTF-8"
# ... and a user name in UTF-8 is kept as it is, in both (at 6507bd2 each byte of it was ?)
timeout --foreground 30 "$BIN/qsend" -g "$G" -u $'jos\xc3\xa9:pw' "echo hola" > /dev/null 2>&1 || true
wait_count "$A" " user=\"jos$(printf '\xc3\xa9')\" .*outcome=ok" 1 10
expect_file_has "$TMP/GW.log" "c[0-9]+ [^ ]+ jos$(printf '\xc3\xa9'): "
python3 -c 'import sys; [l.decode("utf-8") for l in open(sys.argv[1], "rb")]; [l.decode("utf-8") for l in open(sys.argv[2], "rb")]' "$A" "$TMP/GW.log" ||
    fail "a line that is not UTF-8"
pass "a q error's bytes that are not UTF-8: \\xNN in the access log, ? in the log; each line UTF-8; a user name in UTF-8 kept"

# --- a reload that takes a user's rights away: what the user sent and has not run yet has lost
# them too (helper round 35c: at 041cc8a an admin's .qgate.disconnect queued behind a query ran
# as admin after the reload took the right: what the user sent was judged by the rights it came
# with, as 8b099bc had made it, so that a pause and resume sent together would not be split;
# now both are refused, as a q checking rights in .z.pg would; a new monitor's queries sent before
# still run, as 8b099bc made them) -----------------------------------------------------------------
printf 'boss:pw\tadmin=1\nsam:pw\n' > "$TMP/users2"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\nloglevel = debug\n[group main]\nworkers = 127.0.0.1:%s\n' \
    "$TMP/users2" "$W1_PORT" > "$TMP/rg.conf"
start_gateway RG -c "$TMP/rg.conf"
wait_line "$TMP/RG.log" "connected \\(capability 3\\)" 10
G="127.0.0.1:$RG_PORT"
timeout --foreground 60 "$BIN/qsend" -g "$G" -u boss:pw --pipeline "hold rg1" ".qgate.pause[\`main]" ".qgate.resume[\`main]" > "$TMP/boss.out" 2>&1 & pb=$!
wait_line "$TMP/W1.log" "hold rg1" 10
wait_line "$TMP/RG.log" "boss: request 2: sync" 10
timeout --foreground 60 "$BIN/qsend" -g "$G" -u sam:pw --pipeline "echo sam1" "echo sam2" > "$TMP/sam.out" 2>&1 & ps=$!
wait_line "$TMP/RG.log" "sam: request 1: sync" 10
printf 'boss:pw\nsam:pw\tmonitor=1\n' > "$TMP/users2"
kill -HUP "$RG_PID"
wait_line "$TMP/RG.log" "reload: done" 10
expect_file_has "$TMP/RG.log" "reload: user boss is no longer an admin"
release rg1 "$W1_PORT"
wait "$pb" "$ps" || true
expect_lines "$TMP/boss.out" '^"rg1"$' 1
expect_lines "$TMP/boss.out" "^'qgate: access \\(admin only\\): \\.qgate\\.(pause|resume)\\[\`main\\]$" 2
[ "$(tr '\n' '|' < "$TMP/sam.out")" = '"sam1"|"sam2"|' ] || fail "the user's requests sent before the reload: $(cat "$TMP/sam.out")"
timeout --foreground 30 "$BIN/qsend" -g "$G" -u boss:pw ".qgate.pause[\`main]" > "$TMP/boss2.out" 2>&1 || true
expect_lines "$TMP/boss2.out" "^'qgate: access \\(admin only\\): \\.qgate\\.pause" 1
timeout --foreground 30 "$BIN/qsend" -g "$G" -u sam:pw "echo sam3" > "$TMP/sam2.out" 2>&1 || true
expect_lines "$TMP/sam2.out" "^'qgate: access: user sam is a monitor" 1
# ... and one that gives them back: said (helper round 40c: at 1bf1093 only the loss was logged)
printf 'boss:pw\tadmin=1\nsam:pw\tmonitor=1\n' > "$TMP/users2"
kill -HUP "$RG_PID"
wait_count "$TMP/RG.log" "reload: done" 2 10
expect_file_has "$TMP/RG.log" "reload: user boss is an admin now"
pass "a reload that takes an admin's rights away: its commands sent and not yet run are refused, as what it sends after; a new monitor's queries sent before run; given back, said"

# --- a user removed from the users file: its connections stay, its limits as they were (at
# 3929a8f they were lifted, unsaid: max_inflight 1 let both of its waiting requests run) ----------
start_worker W2 --rows 1000
printf 'boss:pw\tadmin=1\nlim:pw\tmax_inflight=1\n' > "$TMP/users3"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\nloglevel = debug\n[group main]\nworkers = 127.0.0.1:%s, 127.0.0.1:%s\n' \
    "$TMP/users3" "$W1_PORT" "$W2_PORT" > "$TMP/lm.conf"
start_gateway LM -c "$TMP/lm.conf"
wait_count "$TMP/LM.log" "connected \\(capability 3\\)" 2 10
G="127.0.0.1:$LM_PORT"
timeout --foreground 60 "$BIN/qsend" -g "$G" -u lim:pw "hold lm1" > "$TMP/lm1.out" 2>&1 & p1=$!
wait_any "hold lm1" 10 "$TMP/W1.log" "$TMP/W2.log"
timeout --foreground 60 "$BIN/qsend" -g "$G" -u lim:pw "echo lm2" > "$TMP/lm2.out" 2>&1 & p2=$!
wait_count "$TMP/LM.log" "lim: request 0: sync" 2 10
printf 'boss:pw\tadmin=1\n' > "$TMP/users3"
kill -HUP "$LM_PID"
wait_line "$TMP/LM.log" "reload: done" 10
expect_file_has "$TMP/LM.log" "reload: user lim is no longer in the users file: its 2 connections stay until closed"
timeout --foreground 30 "$BIN/qsend" -g "$G" -u boss:pw ".qgate.pools[]" > "$TMP/lm.pools" 2>&1 || true
grep -qE "\\| ,\`main \\| ,0b \\| ,1 \\| ,1 \\| ,1 \\|" "$TMP/lm.pools" || fail "after the reload, lim's second request: $(cat "$TMP/lm.pools")"
[ -s "$TMP/lm2.out" ] && fail "lim's second request ran past its max_inflight: $(cat "$TMP/lm2.out")"
if grep -q "hold lm1" "$TMP/W1.log"; then release lm1 "$W1_PORT"; else release lm1 "$W2_PORT"; fi
wait "$p1" "$p2" || true
expect_lines "$TMP/lm2.out" '^"lm2"$' 1
timeout --foreground 30 "$BIN/qsend" -g "$G" -u lim:pw "echo new" > "$TMP/lm3.out" 2>&1 || true
[ -s "$TMP/lm3.out" ] && grep -q '"new"' "$TMP/lm3.out" && fail "a new connection of a removed user was let in"
pass "a user removed from the users file: said; its connections stay with its limits as they were; new ones refused"

# --- .qgate.clients[] shows a client whose .qgate.all runs as running, on every worker of its
# group (helper round 35c: at 041cc8a it showed it idle, while .qgate.stats[] had every worker
# busy with it), and the query its workers run (helper round 40a: at 560656a none, a .qgate.all
# having no slot in .qgate.queries[])
timeout --foreground 60 "$BIN/qsend" -g "$G" -u boss:pw "all:main:hold ca1" > "$TMP/ca.out" 2>&1 & pa=$!
wait_line "$TMP/W1.log" "hold ca1" 10
wait_line "$TMP/W2.log" "hold ca1" 10
timeout --foreground 30 "$BIN/qsend" -g "$G" -u boss:pw ".qgate.clients[]" > "$TMP/ca.clients" 2>&1 || true
grep -E '`running' "$TMP/ca.clients" > /dev/null || fail "no running column: $(cat "$TMP/ca.clients")"
grep -qF '`every worker of main`' "$TMP/ca.clients" || fail ".qgate.clients[] during a .qgate.all: $(cat "$TMP/ca.clients")"
grep -qF '"hold ca1"' "$TMP/ca.clients" || fail ".qgate.clients[] during a .qgate.all shows not its query: $(cat "$TMP/ca.clients")"
release ca1 "$W1_PORT" "$W2_PORT"
wait "$pa" || true
expect_lines "$TMP/ca.out" '^"ca1ca1"$' 1
pass ".qgate.clients[] shows a running .qgate.all as running, on every worker of its group, with its query"

#!/usr/bin/env bash
# Operating qgate: --check, SIGHUP adding and removing workers under load without a failed
# request, SIGTERM draining in-flight work and exiting 0.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 20000
start_worker W2 --rows 20000
start_worker W3 --rows 20000
conf() {
    printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group main]\nworkers = %s\n' "$1" > "$TMP/gw.conf"
}

# --- --check: good and bad configurations --------------------------------------------------
conf "127.0.0.1:$W1_PORT"
"$BIN/qgate" --check -c "$TMP/gw.conf" > "$TMP/out" || fail "--check rejected a good config"
printf '[gateway]\nport = 99999\n' > "$TMP/bad.conf"
set +e; "$BIN/qgate" --check -c "$TMP/bad.conf" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "--check accepted port 99999"
expect_file_has "$TMP/err" "bad.conf:2: port: 99999 is outside 0..65535"
printf '[gateway]\nmax_qeue = 5\n' > "$TMP/bad.conf"
set +e; "$BIN/qgate" --check -c "$TMP/bad.conf" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "unknown key 'max_qeue'" "$TMP/err" || fail "--check accepted an unknown key"
set +e; "$BIN/qgate" --check --workers "nohost" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "bad worker address 'nohost'" "$TMP/err" || fail "--check accepted a bad address"
pass "--check: accepts a good file, names file:line and key for a bad one"

# --- SIGHUP under load: add W3, drop W1, then add W1 back, drop W2: no request fails --------
conf "127.0.0.1:$W1_PORT,127.0.0.1:$W2_PORT"
start_gateway GW -c "$TMP/gw.conf"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10
lpids=()
for i in 1 2 3 4 5 6; do
    "$BIN/qclient" -g "$G" fast 0 --seconds 4 --quiet 2> "$TMP/load$i.err" & lpids+=($!)
done
"$BIN/qclient" -g "$G" big 0 --seconds 4 --quiet 2> "$TMP/load7.err" & lpids+=($!)
wait_count "$TMP/W1.log" ": fast" 20 20                                  # the load is on
conf "127.0.0.1:$W2_PORT,127.0.0.1:$W3_PORT"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "reload: group main: removing worker 127.0.0.1:$W1_PORT" 10
wait_count "$TMP/W3.log" ": fast" 20 20                                  # the new set serves
conf "127.0.0.1:$W1_PORT,127.0.0.1:$W3_PORT"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "reload: group main: removing worker 127.0.0.1:$W2_PORT" 10
wait "${lpids[@]}"
for i in 1 2 3 4 5 6 7; do
    grep -qE "requests=[1-9][0-9]* ok=[0-9]+ qerrors=0 failed=0" "$TMP/load$i.err" || fail "client $i: $(cat "$TMP/load$i.err")"
done
q ".qgate.stats[]"
expect_file_has "$TMP/q.out" "^table\\[2\\] .* \\| \`127\\.0\\.0\\.1:($W1_PORT|$W3_PORT)\`127\\.0\\.0\\.1:($W1_PORT|$W3_PORT) \\|"
served3=$(grep -c "fast\|big" "$TMP/W3.log" || true)
[ "$served3" -gt 0 ] || fail "the added worker served nothing"
pass "SIGHUP under load: workers added and removed, 7 clients without a failed request"

# --- SIGTERM: stop accepting, finish in-flight work, exit 0 --------------------------------
"$BIN/qsend" -g "$G" "sleep 1000" > "$TMP/t1.out" & p1=$!
wait_any "sleep 1000 ms" 5 "$TMP/W1.log" "$TMP/W3.log"
kill -TERM "$GW_PID"
wait_line "$TMP/GW.log" "SIGTERM: draining" 5
"$BIN/qsend" -g "$G" "echo late" > "$TMP/t2.out" 2>&1 || true
expect_lines "$TMP/t2.out" "^'hop\$" 1
wait "$p1"
expect_lines "$TMP/t1.out" '^1000$' 1
wait_exit "$GW_PID" 10
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS after SIGTERM"
pass "SIGTERM: new connections refused, the running request answered, exit 0"

# --- SIGTERM with work that outlasts drain_timeout: exit 0 anyway ---------------------------
printf '[gateway]\nbind = 127.0.0.1\ndrain_timeout = 300\n[group main]\nworkers = 127.0.0.1:%s\n' "$W2_PORT" > "$TMP/d.conf"
start_gateway D -c "$TMP/d.conf"
G="127.0.0.1:$D_PORT"
"$BIN/qsend" -g "$G" "hold t3" > "$TMP/t3.out" & p3=$!
wait_line "$TMP/W2.log" "hold t3" 5
kill -TERM "$D_PID"
wait_exit "$D_PID" 10
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS after drain_timeout"
wait "$p3" || true
expect_lines "$TMP/t3.out" "^'close\$" 1
release t3 "$W2_PORT"
expect_file_has "$TMP/D.log" "drain_timeout reached"
pass "SIGTERM past drain_timeout: exits 0, the unfinished client sees the close"

# --- worker credentials from the config: a worker that demands them, and never in the logs -
start_worker S --rows 10 --user svc:Hunter2pw
printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group secure]\nworkers = 127.0.0.1:%s\nuser = svc\npassword = Hunter2pw\n' "$S_PORT" > "$TMP/s.conf"
start_gateway S1 -c "$TMP/s.conf"
wait_line "$TMP/S1.log" "connected \\(capability 3\\)" 10
G="127.0.0.1:$S1_PORT"; q "echo authenticated"
expect_lines "$TMP/q.out" '^"authenticated"$' 1
sed -i 's/^password = .*/password = wrong/' "$TMP/s.conf"
start_gateway S2 -c "$TMP/s.conf" --loglevel debug
wait_line "$TMP/S2.log" "closed during the handshake \\('access" 10
grep -q "Hunter2pw\|password = wrong\|:wrong" "$TMP/S1.log" "$TMP/S2.log" && fail "a worker password reached the log"
pass "worker credentials from the config; a refused login is logged without the password"

#!/usr/bin/env bash
# Where the time goes, from q (issue 23): .qgate.queries[] (admins) lists each query a group has
# run, with its calls, errors, waits and runs; .qgate.clients[] shows what a client runs, on which
# worker, since when; .qgate.stats[] the client a worker runs for; an admin finds the long query
# and kills its client. A user who is no admin gets no query texts and no worker addresses.
# The metrics: every counter a reload could have taken away stays where it was when the reload
# removes a worker (two scrapes), with the group's wait and run histograms.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 1000
start_worker W2 --rows 1000
W1A="127.0.0.1:$W1_PORT" W2A="127.0.0.1:$W2_PORT"
printf 'alice:pw\tadmin=1\nbob:pw\ncarl:pw\n' > "$TMP/users"
METRICS_PORT=$(pick_port)
write_conf() {
    cat > "$TMP/gw.conf" <<CONF
[gateway]
bind = 127.0.0.1
reconnect_min = 50
users_file = $TMP/users
metrics_port = $METRICS_PORT
[group main]
workers = $1
CONF
}
write_conf "$W1A, $W2A"
start_gateway GW -c "$TMP/gw.conf"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10
admin() { timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:pw "$@" > "$TMP/a.out" 2>&1 || true; }
# rows: the tables qsend printed (a column each, "table[n] `c1 `c2 | v1 | v2 ...") on stdin as
# rows of values "a|b|c", symbols without their backquote, strings without their quotes
rows() {
    awk -F' [|] ' '/^table\[/ { nc = NF - 1
        for (c = 2; c <= NF; c++) { v = $c; sub(/^,/, "", v); n = 0
            if (v ~ /^\(/) { gsub(/^\(|\)$/, "", v); n = split(v, a, ";") }
            else if (v ~ /^`/) { n = split(substr(v, 2), a, "`") }
            else if (v ~ /^"/) { n = 1; a[1] = v }
            else { n = split(v, a, " ") }
            for (r = 1; r <= n; r++) { x = a[r]; gsub(/^"|"$/, "", x); cell[r, c] = x }
            if (n > nr) nr = n }
        for (r = 1; r <= nr; r++) { line = ""; for (c = 2; c <= NF; c++) line = line (c > 2 ? "|" : "") cell[r, c]; print line }
        nr = 0; delete cell }'
}
user() { timeout --foreground 60 "$BIN/qsend" -g "$G" -u carl:pw "$@" > "$TMP/u.out" 2>&1 || true; }

# --- the queries a group ran -----------------------------------------------------------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:pw "echo a" "echo a" "echo a" "echo b" "nosuchfunc" > "$TMP/b.out" 2>&1 || true
expect_lines "$TMP/b.out" '^"a"$' 3
admin ".qgate.queries[]"
QHEAD='^table\[[0-9]+\] `group `key `query `calls `errors `wait_us `wait_mean_us `wait_max_us `run_us `run_mean_us `run_max_us `bytes_in `bytes_out `last'
expect_lines "$TMP/a.out" "$QHEAD" 1
rows < "$TMP/a.out" > "$TMP/q.rows"
grep -qE '^main\|-?[0-9]+\|echo a\|3\|0\|([0-9]+\|){6}60\|45\|[0-9]+$' "$TMP/q.rows" || fail "echo a run 3 times, no error, 60 bytes in, 45 out: $(cat "$TMP/q.rows")"
grep -qE '^main\|-?[0-9]+\|echo b\|1\|0\|' "$TMP/q.rows" || fail "echo b once: $(cat "$TMP/q.rows")"
grep -qE '^main\|-?[0-9]+\|nosuchfunc\|1\|1\|' "$TMP/q.rows" || fail "the q error counted: $(cat "$TMP/q.rows")"
user ".qgate.queries[]" ".qgate.clients[]"
expect_lines "$TMP/u.out" "^'qgate: access \\(admin only\\): \\.qgate\\.(queries|clients)" 2
pass ".qgate.queries[]: each query with its calls and errors, for admins only"

# --- the long query found and killed from q --------------------------------------------------
"$BIN/qsend" -g "$G" -u bob:pw "hold long1" > "$TMP/long.out" 2>&1 & lp=$!
wait_any "hold long1" 10 "$TMP/W1.log" "$TMP/W2.log"
admin ".qgate.clients[]" ".qgate.stats[]"
rows < "$TMP/a.out" > "$TMP/a.rows"
# id|user|peer|group|state|requests|running|connected|worker|since|query
bob_row=$(grep -E '^[0-9]+\|bob\|.*\|hold long1$' "$TMP/a.rows" | head -n 1)
[ -n "$bob_row" ] || fail "bob's running query in .qgate.clients[]: $(cat "$TMP/a.out")"
echo "$bob_row" | grep -qE "\|1\|[0-9]{15,}\|127\.0\.0\.1:($W1_PORT|$W2_PORT)\|[0-9]{15,}\|hold long1\$" ||
    fail "running, connected at, the worker it runs on and since when: $bob_row"
bob_id=${bob_row%%|*}
# address|group|state|served|errors|inflight|queued|p50_us|p99_us|dropped|session|transport|client|started
grep -qE "^127\.0\.0\.1:($W1_PORT|$W2_PORT)\|main\|busy\|([^|]*\|){9}$bob_id\|[0-9]{15,}\$" "$TMP/a.rows" ||
    fail ".qgate.stats[]: the worker running bob's request names him and its start: $(cat "$TMP/a.rows")"
admin ".qgate.kill[$bob_id]"
expect_lines "$TMP/a.out" '^1b$' 1
wait "$lp" || true
wait_line "$TMP/GW.log" "disconnected by admin alice" 10
release long1 "$W1_PORT" "$W2_PORT"
pass ".qgate.clients[] names the running query, its worker and since when, .qgate.stats[] its client; .qgate.kill[$bob_id] ends it"

# --- no worker addresses for a user who is no admin ------------------------------------------
user ".qgate.stats[]"
grep -qE "127\\.0\\.0\\.1:($W1_PORT|$W2_PORT)" "$TMP/u.out" && fail "carl sees the workers' addresses: $(cat "$TMP/u.out")"
rows < "$TMP/u.out" > "$TMP/u.rows"
expect_lines "$TMP/u.rows" '^main#1\|main\|' 1
expect_lines "$TMP/u.rows" '^main#2\|main\|' 1
pass ".qgate.stats[] names the workers main#1, main#2 to a user who is no admin (a users file in force)"

# ... as the users file said when the request came, as its admin check is: carl's .qgate.stats[],
# queued behind his async message while both workers are held, is answered masked though a reload
# made him an admin meanwhile (before: with the addresses, while his .qgate.pause in the same
# queue was refused: helper round 18)
"$BIN/qsend" -g "$G" -u bob:pw "hold m1" > /dev/null 2>&1 & pm1=$!
"$BIN/qsend" -g "$G" -u bob:pw "hold m2" > /dev/null 2>&1 & pm2=$!
wait_any "hold m1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold m2" 10 "$TMP/W1.log" "$TMP/W2.log"
timeout --foreground 30 "$BIN/qsend" -g "$G" -u carl:pw --pipeline "neg:echo queued" ".qgate.stats[]" > "$TMP/u.out" 2>&1 & pc=$!
wait_for 10 "carl's message queued" sh -c "timeout 5 '$BIN/qsend' -g '$G' -u alice:pw '.qgate.pools[]' | grep -qE ' \\| ,\`main \\| ,0b \\| ,1 \\| '"
printf 'alice:pw\tadmin=1\nbob:pw\ncarl:pw\tadmin=1\n' > "$TMP/users"
n=$(grep -c "reload: done" "$TMP/GW.log" || true)
kill -HUP "$GW_PID"
wait_count "$TMP/GW.log" "reload: done" $((n + 1)) 10
release m1 "$W1_PORT" "$W2_PORT"
release m2 "$W1_PORT" "$W2_PORT"
wait "$pc" "$pm1" "$pm2" || true
grep -qE "127\\.0\\.0\\.1:($W1_PORT|$W2_PORT)" "$TMP/u.out" && fail "carl's queued .qgate.stats[] shows the addresses: $(cat "$TMP/u.out")"
rows < "$TMP/u.out" > "$TMP/u.rows"
expect_lines "$TMP/u.rows" '^main#1\|main\|' 1
printf 'alice:pw\tadmin=1\nbob:pw\ncarl:pw\n' > "$TMP/users"
n=$(grep -c "reload: done" "$TMP/GW.log" || true)
kill -HUP "$GW_PID"
wait_count "$TMP/GW.log" "reload: done" $((n + 1)) 10
pass ".qgate.stats[] queued before a reload made its user an admin: masked, as the users file said when it came"

# --- the reset ---------------------------------------------------------------------------------
admin ".qgate.queries[\`reset]" ".qgate.queries[]" ".qgate.queries[\`nonsense]"
expect_lines "$TMP/a.out" '^1b$' 1
grep -q '"echo a"' "$TMP/a.out" && fail "echo a still listed after the reset: $(cat "$TMP/a.out")"
expect_lines "$TMP/a.out" "^'qgate: .qgate.queries takes nothing \\(the table\\) or \`reset" 1
pass ".qgate.queries[\`reset]: the totals forgotten"

# --- counters over a reload that removes a worker --------------------------------------------
timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:pw "echo c" "echo c" "echo c" "echo c" > /dev/null 2>&1 || true
scrape() { curl -s --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics" > "$1" || fail "scrape"; }
scrape "$TMP/m1"
promtool check metrics < "$TMP/m1" > "$TMP/promtool.out" 2>&1 || fail "promtool: $(cat "$TMP/promtool.out")"
for m in 'qgate_group_queue_wait_seconds_count{group="main"}' 'qgate_group_run_seconds_count{group="main"}' \
         'qgate_request_duration_seconds_count{group="main"}' "qgate_worker_up{group=\"main\",worker=\"$W1A\"}" \
         "qgate_worker_state{group=\"main\",worker=\"$W2A\",state=\"idle\"}" \
         'qgate_group_requests_total{group="main",outcome="ok"}' 'qgate_group_refused_total{group="main",reason="busy"}'; do
    grep -qF "$m " "$TMP/m1" || fail "no $m on the page"
done
write_conf "$W1A"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "removed from the configuration" 10
timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:pw "echo d" > /dev/null 2>&1 || true
scrape "$TMP/m2"
# every series of a counter or histogram on both pages, its value no lower on the second
awk 'FNR == 1 { f++ } /^# TYPE/ { t[$3] = $4; next } /^#/ { next } {
        n = $1; b = n; sub(/\{.*/, "", b); base = b; sub(/_(bucket|sum|count)$/, "", base)
        if (t[b] != "counter" && t[base] != "histogram") next
        if (f == 1) v1[n] = $2; else if (n in v1 && $2 + 0 < v1[n] + 0) { print "went back: " n " " v1[n] " -> " $2; bad = 1 }
     } END { exit bad }' "$TMP/m1" "$TMP/m2" > "$TMP/mono.out" ||
    case "$(cat "$TMP/mono.out")" in *qgate_worker_*) grep -v qgate_worker_ "$TMP/mono.out" | grep -q . && fail "$(cat "$TMP/mono.out")" ;; *) fail "$(cat "$TMP/mono.out")" ;; esac
grep -qF "worker=\"$W2A\"" "$TMP/m2" && fail "the removed worker's series are still on the page"
c1=$(awk '$1 == "qgate_group_requests_total{group=\"main\",outcome=\"ok\"}" {print $2}' "$TMP/m1")
c2=$(awk '$1 == "qgate_group_requests_total{group=\"main\",outcome=\"ok\"}" {print $2}' "$TMP/m2")
[ "$c2" -gt "$c1" ] || fail "the group's requests: $c1 then $c2"
# group|paused|waiting|active|idle|down|disabled|maxwait_ms|served|errors: every run counted, the removed
# worker's too (3 echo a, echo b, nosuchfunc, hold long1 drained after its client was killed, hold m1,
# hold m2, 4 echo c, echo d; async messages are not counted)
pools_served() { admin ".qgate.pools[]"; rows < "$TMP/a.out" | grep -qE '^main\|0b\|0\|0\|1\|0\|0\|0\|13\|1$'; }
wait_for 10 ".qgate.pools[] main served 13, errors 1" pools_served
pass "a reload that removes a worker: every group counter and histogram no lower (the removed worker's series gone, its runs still counted), promtool accepts the page"

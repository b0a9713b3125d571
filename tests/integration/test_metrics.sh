#!/usr/bin/env bash
# Operating it: the Prometheus page on metrics_port scraped with curl under load (its numbers
# those of .qgate.stats[] and .qgate.totals[] once the load stops, and promtool's check), clear
# refusals ('qgate: too many connections over max_clients; busy logged at most once a second and
# counted), the summary line every stats_period.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 100
start_worker W2 --rows 100
METRICS_PORT=$(pick_port)
printf '[gateway]\nmetrics_port = %s\nmetrics_bind = 127.0.0.1\nmax_clients = 6\nstats_period = 300\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$METRICS_PORT" "$W1_PORT" "$W2_PORT" > "$TMP/gw.conf"
start_gateway GW -c "$TMP/gw.conf"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10
expect_file_has "$TMP/GW.log" "metrics on http://127.0.0.1:$METRICS_PORT/metrics"

# --- the page: HTTP/1.1, Prometheus text, scraped during load ------------------------------------
"$BIN/qload" -g "$G" --class f:text=echo\ 1:4 --warmup 0 --seconds 3 > "$TMP/load.out" 2> "$TMP/load.err" & lp=$!
wait_for 20 "requests under load" metric_at_least 'qgate_requests_total{outcome="ok"}' 100
curl -s -D "$TMP/h" -o "$TMP/page" "http://127.0.0.1:$METRICS_PORT/metrics"
expect_file_has "$TMP/h" "^HTTP/1.1 200 OK"
expect_file_has "$TMP/h" "^Content-Type: text/plain; version=0.0.4"
expect_file_has "$TMP/page" '^qgate_clients\{state="ready"\} 4$'
expect_file_has "$TMP/page" '^qgate_workers\{group="main",state="busy"\} [0-2]$'
expect_file_has "$TMP/page" '^qgate_request_duration_seconds_bucket\{group="main",le="\+Inf"\} [1-9][0-9]*$'
expect_file_has "$TMP/page" '^qgate_build_info\{version="[0-9.]+"\} 1$'
promtool check metrics < "$TMP/page" > "$TMP/promtool.out" 2>&1 || fail "promtool: $(cat "$TMP/promtool.out")"
wait "$lp" || fail "qload: $(cat "$TMP/load.err")"
pass "the metrics page under load: HTTP/1.1 200, Prometheus text that promtool accepts"

# --- once the load stops, its numbers are those of the q commands ---------------------------------
sent=$(sed -n 's/.* requests=\([0-9]*\) .*/\1/p' "$TMP/load.out")
timeout 10 "$BIN/qsend" -g "$G" ".qgate.stats[]" > "$TMP/stats.out"
curl -s -o "$TMP/page" "http://127.0.0.1:$METRICS_PORT/metrics"
served=$(awk -F' [|] ' '{print $5}' "$TMP/stats.out")
m1=$(awk -v k="qgate_worker_requests_total{group=\"main\",worker=\"127.0.0.1:$W1_PORT\"}" '$1 == k {print $2}' "$TMP/page")
m2=$(awk -v k="qgate_worker_requests_total{group=\"main\",worker=\"127.0.0.1:$W2_PORT\"}" '$1 == k {print $2}' "$TMP/page")
[ "$(echo "$served" | awk '{print $1 + $2}')" -eq $((m1 + m2)) ] || fail "stats[] served $served, metrics $m1 + $m2"
ok=$(awk '$1 == "qgate_requests_total{outcome=\"ok\"}" {print $2}' "$TMP/page")
[ "$ok" -ge "$sent" ] && [ "$ok" -eq $((m1 + m2 + 1)) ] || fail "ok $ok: workers served $m1 + $m2, qload counted $sent"
cnt=$(awk '$1 == "qgate_request_duration_seconds_count{group=\"main\"}" {print $2}' "$TMP/page")
[ "$cnt" -eq $((m1 + m2)) ] || fail "latency count $cnt, served $((m1 + m2))"
pass "after the load: served per worker and requests ok as .qgate.stats[] says ($m1 + $m2)"

# --- other paths and methods ------------------------------------------------------------------------
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$METRICS_PORT/nope")" = 404 ] || fail "/nope not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$METRICS_PORT/metrics")" = 405 ] || fail "POST not 405"
curl -s -I "http://127.0.0.1:$METRICS_PORT/metrics" > "$TMP/h"
expect_file_has "$TMP/h" "^HTTP/1.1 200 OK"
pass "404 for other paths, 405 for other methods, HEAD"

# --- busy: refused, logged at most once a second, counted ------------------------------------------
sed -i 's/^stats_period/max_queue = 0\nstats_period/' "$TMP/gw.conf"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "reload: done" 10
"$BIN/qsend" -g "$G" "hold h1" > "$TMP/h1.out" & h1=$!
"$BIN/qsend" -g "$G" "hold h2" > "$TMP/h2.out" & h2=$!
wait_any "hold h1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold h2" 10 "$TMP/W1.log" "$TMP/W2.log"
busy=()
for i in $(seq 1 50); do busy+=("echo $i"); done
timeout 20 "$BIN/qsend" -g "$G" "${busy[@]}" > "$TMP/q.out"
expect_lines "$TMP/q.out" "^'qgate: busy\$" 50
[ "$(metric 'qgate_refused_total{reason="busy"}')" -eq 50 ] || fail "busy counted $(metric 'qgate_refused_total{reason="busy"}'), want 50"
n=$(grep -c "max_queue (0) clients wait: 'qgate: busy" "$TMP/GW.log" || true)
[ "$n" -ge 1 ] && [ "$n" -lt 10 ] || fail "$n busy lines logged for 50 refusals"
pass "50 'qgate: busy: counted 50, logged $n times"

# --- over max_clients: the q error 'qgate: too many connections, then the close --------------------
for fd in 4 5 6 7; do raw_open "$GW_PORT" $fd; raw_hs u:p $fd; done   # 2 holding, 4 idle: 6
wait_for 20 "6 clients ready" metric_at_least 'qgate_clients{state="ready"}' 6
timeout 10 "$BIN/qsend" -g "$G" "echo over" > "$TMP/over.out" || true
expect_lines "$TMP/over.out" "^'qgate: too many connections\$" 1
[ "$(metric 'qgate_refused_total{reason="too_many_connections"}')" -eq 1 ] || fail "too_many_connections not counted once"
expect_file_has "$TMP/GW.log" "refusing a connection: max_clients \\(6\\) reached"
release h1 "$W1_PORT" "$W2_PORT"; release h2 "$W1_PORT" "$W2_PORT"
for fd in 4 5 6 7; do raw_close $fd; done
wait "$h1" "$h2"
timeout 10 "$BIN/qsend" -g "$G" "echo under" > "$TMP/q.out"
expect_lines "$TMP/q.out" '^"under"$' 1
pass "the 7th client: 'qgate: too many connections, counted and logged; after the others leave, served"

# --- .qgate.totals[] and the summary line -----------------------------------------------------------
timeout 10 "$BIN/qsend" -g "$G" ".qgate.totals[]" > "$TMP/q.out"
expect_file_has "$TMP/q.out" '^`uptime_ms`clients`connections`handshakes`requests`ok`errors`gwerrors`gone`closed`request_bytes'
wait_line "$TMP/GW.log" "stats: [0-9]+ requests \\([0-9.]+/s\\), 0 q errors, 51 gateway errors, 51 refused \\(too_many_connections 1, busy 50\\); [0-9]+ clients, 0 queued, workers 2/2 up" 10
pass ".qgate.totals[]; the summary line every stats_period"

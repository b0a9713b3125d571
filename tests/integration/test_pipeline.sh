#!/usr/bin/env bash
# pipeline = N: while every worker is busy, sync requests go behind the runs of the workers
# holding fewest, up to N on a worker. Each reply still reaches its own client, in order; a
# worker lost takes the requests it held with it, each client told; a held client that goes
# has its reply drained; pool = session refuses it; the default (1) keeps a request waiting
# for the first worker to free.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 1000
start_worker W2 --rows 1000
conf() { # conf FILE PIPELINE [GROUPKEY=VALUE...]
    local f=$1 n=$2 kv
    shift 2
    { printf '[gateway]\nbind = 127.0.0.1\nreconnect_min = 50\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\npipeline = %s\n' \
        "$W1_PORT" "$W2_PORT" "$n"
      for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}"; done; } > "$f"
}
# worker_of TAG: the name (W1 or W2) of the worker whose log shows "TAG"
worker_of() { if grep -q "$1" "$TMP/W1.log"; then echo W1; else echo W2; fi; }
inflight_is() { # inflight_is A B: .qgate.stats[] inflight column is "A B"
    timeout 5 "$BIN/qsend" -g "$G" ".qgate.stats[]" | grep -qE "^table\\[2\\] .* \\| [0-9]+ [0-9]+ \\| [0-9]+ [0-9]+ \\| $1 $2 \\| "
}

conf "$TMP/bad.conf" 2 pool=session
set +e; "$BIN/qgate" --check -c "$TMP/bad.conf" 2> "$TMP/err"; rc=$?; set -e
[ $rc -eq 1 ] || fail "--check accepted pipeline with pool = session"
expect_file_has "$TMP/err" "group main: pool = session gives a client its own worker: pipeline does not apply"
pass "pipeline with pool = session is refused by --check"

# --- two workers busy: a third request is held behind one of them, and answered in turn -----
conf "$TMP/p.conf" 2
start_gateway P -c "$TMP/p.conf" --loglevel debug
wait_count "$TMP/P.log" "connected \(capability" 2
G="127.0.0.1:$P_PORT"
"$BIN/qsend" -g "$G" "hold a1" > "$TMP/a1.out" & pa=$!
"$BIN/qsend" -g "$G" "hold b1" > "$TMP/b1.out" & pb=$!
wait_any "hold a1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold b1" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" "echo c1" > "$TMP/c1.out" & pc=$!
wait_line "$TMP/P.log" "holding sync request [0-9]+ of c[0-9]+ .* behind 1"
held_on=$(sed -n -E "s/.* w 127.0.0.1:([0-9]+): holding sync request [0-9]+ of .*/\1/p" "$TMP/P.log" | head -1)
wait_for 10 "inflight 2 on one worker" eval 'inflight_is 2 1 || inflight_is 1 2'
# it runs on the worker it is held on, when that one's run ends; the other's end does not take it
held_name=$([ "$held_on" = "$W1_PORT" ] && echo W1 || echo W2)
if grep -q "hold a1" "$TMP/$held_name.log"; then head_tag=a1; other_tag=b1; else head_tag=b1; other_tag=a1; fi
release "$other_tag" "$W1_PORT" "$W2_PORT"
wait_line "$TMP/$other_tag.out" "^\"$other_tag\"\$" 10
grep -q "echo c1" "$TMP/W1.log" "$TMP/W2.log" && fail "the held request ran before its worker's run ended"
release "$head_tag" "$W1_PORT" "$W2_PORT"
wait "$pa" "$pb" "$pc"
expect_lines "$TMP/c1.out" '^"c1"$' 1
expect_lines "$TMP/a1.out" '^"a1"$' 1
expect_lines "$TMP/b1.out" '^"b1"$' 1
grep -q "echo c1" "$TMP/$held_name.log" || fail "echo c1 did not run on the worker it was held on ($held_name)"
pass "pipeline = 2: a request held behind a busy worker's run is answered in turn, on that worker, to its client"

# --- 32 connections against 2 workers, pipeline 3: every reply to its own client, in order ----
conf "$TMP/s.conf" 3
start_gateway S -c "$TMP/s.conf"
both_up() { timeout 5 "$BIN/qsend" -g "127.0.0.1:$S_PORT" ".qgate.stats[]" | grep -q '`idle`idle'; }
wait_for 10 "both workers up" both_up
timeout 90 "$BIN/qsoak" -g "127.0.0.1:$S_PORT" -c 32 --seconds 3 > "$TMP/soak.out" 2> "$TMP/soak.err" ||
    fail "qsoak through pipeline = 3: $(tail -5 "$TMP/soak.out" "$TMP/soak.err")"
expect_file_has "$TMP/soak.out" "qsoak requests=[0-9]+ ok=[0-9]+ qerrors=0 closed=0 lost=0 duplicated=0 misrouted=0"
pass "pipeline = 3, 32 connections, 2 workers: $(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$TMP/soak.out") replies, none lost, duplicated or misrouted"

# --- the worker holding a request dies: its run's client and the held one are both told ----
G="127.0.0.1:$P_PORT"
"$BIN/qsend" -g "$G" "hold d1" > "$TMP/d1.out" 2>&1 & pd1=$!
"$BIN/qsend" -g "$G" "hold d2" > "$TMP/d2.out" 2>&1 & pd2=$!
wait_any "hold d1" 10 "$TMP/W1.log" "$TMP/W2.log"
wait_any "hold d2" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" "echo d3" > "$TMP/d3.out" 2>&1 & pd3=$!
wait_count "$TMP/P.log" "holding sync request [0-9]+ of" 2
on=$(sed -n -E "s/.* w 127.0.0.1:([0-9]+): holding sync request [0-9]+ of .*/\1/p" "$TMP/P.log" | tail -1)
if [ "$on" = "$W1_PORT" ]; then victim=W1; survivor=W2; else victim=W2; survivor=W1; fi
if grep -q "hold d1" "$TMP/$victim.log"; then vtag=d1; stag=d2; else vtag=d2; stag=d1; fi
vpid=${victim}_PID; sport=${survivor}_PORT
kill -9 "${!vpid}"
wait "$pd3" || true
expect_lines "$TMP/d3.out" "^'qgate: worker 127.0.0.1:$on lost\$" 1
wait_line "$TMP/$vtag.out" "^'qgate: worker 127.0.0.1:$on lost\$" 10
release "$stag" "${!sport}"
wait "$pd1" "$pd2" || true
expect_lines "$TMP/$stag.out" "^\"$stag\"\$" 1
pass "a worker lost with a request held behind its run: both its clients get 'qgate: worker ... lost; the other worker's client its reply"

# --- a held client that goes before its turn: its reply is drained, the next one served -----
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\npipeline = 3\n' "${!sport}" > "$TMP/one.conf"
start_gateway O -c "$TMP/one.conf" --loglevel debug
wait_line "$TMP/O.log" "connected \(capability"
G="127.0.0.1:$O_PORT"
"$BIN/qsend" -g "$G" "hold g1" > "$TMP/g1.out" 2>&1 & pg1=$!
wait_line "$TMP/$survivor.log" "hold g1" 10
raw_open "$O_PORT" 3
raw_hs "u:p" 3
raw_text 1 "echo g2" 3
wait_line "$TMP/O.log" "holding sync request [0-9]+ of c[0-9]+ .* behind 1" 10
raw_close 3
wait_line "$TMP/O.log" "input ended \(client closed the connection\): its requests still run" 10
"$BIN/qsend" -g "$G" "echo g3" > "$TMP/g3.out" 2>&1 & pg3=$!
wait_line "$TMP/O.log" "behind 2" 10
release g1 "${!sport}"
wait "$pg1" "$pg3"
expect_lines "$TMP/g1.out" '^"g1"$' 1
expect_lines "$TMP/g3.out" '^"g3"$' 1
wait_line "$TMP/O.log" "c[0-9]+ 127.0.0.1:[0-9]+: closed: client closed the connection" 10 # its reply drained, it goes
pass "a held client that closes: its reply is drained when it comes, and the request held after it is answered"

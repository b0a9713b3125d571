#!/usr/bin/env bash
# run.sh: interop tests with node-q, an independent kdb+ client, against qworker and qgate.
. "$(dirname "$0")/../integration/lib.sh"
[ -d tests/interop/node_modules/node-q ] || fail "node-q missing: run tests/deps.sh (npm ci)"

start_worker W --rows 1000000
# the first row as our own decoder reads it; node-q must read the same text
first=$("$BIN/qsend" -g "127.0.0.1:$W_PORT" "rows 1" | sed -n 's/^table\[1\] `a | ,"\([a-z]*\)"$/\1/p')
[ -n "$first" ] || fail "could not read the first row with qsend"
(cd tests/interop && timeout --foreground 180 node interop.js "$W_PORT" "$first" 1000000) || fail "node-q against qworker"

# the same through qgate: node-q cannot tell the gateway from a worker
start_gateway GW --workers "127.0.0.1:$W_PORT"
(cd tests/interop && timeout --foreground 180 node interop.js "$GW_PORT" "$first" 1000000) || fail "node-q against qgate"

# node-q as a feed handler (publish and exit: everything sent before the close runs), and in a
# request pool a worker's publish while idle reaches nobody (dropped, counted)
(cd tests/interop && timeout --foreground 60 node publish.js "$GW_PORT" publish 20) || fail "node-q publish"
wait_count "$TMP/W.log" "async message" 20 30
(cd tests/interop && timeout --foreground 60 node publish.js "$GW_PORT" nobody) || fail "node-q publish to nobody"

# pool = session: node-q keeps one worker for its connection, as if it had opened that q
start_worker S1 --rows 1000
start_worker S2 --rows 1000
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\npool = session\n' \
    "$S1_PORT" "$S2_PORT" > "$TMP/session.conf"
start_gateway SE -c "$TMP/session.conf"
wait_count "$TMP/SE.log" "connected \(capability" 2
(cd tests/interop && timeout --foreground 60 node session.js "$SE_PORT") || fail "node-q session"
# a subscriber in a session: its worker's publish between its requests reaches it
(cd tests/interop && timeout --foreground 60 node publish.js "$SE_PORT" subscribe) || fail "node-q subscribe"
# ... and one its worker compressed (the worker takes qgate for remote): decompressed on a
# reader for node-q on this host, as q would never send it compressed here
start_worker SZ --rows 1000 --compress
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\npool = session\n' "$SZ_PORT" > "$TMP/zip.conf"
start_gateway SZG -c "$TMP/zip.conf"
wait_count "$TMP/SZG.log" "connected \(capability" 1
(cd tests/interop && timeout --foreground 60 node publish.js "$SZG_PORT" subscribe 5000) || fail "node-q subscribe to a compressed publish"
expect_file_has "$TMP/SE.log" "session: given to c1 "
expect_file_has "$TMP/SE.log" "session: given to c2 "
# one session after another on one worker: what the first set up on its handle dies with it
start_worker S3 --rows 1000
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\npool = session\n' "$S3_PORT" > "$TMP/send.conf"
start_gateway SN -c "$TMP/send.conf"
(cd tests/interop && timeout --foreground 60 node session.js "$SN_PORT" after) || fail "node-q one session after another"

# pipelining: 16 node-q connections, 2 workers, each connection's query learned fast (a
# pipeline_wait no run here nears, so that it is learned fast whatever the machine's load)
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\npipeline = 3\npipeline_wait = 1000\n' \
    "$S1_PORT" "$S2_PORT" > "$TMP/pipe.conf"
start_gateway PL -c "$TMP/pipe.conf"
wait_count "$TMP/PL.log" "connected \(capability" 2
(cd tests/interop && timeout --foreground 120 node pipeline.js "$PL_PORT" 16 200) || fail "node-q pipeline"

# per-query routing and fan-out: (`.qgate.on; `group; query), (`.qgate.all; `group; query) from node-q
printf '[gateway]\nbind = 127.0.0.1\n[group main]\nworkers = 127.0.0.1:%s\n[group hdb]\nworkers = 127.0.0.1:%s\n[group both]\nworkers = 127.0.0.1:%s,127.0.0.1:%s\n' \
    "$S1_PORT" "$S2_PORT" "$S1_PORT" "$S2_PORT" > "$TMP/route.conf"
start_gateway RT -c "$TMP/route.conf"
wait_count "$TMP/RT.log" "connected \(capability" 4
(cd tests/interop && timeout --foreground 60 node route.js "$RT_PORT") || fail "node-q route"

# the operator's commands from node-q, as an admin of the users file
printf 'nq:pw\tadmin=1\n' > "$TMP/admins"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s\n' "$TMP/admins" "$S1_PORT" > "$TMP/ctl.conf"
start_gateway CT -c "$TMP/ctl.conf"
wait_count "$TMP/CT.log" "connected \(capability" 1
(cd tests/interop && timeout --foreground 60 node control.js "$CT_PORT" "127.0.0.1:$S1_PORT") || fail "node-q control"

# an admin finds the query hurting everyone and kills its client, from node-q
printf 'nq:pw\tadmin=1\nbob:pw\n' > "$TMP/ops.users"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s\n' "$TMP/ops.users" "$S1_PORT" > "$TMP/ops.conf"
start_gateway OP -c "$TMP/ops.conf"
wait_count "$TMP/OP.log" "connected \(capability" 1
(cd tests/interop && timeout --foreground 60 node longquery.js "$OP_PORT") || fail "node-q long query"
expect_file_has "$TMP/OP.log" "disconnected by admin nq"

# with a users file: node-q with good and with bad credentials
printf 'nq:%s\n' "$(printf 'nodepw' | md5sum | cut -d' ' -f1)" > "$TMP/users"
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s\n' "$TMP/users" "$W_PORT" > "$TMP/auth.conf"
start_gateway AU -c "$TMP/auth.conf"
(cd tests/interop && timeout --foreground 60 node auth.js "$AU_PORT" nq:nodepw nq:wrong) || fail "node-q credentials"
expect_file_has "$TMP/AU.log" "access denied: user 'nq'"

# over max_clients: node-q's first query gets the q error 'qgate: too many connections
printf '[gateway]\nbind = 127.0.0.1\nmax_clients = 1\n[group main]\nworkers = 127.0.0.1:%s\n' "$W_PORT" > "$TMP/max.conf"
start_gateway MX -c "$TMP/max.conf"
raw_open "$MX_PORT" 4
raw_hs u:p 4
(cd tests/interop && timeout --foreground 60 node refuse.js "$MX_PORT") || fail "node-q over max_clients"
raw_close 4
expect_file_has "$TMP/MX.log" "refusing a connection: max_clients \\(1\\) reached"

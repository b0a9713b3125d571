#!/usr/bin/env bash
# Remote clients, in network namespaces: q's compression rule across a real link. A client on
# another host gets replies over 2000 bytes that compress to under half compressed (node-q and
# qsend read them back exactly); with compress = 0 it gets them plain; a client on the gateway's
# own host (loopback, the host's own address, q's Unix socket) never gets compressed bytes.
# Replies travel a veth limited to 1 Gbit/s (tc tbf); bytes on the wire and elapsed times are
# printed for a compressible 10 MB string and a 1M-row table, compression on and off.
. "$(dirname "$0")/lib.sh"

host client 10.77.0.10
host gw 10.77.0.20
on gw tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 100ms   # replies to clients
ns_worker gw W 127.0.0.1:5001 --rows 1000000
for g in A:8811:1 B:8812:0; do
    IFS=: read -r name port z <<< "$g"
    printf '[gateway]\nport = %s\nbind = 0.0.0.0\ncompress = %s\n[group main]\nworkers = 127.0.0.1:5001\n' \
        "$port" "$z" > "$TMP/$name.conf"
    ns_gateway gw "G$name" "$TMP/$name.conf"
    wait_line "$TMP/G$name.log" "connected \\(capability 3\\)" 20
done
first=$(on gw "$BIN/qsend" -g 127.0.0.1:5001 "rows 1" | sed -n 's/^table\[1\] `a | ,"\([a-z]*\)"$/\1/p')
[ -n "$first" ] || fail "could not read the first row"

# wire FILE: the wire line of qsend --wire
wirebytes() { sed -n 's/^wire: \([0-9]*\) bytes .*/\1/p' "$1"; }

# --- from the client host: compressed with compress = 1, plain with 0 -------------------------
on client "$BIN/qsend" -g 10.77.0.20:8811 --wire "text 10000000" > "$TMP/q.out" 2> "$TMP/w.on"
expect_lines "$TMP/w.on" "^wire: [0-9]+ bytes compressed \\(10000014 plain\\)\$" 1
[ "$(wirebytes "$TMP/w.on")" -lt 5000007 ] || fail "compressed to $(wirebytes "$TMP/w.on") bytes: not under half"
on client "$BIN/qsend" -g 10.77.0.20:8812 --wire "text 10000000" > "$TMP/q.out" 2> "$TMP/w.off"
expect_lines "$TMP/w.off" "^wire: 10000014 bytes plain \\(10000014 plain\\)\$" 1
on client "$BIN/qsend" -g 10.77.0.20:8811 --wire "text 1000" > /dev/null 2> "$TMP/w.small"
expect_lines "$TMP/w.small" "^wire: 1014 bytes plain " 1
pass "a remote client: 10 MB string compressed to $(wirebytes "$TMP/w.on") bytes (compress = 1), plain with compress = 0; 1014 bytes never"

# ... a .qgate.all's merged reply too, to a client of capability 1, 2 or 3 (before: plain below 3)
for cap in 1 2 3; do
    on client "$BIN/qsend" -g 10.77.0.20:8811 --cap "$cap" --wire "all:main:text 100000" > "$TMP/q.out" 2> "$TMP/w.all"
    expect_lines "$TMP/w.all" "^wire: [0-9]+ bytes compressed \\(100014 plain\\)\$" 1
done
pass "a remote client of capability 1, 2 or 3: a .qgate.all's merged reply compressed"

# --- node-q on the client host reads both back exactly, compressed or not -----------------------
[ -d tests/interop/node_modules/node-q ] || fail "node-q missing: run tests/deps.sh (npm ci)"
for port in 8811 8812; do
    (cd tests/interop && on client timeout --foreground 120 node remote.js 10.77.0.20 "$port" 1000000 "$first") || fail "node-q remote, port $port"
done
pass "node-q from another host: the compressed and the plain replies read back exactly"

# --- on the gateway's host: never compressed (loopback, its own address, q's Unix socket) -------
for via in 127.0.0.1:8811 10.77.0.20:8811 unix:8811; do
    on gw "$BIN/qsend" -g "$via" --wire "text 10000000" > /dev/null 2> "$TMP/w.local"
    expect_lines "$TMP/w.local" "^wire: 10000014 bytes plain " 1
done
pass "a client on the gateway's host (127.0.0.1, 10.77.0.20, q's Unix socket): plain"

# --- the figures: bytes on the wire and elapsed over the 1 Gbit/s link (printed, not asserted) ---
ms() { echo $(( $(date +%s%N) / 1000000 )); }
for q in "text 10000000" "rows 1000000"; do
    for port in 8811 8812; do
        ts=()
        for i in 1 2 3; do
            t0=$(ms)
            on client "$BIN/qsend" -g "10.77.0.20:$port" --wire "$q" > /dev/null 2> "$TMP/w.fig"
            ts+=($(( $(ms) - t0 )))
        done
        med=$(printf '%s\n' "${ts[@]}" | sort -n | sed -n 2p)
        echo "figure: \"$q\" compress=$([ $port = 8811 ] && echo 1 || echo 0): $(wirebytes "$TMP/w.fig") bytes on the wire, median of 3 ${med} ms (${ts[*]}) over 1 Gbit/s ($(basename "$BIN") build)"
    done
done
pass "figures printed"

# tests/net/lib.sh: a test network of Linux network namespaces, made by the test itself and torn
# down when it exits, whatever happened. Hosts are namespaces joined by a bridge that lives in a
# namespace of its own (the switch), so that every address is inside a namespace this test made:
# nothing is added to the machine's own network. Needs root and ip(8); fails (never skips)
# without them. Source it after nothing else: it sources tests/integration/lib.sh.
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

NETP="qg$$"          # prefix of every namespace of this test
NET_HOSTS=()
net_teardown() {
    local h
    for h in "${NET_HOSTS[@]:-}" sw; do
        [ -n "$h" ] && ip netns del "$NETP-$h" 2>/dev/null || true
    done
    ! ip netns list 2>/dev/null | grep -q "^$NETP-" || { echo "FAIL: namespaces left: $(ip netns list | grep "^$NETP-")" >&2; return 1; }
}
CLEANUP_HOOK=net_teardown

[ "$(id -u)" -eq 0 ] || fail "tests/net needs root (network namespaces): run make test as root"
command -v ip > /dev/null || fail "tests/net needs ip(8) (iproute2)"
ip netns add "$NETP-sw" 2> "$TMP/netns.err" || fail "cannot create a network namespace: $(cat "$TMP/netns.err")"
ip -n "$NETP-sw" link add br0 type bridge
ip -n "$NETP-sw" link set br0 up

# host NAME ADDR: a namespace with lo and eth0 (ADDR/24) on the switch
host() {
    local name=$1 addr=$2
    ip netns add "$NETP-$name"
    NET_HOSTS+=("$name")
    ip -n "$NETP-sw" link add "p-$name" type veth peer name eth0 netns "$NETP-$name"
    ip -n "$NETP-sw" link set "p-$name" master br0 up
    ip -n "$NETP-$name" addr add "$addr/24" dev eth0
    ip -n "$NETP-$name" link set lo up
    ip -n "$NETP-$name" link set eth0 up
}
# on HOST CMD...: run CMD in HOST's namespace
on() { local h=$1; shift; ip netns exec "$NETP-$h" "$@"; }
# bg HOST NAME CMD...: start CMD in HOST's namespace in the background, stdout in $TMP/NAME.out,
# stderr in $TMP/NAME.log; NAME_PID set, the process stopped at the end
bg() {
    local h=$1 name=$2
    shift 2
    fresh_output "$name"
    ip netns exec "$NETP-$h" "$@" > "$TMP/$name.out" 2> "$TMP/$name.log" &
    local pid=$!
    PIDS+=("$pid")
    printf -v "${name}_PID" '%s' "$pid"
}
# ns_worker HOST NAME ADDR:PORT ARGS...: a qworker in HOST listening on ADDR:PORT
ns_worker() {
    local h=$1 name=$2 at=$3
    shift 3
    bg "$h" "$name" "$BIN/qworker" -p "$at" --no-uds "$@"
    wait_line "$TMP/$name.out" "listening on" 60
}
# ns_gateway HOST NAME CONF: qgate in HOST with CONF (it must set port and bind)
ns_gateway() {
    bg "$1" "$2" "$BIN/qgate" -c "$3"
    wait_line "$TMP/$2.out" "qgate listening on" 30
}

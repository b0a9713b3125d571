#!/usr/bin/env bash
# The README's first command on a clean tree: the tracked files only (no build/, no
# bench/results/, as on a fresh clone), `make demo` on small data, and its table printed.
. "$(dirname "$0")/lib.sh"

TREE="$TMP/tree"
mkdir -p "$TREE"
git ls-files -z | xargs -0 cp --parents -t "$TREE"
[ ! -e "$TREE/bench/results" ] || fail "the clean tree already has bench/results"
( cd "$TREE" && DEMO_SECONDS=2 DEMO_ROWS=100000 timeout 600 make --no-print-directory -j2 demo ) \
    > "$TMP/demo.out" 2>&1 || fail "make demo on a clean tree failed: $(tail -n 30 "$TMP/demo.out")"
for t in direct gw30 qgate qgate-unix; do
    grep -qE "^\| scenario .*$t" "$TMP/demo.out" || fail "the demo's table has no $t column: $(tail -n 20 "$TMP/demo.out")"
done
expect_file_has "$TMP/demo.out" "^\| seed \| fast p99 ms"
expect_file_has "$TMP/demo.out" "^demo: every sample: bench/results/demo-"
pass "make demo on a clean tree (tracked files only) builds, runs and prints its table"

#!/bin/bash
# tests/layering/selftest.sh: check.sh passes on the tree, and fails on each kind of breach:
# an include up the layers, a cycle among the base modules, pool code calling a loop-only
# function, a loop-only function not named for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${1:?usage: selftest.sh build/rel/libqgate.a}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_fail() { # what, then the command
    local what=$1; shift
    if "$@" >"$tmp/out" 2>&1; then echo "FAIL: check.sh passed with $what"; cat "$tmp/out"; exit 1; fi
    grep -q '^FAIL' "$tmp/out" || { echo "FAIL: check.sh broke on $what"; cat "$tmp/out"; exit 1; }
}
bash tests/layering/check.sh "$lib"

cp -r src "$tmp/up" && sed -i '0,/#include "conn.h"/s//#include "conn.h"\n#include "client.h"/' "$tmp/up/core/conn.c"
expect_fail "conn.c including client.h" env SRC="$tmp/up" bash tests/layering/check.sh "$lib"

cp -r src "$tmp/cycle" && echo '#include "kcodec.h"' >>"$tmp/cycle/kdb/kipc.h"
expect_fail "a cycle kipc -> kcodec -> kipc" env SRC="$tmp/cycle" bash tests/layering/check.sh "$lib"

cat >"$tmp/evil.c" <<'C'
struct gw;
struct conn;
void conn_close_loop(struct gw *g, struct conn *c, const char *why);
void evil(struct gw *g, struct conn *c);
void evil(struct gw *g, struct conn *c) { conn_close_loop(g, c, "from a pool thread"); }
C
cc -c "$tmp/evil.c" -o "$tmp/jobs_extra.o"
cp "$lib" "$tmp/lib.a" && ar q "$tmp/lib.a" "$tmp/jobs_extra.o"
expect_fail "pool code calling conn_close_loop" bash tests/layering/check.sh "$tmp/lib.a"

cat >"$tmp/named.c" <<'C'
int dispatch_peek(void);
int dispatch_peek(void) { return 0; }
C
cat >"$tmp/upcall.c" <<'C'
struct gw;
void control_drain_loop(struct gw *g);
void kipc_up(struct gw *g);
void kipc_up(struct gw *g) { control_drain_loop(g); }
C
cc -c "$tmp/upcall.c" -o "$tmp/kipc.o"
mkdir "$tmp/y" && cp "$lib" "$tmp/lib3.a" && (cd "$tmp/y" && cp ../kipc.o . && ar r "$tmp/lib3.a" kipc.o)
expect_fail "kdb/kipc.o calling control_drain_loop (gateway/)" bash tests/layering/check.sh "$tmp/lib3.a"
cp -r src "$tmp/flat" && touch "$tmp/flat/stray.c"
expect_fail "a source file outside the folders" env SRC="$tmp/flat" bash tests/layering/check.sh "$lib"
cc -c "$tmp/named.c" -o "$tmp/dispatch.o"
mkdir "$tmp/x" && cp "$lib" "$tmp/lib2.a" && (cd "$tmp/x" && cp ../dispatch.o . && ar r "$tmp/lib2.a" dispatch.o)
expect_fail "dispatch.o exporting dispatch_peek" bash tests/layering/check.sh "$tmp/lib2.a"
echo "ok - layering check fails on an include up the layers, a cycle, a call up the layers, a file outside the folders, pool code calling the loop, a misnamed function"

#!/usr/bin/env bash
# seed.sh: build the fuzzers' starting corpora in build/fuzz/corpus/<target>/ (run by
# `make fuzz` and `make fuzz-smoke` through tests/fuzz/fuzz.mk; safe to rerun).
#   codec, frame, kzip, handshake: written by tests/fuzz/mkseed.c from the real-q vectors in
#     $QG_TESTDATA/qpython/*.out (default tests/data, as the unit tests); if those are
#     absent, mkseed builds a few objects itself and says so.
#   config: gateway.conf.example and the small configurations below.
#   proxy: PROXY protocol headers, v1 and v2.
#   auth: users files (users_file), taken and refused.
#   sim: byte strings made here from a fixed formula (every byte drives one choice).
#   every target: the regression inputs kept in tests/fuzz/regress/<target>/.
# Only build/fuzz/ is written; new corpus entries found by libFuzzer go there too.
set -euo pipefail
cd "$(dirname "$0")/../.."

CC_FUZZ=${FUZZ_CC:-clang}
OUT=build/fuzz/corpus
BIN=build/fuzz/mkseed
TESTDATA=${QG_TESTDATA:-tests/data}
mkdir -p "$OUT" build/fuzz

# the seed writer: a plain program (no fuzzer runtime) over the codec and compressor
if [ ! -x "$BIN" ] || [ -n "$(find tests/fuzz/mkseed.c src/kdb/kcodec.c src/kdb/kvalidate.c src/kdb/kipc.c src/kdb/kzip.c src/*/*.h -newer "$BIN" 2>/dev/null)" ]; then
    "$CC_FUZZ" -std=c17 -D_GNU_SOURCE -g -O1 $(for d in src/*/; do printf -- '-I%s ' "$d"; done) -Wall -Wextra -Werror \
        -o "$BIN" tests/fuzz/mkseed.c src/kdb/kcodec.c src/kdb/kvalidate.c src/kdb/kipc.c src/kdb/kzip.c
fi
"$BIN" "$TESTDATA" "$OUT"

# sim: a few byte strings (each byte is the next choice of the simulation); libFuzzer finds more
mkdir -p "$OUT/sim"
for n in 1 2 3 4; do
    awk -v n=$n 'BEGIN { s = n; for (i = 0; i < 2048; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%c", int(s / 65536) % 256 } }' > "$OUT/sim/seed-$n"
done

# config: the reference file, small valid configurations, and a few broken ones
C="$OUT/config"
mkdir -p "$C"
cp gateway.conf.example "$C/seed-example"
printf '[group main]\nworkers = localhost:5001,localhost:5002\n' >"$C/seed-min"
printf '[gateway]\nport = 0\nmax_message = 64m\nqueue_timeout = 5s\nloglevel = debug\ncompress = no\n\n[group a]\nworkers = h1:5001\nuser = u\npassword = p\nasync = broadcast\nusers = alice,bob\n\n[group b]\nworkers = :5002, 127.0.0.1:5003\n' >"$C/seed-two-groups"
printf '; comment\n# comment\n[gateway]\r\nclient_low_water = 1k\nclient_high_water = 64k\nreconnect_min = 10ms\nreconnect_max = 1s\n[group   x  ]\nworkers=localhost:1\n' >"$C/seed-units"
printf '[gateway]\nadmin_from = unix, loopback, 10.1.2.3, 192.168.0.0/16, ::1, fe80::/10\nproxy_from = 127.0.0.1\n[group g]\nworkers = a:1\n' >"$C/seed-addrs"
printf '[group g]\nworkers = host:99999\n' >"$C/seed-bad-port"
printf '[gateway]\nport = 65536\n' >"$C/seed-bad-range"
printf '[gatew\nport\n' >"$C/seed-bad-syntax"
printf '[group g]\nworkers = a:1\nasync = sometimes\n' >"$C/seed-bad-enum"
printf '[gateway]\nchunk_size = 9223372036854775807g\n' >"$C/seed-bad-overflow"

# proxy: PROXY headers as HAProxy sends them (v1 text, v2 binary: signature, version and
# command, family, length, addresses), each followed by a q handshake as a client's would be
P="$OUT/proxy"
mkdir -p "$P"
SIG='\r\n\r\n\0\r\nQUIT\n'
printf 'PROXY TCP6 2001:db8::7 ::1 40000 5000\r\nuser:pw\3\0' >"$P/seed-v1-tcp6"
printf 'PROXY UNKNOWN\r\n' >"$P/seed-v1-unknown"
printf "${SIG}"'\x20\x00\x00\x00' >"$P/seed-v2-local"
printf "${SIG}"'\x21\x21\x00\x24\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x07\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\x9c\x40\x13\x88user\3\0' >"$P/seed-v2-tcp6"
printf "${SIG}"'\x21\x11\x00\x13\xc0\xa8\x01\x07\x0a\0\0\x01\xc8\x22\x13\x88\x04\x00\x04abcd' >"$P/seed-v2-tlv"

# auth: users files: every form a line may take (comments, CRLF, digests in either case, a
# ':' in the password, options after a TAB, a bare TAB, no final newline), and refusals
A="$OUT/auth"
mkdir -p "$A"
printf '# users\n\nalice:secret\nbob:5ebe2294ecd0e0f08eab7690d2a6ee69\ncarol:E5E9FA1BA31ECD1AE84F75CAAA474F3A663F05F4\ndave:pa:ss\r\n\r\nfrank:\nhank:hunter2\tadmin=1,max_conns=5,max_inflight=2\r\njack:x y\tadmin=0,max_conns=0\nkim:tab\t\nmon:pw\tmonitor=1\nzed:last' >"$A/seed-forms"
printf 'bob:pw admin=1\n' >"$A/seed-bad-space-for-tab"
printf 'bob:pw\tadmin=1,monitor=1\n' >"$A/seed-bad-admin-monitor"
printf 'bob:pw\tmax_conns=99999999999\n' >"$A/seed-bad-overflow"
printf 'bob:a\nbob:b\n' >"$A/seed-bad-duplicate"
printf ' bob:pw\n' >"$A/seed-bad-space-name"

# regression inputs: every file of tests/fuzz/regress/<target>/
n=0
for d in tests/fuzz/regress/*/; do
    t=$(basename "$d")
    mkdir -p "$OUT/$t"
    for f in "$d"*; do
        [ -f "$f" ] || continue
        cp "$f" "$OUT/$t/regress-$(basename "$f")"
        n=$((n + 1))
    done
done
echo "seed: config seeds and $n regression inputs added; corpora in $OUT/"

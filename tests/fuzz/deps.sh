#!/usr/bin/env bash
# deps.sh: make sure clang and its libFuzzer runtime are there (run by tests/fuzz/fuzz.mk before
# building a fuzzer). Installs clang and libclang-rt-14-dev with apt-get when they are missing,
# as tests/deps.sh does for cmocka (sudo when not root).
set -euo pipefail
CC_FUZZ=${FUZZ_CC:-clang}

have_runtime() {
    command -v "$CC_FUZZ" >/dev/null 2>&1 || return 1
    local rt
    rt=$("$CC_FUZZ" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null) || return 1
    [ -f "$rt" ]
}

if ! have_runtime; then
    echo "fuzz deps: installing clang and libclang-rt-14-dev (libFuzzer runtime)"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
    if ! have_runtime; then
        echo "fuzz deps: $CC_FUZZ or libclang_rt.fuzzer-x86_64.a still missing" >&2
        exit 1
    fi
fi

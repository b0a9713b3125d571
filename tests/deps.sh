#!/usr/bin/env bash
# Install what `make test` needs on a fresh Debian machine: cmocka (apt-get), node-q (npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! [ -f /usr/include/cmocka.h ]; then
    echo "deps: installing libcmocka-dev"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libcmocka-dev >/dev/null
fi
if ! [ -d tests/interop/node_modules/node-q ]; then
    echo "deps: npm ci in tests/interop"
    (cd tests/interop && npm ci --no-audit --no-fund --loglevel=error)
fi

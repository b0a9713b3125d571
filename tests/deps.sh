#!/usr/bin/env bash
# Install what `make test` needs on a fresh Debian machine: cmocka, HAProxy (bench/run's proxy
# floor, tests/net/test_haproxy.sh's balancer), strace (its system-call counts), curl and
# promtool (the metrics page), openssl (that test's certificate) and socat (HAProxy's stats
# socket) with apt-get; node-q (npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=()
[ -f /usr/include/cmocka.h ] || PKGS+=(libcmocka-dev)
command -v haproxy > /dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || PKGS+=(haproxy)
command -v strace > /dev/null 2>&1 || PKGS+=(strace)
command -v curl > /dev/null 2>&1 || PKGS+=(curl)          # scrapes the metrics page
command -v ip > /dev/null 2>&1 || PKGS+=(iproute2)        # tests/net: namespaces, veth, tc
command -v promtool > /dev/null 2>&1 || PKGS+=(prometheus) # its promtool checks that page
command -v openssl > /dev/null 2>&1 || PKGS+=(openssl)     # tests/net/test_haproxy.sh: the TLS certificate
command -v socat > /dev/null 2>&1 || PKGS+=(socat)         # ... and HAProxy's stats socket
command -v groff > /dev/null 2>&1 || PKGS+=(groff-base)    # test_pkg.sh: the man page renders
command -v systemd-analyze > /dev/null 2>&1 || PKGS+=(systemd) # test_pkg.sh: the unit verified
command -v logrotate > /dev/null 2>&1 || PKGS+=(logrotate)  # ... and its logrotate file run
command -v lintian > /dev/null 2>&1 || PKGS+=(lintian)      # ... the .deb lintian-clean
command -v systemd-nspawn > /dev/null 2>&1 || PKGS+=(systemd-container) # ... and run under systemd
if [ ${#PKGS[@]} -gt 0 ]; then
    echo "deps: installing ${PKGS[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${PKGS[@]}" >/dev/null
fi
if ! [ -d tests/interop/node_modules/node-q ]; then
    echo "deps: npm ci in tests/interop"
    (cd tests/interop && npm ci --no-audit --no-fund --loglevel=error)
fi

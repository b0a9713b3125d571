#!/usr/bin/env bash
# Packaging: make install into a staging tree (PREFIX, DESTDIR), the man page (every key and
# command in it), the .deb of make deb (its metadata and files; lintian says nothing; the binary
# hardened: PIE, full RELRO, BIND_NOW, stack protector, fortified calls), installed with dpkg, its
# unit checked by systemd-analyze (verify, and security: 2.0 or better), the installed binary run
# as the unit runs it (its user, its command line, NOTIFY_SOCKET at a receiver of ours: READY=1,
# RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 and exit 0 on SIGTERM) answering .qgate.ping[]
# and a query through a worker, its access log rotated by the logrotate file, then removed and
# purged. Then the same package under systemd itself, in a throwaway container whose PID 1 is
# systemd (systemd-nspawn; our machines do not run systemd): installed (postinst starts the
# service), its sandbox in force, q's Unix socket both ways, the metrics port, logrotate's
# postrotate, systemctl reload and stop, a port below 1024 with the documented drop-in, removed
# and purged. Needs root and dpkg (fails otherwise), lintian and systemd-nspawn (tests/deps.sh);
# leaves the machine as it found it: no package, no qgate user it made, no process, no
# container or mount.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if [ "$(id -u)" != 0 ] || ! command -v dpkg-deb > /dev/null || ! command -v dpkg > /dev/null; then
    echo "FAIL: test_pkg.sh installs a .deb: it needs root and dpkg (run make test as root on Debian)" >&2
    exit 1
fi
if dpkg-query -W -f '${Status}' qgate 2> /dev/null | grep -qv "not-installed"; then
    fail "a qgate package is installed already: this test installs and purges its own"
fi
VERSION=$(sed -n 's/^#define QG_VERSION "\(.*\)"$/\1/p' "$ROOT/src/base/version.h")
ARCH=$(dpkg --print-architecture)
USER_BEFORE=0
getent passwd qgate > /dev/null && USER_BEFORE=1
INSTALLED=0

# lintian and systemd-nspawn come from tests/deps.sh (make test runs it)
for tool in lintian systemd-nspawn; do
    command -v "$tool" > /dev/null || fail "$tool is missing: tests/deps.sh installs it (make test runs it)"
done
NSPAWN_RUN_BEFORE=0
[ -e /run/systemd/nspawn ] && NSPAWN_RUN_BEFORE=1
CT= CT_NSPAWN= CT_PID=
BINA=$(cd "$BIN" && pwd) # the container's working folder is its root: absolute paths only
CT_BINDS=(--bind-ro="$ROOT")
case "$BINA/" in "$ROOT"/*) ;; *) CT_BINDS+=(--bind-ro="$BINA") ;; esac

# make without what the make running this test passed down (SANITIZE, its jobserver)
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$ROOT" SANITIZE= "$@"; }

# The container: this machine's own root as the lower layer of an overlay whose upper layer is a
# tmpfs (nothing it writes reaches the machine; /dev left empty, as systemd-nspawn wants it),
# booted by systemd-nspawn with systemd as PID 1 (to sysinit.target: none of this machine's
# services), its own network namespace (loopback only: its ports are its own), this tree and
# $BIN bound in read-only. ct CMD... runs CMD in it (all its namespaces).
# The container's PID 1: the child of systemd-nspawn in a PID namespace of its own. Not just its
# first child: that may be nspawn's short-lived outer child, which starts PID 1 and exits (a
# run that took it failed with "nsenter: stat of /proc/N/ns/user failed").
ct_pid1() {
    local p ns own
    own=$(readlink /proc/self/ns/pid)
    for p in $(pgrep -P "$CT_NSPAWN"); do
        ns=$(readlink "/proc/$p/ns/pid" 2> /dev/null) || continue
        [ "$ns" != "$own" ] && { echo "$p"; return 0; }
    done
    return 0
}
ct_boot() {
    CT=$(mktemp -d /tmp/qgate-ct.XXXXXX)
    mount -t tmpfs -o mode=0700 qgate-ct "$CT"
    mkdir "$CT/low" "$CT/up" "$CT/work" "$CT/root" "$CT/up/dev"
    mount --bind / "$CT/low"
    mount -o remount,bind,ro "$CT/low"
    local e
    for e in "$CT"/low/dev/* "$CT"/low/dev/.[!.]*; do
        if [ -e "$e" ] || [ -L "$e" ]; then mknod "$CT/up/dev/${e##*/}" c 0 0; fi # whiteouts
    done
    mount -t overlay qgate-ct -o "lowerdir=$CT/low,upperdir=$CT/up,workdir=$CT/work" "$CT/root"
    systemd-nspawn -q -D "$CT/root" -M "qgate-test-$$" --register=no --keep-unit --private-network \
        --console=pipe "${CT_BINDS[@]}" -b -- systemd.unit=sysinit.target \
        < /dev/null > "$TMP/ct-console.txt" 2>&1 &
    CT_NSPAWN=$!
    local i
    for i in $(seq 1 300); do
        kill -0 "$CT_NSPAWN" 2> /dev/null || fail "systemd-nspawn exited: $(tail -n 5 "$TMP/ct-console.txt")"
        [ -n "$CT_PID" ] || CT_PID=$(ct_pid1)
        if [ -n "$CT_PID" ] && nsenter -t "$CT_PID" -a systemctl is-system-running > "$TMP/ct-state.txt" 2>&1; then
            return 0
        fi
        grep -qx degraded "$TMP/ct-state.txt" 2> /dev/null && return 0
        sleep 0.1
    done
    fail "the container's systemd did not come up: $(cat "$TMP/ct-state.txt" 2> /dev/null) $(tail -n 5 "$TMP/ct-console.txt")"
}
ct() { nsenter -t "$CT_PID" -a "$@"; }
# cq TARGET QUERY...: qsend in the container; its output in $TMP/q.out
cq() { timeout --foreground 60 nsenter -t "$CT_PID" -a "$BINA/qsend" -g "$@" > "$TMP/q.out" 2>&1 || true; }
# ct_journal REGEX: qgate.service's journal in the container has a line matching REGEX
ct_journal() { ct journalctl -u qgate.service -o cat --no-pager > "$TMP/ct-journal.txt" 2>&1; grep -qE "$1" "$TMP/ct-journal.txt"; }
ct_show() { ct systemctl show -P "$1" qgate.service; }
# count_journal REGEX N: at least N such lines; worker_ready [PORT]: a query through qgate runs
count_journal() { ct_journal "$1" && [ "$(grep -cE "$1" "$TMP/ct-journal.txt")" -ge "$2" ]; }
worker_ready() { cq "127.0.0.1:${1:-8811}" "echo ready"; grep -qx '"ready"' "$TMP/q.out"; }
# the container powered off (SIGTERM to systemd-nspawn), then its mounts and folder gone
ct_stop() {
    if [ -n "$CT_NSPAWN" ] && kill -0 "$CT_NSPAWN" 2> /dev/null; then
        kill -TERM "$CT_NSPAWN" 2> /dev/null || true
        for _ in $(seq 1 300); do kill -0 "$CT_NSPAWN" 2> /dev/null || break; sleep 0.1; done
        kill -KILL "$CT_NSPAWN" 2> /dev/null || true
    fi
    [ -n "$CT_NSPAWN" ] && { wait "$CT_NSPAWN" 2> /dev/null || true; }
    CT_NSPAWN=
    if [ -n "$CT" ]; then
        umount "$CT/root" 2> /dev/null || true
        umount "$CT/low" 2> /dev/null || true
        umount "$CT" 2> /dev/null || true
        rmdir "$CT" 2> /dev/null || echo "FAIL: could not remove $CT (still mounted?)" >&2
        CT=
    fi
    if [ "$NSPAWN_RUN_BEFORE" = 0 ]; then # systemd-nspawn's lock and propagation folders, if empty
        rmdir /run/systemd/nspawn/propagate /run/systemd/nspawn/locks /run/systemd/nspawn 2> /dev/null || true
    fi
    return 0
}

# whatever happens: the gateway stopped, the package purged, the qgate user gone if we made it;
# then lib.sh's cleanup (the other processes, sanitizer reports, $TMP)
pkg_cleanup() {
    ct_stop
    if [ -n "${QG_PID:-}" ] && kill -0 "$QG_PID" 2> /dev/null; then
        kill -TERM "$QG_PID" 2> /dev/null || true
        for _ in $(seq 1 100); do kill -0 "$QG_PID" 2> /dev/null || break; sleep 0.05; done
        kill -9 "$QG_PID" 2> /dev/null || true
    fi
    if [ "$INSTALLED" = 1 ] || dpkg-query -W -f '${Status}' qgate 2> /dev/null | grep -qv "not-installed"; then
        dpkg --purge qgate > "$TMP/purge-on-exit.txt" 2>&1 || echo "FAIL: dpkg --purge qgate at exit" >&2
    fi
    if [ "$USER_BEFORE" = 0 ] && getent passwd qgate > /dev/null; then
        userdel qgate 2> /dev/null || true
    fi
    if [ "$USER_BEFORE" = 0 ] && getent group qgate > /dev/null; then
        groupdel qgate 2> /dev/null || true
    fi
    return 0
}
trap 'rc_=$?; set +e; pkg_cleanup; (exit $rc_); cleanup' EXIT

# --- make install: PREFIX and DESTDIR -------------------------------------------------------
S=$TMP/stage
mk install DESTDIR="$S" PREFIX=/usr > "$TMP/install.txt" 2>&1 || fail "make install: $(tail -n 5 "$TMP/install.txt")"
mode() { stat -c %a "$1" 2> /dev/null || echo missing; }
for f in usr/bin/qgate:755 usr/share/man/man1/qgate.1:644 usr/share/doc/qgate/gateway.conf.example:644 \
    usr/lib/systemd/system/qgate.service:644 etc/logrotate.d/qgate:644 etc/qgate/gateway.conf:644; do
    [ "$(mode "$S/${f%:*}")" = "${f#*:}" ] || fail "make install: $S/${f%:*} is $(mode "$S/${f%:*}"), want mode ${f#*:}"
done
"$S/usr/bin/qgate" --version > "$TMP/out"
expect_lines "$TMP/out" "^qgate $VERSION\$" 1
cmp -s "$ROOT/gateway.conf.example" "$S/usr/share/doc/qgate/gateway.conf.example" || fail "the example config differs"
# the installed README's links to docs/ lead somewhere (before, docs/ was not installed: helper round 33b)
links=$(grep -o '](docs/[^)#]*' "$S/usr/share/doc/qgate/README.md" | cut -c3- | sort -u)
[ -n "$links" ] || fail "no docs/ links found in the installed README"
for l in $links; do [ -f "$S/usr/share/doc/qgate/$l" ] || fail "the installed README links $l, which is not installed"; done
cmp -s "$ROOT/pkg/qgate.logrotate" "$S/etc/logrotate.d/qgate" || fail "the logrotate file differs"
UNIT=$S/usr/lib/systemd/system/qgate.service
expect_lines "$UNIT" '^Type=notify$' 1
expect_lines "$UNIT" '^ExecStart=/usr/bin/qgate -c /etc/qgate/gateway.conf$' 1
expect_lines "$UNIT" '^ExecReload=/bin/kill -HUP \$MAINPID$' 1
expect_lines "$UNIT" '^User=qgate$' 1
grep -qE '@[A-Z]+@' "$UNIT" && fail "a placeholder left in the unit: $(grep -E '@[A-Z]+@' "$UNIT")"
# the config installed is the example listening on this host only, and it is valid
diff "$ROOT/gateway.conf.example" "$S/etc/qgate/gateway.conf" > "$TMP/conf.diff" || true
expect_lines "$TMP/conf.diff" '^[<>]' 3
expect_lines "$TMP/conf.diff" '^< bind = 0\.0\.0\.0$' 1
expect_lines "$TMP/conf.diff" '^> bind = 127\.0\.0\.1$' 1
"$S/usr/bin/qgate" --check -c "$S/etc/qgate/gateway.conf" > "$TMP/out" 2>&1 || fail "--check on the installed config: $(cat "$TMP/out")"
expect_file_has "$TMP/out" "configuration ok: port 8811, 1 group, 2 workers"
# a second install keeps an operator's config; the default PREFIX puts everything under /usr/local
echo "# edited" >> "$S/etc/qgate/gateway.conf"
mk install DESTDIR="$S" PREFIX=/usr > "$TMP/install.txt" 2>&1 || fail "make install again"
expect_lines "$S/etc/qgate/gateway.conf" '^# edited$' 1
mk install DESTDIR="$TMP/local" > "$TMP/install.txt" 2>&1 || fail "make install (PREFIX /usr/local)"
expect_lines "$TMP/local/usr/local/lib/systemd/system/qgate.service" \
    '^ExecStart=/usr/local/bin/qgate -c /usr/local/etc/qgate/gateway.conf$' 1
for f in usr/local/bin/qgate usr/local/share/man/man1/qgate.1 usr/local/etc/logrotate.d/qgate usr/local/etc/qgate/gateway.conf; do
    [ -f "$TMP/local/$f" ] || fail "make install with the default PREFIX: no /$f"
done
mk uninstall DESTDIR="$TMP/local" > "$TMP/install.txt" 2>&1 || fail "make uninstall"
left=$(cd "$TMP/local" && find . -type f | sort | tr '\n' ' ')
[ "$left" = "./usr/local/etc/qgate/gateway.conf " ] || fail "make uninstall left $left (want only the config)"
pass "make install: binary, man page, example config, unit (ExecStart under PREFIX), logrotate file; a config kept; make uninstall"

# --- the man page: renders without a warning, names every key and every gateway command ------
MAN=$ROOT/pkg/qgate.1
groff -man -ww -z "$MAN" > "$TMP/groff.err" 2>&1 || fail "groff on qgate.1: $(cat "$TMP/groff.err")"
[ -s "$TMP/groff.err" ] && fail "groff warns on qgate.1: $(head -n 5 "$TMP/groff.err")"
if command -v man > /dev/null; then
    man --warnings -l "$MAN" > /dev/null 2> "$TMP/man.err" || fail "man -l qgate.1 failed"
    [ -s "$TMP/man.err" ] && fail "man warns on qgate.1: $(head -n 5 "$TMP/man.err")"
fi
"$S/usr/bin/qgate" --print-config | sed -n 's/^\([a-z_]*\) = .*/\1/p' > "$TMP/keys"
[ "$(wc -l < "$TMP/keys")" -gt 30 ] || fail "--print-config printed $(wc -l < "$TMP/keys") keys"
while read -r k; do
    grep -qF "\\fB$(sed 's/-/\\-/g' <<< "$k")\\fR = " "$MAN" || fail "qgate.1 does not document the key $k"
done < "$TMP/keys"
# the list of keys is the installed binary's own (make docs writes it from src/base/config.c)
sed -n '/^\.\\" the key list below is made by `make docs`/,/^\.\\" end of the key list made by make docs/p' \
    "$S/usr/share/man/man1/qgate.1" | sed '1d;$d' > "$TMP/man-keys"
[ -s "$TMP/man-keys" ] || fail "qgate.1 has no key list between the markers of make docs"
"$S/usr/bin/qgate" --print-config=man | cmp -s - "$TMP/man-keys" ||
    fail "qgate.1's key list is not what qgate --print-config=man prints: run make docs"
for c in $(cat "$ROOT/README.md" "$ROOT"/docs/*.md | grep -o '\.qgate\.[a-z]*' | sort -u); do
    [ "$c" = .qgate.name ] && continue # the docs' placeholder
    grep -qF "$c" "$MAN" || fail "qgate.1 does not document $c (the README or docs/ does)"
done
pass "qgate.1 renders without warnings; its key list is --print-config=man's; it documents every .qgate command"

# --- make deb: its metadata and files ---------------------------------------------------------
mk deb > "$TMP/deb.txt" 2>&1 || fail "make deb: $(tail -n 5 "$TMP/deb.txt")"
DEB=$ROOT/build/deb/qgate_${VERSION}_${ARCH}.deb
[ -f "$DEB" ] || fail "make deb made no $DEB: $(tail -n 3 "$TMP/deb.txt")"
dpkg-deb --field "$DEB" Package Version Architecture > "$TMP/fields"
expect_lines "$TMP/fields" "^Package: qgate\$" 1
expect_lines "$TMP/fields" "^Version: $VERSION\$" 1
expect_lines "$TMP/fields" "^Architecture: $ARCH\$" 1
dpkg-deb --field "$DEB" Depends > "$TMP/depends"
expect_file_has "$TMP/depends" '^libc6 \(>= [0-9.]+\), adduser$'
dpkg-deb --info "$DEB" > "$TMP/info"
for s in postinst prerm postrm conffiles md5sums; do expect_file_has "$TMP/info" " $s "; done
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles > "$TMP/conffiles"
expect_lines "$TMP/conffiles" '^/etc/qgate/gateway\.conf$' 1
expect_lines "$TMP/conffiles" '^/etc/logrotate\.d/qgate$' 1
dpkg-deb --contents "$DEB" > "$TMP/contents"
for f in ./usr/bin/qgate ./usr/share/man/man1/qgate.1.gz ./usr/share/doc/qgate/gateway.conf.example \
    ./usr/lib/systemd/system/qgate.service ./etc/logrotate.d/qgate ./etc/qgate/gateway.conf; do
    grep -qE " $f\$" "$TMP/contents" || fail "the .deb has no $f: $(cat "$TMP/contents")"
done
grep -v ' root/root ' "$TMP/contents" && fail "files in the .deb not owned by root"
pass "make deb: $(basename "$DEB"), depends $(cat "$TMP/depends"), conffiles, every file root's"

# --- lintian, the doc folder, the hardened binary ----------------------------------------------
lintian "$DEB" > "$TMP/lintian.txt" 2> "$TMP/lintian.err" || true # it says "running with root privileges" on stderr
[ -s "$TMP/lintian.txt" ] && fail "lintian $DEB: $(cat "$TMP/lintian.txt")"
grep -qiE "^(E|W|error|warning)[: ]" "$TMP/lintian.err" && fail "lintian failed: $(cat "$TMP/lintian.err")"
# with the pedantic, informational and experimental tags: only the one docs/deployment.md explains
lintian --pedantic -I -E "$DEB" > "$TMP/lintian-all.txt" 2> /dev/null || true
grep -v '^I: qgate: package-supports-alternative-init-but-no-init.d-script ' "$TMP/lintian-all.txt" > "$TMP/lintian-new.txt" || true
[ -s "$TMP/lintian-new.txt" ] && fail "lintian --pedantic -I -E has more to say: $(cat "$TMP/lintian-new.txt")"
for f in ./usr/share/doc/qgate/copyright ./usr/share/doc/qgate/changelog.gz; do
    grep -qE " $f\$" "$TMP/contents" || fail "the .deb has no $f"
done
X=$TMP/deb-x
dpkg-deb -x "$DEB" "$X"
expect_lines "$X/usr/share/doc/qgate/copyright" '^Format: https://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/$' 1
expect_lines "$X/usr/share/doc/qgate/copyright" '^Files: \*$' 1
gzip -dc "$X/usr/share/doc/qgate/changelog.gz" > "$TMP/changelog"
dpkg-parsechangelog -l "$TMP/changelog" -S Version > "$TMP/out" 2>&1 || fail "dpkg-parsechangelog: $(cat "$TMP/out")"
expect_lines "$TMP/out" "^$VERSION\$" 1
# what hardening-check and lintian's hardening tags look for, read with readelf
XB=$X/usr/bin/qgate
readelf -h "$XB" > "$TMP/elf-h"
readelf -d "$XB" > "$TMP/elf-d"
readelf -lW "$XB" > "$TMP/elf-l"
readelf --dyn-syms -W "$XB" > "$TMP/elf-syms"
expect_file_has "$TMP/elf-h" 'Type: +DYN'                        # PIE
expect_file_has "$TMP/elf-d" 'FLAGS_1.*PIE'
expect_file_has "$TMP/elf-l" '^ +GNU_RELRO '                     # RELRO ...
expect_file_has "$TMP/elf-d" '\(FLAGS\).*BIND_NOW'               # ... full: bound at start
expect_file_has "$TMP/elf-syms" ' __stack_chk_fail@'             # -fstack-protector-strong
expect_file_has "$TMP/elf-syms" ' __[a-z]+_chk@'                  # _FORTIFY_SOURCE=2
pass "lintian: nothing (with --pedantic -I -E: only the init.d note); copyright and changelog ($VERSION); PIE, full RELRO, stack protector, fortified calls"

# --- installed with dpkg ------------------------------------------------------------------------
INSTALLED=1
dpkg -i "$DEB" > "$TMP/dpkg-i.txt" 2>&1 || fail "dpkg -i: $(cat "$TMP/dpkg-i.txt")"
[ "$(dpkg-query -W -f '${Status}' qgate)" = "install ok installed" ] || fail "dpkg says $(dpkg-query -W -f '${Status}' qgate)"
[ -x /usr/bin/qgate ] || fail "no /usr/bin/qgate"
/usr/bin/qgate --version > "$TMP/out"
expect_lines "$TMP/out" "^qgate $VERSION\$" 1
getent passwd qgate > "$TMP/pw" || fail "postinst made no qgate user"
expect_file_has "$TMP/pw" '^qgate:x:[0-9]+:[0-9]+:.*:/nonexistent:/usr/sbin/nologin$'
[ "$(stat -c '%U:%G %a' /etc/qgate/gateway.conf)" = "root:qgate 640" ] ||
    fail "/etc/qgate/gateway.conf is $(stat -c '%U:%G %a' /etc/qgate/gateway.conf), want root:qgate 640"
if command -v man > /dev/null; then
    man -w qgate > "$TMP/out" 2>&1 || fail "man -w qgate: $(cat "$TMP/out")"
fi
pass "dpkg -i: /usr/bin/qgate, the qgate system user, the config root:qgate 0640"

# --- the unit, checked by systemd where it can be --------------------------------------------
IUNIT=/usr/lib/systemd/system/qgate.service
[ -f "$IUNIT" ] || fail "no $IUNIT"
if [ -d /run/systemd/system ]; then
    echo "# systemd runs here: the service is started by postinst"
fi
if command -v systemd-analyze > /dev/null; then
    set +e
    systemd-analyze verify "$IUNIT" > "$TMP/verify.out" 2>&1
    vrc=$?
    set -e
    # lines about other units (this machine's own) are not ours; none may be about qgate
    grep -E '(^|/)qgate\.service' "$TMP/verify.out" > "$TMP/verify.ours" || true
    [ -s "$TMP/verify.ours" ] && fail "systemd-analyze verify $IUNIT: $(cat "$TMP/verify.ours")"
    [ "$vrc" = 0 ] || grep -q . "$TMP/verify.out" || fail "systemd-analyze verify exited $vrc saying nothing"
    pass "systemd-analyze verify: nothing to say about qgate.service (exit $vrc)"
    # the sandbox, scored from the unit file (--offline: no systemd needed); the container
    # below scores the loaded unit too
    systemd-analyze security --offline=true --no-pager "$IUNIT" > "$TMP/security.txt" 2>&1 || true
    SCORE=$(sed -n 's/.*Overall exposure level for qgate\.service: \([0-9.]*\) .*/\1/p' "$TMP/security.txt")
    [ -n "$SCORE" ] || fail "systemd-analyze security --offline=true $IUNIT: $(tail -n 3 "$TMP/security.txt")"
    awk -v s="$SCORE" 'BEGIN { exit !(s <= 2.0) }' || fail "systemd-analyze security rates qgate.service $SCORE, want 2.0 or better: $(cat "$TMP/security.txt")"
    pass "systemd-analyze security --offline=true: qgate.service $SCORE ($(sed -n 's/.*Overall exposure level for qgate\.service: [0-9.]* \([A-Z]*\).*/\1/p' "$TMP/security.txt"))"
else
    fail "no systemd-analyze to verify the unit with (tests/deps.sh installs systemd)"
fi

# --- run as the unit runs it: its user, its command line, a notify socket -------------------
start_worker W --rows 1000
EXEC=$(sed -n 's/^ExecStart=//p' "$IUNIT")
RUNAS=$(sed -n 's/^User=//p' "$IUNIT")
[ "$EXEC" = "/usr/bin/qgate -c /etc/qgate/gateway.conf" ] || fail "ExecStart is '$EXEC'"
# the installed config, pointed at the stand-in worker and a free port (written in place:
# owner and mode stay those of the package)
AL=/var/log/qgate/access.log
sed -e 's/^port = .*/port = 0/' -e "s/^workers = .*/workers = 127.0.0.1:$W_PORT/" -e "s|^access_log = .*|access_log = $AL|" \
    /etc/qgate/gateway.conf > "$TMP/conf"
cat "$TMP/conf" > /etc/qgate/gateway.conf
# /var/log/qgate as systemd makes it for the unit's LogsDirectory= (the purge removes it)
install -d -o "$(sed -n 's/^User=//p' "$IUNIT")" -g "$(sed -n 's/^Group=//p' "$IUNIT")" \
    -m "$(sed -n 's/^LogsDirectoryMode=//p' "$IUNIT")" "/var/log/$(sed -n 's/^LogsDirectory=//p' "$IUNIT")"
NS="@qgate-test-pkg-$$"
"$BIN/qnotify" "$NS" > "$TMP/notify.out" 2> "$TMP/qnotify.log" &
PIDS+=($!)
wait_line "$TMP/notify.out" "^qnotify listening on $NS\$" 10
# shellcheck disable=SC2086 # ExecStart's words, as systemd splits them
NOTIFY_SOCKET=$NS setpriv --reuid="$RUNAS" --regid="$RUNAS" --init-groups --no-new-privs $EXEC > "$TMP/GW.out" 2> "$TMP/GW.log" &
QG_PID=$!
PIDS+=("$QG_PID")
wait_line "$TMP/GW.out" "^qgate listening on 127\.0\.0\.1:[0-9]+\$" 30
QG_PORT=$(sed -n 's/^qgate listening on .*:\([0-9]*\)$/\1/p' "$TMP/GW.out")
[ "$(awk '/^Uid:/ {print $2}' "/proc/$QG_PID/status")" = "$(id -u "$RUNAS")" ] || fail "qgate does not run as $RUNAS"
wait_line "$TMP/notify.out" "^1 pid=$QG_PID READY=1\$" 10
expect_lines "$TMP/notify.out" "^1 pid=$QG_PID MAINPID=$QG_PID\$" 1
expect_lines "$TMP/notify.out" "^1 pid=$QG_PID STATUS=listening on 127\.0\.0\.1:$QG_PORT\$" 1
G="127.0.0.1:$QG_PORT"
wait_line "$TMP/GW.log" "connected \\(capability 3\\)" 20
q ".qgate.ping[]" "echo through the package"
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" '^"through the package"$' 1
wait_count "$AL" " outcome=ok\$" 2 10
[ "$(stat -c %U "$AL")" = "$RUNAS" ] || fail "$AL belongs to $(stat -c %U "$AL"), not $RUNAS"
pass "the installed qgate, as the unit runs it (user $RUNAS): READY=1 with MAINPID; .qgate.ping[] and a query answered, in $AL"

# --- the logrotate file: the access log renamed, qgate told (SIGUSR1), a new file written ------
if command -v logrotate > /dev/null; then
    logrotate -d -s "$TMP/logrotate.state" /etc/logrotate.d/qgate > "$TMP/logrotate-d.txt" 2>&1 ||
        fail "logrotate -d: $(cat "$TMP/logrotate-d.txt")"
    grep -iE "error|warning" "$TMP/logrotate-d.txt" | grep -v "in debug mode does nothing" &&
        fail "logrotate -d complains about /etc/logrotate.d/qgate"
    # its postrotate's systemctl finds no systemd here and says nothing: SIGUSR1 is sent below
    logrotate -f -s "$TMP/logrotate.state" /etc/logrotate.d/qgate > "$TMP/logrotate-f.txt" 2>&1 ||
        fail "logrotate -f: $(cat "$TMP/logrotate-f.txt")"
    [ "$(stat -c '%U:%G %a %s' "$AL")" = "qgate:qgate 640 0" ] || fail "the new $AL is $(stat -c '%U:%G %a %s' "$AL")"
    how="logrotate -f"
else
    mv "$AL" "$AL.1"
    how="mv (no logrotate here)"
fi
expect_lines "$AL.1" " outcome=ok\$" 2
kill -USR1 "$QG_PID" # what the postrotate does: systemctl kill --signal=USR1 qgate.service
wait_line "$TMP/GW.log" "access log reopened: $AL\$" 10
q "echo after the rotation"
expect_lines "$TMP/q.out" '^"after the rotation"$' 1
wait_count "$AL" " outcome=ok\$" 1 10
expect_lines "$AL.1" " outcome=ok\$" 2
pass "rotation ($how): after SIGUSR1 qgate writes the new $AL, the old one is left alone"

kill -HUP "$QG_PID"
wait_line "$TMP/notify.out" "^2 pid=$QG_PID RELOADING=1\$" 10
expect_lines "$TMP/notify.out" "^2 pid=$QG_PID MONOTONIC_USEC=[0-9]+\$" 1
wait_line "$TMP/notify.out" "^3 pid=$QG_PID READY=1\$" 10
expect_lines "$TMP/notify.out" "^3 pid=$QG_PID STATUS=listening on 127\.0\.0\.1:$QG_PORT; reloaded\$" 1
q ".qgate.ping[]"
expect_lines "$TMP/q.out" '^1b$' 1
pass "SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1 once reloaded"

kill -TERM "$QG_PID"
wait_exit "$QG_PID" 20
[ "$EXIT_STATUS" = 0 ] || fail "qgate exited $EXIT_STATUS on SIGTERM"
expect_lines "$TMP/notify.out" "^4 pid=$QG_PID STOPPING=1\$" 1
expect_lines "$TMP/notify.out" "^[0-9]+ " 8 # nothing else was sent
pass "SIGTERM: STOPPING=1, exit 0"

# --- removed, then purged -------------------------------------------------------------------
dpkg -r qgate > "$TMP/dpkg-r.txt" 2>&1 || fail "dpkg -r: $(cat "$TMP/dpkg-r.txt")"
[ -e /usr/bin/qgate ] && fail "dpkg -r left /usr/bin/qgate"
[ -e "$IUNIT" ] && fail "dpkg -r left $IUNIT"
[ -f /etc/qgate/gateway.conf ] || fail "dpkg -r removed the conffile (only purge should)"
[ "$(dpkg-query -W -f '${Status}' qgate)" = "deinstall ok config-files" ] || fail "after dpkg -r: $(dpkg-query -W -f '${Status}' qgate)"
dpkg --purge qgate > "$TMP/dpkg-purge.txt" 2>&1 || fail "dpkg --purge: $(cat "$TMP/dpkg-purge.txt")"
INSTALLED=0
for f in /etc/qgate /etc/logrotate.d/qgate /etc/systemd/system/qgate.service \
    /etc/systemd/system/multi-user.target.wants/qgate.service /var/lib/systemd/deb-systemd-helper-enabled/qgate.service; do
    [ -e "$f" ] || [ -L "$f" ] && fail "dpkg --purge left $f"
done
dpkg-statoverride --list /etc/qgate/gateway.conf > /dev/null && fail "dpkg --purge left the statoverride"
dpkg-query -W qgate > /dev/null 2>&1 && fail "dpkg still knows qgate after the purge: $(dpkg-query -W -f '${Status}' qgate)"
pass "dpkg -r: the binary and unit gone, the config kept; dpkg --purge: nothing of qgate left"

# --- under systemd: the package in a container whose PID 1 is systemd ---------------------------
# Everything above runs qgate as the unit would; here systemd itself runs it, with the unit's
# sandbox (systemd is not PID 1 on our machines: systemd-nspawn boots it in a throwaway container).
ct_boot
pass "a container booted with systemd as PID 1 ($(ct systemctl is-system-running 2>&1 || true)), its own loopback network"
# an image's "start no service" policy (Docker-made machines have one) is the machine's, not the
# package's: the container's copy goes, so postinst starts the service as on a real system
ct rm -f /usr/sbin/policy-rc.d
if ct dpkg-query -W -f '${Status}' qgate 2> /dev/null | grep -qv "not-installed"; then ct dpkg --purge qgate > /dev/null 2>&1; fi
# the workers the installed config names (localhost:5001, localhost:5002), as systemd services;
# qgate reaches them over q's Unix socket (@/tmp/kx.PORT, local_workers = unix)
for p in 5001 5002; do
    ct systemd-run -q --unit="qgate-test-w$p" "$BINA/qworker" -p "127.0.0.1:$p" --rows 1000 > "$TMP/out" 2>&1 ||
        fail "systemd-run qworker: $(cat "$TMP/out")"
done
worker_up() { timeout --foreground 5 nsenter -t "$CT_PID" -a "$BINA/qsend" -g "127.0.0.1:$1" "echo up" > /dev/null 2>&1; }
wait_for 20 "the container's worker on 5001" worker_up 5001
wait_for 20 "the container's worker on 5002" worker_up 5002
ct dpkg -i "$DEB" > "$TMP/ct-dpkg-i.txt" 2>&1 || fail "dpkg -i in the container: $(cat "$TMP/ct-dpkg-i.txt")"
[ "$(ct systemctl is-active qgate.service || true)" = active ] ||
    fail "postinst did not start qgate.service: $(ct systemctl status --no-pager qgate.service 2>&1 | tail -n 15)"
[ "$(ct systemctl is-enabled qgate.service || true)" = enabled ] || fail "qgate.service is not enabled"
[ "$(ct_show StatusText)" = "listening on 127.0.0.1:8811" ] || fail "StatusText is '$(ct_show StatusText)'"
MAINPID=$(ct_show MainPID)
pass "dpkg -i under systemd: postinst enabled and started qgate.service (Type=notify: READY=1), main pid $MAINPID"

# the sandbox, as the kernel applies it to the main process
ct cat "/proc/$MAINPID/status" > "$TMP/ct-status"
QUID=$(ct id -u qgate)
expect_lines "$TMP/ct-status" "^Uid:\s+$QUID\s+$QUID\s+$QUID\s+$QUID\$" 1
for c in CapInh CapPrm CapEff CapBnd CapAmb; do expect_lines "$TMP/ct-status" "^$c:\s+0+\$" 1; done
expect_lines "$TMP/ct-status" '^NoNewPrivs:\s+1$' 1
expect_lines "$TMP/ct-status" '^Seccomp:\s+2$' 1
ct cat "/proc/$MAINPID/mountinfo" > "$TMP/ct-mounts"
awk '$5 == "/" { print $6 }' "$TMP/ct-mounts" | tail -n 1 | grep -qE '(^|,)ro(,|$)' || fail "/ is not read-only for qgate: $(awk '$5 == "/"' "$TMP/ct-mounts")"
awk '$5 == "/var/log/qgate" { print $6 }' "$TMP/ct-mounts" | tail -n 1 | grep -qE '(^|,)rw(,|$)' || fail "/var/log/qgate is not writable for qgate"
awk '$5 == "/tmp" { n++ } END { exit !n }' "$TMP/ct-mounts" || fail "qgate has no /tmp of its own (PrivateTmp)"
# PrivateDevices: a /dev of its own (a read-only tmpfs; the container's is writable), no disk
awk '$5 == "/dev" { print $6 }' "$TMP/ct-mounts" | tail -n 1 | grep -qE '(^|,)ro(,|$)' ||
    fail "qgate has the container's /dev (PrivateDevices): $(awk '$5 == "/dev"' "$TMP/ct-mounts")"
ct systemd-analyze security --no-pager qgate.service > "$TMP/ct-security.txt" 2>&1 || true
CT_SCORE=$(sed -n 's/.*Overall exposure level for qgate\.service: \([0-9.]*\) .*/\1/p' "$TMP/ct-security.txt")
[ -n "$CT_SCORE" ] && awk -v s="$CT_SCORE" 'BEGIN { exit !(s <= 2.0) }' ||
    fail "systemd-analyze security qgate.service (loaded): '$CT_SCORE': $(tail -n 3 "$TMP/ct-security.txt")"
pass "the sandbox in force: uid qgate, no capability, no new privileges, a seccomp filter, / read-only but /var/log/qgate, its own /tmp and /dev; systemd-analyze security of the loaded unit: $CT_SCORE"

# q's Unix socket: qgate to its workers, and a client to qgate; TCP too
wait_for 30 "qgate connected to both workers over q's Unix socket" \
    count_journal 'w localhost:500[12]: connected \(capability 3\) over unix @/tmp/kx\.500[12]$' 2
cq 127.0.0.1:8811 ".qgate.ping[]" "echo over tcp under systemd"
expect_lines "$TMP/q.out" '^1b$' 1
expect_lines "$TMP/q.out" '^"over tcp under systemd"$' 1
cq unix:8811 "echo over q's Unix socket"
expect_lines "$TMP/q.out" "^\"over q's Unix socket\"\$" 1
pass "under the sandbox: workers reached over @/tmp/kx.PORT; clients answered over TCP and over q's Unix socket (unix:8811)"

# the access log in /var/log/qgate and the metrics port: a restart (metrics_port needs one)
ct sed -i -e 's|^access_log = .*|access_log = /var/log/qgate/access.log|' -e 's|^metrics_port = .*|metrics_port = 9811|' /etc/qgate/gateway.conf
[ "$(ct stat -c '%U:%G %a' /etc/qgate/gateway.conf)" = "root:qgate 640" ] || fail "the edited config lost its owner or mode"
ct systemctl restart qgate.service || fail "systemctl restart: $(ct systemctl status --no-pager qgate.service 2>&1 | tail -n 15)"
MAINPID=$(ct_show MainPID)
metrics_ok() { ct curl -s --max-time 5 http://127.0.0.1:9811/metrics > "$TMP/ct-metrics.txt" 2>&1 && grep -q '^qgate_' "$TMP/ct-metrics.txt"; }
wait_for 20 "the metrics page on 127.0.0.1:9811" metrics_ok
wait_for 30 "a worker after the restart" worker_ready
cq 127.0.0.1:8811 "echo one"
expect_lines "$TMP/q.out" '^"one"$' 1
cq unix:8811 "echo two"
expect_lines "$TMP/q.out" '^"two"$' 1
CT_AL=/var/log/qgate/access.log
al_count() { local n; n=$(ct grep -c " outcome=ok\$" "$1" 2> /dev/null || true); [ "${n:-0}" -ge "$2" ]; }
wait_for 20 "2 lines in the container's $CT_AL" al_count "$CT_AL" 2
[ "$(ct stat -c '%U:%G %a' "$CT_AL")" = "qgate:qgate 640" ] || fail "$CT_AL is $(ct stat -c '%U:%G %a' "$CT_AL")"
pass "metrics on 127.0.0.1:9811 ($(grep -c '^qgate_' "$TMP/ct-metrics.txt") samples); the access log written in /var/log/qgate (qgate:qgate 0640)"

# logrotate as cron runs it: its postrotate's systemctl kill --signal=USR1 reaches qgate
ct logrotate -f /etc/logrotate.d/qgate > "$TMP/ct-logrotate.txt" 2>&1 || fail "logrotate -f: $(cat "$TMP/ct-logrotate.txt")"
wait_for 10 "qgate reopening its access log on logrotate's SIGUSR1" ct_journal "access log reopened: $CT_AL\$"
cq 127.0.0.1:8811 "echo after the rotation"
expect_lines "$TMP/q.out" '^"after the rotation"$' 1
wait_for 20 "a line in the new $CT_AL" al_count "$CT_AL" 1
al_count "$CT_AL.1" 2 || fail "$CT_AL.1 lost its lines"
[ "$(ct_show MainPID)" = "$MAINPID" ] || fail "qgate restarted during the rotation"
pass "logrotate -f: the log renamed, qgate told by systemctl kill --signal=USR1, the new $CT_AL written"

# systemctl reload: SIGHUP; outside /var/log/qgate nothing is writable (ProtectSystem=strict)
ct sed -i -e 's|^access_log = .*|access_log = /var/lib/qgate-test.log|' /etc/qgate/gateway.conf
ct systemctl reload qgate.service || fail "systemctl reload: $(ct systemctl status --no-pager qgate.service 2>&1 | tail -n 15)"
wait_for 10 "the reload" ct_journal 'reload: done'
wait_for 10 "the refused access log" ct_journal '^.* access_log /var/lib/qgate-test\.log: Read-only file system'
[ "$(ct_show MainPID)" = "$MAINPID" ] && [ "$(ct systemctl is-active qgate.service || true)" = active ] || fail "qgate did not stay up over the reload"
cq unix:8811 ".qgate.ping[]"
expect_lines "$TMP/q.out" '^1b$' 1
ct sed -i -e "s|^access_log = .*|access_log = $CT_AL|" /etc/qgate/gateway.conf
ct systemctl reload qgate.service
pass "systemctl reload: same pid, still answering; an access_log outside /var/log/qgate: Read-only file system"

# a port below 1024: refused as the unit stands, served with the drop-in docs/deployment.md gives
[ "$(ct_show NRestarts)" = 0 ] || fail "qgate.service restarted by itself $(ct_show NRestarts) times (a seccomp kill?): $(ct journalctl -u qgate.service -o cat --no-pager | tail -n 20)"
ct sed -i -e 's|^port = .*|port = 811|' /etc/qgate/gateway.conf
ct systemctl restart qgate.service > /dev/null 2>&1 || true
wait_for 10 "qgate refused port 811" ct_journal 'cannot listen on 127\.0\.0\.1:811: Permission denied'
ct mkdir -p /etc/systemd/system/qgate.service.d
printf '[Service]\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n' |
    ct tee /etc/systemd/system/qgate.service.d/low-port.conf > /dev/null
ct systemctl daemon-reload
ct systemctl reset-failed qgate.service 2> /dev/null || true
ct systemctl restart qgate.service || fail "with the low-port drop-in: $(ct systemctl status --no-pager qgate.service 2>&1 | tail -n 15)"
[ "$(ct_show StatusText)" = "listening on 127.0.0.1:811" ] || fail "with the drop-in: StatusText '$(ct_show StatusText)'"
ct cat "/proc/$(ct_show MainPID)/status" > "$TMP/ct-status"
for c in CapEff CapBnd CapAmb; do expect_lines "$TMP/ct-status" "^$c:\s+0+400\$" 1; done # CAP_NET_BIND_SERVICE alone
wait_for 30 "a worker on port 811" worker_ready 811
cq 127.0.0.1:811 "echo on a low port"
expect_lines "$TMP/q.out" '^"on a low port"$' 1
ct rm -r /etc/systemd/system/qgate.service.d
ct sed -i -e 's|^port = .*|port = 8811|' /etc/qgate/gateway.conf
ct systemctl daemon-reload
ct systemctl restart qgate.service
pass "port 811: Permission denied as packaged; with CapabilityBoundingSet= and AmbientCapabilities=CAP_NET_BIND_SERVICE in a drop-in, served (that capability alone)"

# systemctl stop drains; then dpkg -r (prerm stops it) and the purge
ct systemctl stop qgate.service
[ "$(ct_show Result)" = success ] && [ "$(ct_show ExecMainStatus)" = 0 ] ||
    fail "systemctl stop: Result $(ct_show Result), status $(ct_show ExecMainStatus)"
ct_journal 'drained: exiting' || fail "no drain in the journal on systemctl stop"
ct journalctl -o cat --no-pager > "$TMP/ct-all.txt" 2>&1 || true
grep -iE 'qgate.*(SIGSYS|Bad system call|core-dump|code=killed)' "$TMP/ct-all.txt" && fail "qgate was killed (the seccomp filter?)"
ct systemctl start qgate.service
ct dpkg -r qgate > "$TMP/ct-dpkg-r.txt" 2>&1 || fail "dpkg -r in the container: $(cat "$TMP/ct-dpkg-r.txt")"
[ "$(ct systemctl is-active qgate.service || true)" != active ] || fail "prerm left qgate.service running"
ct pgrep -x qgate > /dev/null && fail "a qgate process is left after dpkg -r"
ct dpkg --purge qgate > "$TMP/ct-dpkg-purge.txt" 2>&1 || fail "dpkg --purge in the container: $(cat "$TMP/ct-dpkg-purge.txt")"
for f in /var/log/qgate /etc/qgate /etc/systemd/system/multi-user.target.wants/qgate.service; do
    ct test -e "$f" && fail "dpkg --purge left $f in the container"
done
ct_stop
pass "systemctl stop: drained, exit 0, never killed; dpkg -r stopped it (prerm); the purge left nothing; the container gone"

#!/usr/bin/env bash
# Packaging: make install into a staging tree (PREFIX, DESTDIR), the man page (every key and
# command in it), the .deb of make deb (its metadata and files), installed with dpkg, its unit
# checked by systemd-analyze, the installed binary run as the unit runs it (its user, its
# command line, NOTIFY_SOCKET at a receiver of ours: READY=1, RELOADING=1 then READY=1 on
# SIGHUP, STOPPING=1 and exit 0 on SIGTERM) answering .qgate.ping[] and a query through a
# worker, its access log rotated by the logrotate file, then removed and purged. Needs root and dpkg (fails otherwise); leaves the machine
# as it found it: no package, no qgate user it made, no process.
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

# make without what the make running this test passed down (SANITIZE, its jobserver)
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$ROOT" SANITIZE= "$@"; }

# whatever happens: the gateway stopped, the package purged, the qgate user gone if we made it;
# then lib.sh's cleanup (the other processes, sanitizer reports, $TMP)
pkg_cleanup() {
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
cmp -s "$ROOT/pkg/qgate.logrotate" "$S/etc/logrotate.d/qgate" || fail "the logrotate file differs"
UNIT=$S/usr/lib/systemd/system/qgate.service
expect_lines "$UNIT" '^Type=notify$' 1
expect_lines "$UNIT" '^ExecStart=/usr/bin/qgate -c /etc/qgate/gateway.conf$' 1
expect_lines "$UNIT" '^ExecReload=/bin/kill -HUP \$MAINPID$' 1
expect_lines "$UNIT" '^User=qgate$' 1
grep -q '@' "$UNIT" && fail "a placeholder left in the unit: $(grep '@' "$UNIT")"
# the config installed is the example listening on this host only, and it is valid
diff "$ROOT/gateway.conf.example" "$S/etc/qgate/gateway.conf" > "$TMP/conf.diff" || true
expect_lines "$TMP/conf.diff" '^[<>]' 3
expect_lines "$TMP/conf.diff" '^< bind = 0\.0\.0\.0$' 1
expect_lines "$TMP/conf.diff" '^> bind = 127\.0\.0\.1$' 1
"$S/usr/bin/qgate" --check -c "$S/etc/qgate/gateway.conf" > "$TMP/out" 2>&1 || fail "--check on the installed config: $(cat "$TMP/out")"
expect_file_has "$TMP/out" "configuration ok: port 8811, 1 groups, 2 workers"
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

#!/usr/bin/env bash
# --check refuses what would fail or mean something else (issue 23), with the file and line of
# each: a section or key given twice, ports that clash, an access log qgate could not write, a
# users file line that does not read exactly; startup and a reload refuse the same files (a
# reload keeps the running configuration and logs why); --print-config -c FILE prints what
# would run.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 100
start_worker W2 --rows 100
W1A=127.0.0.1:$W1_PORT

# check_refuses WHAT FILE REGEX [ARGS...]: qgate --check -c FILE ARGS exits 1, its stderr one
# line matching REGEX, nothing on stdout
check_refuses() {
    local what=$1 file=$2 re=$3
    shift 3
    set +e; "$BIN/qgate" --check -c "$file" "$@" > "$TMP/out" 2> "$TMP/err"; rc=$?; set -e
    [ "$rc" -eq 1 ] || fail "--check accepted $what (exit $rc): $(cat "$TMP/out" "$TMP/err")"
    expect_lines "$TMP/err" "$re" 1
    [ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "--check on $what said more than one line: $(cat "$TMP/err")"
    [ -s "$TMP/out" ] && fail "--check on $what printed on stdout: $(cat "$TMP/out")"
    return 0
}
# re TEXT: TEXT as an extended regex that matches it literally
# shellcheck disable=SC2016 # the $ is sed's, in a bracket
re() { sed 's/[][\.*^$(){}+?|]/\\&/g' <<< "$1"; }

# --- a section or a key given twice: the second is refused, naming the first ------------------
C=$TMP/c.conf
printf '[gateway]\nbind = 127.0.0.1\n\n[group main]\nworkers = %s\n\n[group main]\nworkers = 127.0.0.1:%s\n' "$W1A" "$W2_PORT" > "$C"
check_refuses "a second [group main]" "$C" "^$(re "qgate: $C:7: [group main] again (first at line 4)")\$"
printf '[gateway]\nport = 8811\n[group main]\nworkers = %s\n[gateway]\nbind = 127.0.0.1\n' "$W1A" > "$C"
check_refuses "a second [gateway]" "$C" "^$(re "qgate: $C:5: [gateway] again (first at line 1)")\$"
printf '# gw\n[gateway]\nbind = 127.0.0.1\nport = 8811\nmax_queue = 5\n\n\n\nport = 8812\n[group main]\nworkers = %s\n' "$W1A" > "$C"
check_refuses "port twice" "$C" "^$(re "qgate: $C:9: port again (first at line 4)")\$"
printf '[group main]\nworkers = %s\npool = session\nworkers = 127.0.0.1:%s\n' "$W1A" "$W2_PORT" > "$C"
check_refuses "workers twice in a group" "$C" "^$(re "qgate: $C:4: workers again (first at line 2)")\$"
pass "--check: a second [group main] or [gateway], a key given twice: file:line of both"

# --- ports that clash ----------------------------------------------------------------------
printf '[gateway]\nport = 18811\nmetrics_port = 18811\n[group main]\nworkers = %s\n' "$W1A" > "$C"
check_refuses "metrics_port = port" "$C" \
    "^$(re "qgate: $C:3: metrics_port 18811 clashes with port (line 2): both would listen on 0.0.0.0:18811; give metrics_port a port of its own")\$"
printf '[gateway]\nbind = 127.0.0.1\nmetrics_port = 18811\n[group main]\nworkers = %s\n' "$W1A" > "$C"
check_refuses "metrics_port = the port given by -p" "$C" \
    "^$(re "qgate: $C:3: metrics_port 18811 clashes with port (command line): both would listen on 127.0.0.1:18811;")" -p 18811
printf '[gateway]\nport = 18811\nbind = 127.0.0.1\nmetrics_port = 18811\nmetrics_bind = 0.0.0.0\n[group main]\nworkers = %s\n' "$W1A" > "$C"
check_refuses "metrics_bind 0.0.0.0 over bind's port" "$C" \
    "^$(re "qgate: $C:4: metrics_port 18811 clashes with port (line 2): both would listen on port 18811 (bind 127.0.0.1, metrics_bind 0.0.0.0)")"
printf '[gateway]\nport = 18811\n[group main]\nworkers = %s, localhost:18811\n' "$W1A" > "$C"
check_refuses "a worker that is the gateway" "$C" \
    "^$(re "qgate: $C:4: group main: worker 'localhost:18811' is this gateway's own port (line 2): it would send its clients' queries to itself")\$"
printf '[gateway]\nport = 18811\nmetrics_port = 18812\n[group main]\nworkers = 127.0.0.1:18812\n' > "$C"
check_refuses "a worker that is the metrics port" "$C" \
    "^$(re "qgate: $C:5: group main: worker '127.0.0.1:18812' is this gateway's own metrics_port (line 3): that serves HTTP, not q")\$"
printf '[gateway]\nport = 18811\n[group main]\nworkers = localhost:%s, 127.0.0.1:%s\n' "$W2_PORT" "$W2_PORT" > "$C"
check_refuses "a worker listed twice" "$C" \
    "^$(re "qgate: $C:4: group main: worker '127.0.0.1:$W2_PORT' listed twice (first as 'localhost:$W2_PORT'): one q process, not two workers; for more connections to one worker, pipeline = N")\$"
printf '[gateway]\nport = 18811\nbind = 127.0.0.1\nmetrics_port = 18811\nmetrics_bind = 127.0.0.2\n[group main]\nworkers = %s\n' "$W1A" > "$C"
"$BIN/qgate" --check -c "$C" > "$TMP/out" 2>&1 || fail "--check refused two addresses of one port: $(cat "$TMP/out")"
# startup refuses it before it listens
printf '[gateway]\nmetrics_port = 18820\nbind = 127.0.0.1\n[group main]\nworkers = %s\n' "$W1A" > "$C"
set +e; "$BIN/qgate" -c "$C" -p 18820 > "$TMP/start.out" 2> "$TMP/start.err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "qgate started with metrics_port = port (exit $rc)"
expect_lines "$TMP/start.err" "^$(re "qgate: $C:2: metrics_port 18820 clashes with port (command line)")" 1
grep -q "listening" "$TMP/start.out" && fail "qgate listened before refusing"
pass "--check and startup: metrics_port on port's address, a worker that is the gateway itself or listed twice"

# --- the access log: its directory as the user running the check -----------------------------
mkdir "$TMP/logs"
printf '[gateway]\naccess_log = %s\n[group main]\nworkers = %s\n' "$TMP/nope/access.log" "$W1A" > "$C"
check_refuses "an access_log in a missing directory" "$C" \
    "^$(re "qgate: $C:2: access_log $TMP/nope/access.log: directory $TMP/nope does not exist")\$"
printf '[gateway]\naccess_log = %s\n[group main]\nworkers = %s\n' "$TMP/logs" "$W1A" > "$C"
check_refuses "an access_log that is a directory" "$C" "^$(re "qgate: $C:2: access_log $TMP/logs: is a directory")\$"
printf '[gateway]\naccess_log = %s\n[group main]\nworkers = %s\n' "$TMP/logs/access.log" "$W1A" > "$C"
"$BIN/qgate" --check -c "$C" > "$TMP/out" 2>&1 || fail "--check refused a writable access_log: $(cat "$TMP/out")"
[ -e "$TMP/logs/access.log" ] && fail "--check made the access log"
# a directory the user running the check may not write: as root, checked as nobody
mkdir -m 0555 "$TMP/ro"
printf '[gateway]\naccess_log = %s\n[group main]\nworkers = %s\n' "$TMP/ro/access.log" "$W1A" > "$C"
as=() who=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
    who=nobody
    command -v setpriv > /dev/null && id nobody > /dev/null 2>&1 ||
        fail "run as root, this test checks as nobody: it needs setpriv (util-linux) and a user nobody"
    chmod 0755 "$TMP" && chmod 0644 "$C"
    as=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
fi
set +e; "${as[@]}" "$BIN/qgate" --check -c "$C" > "$TMP/out" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "--check accepted an access_log in a directory it may not write (exit $rc)"
expect_lines "$TMP/err" "^$(re "qgate: $C:2: access_log $TMP/ro/access.log: directory $TMP/ro is not writable by user $who") \\(uid [0-9]+\\): Permission denied\$" 1
chmod 0700 "$TMP"
pass "--check: an access_log in a missing directory, a directory, one not writable by the user checking: key, path and why"

# --- the users file: a line that does not read exactly ---------------------------------------
U=$TMP/users
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = %s\n' "$U" "$W1A" > "$C"
printf 'alice:wonder\tadmin=1\nbob:pw admin=1\n' > "$U"
check_refuses "a space for the TAB" "$C" \
    "^$(re "qgate: $C:2: users_file $U:2: user 'bob': a space before 'admin=' in the password: options follow a TAB, not a space")"
printf 'alice:wonder\tadmin=1\n# bob\nbob:pw\tmax_conns=2,max_conns=3\n' > "$U"
check_refuses "an option twice" "$C" "^$(re "qgate: $C:2: users_file $U:3: option max_conns given twice")\$"
printf 'alice:wonder\tadmin=1\nbob:pw\tadmin=yes\n' > "$U"
check_refuses "a bad value" "$C" "^$(re "qgate: $C:2: users_file $U:2: admin: 'yes' is not 0 or 1")\$"
printf 'alice:wonder\tadmin=1\nbob:pw\tcolour=red\n' > "$U"
check_refuses "an unknown option" "$C" "^$(re "qgate: $C:2: users_file $U:2: unknown option 'colour'")\$"
printf 'alice:wonder\tadmin=1\nbob:pw\nalice:other\n' > "$U"
check_refuses "a user twice" "$C" "^$(re "qgate: $C:2: users_file $U:3: duplicate user 'alice'")\$"
printf 'alice:wonder\tadmin=1\n  # bob: gone\n' > "$U"
check_refuses "an indented comment" "$C" \
    "^$(re "qgate: $C:2: users_file $U:2: user name '  # bob' begins with a space (a comment's # must be the line's first character)")\$"
mkdir "$TMP/udir" # (no line of its own to cite: the key's line is; at 01bef40 none was)
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = %s\n' "$TMP/udir" "$W1A" > "$C"
check_refuses "a directory" "$C" "^$(re "qgate: $C:2: users_file $TMP/udir: not a regular file or a pipe")\$"
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = %s\n' "$U" "$W1A" > "$C"
printf 'alice:wonder\tadmin=1\nbob:pw x\tmax_conns=2\n' > "$U"
"$BIN/qgate" --check -c "$C" > "$TMP/out" 2>&1 || fail "--check refused a good users file: $(cat "$TMP/out")"
expect_file_has "$TMP/out" "configuration ok: .* 1 worker, 2 users\$"
pass "--check: the users file's space for a TAB, an option twice, a bad value, an unknown option, a user twice, a directory: file:line"

# --- a reload of such files fails, keeps the running configuration and says why --------------
G_CONF=$TMP/gw.conf
printf '[gateway]\nusers_file = %s\n\n[group main]\nworkers = %s\n' "$U" "$W1A" > "$G_CONF"
start_gateway GW -c "$G_CONF"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 1 10
printf '[gateway]\nusers_file = %s\n\n[group main]\nworkers = %s\n\n[group main]\nworkers = 127.0.0.1:%s\n' "$U" "$W1A" "$W2_PORT" > "$G_CONF"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "$(re "reload failed, keeping the running configuration: $G_CONF:7: [group main] again (first at line 4)")" 10
printf '[gateway]\nusers_file = %s\nmax_queue = 5\nmax_queue = 6\n[group main]\nworkers = 127.0.0.1:%s\n' "$U" "$W2_PORT" > "$G_CONF"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.reload[]" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^$(re "'qgate: reload failed: $G_CONF:4: max_queue again (first at line 3)")\$" 1
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = 127.0.0.1:%s\n' "$U" "$W2_PORT" > "$G_CONF"
printf 'alice:wonder\tadmin=1\nbob:pw max_inflight=1\n' > "$U"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.reload[]" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" "^$(re "'qgate: reload failed: users file: $U:2: user 'bob': a space before 'max_inflight='")" 1
# a file that moves port (a restart's key: kept) and names the running port as a worker: checked
# as it would run, refused (at 3929a8f taken: the gateway sent its clients' queries to itself)
printf 'alice:wonder\tadmin=1\nbob:pw\n' > "$U"
printf '[gateway]\nusers_file = %s\nport = 18899\n[group main]\nworkers = 127.0.0.1:%s\n' "$U" "$GW_PORT" > "$G_CONF"
kill -HUP "$GW_PID"
wait_line "$TMP/GW.log" "$(re "reload failed, keeping the running configuration: $G_CONF:5: group main: worker '127.0.0.1:$GW_PORT' is this gateway's own port")" 10
wait_count "$TMP/GW.log" "reload failed, keeping the running configuration" 4 10
grep -q "reload: done\|adding worker\|removing worker" "$TMP/GW.log" && fail "a refused reload changed something: $(grep reload "$TMP/GW.log")"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:wonder ".qgate.stats[]" > "$TMP/q.out" 2>&1 || true
expect_file_has "$TMP/q.out" "$(re "\`$W1A")"
grep -q "$W2_PORT" "$TMP/q.out" && fail "W2 joined after a refused reload: $(cat "$TMP/q.out")"
timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:wonder "echo still" > "$TMP/q.out" 2>&1 || true
expect_lines "$TMP/q.out" '^"still"$' 1
pass "a reload of a file with a group or key twice, of a bad users file, or naming the running port as a worker: refused with file:line, the running configuration kept"

# --- --print-config -c FILE: what would run -------------------------------------------------
printf '[gateway]\nport = 9000\nmax_message = 16m\n[group main]\nworkers = %s\npassword = Hunter2pw\n[group rdb]\nworkers = w:1\nasync = broadcast\n' "$W1A" > "$C"
"$BIN/qgate" --print-config -c "$C" -p 7000 --loglevel debug > "$TMP/eff" || fail "--print-config -c exited $?"
for l in "port = 7000" "max_message = 16777216" "loglevel = debug" "max_queue = 1000" "[group main]" "workers = $W1A" \
    "# password = (set, not shown)" "[group rdb]" "async = broadcast"; do
    expect_lines "$TMP/eff" "^$(re "$l")\$" 1
done
grep -q Hunter2pw "$TMP/eff" && fail "--print-config printed a worker password"
# alone it prints the reference; with a file of one default group, the same bytes; the markdown
# and man forms ignore the file
"$BIN/qgate" --print-config > "$TMP/ref"
expect_lines "$TMP/ref" '^\[group NAME\]$' 1
expect_lines "$TMP/ref" '^port = 8811$' 1
printf '[group NAME]\n' > "$TMP/n.conf"
"$BIN/qgate" --print-config -c "$TMP/n.conf" > "$TMP/eff"
cmp -s "$TMP/ref" "$TMP/eff" || fail "--print-config -c (defaults only) differs from --print-config: $(diff "$TMP/ref" "$TMP/eff" | head)"
for form in markdown man; do
    "$BIN/qgate" --print-config=$form > "$TMP/ref"
    "$BIN/qgate" -c "$C" --print-config=$form > "$TMP/eff"
    cmp -s "$TMP/ref" "$TMP/eff" || fail "--print-config=$form changed with -c"
done
printf '[gateway]\nport = 1\nport = 2\n' > "$C"
set +e; "$BIN/qgate" --print-config -c "$C" > "$TMP/out" 2> "$TMP/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "--print-config printed a file it cannot load"
expect_lines "$TMP/err" "^$(re "qgate: $C:3: port again (first at line 2)")\$" 1
pass "--print-config -c FILE: the defaults, then the file, then the command line; alone, and its other forms, as before"

# --- a command line it cannot take: what is wrong, then the usage, exit 2 (at a797b26 the
# usage alone: helper round 24b) ---------------------------------------------------------------
for args in "--frob:qgate: unknown option '--frob'" "-c:qgate: -c needs a value" \
    "--print-config=xml:qgate: --print-config takes =markdown or =man, not 'xml'"; do
    set +e; "$BIN/qgate" "${args%%:*}" > "$TMP/out" 2> "$TMP/err"; rc=$?; set -e
    [ "$rc" -eq 2 ] || fail "${args%%:*}: exit $rc"
    [ "$(head -n 1 "$TMP/err")" = "${args#*:}" ] || fail "${args%%:*}: $(head -n 1 "$TMP/err")"
    grep -q "^usage: qgate" "$TMP/err" || fail "${args%%:*}: no usage"
done
pass "a command line it cannot take: what is wrong, then the usage, exit 2"

# --- an empty users file: valid (q -U with one refuses every login too), and said so
: > "$TMP/empty.users"
printf '[gateway]\nusers_file = %s\n[group main]\nworkers = %s\n' "$TMP/empty.users" "$W1A" > "$C"
"$BIN/qgate" --check -c "$C" > "$TMP/out" 2>&1 || fail "--check refused an empty users file: $(cat "$TMP/out")"
expect_file_has "$TMP/out" "configuration ok: port [0-9]+, 1 group, 1 worker, 0 users \\(every login refused: an empty users file, as q -U's\\)\$"
pass "--check: an empty users file is valid, and said to refuse every login"

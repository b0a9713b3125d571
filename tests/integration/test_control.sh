#!/usr/bin/env bash
# The operator's commands from q (as PgBouncer's console): .qgate.pools[]; for admins only
# .qgate.pause[`g] (answered once the group's running requests are done) and .qgate.resume[`g],
# .qgate.disable[`host:port] / .qgate.enable[...], .qgate.kill[id], .qgate.shutdown[]. Under
# load no client sees an error but the killed one.
. "$(dirname "$0")/lib.sh"

start_worker W1 --rows 20000
start_worker W2 --rows 20000
W1A="127.0.0.1:$W1_PORT" W2A="127.0.0.1:$W2_PORT"
printf 'alice:pw\tadmin=1\nbob:pw\nvictim:pw\n' > "$TMP/users"
cat > "$TMP/gw.conf" <<CONF
[gateway]
bind = 127.0.0.1
reconnect_min = 50
users_file = $TMP/users
[group main]
workers = $W1A, $W2A
CONF
start_gateway GW -c "$TMP/gw.conf"
G="127.0.0.1:$GW_PORT"
wait_count "$TMP/GW.log" "connected \\(capability 3\\)" 2 10
admin() { timeout --foreground 60 "$BIN/qsend" -g "$G" -u alice:pw "$@" > "$TMP/a.out" 2>&1 || true; }
user() { timeout --foreground 60 "$BIN/qsend" -g "$G" -u bob:pw "$@" > "$TMP/u.out" 2>&1 || true; }
# pools_has REGEX: .qgate.pools[] (asked by bob) matches
pools_has() { timeout --foreground 10 "$BIN/qsend" -g "$G" -u bob:pw ".qgate.pools[]" | grep -qE "$1"; }
# served N: requests the workers have logged (each logs what it runs as it starts it)
served() { cat "$TMP/W1.log" "$TMP/W2.log" | grep -cE "qworker [^ ]+: (fast|echo|hold|sleep)" || true; }
served_by() { grep -cE "qworker [^ ]+: (fast|echo)" "$TMP/$1.log" || true; }
more_than() { [ "$(served)" -gt "$1" ]; }
more_by() { [ "$(served_by "$1")" -gt "$2" ]; }

# --- .qgate.pools[]: anyone; the admin's commands: admins only ------------------------------
POOLS_HEAD='^table\[1\] `group `paused `waiting `active `idle `down `disabled `maxwait_ms `served `errors'
user ".qgate.pools[]" ".qgate.pause[\`main]" ".qgate.resume[]" ".qgate.disable[\`$W1A]" "call:.qgate.enable:$W1A" \
    ".qgate.kill[1]" "scall:.qgate.shutdown" ".qgate.pools[]"
expect_lines "$TMP/u.out" "$POOLS_HEAD \\| ,\`main \\| ,0b \\| ,0 \\| ,0 \\| ,2 \\| ,0 \\| ,0 \\| ,0 \\| ,[0-9]+ \\| ,[0-9]+\$" 2
expect_lines "$TMP/u.out" "^'qgate: access \\(admin only\\): \\.qgate\\.(pause|resume|disable|enable|kill|shutdown)" 6
# the first refusal logged; the five in the same second counted (at most one such line a second)
wait_line "$TMP/GW.log" "refused \\.qgate\\.pause\\[\`main\\]: not an admin" 10
admin ".qgate.pause[\`nosuch]" "call:.qgate.disable:127.0.0.1:1" ".qgate.kill[99999]" ".qgate.pause[3]" \
    ".qgate.disable[]" ".qgate.kill[\`bob]" ".qgate.pause[\`main]" ".qgate.pause \`main" ".qgate.pools[]" \
    ".qgate.resume[\`main]" ".qgate.resume\`main;" ".qgate.pause[]" "scall:.qgate.resume"
cat > "$TMP/want" <<WANT
'qgate: no group nosuch
'qgate: no worker 127.0.0.1:1
'qgate: no client 99999
'qgate: .qgate.pause takes a group's name (.qgate.pause[\`group]), or nothing for every group
'qgate: .qgate.disable takes a worker's address as .qgate.stats[] shows it (.qgate.disable[\`host:port])
'qgate: .qgate.kill takes a client's id as .qgate.clients[] shows it
1b
1b
WANT
head -n 8 "$TMP/a.out" | diff -u "$TMP/want" - || fail "the admin's errors"
sed -n 9p "$TMP/a.out" | grep -qE "$POOLS_HEAD \\| ,\`main \\| ,1b \\| ,0 \\| ,0 \\| ,2 " || fail "pools while paused: $(sed -n 9p "$TMP/a.out")"
[ "$(tail -n 4 "$TMP/a.out" | tr '\n' ' ')" = "1b 1b 1b 1b " ] || fail "resume, resume, pause[], resume: $(cat "$TMP/a.out")"
grep -q "qgate" "$TMP/W1.log" "$TMP/W2.log" && fail "a control command reached a worker"
pass ".qgate.pools[] for anyone, the rest refused to a non-admin; errors name what is wrong; pause and resume idempotent, with nothing running answered at once; the argument juxtaposed (.qgate.pause \`main) as in brackets"
# (an id as q writes one: a null, a sign, a type's letter; before, bad commands as text)
admin ".qgate.kill[0N]" ".qgate.kill[-3]" ".qgate.kill[99999j]"
printf '%s\n' "'qgate: no client 0N" "'qgate: no client -3" "'qgate: no client 99999" | diff -u - "$TMP/a.out" || fail "ids as q writes them"

# --- pause: answered only once the running request is done; what comes meanwhile waits -----
"$BIN/qsend" -g "$G" -u bob:pw "hold p1" > "$TMP/p1.out" & hp=$!
wait_any "hold p1" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" -u alice:pw ".qgate.pause[\`main]" > "$TMP/pause.out" & pp=$!
wait_line "$TMP/GW.log" "pause\\[\`main\\]: answered when no worker of main runs anything" 10
"$BIN/qsend" -g "$G" -u bob:pw "echo while paused" > "$TMP/e.out" & ep=$!
wait_for 10 "the echo waiting in the paused group" pools_has "\\| ,\`main \\| ,1b \\| ,1 \\| ,1 \\| ,1 \\| ,0 \\| ,0 \\| ,[1-9][0-9]* \\|"
kill -0 "$pp" 2>/dev/null || fail "the pause returned while a request still ran: $(cat "$TMP/pause.out")"
[ -s "$TMP/pause.out" ] && fail "the pause answered while a request still ran: $(cat "$TMP/pause.out")"
release p1 "$W1_PORT" "$W2_PORT"
wait "$hp" "$pp"
expect_lines "$TMP/p1.out" '^"p1"$' 1
expect_lines "$TMP/pause.out" '^1b$' 1
expect_file_has "$TMP/GW.log" "pause of main complete: no worker of it runs anything"
kill -0 "$ep" 2>/dev/null || fail "a request ran in a paused group: $(cat "$TMP/e.out")"
grep -q "echo while paused" "$TMP/W1.log" "$TMP/W2.log" && fail "a worker of the paused group was given a request"
admin "call:.qgate.resume:main"
expect_lines "$TMP/a.out" '^1b$' 1
wait "$ep"
expect_lines "$TMP/e.out" '^"while paused"$' 1
pass "pause: 1b only after the running request finished; a request sent meanwhile waited, and ran on resume"

# --- a pause still waiting when its group is resumed is told so --------------------------------
"$BIN/qsend" -g "$G" -u bob:pw "hold p2" > "$TMP/p2.out" & hp=$!
wait_any "hold p2" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" -u alice:pw "scall:.qgate.pause:main" > "$TMP/pause.out" & pp=$!
wait_line "$TMP/GW.log" "\\.qgate\\.pause: answered when no worker of main runs anything" 10
admin ".qgate.resume[\"main\"]"
wait "$pp"
expect_lines "$TMP/pause.out" "^'qgate: group main was resumed before its pause completed\$" 1
release p2 "$W1_PORT" "$W2_PORT"
wait "$hp"
pass "a resume answers a pause still waiting with an error"

# --- under load: pause, resume, disable, enable, kill; no client error but the killed one -----
"$BIN/qclient" -g "$G" -u victim:pw fast 0 --quiet 2> "$TMP/victim.err" & vp=$!
n0=$(served)
wait_for 30 "the victim's load" more_than $((n0 + 20))
admin ".qgate.clients[]"                  # two rows (qsend shows a table's rows up to 5): its id
vid=$(client_id "$TMP/a.out" 3 victim)
lpids=()
for i in 1 2 3 4 5 6; do
    "$BIN/qclient" -g "$G" -u bob:pw fast 0 --quiet 2> "$TMP/load$i.err" & lpids+=($!)
done
n0=$(served)
wait_for 30 "the load" more_than $((n0 + 100))
admin "call:.qgate.pause:main"                                  # returns when nothing runs
expect_lines "$TMP/a.out" '^1b$' 1
n1=$(served)
wait_for 20 "the 7 clients waiting" pools_has "\\| ,\`main \\| ,1b \\| ,7 \\| ,0 \\| ,2 \\| ,0 \\| ,0 \\|"
[ "$(served)" -eq "$n1" ] || fail "requests ran while paused: $n1 then $(served)"
admin ".qgate.resume[\`main]"
wait_for 20 "the load going on after the resume" more_than $((n1 + 100))
pass "under load: the pause returned with nothing running, nothing ran while 7 clients waited, the resume let them go"

admin ".qgate.disable[\`$W1A]"
expect_lines "$TMP/a.out" '^1b$' 1
w1_disabled() { timeout --foreground 10 "$BIN/qsend" -g "$G" -u alice:pw ".qgate.stats[]" | grep -qE "^table\\[2\\] .* \\| \`$W1A\`$W2A \\| \`main\`main \\| \`disabled\`(idle|busy) \\|"; }
wait_for 20 "W1 disabled" w1_disabled
wait_for 10 "pools showing it" pools_has "\\| ,\`main \\| ,0b \\| ,[0-9]+ \\| ,[0-9]+ \\| ,[0-9]+ \\| ,0 \\| ,1 \\|"
a1=$(served_by W1) b1=$(served_by W2)
wait_for 20 "W2 serving alone" more_by W2 $((b1 + 200))
[ "$(served_by W1)" -eq "$a1" ] || fail "the disabled worker was given requests: $a1 then $(served_by W1)"
kill -0 "$W1_PID" || fail "W1 died"
admin "call:.qgate.enable:$W1A"
expect_lines "$TMP/a.out" '^1b$' 1
wait_for 20 "W1 back in rotation" more_by W1 $((a1 + 50))
pass "under load: a disabled worker finished, stayed connected, was given nothing while the other served 200; enabled, it served again"

admin ".qgate.kill[$vid]"
expect_lines "$TMP/a.out" '^1b$' 1
wait_line "$TMP/GW.log" "c$vid [^ ]+ victim: closed: disconnected by admin alice" 10
n2=$(served)
wait_for 20 "the load after the kill" more_than $((n2 + 100))
kill -TERM "${lpids[@]}" "$vp"
wait "${lpids[@]}" "$vp" || true
for i in 1 2 3 4 5 6; do
    grep -qE "requests=[1-9][0-9]* ok=[0-9]+ qerrors=0 failed=0" "$TMP/load$i.err" || fail "client $i: $(cat "$TMP/load$i.err")"
done
grep -qE "qerrors=0 failed=[1-9]" "$TMP/victim.err" || fail "the killed client did not see its close: $(cat "$TMP/victim.err")"
pass "under load: .qgate.kill[id] closed that client (it reconnected); 6 other clients without an error or a failure"

# --- .qgate.all with a worker disabled fails (`partial: the others answer); it waits while its
# group is paused --------------------------------------------------------------------------
admin ".qgate.disable[\`:$W2A]" "all:main:echo ab" "all-partial:main:echo ab" "call:.qgate.enable:$W2A" "all:main:echo ab"
printf "1b\n'qgate: group main: 1 of 2 workers up\n\`workers\`result!(,\`$W1A;\"ab\")\n1b\n\"abab\"\n" | diff -u - "$TMP/a.out" ||
    fail ".qgate.all with W2 disabled, then enabled"
admin ".qgate.pause[\`main]"
"$BIN/qsend" -g "$G" -u bob:pw "all:main:echo held" > "$TMP/all.out" & ap=$!
wait_for 10 "the .qgate.all held" pools_has "\\| ,\`main \\| ,1b \\| ,1 \\| ,0 \\| ,2 \\|"
grep -q "echo held" "$TMP/W1.log" "$TMP/W2.log" && fail "a paused group's worker ran a part of a .qgate.all"
admin ".qgate.resume[\`main]"
wait "$ap"
expect_lines "$TMP/all.out" '^"heldheld"$' 1
pass ".qgate.all: with a worker disabled it fails (\`partial: the others answer, named); a paused group holds it until resumed"

# --- pool = session: a paused group holds a session's next request; a disabled worker keeps its
# session, and a new client is given the other worker -------------------------------------------
session_conf() { # QUEUE_TIMEOUT
    printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\nqueue_timeout = %s\n[group main]\nworkers = %s, %s\npool = session\n' \
        "$TMP/users" "$1" "$W1A" "$W2A"
}
session_conf 0 > "$TMP/s.conf"
start_gateway S -c "$TMP/s.conf"
G="127.0.0.1:$S_PORT"
wait_count "$TMP/S.log" "connected \\(capability 3\\)" 2 10
which_has() { grep -l "$1" "$TMP/W1.log" "$TMP/W2.log" | sed 's|.*/\(W[12]\)\.log|\1|'; }
"$BIN/qsend" -g "$G" -u bob:pw "hold s1" "echo s2" > "$TMP/s.out" & sp=$!
wait_any "hold s1" 10 "$TMP/W1.log" "$TMP/W2.log"
SW=$(which_has "hold s1")
"$BIN/qsend" -g "$G" -u alice:pw ".qgate.pause[\`main]" > "$TMP/pause.out" & pp=$!
wait_line "$TMP/S.log" "answered when no worker of main runs anything" 10
release s1 "$W1_PORT" "$W2_PORT"
wait "$pp"
expect_lines "$TMP/pause.out" '^1b$' 1
wait_for 10 "the session's next request held" pools_has "\\| ,\`main \\| ,1b \\| ,1 \\| ,1 \\| ,1 \\| ,0 \\| ,0 \\| ,[0-9]+ \\|"
grep -q "echo s2" "$TMP/W1.log" "$TMP/W2.log" && fail "a session's request ran in a paused group"
admin ".qgate.resume[\`main]"
wait "$sp"
printf '"s1"\n"s2"\n' | diff -u - "$TMP/s.out" || fail "the session's replies"
[ "$(which_has "echo s2")" = "$SW" ] || fail "the held request of the session did not run on its worker $SW"
pass "pool = session: a paused group held a session's next request (.qgate.pools[] waiting 1), which ran on its own worker once resumed"

"$BIN/qsend" -g "$G" -u bob:pw "hold s3" "echo s4" > "$TMP/s.out" & sp=$!
wait_any "hold s3" 10 "$TMP/W1.log" "$TMP/W2.log"
SW=$(which_has "hold s3")
OTHER=W1; [ "$SW" = W1 ] && OTHER=W2
SWA="127.0.0.1:$([ "$SW" = W1 ] && echo "$W1_PORT" || echo "$W2_PORT")"
admin ".qgate.disable[\`$SWA]"
expect_lines "$TMP/a.out" '^1b$' 1
user "echo other"                                                   # a new client: the other worker
expect_lines "$TMP/u.out" '^"other"$' 1
[ "$(which_has "echo other")" = "$OTHER" ] || fail "a new session was given the disabled worker"
release s3 "$W1_PORT" "$W2_PORT"
wait "$sp"
printf '"s3"\n"s4"\n' | diff -u - "$TMP/s.out" || fail "the session on the disabled worker"
[ "$(which_has "echo s4")" = "$SW" ] || fail "the session lost its disabled worker"
sw_disabled() { timeout --foreground 10 "$BIN/qsend" -g "$G" -u bob:pw ".qgate.stats[]" | grep -qE "^table\\[2\\] .* \\| \`(disabled\`idle|idle\`disabled) \\|"; }
wait_for 10 "the worker disabled once its session ended" sw_disabled
admin "call:.qgate.enable:$SWA"
expect_lines "$TMP/a.out" '^1b$' 1
pass "pool = session: a disabled worker kept its session to the end, a new client got the other worker; then disabled, idle"

# queue_timeout applies to a request held by a pause as to a queued one
session_conf 300 > "$TMP/t.conf"
start_gateway T -c "$TMP/t.conf"
G="127.0.0.1:$T_PORT"
wait_count "$TMP/T.log" "connected \\(capability 3\\)" 2 10
"$BIN/qsend" -g "$G" -u bob:pw "hold t0" "echo t1" > "$TMP/t.out" & tp=$!
wait_any "hold t0" 10 "$TMP/W1.log" "$TMP/W2.log"
"$BIN/qsend" -g "$G" -u alice:pw ".qgate.pause[]" > "$TMP/pause.out" & pp=$!
wait_line "$TMP/T.log" "answered when no worker of any group runs anything" 10
release t0 "$W1_PORT" "$W2_PORT"
wait "$pp" "$tp"
expect_lines "$TMP/pause.out" '^1b$' 1
expect_lines "$TMP/t.out" "^'qgate: timeout \\(queued [0-9]+ ms\\)\$" 1
grep -q "echo t1" "$TMP/W1.log" "$TMP/W2.log" && fail "the timed-out request ran"
pass "queue_timeout: a request held by a pause times out as a queued one does"

# --- a command sent async runs as q runs neg[h] of a function: no reply; a refusal or an error
# is logged. It never goes to a worker (0.12's successors sent it there as q text, and the
# group stayed unpaused) ------------------------------------------------------------------------
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\naccess_log = %s\n[group main]\nworkers = %s, %s\n' "$TMP/users" "$TMP/ac.alog" "$W1A" "$W2A" > "$TMP/ac.conf"
start_gateway AC -c "$TMP/ac.conf"
wait_count "$TMP/AC.log" "connected \\(capability 3\\)" 2 10
G="127.0.0.1:$AC_PORT"
admin --pipeline "neg:.qgate.pause[\`main]" ".qgate.pools[]" "neg:.qgate.resume[\`main]" ".qgate.pools[]"
sed -n 1p "$TMP/a.out" | grep -qE "$POOLS_HEAD \\| ,\`main \\| ,1b " || fail "after an async pause: $(cat "$TMP/a.out")"
sed -n 2p "$TMP/a.out" | grep -qE "$POOLS_HEAD \\| ,\`main \\| ,0b " || fail "after an async resume: $(cat "$TMP/a.out")"
expect_lines "$TMP/a.out" '.' 2
# ... also right behind an async message for a worker, which takes the async messages behind it
# with it (before: the command too, as q text, and the group stayed unpaused: helper round 17)
admin --pipeline "neg:echo behind" "neg:.qgate.pause[\`main]" ".qgate.pools[]"
grep -qE "$POOLS_HEAD \\| ,\`main \\| ,1b " "$TMP/a.out" || fail "an async pause behind an async message: $(cat "$TMP/a.out")"
admin ".qgate.resume[\`main]"
user --pipeline "neg:.qgate.pause[\`main]" "neg:.qgate.nosuch[]" "neg:.qgate.kill[1.5]" ".qgate.pools[]"
grep -qE "$POOLS_HEAD \\| ,\`main \\| ,0b " "$TMP/u.out" || fail "a non-admin's async pause paused: $(cat "$TMP/u.out")"
expect_lines "$TMP/u.out" '.' 1
wait_line "$TMP/AC.log" "async request [0-9]+: error 'qgate: access \\(admin only\\): \\.qgate\\.pause\\[\`main\\] \\(dropped: async\\)" 10
kill -TERM "$AC_PID"
wait_exit "$AC_PID" 10
A="$TMP/ac.alog"
expect_lines "$A" "user=alice .* type=async .* outcome=ok\$" 4
expect_lines "$A" "user=bob .* type=async .* outcome=gwerror error=\"qgate: access \\(admin only\\): .qgate.pause\\[\`main\\]\"\$" 1
expect_lines "$A" "user=bob .* type=async .* outcome=gwerror error=\"qgate: unknown command .qgate.nosuch\\[\\]\"\$" 1
expect_lines "$A" "user=bob .* type=async .* outcome=gwerror error=\"qgate: bad command: .qgate.kill\\[1.5\\]: its argument .*\"\$" 1
grep -q "qgate\\." "$TMP/W1.log" "$TMP/W2.log" && fail "a command went to a worker: $(grep -h "qgate\\." "$TMP/W1.log" "$TMP/W2.log" | head -3)"
pass "a gateway command sent async runs without a reply (pause, resume); refused and bad ones are logged; none reaches a worker"

# --- a disabled q stays out of rotation when a reload adds a connection to it: in another group,
# or another for pipeline (before: enabled there, given requests) ------------------------------
cp "$TMP/gw.conf" "$TMP/dg.conf" # (main: W1 and W2)
start_gateway DG -c "$TMP/dg.conf"
wait_count "$TMP/DG.log" "connected \\(capability 3\\)" 2 10
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DG_PORT" -u alice:pw ".qgate.disable[\`$W2A]" > "$TMP/a.out"
expect_lines "$TMP/a.out" '^1b$' 1
printf '[group rep]\nworkers = %s\n[group two]\nworkers = %s\npipeline = 2\n' "$W2A" "$W2A" >> "$TMP/dg.conf"
kill -HUP "$DG_PID"
wait_line "$TMP/DG.log" "reload: done" 10
wait_count "$TMP/DG.log" "connected \\(capability 3\\)" 5 10
expect_lines "$TMP/DG.log" "w $W2A(#1)?: group (rep|two): disabled, as the other connections to this q are" 3
dg_stats() { timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DG_PORT" -u alice:pw ".qgate.stats[]" > "$TMP/dg.out"; }
all_disabled() { dg_stats; grep -qE "^table\\[4\\] .* \\| \`main\`main\`rep\`two \\| \`idle\`disabled\`disabled\`disabled \\|" "$TMP/dg.out"; }
wait_for 10 "every connection to W2 disabled" all_disabled
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DG_PORT" -u alice:pw ".qgate.pools[]" > "$TMP/dg.out"
expect_lines "$TMP/dg.out" "^table\\[3\\] " 1
kill "$DG_PID"
# ... whatever the order of the groups in the file: one that leaves the q listed before the one
# that takes it (it came back enabled: helper round 11)
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = %s\n[group pipe]\nworkers = %s\n' \
    "$TMP/users" "$W1A" "$W2A" > "$TMP/dg2.conf"
start_gateway DH -c "$TMP/dg2.conf"
wait_count "$TMP/DH.log" "connected \\(capability 3\\)" 2 10
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DH_PORT" -u alice:pw ".qgate.disable[\`$W2A]" > "$TMP/a.out"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group pipe]\nworkers = %s\n[group main]\nworkers = %s,%s\n' \
    "$TMP/users" "$W1A" "$W1A" "$W2A" > "$TMP/dg2.conf"
kill -HUP "$DH_PID"
wait_line "$TMP/DH.log" "reload: done" 10
moved_disabled() { timeout --foreground 5 "$BIN/qsend" -g "127.0.0.1:$DH_PORT" -u alice:pw ".qgate.stats[]" |
                   grep -qE "^table\\[3\\] .* \\| \`$W1A\`$W2A\`$W1A \\| \`main\`main\`pipe \\| \`idle\`disabled\`idle \\|"; }
wait_for 10 "the q moved to main still disabled" moved_disabled
kill "$DH_PID"
pass "a reload adding a disabled q to another group, or another connection to it (pipeline): disabled there too, whatever the file's order"

# --- one q, its address spelled two ways (127.0.0.1:P, localhost:P): .qgate.disable[] of either
# takes both out of rotation, and .qgate.enable[] of either puts both back; a reload that spells
# a disabled q's address another way adds a connection that is disabled too (helper round 40c: at
# 1bf1093 only the spelling named was disabled, and the respelled one came back enabled)
LW2="localhost:$W2_PORT"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = %s,%s\n[group alt]\nworkers = %s\n' \
    "$TMP/users" "$W1A" "$W2A" "$LW2" > "$TMP/ds.conf"
start_gateway DS -c "$TMP/ds.conf"
wait_count "$TMP/DS.log" "connected \\(capability 3\\)" 3 10
ds() { timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DS_PORT" -u alice:pw "$@" > "$TMP/ds.out"; }
ds_states() { ds ".qgate.stats[]"; grep -qE "^table\\[3\\] .* \\| \`main\`main\`alt \\| \`$1\`$2\`$3 \\|" "$TMP/ds.out"; }
ds ".qgate.disable[\`$W2A]"
expect_lines "$TMP/ds.out" '^1b$' 1
wait_for 10 "both spellings of W2 disabled" ds_states idle disabled disabled
expect_lines "$TMP/DS.log" "w $LW2: disabled by admin alice \\(group alt, IDLE; the same q as $W2A\\)" 1
ds ".qgate.enable[\`$LW2]"
expect_lines "$TMP/ds.out" '^1b$' 1
wait_for 10 "both spellings of W2 enabled" ds_states idle idle idle
kill "$DS_PID"
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = %s,%s\n' "$TMP/users" "$W1A" "$W2A" > "$TMP/dt.conf"
start_gateway DT -c "$TMP/dt.conf"
wait_count "$TMP/DT.log" "connected \\(capability 3\\)" 2 10
timeout --foreground 10 "$BIN/qsend" -g "127.0.0.1:$DT_PORT" -u alice:pw ".qgate.disable[\`$W2A]" > "$TMP/a.out"
expect_lines "$TMP/a.out" '^1b$' 1
printf '[gateway]\nbind = 127.0.0.1\nusers_file = %s\n[group main]\nworkers = %s,%s\n' "$TMP/users" "$W1A" "$LW2" > "$TMP/dt.conf"
kill -HUP "$DT_PID"
wait_line "$TMP/DT.log" "reload: done" 10
wait_line "$TMP/DT.log" "w $LW2: group main: disabled, as the other connections to this q are \\(disabled when the reload came that added this one\\)" 10
respelled_disabled() { timeout --foreground 5 "$BIN/qsend" -g "127.0.0.1:$DT_PORT" -u alice:pw ".qgate.stats[]" |
                       grep -qE "^table\\[2\\] .* \\| \`$W1A\`$LW2 \\| \`main\`main \\| \`idle\`disabled \\|"; }
wait_for 10 "the respelled q disabled" respelled_disabled
kill "$DT_PID"
pass "one q spelled two ways: disabled and enabled as one, by either address; a reload respelling a disabled q keeps it disabled"

# --- .qgate.shutdown[]: as SIGTERM, 1b first; the running request finishes; exit 0 -------------
G="127.0.0.1:$GW_PORT"
"$BIN/qsend" -g "$G" -u bob:pw "hold z1" > "$TMP/z1.out" & zp=$!
wait_any "hold z1" 10 "$TMP/W1.log" "$TMP/W2.log"
admin ".qgate.shutdown[]"
expect_lines "$TMP/a.out" '^1b$' 1
wait_line "$TMP/GW.log" ".qgate.shutdown\\[\\] by admin alice: draining" 5
"$BIN/qsend" -g "$G" -u bob:pw "echo late" > "$TMP/late.out" 2>&1 || true
expect_lines "$TMP/late.out" "^'hop\$" 1
kill -0 "$GW_PID" || fail "qgate exited before the running request was answered"
release z1 "$W1_PORT" "$W2_PORT"
wait "$zp"
expect_lines "$TMP/z1.out" '^"z1"$' 1
wait_exit "$GW_PID" 10
[ "$EXIT_STATUS" -eq 0 ] || fail "qgate exited $EXIT_STATUS after .qgate.shutdown[]"
pass ".qgate.shutdown[]: 1b, new connections refused, the running request answered, exit 0"

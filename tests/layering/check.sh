#!/bin/bash
# tests/layering/check.sh: the shape of src/, checked. The folders are the layers, lowest first:
#
#   base     buf, log, net, config, pool, auth, alog, sdnotify: no kdb+ and no loop
#   kdb      the kdb+ IPC library: framing, codec, validation, compression, merge
#   jobs     the pure functions the reader and writer pools run, and the tables they make
#   core     loop, conn, stream, dispatch: the loop thread's machinery, knowing no client or worker
#   client   a q client's connection and its requests
#   worker   a back-end q connection and what runs on it
#   gateway  setup, commands, control, reload, metrics; main()
#
# 1. Includes: a file includes headers of its own folder or of folders below it, never above,
#    and the file-level include graph has no cycle (tsort).
# 2. Calls, at link level (what each object of the library references, and who defines it): an
#    object calls into its own folder or the folders below it, never above; and inside core/
#    no file calls a file that calls it back, however far round (no file-level call cycle).
# 3. The thread split: no object the pools run (base, kdb, jobs) references a *_loop symbol.
# 4. Names say where code runs and where it lives: every function a loop folder (core, client,
#    worker, gateway) exports ends in _loop, except setup and teardown and pure functions
#    listed below; and every exported function starts with its file's name (or a prefix the
#    table below gives that file).
# Usage: check.sh LIBQGATE.a [--graph]   (--graph prints the folder include and call graphs)
#   SRC=dir checks the sources in dir instead of src/ (selftest.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${1:?usage: check.sh build/rel/libqgate.a [--graph]}
src=${SRC:-src}
fail=0
err() { echo "FAIL: $*"; fail=1; }

folders="base kdb jobs core client worker gateway"
declare -A RANK=() FOLDER=()
i=0
for f in $folders; do RANK[$f]=$i; i=$((i + 1)); done
rank() { echo "${RANK[$1]:-99}"; }
loop_folders=" core client worker gateway "

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# every source file's module (its name) and folder
for d in $folders; do
    [ -d "$src/$d" ] || { err "no folder $src/$d"; continue; }
    for f in "$src/$d"/*.[ch]; do
        b=$(basename "$f"); echo "${b%.*} $d"
    done
done | sort -u >"$tmp/where"
for f in "$src"/*.[ch]; do [ -e "$f" ] && err "$f: every source file lives in a layer's folder ($folders)"; done
while read -r m d; do [ -n "${FOLDER[$m]:-}" ] || FOLDER[$m]=$d; done <"$tmp/where"
folder_of() { echo "${FOLDER[$1]:-}"; } # (a module's folder: lookups in bash, no process each)

# ---- 1. includes ----------------------------------------------------------------------------
: >"$tmp/inc"
for d in $folders; do
    for f in "$src/$d"/*.[ch]; do
        b=$(basename "$f"); b=${b%.*}
        for inc in $(sed -n 's/^#include "\(.*\)\.h"/\1/p' "$f"); do
            [ "$inc" = "$b" ] && continue
            to=${FOLDER[$inc]:-}
            [ -n "$to" ] || { err "$f includes $inc.h, which is in no folder of $src"; continue; }
            echo "$b $inc" >>"$tmp/inc"
            [ "$to" = "$d" ] && continue
            echo "$d $to" >>"$tmp/incf"
            if [ "${RANK[$d]:-99}" -lt "${RANK[$to]:-99}" ]; then
                err "$f includes $inc.h: $d/ may not include $to/ (a layer above it)"
            fi
        done
    done
done
if ! tsort "$tmp/inc" >/dev/null 2>&1; then
    err "the include graph has a cycle: $(tsort "$tmp/inc" 2>&1 >/dev/null | grep -v 'contains a loop' | sed 's/^tsort: //' | tr '\n' ' ')"
fi

# ---- 2. calls at link level -------------------------------------------------------------------
nm -A "$lib" | sed -E 's|^[^:]*:([a-z_0-9]+)\.o:|\1 |' >"$tmp/syms"
awk '$(NF-1) == "T" || $(NF-1) == "D" || $(NF-1) == "B" || $(NF-1) == "R" {print $NF, $1}' "$tmp/syms" | sort -u >"$tmp/defs"
awk '$(NF-1) == "U" {print $NF, $1}' "$tmp/syms" | sort -u >"$tmp/uses"
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 {print $2, $3}' | sort -u >"$tmp/calls" # caller-object callee-object
: >"$tmp/callf"
: >"$tmp/corecalls"
while read -r from to; do
    df=${FOLDER[$from]:-} dt=${FOLDER[$to]:-}
    [ -n "$df" ] && [ -n "$dt" ] || continue
    if [ "$df" != "$dt" ]; then
        echo "$df $dt" >>"$tmp/callf"
        if [ "${RANK[$df]:-99}" -lt "${RANK[$dt]:-99}" ]; then
            syms=$(join "$tmp/uses" "$tmp/defs" | awk -v a="$from" -v b="$to" '$2 == a && $3 == b {print $1}' | tr '\n' ' ')
            err "$from.o ($df/) calls into $to.o ($dt/, a layer above it): $syms"
        fi
    elif [ "$df" = core ]; then
        echo "$from $to" >>"$tmp/corecalls"
    fi
done <"$tmp/calls"
if [ -s "$tmp/corecalls" ] && ! tsort "$tmp/corecalls" >/dev/null 2>&1; then
    err "a file-level call cycle inside core/: $(tsort "$tmp/corecalls" 2>&1 >/dev/null | grep -v 'contains a loop' | sed 's/^tsort: //' | tr '\n' ' ')"
fi

if [ "${2:-}" = "--graph" ]; then
    echo "folders, lowest first: $folders"
    echo "includes between folders:"
    sort -u "$tmp/incf" | awk '{a[$1] = a[$1] " " $2} END {for (k in a) print "  " k " ->" a[k]}' | sort
    echo "calls between folders (link level):"
    sort -u "$tmp/callf" | awk '{a[$1] = a[$1] " " $2} END {for (k in a) print "  " k " ->" a[k]}' | sort
    echo "calls between the files of core/:"
    sort -u "$tmp/corecalls" | awk '{a[$1] = a[$1] " " $2} END {for (k in a) print "  " k " ->" a[k]}' | sort
fi

# ---- 3. the thread split ----------------------------------------------------------------------
declare -A CORE_DEF=()
while read -r s o; do
    case "$loop_folders" in *" ${FOLDER[$o]:-none} "*) CORE_DEF[$s]=1 ;; esac
done <"$tmp/defs"
while read -r s o; do
    d=${FOLDER[$o]:-}
    case "$loop_folders" in *" $d "*) continue ;; esac
    case "$s" in *_loop) err "$o.o (run by the pools) references $s" ;; esac
    if [ -n "${CORE_DEF[$s]:-}" ]; then err "$o.o (run by the pools) references $s, a loop-only function"; fi
done <"$tmp/uses"

# ---- 4. names -----------------------------------------------------------------------------------
# setup/teardown and pure functions of the loop folders
allowed="gw_init gw_free loop_init loop_free loop_watch loop_watch_pool loop_on_job loop_now_us
         loop_timers_next loop_timers_pop_due loop_timers_free conn_q_init conn_refusal_name client_users_free
         client_state_name worker_state_name worker_via_name request_free access_init access_close report_init
         dispatch_free reload_init reload_free pipeline_key pipeline_learned_us run_began_us run_mode_of mhttp_init mhttp_free stream_close
         request_state_name command_row query_key query_text query_learned_us session_reset_query tail_origin tail_who
         worker_same_q worker_marked worker_mark_of"
# a file's exported names start with its name, or with one of these
prefixes() {
    PFX=
    case "$1" in
        kcodec) PFX="kcodec_ k_ ktype_" ;;
        buf) PFX="buf_ chunk_ inbuf_ outq_" ;;
        pool) PFX="pool_ job_" ;;
        jobs) PFX="jobs_ job_" ;;
        metrics) PFX="metrics_ job_metrics_" ;;
        stats) PFX="stats_ hist_" ;;
        gateway) PFX="gateway_ gw_" ;;
        *) PFX="$1_" ;;
    esac
}
allowed=" $(echo $allowed) "
while read -r s o; do
    d=${FOLDER[$o]:-}
    [ -n "$d" ] || continue
    [ "$o" = main ] && continue
    ok=0
    prefixes "$o"
    for p in $PFX; do case "$s" in "$p"*) ok=1 ;; esac; done
    [ "$o" = "$s" ] && ok=1
    [ $ok = 1 ] || err "$s is exported by $o.o: its name should start with ${o}_ (prefix = file)"
    case "$loop_folders" in *" $d "*) ;; *) continue ;; esac
    case "$s" in *_loop) continue ;; esac
    case "$allowed" in *" $s "*) continue ;; esac
    err "$s runs on the loop thread: its name should end in _loop (or list it here as setup or pure)"
done < <(awk '$(NF-1) == "T" {print $NF, $1}' "$tmp/syms" | sort -u)

[ $fail = 0 ] && echo "ok - layering: folders are layers (includes and calls point down), no include cycle, no call cycle in core/; pool code reaches no loop function; names start with their file's"
exit $fail

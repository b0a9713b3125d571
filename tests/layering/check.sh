#!/bin/bash
# tests/layering/check.sh: the shape of src/, checked (issue 9).
#   1. The include graph: every #include between modules points down the layers below, and
#      there is no cycle anywhere in it (tsort).
#   2. The thread split, at link level: no object that the reader and writer pools run (the
#      base layer: jobs and what it uses) references a symbol defined by a loop-only module,
#      nor any *_loop symbol.
#   3. Names say where code runs: every function a loop-only module exports ends in _loop,
#      except setup and teardown (before the loop runs, after it ends) and pure functions
#      that touch no loop state, listed below.
# Usage: check.sh LIBQGATE.a [--graph]   (--graph prints the module include graph)
#   SRC=dir checks the sources in dir instead of src/ (selftest.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${1:?usage: check.sh build/rel/libqgate.a [--graph]}
src=${SRC:-src}
fail=0
err() { echo "FAIL: $*"; fail=1; }

# module of a file, and its layer (higher includes lower, never the reverse)
module() {
    case "$1" in
        gateway|reload|control|main|ops|mhttp) echo gateway ;;
        worker|relay|lost|broadcast|session|fanout|pipeline) echo worker ;;
        client|request|callback|access|stop) echo client ;;
        *) echo "$1" ;;
    esac
}
rank() {
    case "$1" in
        gateway) echo 7 ;; worker) echo 6 ;; client) echo 5 ;; dispatch) echo 4 ;; conn) echo 3 ;;
        gw) echo 2 ;; loop) echo 1 ;; *) echo 0 ;;
    esac
}

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for f in "$src"/*.c "$src"/*.h; do
    b=$(basename "$f"); b=${b%.*}
    from=$(module "$b")
    for inc in $(sed -n 's/^#include "\(.*\)\.h"/\1/p' "$f"); do
        to=$(module "$inc")
        [ "$from" = "$to" ] && continue
        echo "$from $to" >>"$edges"
        rf=$(rank "$from"); rt=$(rank "$to")
        if [ "$rf" -le "$rt" ] && [ "$rt" -gt 0 ]; then
            err "$f includes $inc.h: $from (layer $rf) may not include $to (layer $rt)"
        fi
    done
done
if ! tsort "$edges" >/dev/null 2>&1; then
    err "the include graph has a cycle: $(tsort "$edges" 2>&1 >/dev/null | tr '\n' ' ')"
fi
if [ "${2:-}" = "--graph" ]; then
    sort -u "$edges" | awk '{a[$1] = a[$1] " " $2} END {for (k in a) print k " ->" a[k]}' | sort
fi

# symbols, per object of the library
core_objs="loop conn dispatch client request callback access stop worker relay lost pipeline broadcast session fanout gateway reload control ops mhttp"
is_core() { case " $core_objs " in *" $1 "*) return 0 ;; esac; return 1; }
syms=$(mktemp)
nm -A "$lib" | sed -E 's|^[^:]*:([a-z_]+)\.o:|\1 |' >"$syms"
core_defs=$(awk -v core=" $core_objs " 'index(core, " " $1 " ") && $(NF-1) == "T" {print $NF}' "$syms" | sort -u)
for o in $(awk '{print $1}' "$syms" | sort -u); do
    is_core "$o" && continue
    for s in $(awk -v o="$o" '$1 == o && $(NF-1) == "U" {print $NF}' "$syms"); do
        case "$s" in *_loop) err "$o.o (run by the pools) references $s" ;; esac
        if grep -qx "$s" <<<"$core_defs"; then err "$o.o (run by the pools) references $s, a loop-only function"; fi
    done
done

# setup/teardown and pure functions of the loop-only modules
allowed="gw_init gw_free loop_init loop_free loop_watch loop_watch_pool loop_on_job gw_now_us
         timers_next timers_pop_due timers_free connq_init client_users_free client_state_name
         worker_state_name worker_via_name req_free access_init access_close ops_init ops_free gw_refusal_name control_free
         pipeline_key pipeline_learned_us worker_run_began_us mhttp_init mhttp_free"
for s in $core_defs; do
    case "$s" in *_loop) continue ;; esac
    case " $(echo $allowed) " in *" $s "*) continue ;; esac
    err "$s runs on the loop thread: its name should end in _loop (or list it here as setup or pure)"
done
rm -f "$syms"
[ $fail = 0 ] && echo "ok - layering: includes point down the layers, no cycle; pool code reaches no loop-only function"
exit $fail

/* sim.h: a deterministic simulation of qgate's loop. The real loop iteration (loop_step_loop)
 * runs against fake q clients and fake q workers on socketpairs, with a fake clock and pools
 * whose jobs run when the simulation says; a seeded PRNG (or a fuzzer's input) picks every
 * next event, and invariants are checked after every step. */
#ifndef SIM_H
#define SIM_H

#include <stddef.h>
#include <stdint.h>

/* The kinds of event the driver picks from. A run can turn kinds off (the minimiser does, to
 * find the smallest set of kinds that still fails). */
#define SIM_EVENTS(X)                                                                          \
    X(CONNECT) X(SEND) X(WRITE) X(READ) X(CLOSE) X(STALL) X(BADMSG) X(COMMAND) X(ADMIN)     \
    X(ASYNC) X(PIPELINE) X(WREAD) X(WPROCESS) X(WWRITE) X(WDIE) X(WPUSH) X(CALLBACK) X(POOL) \
    X(CLOCK) X(RELOAD) X(STEP) X(OLDCAP) X(REMOTE) X(BIGREPLY) X(ROUTE) X(PAUSE) X(DISABLE)  \
    X(SCRAPE) X(LOGSINK) X(ALOGSINK) X(MIDWRITE) X(NEST)
#define SIM_EV_ENUM(e) SIM_EV_##e,
enum sim_event { SIM_EVENTS(SIM_EV_ENUM) SIM_EV_N };
#undef SIM_EV_ENUM

struct sim_opts {
    uint64_t seed;
    long steps;           /* events before the final quiescence (default 3000) */
    uint32_t disabled;    /* bit k set: event kind k never happens */
    int verbose;          /* print the trace as it happens (to stderr) */
    int quiet;            /* print nothing on failure (the minimiser's trial runs) */
    const uint8_t *data;  /* a fuzzer's input drives the choices instead of the PRNG */
    size_t len;
};

/* What a run did, for the report. */
struct sim_result {
    long steps;           /* events run */
    long checks;          /* invariant checks made */
    long uds_conns;       /* worker connections made over a Unix socket */
    long uds_mutes;       /* Unix sockets that closed before the handshake (TCP next) */
    long held;            /* pipeline: requests seen running on a busy worker's other connections, summed over checks */
    long alog_lines;      /* access-log lines found, one per request ended (seeds with access_log) */
    long held_learned;    /* of held: in worlds with pipeline_wait (behind runs learned fast) */
    long paused_held;     /* requests seen held by a paused group (queued or held), summed over checks */
    long disabled_seen;   /* workers seen DISABLED, summed over checks */
    long scrapes;         /* metrics pages asked for by the fake scrapers */
    long log_dropped;     /* log lines dropped while the log's reader was stopped (worlds with a queued log) */
    long alog_dropped;    /* access-log lines dropped, its file stalled or full (worlds with its sink) */
    long alog_frags;      /* access-log lines cut by a full disk, ended before the next */
    long mid_events;      /* peers that acted in the middle of an iteration (MIDWRITE) */
    long http_501;        /* HTTP requests for a handshake answered 501 whole */
    long hold_passed;     /* replies sent as the worker sent them for hold_max */
    long nested;          /* clients' messages run nested on the worker waiting on their callback */
    long nested_here;     /* ... and sent from inside a callback, answered by the gateway at once */
    long nested_waits;    /* checks that saw a worker wait on such replies, or on another part's callback */
    long resets;          /* reset queries the workers of a session group ran */
    long reset_flips;     /* reloads that turned a session group's reset_query off or on */
    long pool_flips;      /* reloads that made group main a session pool or a request pool */
    long pool_taken;      /* ... and how many of them the gateway took (session eras in flip worlds) */
    long held_ends;       /* checks that saw a session's end held back (a message streamed to it) */
    long hold_refused;    /* replies and .qgate.alls refused for it */
    long pending_waits;   /* messages whose reading waited for room under pending_max */
    long half_closes;     /* clients that shut their side and read on */
    long half_answered;   /* ... and got every reply owed, then the gateway's close */
    long answered_ahead;  /* callbacks' answers sent before the callback asked */
    long ahead_read;      /* ... whose callback came, read by the worker */
    long tails;           /* clients closed with their stream cut (tail.c) */
    long ahead_between;   /* ... with an echo sent between the request and its answer */
    long ahead_async;     /* ... behind an async message that calls back */
    long bad_ahead;       /* ... malformed (sent), each a bad message where it is read */
    long failed_step;     /* the event at which an invariant failed, or -1 */
    char what[256];       /* the invariant that failed */
};

/* Run one simulation in this process. 0 if every invariant held; 1 with the violation, the
 * seed and the last events of the trace printed on stderr (unless quiet). */
int sim_run(const struct sim_opts *o, struct sim_result *res);

const char *sim_event_name(int k);

#endif

/* gw.h: struct gw, the state every core module shares, owned by the loop thread alone: no pool
 * thread ever sees it, a connection, a client, a worker or a group. Each module keeps its own
 * types in its own header (loop.h, conn.h, dispatch.h, client.h, worker.h); this one includes
 * only what is below them all, so that every module may include it. */
#ifndef GW_H
#define GW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/queue.h>

#include "alog.h"
#include "buf.h"
#include "config.h"
#include "jobs.h"
#include "log.h"
#include "loop.h"

struct conn;
struct group;
struct q_mark;
struct ustate;
struct pause_wait;
struct pool;
struct auth_shared;
struct frontend_ops;
struct backend_ops;
struct gw_name;

/* Seams for tests/sim, which runs the real loop against fake clients and workers with a fake
 * clock. All zero in production. */
/* Connections and requests refused, by why (.qgate.totals[], the metrics, the summary line). */
#define GW_REFUSALS(X)                                                                             \
    X(TOO_MANY, "too_many_connections") X(ACCESS, "access") X(HANDSHAKE, "handshake")              \
    X(BUSY, "busy") X(QUEUE_TIMEOUT, "queue_timeout") X(NO_WORKER, "no_worker") X(BADMSG, "badmsg") \
    X(STALLED, "stalled") X(NO_FDS, "out_of_fds") X(DRAINING, "draining")                                  \
    X(METRICS_FULL, "metrics_full") X(METRICS_PEER, "metrics_per_peer") X(METRICS_TIMEOUT, "metrics_timeout") \
    X(METRICS_FDS, "metrics_out_of_fds") X(PROXY, "proxy") X(HOLD_MAX, "hold_max")
#define GW_REFUSAL_ENUM(e, s) REFUSED_##e,
enum gw_refusal { GW_REFUSALS(GW_REFUSAL_ENUM) GW_NREFUSALS };
#undef GW_REFUSAL_ENUM

struct gw_hooks {
    void *ctx;
    int64_t (*now_us)(void *ctx);                 /* the clock; NULL = CLOCK_MONOTONIC */
    int (*connect)(void *ctx, const char *addr, int uds); /* a socket connected (or connecting)
                                                   * to the worker at addr (over its Unix socket
                                                   * if uds), non-blocking; -1 = refused */
    void (*lost)(void *ctx, uint32_t id, uint32_t gen, uint64_t seq); /* a client's message
                                                   * went down with the worker running it (or
                                                   * the gateway gave up on that worker: it may
                                                   * still run the message, late) */
    void (*closed)(void *ctx, uint32_t id, uint32_t gen, const char *why); /* a client closed */
    void (*dropped)(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, const struct group *grp); /* a
                                                   * client's async message dropped, unrun: no
                                                   * worker of its group grp is up */
    void (*unread)(void *ctx, uint32_t id, uint32_t gen, uint64_t next_seq); /* nothing more is
                                                   * read from a client (a bad message, its
                                                   * session's worker lost): its messages from
                                                   * next_seq on are never taken */
    void (*dispatched)(void *ctx, const struct conn *w, uint32_t id, uint32_t gen, uint64_t seq); /* a
                                                   * client's message given to worker w: sent
                                                   * to it, or (a broadcast, a fan-out part)
                                                   * queued on it */
    void (*nested)(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, uint64_t head, int here); /* a
                                                   * client's message seq goes nested to the
                                                   * worker waiting on its answer to a callback,
                                                   * which runs its request head (callback.c);
                                                   * here: it is answered by the gateway instead,
                                                   * ahead of head (request.c) */
    uint64_t (*query_key)(void *ctx, const uint8_t *msg, size_t len); /* what names a request's
                                                   * query for pipeline_wait's learning (msg:
                                                   * the whole message); NULL = a hash of its
                                                   * bytes (pipeline_key) */
    int manual_pools;                             /* pools without threads (pool_run_one) */
    struct alog_writer *(*alog_start)(void *ctx); /* the access log's writer; NULL = its thread
                                                   * (alog_writer_start) */
};

/* A list of connections (a group's queue of clients, its idle workers, a client's waiters, the
 * metrics connections); conn.c enters and leaves them. */
struct connq {
    TAILQ_HEAD(, conn) h;
    int n;
};

/* A listening socket: its accepts go to the client side (or the metrics connections). */
struct listener {
    struct evsrc ev;
    int fd;
    int is_uds;
    uint8_t stopped;     /* EMFILE with no reserve descriptor: not watched until tm */
    struct timer tm;
};

/* A list of connections (conn.h's dirty_link, backlog_link, ...). */
TAILQ_HEAD(connlist, conn);

struct gw {
    struct loop loop;    /* first: the loop's own (loop.h) */
    struct config cfg;
    struct gw_hooks hooks;
    char config_path[1024];
    struct cfg_overrides overrides; /* command-line keys, applied again on reload */

    /* connections (conn.c): the table by id, and the lists */
    struct conn **tab;
    uint32_t *gens;
    uint32_t tab_cap;
    uint32_t *free_ids;  /* a FIFO ring of freed ids: reused oldest first, after a quarantine */
    uint32_t free_head, nfree, next_id;
    /* output to flush this iteration: workers first (a worker's next request goes out before
     * the replies, so that it starts on it sooner), then clients and the metrics port */
    struct connlist wdirty;
    int nwdirty;
    struct connlist dirty;
    int ndirty;          /* on either list */
    TAILQ_HEAD(, conn) backlog;
    TAILQ_HEAD(, conn) room_waiters; /* clients waiting, in turn, for room under pending_max */
    STAILQ_HEAD(, conn) closed;

    /* the rest (gateway.c, and what it wires) */
    struct listener listen_tcp, listen_uds;
    struct pool_src readers_src, writers_src;
    struct evsrc ev_signal;
    int sigfd;
    int reserve_fd;      /* kept open to be given up when accept meets EMFILE */
    int metrics_reserve_fd; /* the metrics port's own: a scrape is served with no descriptor left */
    int port;            /* bound port */
    struct pool *readers, *writers;
    struct group *groups; /* CFG_MAX_GROUPS of them */
    int ngroups;
    struct q_mark *dis_marks; /* the q's disabled when the last reload came (worker.h): a connection
                          * to one made later (its address spelled another way) is disabled too */
    int ndis_marks, dis_marks_cap;
    const struct frontend_ops *front;
    const struct backend_ops *back;
    int draining;        /* SIGTERM seen */
    int freeing;         /* gw_free closes every connection: no worker is connected again, nor said lost */
    int drain_closing;   /* ...and nothing owed: the clients are being shut (client_drain_close_loop) */
    SLIST_HEAD(, pause_wait) pause_waits; /* .qgate.pause[] requests waiting for their groups'
                          * runs to end (control.c) */
    int reloading;       /* a reload job is out */
    int reload_again;    /* another was asked for meanwhile: the file may have changed again */
    int reopen_on_reload; /* SIGHUP: the access log reopened once the reload is done (at its new path,
                           * if it names another: the old one is not opened on the way) */
    STAILQ_HEAD(reload_waits, reload_wait) reload_now, reload_next; /* .qgate.reload[] requests answered when the
                          * reload out is done, and when the one asked for meanwhile is (reload.c) */
    struct timer drain_tm;
    struct timer room_tm; /* while clients wait for room under pending_max: the stalled are sought */
    struct timer uds_retry_tm; /* reuseport: q's Unix socket held by another process; try again */
    uint8_t chaser[14];  /* sync "" : makes a worker report that it ran what came before */
    uint8_t rbuf[65536]; /* a worker's reads at a message boundary land here first (stream.c):
                          * a small reply then takes a chunk its size, not one of 64 KiB */
    uint8_t *no_client_err; /* response for a worker's request when its client is gone */
    size_t no_client_err_len;
    uint8_t *unanswered_err; /* ... when its client sends requests on and on instead of the answer */
    size_t unanswered_err_len;
    uint8_t *too_large_err; /* ... when its request is over max_message */
    size_t too_large_err_len;
    uint64_t next_serial, next_worker_serial;
    int nclients;
    int nrefusing; /* of them, over max_clients, kept to be told so (client.c) */
    struct {
        uint32_t id, gen;
    } refusing[64]; /* the last 64 of those, a ring: the oldest gives way to a new one */
    unsigned refusing_next;
    uint64_t handshakes, query_timeouts;
    uint64_t tails; /* clients closed with their stream cut, what was queued ahead written first (tail.c) */
    int ntails;     /* of them, those whose last output is still being written: max_clients counts them */
    uint64_t pending_waits; /* messages that waited for room under pending_max */
    uint64_t held_passed; /* replies sent as the worker sent them for hold_max (not changed) */
    uint64_t nested; /* messages clients sent nested (while a worker waited on their callback's answer):
                      * run on that worker, or answered by the gateway */
    uint64_t connect_timeouts; /* worker connections that did not connect, or answer q's handshake, in worker_connect_timeout */
    struct {
        uint64_t n;       /* so far */
        struct log_limit log;
    } refused[GW_NREFUSALS];
    /* requests ended (access_req_loop), by outcome, and their bytes */
    uint64_t ended[ALOG_NOUTCOMES], req_bytes, reply_bytes;
    uint64_t accepted;   /* client connections accepted */
    int64_t started_ms, started_wall_ms;
    uint64_t bad_transitions; /* state changes the tables do not allow (worker.c): a bug */
    /* lines a client can cause as often as it sends: at most one a second of each kind
     * (log_limited), the next saying how many were not logged; refusals have theirs above,
     * messages from a worker that belong to nobody their group's dropped_log */
    struct {
        struct log_limit unasked;    /* a response message nobody asked for (callback.c) */
        struct log_limit orphan;     /* an answer to a callback whose worker has gone (callback.c) */
        struct log_limit not_admin;  /* an admin's command from a user who is not one (gateway.c) */
        struct log_limit not_routed; /* a route that cannot go (request.c) */
        struct log_limit fanout;     /* a .qgate.all that failed (fanout.c) */
        struct log_limit async_err;  /* an async gateway command that failed: nobody to tell (request.c) */
        struct log_limit accept;     /* accept() failing with a pending connection's error (client.c) */
        struct log_limit hold;       /* hold_max reached (run.c, fanout.c) */
        struct log_limit room;       /* a message waits for room under pending_max (request.c) */
    } lim;
    struct auth_shared *auth; /* users file, or NULL: any credentials */

    /* the access log (access.c): its file is its thread's (alog.c) */
    struct alog_writer *alogw; /* NULL until the log is first on */
    struct alog_counts alog_last; /* its counts when it stopped (access_close) */
    int64_t alog_warned_ms; /* the last "lines dropped: the queue is full" line */
    struct gw_name *names; /* interned worker names (access_name_loop) */
    size_t names_bytes;  /* what they take (tests/sim's accounting) */

    /* metrics and the summary line (report.c) */
    struct listener listen_metrics;
    struct connq metrics_conns; /* HTTP connections asking for the page, oldest first (mhttp.c) */
    int nmconns;
    uint8_t mpage_busy;       /* a metrics page is being made: who asks meanwhile gets it too (mhttp.c) */
    struct log_limit metrics_accept_log;
    struct timer stats_tm;
    int64_t stats_last_ms;
    uint64_t stats_last_ended;
    SLIST_HEAD(, ustate) users;
};

_Static_assert(offsetof(struct gw, loop) == 0, "the loop reaches its state through struct gw *");

/* A time of the loop's clock (ms) on the wall clock (ms since the epoch), for what operators read. */
static inline int64_t gw_wall_ms(const struct gw *g, int64_t mono_ms) { return g->started_wall_ms + (mono_ms - g->started_ms); }

/* May n more bytes be held whole for clients under hold_max (buf_held_bytes)? */
static inline int gw_hold_room(const struct gw *g, uint64_t n)
{
    return !g->cfg.hold_max || buf_held_bytes + n <= (uint64_t)g->cfg.hold_max;
}

/* Why n bytes cannot be held whole, for the log: hold_max reached with what others hold, or over
 * it by itself, never to fit (at 52e6d45 both were the first, with the bytes held, say 30: helper
 * round 23a). */
static inline const char *gw_hold_why(const struct gw *g, uint64_t n, char *buf, size_t len)
{
    if (g->cfg.hold_max && n > (uint64_t)g->cfg.hold_max)
        snprintf(buf, len, "over hold_max (%lld bytes) by itself", (long long)g->cfg.hold_max);
    else
        snprintf(buf, len, "hold_max reached (%zu bytes held whole)", buf_held_bytes);
    return buf;
}

/* The client's error for it: busy (room comes as others' replies go), or too large to hold (it
 * never will be; 'busy' told the client to try again). */
static inline const char *gw_hold_error(const struct gw *g, uint64_t n, char *buf, size_t len)
{
    if (g->cfg.hold_max && n > (uint64_t)g->cfg.hold_max)
        snprintf(buf, len, JOB_HOLD_OVER, (unsigned long long)n, (long long)g->cfg.hold_max);
    else
        snprintf(buf, len, JOB_HOLD_BUSY, (long long)g->cfg.hold_max);
    return buf;
}

#endif

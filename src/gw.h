/* gw.h: the gateway's state. Everything here is owned by the loop thread alone: no pool
 * thread ever sees a struct conn, a client, a worker or a group. */
#ifndef GW_H
#define GW_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "buf.h"
#include "config.h"
#include "pool.h"
#include "stats.h"

struct gw;

/* ---- timers: a min-heap of deadlines in ms; an all-zero timer is inactive ---------------- */
struct timer {
    int64_t when;
    int pos; /* 1-based heap index; 0 = not armed */
    void (*fn)(struct gw *g, struct timer *t);
};

struct timers {
    struct timer **h;
    int n, cap;
};

/* ---- connections ------------------------------------------------------------------------ */
enum ev_kind { EV_LISTENER = 1, EV_POOL, EV_SIGNAL, EV_CLIENT, EV_WORKER, EV_WORKERS };

/* What epoll reports: every registered object starts with its kind. */
struct evsrc {
    uint8_t kind;
};

/* Client states:
 *   HANDSHAKE --parsed, no users file--> READY
 *   HANDSHAKE --parsed--> AUTH (a reader checks the credentials) --ok--> READY
 *   HANDSHAKE or AUTH --too long, timeout, bad credentials--> CLOSING (no byte sent)
 *   READY --input ended (EOF, reset)--> GONE: the socket is closed; the requests it sent before
 *     still run, in order, their replies dropped --the last one done--> CLOSING
 *   READY --bad message--> FLUSHING (error queued after the replies owed, nothing more read)
 *     --sent--> LINGER (write side shut, input read and dropped so the error is not lost to a
 *     reset) --EOF or 2 s--> CLOSING
 *   FLUSHING --input ended--> GONE
 *   any --stalled (client_stall_timeout), admin, out of memory--> CLOSING
 * A client in AUTH whose input ends stays in AUTH (eof set) and goes on to GONE or CLOSING when
 * the check returns. */
#define CLIENT_STATES(X) X(HANDSHAKE) X(AUTH) X(READY) X(FLUSHING) X(LINGER) X(GONE) X(CLOSING)
#define ST_ENUM(e) CS_##e,
enum client_state { CLIENT_STATES(ST_ENUM) };
#undef ST_ENUM

/* Worker states:
 *   DOWN --back-off timer, address known--> CONNECTING
 *   DOWN --back-off timer, address unknown--> RESOLVING (a reader resolves it) --> CONNECTING
 *   CONNECTING --writable--> HANDSHAKE --capability byte--> IDLE
 *   IDLE --dispatch--> BUSY --reply complete--> IDLE
 *   any --error, EOF, timeout--> DOWN (reconnect with back-off), or gone when removed */
#define WORKER_STATES(X) X(DOWN) X(RESOLVING) X(CONNECTING) X(HANDSHAKE) X(IDLE) X(BUSY)
#define ST_ENUM(e) WS_##e,
enum worker_state { WORKER_STATES(ST_ENUM) };
#undef ST_ENUM

/* Request states (a client's FIFO, answered in order; only the head is ever started):
 *   WAITING (behind the head) -> CHECKING (a reader validates its body) -> WAITING
 *   WAITING -> QUEUED (in its group's queue) -> RUNNING (on a worker, or broadcast)
 *   WAITING -> LOCAL (a pool job is making its reply) -> READY (reply bytes held) -> sent */
#define REQ_STATES(X) X(WAITING) X(CHECKING) X(QUEUED) X(RUNNING) X(LOCAL) X(READY)
#define ST_ENUM(e) RS_##e,
enum req_state { REQ_STATES(ST_ENUM) };
#undef ST_ENUM

struct req {
    STAILQ_ENTRY(req) link;
    uint64_t seq;
    uint8_t type;        /* KIPC_SYNC or KIPC_ASYNC */
    uint8_t state;
    uint8_t close_after; /* close the client once this reply is sent (badmsg) */
    uint8_t unchecked;   /* its body is validated on the reader pool before it may run */
    uint8_t *msg;        /* the request bytes until sent to a worker */
    size_t len;
    struct chunk *reply; /* READY: the reply */
    int64_t t_arrive;    /* ms */
};
STAILQ_HEAD(reqlist, req);

/* What a held request costs, counted against client_max_pending: its bytes and its
 * bookkeeping (a flood of tiny async messages is bounded too). */
static inline size_t req_cost(const struct req *r) { return r->len + sizeof(struct req) + 32; }

struct conn {
    uint8_t kind;        /* EV_CLIENT or EV_WORKER: first, as struct evsrc */
    uint8_t closing;     /* conn_close was called; freed at the end of the iteration */
    uint8_t dirty;       /* on the flush list */
    uint8_t want_out;    /* EPOLLOUT registered */
    uint8_t registered;  /* fd is in an epoll set */
    uint32_t id, gen;
    int fd;
    uint32_t events;     /* registered epoll mask */
    struct outq out;
    struct inbuf in;
    TAILQ_ENTRY(conn) dirty_link;   /* g->dirty */
    STAILQ_ENTRY(conn) closed_link; /* g->closed */
    char name[160];      /* log prefix */
};

struct group;
struct worker;

/* A user of the users file: its limits and how much it uses now. Keyed by the exact name of
 * its users-file entry. */
struct ustate {
    struct ustate *next;
    char name[64];
    int conns, inflight;            /* connections open; requests on workers */
    int max_conns, max_inflight;    /* 0 = unlimited */
    uint8_t admin;
};

/* A worker's callback (a sync request with .z.w) relayed to a client: its answer, the next
 * response the client sends, goes back to that worker connection, if it is still there and
 * still waiting. Answers match callbacks in order, as q matches them. */
struct call {
    STAILQ_ENTRY(call) link;
    uint32_t w_id, w_gen;
    uint8_t cancelled;   /* the worker was told the answer is not coming: drop it */
};
STAILQ_HEAD(calllist, call);

struct client {
    struct conn c;
    uint8_t st;
    uint8_t cap;         /* negotiated capability */
    uint8_t local;       /* on this host: never compressed */
    uint8_t queued;      /* in its group's queue */
    uint8_t paused;      /* reading stopped: too many bytes waiting their turn */
    uint8_t in_backlog;  /* on g->backlog */
    uint8_t eof;         /* its input ended: nothing more will be read, nothing sent */
    uint8_t has_pipe;
    uint8_t streaming;   /* its worker is in the middle of a message to it: other whole
                          * messages (pushes of other workers) wait in held */
    struct outq held;
    uint64_t serial;     /* its number, shown in logs and .qgate.clients[]; never reused */
    char user[64];       /* as sent, made printable and cut, for logs */
    char peer[64];
    struct ustate *us;   /* with a users file: the user's limits and counts */
    struct group *grp;
    struct reqlist reqs;
    size_t pending;      /* bytes of requests held */
    uint64_t next_seq;
    TAILQ_ENTRY(client) qlink;        /* its group's queue */
    TAILQ_ENTRY(client) backlog_link; /* g->backlog: whole messages left after the frames budget */
    struct timer tm;     /* handshake timeout, then the head request's queue timeout, linger */
    struct timer stall_tm; /* client_stall_timeout while output waits */
    int64_t stall_since; /* ms: output has waited (without a byte accepted) since */
    struct worker *w;    /* worker running the head request */
    int pipe_rd, pipe_wr; /* reply bytes spliced from a worker, ahead of everything in out */
    size_t piped, pipe_cap;
    struct calllist calls; /* callbacks relayed to it, not yet answered, oldest first */
    int ncalls;
};

static inline struct req *client_head(const struct client *c) { return STAILQ_FIRST(&c->reqs); }

/* A broadcast async message waiting to be sent to a worker. */
struct bmsg {
    int refs;            /* workers that have yet to take it */
    uint32_t cl_id, cl_gen;
    uint64_t seq;
    size_t len;
    uint8_t data[];
};

/* A broadcast on its way to one worker: queued (bq) or sent and not yet run (bsent, which
 * keeps only its client and number once the message itself is let go). */
struct bnode {
    STAILQ_ENTRY(bnode) link;
    struct bmsg *m;
    uint32_t cl_id, cl_gen;
    uint64_t seq;
    uint8_t seg_end;     /* bsent: a chaser follows it (the last of one client's run) */
};
STAILQ_HEAD(bnodelist, bnode);

struct worker {
    struct conn c;
    uint8_t st;
    uint8_t cap;
    uint8_t relay;       /* the message being read goes to the client (else dropped) */
    uint8_t collect;     /* ...is collected whole for a pool job instead */
    uint8_t sent_any;    /* bytes of the current reply reached the client */
    uint8_t paused;      /* reading stopped: the client's output is over high water */
    uint8_t removed;     /* dropped by a reload: close when idle */
    uint8_t async_run;   /* the current dispatch is a batch of async messages */
    uint8_t want_type;   /* the next body byte tells whether a reply is an error */
    uint8_t is_error;    /* the reply being relayed is a q error */
    uint8_t idle_listed; /* on its group's idle list */
    uint8_t resolved;    /* sa holds its address */
    uint8_t timed_out;   /* its connection is being dropped for query_timeout */
    uint8_t hdr_have;
    uint8_t hdr[8];
    uint8_t mtype;       /* type of the message being read */
    uint64_t left;       /* its bytes still to come */
    int swallow;         /* chaser replies to drop before the request's own */
    uint64_t serial;     /* names it to pool jobs (resolution) */
    struct group *grp;
    TAILQ_ENTRY(worker) glink;     /* group's workers */
    TAILQ_ENTRY(worker) ilink;     /* group's idle list */
    char addr[300];
    struct sockaddr_storage sa;
    socklen_t salen;
    struct client *cl;   /* client of the current request; NULL once it is gone */
    uint32_t cl_id, cl_gen;
    uint32_t last_id, last_gen; /* the client it served last: gets its async messages when idle */
    uint8_t to_self;     /* the message being read is for the running request's client, and
                          * streams; else for to_id/to_gen, and is collected whole */
    uint32_t to_id, to_gen;
    uint64_t req_seq;
    struct inbuf coll;   /* a reply collected whole */
    int64_t backoff;     /* ms */
    struct timer tm;
    struct bnodelist bq;    /* broadcasts to send before the next request */
    struct bnodelist bsent; /* broadcasts sent, not yet known to have run: until a run's
                             * chaser returns, the worker is running that client's messages */
    int64_t t_start_us;
    uint64_t served, errors, dropped;
    struct hist lat;
};
TAILQ_HEAD(workerlist, worker);
TAILQ_HEAD(clientlist, client);

struct group {
    struct group_cfg cfg;
    int index;
    struct workerlist workers;
    int nworkers;
    struct workerlist idle;
    struct clientlist queue;
    int qlen;
    int nup;             /* workers connected (IDLE or BUSY) */
    uint8_t unavailable; /* none up and the last attempt to connect one failed */
};

/* Seams for tests/sim, which runs the real loop against fake clients and workers with a fake
 * clock. All zero in production. */
struct gw_hooks {
    void *ctx;
    int64_t (*now_us)(void *ctx);                 /* the clock; NULL = CLOCK_MONOTONIC */
    int (*connect)(void *ctx, const char *addr);  /* a socket connected (or connecting) to the
                                                   * worker at addr, non-blocking; -1 = refused */
    void (*lost)(void *ctx, uint32_t id, uint32_t gen, uint64_t seq); /* a client's message
                                                   * went down with the worker running it (or
                                                   * the gateway gave up on that worker: it may
                                                   * still run the message, late) */
    void (*closed)(void *ctx, uint32_t id, uint32_t gen, const char *why); /* a client closed */
    int manual_pools;                             /* pools without threads (pool_run_one) */
};

TAILQ_HEAD(connlist, conn);
STAILQ_HEAD(connslist, conn);

struct gw {
    struct config cfg;
    struct gw_hooks hooks;
    int64_t now_us;      /* cached clock, with now_ms */
    char config_path[1024];
    struct cfg_overrides overrides; /* command-line keys, applied again on reload */
    int epfd;            /* listeners, clients, pools, signals, and wepfd itself */
    int wepfd;           /* worker connections alone: served between batches of clients */
    struct evsrc ev_listen_tcp, ev_listen_uds, ev_readers, ev_writers, ev_signal, ev_workers;
    int lfd_tcp, lfd_uds, sigfd;
    int reserve_fd;      /* kept open to be given up when accept meets EMFILE */
    int64_t emfile_logged_ms;
    uint64_t emfile_refused;
    int port;            /* bound port */
    struct pool *readers, *writers;
    struct conn **tab;   /* by id */
    uint32_t *gens;
    uint32_t tab_cap;
    uint32_t *free_ids;  /* a FIFO ring of freed ids: reused oldest first, after a quarantine */
    uint32_t free_head, nfree, next_id;
    uint64_t next_serial, next_worker_serial;
    int nclients;
    struct group groups[CFG_MAX_GROUPS];
    int ngroups;
    struct timers timers;
    int64_t now_ms;      /* cached clock, updated once per iteration */
    struct connlist dirty;
    int ndirty;
    struct connslist closed;
    struct clientlist backlog;
    int work_pending;    /* something to do without waiting: epoll timeout 0 */
    int draining;        /* SIGTERM seen */
    int reloading;       /* a reload job is out */
    int reload_again;    /* another was asked for meanwhile: the file may have changed again */
    uint32_t reload_req_id, reload_req_gen; /* ...by this client's request (0: by SIGHUP) */
    uint64_t reload_req_seq;
    struct timer drain_tm;
    int stop;            /* leave the loop */
    int exit_code;
    uint8_t chaser[14];  /* sync "" : makes a worker report that it ran what came before */
    uint8_t *no_client_err; /* response for a worker's request when its client is gone */
    size_t no_client_err_len;
    uint64_t handshakes, handshake_failures, badmsgs, busy_replies, timeouts, stalls;
    struct auth_shared *auth; /* users file, or NULL: any credentials */
    struct ustate *users;
};

/* ---- loop.c ----------------------------------------------------------------------------- */
int64_t gw_now_us(void);
/* Read the clock (the hook's, or CLOCK_MONOTONIC) into g->now_us and g->now_ms. */
void gw_clock_loop(struct gw *g);
/* How long the next iteration may wait in epoll: 0 if work is pending, else until the next
 * timer (at most 60 s), -1 for no limit. */
int gw_wait_ms(const struct gw *g);
/* One iteration of the loop (DESIGN.md): epoll_wait up to timeout_ms, clock, ready fds within
 * budgets, completions, dispatch, flush, timers, reclaim. 0, or -1 if epoll failed. */
int gw_step_loop(struct gw *g, int timeout_ms);
void timer_arm(struct gw *g, struct timer *t, int64_t when_ms, void (*fn)(struct gw *, struct timer *));
void timer_cancel(struct gw *g, struct timer *t);
int64_t timers_next(const struct timers *ts);
/* Remove and return the earliest timer due at or before now, or NULL. */
struct timer *timers_pop_due(struct timers *ts, int64_t now);
void timers_free(struct timers *ts);
/* Handle one completion: dropped if its connection is gone (or its id reused). */
void gw_completion_loop(struct gw *g, struct job *j);
/* Take a pool's whole completion list in one splice and handle every job; returns how many. */
int gw_drain_pool_loop(struct gw *g, struct pool *p);
/* Write what connections have pending (step 6 of the iteration). */
void gw_flush_dirty_loop(struct gw *g);
/* Run the loop until SIGTERM has drained or gw->stop is set. */
int gw_run(struct gw *g);

/* ---- conn.c ----------------------------------------------------------------------------- */
/* Register a new connection (its id and generation) with epoll for events. 0 or -1. */
int conn_register(struct gw *g, struct conn *c, int fd, uint32_t events);
/* The live connection with this id and generation, or NULL (gone or reused). */
struct conn *conn_lookup(struct gw *g, uint32_t id, uint32_t gen);
void conn_set_events(struct gw *g, struct conn *c, uint32_t events);
/* Output was queued: flush it this iteration. */
void conn_mark_dirty(struct gw *g, struct conn *c);
/* Take it off the flush list (it has nothing to send any more). */
void conn_unmark_dirty(struct gw *g, struct conn *c);
/* Close the socket but keep the connection (its id stays valid): a client whose input ended
 * while its requests still run. Output is dropped. */
void conn_drop_socket(struct gw *g, struct conn *c);
/* The one teardown path: log why, take it off every list, free at the end of the iteration. */
void conn_close(struct gw *g, struct conn *c, const char *why);
/* Write what is pending within the write budget. -1 if the connection failed. */
int conn_flush_loop(struct gw *g, struct conn *c);
/* Free connections closed during this iteration. */
void conn_reap_loop(struct gw *g);

/* ---- client.c --------------------------------------------------------------------------- */
void client_accept_loop(struct gw *g, int lfd, int is_uds);
/* Take a connected client socket (from accept, or a test): returns the client, or NULL (fd closed). */
struct client *client_adopt_loop(struct gw *g, int fd, int is_uds, int local);
void client_on_event_loop(struct gw *g, struct client *c, uint32_t ev);
/* Start the head request if it is waiting, and send every finished reply at the head; loops
 * (never recurses) over however many requests finish at once. */
void client_advance_loop(struct gw *g, struct client *c);
/* A reply for request seq is ready (made by a pool job). */
void client_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len);
/* A reader checked the credentials of a client in AUTH: ok, and the entry's exact name and
 * limits. */
void client_auth_done_loop(struct gw *g, struct client *c, int ok, const char *entry, int admin, int max_conns,
                           int max_inflight);
/* A reader validated the body of request seq (j's input, handed back): run it, or badmsg. */
void client_checked_loop(struct gw *g, struct client *c, struct job *j);
/* A reader validated a response of c's to a worker's nested request: pass it on, or badmsg. */
void client_nested_checked_loop(struct gw *g, struct client *c, struct job *j);
/* The client's input ended (EOF, reset, a failed write): what it sent still runs, with the
 * replies dropped; it is closed when the last one is done. */
void client_peer_gone_loop(struct gw *g, struct client *c, const char *why);
/* Worker w sends c a callback (a sync request): its answer is expected, and c is read until it
 * comes. 0, or -1 on ENOMEM. */
int client_callback_loop(struct gw *g, struct client *c, struct worker *w);
/* c will not answer w's callbacks (it is leaving, or stopped being read): w is told so. */
void client_cancel_calls_loop(struct gw *g, struct client *c, const struct worker *w);
/* The one setter of the worker running c's head request; keeps the user's count. */
void client_set_worker(struct client *c, struct worker *w);
/* The client with this serial (as shown by .qgate.clients[]), or NULL. */
struct client *client_by_serial(struct gw *g, uint64_t serial);
/* The .qgate.clients[] snapshot (malloc'd). */
struct clients_snapshot *gw_clients_snapshot(struct gw *g);
/* Answer request r with the q error text (via the writer pool). */
void client_error_loop(struct gw *g, struct client *c, struct req *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The head request finished (its reply fully relayed or dropped). */
void client_head_done_loop(struct gw *g, struct client *c);
void client_teardown(struct gw *g, struct client *c);
/* Room in a client's splice pipe (created on first use); 0 if splicing is not possible. */
size_t client_pipe_room_loop(struct gw *g, struct client *c);
/* Send what the splice pipe holds; -1 if the connection failed (it is then closed). */
int client_pipe_flush_loop(struct gw *g, struct client *c);
/* After a flush: output drained below the low-water mark lets its worker stream again and its
 * next request start; output still waiting starts (or keeps) the stall clock. */
void client_flushed_loop(struct gw *g, struct client *c, size_t before, size_t wrote);
/* A worker finished a message to c: whole messages held back meanwhile go out now. */
void client_stream_end_loop(struct gw *g, struct client *c);
/* Is its output (queued, piped and held) over client_high_water? Then no new request starts. */
int client_output_full(const struct gw *g, const struct client *c);
const char *client_state_name(int st);
void client_pause_all_loop(struct gw *g);
/* Everything owed was sent after a bad message: shut our side, drain theirs, then close. */
void client_linger_loop(struct gw *g, struct client *c);
/* Take the messages that the frames budget left in clients' buffers. */
void client_backlog_loop(struct gw *g);
/* The credentials of users-file entries changed (a reload): apply them to connected users. */
void client_users_reloaded_loop(struct gw *g);

/* ---- worker.c --------------------------------------------------------------------------- */
struct worker *worker_new(struct gw *g, struct group *grp, const char *addr);
void worker_connect_loop(struct gw *g, struct worker *w);
/* A reader resolved the worker's address (j->out holds a sockaddr, or nothing). */
void worker_resolved_loop(struct gw *g, struct job *j);
void worker_on_event_loop(struct gw *g, struct worker *w, uint32_t ev);
/* Send client c's head request (and any async ones right behind it) to idle worker w. */
void worker_start_loop(struct gw *g, struct worker *w, struct client *c);
/* The client of the running request has gone: drain its reply and reuse the worker. */
void worker_client_gone_loop(struct gw *g, struct worker *w);
void worker_resume_loop(struct gw *g, struct worker *w);
/* Queue a broadcast message on every worker of the group that is up; how many. */
int worker_broadcast_loop(struct gw *g, struct group *grp, struct client *c, struct req *r);
/* A client's response to a worker's nested sync request. */
void worker_nested_reply_loop(struct gw *g, struct worker *w, uint8_t *msg, size_t len);
void worker_teardown(struct gw *g, struct worker *w);
/* A reload dropped it: close now if idle or down, after its request if busy. */
void worker_remove_loop(struct gw *g, struct worker *w);
/* Free a worker for good (gw_free). */
void worker_free(struct worker *w);
const char *worker_state_name(int st);
int worker_busy_count(const struct gw *g);

/* ---- dispatch.c ------------------------------------------------------------------------- */
struct group *dispatch_route(struct gw *g, const char *user);
/* Put c (whose head request is ready to run) in its group's queue. 0, or -1 if full (sync
 * requests only: an async message cannot be answered, so it always waits its turn). */
int dispatch_enqueue_loop(struct gw *g, struct client *c);
void dispatch_dequeue_loop(struct gw *g, struct client *c);
void dispatch_worker_idle_loop(struct gw *g, struct worker *w);
void dispatch_worker_unidle_loop(struct gw *g, struct worker *w);
/* Hand queued requests to idle workers, round-robin across waiting clients. */
void dispatch_run_loop(struct gw *g, struct group *grp);
void dispatch_all_loop(struct gw *g);
/* No worker of the group is up and connecting failed: answer every sync request waiting. */
void dispatch_fail_group_loop(struct gw *g, struct group *grp);

/* ---- gateway.c -------------------------------------------------------------------------- */
/* Set the gateway up: listeners, pools, signals, groups. hooks may be NULL (production). */
int gw_init(struct gw *g, const struct config *cfg, const char *config_path, const struct cfg_overrides *ov,
            const struct gw_hooks *hooks);
/* SIGHUP or .qgate.reload[]: a reader rereads the config file and the users file; the loop
 * then adds and removes workers without dropping clients. The requester (a client's request
 * seq), if any, is answered when it is done. Asked for while one is under way, it runs next
 * (one more at most: it reads the newest file). 0, or -1 if two clients already wait. */
int gw_reload_loop(struct gw *g, struct conn *requester, uint64_t seq);
/* Apply what a reload job read (j->ctx: struct reload_result); answers its requester. */
void gw_reload_done_loop(struct gw *g, struct job *j);
/* SIGTERM: stop accepting, let what was received finish, then stop. */
void gw_drain_loop(struct gw *g);
void gw_free(struct gw *g);
/* Send a job to a pool for connection c's request seq. */
void gw_submit(struct gw *g, struct pool *p, struct job *j, struct conn *c, uint64_t seq);
/* The .qgate.stats[] snapshot (malloc'd). */
struct stats_snapshot *gw_stats_snapshot(struct gw *g);

#endif

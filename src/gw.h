/* gw.h: the gateway's state. Everything here is owned by the loop thread alone: no pool
 * thread ever sees a struct conn, a client, a worker or a group. */
#ifndef GW_H
#define GW_H

#include <stdint.h>
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
 *   HANDSHAKE --parsed, no users file--> READY --close--> CLOSING
 *   HANDSHAKE --parsed--> AUTH (a reader checks the credentials) --ok--> READY
 *   HANDSHAKE or AUTH --too long, timeout, bad credentials--> CLOSING (no byte sent)
 *   READY --bad header--> FLUSHING (error queued, nothing more read) --sent--> LINGER
 *   LINGER (write side shut, input read and dropped so the error is not lost to a reset)
 *     --EOF or 2 s--> CLOSING */
#define CLIENT_STATES(X) X(HANDSHAKE) X(AUTH) X(READY) X(FLUSHING) X(LINGER) X(CLOSING)
#define ST_ENUM(e) CS_##e,
enum client_state { CLIENT_STATES(ST_ENUM) };
#undef ST_ENUM

/* Worker states:
 *   DOWN --back-off timer--> CONNECTING --writable--> HANDSHAKE --capability byte--> IDLE
 *   IDLE --dispatch--> BUSY --reply complete--> IDLE
 *   any --error, EOF, timeout--> DOWN (reconnect with back-off) or gone when removed */
#define WORKER_STATES(X) X(DOWN) X(CONNECTING) X(HANDSHAKE) X(IDLE) X(BUSY)
#define ST_ENUM(e) WS_##e,
enum worker_state { WORKER_STATES(ST_ENUM) };
#undef ST_ENUM

/* Request states (a client's FIFO, answered in order; only the head is ever started):
 *   WAITING (behind the head) -> QUEUED (in its group's queue) -> RUNNING (on a worker)
 *   WAITING -> LOCAL (a pool job is making its reply) -> READY (reply bytes held) -> sent */
#define REQ_STATES(X) X(WAITING) X(QUEUED) X(RUNNING) X(LOCAL) X(READY)
#define ST_ENUM(e) RS_##e,
enum req_state { REQ_STATES(ST_ENUM) };
#undef ST_ENUM

struct req {
    struct req *next;
    uint64_t seq;
    uint8_t type;        /* KIPC_SYNC or KIPC_ASYNC */
    uint8_t state;
    uint8_t close_after; /* close the client once this reply is sent (badmsg) */
    uint8_t *msg;        /* the request bytes until sent to a worker */
    size_t len;
    struct chunk *reply; /* READY: the reply */
    int64_t t_arrive;    /* ms */
};

/* What a held request costs, counted against client_max_pending: its bytes and its
 * bookkeeping (a flood of tiny async messages is bounded too). */
static inline size_t req_cost(const struct req *r) { return r->len + sizeof(struct req) + 32; }

struct conn {
    uint8_t kind;        /* EV_CLIENT or EV_WORKER: first, as struct evsrc */
    uint8_t closing;     /* conn_close was called; freed at the end of the iteration */
    uint8_t dirty;       /* on the flush list */
    uint8_t want_out;    /* EPOLLOUT registered */
    uint32_t id, gen;
    int fd;
    uint32_t events;     /* registered epoll mask */
    struct outq out;
    struct inbuf in;
    struct conn *next_dirty, *next_closed;
    char name[160];      /* log prefix */
};

struct group;
struct worker;

/* A user of the users file: its limits and how much it uses now. */
struct ustate {
    struct ustate *next;
    char name[64];
    int conns, inflight;            /* connections open; requests on workers */
    int max_conns, max_inflight;    /* 0 = unlimited */
    uint8_t admin;
};

struct client {
    struct conn c;
    uint8_t st;
    uint8_t cap;         /* negotiated capability */
    uint8_t local;       /* on this host: never compressed */
    uint8_t queued;      /* in its group's queue */
    uint8_t paused;      /* reading stopped: too many bytes waiting their turn */
    char user[64];
    char peer[64];
    struct ustate *us;   /* with a users file: the user's limits and counts */
    struct group *grp;
    struct req *head, *tail;
    size_t pending;      /* bytes of requests held */
    uint64_t next_seq;
    struct client *qprev, *qnext;
    struct timer tm;     /* handshake timeout, then the head request's queue timeout */
    struct client *next_backlog; /* whole messages left over after the frames budget */
    uint8_t in_backlog;
    struct worker *w;    /* worker running the head request */
    int pipe_rd, pipe_wr; /* reply bytes spliced from a worker, ahead of everything in out */
    size_t piped, pipe_cap;
    uint8_t has_pipe;
    uint32_t nested_id, nested_gen; /* worker waiting for this client's response */
};

/* A broadcast async message waiting to be sent to a worker. */
struct bmsg {
    int refs;            /* workers that have yet to take it */
    uint32_t cl_id, cl_gen;
    uint64_t seq;
    size_t len;
    uint8_t data[];
};

struct bnode {
    struct bnode *next;
    struct bmsg *m;
};

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
    uint8_t hdr_have;
    uint8_t hdr[8];
    uint8_t mtype;       /* type of the message being read */
    uint64_t left;       /* its bytes still to come */
    int swallow;         /* chaser replies to drop before the request's own */
    struct group *grp;
    struct worker *gnext;             /* group's list */
    struct worker *inext, *iprev;     /* group's idle list */
    uint8_t idle_listed;
    char addr[300];
    struct sockaddr_storage sa;
    socklen_t salen;
    struct client *cl;   /* client of the current request; NULL once it is gone */
    uint32_t cl_id, cl_gen;
    uint64_t req_seq;
    struct inbuf coll;   /* a reply collected whole */
    int64_t backoff;     /* ms */
    struct timer tm;
    struct bnode *bq_head, *bq_tail;  /* broadcasts to send before the next request */
    int64_t t_start_us;
    uint64_t served, errors;
    struct hist lat;
};

struct group {
    struct group_cfg cfg;
    int index;
    struct worker *workers;
    int nworkers;
    struct worker *idle_head, *idle_tail;
    struct client *qhead, *qtail;
    int qlen;
    int nup;             /* workers connected (IDLE or BUSY) */
    uint8_t unavailable; /* none up and the last attempt to connect one failed */
};

struct gw {
    struct config cfg;
    char config_path[1024];
    struct cfg_overrides overrides; /* command-line keys, applied again on reload */
    int epfd;            /* listeners, clients, pools, signals, and wepfd itself */
    int wepfd;           /* worker connections alone: served between batches of clients */
    struct evsrc ev_listen_tcp, ev_listen_uds, ev_readers, ev_writers, ev_signal, ev_workers;
    int lfd_tcp, lfd_uds, sigfd;
    int port;            /* bound port */
    struct pool *readers, *writers;
    struct conn **tab;   /* by id */
    uint32_t *gens;
    uint32_t tab_cap;
    uint32_t *free_ids;
    uint32_t nfree, next_id;
    int nclients;
    struct group groups[CFG_MAX_GROUPS];
    int ngroups;
    struct timers timers;
    int64_t now_ms;      /* cached clock, updated once per iteration */
    struct conn *dirty, *closed;
    struct client *backlog;
    int work_pending;    /* something to do without waiting: epoll timeout 0 */
    int draining;        /* SIGTERM seen */
    int stop;            /* leave the loop */
    int exit_code;
    uint8_t chaser[14];  /* sync "" : makes a worker report that it ran what came before */
    uint8_t *no_client_err; /* response for a worker's request when its client is gone */
    size_t no_client_err_len;
    uint64_t handshakes, handshake_failures, badmsgs, busy_replies, timeouts;
    struct auth_shared *auth; /* users file, or NULL: any credentials */
    struct ustate *users;
};

/* ---- loop.c ----------------------------------------------------------------------------- */
int64_t gw_now_us(void);
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
/* The one teardown path: log why, detach from everything, free at the end of the iteration. */
void conn_close(struct gw *g, struct conn *c, const char *why);
/* Write what is pending within the write budget. -1 if the connection failed. */
int conn_flush_loop(struct gw *g, struct conn *c);
/* Free connections closed during this iteration. */
void conn_reap_loop(struct gw *g);

/* ---- client.c --------------------------------------------------------------------------- */
void client_accept_loop(struct gw *g, int lfd, int is_uds);
void client_on_event_loop(struct gw *g, struct client *c, uint32_t ev);
/* Start the head request if it is waiting, and send every finished reply at the head. */
void client_advance_loop(struct gw *g, struct client *c);
/* A reply for request seq is ready (made by a pool job). */
void client_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len);
/* A reader checked the credentials of a client in AUTH (limits of its users-file entry). */
void client_auth_done_loop(struct gw *g, struct client *c, int ok, int admin, int max_conns, int max_inflight);
/* The one setter of the worker running c's head request; keeps the user's count. */
void client_set_worker(struct client *c, struct worker *w);
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
/* Output drained below the low-water mark: let its worker stream again. */
void client_output_drained_loop(struct gw *g, struct client *c);
const char *client_state_name(int st);
void client_pause_all_loop(struct gw *g);
/* Everything owed was sent after a bad message: shut our side, drain theirs, then close. */
void client_linger_loop(struct gw *g, struct client *c);
/* Take the messages that the frames budget left in clients' buffers. */
void client_backlog_loop(struct gw *g);

/* ---- worker.c --------------------------------------------------------------------------- */
struct worker *worker_new(struct gw *g, struct group *grp, const char *addr);
void worker_connect_loop(struct gw *g, struct worker *w);
void worker_on_event_loop(struct gw *g, struct worker *w, uint32_t ev);
/* Send client c's head request (and any async ones right behind it) to idle worker w. */
void worker_start_loop(struct gw *g, struct worker *w, struct client *c);
/* The client of the running request has gone: drain its reply and reuse the worker. */
void worker_client_gone_loop(struct gw *g, struct worker *w);
void worker_resume_loop(struct gw *g, struct worker *w);
/* Queue a broadcast message on every worker of the group that is up. */
int worker_broadcast_loop(struct gw *g, struct group *grp, struct client *c, struct req *r);
/* A client's response to a worker's nested sync request. */
void worker_nested_reply_loop(struct gw *g, struct worker *w, uint8_t *msg, size_t len);
void worker_teardown(struct gw *g, struct worker *w);
/* A reload dropped it: close now if idle or down, after its request if busy. */
void worker_remove_loop(struct gw *g, struct worker *w);
const char *worker_state_name(int st);
int worker_busy_count(const struct gw *g);

/* ---- dispatch.c ------------------------------------------------------------------------- */
struct group *dispatch_route(struct gw *g, const char *user);
/* Put c (whose head request is ready to run) in its group's queue. 0, or -1 if full. */
int dispatch_enqueue_loop(struct gw *g, struct client *c);
void dispatch_dequeue_loop(struct gw *g, struct client *c);
void dispatch_worker_idle_loop(struct gw *g, struct worker *w);
void dispatch_worker_unidle_loop(struct gw *g, struct worker *w);
/* Hand queued requests to idle workers, round-robin across waiting clients. */
void dispatch_run_loop(struct gw *g, struct group *grp);
void dispatch_all_loop(struct gw *g);
/* No worker of the group is up and connecting failed: answer everyone waiting. */
void dispatch_fail_group_loop(struct gw *g, struct group *grp);

/* ---- gateway.c -------------------------------------------------------------------------- */
int gw_init(struct gw *g, const struct config *cfg, const char *config_path, const struct cfg_overrides *ov);
/* SIGHUP: reread the config file; add and remove workers without dropping clients. */
int gw_reload_loop(struct gw *g);
/* SIGTERM: stop accepting, let what was received finish, then stop. */
void gw_drain_loop(struct gw *g);
void gw_free(struct gw *g);
/* Send a job to a pool for connection c's request seq. */
void gw_submit(struct gw *g, struct pool *p, struct job *j, struct conn *c, uint64_t seq);
/* The .qgate.stats[] snapshot (malloc'd). */
struct stats_snapshot *gw_stats_snapshot(struct gw *g);

#endif

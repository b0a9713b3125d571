/* dispatch.h: worker groups (routing, the queue of waiting clients, the idle workers) and the
 * pairing of the two, round-robin. The two sides reach each other through the ops below: the
 * client side (client.c, request.c) and the worker side (worker.c, run.c) each fill one, so
 * that neither needs the other's header to be told what happened. */
#ifndef DISPATCH_H
#define DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "alog.h"
#include "config.h"
#include "conn.h"
#include "query.h"
#include "stats.h"
#include "gw.h"
#include "log.h"

struct gw;
struct worker;
struct client;
struct req;
struct fanout;

TAILQ_HEAD(workerlist, worker);

/* A group's mode: how its workers are chosen and what a run does besides a plain request's path
 * (a variant of the run, worker/run.c). The worker side fills one for plain requests, one for
 * sessions (pool = session), one for pipelining (pipeline > 1); a group's is chosen from its
 * configuration (run_mode_of), again on reload. */
struct group_mode {
    const char *name;
    /* The idle connection of grp that takes its next request (NULL: none). */
    struct conn *(*idle_first)(struct gw *g, struct group *grp);
    /* Every worker busy: start client's head, a sync request, on a free connection of a busy
     * worker. 1 if one took it; 0 if it is not such a request; -1 if none may. NULL: never. */
    int (*follow)(struct gw *g, struct group *grp, struct conn *client);
    /* A client's request begins on w (a session: the worker is given to it). NULL: nothing. */
    void (*begin)(struct gw *g, struct worker *w, struct client *client);
    /* w's run has ended: what w does next. */
    void (*end)(struct gw *g, struct worker *w);
};

struct group {
    struct group_cfg cfg;
    const struct group_mode *mode;
    int index;
    struct workerlist workers; /* every worker of the group, in configuration order */
    int nworkers;
    struct connq idle;   /* workers IDLE: their leads (worker_set_state_loop keeps it) */
    struct connq spare;  /* pipeline > 1: their other connections IDLE */
    struct connq queue;  /* clients whose head request is QUEUED (request_set_state_loop keeps it) */
    struct connq held;   /* clients whose head is HELD: a session's or a .qgate.all's request,
                          * which never enter the queue, waiting for the group's resume */
    int nup;             /* workers up (IDLE, BUSY or PINNED) */
    uint8_t unavailable; /* none up and the last attempt to connect one failed */
    uint8_t paused;      /* .qgate.pause[] (control.c): runs what its workers owe, starts nothing new */
    uint8_t stale;       /* no longer in the file (reload): it stays until a restart, reached by name
                          * (.qgate.on), but users are sent to the groups the file has */
    uint64_t pipelined;  /* requests sent to a busy worker, on another connection (pipeline.c) */
    struct log_limit dropped_log; /* async messages from its workers that belong to nobody */
    struct log_limit reset_log;   /* its reset query answered with a q error */
    struct qslot *queries; /* QUERY_SLOTS: what it learned of each query it ran (query.c) */
    /* its totals, kept whatever its workers do (a reload that removes one takes nothing away):
     * requests ended by outcome, their bytes, the refusals of its requests, and how long they
     * waited for a worker (from arrival to when their run began), ran, and took in all */
    uint64_t ended[ALOG_NOUTCOMES], req_bytes, reply_bytes;
    uint64_t refused_busy, refused_timeout, refused_no_worker;
    uint64_t served, errors; /* runs of requests its workers ended, and those a q error */
    struct hist wait, run, total;
};

/* Does grp send requests to busy workers, on their other connections (pipeline > 1; never in a
 * session pool)? */
static inline int group_pipelines(const struct group *grp)
{
    return grp->cfg.pipeline > 1 && grp->cfg.pool_mode != CFG_POOL_SESSION;
}
/* The key pipelining learns a query of length len by in grp: key when grp sends requests behind
 * learned runs and the query is short enough to learn, else 0. */
static inline uint64_t group_learn_key(const struct group *grp, uint64_t key, size_t len)
{
    return group_pipelines(grp) && grp->cfg.pipeline_wait && len <= QUERY_KEY_MAX ? key : 0;
}
/* How many connections grp keeps to each of its workers. */
static inline int group_conns(const struct group *grp) { return group_pipelines(grp) ? grp->cfg.pipeline : 1; }

enum { OWES_ANY = 0, OWES_FIRST = 1 };

/* What dispatch may start for a queued client (frontend ops ready). */
enum { WAIT_NOT_NOW = 0, WAIT_WORKER = 1, WAIT_BROADCAST = 2 };

/* The client side, as dispatch sees it (client.c). */
struct frontend_ops {
    /* A queued client: may its head start now, and on what? (enum above) */
    int (*ready)(struct gw *g, struct conn *client);
    /* Its head is a broadcast and a worker is up: send it to every worker up. */
    void (*broadcast)(struct gw *g, struct conn *client);
    /* No worker of its group is up and connecting failed: a sync head is answered. */
    void (*no_worker)(struct gw *g, struct conn *client);
    /* A .qgate.pause[] of client's request seq has completed (done: answered 1b, what says so for
     * the log), or was cut short by a resume (what: the error). Nothing if the client or that
     * request has gone. */
    void (*pause_done)(struct gw *g, uint32_t id, uint32_t gen, uint64_t seq, int done, const char *what);
};

/* The worker side, as dispatch and the client side see it (worker.c, run.c). */
struct backend_ops {
    /* Run client's head request (and any async ones right behind it) on idle worker w; with
     * no client, only the broadcasts w owes. */
    void (*start)(struct gw *g, struct conn *w, struct conn *client);
    /* Does w owe broadcasts or fan-out parts (what = OWES_ANY), or what it runs before any
     * client's request (OWES_FIRST: fan-out parts, or anything when it takes no new work)?
     * Asked only of a worker whose connection says it owes something (struct conn owes). */
    int (*owes)(const struct conn *w, int what);
    /* pool = session: run client's head on the worker given to it, if that worker is free
     * (1); 0 if it is still finishing the last run (it starts the head when it has). */
    int (*session_start)(struct gw *g, struct worker *w, struct client *client);
    /* pool = session: the client has gone for good: its worker is let go (after the reset
     * query, if any). */
    void (*release)(struct gw *g, struct worker *w);
    /* client, whose request w runs or holds behind the one it runs, has gone (closed, or its
     * input ended): drain its reply. */
    void (*client_gone)(struct gw *g, struct worker *w, struct client *client);
    /* The client's answer to w's callback, or a message it sent nested (its bytes, owned now,
     * checked): one w runs while it waits on that callback, as q does; a sync one's reply goes
     * to the client before anything else of the run's. */
    void (*answer)(struct gw *g, struct conn *w, uint8_t *msg, size_t len);
    /* May what client sends now run nested on w: w runs client's request (its own, not a
     * .qgate.all's part) and waits on that client's callback, or runs a message sent nested? */
    int (*nests)(const struct conn *w, const struct client *client);
    /* The replies w still owes client to the sync messages it sent nested (0: none, or w runs
     * nothing of client's now). */
    int (*nested_owed)(const struct conn *w, const struct client *client);
    /* .qgate.all: run request r of client (its head) on every worker of grp that is up, and
     * answer it with their replies merged. 0, or -1 on ENOMEM. */
    int (*fanout)(struct gw *g, struct group *grp, struct client *client, struct req *r);
    /* The client of a fan-out has gone for good: its parts not begun are dropped, the others'
     * replies drained. */
    void (*fanout_cancel)(struct gw *g, struct fanout *fo);
    /* Queue broadcast message r of client on every worker of grp that is up; how many. */
    int (*broadcast)(struct gw *g, struct group *grp, struct client *client, struct req *r);
    /* Does a worker of grp run anything, or owe what it was given (a pause waits for neither)? */
    int (*busy)(const struct group *grp);
};

/* The groups (g->groups), set up by the gateway. */
struct group *dispatch_group_add_loop(struct gw *g, const struct group_cfg *gc);
struct group *dispatch_group_find_loop(struct gw *g, const char *name);
/* The group a user is routed to: the first listing it in users, else the first listing none; the
 * groups the file has first, then those a reload left (stale). */
struct group *dispatch_route_loop(struct gw *g, const char *user);
/* May user route requests to grp (.qgate.on)? A group with a users list admits those users;
 * one without admits the users no group the file has lists (users limited by a list keep to
 * theirs). */
int dispatch_admits_loop(const struct gw *g, const struct group *grp, const char *user);
/* Are max_queue clients waiting already, with no worker idle? (Then a sync request is refused;
 * an async message cannot be answered: it always waits its turn.) */
static inline int dispatch_full_loop(const struct gw *g, const struct group *grp)
{
    return grp->queue.n >= g->cfg.max_queue && (!grp->idle.n || grp->paused);
}
/* Put client (its request seq) on its group's queue: request_set_state_loop's, entering QUEUED. */
static inline void dispatch_queue_loop(struct gw *g, struct group *grp, struct conn *client, uint64_t seq)
{
    conn_queue_in_loop(&grp->queue, client);
    g->loop.dispatch_pending = 1; /* dispatched this iteration */
    log_debug(client->name, "request %llu queued in group %s (%d waiting)", (unsigned long long)seq, grp->cfg.name,
              grp->queue.n);
}
/* Put client (its request seq) on its group's held list: request_set_state_loop's, entering HELD. */
void dispatch_hold_loop(struct gw *g, struct group *grp, struct conn *client, uint64_t seq);
/* Hand queued requests to idle workers, round-robin across waiting clients. A paused group's
 * idle workers run only what they owe (broadcasts, fan-out parts given before the pause). */
void dispatch_run_loop(struct gw *g, struct group *grp);
void dispatch_all_loop(struct gw *g);
/* No worker of the group is up and connecting failed: answer every sync request waiting (a
 * paused group holds them: its resume does this if it is still so). */
void dispatch_fail_group_loop(struct gw *g, struct group *grp);

/* A pause (.qgate.pause[] of client's request seq) completes when no worker of its group (gi;
 * -1: every group) runs anything: done now (1), or it waits (0; answered after the dispatch
 * phase that finds it done), or -1 out of memory. */
int dispatch_pause_wait_loop(struct gw *g, const struct conn *client, uint64_t seq, int gi);
/* grp was resumed: the pauses still waiting for it are told so. */
void dispatch_resumed_loop(struct gw *g, const struct group *grp);
void dispatch_free(struct gw *g);

#endif

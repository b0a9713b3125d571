/* worker.h: the worker side: a back-end q connection (worker.c: resolve, connect, handshake,
 * reconnect, loss) and what runs on it (run.c: a run begun and ended, every message read back
 * routed: streamed to its client, collected, passed to another client at a message boundary,
 * or dropped), with the variants a group's mode or a worker's debts bring in (session.c,
 * pipeline.c, broadcast.c, fanout.c). The state diagrams are at the top of worker.c. */
#ifndef WORKER_H
#define WORKER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "client.h"
#include "conn.h"
#include "dispatch.h"
#include "net.h"
#include "stats.h"
#include "stream.h"

#define WORKER_STATES(X) X(DOWN) X(RESOLVING) X(CONNECTING) X(HANDSHAKE) X(IDLE) X(BUSY) X(PINNED) X(DISABLED)
#define ST_ENUM(e) WS_##e,
enum worker_state { WORKER_STATES(ST_ENUM) };
#undef ST_ENUM

/* What a BUSY worker's run has come to (its sub-state, the run's phase): sent; waiting for its
 * client's answer to a callback (nothing may go ahead of it); its reply streaming, collected,
 * or drained (the client gone); timed out (query_timeout: its connection is being dropped). */
#define BUSY_STATES(X) X(SENT) X(CALLED) X(RELAYING) X(COLLECTING) X(DRAINING) X(TIMEDOUT)
#define ST_ENUM(e) WB_##e,
enum worker_busy { BUSY_STATES(ST_ENUM) };
#undef ST_ENUM

/* What a run is: a client's sync request, a client's async batch, broadcasts only (or the reset
 * query a session owes), or one worker's part of a .qgate.all (fanout.c). */
enum run_kind { RUN_REQUEST, RUN_ASYNC, RUN_BROADCASTS, RUN_FANOUT };

struct fpart;
struct client;
/* A worker connection's run (run.c): from when its bytes are queued for the worker (run_begin)
 * to when the worker has answered the last of them (run_end). One at a time on a connection,
 * so the reply a connection brings is always its run's. */
struct run {
    uint8_t kind;        /* enum run_kind */
    uint8_t phase;       /* enum worker_busy: what its reply has come to */
    uint8_t is_error;    /* its reply is a q error (etext: the start of its text) */
    int swallow;         /* chaser replies to drop before its own */
    uint8_t reset;       /* the reset query's run (session.c): the worker is clean once it ends */
    int nested;          /* sync messages its client sent nested (while the worker waited on that
                          * client's callback: q runs them there) not yet answered: the worker's
                          * next responses are theirs, the innermost first */
    int64_t sent_ms;     /* when it was sent */
    int64_t began_ms;    /* its query_timeout clock starts here: when it was sent, moved on by the
                          * time its q was seen running its other connections' runs meanwhile
                          * (pipeline: q runs one at a time, in an order of its own) */
    int64_t covered_ms;  /* ... that time counted up to here */
    int ahead;           /* ... for this many more runs (those that may go first: run.c beside) */
    uint64_t begun_at;   /* its reply, or its callback, came first: 1 + its q's lead->ends then; 0 = not yet */
    /* A run a chaser ends (RUN_ASYNC, RUN_BROADCASTS) whose worker calls back: a chaser out then
     * runs inside that callback (q runs what comes on the handle it waits on), so its reply does
     * not say the run is over; another goes once every callback is answered, and its reply does. */
    int cb_open;         /* its callbacks not yet answered (an answer queued for it counts) */
    int swallow_first;   /* chaser replies that come before the replies to run.nested's messages */
    uint8_t chase_dirty; /* a chaser out when it called back: its reply proves nothing */
    uint8_t chase_owed;  /* ... and came back: another goes when cb_open is 0 */
    uint8_t rechased;    /* that one is out (its reply ends the run) */
    int unforgot;        /* broadcast segments whose chaser came back inside a callback: forgotten
                          * when the one after them comes back */
    struct client *cl;   /* RUN_REQUEST, RUN_ASYNC: its client; NULL once that has gone */
    uint64_t seq;        /* ... and the client's request */
    uint64_t key;        /* RUN_REQUEST: its query's key as pipelining learns it (group_learn_key), 0 = none */
    int64_t started_us;  /* sent to the worker */
    uint64_t reply_len;  /* of the reply being relayed */
    struct fpart *fp;    /* RUN_FANOUT: its part */
    char etext[80];
};

/* Where the message being read goes. */
enum route { ROUTE_DROP, ROUTE_STREAM, ROUTE_COLLECT, ROUTE_FORWARD, ROUTE_SWALLOW, ROUTE_CHANGE };

/* A broadcast async message waiting to be sent to workers. */
struct bmsg {
    int refs;            /* workers that have yet to take it */
    uint32_t cl_id, cl_gen;
    uint64_t seq;
    struct shared *msg;  /* its bytes, queued for each worker without a copy */
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

/* .qgate.all (fanout.c): one request run on every worker of a group that is up, each worker's
 * part owed (on its fq) until it is free, then run; the replies collected, then merged on the
 * writer pool. A part outlives its fan-out when that is given up while the part runs. */
struct fanout;
enum { FP_OWED, FP_RUNNING, FP_DONE, FP_LOST /* `partial: its worker went; the answer is the others' */ };
struct fpart {
    STAILQ_ENTRY(fpart) link; /* on its worker's fq while owed */
    struct fanout *fo;   /* NULL once its fan-out was given up: its reply is drained */
    struct worker *w;    /* not once FP_DONE: a reload may free it before the other parts end */
    uint8_t st;          /* FP_* */
    struct inbuf reply;  /* FP_DONE: the worker's whole reply */
    char *name;          /* FP_DONE, `partial: its worker's address, for the answer (NULL: no memory) */
};
STAILQ_HEAD(fpartlist, fpart);
struct fanout {
    uint32_t cl_id, cl_gen; /* the client, and its request */
    uint64_t seq;
    uint8_t as_list;
    uint8_t partial;     /* `partial: the workers up answer, a lost one is left out, and the answer
                          * names the workers it came from */
    int n, left;         /* parts; those not done */
    int unsent;          /* parts whose worker has not been given the query yet */
    int nworkers;        /* the group's workers (not leaving it) when it started */
    char gname[CFG_NAME_MAX];
    size_t total;        /* reply bytes collected, bounded by merge_max */
    size_t held;         /* those of them counted against hold_max (buf_held_bytes) */
    struct shared *msg;  /* the query, queued for each worker (one copy) as its part begins */
    size_t counted;      /* its bytes counted against pending_max, until every part has begun */
    struct fpart *part[];
};

/* Where the message being read from the worker goes (its bytes are moved by the stream). */
struct wmsg {
    struct client *to;   /* ROUTE_STREAM: the client its bytes go to (the run's, or a session's) */
    uint8_t route;       /* enum route */
    uint8_t reply;       /* it is the run's reply: its first bytes say whether it is a q error */
    uint8_t zipped;      /* ... compressed: those bytes are read through the compression */
    uint8_t nested;      /* it answers a message its client sent nested (struct run nested): 1,
                          * done at its end; 2, when a reader has made it fit; 3, done (refused) */
    uint32_t to_id, to_gen; /* ROUTE_FORWARD, ROUTE_CHANGE: the client it goes to */
};

/* pipeline = N: a worker (one q process, one address) is reached over N connections, each a
 * struct worker carrying one request at a time; connection 0, its lead, takes what goes to the
 * process once (broadcasts, fan-out parts) and stands for it (up, down, in rotation). */
#define PIPELINE_MAX 8

/* How a worker is reached. */
enum worker_via { VIA_NONE, VIA_TCP, VIA_UNIX };

/* Its timer (struct conn tm[]): connecting, back-off, or the query timeout. */
enum { WORKER_TM = 0 };

struct worker {
    struct conn c;
    uint8_t st;          /* enum worker_state */
    uint8_t cap;
    uint8_t removed;     /* dropped by a reload: goes when idle */
    uint8_t via;         /* enum worker_via: how its connection (or the attempt) goes */
    uint8_t skip_uds;    /* the next attempt goes over TCP: its Unix socket did not answer */
    uint32_t fails;      /* connection attempts failed in a row (each after the first logged only
                          * at 8, 16, 32, ...: a worker down for long floods no log) */
    uint8_t tried;       /* an attempt to connect it has ended (up, or failed) since it was added */
    uint8_t reset_owed;  /* the reset query runs next (a session ended, or a request from outside ran) */
    char *reset_q;       /* ... that of the configuration its session ended under (a reload may change
                          * the group's meanwhile); NULL: the group's */
    uint8_t renew;       /* its session ended: a new connection before anyone has it (session.c) */
    uint8_t end_due;     /* a reload ended its session while a message to the session's client was
                          * half streamed: the session (the client's link to it, which that client's
                          * close or this worker's loss goes by) lasts until that message has ended */
    char *end_reset;     /* ... the reset query it lived under (NULL: none) */
    uint8_t dirty;       /* its q may hold what a session (or a request from outside) left (1), or
                          * what ran there outside qgate's sessions is not known (2: new to qgate,
                          * put back by a reload, or its group a request pool until a reload); in a
                          * session pool with a reset query, no session is given it until that has
                          * run, on this connection or, when qgate dropped this one (a timeout, a
                          * bad message), the next. Kept with no reset query (a reload may set one) */
    uint8_t foreign;     /* this connection has carried a run outside any session (a request pool's,
                          * a request routed in): no session is given it until it is made again,
                          * since what q may still send on it (a publish) would reach the session's
                          * client (helper round 35d: at 95e0eaa a flood left running from a request
                          * pool reached the first session after a reload made it a session pool) */
    uint8_t renewing;    /* 1: closed for that; 2: connecting again at once, quietly; 0 otherwise */
    uint8_t client_turn; /* owing broadcasts with clients waiting, it takes turns: an owed broadcast
                          * (its chaser back before anything else is sent), then a request */
    uint8_t disabled;    /* .qgate.disable[]: out of rotation; DISABLED once it owes nothing (control.c) */
    uint8_t slot;        /* which of its worker's connections it is: 0, the lead, or 1..pipeline-1 */
    struct run run;      /* while BUSY */
    struct wmsg msg;
    uint64_t serial;     /* names it to pool jobs (resolution) */
    struct group *grp;
    TAILQ_ENTRY(worker) glink; /* a worker's connections lie one after another, its lead first */
    char addr[300];
    const char *iname;   /* addr, interned: for the access log's records, which outlive it */
    struct net_addrs na; /* over TCP, its Unix socket, or both (that first) */
    char uds_why[96];    /* why its Unix socket was passed over for TCP last, for the log */
    struct client *sess; /* pool = session: the client it is given to (c->sess is this worker) */
    struct inbuf coll;   /* a message collected whole */
    size_t coll_held;    /* its length, counted against hold_max from its header until it is moved on */
    int64_t backoff;     /* ms: grows with each failed attempt, and each connection that closes
                          * before it has answered anything or lived reconnect_max (a flapping q) */
    int64_t up_ms;       /* its connection's handshake completed */
    uint8_t answered;    /* a run has ended on this connection since (a reply, a broadcast's chaser) */
    uint32_t flaps;      /* connections in a row that closed so */
    struct remnant remnant;  /* its connection closed with broadcasts not known to have run,
                              * read to its end: it connects again once q has closed that too
                              * (stream.h) */
    struct bnodelist bq;    /* broadcasts to send before the next request */
    struct bnodelist bsent; /* broadcasts sent, not yet known to have run: until a run's
                             * chaser returns, the worker is running that client's messages */
    struct fpartlist fq; /* fan-out parts owed, run before any request (after broadcasts) */
    int64_t tm_armed_ms; /* its query timer was armed (it fires query_timeout after that or the last byte read) */
    uint64_t cb_at;      /* its callback on its way to its client: where in that client's output it
                          * begins, at the least (stream_sent's end when it was sent: what another
                          * worker was streaming to it then may end first) */
    uint64_t cb_acked;   /* what the client had received of its output when last looked at (when the
                          * callback was sent, then at each look of the query timer: run.c,
                          * callback_hold) */
    uint8_t cb_held;     /* the last look held the query timer for it, or it had bytes ahead of it
                          * when sent (when it arrived is not known: the first look that finds it
                          * there starts the client's clock) */
    int64_t last_end_us; /* the lead: when a run of the worker last ended, on any connection (q
                          * runs one at a time: a run sent before began no earlier) */
    uint64_t ends;       /* the lead: runs of the worker ended with their reply, on any connection */
    uint64_t served, errors, dropped;
    struct hist lat;
};

static inline struct worker *worker_of(struct conn *c) { return (struct worker *)c; }
/* Its connection says whether it owes broadcasts or fan-out parts (dispatch reads that): kept
 * after every change to bq and fq. */
static inline void worker_owes_update(struct worker *w) { w->c.owes = !STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->fq); }
/* What w collected no longer counts against hold_max here: freed, or counted where it went. */
static inline void worker_coll_release(struct worker *w)
{
    buf_held_sub(w->coll_held);
    w->coll_held = 0;
}
/* What w collected, taken from it (the caller owns the bytes). */
static inline struct inbuf worker_coll_take(struct worker *w)
{
    struct inbuf m = w->coll;
    w->coll = (struct inbuf){0};
    return m;
}
/* ... and what it collected freed (the connection lost or gone). */
static inline void worker_coll_free(struct worker *w)
{
    inbuf_free(&w->coll);
    worker_coll_release(w);
}
/* Up: connected and in the group's rotation (DISABLED is connected, out of it). */
static inline int worker_is_up(const struct worker *w)
{
    return w->st == WS_IDLE || w->st == WS_BUSY || w->st == WS_PINNED;
}
static inline int worker_is_connected(const struct worker *w) { return worker_is_up(w) || w->st == WS_DISABLED; }
/* May w be given new work (a request, a broadcast, a fan-out part)? */
static inline int worker_takes_work(const struct worker *w) { return worker_is_up(w) && !w->removed && !w->disabled; }
static inline int worker_is_lead(const struct worker *w) { return w->slot == 0; }
/* The next connection of x's worker, or NULL: for (x = lead; x; x = worker_sibling(x)) visits
 * them all. (A connection left behind by its lead's removal follows no lead: removed too.) */
static inline struct worker *worker_sibling(const struct worker *x)
{
    struct worker *n = TAILQ_NEXT(x, glink);
    return n && n->slot > 0 && !strcmp(n->addr, x->addr) ? n : NULL;
}

/* ---- worker.c --------------------------------------------------------------------------- */
extern const struct connops worker_connops;
extern const struct backend_ops worker_backend;
/* A worker at addr: its connections, as many as grp's pipeline (one unless it pipelines). */
void worker_add_loop(struct gw *g, struct group *grp, const char *addr);
/* Its connections match grp's pipeline now (a reload): those missing open, those beyond it go. */
void worker_fit_loop(struct gw *g, struct group *grp, struct worker *lead);
/* w removed by a reload (on), or kept after all (0): counted in g->loop.nremoved. */
void worker_set_removed_loop(struct gw *g, struct worker *w, int on);
/* A q process as qgate knew it: its address as written and as resolved (the marks of the q's
 * disabled at a reload: g->dis_marks). */
struct q_mark {
    char addr[300];
    struct net_addrs na;
    uint8_t via;
};
/* Do a and b reach the same q? The same address as written, or as resolved (worker.c). */
int worker_same_q(const struct worker *a, const struct worker *b);
int worker_marked(const struct q_mark *m, const struct worker *w);
void worker_mark_of(const struct worker *w, struct q_mark *m);
/* .qgate.enable[] of w: the reload's marks of its q go (its connections made later stay enabled). */
void worker_marks_drop_loop(struct gw *g, const struct worker *w);
/* Is another connection to w's q (its address), in any group, one a reload removed that is still
 * open (its run, or what it owes, not done)? What runs there may run after what w is sent. */
int worker_q_shared_loop(const struct gw *g, const struct worker *w);
void worker_free_loop(struct conn *c);
/* The one setter of a worker's state: keeps the group's idle list and count of workers up.
 * IDLE for a disabled worker that owes nothing (no broadcast, no fan-out part) is DISABLED. */
void worker_set_state_loop(struct gw *g, struct worker *w, enum worker_state st);
/* .qgate.disable[] (on) and .qgate.enable[] (off): out of rotation, DISABLED once idle; back. */
void worker_disable_loop(struct gw *g, struct worker *w, int on);
const char *worker_state_name(int st);
/* "unix", "tcp", or "" (never tried). */
const char *worker_via_name(int via);
/* A reader resolved a worker's address (the job of kind JK_RESOLVE). */
void worker_resolved_loop(struct gw *g, struct job *j);
/* A reload dropped it: close now if idle or down, after its request if busy. */
void worker_remove_loop(struct gw *g, struct worker *w);
/* Close w's connection and open a new one at once (why: its session ended, or it carried runs
 * outside a session): its q runs .z.pc for the old handle, as for a client of its own that left,
 * and nothing sent on it reaches anyone. */
void worker_renew_loop(struct gw *g, struct worker *w, const char *why);
int worker_busy_count_loop(const struct gw *g);

/* ---- run.c ------------------------------------------------------------------------------ */
/* Begin a run on idle worker w: c's head request (and async ones right behind it), the
 * broadcasts w owes first; c NULL: what w owes alone (a fan-out part, or broadcasts). */
void run_begin_loop(struct gw *g, struct worker *w, struct client *c);
/* The same as dispatch starts it (struct backend_ops start). */
void run_start_loop(struct gw *g, struct conn *w, struct conn *c);
/* The stream's handlers: a message's header (where it goes), a bad header, the end of a message
 * streamed or dropped, a message gathered whole. */
struct kipc_hdr;
int run_header_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h);
int run_bad_header_loop(struct gw *g, struct conn *x, const char *why);
int run_message_end_loop(struct gw *g, struct conn *x);
int run_message_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h, uint8_t *msg);
/* A reader made a worker's publish or callback fit for its client (JK_PUSH): it goes to that
 * client, or is refused; the worker reads on. */
struct job;
void run_push_done_loop(struct gw *g, struct job *j);
/* Send request x of c to w, as it is (x leaves c's queue: RS_RUNNING). */
void run_send_request_loop(struct gw *g, struct worker *w, struct client *c, struct req *x);
/* Client c, whose request w runs or holds, has gone. */
void run_client_gone_loop(struct gw *g, struct worker *w, struct client *c);
/* The worker's connection is gone: fail or finish its run (reason: timeout or loss). */
void run_lost_loop(struct gw *g, struct worker *w);
/* A client's answer to w's callback, or a message it sent nested, goes to w (msg owned). */
void run_answer_loop(struct gw *g, struct conn *wc, uint8_t *msg, size_t len);
/* w's output was written (connops on_flushed): its run's client, stopped for what it sent
 * nested there, may read on. */
void run_flushed_loop(struct gw *g, struct conn *wc, size_t before, size_t wrote);
/* May c's message run nested on wc (backend_ops nests)? */
int run_nests_loop(const struct conn *wc, const struct client *c);
int run_nested_owed_loop(const struct conn *wc, const struct client *c);
/* The one setter of w's run's phase (what its reply has come to: enum worker_busy). */
void run_set_phase_loop(struct gw *g, struct worker *w, enum worker_busy b);
/* w's run has been queued for its worker: when it was sent, the runs its q may run before it
 * (pipeline), its clock and its query timer. Every kind of run (run.c, fanout.c, session.c). */
void run_sent_loop(struct gw *g, struct worker *w);
/* The query timer of w's run: query_timeout after it was armed or the worker's last byte. */
void run_arm_timer_loop(struct gw *g, struct worker *w);
/* A reload has set query_timeout: every run keeps to it (from its last byte, or from now if it had
 * no limit; 0 lifts it). */
void run_timeouts_reloaded_loop(struct gw *g);
/* When w's run began at the worker, as far as the gateway can tell: when it was sent, or when
 * the worker last ended a run on another connection after that (q runs one at a time). */
int64_t run_began_us(const struct worker *w);
/* The modes a group's runs take (struct group_mode): plain requests here, and session.c's and
 * pipeline.c's; the one a group's configuration selects. */
extern const struct group_mode run_plain_mode;
const struct group_mode *run_mode_of(const struct group *grp);
/* The plain mode's end of a run (the worker idle, or gone if removed), and its choice of the
 * idle connection that takes the next request (the one idle longest, in rotation), for the
 * other modes. */
void run_plain_end_loop(struct gw *g, struct worker *w);
struct conn *run_idle_first_loop(struct gw *g, struct group *grp);

/* ---- pipeline.c (pipeline > 1) ------------------------------------------------------------ */
/* The mode of a group that pipelines: the idle connection that takes the next request is the
 * lead of a worker that runs nothing; with every worker busy, a sync request follows on a free
 * connection of the busy worker running fewest, when everything that worker runs is learned to
 * end within pipeline_wait. */
extern const struct group_mode pipeline_mode;

/* ---- broadcast.c ------------------------------------------------------------------------ */
/* Queue broadcast message r of client c on every worker of grp that is up; how many. */
int broadcast_queue_loop(struct gw *g, struct group *grp, struct client *c, struct req *r);
/* Send what w owes, up to max messages (0: a batch), and what releasing those queues next (a
 * client's following broadcasts): one sender's run and its chaser; returns the chasers sent. */
int broadcast_send_loop(struct gw *g, struct worker *w, int max);
/* A chaser came back: the sent broadcasts of one sender ran. lost: all went down with the
 * worker (told to the test hook). */
void broadcast_forget_sent_loop(struct gw *g, struct worker *w, int lost);
/* Broadcasts queued on or sent to a worker that went down are dropped (reported lost). */
void broadcast_drop_loop(struct gw *g, struct worker *w);
void broadcast_free_loop(struct worker *w);

/* ---- session.c (pool = session) -------------------------------------------------------- */
/* The mode of a session group: a run's begin gives the worker to a client without one; its end
 * lets the session's next request start (PINNED), or runs the reset query owed, or frees it. */
extern const struct group_mode session_mode;
/* Start c's head on w, the worker given to it, if w is PINNED (1), else 0 (w starts it when its
 * run ends). */
int session_start_loop(struct gw *g, struct worker *w, struct client *c);
/* w's client has gone for good: the reset query, then a new connection, then IDLE. */
void session_release_loop(struct gw *g, struct worker *w);
/* w's session ends (why: logged after its client's name), as session_release_loop ends it when
 * the client goes: reset_query (that of the configuration the session lived under), a new
 * connection, then free. */
void session_end_loop(struct gw *g, struct worker *w, const char *reset_query, const char *why);
/* Why a reload that makes a session pool a request pool ends its sessions (the only end held
 * back for a message being streamed: a client that goes drains it first, a lost worker cuts it). */
#define SESSION_END_RELOAD "ends: a reload made its group a request pool"
/* The message that held back the end of w's session (end_due) has ended: the session ends now,
 * unless a reload has made its group a session pool again. */
void session_end_due_loop(struct gw *g, struct worker *w);
/* Nothing holds back the end of w's session any more (it has ended, or w was lost). */
void session_end_forget_loop(struct worker *w);
/* Its handshake done: a worker still dirty (its last connection dropped by qgate before its
 * reset query ran: its q kept what the session left) runs the reset query first, BUSY, before
 * anyone has it. 1 if it does, 0 if it owes none, -1 (no memory: close it). */
int session_connected_loop(struct gw *g, struct worker *w);
/* A reload has set grp's configuration: a group made a session pool by it (was_session 0) holds in
 * its workers' q what its clients ran as a request pool: each is dirty (its reset query runs
 * before a session is given it). */
void session_pool_reloaded_loop(struct gw *g, struct group *grp, int was_session);
/* The reset query w owes when dirty: its session's, or its group's in a session pool; "" if none. */
const char *session_reset_query(const struct worker *w);

/* ---- fanout.c (.qgate.all) ------------------------------------------------------------ */
/* backend_ops.fanout and .fanout_cancel (dispatch.h). */
int fanout_start_loop(struct gw *g, struct group *grp, struct client *c, struct req *r);
void fanout_cancel_loop(struct gw *g, struct fanout *fo);
/* Idle w owes a part: run it (1), or 0 if it owes none. */
int fanout_run_owed_loop(struct gw *g, struct worker *w);
/* The header of the running part's reply: where it goes (ROUTE_COLLECT, or ROUTE_DROP). */
int fanout_route_loop(struct gw *g, struct worker *w, uint64_t len);
/* The running part's reply has ended (collected in w->coll, taken). */
void fanout_part_done_loop(struct gw *g, struct worker *w);
/* The merged answer made (JK_MERGE): counted as a q error or the gateway's if it is one, sent. */
void fanout_merged_loop(struct gw *g, struct job *j);
/* w is down: the part it ran and those it owed fail their fan-outs. */
void fanout_worker_lost_loop(struct gw *g, struct worker *w, const char *why, int timed_out);

#endif

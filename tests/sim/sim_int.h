/* sim_int.h: what the files of the simulation share (sim.h is its interface to main.c and
 * fuzz_sim.c): the world's state, one struct sim for the run, and the helpers each file
 * offers the others. Everything else in each file is static. */
#ifndef SIM_INT_H
#define SIM_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gw.h"
#include "kcodec.h"
#include "sim.h"

struct alog_writer;
struct config;
struct conn;
struct worker;

#define MAXC 12          /* fake clients connected at once */
#define FW_RECENT (2 * MAXC) /* clients a worker connection remembers being given messages of: as many
                              * as may have messages on it at once (a broadcast group's every sender
                              * behind a run: 9 once, with 8 remembered, seed 916449) */
#define MAXW 10          /* fake worker identities (ports) */
#define WPORT0 21000     /* fake worker k listens on "127.0.0.1:(WPORT0 + k)" */

/* ---- allocation accounting: what the simulation itself holds is not the gateway's -------- */

extern size_t sim_bytes; /* the simulation's own heap, left out of the gateway's */
void *sx_realloc(void *p, size_t old, size_t n);
void sx_free(void *p, size_t n);

struct sbuf {
    uint8_t *p;
    size_t len, cap;
};

void sb_reserve(struct sbuf *b, size_t need);
void sb_add(struct sbuf *b, const void *p, size_t n);
void sb_drop(struct sbuf *b, size_t n); /* remove the first n bytes */
void sb_free(struct sbuf *b);
/* Write up to want bytes of b from *off to fd (see base.c). */
ssize_t sb_send(int fd, struct sbuf *b, size_t *off, size_t *base, size_t want);

/* A growable array of T (accounted). */
#define VEC(T) struct { T *v; int n, cap; }
#define VEC_PUSH(a, x)                                                                       \
    do {                                                                                     \
        if ((a).n == (a).cap) {                                                              \
            int nc_ = (a).cap ? (a).cap * 2 : 16;                                            \
            (a).v = sx_realloc((a).v, (size_t)(a).cap * sizeof *(a).v, (size_t)nc_ * sizeof *(a).v); \
            (a).cap = nc_;                                                                   \
        }                                                                                    \
        (a).v[(a).n++] = (x);                                                                \
    } while (0)
#define VEC_FREE(a)                                                                          \
    do {                                                                                     \
        sx_free((a).v, (size_t)(a).cap * sizeof *(a).v);                                     \
        (a).v = NULL;                                                                        \
        (a).n = (a).cap = 0;                                                                 \
    } while (0)

/* ---- the world ---------------------------------------------------------------------------- */

/* What a client asks. */
enum op {
    OP_ECHO, OP_BIG, OP_ERR, OP_PUSH, OP_CB, OP_GUID, OP_SLOW, /* sync, to a worker */
    OP_ASYNC, OP_APUSH, OP_ACB,                                 /* async, to a worker (ACB: it calls back) */
    OP_PING, OP_STATS, OP_CLIENTS, OP_DISCONNECT, OP_RELOADCMD, OP_UNKNOWN, OP_BIGCMD, /* commands */
    OP_BADHDR, OP_BADBODY, OP_RESP,
    OP_ALL, /* (`.qgate.all; `G; "q ..."[; `list]): on every worker of its group up, merged */
    OP_POOLS, OP_PAUSE, OP_RESUME, OP_DISABLE, OP_ENABLE, /* the operator's commands */
};
extern const char *const op_names[]; /* their names in the trace (fclient.c) */

struct sent {
    uint8_t type;        /* KIPC_SYNC or KIPC_ASYNC; KIPC_RESPONSE for our answers to callbacks */
    uint8_t op;
    uint8_t answered;    /* sync: its reply came */
    uint8_t lost;        /* the gateway reported it lost with its worker */
    uint8_t abandoned;   /* the gateway gave up on it (timeout, worker lost): the worker may still
                          * run it later, out of order, as q runs what it received */
    int seen;            /* workers that ran it */
    int grp;             /* the group it may run on: its client's, or where it was routed; -1:
                          * a route the gateway refuses (no such group, not admitted): never */
    uint8_t fan;         /* OP_ALL: 1 merged, 2 `list: runs on several workers, once on each */
    int arg;
    size_t end;          /* offset in the output stream where it ends */
    int seq;             /* the gateway's request number, -1 for responses */
    int last_push;       /* OP_PUSH: the last of its pushes that came ("p cid seq j": j), -1 none */
    int nested_in;       /* the gateway sent it nested to the worker waiting in a callback while it
                          * ran request nested_in (its nested hook): its reply comes before that
                          * one's, in the order the worker answers; -1: not nested */
    long emitted;        /* when its worker answered it (S->emits then), 0 not yet */
    uint8_t routed;      /* sent wrapped in a route */
    uint8_t here;        /* the gateway answered it nested (its nested hook, here): a command run,
                          * or the error of a message that cannot run inside the callback */
    int epoch;           /* queued while the gateway had a reset query: S->reset_epoch then; 0 not */
    int era;             /* dispatched to a worker while group main was a session pool: S->sess_era
                          * then; 0 not (yet), or in a request pool */
    uint8_t pre;         /* OP_CB: its answer sent right behind it, before any callback asked (1);
                          * its callback came, answered by that (2) */
};

enum { FC_FREE, FC_HS, FC_READY, FC_DONE };

struct fclient {
    int st;
    int cid;             /* the simulation's number for it (unique over the run) */
    int fd;
    uint32_t gid, ggen;  /* its connection in the gateway */
    uint64_t serial;     /* the gateway's number for it (.qgate.clients[]) */
    char user[80], pass[40];
    int accept;          /* the credentials are good: a capability byte will come */
    int longhs;          /* a handshake over 1 KiB */
    int http;            /* an HTTP request for a handshake: answered 501, then closed */
    int cap_req, cap;
    int local;
    int group;           /* the group its user is routed to */
    int admin;
    int routed;          /* the request put_request made last is wrapped in a route */
    struct sbuf out;     /* bytes to write; out_off written so far */
    size_t out_off, out_base; /* out_base: stream offset of out.p[0] */
    struct sbuf in;
    VEC(struct sent) sent;
    int nseq;            /* requests made (the gateway numbers them the same way) */
    VEC(int) pend;       /* sync requests awaiting their reply, oldest first (indices in sent) */
    int pend_off;
    int bad;             /* a malformed message was sent: nothing after it is answered */
    int bad_seq;         /* its request number */
    int unread_from;     /* the gateway reads nothing from this request on (its unread hook), or -1 */
    int stalled;         /* not reading */
    int we_closed;       /* we closed it */
    int half;            /* we shut our side (all written): every reply owed must still come */
    int gw_closed;       /* the gateway closed it (EOF) */
    char why[96];        /* the gateway's reason, from its close hook */
    int got_bytes;
    int hold_seq;        /* a callback's answer held until the reply to request hold_seq comes (a
                          * q client in .z.pg, calling the gateway on the same handle): -1 none */
    char hold[64];       /* that answer */
};

enum { FW_DOWN, FW_HS, FW_UP };
enum { UDS_OK, UDS_REFUSE, UDS_MUTE };

/* One connection of a fake worker (the gateway opens `pipeline` of them to each). */
#define FW_CONNS 24 /* pipeline connections, and those of a reload still closing */
struct fwconn {
    int fd;              /* the worker's end; -1: none */
    int gw_fd;           /* the gateway's end: how its worker connection is found */
    int st;
    int serial;          /* which of the worker's connections so far it is (a deferred reply's) */
    struct sbuf in, out;
    size_t out_off;
    int64_t hold_until;  /* ms: nothing is written before */
    int last_cid;        /* the client whose message it ran last on this connection */
    int recent[FW_RECENT]; /* the last clients whose messages the gateway gave it (distinct) */
    int nrecent;
    int eof;             /* the gateway has closed it: the whole messages read before run first, as
                          * q runs them, then it is closed */
    int first_sess;      /* pool = session: the client of the first session it served, or -1: what
                          * the worker publishes on it later is that client's (a subscription by
                          * .z.w), whoever the gateway serves next */
};

/* A reply deferred, as -30!(::) defers one: sent later, while the worker goes on with others. */
struct dfr {
    int conn, serial;    /* the connection it goes back on (gone if its serial changed) */
    int cid;
    int64_t due_ms;
    struct sbuf msg;
};

struct fworker {
    int wid;
    int in_config;       /* in the gateway's configuration now */
    int group;
    int refuse;          /* connections refused (the worker is "down") */
    int uds;             /* its Unix socket (local_workers = unix tries it first): UDS_OK, or
                          * UDS_REFUSE (not listening), UDS_MUTE (closes before the handshake) */
    struct fwconn k[FW_CONNS];
    int waiting_cb;      /* callbacks it waits in, the innermost sent on k[cb_conn] (q waits for
                          * that client's answer, running what else comes on that handle nested) */
    int cb_conn, cb_cid, cb_seq;
    int cb_async;        /* the innermost callback is an async message's: no reply follows its answer */
    struct fwcall {
        int conn, cid, seq, async;
    } cb_outer[32];      /* the callbacks it waits in around the innermost */
    int owed[33], nowed; /* their numbers, none answered yet (a client that answers in the
                          * order it was called pairs its answers otherwise than q would: q
                          * takes the next as the innermost's) */
    int conns;           /* connections so far */
    VEC(int) seen_async_last; /* per cid: the last async seq this worker ran (broadcast order) */
    VEC(struct dfr) deferred;
    int64_t busy_until;  /* ms: q runs nothing before (a slow query) */
    int state_cid;       /* pool = session with a reset query: the client whose messages ran in this
                          * q last, none since its reset query ran or it started (-1) */
    long resets;         /* reset queries it ran */
};

/* A worker's publish on its own timer ("t ID"), and who may get it: the client of the next
 * reply on that connection (the request the gateway runs there when it reads the publish), or
 * a session's client; nobody else. Checked when it arrives and at the end. */
struct tpub {
    int wid, conn, serial;
    int owner;           /* the client of the next reply on its connection; -2: none yet, -1: none,
                          * -4: the connection closed first (then one of ok[] may have it) */
    int sess;            /* the client the worker's connection was given to (pool = session), or -1 */
    int sess_only;       /* sess is the connection's first session's: only it may get this */
    int to;              /* the client that got it, or -1 */
    int ok[FW_RECENT], nok; /* owner -4: the clients the gateway gave the connection messages last */
};

struct sim {
    long emits;          /* replies workers wrote (struct sent emitted) */
    const struct sim_opts *o;
    struct sim_result *res;
    uint64_t rng;
    uint64_t rng_mid;    /* the second PRNG: peers acting in the middle of an iteration (MIDWRITE) */
    int mid_ok;          /* the main events are running (not the start, quiescence or the end) */
    long mid_events;     /* peers' acts in the middle of an iteration */
    long http_501;       /* HTTP requests for a handshake answered 501 whole */
    long half_closes, half_answered; /* sim.h's */
    long answered_ahead, ahead_read, bad_ahead, ahead_between, ahead_async; /* sim.h's */
    size_t data_off;
    jmp_buf fail;
    struct gw g;
    int64_t now_us;
    char conf_path[64], users_path[64], alog_path[64];
    int users_file;
    int carol_max;       /* carol's max_inflight in the users file now (a reload may change it) */
    int scraper[4];      /* fake metrics scrapers: their end of a socketpair, or -1 */
    int log_queued;      /* the log goes through its queue (log_start_manual), its reader log_event */
    int log_stalled;     /* that reader has stopped */
    size_t log_cap;      /* the queue's bytes */
    int alog;            /* access_log on: every request ended is a line of it */
    int alog_manual;     /* ...written by the sim's pumps (alog_writer_start_manual), no thread */
    int alog_stalled;    /* its file takes nothing: the queue fills */
    size_t alog_cap;     /* the queue's bytes */
    size_t alog_room;    /* bytes its disk still takes (SIZE_MAX: no limit) */
    int alog_cut;        /* the file ends in a line a failed write cut: 1 a fragment, 2 all but
                          * its newline; the next byte written must be a newline */
    int alog_midline;    /* the file's last byte is not a newline */
    long alog_frags;     /* fragments ended by a newline */
    int ngroups;         /* 1 (main) or 2 (main, bc: broadcast, for bob and bea) */
    int bc_group;
    int session;         /* group main has pool = session (the configuration file says: the
                          * gateway takes it at its next reload) */
    int pool_flips;      /* a world whose reloads may make group main a session pool or a request
                          * pool (1), and how often they have (then + 1) */
    int ever_session;    /* group main has been, or may be, a session pool */
    int gw_session;      /* group main is a session pool in the gateway now (its last reload) */
    int sess_era;        /* how many times the gateway has made it one: a session is of one era */
    int reset_q;         /* ... and reset_query = "reset" (checked: no session sees another's state);
                          * reloads may turn it off and on again */
    int reset_on;        /* the gateway has it now (the configuration its last reload applied) */
    int reset_epoch;     /* how many times the gateway has taken it on: a message queued since
                          * finds its worker clean of other clients' state */
    int reset_flips;     /* how many times a reload turned it off or on */
    int nreloads;        /* reloads so far */
    int64_t want_qt, want_qu; /* query_timeout and queue_timeout the configuration file says
                          * (reloads change them: what already waits keeps to the new ones) */
    int had_qu;          /* queue_timeout has been set at some point (its errors may come later) */
    int wzip;            /* the fake workers compress their replies (over 2000 bytes) as q does for remote peers */
    int pipeline;        /* pool = request: each group's pipeline (1: a worker holds one request) */
    int pipeline_wait;   /* its pipeline_wait (ms; 0: behind any run) */
    int keepalive_idle;  /* keepalive_idle (ms; 0: none), changed by reloads: every connection set again */
    VEC(int) sess_wid;   /* per cid (session): the worker that ran its first message, or -1 */
    VEC(int) sess_wera;  /* ... and the era of that session (sess_era when it was dispatched) */
    VEC(struct tpub) tpubs; /* publishes on workers' timers */
    int defer_pct;       /* of the sync requests a worker runs: replies deferred (-30!) */
    size_t max_msg;      /* the longest message a fake worker has sent (the output bound's slack) */
    VEC(int) fan_given_up; /* per cid: a .qgate.all of it was given up: its parts may run late,
                            * after the client itself is forgotten */
    VEC(int64_t) gone_abandoned; /* cid << 32 | seq: a request the gateway gave up on, of a client
                                  * since forgotten: its worker may still run it, late */
    struct fclient cl[MAXC];
    int next_cid;
    VEC(int) last_seq;   /* per cid: the last sync or async seq a worker ran (group one) */
    VEC(int) cid_group;  /* per cid: its group */
    VEC(struct fclient *) by_cid;
    struct fworker w[MAXW];
    int nw;
    long step;
    int quiescing;
    int in_gw;           /* inside a gateway call: the hooks may record */
    int wdeaths;         /* workers that died or were dropped */
    int outages;         /* workers taken out of service: died, refused, removed, disabled */
    uint64_t moved;      /* bytes moved by fakes and jobs run: progress, for quiescence */
};

extern struct sim *S; /* for the hooks and the death callback (sim.c) */

/* ---- base.c: the trace, failure, choices, messages ---------------------------------------- */

void tr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void trace_reset(void);
void print_trace(void);
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void on_death(void);
int rnd(int n); /* 0 .. n-1 */
int chance(int pct);
/* chance(pct), decided by (the seed, a, b) alone: no draw from the stream, so that a choice added
 * later leaves every other choice of a seed as it was (its regressions replay as they did). */
int side_chance(uint64_t a, uint64_t b, int pct);
int enabled(int k);
int unread(int fd);
void set_sndbuf(int fd);
void put_msg(struct sbuf *b, int t, K x);
void put_text(struct sbuf *b, int t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int take_msg(struct sbuf *b, int *type, K *x, int *compressed, const char **why);
const char *text_of(K x, char *buf, size_t n);

/* ---- fworker.c: the fake workers ---------------------------------------------------------- */

int hook_connect(void *ctx, const char *addr, int uds);
void hook_dispatched(void *ctx, const struct conn *wc, uint32_t id, uint32_t gen, uint64_t seq);
uint64_t hook_query_key(void *ctx, const uint8_t *msg, size_t len);
struct fworker *worker_of_addr(const char *addr);
struct worker *gw_worker_of(const struct fworker *w);
void fw_init(struct fworker *w, int wid, int group);
void fw_reset(struct fworker *w);
int fw_live(const struct fworker *w);
void fw_release_deferred(struct fworker *w, int all);
void worker_read(struct fworker *w, size_t want);
void worker_process(struct fworker *w, int max);
void worker_write(struct fworker *w, size_t want);
void worker_timer_push(struct fworker *w);
void worker_die(struct fworker *w);
void tpub_check(const struct tpub *t, int id);

/* ---- fclient.c: the fake clients ---------------------------------------------------------- */

void hook_lost(void *ctx, uint32_t id, uint32_t gen, uint64_t seq);
void hook_dropped(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, const struct group *grp);
void hook_nested(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, uint64_t head, int here);
void hook_closed(void *ctx, uint32_t id, uint32_t gen, const char *why);
void hook_unread(void *ctx, uint32_t id, uint32_t gen, uint64_t next_seq);
struct fclient *fclient_of(uint32_t id, uint32_t gen);
struct sent *sent_of_seq(struct fclient *c, uint64_t seq);
int nopen_clients(void);
struct fclient *pick_client(int need_ready);
void client_connect(void);
void client_send(struct fclient *c, int burst);
void client_read(struct fclient *c, size_t want);
void client_write(struct fclient *c, size_t want);
void client_close(struct fclient *c);
void client_shut(struct fclient *c);

/* ---- check.c: the gateway's own invariants ------------------------------------------------ */

void check_gateway(void);
int reset_query_on(void);
int session_era(void);
int pool_flip_world(void);
void dump_world(void);

/* ---- sinks.c: the log, the access log, the metrics scrapers ------------------------------- */

void log_sink_start(void);
void log_queue_start(void);
void log_sink_failed(void);
void log_event(void);
void check_log(void);
void check_log_end(void);
struct alog_writer *hook_alog_start(void *ctx);
void check_alog(void);
void alog_event(void);
uint64_t alog_sink_finish(void);
void check_alog_end(uint64_t ended);
void scrape_event(void);

/* ---- operator.c: the configuration and the operator --------------------------------------- */

void random_config(struct config *c);
void write_config(void);
void write_users(void);
int reload_waiting_worker(void);
void reload(void);
void operator_pause(int gi);
void operator_disable(struct fworker *w);
int operator_release_all(void);

#endif

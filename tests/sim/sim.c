/* sim.c: the deterministic simulation of qgate's loop (see sim.h). One run: a random
 * configuration, then `steps` events chosen by the PRNG among what fake clients, fake workers,
 * the pools, the clock and the operator can do, a gateway iteration being one of them; then a
 * quiescence in which everyone finishes; then everyone leaves. Invariants are checked as bytes
 * arrive (each side parses what it gets), after every gateway iteration (the gateway's lists
 * and counts), at quiescence (nothing waits forever, nothing sent before a close was lost) and
 * at the end (memory and fds back to their baseline). */
#include "sim.h"

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "access.h"
#include "auth.h"
#include "client.h"
#include "conn.h"
#include "control.h"
#include "dispatch.h"
#include "gateway.h"
#include "reload.h"
#include "gw.h"
#include "worker.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "log.h"
#include "mhttp.h"

/* Sanitizer hooks, present when built with ASan (weak: absent otherwise). */
size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

#define MAXC 12          /* fake clients connected at once */
#define MAXW 10          /* fake worker identities (ports) */
#define TRACE_N 600      /* events and gateway log lines kept for the report */
#define TRACE_LINE 200
#define WPORT0 21000     /* fake worker k listens on "127.0.0.1:(WPORT0 + k)" */

/* ---- allocation accounting: what the simulation itself holds is not the gateway's -------- */

static size_t sim_bytes;

static void *sx_realloc(void *p, size_t old, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    sim_bytes = sim_bytes - (p ? (old ? old : 1) : 0) + (n ? n : 1);
    return q;
}

static void sx_free(void *p, size_t n)
{
    if (p) {
        free(p);
        sim_bytes -= n ? n : 1;
    }
}

struct sbuf {
    uint8_t *p;
    size_t len, cap;
};

static void sb_reserve(struct sbuf *b, size_t need)
{
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->p = sx_realloc(b->p, b->p ? b->cap : 0, cap);
    b->cap = cap;
}

static void sb_add(struct sbuf *b, const void *p, size_t n)
{
    if (!n)
        return;
    sb_reserve(b, b->len + n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void sb_drop(struct sbuf *b, size_t n) /* remove the first n bytes */
{
    if (!n)
        return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

static void sb_free(struct sbuf *b)
{
    sx_free(b->p, b->cap);
    *b = (struct sbuf){0};
}

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
    OP_ASYNC, OP_APUSH,                                         /* async, to a worker */
    OP_PING, OP_STATS, OP_CLIENTS, OP_DISCONNECT, OP_RELOADCMD, OP_UNKNOWN, OP_BIGCMD, /* commands */
    OP_BADHDR, OP_BADBODY, OP_RESP,
    OP_ALL, /* (`.qgate.all; `G; "q ..."[; `list]): on every worker of its group up, merged */
    OP_POOLS, OP_PAUSE, OP_RESUME, OP_DISABLE, OP_ENABLE, /* the operator's commands */
};
static const char *const op_names[] = {"echo", "big", "err", "push", "cb", "guid", "slow", "async", "apush",
                                       "ping", "stats", "clients", "disconnect", "reload", "unknown",
                                       "bigcmd", "badhdr", "badbody", "resp", "all",
                                       "pools", "pause", "resume", "disable", "enable"};

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
    int cap_req, cap;
    int local;
    int group;           /* the group its user is routed to */
    int admin;
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
    int gw_closed;       /* the gateway closed it (EOF) */
    char why[96];        /* the gateway's reason, from its close hook */
    int got_bytes;
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
    int recent[8];       /* the last clients whose messages the gateway gave it (distinct) */
    int nrecent;
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
    int waiting_cb;      /* a callback was sent on k[cb_conn]: q waits for that client's answer */
    int cb_conn, cb_cid, cb_seq;
    int conns;           /* connections so far */
    VEC(int) seen_async_last; /* per cid: the last async seq this worker ran (broadcast order) */
    VEC(struct dfr) deferred;
    int64_t busy_until;  /* ms: q runs nothing before (a slow query) */
};

/* A worker's publish on its own timer ("t ID"), and who may get it: the client of the next
 * reply on that connection (the request the gateway runs there when it reads the publish), or
 * a session's client; nobody else. Checked when it arrives and at the end. */
struct tpub {
    int wid, conn, serial;
    int owner;           /* the client of the next reply on its connection; -2: none yet, -1: none,
                          * -4: the connection closed first (then one of ok[] may have it) */
    int sess;            /* the client the worker's connection was given to (pool = session), or -1 */
    int to;              /* the client that got it, or -1 */
    int ok[8], nok;      /* owner -4: the clients the gateway gave the connection messages last */
};

struct sim {
    const struct sim_opts *o;
    struct sim_result *res;
    uint64_t rng;
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
    int session;         /* group main has pool = session */
    int pipeline;        /* pool = request: each group's pipeline (1: a worker holds one request) */
    int pipeline_wait;   /* its pipeline_wait (ms; 0: behind any run) */
    VEC(int) sess_wid;   /* per cid (session): the worker that ran its first message, or -1 */
    VEC(struct tpub) tpubs; /* publishes on workers' timers */
    int defer_pct;       /* of the sync requests a worker runs: replies deferred (-30!) */
    size_t max_msg;      /* the longest message a fake worker has sent (the output bound's slack) */
    VEC(int) fan_given_up; /* per cid: a .qgate.all of it was given up: its parts may run late,
                            * after the client itself is forgotten */
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

static struct sim *S; /* for the hooks and the death callback */

/* ---- trace -------------------------------------------------------------------------------- */

static char trace[TRACE_N][TRACE_LINE];
static long trace_n;

static void tr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tr(const char *fmt, ...)
{
    char *line = trace[trace_n % TRACE_N];
    int n = snprintf(line, TRACE_LINE, "%6ld t=%-8lld ", S ? S->step : 0L,
                     S ? (long long)(S->now_us / 1000) : 0LL);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, TRACE_LINE - (size_t)n, fmt, ap);
    va_end(ap);
    trace_n++;
    if (S && S->o->verbose)
        fprintf(stderr, "%s\n", line);
}

static void on_log(const char *line, size_t n)
{
    /* drop the wall-clock date and time the gateway puts first */
    const char *p = n > 24 ? line + 24 : line;
    size_t len = n - (size_t)(p - line);
    while (len && (p[len - 1] == '\n'))
        len--;
    tr("  gw %.*s", (int)len, p);
}

/* The log sink of worlds whose log goes through the queue (log_start_manual): lines come when
 * the sink takes them (log_event); the "dropped" lines are summed to check them. */
static uint64_t log_given, log_reported;

static void on_log_queued(const char *line, size_t n)
{
    const char *d = memmem(line, n, " log lines dropped: the log was behind", 38);
    if (d) {
        const char *p = d;
        while (p > line && p[-1] >= '0' && p[-1] <= '9')
            p--;
        log_reported += strtoull(p, NULL, 10);
    } else {
        log_given++;
    }
    on_log(line, n);
}

static void print_trace(void)
{
    long from = trace_n > TRACE_N ? trace_n - TRACE_N : 0;
    fprintf(stderr, "--- the last %ld events and gateway log lines:\n", trace_n - from);
    for (long i = from; i < trace_n; i++)
        fprintf(stderr, "%s\n", trace[i % TRACE_N]);
}

static void dump_world(void);
struct fworker;
static struct worker *gw_worker_of(const struct fworker *w);

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    dump_world();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->res->what, sizeof S->res->what, fmt, ap);
    va_end(ap);
    S->res->failed_step = S->step;
    tr("VIOLATION: %s", S->res->what);
    longjmp(S->fail, 1);
}

static void on_death(void)
{
    if (!S)
        return;
    fprintf(stderr, "sim: the process died at step %ld of seed %llu\n", S->step, (unsigned long long)S->o->seed);
    print_trace();
}

/* ---- choices ------------------------------------------------------------------------------ */

static uint64_t rnd64(void)
{
    if (S->o->data) { /* a fuzzer's bytes, then zeros */
        uint64_t v = 0;
        for (int i = 0; i < 4; i++)
            v = v << 8 | (S->data_off < S->o->len ? S->o->data[S->data_off++] : 0);
        return v;
    }
    uint64_t x = S->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    S->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* 0 .. n-1 */
static int rnd(int n) { return n <= 1 ? 0 : (int)(rnd64() % (uint64_t)n); }
static int chance(int pct) { return rnd(100) < pct; }
static int enabled(int k) { return !(S->o->disabled & (1u << k)); }

static int unread(int fd)
{
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

/* ---- hooks -------------------------------------------------------------------------------- */

static int64_t hook_now(void *ctx)
{
    (void)ctx;
    return S->now_us;
}

static struct fclient *fclient_of(uint32_t id, uint32_t gen)
{
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st != FC_FREE && S->cl[i].gid == id && S->cl[i].ggen == gen)
            return &S->cl[i];
    return NULL;
}

static struct sent *sent_of_seq(struct fclient *c, uint64_t seq)
{
    for (int i = 0; i < c->sent.n; i++)
        if (c->sent.v[i].seq == (int)seq)
            return &c->sent.v[i];
    return NULL;
}

static void hook_lost(void *ctx, uint32_t id, uint32_t gen, uint64_t seq)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    struct sent *s = c ? sent_of_seq(c, seq) : NULL;
    tr("gateway: request %llu of C%d lost with its worker", (unsigned long long)seq, c ? c->cid : -1);
    if (s)
        s->lost = s->abandoned = 1;
    if (s && s->fan) {
        while (S->fan_given_up.n <= c->cid)
            VEC_PUSH(S->fan_given_up, 0);
        S->fan_given_up.v[c->cid] = 1;
    }
}

static void hook_closed(void *ctx, uint32_t id, uint32_t gen, const char *why)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    if (c)
        snprintf(c->why, sizeof c->why, "%s", why);
}

static void hook_unread(void *ctx, uint32_t id, uint32_t gen, uint64_t next_seq)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    tr("gateway: reads nothing more from C%d (from its message %llu on)", c ? c->cid : -1, (unsigned long long)next_seq);
    if (c && c->unread_from < 0)
        c->unread_from = (int)next_seq;
}

static struct fworker *worker_of_addr(const char *addr);

/* A client's message given to a worker: never to one of a paused group, never to a disabled
 * one (but the next of a session it had before). */
/* pipeline_wait's name for a query: its op and argument ("q CID SEQ OP ARG"), so that the
 * requests of every client are learned together, as the same query text is in a real world. */
static uint64_t hook_query_key(void *ctx, const uint8_t *msg, size_t len)
{
    (void)ctx;
    int cid, seq, op, arg;
    char t[96];
    if (len < 14 || len - 14 >= sizeof t || msg[8] != KT_CHAR)
        return 0;
    memcpy(t, msg + 14, len - 14);
    t[len - 14] = 0;
    if (sscanf(t, "q %d %d %d %d", &cid, &seq, &op, &arg) != 4)
        return 0;
    return 1 + (uint64_t)op * 100000 + (uint64_t)arg;
}

static void hook_dispatched(void *ctx, const struct conn *wc, uint32_t id, uint32_t gen, uint64_t seq)
{
    (void)ctx;
    const struct worker *w = (const struct worker *)wc;
    struct fclient *c = fclient_of(id, gen);
    int cid = c ? c->cid : -1;
    struct fworker *f = worker_of_addr(w->addr);
    for (int i = 0; f && i < FW_CONNS; i++) {
        struct fwconn *k = &f->k[i];
        if (k->gw_fd < 0 || k->gw_fd != w->c.fd)
            continue;
        int j = 0;
        while (j < k->nrecent && k->recent[j] != cid)
            j++;
        if (j == k->nrecent && k->nrecent < 8)
            k->nrecent++;
        memmove(k->recent + 1, k->recent, (size_t)QG_MIN(j, 7) * sizeof k->recent[0]);
        k->recent[0] = cid; /* the most recent first, each client once */
    }
    if (w->grp->paused)
        fail("%s (group %s, paused) was given message %llu of C%d", w->c.name, w->grp->cfg.name,
             (unsigned long long)seq, cid);
    if (!w->disabled)
        return;
    const struct fworker *fw = worker_of_addr(w->addr);
    int own = S->session && cid >= 0 && cid < S->sess_wid.n && fw && S->sess_wid.v[cid] == fw->wid &&
              w->sess && w->sess->c.id == id && w->sess->c.gen == gen;
    if (!own)
        fail("%s, disabled, was given message %llu of C%d, whose session it is not", w->c.name,
             (unsigned long long)seq, cid);
}

static void set_sndbuf(int fd)
{
    int sz = 2048 << rnd(6); /* 2 KiB .. 64 KiB: writes come back short */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
}

static struct fworker *worker_of_addr(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    int port = colon ? atoi(colon + 1) : 0;
    int k = port - WPORT0;
    return k >= 0 && k < S->nw ? &S->w[k] : NULL;
}

static void fwc_reset(struct fwconn *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = k->gw_fd = -1;
    k->st = FW_DOWN;
    k->in.len = 0;
    k->out.len = 0;
    k->out_off = 0;
    k->hold_until = 0;
    k->last_cid = -1;
    k->nrecent = 0;
}

static void tpub_conn_gone(struct fworker *w, int conn);

/* Connection i of w has closed (its end too): a callback it waited on will not be answered. */
static void fw_conn_gone(struct fworker *w, int i)
{
    tpub_conn_gone(w, i);
    fwc_reset(&w->k[i]);
    if (w->waiting_cb && w->cb_conn == i)
        w->waiting_cb = 0; /* q's sync call on that handle fails: it goes on */
}

/* Every connection closed, nothing deferred (the process died, or starts afresh). */
static void fw_reset(struct fworker *w)
{
    for (int i = 0; i < FW_CONNS; i++)
        fw_conn_gone(w, i);
    w->waiting_cb = 0;
    for (int i = 0; i < w->deferred.n; i++)
        sb_free(&w->deferred.v[i].msg);
    w->deferred.n = 0;
}

static int fw_live(const struct fworker *w)
{
    int n = 0;
    for (int i = 0; i < FW_CONNS; i++)
        n += w->k[i].fd >= 0;
    return n;
}

static int hook_connect(void *ctx, const char *addr, int uds)
{
    (void)ctx;
    struct fworker *w = worker_of_addr(addr);
    if (!w || w->refuse || (uds && w->uds == UDS_REFUSE)) {
        tr("gateway connects to %s%s: refused", addr, uds ? " over its Unix socket" : "");
        errno = ECONNREFUSED;
        return -1;
    }
    if (uds && S->g.cfg.local_workers != CFG_LOCAL_UNIX)
        fail("the gateway tried W%d's Unix socket with local_workers = tcp", w->wid);
    int slot = -1;
    for (int i = 0; i < FW_CONNS && slot < 0; i++)
        if (w->k[i].fd < 0)
            slot = i;
    for (int i = 0; i < FW_CONNS && slot < 0; i++) { /* full: those the gateway closed go first, as
                                                      * q's select would tell it */
        struct pollfd pf = {.fd = w->k[i].fd, .events = POLLIN};
        if (w->k[i].fd >= 0 && poll(&pf, 1, 0) == 1 && (pf.revents & POLLHUP)) {
            tr("W%d: the gateway had closed its connection %d", w->wid, i);
            fw_conn_gone(w, i);
            slot = i;
        }
    }
    if (slot < 0)
        fail("the gateway opens a %dth connection to W%d at once", FW_CONNS + 1, w->wid);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
        fail("socketpair: %s", strerror(errno));
    if (uds && w->uds == UDS_MUTE) { /* accepted, then closed before a byte of the handshake */
        close(sv[1]);
        S->res->uds_mutes++;
        tr("gateway connects to W%d over its Unix socket: closed at once", w->wid);
        return sv[0];
    }
    S->res->uds_conns += uds;
    set_sndbuf(sv[0]);
    set_sndbuf(sv[1]);
    struct fwconn *k = &w->k[slot];
    fwc_reset(k);
    k->fd = sv[1];
    k->gw_fd = sv[0];
    k->st = FW_HS;
    k->serial = ++w->conns;
    tr("gateway connects to W%d (its connection %d)%s", w->wid, slot, uds ? " over its Unix socket" : "");
    return sv[0];
}

/* ---- messages ----------------------------------------------------------------------------- */

/* A whole message of type t carrying x (freed), appended to b. */
static void put_msg(struct sbuf *b, int t, K x)
{
    size_t len;
    uint8_t *m = kcodec_encode_msg(x, t, &len);
    k_free(x);
    if (!m)
        fail("out of memory encoding");
    sb_add(b, m, len);
    free(m);
}

static void put_text(struct sbuf *b, int t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put_text(struct sbuf *b, int t, const char *fmt, ...)
{
    char s[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    put_msg(b, t, k_str(s, strlen(s)));
}

/* Take one whole message from the front of b: its type and value (decompressed and decoded;
 * the caller frees it). 0 if none is whole yet; -1 if the bytes are not a message q would
 * accept (*why). *compressed says whether it came compressed. */
static int take_msg(struct sbuf *b, int *type, K *x, int *compressed, const char **why)
{
    if (b->len < 8)
        return 0;
    struct kipc_hdr h;
    if (kipc_hdr_parse(b->p, b->len, (uint64_t)1 << 32, &h, why) != QG_OK)
        return -1;
    if (b->len < h.len)
        return 0;
    uint8_t *plain = b->p;
    size_t plen = (size_t)h.len;
    if (h.compressed) {
        plen = kzip_uncompressed_len(b->p, (size_t)h.len);
        if (plen < 9 || plen > (1u << 28) || !(plain = malloc(plen)) ||
            kzip_decompress(b->p, (size_t)h.len, plain, plen, why) != QG_OK) {
            free(plain == b->p ? NULL : plain);
            *why = "bad compressed message";
            return -1;
        }
    }
    struct kerr e;
    qg_status st = kcodec_decode(plain + 8, plen - 8, h.le, NULL, x, &e);
    if (plain != b->p)
        free(plain);
    if (st != QG_OK) {
        *why = e.why;
        return -1;
    }
    *type = h.type;
    *compressed = h.compressed;
    sb_drop(b, (size_t)h.len);
    return 1;
}

/* The text of a char vector (or "" for anything else), NUL-terminated in buf. */
static const char *text_of(K x, char *buf, size_t n)
{
    if (x->t != KT_CHAR) {
        buf[0] = 0;
        return buf;
    }
    snprintf(buf, n, "%.*s", (int)QG_MIN((int64_t)n - 1, x->n), kC(x));
    return buf;
}

/* ---- fake workers ------------------------------------------------------------------------- */

static int cid_group(int cid) { return cid >= 0 && cid < S->cid_group.n ? S->cid_group.v[cid] : -1; }

/* The gateway's connection for w's connection i (found by its socket), or NULL. */
static struct worker *gw_conn_of(const struct fworker *w, int i)
{
    int fd = w->k[i].gw_fd;
    for (int gi = 0; fd >= 0 && gi < S->g.ngroups; gi++) {
        struct worker *x;
        TAILQ_FOREACH(x, &S->g.groups[gi].workers, glink)
            if (x->c.fd == fd)
                return x;
    }
    return NULL;
}

static struct fclient *fclient_of(uint32_t id, uint32_t gen);

/* Publish t may have reached client cid only if that is its owner or its session's client. */
static void tpub_check(const struct tpub *t, int id)
{
    if (t->to < 0 || t->owner == -2 || t->to == t->owner || t->to == t->sess)
        return;
    for (int i = 0; t->owner == -4 && i < t->nok; i++)
        if (t->to == t->ok[i])
            return;
    fail("C%d got publish %d of W%d's connection %d, which was C%d's (the next reply there) or %s", t->to, id, t->wid,
         t->conn, t->owner, t->sess >= 0 ? "its session's client's" : "nobody's");
}

/* A reply to client cid is written on w's connection i: the publishes before it there are cid's. */
static void tpub_owned(struct fworker *w, int i, int cid)
{
    for (int j = 0; j < S->tpubs.n; j++) {
        struct tpub *t = &S->tpubs.v[j];
        if (t->owner == -2 && t->wid == w->wid && t->conn == i && t->serial == w->k[i].serial) {
            t->owner = cid;
            tpub_check(t, j);
        }
    }
}

/* w's connection i closes with publishes on it that no reply followed: they were for the
 * client of the request the gateway ran there last, if any. */
static void tpub_conn_gone(struct fworker *w, int i)
{
    const struct fwconn *k = &w->k[i];
    for (int j = 0; k->fd >= 0 && j < S->tpubs.n; j++) {
        struct tpub *t = &S->tpubs.v[j];
        if (t->owner == -2 && t->wid == w->wid && t->conn == i && t->serial == k->serial) {
            t->owner = -4; /* the request it ran there (the gateway's, if it had read it) has gone with it */
            memcpy(t->ok, k->recent, sizeof t->ok);
            t->nok = k->nrecent;
            tpub_check(t, j);
        }
    }
}

/* The reply m (taken) to client cid, on w's connection i; deferred (-30!) if may_defer says so. */
static void fw_reply(struct fworker *w, int i, int cid, struct sbuf *m, int may_defer)
{
    if (m->len > S->max_msg)
        S->max_msg = m->len;
    if (may_defer && S->defer_pct && chance(S->defer_pct)) {
        struct dfr d = {.conn = i, .serial = w->k[i].serial, .cid = cid, .due_ms = S->now_us / 1000 + rnd(20), .msg = *m};
        *m = (struct sbuf){0};
        VEC_PUSH(w->deferred, d);
        tr("W%d defers its reply to C%d (-30!), due at %lld ms", w->wid, cid, (long long)d.due_ms);
        return;
    }
    tpub_owned(w, i, cid);
    sb_add(&w->k[i].out, m->p, m->len);
    sb_free(m);
}

/* Deferred replies due (all: every one) are sent, each on its own connection. */
static void fw_release_deferred(struct fworker *w, int all)
{
    for (int j = 0; j < w->deferred.n;) {
        struct dfr *d = &w->deferred.v[j];
        if (!all && d->due_ms > S->now_us / 1000) {
            j++;
            continue;
        }
        struct fwconn *k = &w->k[d->conn];
        if (k->fd >= 0 && k->serial == d->serial) {
            tpub_owned(w, d->conn, d->cid);
            sb_add(&k->out, d->msg.p, d->msg.len);
            tr("W%d sends its deferred reply to C%d (connection %d)", w->wid, d->cid, d->conn);
        }
        sb_free(&d->msg);
        w->deferred.v[j] = w->deferred.v[--w->deferred.n];
    }
}

/* The reply text, to client cid. */
static void fw_reply_text(struct fworker *w, int i, int cid, int may_defer, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void fw_reply_text(struct fworker *w, int i, int cid, int may_defer, const char *fmt, ...)
{
    char t[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    struct sbuf m = {0};
    put_msg(&m, KIPC_RESPONSE, k_str(t, strlen(t)));
    fw_reply(w, i, cid, &m, may_defer);
}

static void fw_reply_k(struct fworker *w, int i, int cid, int may_defer, K x)
{
    struct sbuf m = {0};
    put_msg(&m, KIPC_RESPONSE, x);
    fw_reply(w, i, cid, &m, may_defer);
}

/* A request "q CID SEQ OP ARG" or "a CID SEQ OP ARG" reached worker w on its connection i:
 * check where it came from and its order, then do what it asks. */
static void worker_run(struct fworker *w, int i, int type, const char *s)
{
    struct fwconn *k = &w->k[i];
    char kind;
    int cid, seq, op, arg;
    if (sscanf(s, "%c %d %d %d %d", &kind, &cid, &seq, &op, &arg) != 5 || cid < 0 || cid >= S->by_cid.n)
        fail("W%d got a request it cannot read: \"%s\"", w->wid, s);
    struct fclient *c = S->by_cid.v[cid];
    if ((kind == 'q') != (type == KIPC_SYNC))
        fail("W%d got \"%s\" as a %s message", w->wid, s, kipc_type_name(type));
    struct sent *x0 = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
    int want = x0 ? x0->grp : cid_group(cid);
    if (want != w->group)
        fail("W%d (group %d) got \"%s\" of C%d, which may run on group %d only", w->wid, w->group, s, cid, want);
    int fan = (x0 && x0->fan) || (!c && cid < S->fan_given_up.n && S->fan_given_up.v[cid] && seq <= S->last_seq.v[cid]);
    int bcast = (w->group == S->bc_group && type == KIPC_ASYNC) || fan; /* on each worker once, in order */
    if (bcast) {
        while (w->seen_async_last.n <= cid)
            VEC_PUSH(w->seen_async_last, -1);
        if (seq <= w->seen_async_last.v[cid])
            fail("W%d ran async %d of C%d after %d (order)", w->wid, seq, cid, w->seen_async_last.v[cid]);
        w->seen_async_last.v[cid] = seq;
    }
    struct sent *x = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
    if (c && !x)
        fail("W%d ran request %d of C%d, which it never sent", w->wid, seq, cid);
    if (fan && seq < S->last_seq.v[cid] && x && !x->abandoned)
        fail("W%d ran its part of request %d of C%d after its request %d (order)", w->wid, seq, cid, S->last_seq.v[cid]);
    if (fan && seq > S->last_seq.v[cid])
        S->last_seq.v[cid] = seq;
    if (!bcast) {
        if (seq <= S->last_seq.v[cid] && !(x && x->abandoned))
            fail("W%d ran request %d of C%d after its request %d (order, or twice)", w->wid, seq, cid,
                 S->last_seq.v[cid]);
        if (seq > S->last_seq.v[cid])
            S->last_seq.v[cid] = seq;
    }
    if (S->session && w->group != S->bc_group) { /* one worker for all a session sends */
        while (S->sess_wid.n <= cid)
            VEC_PUSH(S->sess_wid, -1);
        if (S->sess_wid.v[cid] < 0)
            S->sess_wid.v[cid] = w->wid;
        else if (S->sess_wid.v[cid] != w->wid)
            fail("W%d ran \"%s\" of C%d, whose session is on W%d", w->wid, s, cid, S->sess_wid.v[cid]);
    }
    if (x)
        x->seen++;
    k->last_cid = cid;
    tr("W%d runs %s (connection %d)", w->wid, s, i);
    if (type == KIPC_ASYNC) {
        if (op == OP_APUSH)
            for (int j = 0; j < arg; j++)
                put_text(&k->out, KIPC_ASYNC, "p %d %d %d", cid, seq, j);
        return;
    }
    switch (op) {
    case OP_PUSH:
        for (int j = 0; j < arg; j++)
            put_text(&k->out, KIPC_ASYNC, "p %d %d %d", cid, seq, j);
        fw_reply_text(w, i, cid, 1, "R %d %d", cid, seq);
        break;
    case OP_CB:
        put_text(&k->out, KIPC_SYNC, "c %d %d", cid, seq);
        w->waiting_cb = 1;
        w->cb_conn = i;
        w->cb_cid = cid;
        w->cb_seq = seq;
        break;
    case OP_ERR: {
        char e[64];
        snprintf(e, sizeof e, "E %d %d", cid, seq);
        fw_reply_k(w, i, cid, 1, k_err(e));
        break;
    }
    case OP_GUID: {
        K l = k_list(2);
        kK(l)[0] = k_atom(-KT_GUID);
        char r[64];
        snprintf(r, sizeof r, "R %d %d", cid, seq);
        kK(l)[1] = k_str(r, strlen(r));
        fw_reply_k(w, i, cid, 1, l);
        break;
    }
    case OP_BIG: {
        /* "R cid seq " then arg bytes: compressible, and big enough to stream */
        char r[64];
        int n = snprintf(r, sizeof r, "R %d %d ", cid, seq);
        K v = k_vec(KT_CHAR, n + arg);
        memcpy(kC(v), r, (size_t)n);
        for (int j = 0; j < arg; j++)
            kC(v)[n + j] = (char)('a' + (j / 7) % 3);
        fw_reply_k(w, i, cid, 1, v);
        break;
    }
    case OP_SLOW: /* q is busy: nothing else runs, nothing is written, until it is done */
        w->busy_until = k->hold_until = S->now_us / 1000 + arg;
        fw_reply_text(w, i, cid, 0, "R %d %d", cid, seq);
        break;
    default:
        fw_reply_text(w, i, cid, 1, "R %d %d", cid, seq);
        break;
    }
}

/* May w take the next message of its connection i now? A whole one (or the handshake), and,
 * while q waits in a callback, only the answer on that connection. */
static int fw_ready(const struct fworker *w, int i)
{
    const struct fwconn *k = &w->k[i];
    if (k->fd < 0)
        return 0;
    if (k->st == FW_HS)
        return k->in.len && memchr(k->in.p, 0, k->in.len);
    if (k->st != FW_UP || k->in.len < 8)
        return 0;
    struct kipc_hdr h;
    const char *why = "";
    if (kipc_hdr_parse(k->in.p, k->in.len, (uint64_t)1 << 32, &h, &why) != QG_OK)
        fail("W%d got a bad header: %s", w->wid, why);
    if (k->in.len < h.len)
        return 0;
    return !w->waiting_cb || (i == w->cb_conn && h.type == KIPC_RESPONSE);
}

/* Run what arrived, one message at a time, as q does: from whichever connection (q's select
 * order is its own), each connection's in order; a callback blocks the worker until that
 * client's response comes; a deferred reply goes when it is due, others meanwhile. */
static void worker_process(struct fworker *w, int max)
{
    while (max-- > 0) {
        fw_release_deferred(w, 0);
        if (S->now_us / 1000 < w->busy_until)
            return;
        int idx[FW_CONNS], n = 0;
        for (int i = 0; i < FW_CONNS; i++)
            if (fw_ready(w, i))
                idx[n++] = i;
        if (!n)
            return;
        int i = idx[rnd(n)];
        struct fwconn *k = &w->k[i];
        if (k->st == FW_HS) {
            uint8_t *z = memchr(k->in.p, 0, k->in.len);
            sb_drop(&k->in, (size_t)(z - k->in.p) + 1);
            uint8_t cap = 3;
            sb_add(&k->out, &cap, 1);
            k->st = FW_UP;
            tr("W%d: handshake done (connection %d)", w->wid, i);
            continue;
        }
        /* what the gateway forwards must be a message q accepts: check the body too */
        struct kipc_hdr h;
        const char *why = "";
        if (kipc_hdr_parse(k->in.p, k->in.len, (uint64_t)1 << 32, &h, &why) != QG_OK)
            fail("W%d: a header it read once is bad now", w->wid);
        if (!h.compressed) {
            struct kerr e;
            if (kvalidate_check(k->in.p + 8, (size_t)h.len - 8, h.le, NULL, &e) != QG_OK)
                fail("W%d got a malformed message body (%s at %zu): q would reject it", w->wid, e.why, e.off);
        }
        int type, comp;
        K x;
        int r = take_msg(&k->in, &type, &x, &comp, &why);
        if (r < 0)
            fail("W%d cannot decode what it got: %s", w->wid, why);
        char s[256];
        text_of(x, s, sizeof s);
        if (type == KIPC_RESPONSE) {
            int cid, seq;
            if (!w->waiting_cb)
                fail("W%d got a response it did not ask for: \"%s\"", w->wid, s);
            if (x->t == KT_ERROR) {
                tr("W%d: callback answered by the gateway: '%s", w->wid, x->s);
            } else if (sscanf(s, "r %d %d", &cid, &seq) != 2 || cid != w->cb_cid || seq != w->cb_seq) {
                fail("W%d waited for the answer to callback %d of C%d and got \"%s\"", w->wid, w->cb_seq,
                     w->cb_cid, s);
            }
            w->waiting_cb = 0;
            fw_reply_text(w, i, w->cb_cid, 1, "R %d %d", w->cb_cid, w->cb_seq);
            tr("W%d: callback answered, replies", w->wid);
        } else if (x->t == KT_CHAR && x->n == 0) { /* the gateway's chaser */
            if (type == KIPC_SYNC)
                fw_reply_k(w, i, k->last_cid, 0, k_prim(KT_UNARY, 0));
            tr("W%d: chaser (connection %d)", w->wid, i);
        } else {
            worker_run(w, i, type, s);
        }
        k_free(x);
    }
}

static void worker_read(struct fworker *w, size_t want)
{
    for (int i = 0; i < FW_CONNS; i++) {
        struct fwconn *k = &w->k[i];
        if (k->fd < 0)
            continue;
        sb_reserve(&k->in, k->in.len + want);
        ssize_t n = read(k->fd, k->in.p + k->in.len, want);
        if (n == 0) {
            tr("W%d: the gateway closed its connection %d", w->wid, i);
            fw_conn_gone(w, i);
            continue;
        }
        if (n > 0) {
            k->in.len += (size_t)n;
            S->moved += (size_t)n;
        }
    }
}

/* Write up to want bytes of b from *off to fd; what was written is dropped from b's front now
 * and then (counted in *base, if given). Returns what write returned. */
static ssize_t sb_send(int fd, struct sbuf *b, size_t *off, size_t *base, size_t want)
{
    ssize_t k = write(fd, b->p + *off, QG_MIN(want, b->len - *off));
    if (k <= 0)
        return k;
    S->moved += (size_t)k;
    *off += (size_t)k;
    if (*off > 65536) {
        sb_drop(b, *off);
        if (base)
            *base += *off;
        *off = 0;
    }
    return k;
}

static void worker_write(struct fworker *w, size_t want)
{
    for (int i = 0; i < FW_CONNS; i++) {
        struct fwconn *k = &w->k[i];
        if (k->fd < 0 || k->out_off == k->out.len || S->now_us / 1000 < k->hold_until)
            continue;
        ssize_t n = sb_send(k->fd, &k->out, &k->out_off, NULL, want);
        if (n > 0) {
            if (k->out_off == k->out.len)
                k->out.len = k->out_off = 0;
        } else if (n < 0 && errno != EAGAIN) {
            tr("W%d: write on connection %d: %s", w->wid, i, strerror(errno));
            fw_conn_gone(w, i);
        }
    }
}

/* The gateway's worker for fake worker w (its lead connection), or NULL. */
static struct worker *gw_worker_of(const struct fworker *w)
{
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", WPORT0 + w->wid);
    for (int i = 0; i < S->g.ngroups; i++) {
        struct worker *x;
        TAILQ_FOREACH(x, &S->g.groups[i].workers, glink)
            if (!strcmp(x->addr, addr) && !x->removed)
                return x;
    }
    return NULL;
}

/* A worker publishes on its own timer (q runs its timer between messages): on one of its
 * connections, whatever the gateway runs there, racing the requests sent on it. "t ID": who may
 * get it is the client of the next reply there, or the session's (struct tpub). */
static void worker_timer_push(struct fworker *w)
{
    int idx[FW_CONNS], n = 0;
    for (int i = 0; i < FW_CONNS; i++)
        if (w->k[i].fd >= 0 && w->k[i].st == FW_UP)
            idx[n++] = i;
    if (!n || w->waiting_cb || S->now_us / 1000 < w->busy_until)
        return;
    int i = idx[rnd(n)], id = S->tpubs.n;
    const struct worker *gw = gw_conn_of(w, i);
    const struct fclient *sc = gw && gw->sess ? fclient_of(gw->sess->c.id, gw->sess->c.gen) : NULL;
    struct tpub t = {.wid = w->wid, .conn = i, .serial = w->k[i].serial, .owner = -2, .sess = sc ? sc->cid : -1, .to = -1};
    VEC_PUSH(S->tpubs, t);
    int burst = chance(20) ? 1 + rnd(40) : 1; /* a timer's publish, or a burst of them (for one) */
    size_t big = chance(40) ? (size_t)4096 << rnd(5) : 0; /* or big ones: a subscriber's output bound */
    for (int j = 0; j < burst; j++) {
        if (!big) {
            put_text(&w->k[i].out, KIPC_ASYNC, "t %d %d", id, j);
            continue;
        }
        char head[32];
        int hl = snprintf(head, sizeof head, "t %d %d ", id, j);
        K v = k_vec(KT_CHAR, (int64_t)big);
        memset(kC(v), 'x', big);
        memcpy(kC(v), head, (size_t)hl);
        put_msg(&w->k[i].out, KIPC_ASYNC, v);
        if (big + 14 > S->max_msg)
            S->max_msg = big + 14;
    }
    tr("W%d publishes %d on its timer (connection %d, its session's client C%d)", w->wid, id, i, t.sess);
}

static void worker_die(struct fworker *w)
{
    tr("W%d dies (%d connections)", w->wid, fw_live(w));
    fw_reset(w);
    S->wdeaths++;
    S->outages++;
    w->refuse = chance(50);
    w->uds = chance(70) ? UDS_OK : chance(50) ? UDS_REFUSE : UDS_MUTE; /* restarted otherwise */
}

static void fw_init(struct fworker *w, int wid, int group)
{
    memset(w, 0, sizeof *w);
    w->wid = wid;
    w->group = group;
    w->in_config = 1;
    for (int i = 0; i < FW_CONNS; i++) {
        w->k[i].fd = w->k[i].gw_fd = -1;
        w->k[i].last_cid = -1;
    }
    w->uds = chance(70) ? UDS_OK : chance(50) ? UDS_REFUSE : UDS_MUTE;
}

/* ---- fake clients ------------------------------------------------------------------------- */

static const struct {
    const char *user, *pass;
    int admin, good;
} creds[] = {
    {"alice", "wonder", 1, 1}, {"bob", "builder", 0, 1}, {"carol", "s3cret", 0, 1}, {"dave", "d", 0, 1},
    {"bea", "b", 0, 1},        {"mallory", "x", 0, 0},   {"alice", "wrong", 0, 0},
};

static int route_of(const char *user)
{
    if (S->ngroups > 1 && (!strcmp(user, "bob") || !strcmp(user, "bea")))
        return S->bc_group;
    return 0;
}

static int nopen_clients(void)
{
    int n = 0;
    for (int i = 0; i < MAXC; i++)
        n += S->cl[i].st == FC_HS || S->cl[i].st == FC_READY;
    return n;
}

static void client_connect(void)
{
    int slot = -1;
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_FREE) {
            slot = i;
            break;
        }
    if (slot < 0)
        return;
    struct fclient *c = &S->cl[slot];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
        fail("socketpair: %s", strerror(errno));
    set_sndbuf(sv[0]);
    set_sndbuf(sv[1]);
    memset(c, 0, sizeof *c);
    c->cid = S->next_cid++;
    c->unread_from = -1;
    VEC_PUSH(S->last_seq, -1);
    VEC_PUSH(S->by_cid, c);
    c->fd = sv[1];
    c->local = !(enabled(SIM_EV_REMOTE) && chance(30));
    S->in_gw = 1;
    struct client *gc = client_adopt_loop(&S->g, sv[0], 0, c->local);
    S->in_gw = 0;
    if (!gc)
        fail("client_adopt_loop refused a socket");
    c->gid = gc->c.id;
    c->ggen = gc->c.gen;
    c->serial = gc->serial;
    int k = rnd((int)QG_ARRAY_LEN(creds));
    if (!S->users_file)
        k = rnd(5);
    snprintf(c->user, sizeof c->user, "%s", creds[k].user);
    snprintf(c->pass, sizeof c->pass, "%s", creds[k].pass);
    c->accept = !S->users_file || creds[k].good;
    c->admin = S->users_file && creds[k].admin;
    static const int caps[] = {3, 3, 3, 6, 2, 1, 0};
    c->cap_req = enabled(SIM_EV_OLDCAP) ? caps[rnd(7)] : 3;
    c->group = route_of(c->user);
    VEC_PUSH(S->cid_group, c->group);
    c->st = FC_HS;
    if (chance(3)) { /* a handshake q would not accept: over 1 KiB without its NUL */
        c->longhs = 1;
        c->accept = 0;
        uint8_t junk[1100];
        memset(junk, 'x', sizeof junk);
        sb_add(&c->out, junk, sizeof junk);
    } else {
        char hs[128];
        int n = snprintf(hs, sizeof hs, "%s:%s", c->user, c->pass);
        sb_add(&c->out, hs, (size_t)n);
        uint8_t tail[2] = {(uint8_t)c->cap_req, 0}; /* capability 0: old clients send no byte */
        if (c->cap_req)
            sb_add(&c->out, tail, 2);
        else
            sb_add(&c->out, tail + 1, 1);
    }
    tr("C%d connects as %s (the gateway's c%llu, slot %u.%u, cap %d, %s)", c->cid, c->user,
       (unsigned long long)c->serial, c->gid, c->ggen, c->cap_req, c->local ? "local" : "remote");
}

static struct fclient *pick_client(int need_ready)
{
    int idx[MAXC], n = 0;
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_READY || (!need_ready && S->cl[i].st == FC_HS))
            idx[n++] = i;
    return n ? &S->cl[idx[rnd(n)]] : NULL;
}

static void add_sent(struct fclient *c, int type, int op, int arg)
{
    struct sent s = {.type = (uint8_t)type, .op = (uint8_t)op, .arg = arg, .end = c->out_base + c->out.len,
                     .seq = type == KIPC_RESPONSE ? -1 : c->nseq++, .grp = c->group};
    VEC_PUSH(c->sent, s);
    if (type == KIPC_SYNC)
        VEC_PUSH(c->pend, c->sent.n - 1);
}

/* A request for a worker, as text, or (ROUTE) wrapped: (`.qgate.on; `G; text), G its own group
 * (admitted), the other (bob and bea keep to bc, the others to main: refused) or none. The
 * group it may run on, or -1 if the gateway must refuse it. */
static int put_request(struct fclient *c, int type, const char *text)
{
    if (!enabled(SIM_EV_ROUTE) || !chance(15)) {
        put_text(&c->out, type, "%s", text);
        return c->group;
    }
    int r = rnd(10), other = S->ngroups > 1 ? 1 - c->group : -1;
    int to = r < 7 ? c->group : r < 9 && other >= 0 ? other : -1;
    K l = k_list(3);
    kK(l)[0] = chance(50) ? k_sym(".qgate.on") : k_str(".qgate.on", 9);
    kK(l)[1] = k_sym(to < 0 ? "nosuch" : to == S->bc_group ? "bc" : "main");
    kK(l)[2] = k_str(text, strlen(text));
    put_msg(&c->out, type, l);
    return to == c->group ? to : -1;
}

/* What an operator's command is to get (struct sent arg). */
enum { CTL_OK, CTL_ACCESS, CTL_NOTARGET, CTL_MAYBE /* 1b, or no such worker: a reload may be on its way */ };

/* (name; arg), name a symbol or (as node-q names a function) a string; arg NULL: (::). */
static K control_call(const char *name, K arg)
{
    K l = k_list(2);
    kK(l)[0] = chance(50) ? k_sym(name) : k_str(name, strlen(name));
    kK(l)[1] = arg ? arg : k_prim(KT_UNARY, 0);
    return l;
}

/* .qgate.pause/resume[`group] (or every group) and .qgate.disable/enable[`host:port], in one of
 * the forms a q client may send, to c's output. What it is to get (CTL_*). */
static int control_request(struct fclient *c, int op)
{
    static const char *const names[] = {[OP_PAUSE] = ".qgate.pause", [OP_RESUME] = ".qgate.resume",
                                        [OP_DISABLE] = ".qgate.disable", [OP_ENABLE] = ".qgate.enable"};
    char target[64] = "";
    int bad = 0, none = 0;
    if (op == OP_PAUSE || op == OP_RESUME) {
        int r = rnd(10), other = S->ngroups > 1 ? 1 - c->group : c->group;
        none = r >= 7 && r < 9;
        bad = r == 9;
        snprintf(target, sizeof target, "%s", bad ? "nosuch" : (r < 5 ? c->group : other) == S->bc_group ? "bc" : "main");
    } else {
        int k = rnd(S->nw + 1);
        bad = k == S->nw;
        snprintf(target, sizeof target, "%s127.0.0.1:%d", chance(20) ? ":" : "", bad ? 1 : WPORT0 + k);
    }
    int form = rnd(4);
    if (none)
        put_text(&c->out, KIPC_SYNC, "%s[]", names[op]);
    else if (form == 0)
        put_text(&c->out, KIPC_SYNC, "%s[`%s]", names[op], target);
    else if (form == 1)
        put_text(&c->out, KIPC_SYNC, "%s[\"%s\"]", names[op], target);
    else
        put_msg(&c->out, KIPC_SYNC, control_call(names[op], form == 2 ? k_sym(target) : k_str(target, strlen(target))));
    if (!c->admin)
        return CTL_ACCESS;
    return bad ? CTL_NOTARGET : op == OP_DISABLE || op == OP_ENABLE ? CTL_MAYBE : CTL_OK;
}

/* Append one request of kind op to c's output. */
static void client_request(struct fclient *c, int op)
{
    char text[96];
    int to = -2;
    int seq = c->nseq, arg = 0;
    switch (op) {
    case OP_BIG:
    case OP_PUSH:
    case OP_SLOW:
    case OP_ECHO:
    case OP_ERR:
    case OP_GUID:
    case OP_CB:
        arg = op == OP_BIG ? 1000 + rnd(enabled(SIM_EV_BIGREPLY) ? 300000 : 3000)
            : op == OP_PUSH ? 1 + rnd(4) : op == OP_SLOW ? 1 + rnd(2000) : 0;
        snprintf(text, sizeof text, "q %d %d %d %d", c->cid, seq, op, arg);
        to = put_request(c, KIPC_SYNC, text);
        break;
    case OP_ASYNC:
    case OP_APUSH:
        arg = op == OP_APUSH ? 1 + rnd(3) : 0;
        snprintf(text, sizeof text, "a %d %d %d %d", c->cid, seq, op, arg);
        to = put_request(c, KIPC_ASYNC, text);
        break;
    case OP_ALL: {
        int as_list = chance(50);
        K l = k_list(3 + as_list);
        char t[96];
        snprintf(t, sizeof t, "q %d %d %d 0", c->cid, seq, op);
        kK(l)[0] = k_sym(".qgate.all");
        kK(l)[1] = k_sym(c->group == S->bc_group ? "bc" : "main");
        kK(l)[2] = k_str(t, strlen(t));
        if (as_list)
            kK(l)[3] = k_sym("list");
        put_msg(&c->out, KIPC_SYNC, l);
        to = S->session && c->group != S->bc_group ? -1 : c->group; /* not for a session group */
        arg = 1 + as_list;
        break;
    }
    case OP_PING:
        if (chance(50))
            put_text(&c->out, KIPC_SYNC, ".qgate.ping[]");
        else {
            K l = k_list(2);
            kK(l)[0] = k_sym(".qgate.ping");
            kK(l)[1] = k_prim(KT_UNARY, 0);
            put_msg(&c->out, KIPC_SYNC, l);
        }
        break;
    case OP_STATS:
    case OP_CLIENTS:
    case OP_RELOADCMD:
    case OP_UNKNOWN:
        put_text(&c->out, KIPC_SYNC, "%s", op == OP_STATS     ? ".qgate.stats[]"
                                         : op == OP_CLIENTS   ? ".qgate.clients[]"
                                         : op == OP_RELOADCMD ? ".qgate.reload[]"
                                                              : ".qgate.nosuch[]");
        break;
    case OP_DISCONNECT: {
        /* an id the gateway showed, or one it never did */
        struct fclient *v = pick_client(0);
        arg = v && chance(80) ? (int)v->serial : 5000 + rnd(100);
        if (chance(40)) {
            put_text(&c->out, KIPC_SYNC, ".qgate.disconnect[%d]", arg);
        } else if (chance(50)) {
            put_text(&c->out, KIPC_SYNC, ".qgate.kill[%d]", arg); /* the same command, PgBouncer's name */
        } else {
            K n = k_atom(-KT_LONG);
            n->j = arg;
            put_msg(&c->out, KIPC_SYNC, control_call(".qgate.kill", n));
        }
        break;
    }
    case OP_POOLS:
        if (chance(50))
            put_text(&c->out, KIPC_SYNC, ".qgate.pools[]");
        else
            put_msg(&c->out, KIPC_SYNC, control_call(".qgate.pools", NULL));
        break;
    case OP_PAUSE:
    case OP_RESUME:
    case OP_DISABLE:
    case OP_ENABLE:
        arg = control_request(c, op);
        break;
    case OP_BIGCMD: { /* a command with a huge argument list */
        int n = 1000 + rnd(20000);
        K l = k_list(n + 1);
        kK(l)[0] = k_sym(".qgate.ping");
        for (int i = 0; i < n; i++) {
            kK(l)[i + 1] = k_atom(-KT_LONG);
            kK(l)[i + 1]->j = i;
        }
        put_msg(&c->out, KIPC_SYNC, l);
        break;
    }
    case OP_BADHDR: {
        static const uint8_t bad[][8] = {
            {2, 1, 0, 0, 20, 0, 0, 0},  /* byte order 2 */
            {1, 3, 0, 0, 20, 0, 0, 0},  /* type 3 */
            {1, 1, 0, 0, 4, 0, 0, 0},   /* too short */
            {1, 1, 0, 1, 20, 0, 0, 0},  /* byte 3 set: only with capability 6 */
        };
        sb_add(&c->out, bad[rnd(4)], 8);
        c->bad = 1;
        c->bad_seq = seq;
        break;
    }
    case OP_BADBODY: { /* a whole message whose body q would reject */
        uint8_t m[8 + 12] = {1, 1, 0, 0, 20, 0, 0, 0};
        static const uint8_t bodies[][12] = {
            {KT_CHAR, 0, 200, 0, 0, 0, 'x'},              /* count past the end */
            {77, 0, 0, 0, 0, 0},                          /* unknown type */
            {KT_SYM, 0, 1, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f'}, /* symbol without NUL */
            {KT_LONG, 9, 0, 0, 0, 0},                     /* bad attribute */
        };
        memcpy(m + 8, bodies[rnd(4)], 12);
        sb_add(&c->out, m, sizeof m);
        c->bad = 1;
        c->bad_seq = seq;
        break;
    }
    default:
        break;
    }
    int type = op == OP_ASYNC || op == OP_APUSH ? KIPC_ASYNC : KIPC_SYNC;
    add_sent(c, type, op, arg);
    if (to != -2) {
        struct sent *x = &c->sent.v[c->sent.n - 1];
        x->grp = to;
        x->fan = (uint8_t)(op == OP_ALL ? arg : 0);
        x->lost = to < 0 && type == KIPC_ASYNC; /* refused, with nobody to tell: never runs */
    }
    tr("C%d queues %s %s (seq %d)%s", c->cid, type == KIPC_SYNC ? "sync" : "async", op_names[op], seq,
       to == -1 ? ", routed where it may not go" : "");
}

static int pick_op(void)
{
    for (;;) {
        int r = rnd(100);
        if (r < 22)
            return OP_ECHO;
        if (r < 30)
            return enabled(SIM_EV_BIGREPLY) || chance(50) ? OP_BIG : OP_ECHO;
        if (r < 34)
            return OP_ERR;
        if (r < 38 && enabled(SIM_EV_WPUSH))
            return OP_PUSH;
        if (r < 42 && enabled(SIM_EV_CALLBACK))
            return OP_CB;
        if (r < 45)
            return OP_GUID;
        if (r < 50)
            return OP_SLOW;
        if (r < 70 && enabled(SIM_EV_ASYNC))
            return chance(80) || !enabled(SIM_EV_WPUSH) ? OP_ASYNC : OP_APUSH;
        if (r < 80 && enabled(SIM_EV_COMMAND)) {
            static const int cmds[] = {OP_PING, OP_PING, OP_STATS, OP_UNKNOWN, OP_BIGCMD};
            return cmds[rnd(5)];
        }
        if (r < 86 && enabled(SIM_EV_ADMIN)) {
            static const int cmds[] = {OP_CLIENTS, OP_DISCONNECT, OP_RELOADCMD, OP_POOLS};
            int k = rnd(4);
            if (enabled(SIM_EV_PAUSE) && chance(40))
                return chance(50) ? OP_PAUSE : OP_RESUME;
            if (enabled(SIM_EV_DISABLE) && chance(25))
                return chance(50) ? OP_DISABLE : OP_ENABLE;
            return cmds[k];
        }
        if (r < 88 && enabled(SIM_EV_BADMSG))
            return chance(50) ? OP_BADHDR : OP_BADBODY;
        if (r < 91 && enabled(SIM_EV_ROUTE))
            return OP_ALL;
        if (r >= 88)
            return OP_ECHO;
    }
}

static void client_send(struct fclient *c, int burst)
{
    if (c->bad || c->we_closed)
        return;
    for (int i = 0; i < burst && !c->bad; i++)
        client_request(c, pick_op());
}

/* The reply to an operator's command: 1b when it applies (a pause may be told its group was
 * resumed first), else the error its sender or its argument earns. */
static void control_got(struct fclient *c, const struct sent *r, K x)
{
    const char *e = x->t == KT_ERROR ? x->s : NULL;
    int ok = x->t == -KT_BOOL && x->g == 1;
    if (S->session && e && (!strncmp(e, "qgate: worker ", 14) || !strncmp(e, "qgate: timeout (", 16)))
        return; /* its session's worker was lost: the first request owed is told so, whatever it is */
    switch (r->arg) {
    case CTL_ACCESS:
        ok = e && !strncmp(e, "qgate: access (admin only)", 26);
        break;
    case CTL_NOTARGET:
        ok = e && (!strncmp(e, "qgate: no group ", 16) || !strncmp(e, "qgate: no worker ", 17));
        break;
    case CTL_MAYBE:
        ok |= e && !strncmp(e, "qgate: no worker ", 17);
        break;
    default:
        ok |= r->op == OP_PAUSE && e && strstr(e, "was resumed before its pause completed");
        break;
    }
    if (!ok)
        fail("C%d: %s %d (expecting %d) got %s%s", c->cid, op_names[r->op], r->seq, r->arg, e ? "'" : "type ",
             e ? e : "?");
}

/* Is the gateway's error e a valid answer to request r of c? Only when the world's events
 * justify it (a worker lost or out of service, a timeout, a refusal, a bad message, the
 * request itself): NULL if so, else what is wrong. */
static const char *gw_error_unjustified(const struct fclient *c, const struct sent *r, const char *e)
{
    const struct config *cfg = &S->g.cfg;
    int lost = S->wdeaths || S->g.query_timeouts, out = lost || S->outages;
#define HAS(p) (!strncmp(e, p, strlen(p)))
    if (HAS("qgate: badmsg"))
        return r->op == OP_BADBODY || r->op == OP_BADHDR ? NULL : "a well-formed request";
    if (HAS("qgate: busy"))
        return cfg->max_queue < 1000 ? NULL : "max_queue 1000, never reached here";
    if (HAS("qgate: timeout (queued "))
        return cfg->queue_timeout > 0 ? NULL : "no queue_timeout";
    if (HAS("qgate: timeout ("))
        return S->g.query_timeouts ? NULL : "no query timed out";
    if (HAS("qgate: worker ") && strstr(e, " lost"))
        return lost ? NULL : "no worker died or timed out";
    if (HAS("qgate: no worker of group "))
        return out ? NULL : "every worker stayed in service";
    if (HAS("qgate: group ") && (strstr(e, " workers up") || strstr(e, " workers answered")))
        return r->op == OP_ALL && out ? NULL : "every worker stayed in service (or not a .qgate.all)";
    if (HAS("qgate: no group ") || HAS("qgate: access: group "))
        return r->grp < 0 ? NULL : "a route to a group it may use";
    if (HAS("qgate: access (admin only)"))
        return !c->admin ? NULL : "an admin's command";
    if (HAS("qgate: reply too large for capability "))
        return c->cap < 3 && cfg->compress_max < (1 << 20) ? NULL : "a reply within compress_max";
    if (HAS("qgate: unknown command") || HAS("qgate: bad command"))
        return r->op == OP_UNKNOWN || r->op == OP_BIGCMD ? NULL : "a command it knows";
    if (HAS("qgate: reload failed") || HAS("qgate: a reload is already under way"))
        return r->op == OP_RELOADCMD ? NULL : "not a reload";
    if (HAS("qgate: no client "))
        return r->op == OP_DISCONNECT ? NULL : "not a disconnect";
    if (HAS("qgate: .qgate.all does not apply to group "))
        return r->op == OP_ALL && S->session ? NULL : "a .qgate.all on a request pool";
    return "an error the simulation knows no cause for";
#undef HAS
}

/* A message for client c arrived: it must be for c, in order. */
static void client_got(struct fclient *c, int type, K x, int compressed)
{
    char s[256];
    text_of(x, s, sizeof s);
    if (compressed && (c->local || c->cap < 1))
        fail("C%d (%s, capability %d) got a compressed message", c->cid, c->local ? "local" : "remote", c->cap);
    if (type == KIPC_ASYNC) {
        int cid = -1, id = -1, j = 0;
        if (sscanf(s, "t %d %d", &id, &j) == 2 && id >= 0 && id < S->tpubs.n) { /* a worker's timer */
            struct tpub *t = &S->tpubs.v[id];
            if (t->to >= 0 && t->to != c->cid)
                fail("C%d got publish %d of W%d, which C%d got too", c->cid, id, t->wid, t->to);
            t->to = c->cid;
            tpub_check(t, id);
            tr("C%d got publish %d of W%d's timer", c->cid, id, t->wid);
            return;
        }
        if (sscanf(s, "p %d", &cid) != 1 || cid != c->cid)
            fail("C%d got an async message that is not its own: \"%s\"", c->cid, s);
        tr("C%d got push \"%s\"", c->cid, s);
        return;
    }
    if (type == KIPC_SYNC) {
        int cid = -1, seq = -1;
        if (sscanf(s, "c %d %d", &cid, &seq) != 2 || cid != c->cid)
            fail("C%d got a sync request that is not its own: \"%s\"", c->cid, s);
        put_text(&c->out, KIPC_RESPONSE, "r %d %d", cid, seq);
        add_sent(c, KIPC_RESPONSE, OP_RESP, seq);
        tr("C%d answers callback %d", c->cid, seq);
        return;
    }
    if (c->pend_off == c->pend.n)
        fail("C%d got a reply with no request outstanding: \"%s\" (type %d)", c->cid, s, x->t);
    struct sent *r = &c->sent.v[c->pend.v[c->pend_off++]];
    r->answered = 1;
    const char *op = op_names[r->op];
    tr("C%d got the reply to %s %d: %s%s", c->cid, op, r->seq, x->t == KT_ERROR ? "'" : "",
       x->t == KT_ERROR ? x->s : (s[0] ? s : "(value)"));
    if (x->t == KT_ERROR && (!strncmp(x->s, "qgate: timeout (", 16) || !strncmp(x->s, "qgate: worker ", 14)))
        r->abandoned = 1; /* the worker may still run it */

    if (r->op >= OP_PAUSE && r->op <= OP_ENABLE) {
        control_got(c, r, x);
        return;
    }
    if (x->t == KT_ERROR && !strncmp(x->s, "qgate: ", 7)) {
        const char *why = gw_error_unjustified(c, r, x->s);
        if (why)
            fail("C%d got '%s for its %s request %d: nothing in the world justifies it (%s)", c->cid, x->s, op,
                 r->seq, why);
        return;
    }
    char want[64];
    snprintf(want, sizeof want, "R %d %d", c->cid, r->seq);
    size_t wl = strlen(want);
    switch (r->op) {
    case OP_ERR: {
        char e[64];
        snprintf(e, sizeof e, "E %d %d", c->cid, r->seq);
        if (x->t != KT_ERROR || strcmp(x->s, e))
            fail("C%d: request %d wanted '%s, got \"%s\"", c->cid, r->seq, e, x->t == KT_ERROR ? x->s : s);
        return;
    }
    case OP_GUID:
        if (c->cap < 3) {
            if (x->t != KT_ERROR || strcmp(x->s, "type"))
                fail("C%d (capability %d): request %d wanted 'type for a guid", c->cid, c->cap, r->seq);
            return;
        }
        if (x->t != KT_LIST || x->n != 2 || kK(x)[0]->t != -KT_GUID || kK(x)[1]->t != KT_CHAR ||
            (size_t)kK(x)[1]->n != wl || memcmp(kC(kK(x)[1]), want, wl))
            fail("C%d: request %d wanted (guid; \"%s\")", c->cid, r->seq, want);
        return;
    case OP_PING:
    case OP_DISCONNECT:
    case OP_RELOADCMD:
        if (x->t == KT_ERROR || (x->t == -KT_BOOL && x->g == 1))
            return;
        fail("C%d: %s wanted 1b", c->cid, op);
    case OP_STATS:
    case OP_CLIENTS:
    case OP_POOLS:
        if (x->t != KT_TABLE && x->t != KT_ERROR)
            fail("C%d: %s wanted a table, got type %d", c->cid, op, x->t);
        return;
    case OP_UNKNOWN:
    case OP_BIGCMD:
        if (x->t != KT_ERROR)
            fail("C%d: %s wanted an error, got type %d", c->cid, op, x->t);
        return;
    case OP_ALL: /* k >= 1 replies "R cid seq": merged (one string), or their list */
        if (r->arg == 2) {
            if (x->t != KT_LIST || x->n < 1)
                fail("C%d: .qgate.all %d with `list wanted a list of replies, got type %d", c->cid, r->seq, x->t);
            for (int64_t i = 0; i < x->n; i++) {
                K y = kK(x)[i];
                if (y->t != KT_CHAR || (size_t)y->n != wl || memcmp(kC(y), want, wl))
                    fail("C%d: .qgate.all %d: item %lld is not \"%s\"", c->cid, r->seq, (long long)i, want);
            }
        } else {
            if (x->t != KT_CHAR || x->n < 1 || (size_t)x->n % wl)
                fail("C%d: .qgate.all %d wanted \"%s\" razed, got type %d", c->cid, r->seq, want, x->t);
            for (int64_t i = 0; i < x->n; i += (int64_t)wl)
                if (memcmp(kC(x) + i, want, wl))
                    fail("C%d: .qgate.all %d: \"%s\" razed, not at %lld", c->cid, r->seq, want, (long long)i);
        }
        return;
    case OP_BADBODY:
    case OP_BADHDR:
        fail("C%d: a malformed message got an answer other than 'qgate: badmsg", c->cid);
    default:
        if (x->t == KT_ERROR)
            fail("C%d: request %s %d got '%s", c->cid, op, r->seq, x->s);
        if (x->t != KT_CHAR || (size_t)x->n < wl || memcmp(kC(x), want, wl) ||
            ((size_t)x->n > wl && kC(x)[wl] != ' '))
            fail("C%d: request %s %d wanted \"%s...\", got \"%s\"", c->cid, op, r->seq, want, s);
        if (r->op == OP_BIG && (size_t)x->n != wl + 1 + (size_t)r->arg)
            fail("C%d: big reply of %lld bytes, wanted %zu", c->cid, (long long)x->n, wl + 1 + (size_t)r->arg);
        return;
    }
}

static void client_gone(struct fclient *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->st = FC_DONE;
}

/* The gateway closed c: only for a reason a client can be told about. */
static void client_eof(struct fclient *c)
{
    c->gw_closed = 1;
    const char *why = c->why;
    tr("C%d: closed by the gateway (%s)%s", c->cid, why[0] ? why : "?", c->in.len ? " in the middle of a message" : "");
    int ok = 0;
    if (!c->accept || c->longhs)
        ok = !strcmp(why, "bad credentials ('access)") || !strcmp(why, "handshake too long") ||
             !strcmp(why, "handshake timeout");
    if (!strncmp(why, "handshake timeout", 17) || !strncmp(why, "over max_conns", 14) ||
        !strncmp(why, "disconnected by admin", 21) || !strncmp(why, "stalled", 7))
        ok = 1;
    if (c->bad && (!strcmp(why, "closed after a bad message") || !why[0]))
        ok = 1; /* after 'qgate: badmsg the gateway shuts its side first (linger) */
    if ((!strcmp(why, "worker lost in the middle of the reply") ||
         !strcmp(why, "worker lost in the middle of a message to it")) &&
        (S->wdeaths || S->g.query_timeouts))
        ok = 1; /* a worker died, or was dropped for a query timeout, while it sent */
    if (S->session && (S->wdeaths || S->g.query_timeouts) &&
        (!strcmp(why, "its session's worker was lost") || !strcmp(why, "closed after a bad message") || !why[0]))
        ok = 1; /* its session's worker died: told (then the gateway shuts its side), or just closed */
    if (!ok)
        fail("C%d was closed by the gateway without a reason it may have: \"%s\"", c->cid, why);
    client_gone(c);
}

static void client_read(struct fclient *c, size_t want)
{
    if (c->fd < 0 || c->st == FC_DONE)
        return;
    sb_reserve(&c->in, c->in.len + want);
    ssize_t n = read(c->fd, c->in.p + c->in.len, want);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        client_eof(c);
        return;
    }
    if (n < 0)
        return;
    c->in.len += (size_t)n;
    c->got_bytes += (int)n;
    S->moved += (size_t)n;
    if (c->st == FC_HS) {
        if (!c->accept)
            fail("C%d with bad credentials (or a bad handshake) got a byte", c->cid);
        c->cap = c->in.p[0];
        int want_cap = c->cap_req < 3 ? c->cap_req : 3;
        if (c->cap != want_cap)
            fail("C%d asked for capability %d and got %d", c->cid, c->cap_req, c->cap);
        sb_drop(&c->in, 1);
        c->st = FC_READY;
        tr("C%d: capability %d", c->cid, c->cap);
    }
    for (;;) {
        int type, comp;
        K x;
        const char *why = "";
        int r = take_msg(&c->in, &type, &x, &comp, &why);
        if (r == 0)
            break;
        if (r < 0)
            fail("C%d cannot read what the gateway sent: %s", c->cid, why);
        client_got(c, type, x, comp);
        k_free(x);
    }
}

static void client_write(struct fclient *c, size_t want)
{
    if (c->fd < 0 || c->out_off == c->out.len)
        return;
    sb_send(c->fd, &c->out, &c->out_off, &c->out_base, want);
}

static void client_close(struct fclient *c)
{
    tr("C%d closes (%zu bytes unsent)", c->cid, c->out.len - c->out_off);
    c->we_closed = 1;
    client_gone(c);
}

/* ---- fake scrapers of the metrics page ------------------------------------------------------- */

/* A scraper connects, sends its request (or part of it, or junk), reads what comes, or goes at
 * any point: before, while and after its page is made (the writer pool runs when it will). */
static void scrape_event(void)
{
    int i = rnd(4);
    int *fd = &S->scraper[i];
    if (*fd < 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
            fail("socketpair: %s", strerror(errno));
        set_sndbuf(sv[0]);
        set_sndbuf(sv[1]);
        S->in_gw = 1;
        int rc = mhttp_adopt_loop(&S->g, sv[0], chance(50) ? "sim-a" : "sim-b");
        S->in_gw = 0;
        *fd = sv[1];
        tr("scraper %d connects%s", i, rc ? " (refused: 503)" : "");
        return;
    }
    int what = rnd(10);
    if (what < 4) {
        static const char get[] = "GET /metrics HTTP/1.1\r\nHost: sim\r\n\r\n";
        const char *m = chance(10) ? "POST / HTTP/1.1\r\n\r\n" : get;
        size_t n = strlen(m), k = chance(30) ? 1 + (size_t)rnd((int)n) : n;
        ssize_t w = write(*fd, m, k);
        S->res->scrapes += w == (ssize_t)n && m == get;
        tr("scraper %d sends %zd of %zu bytes of its request", i, w, n);
    } else if (what < 8) {
        char buf[8192];
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0)
            S->moved += (size_t)n;
        if (n == 0) {
            tr("scraper %d: the gateway closed it", i);
            close(*fd);
            *fd = -1;
        }
    } else {
        tr("scraper %d goes (resets)", i);
        close(*fd);
        *fd = -1;
    }
}

/* ---- the log's sink ---------------------------------------------------------------------- */

/* In worlds whose log is queued, its reader stops (a stalled journald, a full pipe), goes on,
 * or takes some of what is queued. While it is stopped the queue fills and lines are dropped;
 * the gateway is unaffected (every other invariant still holds). */
static void log_event(void)
{
    if (!S->log_queued)
        return;
    if (chance(25)) {
        S->log_stalled = !S->log_stalled;
        tr("the log's reader %s", S->log_stalled ? "stops" : "resumes");
    }
    if (!S->log_stalled)
        log_pump(chance(30) ? (size_t)-1 : (size_t)(1 + rnd(4096)));
}

static void check_log(void)
{
    if (!S->log_queued)
        return;
    struct log_counts lc;
    log_counts(&lc);
    if (lc.offered != lc.written + lc.dropped + lc.queued)
        fail("the log: %llu lines offered, %llu written, %llu dropped, %llu queued", (unsigned long long)lc.offered,
             (unsigned long long)lc.written, (unsigned long long)lc.dropped, (unsigned long long)lc.queued);
    if (lc.written != log_given || lc.queued_bytes > S->log_cap)
        fail("the log: %llu lines written, the sink got %llu; %llu bytes queued in %zu", (unsigned long long)lc.written,
             (unsigned long long)log_given, (unsigned long long)lc.queued_bytes, S->log_cap);
    if (!lc.queued && !S->log_stalled && log_reported != lc.dropped) /* drained: the dropped line has come */
        fail("the log: %llu lines dropped, %llu said", (unsigned long long)lc.dropped, (unsigned long long)log_reported);
}

/* ---- the access log's sink ----------------------------------------------------------------- */

/* In worlds whose access log has no thread (alog_writer_start_manual, a small queue), its file
 * stalls (takes nothing: the queue fills and records are dropped), its disk fills (so many bytes
 * of room, then ENOSPC: writes cut short) and gets room again. Every write goes through
 * sim_alog_write, which knows where a line was cut and so whether each line of the file is whole. */
static ssize_t sim_alog_write(void *ctx, int fd, const void *p, size_t len)
{
    (void)ctx;
    const char *b = p;
    if (S->alog_cut && len && b[0] != '\n')
        fail("the access log: a line glued to the %s a write cut short", S->alog_cut == 1 ? "fragment" : "line");
    if (S->alog_room != SIZE_MAX && len > S->alog_room) {
        const char *nl = memrchr(b, '\n', S->alog_room);
        if (nl && chance(40)) /* the disk full just before a line's newline: the line is all there */
            S->alog_room = (size_t)(nl - b);
        len = S->alog_room;
    }
    if (!len) {
        errno = ENOSPC;
        if (S->alog_midline && !S->alog_cut)
            S->alog_cut = b[0] == '\n' ? 2 : 1; /* the writer gives up its line here */
        return -1;
    }
    ssize_t r = write(fd, p, len);
    if (r <= 0)
        fail("the access log: write: %s", strerror(errno));
    if (S->alog_room != SIZE_MAX)
        S->alog_room -= (size_t)r;
    if (S->alog_cut == 1)
        S->alog_frags++;
    S->alog_cut = 0;
    S->alog_midline = b[r - 1] != '\n';
    return r;
}

static struct alog_writer *hook_alog_start(void *ctx)
{
    (void)ctx;
    return alog_writer_start_manual(S->alog_cap, sim_alog_write, NULL);
}

/* The file: every line whole but the fragments, none glued to one; lines counted = whole lines. */
static void check_alog_file(const struct alog_counts *c)
{
    FILE *f = fopen(S->alog_path, "r");
    if (!f)
        fail("the access log: %s: %s", S->alog_path, strerror(errno));
    char line[ALOG_LINE_MAX + 2];
    uint64_t complete = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (!n || line[n - 1] != '\n')
            break; /* the fragment or line still open */
        complete++;
        if (strncmp(line, "time=", n - 1 < 5 ? n - 1 : 5) || strstr(line + 1, "time=")) /* a fragment: the start of one */
            fail("the access log: line %llu is not one record: %.200s", (unsigned long long)complete, line);
    }
    fclose(f);
    if (complete != c->lines + (uint64_t)S->alog_frags)
        fail("the access log: %llu lines in the file, %llu counted written, %ld fragments ended",
             (unsigned long long)complete, (unsigned long long)c->lines, S->alog_frags);
}

static void check_alog(void)
{
    if (!S->alog_manual || !S->g.alogw)
        return;
    struct alog_counts c;
    alog_writer_counts(S->g.alogw, &c);
    uint64_t ended = 0;
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        ended += S->g.ended[i];
    if (c.offered != ended || c.offered != c.lines + c.dropped + c.queued)
        fail("the access log: %llu requests ended, %llu records offered, %llu lines, %llu dropped, %llu queued",
             (unsigned long long)ended, (unsigned long long)c.offered, (unsigned long long)c.lines,
             (unsigned long long)c.dropped, (unsigned long long)c.queued);
}

static void alog_event(void)
{
    if (!S->alog_manual || !S->g.alogw)
        return;
    int k = rnd(100);
    if (k < 20) {
        S->alog_stalled = !S->alog_stalled;
        tr("the access log's file %s", S->alog_stalled ? "stalls" : "takes lines again");
    } else if (k < 35) {
        S->alog_room = S->alog_room == SIZE_MAX ? (size_t)rnd(2048) : SIZE_MAX;
        if (S->alog_room == SIZE_MAX)
            tr("the access log's disk has room again");
        else
            tr("the access log's disk fills: %zu bytes of room", S->alog_room);
    }
    if (S->alog_stalled)
        return;
    alog_writer_pump(S->g.alogw);
    struct alog_counts c;
    alog_writer_counts(S->g.alogw, &c);
    if (c.queued > (S->alog_cut == 2)) /* a line cut before its newline waits for it */
        fail("the access log: %llu records still queued after a pump", (unsigned long long)c.queued);
    check_alog_file(&c);
}

/* ---- the gateway's own invariants ---------------------------------------------------------- */

static int conn_live(struct gw *g, const struct conn *x)
{
    for (uint32_t id = 0; id < g->next_id; id++)
        if (g->tab[id] == x)
            return 1;
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            if (&w->c == x)
                return 1;
    }
    return 0;
}

/* A paused group's held list, and its disabled workers: a held client's head is HELD there; a
 * DISABLED worker is disabled, connected, on no list, given nothing, owing nothing; a disabled
 * worker is idle in the rotation only while it owes what it was given before. */
static void check_held_and_disabled(struct group *grp)
{
    int nh = 0;
    for (struct conn *y = connq_first(&grp->held); y; y = connq_next(y), nh++)
        if (y->kind != CONN_CLIENT || y->q != &grp->held || !conn_live(&S->g, y) || !client_head(client_of(y)) ||
            client_head(client_of(y))->state != RS_HELD || client_head(client_of(y))->grp != grp)
            fail("group %s's held list holds %s, which is not held there", grp->cfg.name, y->name);
    if (nh != grp->held.n)
        fail("group %s: held.n %d, its held list holds %d", grp->cfg.name, grp->held.n, nh);
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        int owes = !STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->fq);
        if (w->st == WS_DISABLED && (!w->disabled || w->c.fd < 0 || w->c.q || w->sess || w->cl || owes))
            fail("%s is DISABLED: not disabled, not connected, on a list, given a client or owing work", w->c.name);
        if (w->disabled && w->st == WS_IDLE && !owes)
            fail("%s is disabled, idle on the idle list, and owes nothing", w->c.name);
        S->res->disabled_seen += w->st == WS_DISABLED;
        S->outages += w->disabled && !S->outages; /* out of service: what needs every worker may fail */
    }
}

/* pipeline = N: each worker's connections lie one after another, its lead first, at most N of
 * them in use; a request went to a busy worker only behind client requests learned fast (with
 * pipeline_wait): of the runs of a worker's connections, by when they began, every one but the
 * last is a client's request with a query that can be learned (broadcasts and fan-out parts,
 * owed by the lead, may start whenever it is idle). */
static void check_connections(struct group *grp)
{
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        if (!worker_is_lead(w))
            continue;
        int n = 0, busy = 0, live = 0;
        const struct worker *last = NULL;
        for (struct worker *x = w; x; x = worker_sibling(x)) {
            n++;
            live += !x->removed;
            if (x->slot && (x->sess || !STAILQ_EMPTY(&x->bq) || !STAILQ_EMPTY(&x->bsent) || !STAILQ_EMPTY(&x->fq) ||
                            x->fp))
                fail("%s, not its worker's lead, has a session, broadcasts or fan-out parts", x->c.name);
            if (x->st != WS_BUSY || (worker_is_lead(x) && x->run != RUN_REQUEST && x->run != RUN_ASYNC))
                continue;
            busy++;
            if (!last || x->t_start_us > last->t_start_us)
                last = x;
        }
        int conns = group_pipelines(grp) ? grp->cfg.pipeline : 1;
        if (!w->removed && live > conns)
            fail("%s: %d connections to one worker, pipeline %d", w->c.name, live, conns);
        if (busy > 1)
            S->res->held += busy - 1, S->res->held_learned += S->pipeline_wait ? busy - 1 : 0;
        for (struct worker *x = w; busy > 1 && x; x = worker_sibling(x)) {
            if (x == last || x->st != WS_BUSY || (worker_is_lead(x) && x->run != RUN_REQUEST && x->run != RUN_ASYNC))
                continue;
            if (x->run != RUN_REQUEST || (S->pipeline_wait && !x->run_key))
                fail("%s runs %s (query key %llu) while a request went to another connection of its worker after it",
                     x->c.name, x->run == RUN_REQUEST ? "a request" : "an async batch", (unsigned long long)x->run_key);
        }
    }
}

/* What a client's output may hold: client_high_water, the splice pipe, and what each worker
 * that may feed it adds before it stops (a read, one whole message: its running request's, its
 * session's, or the workers of its group, whose broadcasts' and .qgate.all's messages come to
 * it), and one reply made here (the longest message a fake worker sends bounds each, merges of
 * them too: one per worker of the group). */
static size_t output_bound(const struct conn *x)
{
    const struct gw *g = &S->g;
    const struct client *c = (const struct client *)x;
    size_t feeders = 2;
    const struct worker *w;
    if (c->grp)
        TAILQ_FOREACH(w, &c->grp->workers, glink)
            feeders += worker_is_lead(w);
    size_t read = (size_t)QG_MIN(QG_MAX(g->cfg.chunk_size, 65536), g->cfg.read_budget);
    return (size_t)g->cfg.client_high_water + (x->has_pipe ? x->pipe_cap : 0) + feeders * (read + S->max_msg + 256);
}

/* Every connection on exactly the lists its state says; counts that match. */
static void check_gateway(void)
{
    struct gw *g = &S->g;
    S->res->checks++;
    check_log();
    check_alog();
    int nclients = 0, backlog = 0, dirty = 0, nmetrics = 0;
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x)
            continue;
        if (x->id != id)
            fail("table slot %u holds connection %u", id, x->id);
        if (x->closing)
            fail("closed connection %s is still in the table", x->name);
        if (x->dirty && x->fd < 0)
            fail("%s is on the flush list without a socket", x->name);
        if (x->kind == CONN_METRICS) {
            nmetrics++;
            if (x->q != &g->metrics_conns || x->fd < 0)
                fail("%s: a metrics connection not on the metrics list, or without its socket", x->name);
        }
        if (x->kind != CONN_CLIENT)
            continue;
        nclients++;
        struct client *c = (struct client *)x;
        struct req *h = client_head(c);
        backlog += x->in_backlog;
        if (c->w && (c->w->cl != c || c->w->st != WS_BUSY))
            fail("%s points at worker %s, which is not running its request", x->name, c->w->c.name);
        if (c->fo && (!h || h->state != RS_RUNNING || !h->fan))
            fail("%s has a fan-out, and its head is not a running .qgate.all", x->name);
        if (h && h->fan && h->type == KIPC_SYNC && h->state == RS_RUNNING && !c->fo)
            fail("%s: its head .qgate.all runs with no fan-out", x->name);
        if (c->sess && (c->sess->sess != c || (c->w && c->w != c->sess)))
            fail("%s has session worker %s, which is not its, or runs its request on another", x->name, c->sess->addr);
        int queued = h && x->q == &h->grp->queue; /* the head's group: its client's, or routed to */
        int held_p = h && x->q == &h->grp->held;  /* ... or its held list, while that group is paused */
        if (c->sess && queued)
            fail("%s has a session worker, and is on its group's queue", x->name);
        if (x->q && !queued && !held_p)
            fail("%s is on a list that is not its group's queue nor its held list", x->name);
        if (queued != (h && h->state == RS_QUEUED))
            fail("%s: queued %d, head request %s", x->name, queued, h ? "not queued" : "absent");
        if (held_p != (h && h->state == RS_HELD))
            fail("%s: on the held list %d, head request %s", x->name, held_p, h ? "not held" : "absent");
        if (held_p && (!h->grp->paused || !((h->fan && h->type == KIPC_SYNC) || (c->sess && h->grp == c->grp))))
            fail("%s is held, and its group is not paused or its head is neither a session's nor a .qgate.all",
                 x->name);
        S->res->paused_held += h && (held_p || queued) && h->grp->paused;
        if ((c->st == CS_GONE) != (c->eof && c->st != CS_AUTH))
            fail("%s: state %s with eof %d", x->name, client_state_name(c->st), c->eof);
        if (conn_pending(x) > output_bound(x))
            fail("%s holds %zu bytes of output, over its bound %zu (client_high_water %lld)", x->name, conn_pending(x),
                 output_bound(x), (long long)g->cfg.client_high_water);
        if (c->eof && (x->fd >= 0 || x->has_pipe || conn_timer_armed(x, CLIENT_TM_STALL)))
            fail("%s has gone but keeps its socket, pipe or stall timer", x->name);
        if (c->st == CS_GONE && !h && !x->in_backlog && c->c.in.len == c->c.in.off)
            fail("%s has gone with nothing left to run, and is still open", x->name);
    }
    if (g->bad_transitions)
        fail("%llu worker state transitions outside worker.c's table (see the log)", (unsigned long long)g->bad_transitions);
    if (nclients != g->nclients)
        fail("nclients is %d, the table holds %d clients", g->nclients, nclients);
    if (nmetrics != g->nmconns || nmetrics != g->metrics_conns.n)
        fail("nmconns %d, the metrics list holds %d, the table %d", g->nmconns, g->metrics_conns.n, nmetrics);
    struct conn *x;
    TAILQ_FOREACH(x, &g->dirty, dirty_link) {
        dirty++;
        if (!conn_live(g, x) || !x->dirty)
            fail("a freed or unmarked connection is on the flush list");
    }
    if (dirty != g->ndirty)
        fail("ndirty %d, the flush list holds %d", g->ndirty, dirty);
    int nb = 0;
    TAILQ_FOREACH(x, &g->backlog, backlog_link) {
        nb++;
        if (!conn_live(g, x) || !x->in_backlog)
            fail("a freed or unmarked connection is on the backlog list");
    }
    if (nb != backlog)
        fail("%d clients marked in the backlog, the list holds %d", backlog, nb);
    for (int i = 0; i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        int n = 0, up = 0, idle = 0, nidle = 0;
        for (struct conn *y = connq_first(&grp->queue); y; y = connq_next(y)) {
            n++;
            struct client *c = client_of(y);
            struct req *h = client_head(c);
            if (y->kind != CONN_CLIENT || y->q != &grp->queue || c->grp != grp || !conn_live(g, y) || !h ||
                h->state != RS_QUEUED)
                fail("group %s's queue holds %s, which is not queued there", grp->cfg.name, y->name);
        }
        if (n != grp->queue.n)
            fail("group %s: queue.n %d, its queue holds %d", grp->cfg.name, grp->queue.n, n);
        check_held_and_disabled(grp);
        for (int k = 0; k < 2; k++) { /* leads IDLE on the idle list, their other connections on spare */
            struct connq *q = k ? &grp->spare : &grp->idle;
            int nq = 0;
            for (struct conn *y = connq_first(q); y; y = connq_next(y), nq++) {
                struct worker *w = worker_of(y);
                if (y->kind != CONN_WORKER || w->st != WS_IDLE || y->q != q || worker_is_lead(w) == k)
                    fail("%s is on the %s list in state %s", y->name, k ? "spare" : "idle", worker_state_name(w->st));
            }
            if (nq != q->n)
                fail("group %s: %s.n %d, its list holds %d", grp->cfg.name, k ? "spare" : "idle", q->n, nq);
            idle += nq;
        }
        check_connections(grp);
        struct worker *w;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            up += worker_is_lead(w) && worker_is_up(w);
            if (w->fp && (w->st != WS_BUSY || w->run != RUN_FANOUT))
                fail("%s (%s) holds a fan-out part outside a fan-out run", w->c.name, worker_state_name(w->st));
            if (!STAILQ_EMPTY(&w->fq) && w->st != WS_IDLE && w->st != WS_BUSY)
                fail("%s is %s and owes fan-out parts", w->c.name, worker_state_name(w->st));
            if (w->st == WS_PINNED && (!w->sess || w->sess->sess != w))
                fail("%s is pinned, but not to a client that has it", w->c.name);
            if (w->sess && (w->sess->sess != w || !conn_live(g, &w->sess->c) || (w->st != WS_BUSY && w->st != WS_PINNED)))
                fail("%s (%s) is given to %s, which does not have it, or is freed", w->c.name, worker_state_name(w->st),
                     w->sess->c.name);
            if (w->sess && !S->session)
                fail("%s is in a session, in a group with pool = request", w->c.name);
            nidle += w->st == WS_IDLE;
            if (w->cl && !conn_live(g, &w->cl->c))
                fail("%s runs a request of a freed client", w->c.name);
            if (w->cl && (w->st != WS_BUSY || w->cl->w != w))
                fail("%s (%s) runs a request of %s, which does not point at it", w->c.name, worker_state_name(w->st),
                     w->cl->c.name);
            if (w->c.paused && (w->st != WS_BUSY && w->st != WS_PINNED))
                fail("%s is %s, and paused for a client's output", w->c.name, worker_state_name(w->st));
            if (w->c.paused && !w->c.q && w->c.fd >= 0)
                fail("%s is paused for a client's output, and waits on none", w->c.name);
            if (w->st != WS_IDLE && w->st != WS_BUSY && (!STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->bsent)))
                fail("%s is %s with broadcasts queued on it", w->c.name, worker_state_name(w->st));
            if ((w->st == WS_DOWN || w->st == WS_RESOLVING) && w->c.fd >= 0)
                fail("%s is %s with a socket", w->c.name, worker_state_name(w->st));
        }
        if (idle != nidle)
            fail("group %s: %d idle workers, %d on the idle list", grp->cfg.name, nidle, idle);
        if (up != grp->nup)
            fail("group %s: nup %d, %d workers up", grp->cfg.name, grp->nup, up);
    }
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link) {
        int inflight = 0, conns = 0;
        for (uint32_t id = 0; id < g->next_id; id++) {
            struct conn *y = g->tab[id];
            if (y && y->kind == CONN_CLIENT && ((struct client *)y)->us == u) {
                conns++;
                inflight += ((struct client *)y)->w != NULL;
            }
        }
        if (u->inflight != inflight || u->conns != conns)
            fail("user %s: inflight %d conns %d, counted %d and %d", u->name, u->inflight, u->conns, inflight, conns);
        const struct auth_user *e = g->auth ? auth_find(auth_db_of(g->auth), u->name, strlen(u->name)) : NULL;
        if (e && conns && (u->admin != e->admin || u->max_inflight != e->max_inflight || u->max_conns != e->max_conns))
            fail("user %s: admin %d max_inflight %d max_conns %d, the users file in force says %d, %d, %d", u->name,
                 u->admin, u->max_inflight, u->max_conns, e->admin, e->max_inflight, e->max_conns);
    }
}

/* What everyone holds, for the report of a failure. */
static void dump_world(void)
{
    static const char *const rs[] = {"WAITING", "CHECKING", "QUEUED", "RUNNING", "LOCAL", "READY", "HELD"};
    struct gw *g = &S->g;
    if (!g->tab)
        return;
    tr("--- the world at the failure:");
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT)
            continue;
        struct client *c = (struct client *)x;
        struct fclient *f = fclient_of(x->id, x->gen);
        struct req *h = client_head(c);
        tr("gw %s: %s, head %lld %s, out %zu held %zu piped %zu, paused %d calls %d, worker %s | C%d: %s, %zu unsent, "
           "%d unread, %d pending", x->name, client_state_name(c->st), h ? (long long)h->seq : -1LL,
           h ? rs[h->state] : "-", x->out.bytes, x->held.bytes, x->piped, c->paused, c->ncalls,
           c->w ? c->w->addr : "-", f ? f->cid : -1, f ? (f->st == FC_DONE ? "closed" : f->stalled ? "stalled" : "reading") : "gone",
           f ? f->out.len - f->out_off : 0, f ? unread(f->fd) : 0, f ? f->pend.n - f->pend_off : 0);
    }
    struct conn *d;
    TAILQ_FOREACH(d, &g->dirty, dirty_link)
        tr("on the flush list: %s (fd %d, out %zu, want_out %d, events %#x)", d->name, d->fd, d->out.bytes, d->want_out,
           d->events);
    tr("pools: %zu reader jobs, %zu writer jobs queued; reloading %d", pool_queued(g->readers),
       pool_queued(g->writers), g->reloading);
    for (int k = 0; k < S->nw; k++)
        if (!gw_worker_of(&S->w[k]))
            tr("W%d: %s the configuration, not in the gateway; %d connections, refuse %d", k,
               S->w[k].in_config ? "in" : "out of", fw_live(&S->w[k]), S->w[k].refuse);
    for (int i = 0; i < MAXC; i++) {
        struct fclient *f = &S->cl[i];
        if ((f->st == FC_HS || f->st == FC_READY) && !conn_lookup_loop(g, f->gid, f->ggen))
            tr("C%d (%s, %s): the gateway has no connection for it; %zu unsent, %d unread, %d pending, fd %d",
               f->cid, f->st == FC_HS ? "handshake" : "ready", f->stalled ? "stalled" : "reading",
               f->out.len - f->out_off, unread(f->fd), f->pend.n - f->pend_off, f->fd);
    }
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink) {
            struct fworker *fw = worker_of_addr(w->addr);
            const struct fwconn *k = NULL;
            for (int j = 0; fw && j < FW_CONNS; j++)
                if (fw->k[j].gw_fd >= 0 && fw->k[j].gw_fd == w->c.fd)
                    k = &fw->k[j];
            tr("gw %s: %s, for %s, swallow %d, bq %d bsent %d, paused %d | W%d: fd %d, %zu in, %zu to send, cb %d, "
               "%d unread, %d deferred", w->c.name, worker_state_name(w->st), w->cl ? w->cl->c.name : "-", w->swallow,
               !STAILQ_EMPTY(&w->bq), !STAILQ_EMPTY(&w->bsent), w->c.paused, fw ? fw->wid : -1, k ? k->fd : -1,
               k ? k->in.len : 0, k ? k->out.len - k->out_off : 0, fw ? fw->waiting_cb : 0, k ? unread(k->fd) : 0,
               fw ? fw->deferred.n : 0);
        }
    }
}

/* ---- configuration ------------------------------------------------------------------------ */

static void write_config(void)
{
    FILE *f = fopen(S->conf_path, "w");
    if (!f)
        fail("cannot write %s", S->conf_path);
    const struct config *c = &S->g.cfg;
    fprintf(f, "[gateway]\nport = 0\nbind = 127.0.0.1\nunix_socket = 0\nloglevel = %s\n", log_level_name(c->loglevel));
    fprintf(f, "max_queue = %d\nqueue_timeout = %lld\nquery_timeout = %lld\nhandshake_timeout = %lld\n", c->max_queue,
            (long long)c->queue_timeout, (long long)c->query_timeout, (long long)c->handshake_timeout);
    fprintf(f, "frames_budget = %d\nread_budget = %lld\nwrite_budget = %lld\nchunk_size = %lld\n", c->frames_budget,
            (long long)c->read_budget, (long long)c->write_budget, (long long)c->chunk_size);
    fprintf(f, "client_high_water = %lld\nclient_low_water = %lld\nclient_max_pending = %lld\n",
            (long long)c->client_high_water, (long long)c->client_low_water, (long long)c->client_max_pending);
    fprintf(f, "reconnect_min = %lld\nreconnect_max = %lld\nworker_connect_timeout = %lld\n",
            (long long)c->reconnect_min, (long long)c->reconnect_max, (long long)c->worker_connect_timeout);
    fprintf(f, "compress = %d\ncompress_max = %lld\nsplice = %d\nmax_message = %lld\n", c->compress,
            (long long)c->compress_max, c->splice, (long long)c->max_message);
    fprintf(f, "local_workers = %s\n", c->local_workers == CFG_LOCAL_UNIX ? "unix" : "tcp");
    if (S->users_file)
        fprintf(f, "users_file = %s\n", S->users_path);
    if (S->alog)
        fprintf(f, "access_log = %s\n", S->alog_path);
    for (int gi = 0; gi < S->ngroups; gi++) {
        fprintf(f, "[group %s]\nasync = %s\n", gi == S->bc_group ? "bc" : "main", gi == S->bc_group ? "broadcast" : "one");
        if (S->session && gi != S->bc_group)
            fprintf(f, "pool = session\n");
        else
            fprintf(f, "pipeline = %d\npipeline_wait = %d\n", S->pipeline, S->pipeline_wait);
        if (gi == S->bc_group)
            fprintf(f, "users = bob,bea\n");
        fprintf(f, "workers = ");
        int first = 1;
        for (int k = 0; k < S->nw; k++)
            if (S->w[k].in_config && S->w[k].group == gi) {
                fprintf(f, "%s127.0.0.1:%d", first ? "" : ",", WPORT0 + k);
                first = 0;
            }
        fprintf(f, "\n");
    }
    fclose(f);
}

static void random_config(struct config *c)
{
    config_defaults(c);
    c->port = 0;
    strcpy(c->bind, "127.0.0.1");
    c->unix_socket = 0;
    c->loglevel = chance(50) ? LOG_DEBUG : LOG_INFO;
    if (getenv("SIM_DEBUG")) /* the gateway's debug lines in the trace, whatever the seed says */
        c->loglevel = LOG_DEBUG;
    c->max_queue = chance(30) ? 1 + rnd(4) : 1000;
    c->queue_timeout = chance(30) ? 50 + rnd(500) : 0;
    c->query_timeout = chance(30) ? 200 + rnd(3000) : 0;
    c->handshake_timeout = 200 + rnd(5000);
    c->frames_budget = chance(50) ? 1 + rnd(4) : 64;
    c->read_budget = 4096 << rnd(5);
    c->write_budget = 4096 << rnd(5);
    c->chunk_size = 4096 << rnd(3);
    c->client_high_water = 65536 << rnd(2);
    c->client_low_water = c->client_high_water / (2 + rnd(4));
    c->client_max_pending = 65536 << rnd(3);
    c->reconnect_min = 10 + rnd(100);
    c->reconnect_max = c->reconnect_min * (1 + rnd(20));
    c->worker_connect_timeout = 100 + rnd(3000);
    c->compress = chance(80);
    c->compress_max = chance(20) ? 4096 : 64 << 20;
    c->splice = chance(50);
    c->local_workers = chance(50) ? CFG_LOCAL_UNIX : CFG_LOCAL_TCP;
    c->max_message = chance(10) ? ((int64_t)1 << 33) : 2147483647;
}

static void write_users(void)
{
    FILE *f = fopen(S->users_path, "w");
    if (!f)
        fail("cannot write %s", S->users_path);
    fprintf(f, "alice:wonder\tadmin=1\nbob:builder\ncarol:s3cret\tmax_inflight=%d\ndave:d\tmax_conns=2\nbea:b\n",
            S->carol_max);
    fclose(f);
}

static void reload(void)
{
    S->outages++; /* a worker added is not up until it has connected; one removed goes */
    /* add a worker, or remove one (a group keeps at least one) */
    int k = rnd(MAXW);
    if (k >= S->nw) {
        if (S->nw == MAXW)
            return;
        k = S->nw++;
        struct fworker *w = &S->w[k];
        fw_init(w, k, rnd(S->ngroups));
        tr("reload: add W%d to group %d", k, w->group);
    } else {
        struct fworker *w = &S->w[k];
        int others = 0;
        for (int i = 0; i < S->nw; i++)
            others += i != k && S->w[i].in_config && S->w[i].group == w->group;
        if (!others && w->in_config)
            return;
        w->in_config = !w->in_config;
        tr("reload: %s W%d", w->in_config ? "put back" : "remove", k);
        if (!w->in_config)
            S->wdeaths++;
    }
    if (S->users_file && chance(30)) { /* a user's limits change: logins checked meanwhile get the new */
        S->carol_max = S->carol_max == 1 ? 2 : 1;
        write_users();
        tr("reload: carol's max_inflight %d", S->carol_max);
    }
    if (chance(25)) { /* each worker's connections opened or closed to match */
        S->pipeline = chance(50) ? 1 : 2 + rnd(3);
        tr("reload: pipeline %d", S->pipeline);
    }
    write_config();
    S->in_gw = 1;
    if (reload_start_loop(&S->g, NULL, 0))
        fail("reload refused");
    S->in_gw = 0;
}

/* ---- the operator, as .qgate.pause[] and .qgate.disable[] do it -------------------------- */

/* Pause group gi, or resume it if it is paused. */
static void operator_pause(int gi)
{
    struct group *grp = &S->g.groups[gi];
    tr("operator: %s group %s (%d queued, %d held)", grp->paused ? "resume" : "pause", grp->cfg.name, grp->queue.n,
       grp->held.n);
    S->in_gw = 1;
    control_pause_loop(&S->g, grp, !grp->paused, "the simulation");
    S->in_gw = 0;
}

/* Disable w, or enable it if it is disabled. */
static void operator_disable(struct fworker *w)
{
    struct worker *gw = gw_worker_of(w);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", WPORT0 + w->wid);
    int on = !(gw && gw->disabled);
    tr("operator: %s W%d (%s)", on ? "disable" : "enable", w->wid, gw ? worker_state_name(gw->st) : "not in the gateway");
    S->in_gw = 1;
    control_disable_loop(&S->g, addr, on, "the simulation");
    S->in_gw = 0;
}

/* Every group resumed, every worker enabled: what waits for them can finish. 1 if any was not. */
static int operator_release_all(void)
{
    int n = 0;
    for (int i = 0; i < S->g.ngroups; i++)
        if (S->g.groups[i].paused) {
            operator_pause(i);
            n++;
        }
    for (int k = 0; k < S->nw; k++) {
        struct worker *gw = gw_worker_of(&S->w[k]);
        if (gw && gw->disabled) {
            operator_disable(&S->w[k]);
            n++;
        }
    }
    return n;
}

/* ---- the driver --------------------------------------------------------------------------- */

static void gw_step(void)
{
    S->in_gw = 1;
    loop_step_loop(&S->g, 0);
    S->in_gw = 0;
    check_gateway();
}

static int run_pool(struct pool *p, int all)
{
    int ran = 0;
    size_t n;
    while ((n = pool_queued(p)) > 0) {
        pool_run_one(p, (size_t)rnd((int)n));
        ran++;
        S->moved++;
        if (!all)
            break;
    }
    return ran;
}

static void advance_clock(int64_t ms)
{
    S->now_us += ms * 1000;
    tr("clock +%lld ms", (long long)ms);
}

static void clock_event(void)
{
    int64_t next = loop_timers_next(&S->g.loop.timers);
    if (next >= 0 && chance(40)) {
        int64_t d = next - S->now_us / 1000;
        advance_clock(d > 0 ? d : 0);
    } else {
        advance_clock(1 + rnd(chance(80) ? 20 : 400));
    }
}

static void one_event(void)
{
    int k = rnd(100);
    struct fclient *c;
    struct fworker *w = S->nw ? &S->w[rnd(S->nw)] : NULL;
    if (k < 4) {
        if (enabled(SIM_EV_CONNECT) && nopen_clients() < MAXC)
            client_connect();
    } else if (k < 14) {
        if (enabled(SIM_EV_SEND) && (c = pick_client(1)))
            client_send(c, enabled(SIM_EV_PIPELINE) && chance(15) ? 2 + rnd(30) : 1);
    } else if (k < 26) {
        if (enabled(SIM_EV_WRITE) && (c = pick_client(0)))
            client_write(c, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(70000)));
    } else if (k < 38) {
        if (enabled(SIM_EV_READ) && (c = pick_client(0)) && !c->stalled)
            client_read(c, chance(20) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 39) {
        if (enabled(SIM_EV_CLOSE) && (c = pick_client(0)) && chance(50))
            client_close(c);
    } else if (k < 40) {
        if (enabled(SIM_EV_STALL) && (c = pick_client(1))) {
            c->stalled = !c->stalled;
            tr("C%d %s reading", c->cid, c->stalled ? "stops" : "resumes");
        }
    } else if (k < 48) {
        if (enabled(SIM_EV_WREAD) && w)
            worker_read(w, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 56) {
        if (enabled(SIM_EV_WPROCESS) && w)
            worker_process(w, 1 + rnd(4));
    } else if (k < 64) {
        if (enabled(SIM_EV_WWRITE) && w)
            worker_write(w, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 65) {
        if (enabled(SIM_EV_WDIE) && w && chance(30)) {
            if (fw_live(w))
                worker_die(w);
            else if (w->refuse) {
                w->refuse = 0;
                tr("W%d is back up", w->wid);
            }
        }
    } else if (k < 66) {
        if (enabled(SIM_EV_WPUSH) && w)
            worker_timer_push(w);
    } else if (k < 74) {
        if (enabled(SIM_EV_POOL))
            run_pool(chance(50) ? S->g.readers : S->g.writers, chance(20));
    } else if (k < 79) {
        if (enabled(SIM_EV_CLOCK))
            clock_event();
    } else if (k < 80) {
        if (enabled(SIM_EV_RELOAD) && chance(20))
            reload();
    } else if (k < 81) {
        if (enabled(SIM_EV_PAUSE) && chance(40))
            operator_pause(rnd(S->ngroups));
    } else if (k < 82) {
        if (enabled(SIM_EV_DISABLE) && w && chance(40))
            operator_disable(w);

    } else if (k < 84) {
        if (enabled(SIM_EV_SCRAPE))
            scrape_event();
    } else if (k < 86) {
        if (enabled(SIM_EV_LOGSINK))
            log_event();
    } else if (k < 88) {
        if (enabled(SIM_EV_ALOGSINK))
            alog_event();
    } else {
        if (enabled(SIM_EV_STEP))
            gw_step();
    }
}

/* Work the gateway itself still holds: requests of clients (gone ones too), workers busy,
 * bytes to send. */
static char busy_why[256];

static const char *gateway_busy(void)
{
    struct gw *g = &S->g;
    if (worker_busy_count_loop(g))
        return "a worker is busy";
    if (!TAILQ_EMPTY(&g->dirty))
        return "a connection has output to flush";
    if (!TAILQ_EMPTY(&g->backlog))
        return "a client has messages in its backlog";
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT)
            continue;
        struct client *c = (struct client *)x;
        struct fclient *f = fclient_of(x->id, x->gen);
        if (f && f->stalled && f->st != FC_DONE)
            continue; /* its replies wait for it to read (once it has closed, nothing waits for it) */
        if (client_head(c) || (c->st == CS_GONE)) {
            snprintf(busy_why, sizeof busy_why, "%.200s holds requests", x->name);
            return busy_why;
        }
    }
    return NULL;
}

/* Something left to do: a request unanswered, bytes unsent, a job unrun, a worker to bring
 * back. NULL when the world is quiet, else what is left. */
static const char *busy(int include_stalled)
{
    const char *why = gateway_busy();
    if (why)
        return why;
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->st != FC_HS && c->st != FC_READY)
            continue;
        if (c->stalled && !include_stalled)
            continue;
        if (c->out_off < c->out.len || c->pend_off < c->pend.n || c->st == FC_HS || unread(c->fd)) {
            snprintf(busy_why, sizeof busy_why, "C%d has bytes to send or read, or replies to wait for", c->cid);
            return busy_why;
        }
    }
    for (int k = 0; k < S->nw; k++) {
        struct fworker *w = &S->w[k];
        int work = w->deferred.n > 0;
        for (int i = 0; i < FW_CONNS; i++) {
            const struct fwconn *x = &w->k[i];
            work |= x->fd >= 0 && (x->in.len || x->out_off < x->out.len || x->st == FW_HS || unread(x->fd));
        }
        if (work || (!fw_live(w) && w->in_config && !w->refuse)) {
            snprintf(busy_why, sizeof busy_why, "W%d has work, or is to be connected", k);
            return busy_why;
        }
    }
    return pool_queued(S->g.readers) || pool_queued(S->g.writers) ? "pool jobs are queued" : NULL;
}

/* A worker blocked in a callback to a client that stopped reading: as with q itself, it
 * waits for that client (or query_timeout), so others may wait too. */
static int callback_to_stalled(void)
{
    for (int k = 0; k < S->nw; k++) {
        struct fworker *w = &S->w[k];
        if (w->waiting_cb && w->k[w->cb_conn].fd >= 0 && w->cb_cid < S->by_cid.n) {
            struct fclient *c = S->by_cid.v[w->cb_cid];
            if (c && c->stalled)
                return 1;
        }
    }
    return 0;
}

/* pool = session: clients wait for a worker while every worker is given to a session whose
 * client has nothing more to ask. Such a user goes home (closes), as users do: 1 if one did. */
static int end_idle_session(void)
{
    struct gw *g = &S->g;
    int waiting = 0;
    for (int i = 0; i < g->ngroups; i++)
        waiting |= connq_first(&g->groups[i].queue) && !connq_first(&g->groups[i].idle);
    for (int i = 0; waiting && i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        struct conn *x = c->st == FC_READY ? conn_lookup_loop(g, c->gid, c->ggen) : NULL;
        struct client *gc = x && x->kind == CONN_CLIENT ? (struct client *)x : NULL;
        if (!gc || !gc->sess || gc->sess->st != WS_PINNED || client_head(gc) || conn_pending(x))
            continue;
        if (c->stalled) { /* its replies wait in its socket: it reads them first */
            tr("C%d, idle in its session, reads again", c->cid);
            c->stalled = 0;
            return 1;
        }
        if (c->pend_off == c->pend.n && c->out_off == c->out.len) {
            tr("C%d, idle in its session, goes home", c->cid);
            client_close(c);
            return 1;
        }
    }
    return 0;
}

/* Everyone does everything they can until nothing is left; time passes when only timers can
 * make progress. A client still waiting after ten minutes of simulated time waits forever.
 * include_stalled: clients that stopped reading read again. */
static void quiesce(int include_stalled, const char *phase)
{
    S->quiescing = 1;
    int64_t t_still = S->now_us / 1000; /* nothing has moved since */
    for (int round = 0; round < 2000000; round++) {
        uint64_t moved = S->moved;
        for (int i = 0; i < MAXC; i++) {
            struct fclient *c = &S->cl[i];
            if (c->st == FC_HS || c->st == FC_READY) {
                client_write(c, 1 << 20);
                if (!c->stalled || include_stalled) {
                    c->stalled = 0;
                    client_read(c, 1 << 20);
                }
            }
        }
        for (int k = 0; k < S->nw; k++) {
            struct fworker *w = &S->w[k];
            w->refuse = 0;
            w->busy_until = 0;
            for (int i = 0; i < FW_CONNS; i++)
                w->k[i].hold_until = 0;
            fw_release_deferred(w, 1);
            worker_read(w, 1 << 20);
            worker_process(w, 1 << 20);
            worker_write(w, 1 << 20);
        }
        for (int i = 0; i < 4; i++) { /* scrapers take what comes */
            char buf[65536];
            ssize_t n;
            while (S->scraper[i] >= 0 && (n = read(S->scraper[i], buf, sizeof buf)) > 0)
                S->moved += (size_t)n;
        }
        run_pool(S->g.readers, 1);
        run_pool(S->g.writers, 1);
        gw_step();
        if (!busy(include_stalled))
            return;
        if (S->moved != moved) {
            t_still = S->now_us / 1000;
            continue;
        }
        /* the gateway has work now, or events ready: no time passes (a peek at a level-triggered
         * epoll set takes nothing from it) */
        struct epoll_event ev;
        if ((loop_wait_ms_loop(&S->g) == 0 || epoll_wait(S->g.loop.epfd, &ev, 1, 0) > 0) && round % 64)
            continue;
        if (S->session && end_idle_session())
            continue;
        if (operator_release_all()) /* a pause or a disable (an admin's, perhaps) holds what is left */
            continue;
        /* nothing moved: only time can help (timers, back-offs, reconnects) */
        int64_t next = loop_timers_next(&S->g.loop.timers);
        int64_t d = next >= 0 ? next - S->now_us / 1000 : 1000;
        advance_clock(QG_MAX(1, QG_MIN(d, 60000)));
        if (S->now_us / 1000 - t_still > 600000)
            break; /* ten simulated minutes and nothing moved: it waits forever */
    }
    if (!include_stalled && callback_to_stalled())
        return;
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if ((c->st == FC_READY || c->st == FC_HS) && (!c->stalled || include_stalled) &&
            (c->pend_off < c->pend.n || c->st == FC_HS)) {
            const char *op = c->pend_off < c->pend.n ? op_names[c->sent.v[c->pend.v[c->pend_off]].op] : "handshake";
            fail("%s: C%d waits forever for its %s", phase, c->cid, op);
        }
    }
    fail("%s: the world never went quiet: %s", phase, busy(include_stalled));
}

/* Everything client c sent before it closed ran (order is checked as it runs). final: at
 * the very end, when broadcasts had every chance to arrive. Returns 0 if some message may
 * still be on its way (not final). */
static int check_client_lost(struct fclient *c, int final)
{
    if (c->why[0] && strcmp(c->why, "closed after a bad message") && strcmp(c->why, "client closed the connection") &&
        strcmp(c->why, "peer closed"))
        return 1; /* closed by the gateway (with a reason it may have: checked): the rest was discarded */
    size_t written = c->out_base + c->out_off;
    for (int i = 0; i < c->sent.n; i++) {
        struct sent *s = &c->sent.v[i];
        if (s->type != KIPC_ASYNC || s->end > written || s->seen || s->lost || (c->bad && s->seq > c->bad_seq) ||
            (c->unread_from >= 0 && s->seq >= c->unread_from))
            continue;
        if (!final && c->group == S->bc_group)
            return 0; /* a broadcast is let go of when sent, before it runs */
        fail("C%d's async message %d (%s) was received by the gateway and never ran", c->cid, s->seq,
             op_names[s->op]);
    }
    return 1;
}

static void check_nothing_lost(void)
{
    for (int cid = 0; cid < S->by_cid.n; cid++)
        if (S->by_cid.v[cid])
            check_client_lost(S->by_cid.v[cid], 1);
}

static size_t gw_heap(void)
{
    return __sanitizer_get_current_allocated_bytes ? __sanitizer_get_current_allocated_bytes() - sim_bytes : 0;
}

/* Heap the gateway may keep for good: tables that grew, workers, users. */
static size_t gw_kept(void)
{
    struct gw *g = &S->g;
    size_t n = (size_t)g->tab_cap * (sizeof(struct conn *) + 2 * sizeof(uint32_t));
    n += (size_t)g->loop.timers.cap * sizeof(struct timer *);
    n += g->names_bytes; /* worker names, kept for the access log's records */
    n += access_bytes_loop(g); /* the access log's record buffers */
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            n += sizeof *w;
    }
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link)
        n += sizeof *u;
    return n;
}

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int workers_connected(void)
{
    int n = 0;
    for (int k = 0; k < S->nw; k++)
        n += fw_live(&S->w[k]);
    return n;
}

/* The gateway's worker connections holding a descriptor whose other end no fake worker holds
 * (one being connected to a Unix socket that closed it at once: one fd, not two). */
static int gw_unpaired(void)
{
    int n = 0;
    for (int i = 0; i < S->g.ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &S->g.groups[i].workers, glink) {
            if (w->c.fd < 0)
                continue;
            const struct fworker *fw = worker_of_addr(w->addr);
            int paired = 0;
            for (int j = 0; fw && j < FW_CONNS; j++)
                paired |= fw->k[j].fd >= 0 && fw->k[j].gw_fd == w->c.fd;
            n += !paired;
        }
    }
    return n;
}

static void free_world(void)
{
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->fd >= 0 && c->st != FC_FREE)
            close(c->fd);
        sb_free(&c->out);
        sb_free(&c->in);
        VEC_FREE(c->sent);
        VEC_FREE(c->pend);
    }
    for (int k = 0; k < S->nw; k++) {
        fw_reset(&S->w[k]);
        for (int i = 0; i < FW_CONNS; i++) {
            sb_free(&S->w[k].k[i].in);
            sb_free(&S->w[k].k[i].out);
        }
        VEC_FREE(S->w[k].deferred);
        VEC_FREE(S->w[k].seen_async_last);
    }
    VEC_FREE(S->tpubs);
    VEC_FREE(S->last_seq);
    VEC_FREE(S->cid_group);
    VEC_FREE(S->sess_wid);
    VEC_FREE(S->fan_given_up);
    VEC_FREE(S->by_cid);
}

/* A slot whose client is done takes a new one once the gateway has let go of the old one
 * (whatever it sent has run by then, and is checked first). */
static void recycle_clients(void)
{
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->st != FC_DONE || conn_lookup_loop(&S->g, c->gid, c->ggen))
            continue;
        if (!check_client_lost(c, 0))
            continue;
        S->by_cid.v[c->cid] = NULL;
        sb_free(&c->out);
        sb_free(&c->in);
        VEC_FREE(c->sent);
        VEC_FREE(c->pend);
        c->st = FC_FREE;
    }
}

int sim_run(const struct sim_opts *o, struct sim_result *res)
{
    static struct sim sim;
    memset(&sim, 0, sizeof sim);
    memset(res, 0, sizeof *res);
    res->failed_step = -1;
    S = &sim;
    S->o = o;
    S->res = res;
    S->rng = o->seed * 0x9E3779B97F4A7C15ULL + 0x1234567;
    if (!S->rng)
        S->rng = 1;
    trace_n = 0;
    S->now_us = 1000000000LL;
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(on_death);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < MAXC; i++)
        S->cl[i].fd = -1;
    snprintf(S->conf_path, sizeof S->conf_path, "/tmp/qgate-sim-%d.conf", (int)getpid());
    snprintf(S->users_path, sizeof S->users_path, "/tmp/qgate-sim-%d.users", (int)getpid());
    snprintf(S->alog_path, sizeof S->alog_path, "/tmp/qgate-sim-%d.access", (int)getpid());
    unlink(S->alog_path);
    log_sink = on_log;
    log_given = log_reported = 0;
    if (setjmp(S->fail)) {
        if (S->log_queued) {
            tr("(the lines still in the log's queue)");
            log_stop(0);
        }
        if (!o->quiet) {
            fprintf(stderr, "sim: seed %llu failed at step %ld: %s\n", (unsigned long long)o->seed, res->failed_step,
                    res->what);
            print_trace();
        }
        log_sink = NULL;
        unlink(S->conf_path);
        unlink(S->users_path);
        unlink(S->alog_path);
        return 1; /* the gateway's state is abandoned: the caller exits */
    }

    struct config *cfg = calloc(1, sizeof *cfg);
    random_config(cfg);
    S->ngroups = chance(60) ? 2 : 1;
    S->bc_group = S->ngroups > 1 ? 1 : -1;
    S->users_file = chance(40);
    S->carol_max = 1;
    S->alog = chance(40);
    S->alog_manual = S->alog && enabled(SIM_EV_ALOGSINK) && chance(60);
    S->alog_cap = 256 + (size_t)rnd(8192);
    S->alog_room = SIZE_MAX;
    S->session = chance(30);
    S->pipeline = chance(40) ? 2 + rnd(3) : 1;
    S->pipeline_wait = chance(40) ? 0 : chance(50) ? 1 + rnd(30) : 100 + rnd(3000);
    if (S->session && !cfg->queue_timeout) /* a client waiting for a session's worker may wait for ever */
        cfg->queue_timeout = 50 + rnd(2000);
    S->nw = S->ngroups + rnd(4); /* every group has one at least */
    S->defer_pct = chance(40) ? 1 + rnd(30) : 0;
    S->log_queued = enabled(SIM_EV_LOGSINK) && chance(50);
    S->log_cap = 1024 + (size_t)rnd(16384);
    if (S->log_queued && log_start_manual(S->log_cap, on_log_queued))
        fail("log_start_manual failed");
    for (int i = 0; i < 4; i++)
        S->scraper[i] = -1;
    for (int k = 0; k < S->nw; k++)
        fw_init(&S->w[k], k, k < S->ngroups ? k : rnd(S->ngroups));
    /* the configuration goes through the file, as a reload reads it */
    S->g.cfg = *cfg;
    write_config();
    if (S->users_file)
        write_users();
    char err[512];
    if (config_build(cfg, S->conf_path, NULL, err, sizeof err))
        fail("the simulation's configuration was refused: %s", err);
    struct gw_hooks hooks = {.now_us = hook_now, .connect = hook_connect, .lost = hook_lost, .closed = hook_closed, .unread = hook_unread,
                             .dispatched = hook_dispatched, .query_key = hook_query_key, .manual_pools = 1};
    if (S->alog_manual)
        hooks.alog_start = hook_alog_start;
    if (gw_init(&S->g, cfg, S->conf_path, NULL, &hooks))
        fail("gw_init failed");
    free(cfg);
    tr("seed %llu: %d groups (main pool %s), %d workers, users file %d, max_queue %d, queue_timeout %lld, query_timeout %lld, "
       "frames_budget %d, splice %d, compress %d", (unsigned long long)o->seed, S->ngroups,
       S->session ? "session" : "request", S->nw, S->users_file,
       S->g.cfg.max_queue, (long long)S->g.cfg.queue_timeout, (long long)S->g.cfg.query_timeout,
       S->g.cfg.frames_budget, S->g.cfg.splice, S->g.cfg.compress);

    /* workers up: the baseline for memory and fds */
    quiesce(1, "start");
    S->quiescing = 0;
    int fds0 = count_fds(), wup0 = workers_connected(), half0 = gw_unpaired();
    size_t heap0 = gw_heap(), kept0 = gw_kept();

    long steps = o->steps > 0 ? o->steps : 3000;
    for (S->step = 0; S->step < steps; S->step++) {
        one_event();
        res->steps++;
        if (S->step % 64 == 0)
            recycle_clients();
    }
    tr("quiescence");
    quiesce(0, "quiescence (clients that stopped reading still stopped)");
    quiesce(1, "quiescence");
    check_nothing_lost();

    /* everyone leaves */
    for (int i = 0; i < 4; i++)
        if (S->scraper[i] >= 0) {
            close(S->scraper[i]);
            S->scraper[i] = -1;
        }
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_HS || S->cl[i].st == FC_READY)
            client_close(&S->cl[i]);
    for (int k = 0; k < S->nw; k++)
        S->w[k].refuse = 0;
    quiesce(1, "the end");
    for (int i = 0; i < 50; i++) { /* the gateway sees the closes (the workers take what comes) */
        gw_step();
        for (int k = 0; k < S->nw; k++) {
            worker_read(&S->w[k], 1 << 20);
            worker_process(&S->w[k], 1 << 20);
            worker_write(&S->w[k], 1 << 20);
        }
        advance_clock(100);
    }
    quiesce(1, "the end");
    check_nothing_lost();
    if (S->g.nclients)
        fail("the end: %d clients still in the gateway", S->g.nclients);
    int fds1 = count_fds(), wup1 = workers_connected(), half1 = gw_unpaired();
    if (fds1 - fds0 != 2 * (wup1 - wup0) + (half1 - half0))
        fail("the end: %d fds open, %d at the start (workers connected %d, then %d; the gateway's "
             "connections to a worker that closed them at once %d, then %d)", fds1, fds0, wup0, wup1, half0, half1);
    size_t heap1 = gw_heap(), kept1 = gw_kept();
    if (heap0 && heap1 - heap0 != kept1 - kept0)
        fail("the end: the gateway holds %zd bytes more than at the start (%zd accounted for)",
             (ssize_t)(heap1 - heap0), (ssize_t)(kept1 - kept0));
    tr("end: %ld steps, %ld checks", res->steps, res->checks);

    uint64_t ended = 0;
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        ended += S->g.ended[i];
    if (S->alog_manual) { /* the disk gets room, the file takes what is left */
        S->alog_room = SIZE_MAX;
        S->alog_stalled = 0;
    }
    gw_free(&S->g); /* writes the access log's last lines */
    if (S->alog_manual) {
        const struct alog_counts *c = &S->g.alog_last;
        if (c->offered != ended || c->lines + c->dropped != ended || S->alog_cut)
            fail("the end: the access log had %llu records for %llu requests ended: %llu lines, %llu dropped%s",
                 (unsigned long long)c->offered, (unsigned long long)ended, (unsigned long long)c->lines,
                 (unsigned long long)c->dropped, S->alog_cut ? "; its file ends in a cut line" : "");
        check_alog_file(c);
        S->res->alog_lines = (long)c->lines;
        S->res->alog_dropped = (long)c->dropped;
        S->res->alog_frags = S->alog_frags;
    } else if (S->alog) {
        FILE *f = fopen(S->alog_path, "r");
        uint64_t lines = 0;
        for (int ch; f && (ch = fgetc(f)) != EOF;)
            lines += ch == '\n';
        if (f)
            fclose(f);
        if (lines != ended)
            fail("the end: the access log has %llu lines for %llu requests ended", (unsigned long long)lines,
                 (unsigned long long)ended);
        S->res->alog_lines = lines;
    }
    free_world();
    if (S->log_queued) { /* the reader takes the rest */
        struct log_counts lc;
        log_stop(0);
        log_counts(&lc);
        if (lc.offered != lc.written + lc.dropped || lc.written != log_given || log_reported != lc.dropped)
            fail("the end: the log had %llu lines offered, %llu written (the sink got %llu), %llu dropped (%llu said)",
                 (unsigned long long)lc.offered, (unsigned long long)lc.written, (unsigned long long)log_given,
                 (unsigned long long)lc.dropped, (unsigned long long)log_reported);
        S->res->log_dropped = (long)lc.dropped;
    }
    log_sink = NULL;
    unlink(S->conf_path);
    unlink(S->users_path);
    unlink(S->alog_path);
    S = NULL;
    return 0;
}

#define SIM_EV_NAME(e) #e,
static const char *const event_names[] = {SIM_EVENTS(SIM_EV_NAME)};
#undef SIM_EV_NAME

const char *sim_event_name(int k) { return k >= 0 && k < SIM_EV_N ? event_names[k] : "?"; }

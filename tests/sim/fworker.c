/* fworker.c: the fake q workers. A worker is one process with as many connections as the
 * gateway opens (hook_connect), running one message at a time from whichever connection;
 * it checks where each message came from and its order, answers (in some worlds deferring a
 * share of its replies, as -30! does), calls back, publishes on its own timer, stalls in slow
 * queries, and dies. A connection the gateway closes runs the whole messages the worker had
 * read from it first, as q runs what it read before the close, then .z.pc. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"
#include "kcodec.h"
#include "kzip.h"
#include "kipc.h"
#include "worker.h"
#include "sim_int.h"

/* ---- the gateway's hooks about workers ---------------------------------------------------- */

/* pipeline_wait's name for a query: its op and argument ("q CID SEQ OP ARG"), so that the
 * requests of every client are learned together, as the same query text is in a real world. */
uint64_t hook_query_key(void *ctx, const uint8_t *msg, size_t len)
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

/* A client's message given to a worker: never to one of a paused group, never to a disabled
 * one (but the next of a session it had before). */
void hook_dispatched(void *ctx, const struct conn *wc, uint32_t id, uint32_t gen, uint64_t seq)
{
    (void)ctx;
    const struct worker *w = (const struct worker *)wc;
    struct fclient *c = fclient_of(id, gen);
    int cid = c ? c->cid : -1;
    struct fworker *f = worker_of_addr(w->addr);
    struct sent *x = c ? sent_of_seq(c, seq) : NULL;
    if (x && !w->grp->cfg.users[0]) /* (group main: the one no user list routes to) */
        x->era = session_era();
    for (int i = 0; f && i < FW_CONNS; i++) {
        struct fwconn *k = &f->k[i];
        if (k->gw_fd < 0 || k->gw_fd != w->c.fd)
            continue;
        int j = 0;
        while (j < k->nrecent && k->recent[j] != cid)
            j++;
        if (j == k->nrecent && k->nrecent < FW_RECENT)
            k->nrecent++;
        memmove(k->recent + 1, k->recent, (size_t)QG_MIN(j, FW_RECENT - 1) * sizeof k->recent[0]);
        k->recent[0] = cid; /* the most recent first, each client once */
    }
    if (w->grp->paused)
        fail("%s (group %s, paused) was given message %llu of C%d", w->c.name, w->grp->cfg.name,
             (unsigned long long)seq, cid);
    if (!w->disabled)
        return;
    const struct fworker *fw = worker_of_addr(w->addr);
    int own = S->ever_session && cid >= 0 && cid < S->sess_wid.n && fw && S->sess_wid.v[cid] == fw->wid &&
              w->sess && w->sess->c.id == id && w->sess->c.gen == gen;
    if (!own)
        fail("%s, disabled, was given message %llu of C%d, whose session it is not", w->c.name,
             (unsigned long long)seq, cid);
}

struct fworker *worker_of_addr(const char *addr)
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
    k->first_sess = -1;
    k->eof = 0;
}

static void tpub_conn_gone(struct fworker *w, int conn);

/* Connection i of w has closed (its end too): a callback it waited on will not be answered. */
static void fw_conn_gone(struct fworker *w, int i)
{
    tpub_conn_gone(w, i);
    fwc_reset(&w->k[i]);
    if (w->waiting_cb && w->cb_conn == i)
        w->waiting_cb = w->nowed = w->cb_async = 0; /* q's sync call on that handle fails: it goes on */
}

/* Every connection closed, nothing deferred (the process died, or starts afresh). */
void fw_reset(struct fworker *w)
{
    for (int i = 0; i < FW_CONNS; i++)
        fw_conn_gone(w, i);
    w->waiting_cb = w->nowed = w->cb_async = 0;
    for (int i = 0; i < w->deferred.n; i++)
        sb_free(&w->deferred.v[i].msg);
    w->deferred.n = 0;
    w->state_cid = -1; /* (a new q: what a session left there is gone) */
}

int fw_live(const struct fworker *w)
{
    int n = 0;
    for (int i = 0; i < FW_CONNS; i++)
        n += w->k[i].fd >= 0;
    return n;
}

int hook_connect(void *ctx, const char *addr, int uds)
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

/* Publish t may have reached client cid only if that is its owner or its session's client. */
void tpub_check(const struct tpub *t, int id)
{
    if (t->sess_only && t->to >= 0 && t->to != t->sess)
        fail("C%d got publish %d of W%d's connection %d, which C%d's session had been given: another "
             "user's (its q would have run .z.pc for that client's handle)", t->to, id, t->wid, t->conn, t->sess);
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
    if (may_defer && !w->waiting_cb && S->defer_pct && chance(S->defer_pct)) { /* (a nested run's reply:
                                            * at once, as the client waits in it to answer) */
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
void fw_release_deferred(struct fworker *w, int all)
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

/* x (freed) as a whole message of type t into b, compressed as q compresses any message for a
 * remote peer, in worlds whose workers take the gateway for one. */
static void put_zip(struct sbuf *b, int t, K x)
{
    size_t len;
    uint8_t *p = kcodec_encode_msg(x, t, &len), *z = NULL;
    k_free(x);
    if (!p)
        fail("out of memory encoding");
    size_t zl = S->wzip && len >= KZIP_MIN_LEN && (z = malloc(len / 2)) ? kzip_compress(p, len, z) : 0;
    sb_add(b, zl ? z : p, zl ? zl : len);
    free(p);
    free(z);
}

static void fw_reply_k(struct fworker *w, int i, int cid, int may_defer, K x)
{
    struct sbuf m = {0};
    put_zip(&m, KIPC_RESPONSE, x);
    fw_reply(w, i, cid, &m, may_defer);
}

/* A push or callback as text, or with guid as (guid; text): a client of capability 3 takes it;
 * below, the gateway must not pass it on (q's sender would have got 'type). */
static void put_tagged(struct sbuf *b, int t, int guid, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put_tagged(struct sbuf *b, int t, int guid, const char *fmt, ...)
{
    char s[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    if (!guid) {
        put_text(b, t, "%s", s);
        return;
    }
    K l = k_list(2);
    kK(l)[0] = k_atom(-KT_GUID);
    kK(l)[1] = k_str(s, strlen(s));
    put_msg(b, t, l);
}

/* Did the gateway give up on request seq of cid, a client since forgotten? */
static int gone_abandoned(int cid, int seq)
{
    int64_t key = (int64_t)cid << 32 | (uint32_t)seq;
    for (int i = 0; i < S->gone_abandoned.n; i++)
        if (S->gone_abandoned.v[i] == key)
            return 1;
    return 0;
}

/* Request seq of client cid (c, or NULL once it is forgotten), text s, reached w: it may run on
 * w's group, each client's requests in order (again only if the gateway gave up on it); a
 * broadcast or a .qgate.all's part once on each worker, in order. What c sent, or NULL. */
static struct sent *check_run_order(struct fworker *w, int type, const char *s, struct fclient *c, int cid,
                                    int seq)
{
    struct sent *x0 = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
    int want = x0 ? x0->grp : cid_group(cid);
    if (want != w->group)
        fail("W%d (group %d) got \"%s\" of C%d, which may run on group %d only", w->wid, w->group, s, cid, want);
    int fan = (x0 && x0->fan) || (!c && cid < S->fan_given_up.n && S->fan_given_up.v[cid] && seq <= S->last_seq.v[cid]);
    int bcast = (w->group == S->bc_group && type == KIPC_ASYNC) || fan; /* on each worker once, in order */
    if (bcast) {
        while (w->seen_async_last.n <= cid)
            VEC_PUSH(w->seen_async_last, -1);
        /* a sync .qgate.all's part the gateway gave up on (its worker timed out, on a connection
         * dropped before the worker read it) may run late, as a plain request may: a q process
         * serves its connections in its own order, and that client was answered already */
        int late_ok = fan && (x0 ? x0->abandoned : gone_abandoned(cid, seq));
        if (seq <= w->seen_async_last.v[cid] && !late_ok)
            fail("W%d ran async %d of C%d after %d (order)", w->wid, seq, cid, w->seen_async_last.v[cid]);
        if (seq > w->seen_async_last.v[cid])
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
        if (seq <= S->last_seq.v[cid] && !(x ? x->abandoned : gone_abandoned(cid, seq)))
            fail("W%d ran request %d of C%d after its request %d (order, or twice)", w->wid, seq, cid,
                 S->last_seq.v[cid]);
        if (seq > S->last_seq.v[cid])
            S->last_seq.v[cid] = seq;
    }
    return x;
}

/* pool = session: every message a session sends runs on one worker, the one that ran its
 * first (recorded here). */
static void check_session_worker(const struct fworker *w, const char *s, int cid, int era)
{
    while (S->sess_wid.n <= cid) {
        VEC_PUSH(S->sess_wid, -1);
        VEC_PUSH(S->sess_wera, 0);
    }
    if (S->sess_wid.v[cid] < 0 || S->sess_wera.v[cid] != era) { /* its first session, or a new era's */
        S->sess_wid.v[cid] = w->wid;
        S->sess_wera.v[cid] = era;
    } else if (S->sess_wid.v[cid] != w->wid)
        fail("W%d ran \"%s\" of C%d, whose session is on W%d", w->wid, s, cid, S->sess_wid.v[cid]);
}

/* w answers request seq of client cid now: noted, for the order of replies nested ones keep. */
static void note_emitted(int cid, int seq)
{
    struct fclient *c = cid >= 0 && cid < S->by_cid.n ? S->by_cid.v[cid] : NULL;
    struct sent *x = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
    if (x)
        x->emitted = ++S->emits;
}

/* What sync request seq of client cid asks of w, on its connection i: its reply ("R cid seq", an
 * error, a guid, a big string; deferred or not), pushes before it, a callback, a slow run. */
static void worker_answer(struct fworker *w, int i, int cid, int seq, int op, int arg)
{
    struct fwconn *k = &w->k[i];
    if (op != OP_CB && !(op == OP_ALL && (arg & 2)))
        note_emitted(cid, seq);
    switch (op) {
    case OP_PUSH: /* (some carry a guid: not for an old client) */
        for (int j = 0; j < arg; j++)
            put_tagged(&k->out, KIPC_ASYNC, (cid + seq + j) % 7 == 3, "p %d %d %d", cid, seq, j);
        fw_reply_text(w, i, cid, 1, "R %d %d", cid, seq);
        break;
    case OP_ALL: /* a .qgate.all's part: arg 1 publishes first, 2 calls back first (the client's
                  * answer must come back to this worker), 3 both */
        if (arg & 1)
            put_text(&k->out, KIPC_ASYNC, "p %d %d 0", cid, seq);
        if (!(arg & 2)) {
            fw_reply_text(w, i, cid, 1, "R %d %d", cid, seq);
            break;
        }
        /* fall through */
    case OP_CB: /* (some carry a guid: an old client's is answered 'type by the gateway) */
        put_tagged(&k->out, KIPC_SYNC, (cid + seq) % 5 == 2, "c %d %d %d", cid, seq, w->wid);
        if (w->waiting_cb == (int)QG_ARRAY_LEN(w->cb_outer) + 1)
            fail("W%d waits in %d callbacks, one in another", w->wid, w->waiting_cb + 1);
        if (w->waiting_cb) /* a callback from a run nested in one it waits in */
            w->cb_outer[w->waiting_cb - 1] = (struct fwcall){w->cb_conn, w->cb_cid, w->cb_seq, w->cb_async};
        w->cb_async = 0; /* (an async message's says so once this returns) */
        w->waiting_cb++;
        w->owed[w->nowed++] = seq;
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
    struct sent *x;
    int in_async = w->cb_async; /* waiting in a callback from an async message (at any depth) */
    for (int d = 0; d + 1 < w->waiting_cb; d++)
        in_async |= w->cb_outer[d].async;
    struct sent *y = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
    if (w->waiting_cb && type == KIPC_ASYNC && in_async && cid == w->cb_cid && y && y->nested_in < 0) {
        /* an async message of the same client sent in the same run, behind the one that called
         * back (not sent from inside the callback): q runs it inside the callback, as it would
         * straight from the client */
        x = check_run_order(w, type, s, c, cid, seq);
    } else if (w->waiting_cb) { /* run nested, inside the callback it waits in: that client's, sent nested */
        x = c ? sent_of_seq(c, (uint64_t)seq) : NULL;
        if (cid != w->cb_cid)
            fail("W%d, waiting in a callback to C%d, got \"%s\" of C%d", w->wid, w->cb_cid, s, cid);
        if (x && (x->nested_in < 0 || x->here))
            fail("W%d, waiting in a callback to C%d, got \"%s\", which the gateway did not say it nested", w->wid,
                 cid, s);
    } else {
        x = check_run_order(w, type, s, c, cid, seq);
    }
    /* dispatched in a session era (x->era), in a world whose reloads change group main's pool */
    int era = !S->pool_flips ? S->session : x && !x->fan ? x->era : 0; /* (a .qgate.all's part: no session's) */
    if (era && w->group != S->bc_group && !w->waiting_cb) { /* one worker for all a session sends */
        check_session_worker(w, s, cid, era);
        if (k->first_sess < 0)
            k->first_sess = cid;
        /* what one client (a session's, or a request routed in from outside) left in this q
         * is reset before another's runs: whichever way its connection ended, and whatever ran
         * while the gateway had no reset query (a message queued before a reload set it may
         * run without one) */
        if (w->state_cid >= 0 && w->state_cid != cid && reset_query_on() &&
            (x ? x->epoch == S->reset_epoch : !S->reset_flips))
            fail("W%d ran \"%s\" of C%d in a q that C%d's messages ran in, with no reset query since", w->wid, s,
                 cid, w->state_cid);
        w->state_cid = cid;
    } else if (S->pool_flips && w->group != S->bc_group && !w->waiting_cb) {
        w->state_cid = cid; /* a request pool's: what it leaves is reset before a session is given this q */
    }
    if (x)
        x->seen++;
    k->last_cid = cid;
    tr("W%d runs %s (connection %d)", w->wid, s, i);
    if (type == KIPC_ASYNC && op == OP_ACB) { /* it calls its client back, and waits in that call */
        worker_answer(w, i, cid, seq, OP_CB, 0);
        w->cb_async = 1;
        return;
    }
    if (type == KIPC_ASYNC) {
        if (op == OP_APUSH)
            for (int j = 0; j < arg; j++)
                put_text(&k->out, KIPC_ASYNC, "p %d %d %d", cid, seq, j);
        return;
    }
    worker_answer(w, i, cid, seq, op, arg);
}

/* May w take the next message of its connection i now? A whole one (or the handshake), and,
 * while q waits in a callback, only one on that connection (the answer, or one it runs nested). */
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
    return !w->waiting_cb || i == w->cb_conn;
}

/* Does connection k hold a whole message (its header says how long)? */
static int fw_whole(const struct fwconn *k)
{
    struct kipc_hdr h;
    const char *why = "";
    return k->st == FW_UP && k->in.len >= 8 &&
           kipc_hdr_parse(k->in.p, k->in.len, (uint64_t)1 << 32, &h, &why) == QG_OK && k->in.len >= h.len;
}

/* The connections the gateway closed whose last whole message has run: q closes its end. */
static void fw_close_ended(struct fworker *w)
{
    for (int i = 0; i < FW_CONNS; i++)
        if (w->k[i].fd >= 0 && w->k[i].eof && !fw_whole(&w->k[i])) {
            tr("W%d: ran what it had read of connection %d, which the gateway closed: closes it", w->wid, i);
            fw_conn_gone(w, i);
        }
}

/* Is seq a callback w waits in (the client's whose the innermost is), not yet answered? Taken. */
static int take_owed(struct fworker *w, int seq)
{
    for (int j = 0; j < w->nowed; j++)
        if (w->owed[j] == seq) {
            w->owed[j] = w->owed[--w->nowed];
            return 1;
        }
    return 0;
}

/* Run what arrived, one message at a time, as q does: from whichever connection (q's select
 * order is its own), each connection's in order; a callback blocks the worker until that
 * client's response comes; a deferred reply goes when it is due, others meanwhile. */
void worker_process(struct fworker *w, int max)
{
    while (max-- > 0) {
        fw_release_deferred(w, 0);
        fw_close_ended(w);
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
            int cid, seq, wid;
            if (!w->waiting_cb)
                fail("W%d got a response it did not ask for: \"%s\"", w->wid, s);
            if (x->t == KT_ERROR) { /* (for one the client was not given: which, its text does not say) */
                tr("W%d: callback answered by the gateway: '%s", w->wid, x->s);
            } else if (sscanf(s, "r %d %d %d", &cid, &seq, &wid) != 3 || cid != w->cb_cid || (wid != w->wid && wid != -1) ||
                       !take_owed(w, seq)) { /* (any it waits in: a client that sent ahead what ran
                               * nested, and answers in the order it was called, not q's: q pairs
                               * them so too) */
                fail("W%d waited for the answer to callback %d of C%d and got \"%s\"", w->wid, w->cb_seq,
                     w->cb_cid, s);
            }
            int cid0 = w->cb_cid, seq0 = w->cb_seq, async0 = w->cb_async;
            if (--w->waiting_cb) { /* back in the callback around it */
                const struct fwcall *o = &w->cb_outer[w->waiting_cb - 1];
                w->cb_conn = o->conn;
                w->cb_cid = o->cid;
                w->cb_seq = o->seq;
                w->cb_async = o->async;
            } else {
                w->nowed = 0; /* (those the gateway answered: never the client's to answer) */
                w->cb_async = 0;
            }
            if (async0) { /* an async message's: it has run, with nothing to send */
                tr("W%d: callback answered, its async message done", w->wid);
                k_free(x);
                continue;
            }
            note_emitted(cid0, seq0);
            fw_reply_text(w, i, cid0, 1, "R %d %d", cid0, seq0);
            tr("W%d: callback answered, replies", w->wid);
        } else if (S->ever_session && type == KIPC_SYNC && !strcmp(s, "reset")) { /* the group's reset query */
            if (w->waiting_cb)
                fail("W%d, waiting in a callback to C%d, got the reset query", w->wid, w->cb_cid);
            w->state_cid = -1;
            w->resets++;
            fw_reply_k(w, i, -1, 1, k_prim(KT_UNARY, 0));
            tr("W%d runs the reset query (connection %d)", w->wid, i);
        } else if (x->t == KT_CHAR && x->n == 0) { /* the gateway's chaser */
            if (type == KIPC_SYNC)
                fw_reply_k(w, i, k->last_cid, 1, k_prim(KT_UNARY, 0));
            tr("W%d: chaser (connection %d)", w->wid, i);
        } else {
            worker_run(w, i, type, s);
        }
        k_free(x);
    }
}

void worker_read(struct fworker *w, size_t want)
{
    for (int i = 0; i < FW_CONNS; i++) {
        struct fwconn *k = &w->k[i];
        if (k->fd < 0 || k->eof)
            continue;
        sb_reserve(&k->in, k->in.len + want);
        ssize_t n = read(k->fd, k->in.p + k->in.len, want);
        if (n == 0 && fw_whole(k) && !(w->waiting_cb && w->cb_conn == i)) {
            tr("W%d: the gateway closed its connection %d: what it read of it runs first", w->wid, i);
            k->eof = 1;
            continue;
        }
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

void worker_write(struct fworker *w, size_t want)
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
struct worker *gw_worker_of(const struct fworker *w)
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
void worker_timer_push(struct fworker *w)
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
    int first = w->k[i].first_sess; /* a session's publish: that client's, whoever is served now */
    struct tpub t = {.wid = w->wid, .conn = i, .serial = w->k[i].serial, .owner = -2,
                     .sess = first >= 0 ? first : sc ? sc->cid : -1, .sess_only = first >= 0, .to = -1};
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
        put_zip(&w->k[i].out, KIPC_ASYNC, v); /* (compressed in some worlds: a subscriber on this
                                              * host, or of capability 0, gets it decompressed) */
        if (big + 14 > S->max_msg)
            S->max_msg = big + 14;
    }
    tr("W%d publishes %d on its timer (connection %d, its session's client C%d)", w->wid, id, i, t.sess);
}

void worker_die(struct fworker *w)
{
    tr("W%d dies (%d connections)", w->wid, fw_live(w));
    fw_reset(w);
    S->wdeaths++;
    S->outages++;
    w->refuse = chance(50);
    w->uds = chance(70) ? UDS_OK : chance(50) ? UDS_REFUSE : UDS_MUTE; /* restarted otherwise */
}

void fw_init(struct fworker *w, int wid, int group)
{
    memset(w, 0, sizeof *w);
    w->wid = wid;
    w->group = group;
    w->in_config = 1;
    for (int i = 0; i < FW_CONNS; i++) {
        w->k[i].fd = w->k[i].gw_fd = -1;
        w->k[i].last_cid = -1;
    }
    w->state_cid = -1;
    w->uds = chance(70) ? UDS_OK : chance(50) ? UDS_REFUSE : UDS_MUTE;
}


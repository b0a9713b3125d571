/* worker.c: the back-end side: resolve (on the reader pool), connect and q's handshake to each
 * worker, reconnect with back-off, send requests, and stream replies through to clients
 * (cut-through) with backpressure, or collect them whole when a pool job must transform them.
 *
 * Where a worker's message goes:
 *   response to the running request  -> that request's client (dropped if it has gone)
 *   response to a chaser             -> swallowed
 *   async, while serving a request   -> that request's client
 *   async, while idle                -> the client it served last, if still connected; else
 *                                       dropped and counted (w->dropped)
 *   sync (a callback, with .z.w)     -> the running request's client, whose response comes
 *                                       back; with no such client, the worker gets an error */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "log.h"
#include "net.h"

#define BOUNDARY_READ 65536
#define ASYNC_BATCH_MAX 4096

#define ST_NAME(e) #e,
static const char *const state_names[] = {WORKER_STATES(ST_NAME)};
#undef ST_NAME

const char *worker_state_name(int st) { return st >= 0 && st <= WS_BUSY ? state_names[st] : "?"; }

static int is_up(const struct worker *w) { return w->st == WS_IDLE || w->st == WS_BUSY; }

/* The one setter of a worker's state: keeps the group's count of workers up in step. */
static void worker_set_state(struct worker *w, enum worker_state st)
{
    log_debug(w->c.name, "state %s -> %s", worker_state_name(w->st), worker_state_name(st));
    int was = is_up(w);
    w->st = (uint8_t)st;
    w->grp->nup += is_up(w) - was;
}

static void on_reconnect_timer(struct gw *g, struct timer *t)
{
    struct worker *w = (struct worker *)((char *)t - offsetof(struct worker, tm));
    worker_connect_loop(g, w);
}

static void schedule_reconnect(struct gw *g, struct worker *w)
{
    timer_arm(g, &w->tm, g->now_ms + w->backoff, on_reconnect_timer);
    log_debug(w->c.name, "reconnecting in %lld ms", (long long)w->backoff);
    w->backoff = QG_MIN(w->backoff * 2, g->cfg.reconnect_max);
}

/* A connection attempt failed (the worker was not up): retry later; if no worker of the
 * group is up, the waiting requests are answered rather than left to wait. */
static void connect_failed(struct gw *g, struct worker *w)
{
    if (w->grp->nup == 0 && !w->grp->unavailable) {
        w->grp->unavailable = 1;
        log_warn(w->c.name, "no worker of group %s is up", w->grp->cfg.name);
        dispatch_fail_group_loop(g, w->grp);
    }
    schedule_reconnect(g, w);
}

struct worker *worker_new(struct gw *g, struct group *grp, const char *addr)
{
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->c.kind = EV_WORKER;
    w->c.fd = -1;
    w->grp = grp;
    w->serial = ++g->next_worker_serial;
    STAILQ_INIT(&w->bq);
    STAILQ_INIT(&w->bsent);
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    snprintf(w->c.name, sizeof w->c.name, "w %s", addr);
    w->backoff = g->cfg.reconnect_min;
    TAILQ_INSERT_TAIL(&grp->workers, w, glink);
    grp->nworkers++;
    timer_arm(g, &w->tm, g->now_ms, on_reconnect_timer);
    return w;
}

void worker_free(struct worker *w)
{
    for (struct bnode *b = STAILQ_FIRST(&w->bq), *n; b; b = n) {
        n = STAILQ_NEXT(b, link);
        if (--b->m->refs == 0)
            free(b->m);
        free(b);
    }
    for (struct bnode *b = STAILQ_FIRST(&w->bsent), *n; b; b = n) {
        n = STAILQ_NEXT(b, link);
        free(b);
    }
    inbuf_free(&w->coll);
    free(w);
}

static void on_connect_timeout(struct gw *g, struct timer *t)
{
    struct worker *w = (struct worker *)((char *)t - offsetof(struct worker, tm));
    conn_close(g, &w->c, w->st == WS_CONNECTING ? "connect timed out" : "handshake timed out");
}

/* Start connecting to the address in w->sa (or the test's hook). */
static void connect_now(struct gw *g, struct worker *w)
{
    int fd;
    if (g->hooks.connect) {
        fd = g->hooks.connect(g->hooks.ctx, w->addr);
    } else {
        fd = socket(w->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0) {
            net_tune(fd);
            if (connect(fd, (struct sockaddr *)&w->sa, w->salen) && errno != EINPROGRESS) {
                log_debug(w->c.name, "connect: %s", strerror(errno));
                close(fd);
                fd = -1;
                w->resolved = 0; /* resolve again next time: the address may have moved */
            }
        } else {
            log_warn(w->c.name, "socket: %s", strerror(errno));
        }
    }
    if (fd < 0 || conn_register(g, &w->c, fd, EPOLLOUT)) {
        if (fd >= 0)
            close(fd);
        worker_set_state(w, WS_DOWN);
        connect_failed(g, w);
        return;
    }
    w->c.want_out = 1;
    worker_set_state(w, WS_CONNECTING);
    timer_arm(g, &w->tm, g->now_ms + g->cfg.worker_connect_timeout, on_connect_timeout);
}

void worker_connect_loop(struct gw *g, struct worker *w)
{
    if (w->c.fd >= 0 || w->st != WS_DOWN)
        return;
    if (w->resolved || g->hooks.connect) {
        connect_now(g, w);
        return;
    }
    /* name resolution may block: a reader does it */
    struct job *j = job_new(job_resolve, JK_RESOLVE);
    if (!j || !(j->ctx = strdup(w->addr))) {
        job_free(j);
        connect_failed(g, w);
        return;
    }
    j->ctx_free = free;
    j->aux[0] = (int64_t)w->serial;
    worker_set_state(w, WS_RESOLVING);
    pool_submit(g->readers, j);
}

static struct worker *worker_by_serial(struct gw *g, uint64_t serial)
{
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            if (w->serial == serial)
                return w;
    }
    return NULL;
}

void worker_resolved_loop(struct gw *g, struct job *j)
{
    struct worker *w = worker_by_serial(g, (uint64_t)j->aux[0]);
    if (!w || w->st != WS_RESOLVING) /* removed meanwhile */
        return;
    worker_set_state(w, WS_DOWN);
    if (w->removed) {
        worker_teardown(g, w);
        return;
    }
    if (j->result || j->out_len > sizeof w->sa) {
        log_warn(w->c.name, "cannot resolve %s: %s; will retry", w->addr, j->text);
        connect_failed(g, w);
        return;
    }
    memcpy(&w->sa, j->out, j->out_len);
    w->salen = (socklen_t)j->out_len;
    w->resolved = 1;
    connect_now(g, w);
}

static void send_handshake(struct gw *g, struct worker *w)
{
    uint8_t hs[600];
    size_t n = kipc_hs_build(hs, sizeof hs, w->grp->cfg.user, w->grp->cfg.password, KIPC_CAP_MAX);
    if (!n || outq_copy(&w->c.out, hs, n)) {
        conn_close(g, &w->c, "cannot build the handshake");
        return;
    }
    worker_set_state(w, WS_HANDSHAKE);
    w->c.want_out = 0;
    conn_set_events(g, &w->c, EPOLLIN);
    conn_mark_dirty(g, &w->c);
}

static void on_query_timeout(struct gw *g, struct timer *t)
{
    struct worker *w = (struct worker *)((char *)t - offsetof(struct worker, tm));
    g->timeouts++;
    log_warn(w->c.name, "no reply byte for %lld ms: dropping the connection", (long long)g->cfg.query_timeout);
    w->timed_out = 1; /* the teardown answers 'qgate: timeout, unless a message to the client was cut */
    w->backoff = g->cfg.reconnect_min;
    conn_close(g, &w->c, "query timeout");
}

static void arm_query_timer(struct gw *g, struct worker *w)
{
    if (g->cfg.query_timeout > 0 && w->st == WS_BUSY && !w->paused)
        timer_arm(g, &w->tm, g->now_ms + g->cfg.query_timeout, on_query_timeout);
}

/* Give the client of a finished broadcast its turn back. */
static void bmsg_release(struct gw *g, struct bmsg *m)
{
    if (--m->refs > 0)
        return;
    struct conn *c = conn_lookup(g, m->cl_id, m->cl_gen);
    if (c && c->kind == EV_CLIENT) {
        struct client *cl = (struct client *)c;
        struct req *h = client_head(cl);
        if (h && h->seq == m->seq && h->state == RS_RUNNING && !cl->w)
            client_head_done_loop(g, cl);
    }
    free(m);
}

/* Sent broadcasts ran (the chaser after one client's run came back: one segment), or went
 * down with the worker (all: lost, told to the test hook). */
static void forget_sent(struct gw *g, struct worker *w, int lost)
{
    while (!STAILQ_EMPTY(&w->bsent)) {
        struct bnode *b = STAILQ_FIRST(&w->bsent);
        STAILQ_REMOVE_HEAD(&w->bsent, link);
        int end = b->seg_end;
        if (lost && g->hooks.lost)
            g->hooks.lost(g->hooks.ctx, b->cl_id, b->cl_gen, b->seq);
        free(b);
        if (end && !lost)
            return;
    }
}

/* Drop the broadcasts queued on a worker that went down. It is already DOWN: releasing one
 * can start its client's next broadcast, which must not be queued here again. */
static void drop_broadcasts(struct gw *g, struct worker *w)
{
    while (!STAILQ_EMPTY(&w->bq)) {
        struct bnode *b = STAILQ_FIRST(&w->bq);
        STAILQ_REMOVE_HEAD(&w->bq, link);
        if (g->hooks.lost)
            g->hooks.lost(g->hooks.ctx, b->cl_id, b->cl_gen, b->seq);
        bmsg_release(g, b->m);
        free(b);
    }
    forget_sent(g, w, 1);
}

/* The request's bytes go to the worker as they are: no copy, no decoding. */
static void send_request(struct worker *w, struct client *c, struct req *x)
{
    x->state = RS_RUNNING;
    c->pending -= req_cost(x);
    struct chunk *ch = chunk_wrap(x->msg, x->len);
    x->msg = NULL;
    if (ch)
        outq_push(&w->c.out, ch);
}

/* Send every broadcast queued on w, and those that releasing them queues next (a client's
 * following broadcasts), up to a batch; a chaser after each client's run of them, so that what
 * the worker sends meanwhile is known to be that client's. Returns the chasers sent. */
static int send_broadcasts(struct gw *g, struct worker *w)
{
    int n = 0, chasers = 0;
    struct bnode *prev = NULL;
    while (!STAILQ_EMPTY(&w->bq) && n < ASYNC_BATCH_MAX) {
        struct bnode *b = STAILQ_FIRST(&w->bq);
        STAILQ_REMOVE_HEAD(&w->bq, link);
        if (prev && (prev->cl_id != b->cl_id || prev->cl_gen != b->cl_gen)) {
            outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
            prev->seg_end = 1;
            chasers++;
        }
        outq_copy(&w->c.out, b->m->data, b->m->len);
        w->last_id = b->cl_id; /* its sender is the client this worker served last */
        w->last_gen = b->cl_gen;
        struct bmsg *m = b->m;
        b->m = NULL;
        STAILQ_INSERT_TAIL(&w->bsent, b, link);
        prev = b;
        bmsg_release(g, m); /* may queue the client's next broadcast on w->bq */
        n++;
    }
    if (prev) {
        outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
        prev->seg_end = 1;
        chasers++;
    }
    return chasers;
}

void worker_start_loop(struct gw *g, struct worker *w, struct client *c)
{
    w->cl = NULL;
    worker_set_state(w, WS_BUSY); /* before the broadcasts: releasing one must not start here */
    int swallow = send_broadcasts(g, w);
    w->async_run = 1; /* a run without a client: broadcasts only */
    w->cl = c;
    if (c) {
        struct req *r = client_head(c);
        timer_cancel(g, &c->tm);
        if (r->type == KIPC_SYNC) {
            send_request(w, c, r);
            w->async_run = 0;
        } else {
            /* async messages right behind the head go too, followed by one chaser */
            int n = 0;
            for (struct req *x = r; x && x->type == KIPC_ASYNC && n < ASYNC_BATCH_MAX;
                 x = STAILQ_NEXT(x, link), n++) {
                if (x != r && (x->state != RS_WAITING || x->unchecked))
                    break;
                send_request(w, c, x);
            }
            outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
            swallow++;
        }
        w->cl_id = w->last_id = c->c.id;
        w->cl_gen = w->last_gen = c->c.gen;
        w->req_seq = r->seq;
        client_set_worker(c, w);
        log_debug(w->c.name, "running %s request %llu of %s", r->type == KIPC_SYNC ? "sync" : "async",
                  (unsigned long long)r->seq, c->c.name);
    }
    w->swallow = swallow;
    w->sent_any = 0;
    w->collect = 0;
    w->t_start_us = g->now_us;
    arm_query_timer(g, w);
    conn_mark_dirty(g, &w->c);
}

/* Hand a collected reply to the pool job that transforms it for c. */
static void submit_collected(struct gw *g, struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    int old = c->cap < 3;
    struct job *j = job_new(old ? job_check_reply : job_compress_reply, JK_REPLY);
    client_set_worker(c, NULL);
    if (!j || !r) {
        job_free(j);
        conn_close(g, &c->c, "out of memory");
        return;
    }
    r->state = RS_LOCAL;
    j->arg = c->cap;
    j->aux[0] = g->cfg.max_message;
    j->in = w->coll.p;
    j->in_len = w->coll.len;
    w->coll = (struct inbuf){0};
    gw_submit(g, old ? g->readers : g->writers, j, &c->c, r->seq);
}

/* The request is finished on the worker: free it for the next one. */
static void request_done(struct gw *g, struct worker *w)
{
    struct client *c = w->cl;
    if (!w->async_run) {
        uint64_t us = (uint64_t)(g->now_us - w->t_start_us);
        hist_add(&w->lat, us);
        w->served++;
        if (w->is_error)
            w->errors++;
    }
    while (!STAILQ_EMPTY(&w->bsent)) /* their chasers came back before this reply */
        forget_sent(g, w, 0);
    w->cl = NULL;
    timer_cancel(g, &w->tm);
    if (c) {
        if (w->collect && !c->eof)
            submit_collected(g, w, c);
        else
            client_head_done_loop(g, c);
    }
    inbuf_free(&w->coll);
    w->collect = 0;
    if (w->removed) {
        conn_close(g, &w->c, "removed from the configuration");
        return;
    }
    worker_set_state(w, WS_IDLE);
    worker_resume_loop(g, w); /* paused for its client's output, which has its whole reply now */
    dispatch_worker_idle_loop(g, w);
}

static void pause_reading(struct gw *g, struct worker *w)
{
    w->paused = 1;
    conn_set_events(g, &w->c, w->c.events & ~(uint32_t)EPOLLIN);
    timer_cancel(g, &w->tm); /* a slow client is not a slow query: client_stall_timeout watches it */
}

static void pause_if_full(struct gw *g, struct worker *w, struct client *c)
{
    if (!w->paused && c->c.out.bytes > (size_t)g->cfg.client_high_water) {
        pause_reading(g, w);
        log_debug(w->c.name, "paused: %s has %zu bytes unsent", c->c.name, c->c.out.bytes);
    }
}

void worker_resume_loop(struct gw *g, struct worker *w)
{
    if (!w->paused || w->c.fd < 0)
        return;
    w->paused = 0;
    conn_set_events(g, &w->c, w->c.events | EPOLLIN);
    arm_query_timer(g, w);
}

static int collect_bytes(struct gw *g, struct worker *w, const uint8_t *p, size_t n)
{
    if (inbuf_reserve(&w->coll, w->coll.len + n)) {
        conn_close(g, &w->c, "out of memory collecting a message");
        return -1;
    }
    memcpy(w->coll.p + w->coll.len, p, n);
    w->coll.len += n;
    return 0;
}

/* Bytes of the message being read: streamed to the running request's client, collected (a
 * reply to transform, or a message for another client), or dropped. A whole chunk is handed
 * over without copying. */
static void deliver(struct gw *g, struct worker *w, struct chunk *ch, const uint8_t *p, size_t n)
{
    struct client *c = w->cl;
    if (!w->relay || (w->to_self && (!c || c->eof || c->c.closing))) {
        chunk_free(ch);
        return;
    }
    if (w->collect || !w->to_self) {
        collect_bytes(g, w, p, n);
        chunk_free(ch);
        return;
    }
    if (ch)
        outq_push(&c->c.out, ch);
    else if (outq_copy(&c->c.out, p, n)) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    if (w->mtype == KIPC_RESPONSE)
        w->sent_any = 1; /* the reply has begun: losing the worker now cuts it */
    conn_mark_dirty(g, &c->c);
    pause_if_full(g, w, c);
}

/* A whole message for a client other than the running request's (an idle worker's publish):
 * it goes out at a message boundary of that client's stream, or is dropped if it has gone. */
static void deliver_whole(struct gw *g, struct worker *w)
{
    struct conn *x = conn_lookup(g, w->to_id, w->to_gen);
    struct client *c = x && x->kind == EV_CLIENT ? (struct client *)x : NULL;
    if (!c || c->eof || (c->st != CS_READY && c->st != CS_FLUSHING)) {
        w->dropped++;
        inbuf_free(&w->coll);
        return;
    }
    struct chunk *ch = chunk_wrap(w->coll.p, w->coll.len);
    w->coll = (struct inbuf){0};
    if (!ch) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    outq_push(c->streaming ? &c->held : &c->c.out, ch);
    conn_mark_dirty(g, &c->c);
}

/* Replies that must be collected for c: to check them for an old client, or to compress them
 * for a remote one. An old client's reply over compress_max is refused instead (-1). */
static int needs_collect(struct gw *g, const struct client *c, const struct kipc_hdr *h)
{
    if (c->cap < 3)
        return h->len <= (uint64_t)g->cfg.compress_max ? 1 : -1;
    return g->cfg.compress && !c->local && c->cap >= 1 && !h->compressed && h->len >= KZIP_MIN_LEN &&
           h->len <= (uint64_t)g->cfg.compress_max;
}

/* Where an async message from w goes: while it runs a client's broadcasts, that client; then
 * the running request's client (to_self); when w serves none, the one it served last if that
 * one is still connected. 0 if nowhere. */
static int async_target(struct gw *g, struct worker *w)
{
    uint32_t id = w->last_id, gen = w->last_gen;
    if (!STAILQ_EMPTY(&w->bsent)) {
        id = STAILQ_FIRST(&w->bsent)->cl_id;
        gen = STAILQ_FIRST(&w->bsent)->cl_gen;
    } else if (w->st == WS_BUSY && w->cl) {
        w->to_self = 1;
        return 1;
    }
    struct conn *x = gen ? conn_lookup(g, id, gen) : NULL;
    struct client *c = x && x->kind == EV_CLIENT ? (struct client *)x : NULL;
    if (!c || c->eof || x->closing || (c->st != CS_READY && c->st != CS_FLUSHING))
        return 0;
    w->to_self = 0;
    w->to_id = x->id;
    w->to_gen = x->gen;
    return 1;
}

/* A whole header has arrived: decide where the message goes. -1 if the worker is broken. */
static int on_header(struct gw *g, struct worker *w)
{
    struct kipc_hdr h;
    const char *why;
    if (kipc_hdr_parse(w->hdr, 8, (uint64_t)g->cfg.max_message, &h, &why) != QG_OK) {
        char msg[96];
        snprintf(msg, sizeof msg, "bad message header from the worker: %s", why);
        conn_close(g, &w->c, msg);
        return -1;
    }
    w->mtype = h.type;
    w->left = h.len - 8;
    w->relay = 0;
    w->collect = 0;
    w->want_type = 0;
    w->to_self = 1;
    struct client *c = w->cl;
    switch (h.type) {
    case KIPC_RESPONSE:
        if (w->swallow > 0 || w->st != WS_BUSY)
            break;
        w->want_type = 1;
        w->is_error = 0;
        w->relay = c != NULL;
        if (c && !c->eof) {
            int nc = needs_collect(g, c, &h);
            if (nc < 0) { /* too big to check for an old client: it is told, the reply drained */
                w->relay = 0;
                w->collect = 0;
                w->sent_any = 1; /* the request is answered: a loss now closes nothing */
                client_error_loop(g, c, client_head(c), "qgate: reply too large for capability %d (%llu bytes, over compress_max)",
                                  c->cap, (unsigned long long)h.len);
                w->cl = NULL; /* its reply is made: the worker's bytes are drained */
                client_set_worker(c, NULL);
            } else if (nc) {
                w->collect = 1; /* grown as bytes arrive: a header's claim reserves nothing */
            }
        }
        break;
    case KIPC_ASYNC:
        w->relay = (uint8_t)async_target(g, w);
        if (!w->relay) {
            w->dropped++;
            log_debug(w->c.name, "async message from an idle worker whose last client is gone: dropped");
        }
        break;
    case KIPC_SYNC: /* a nested request: the running request's client answers it (a broadcast's
                     * sender waits for nothing: the worker is told it has gone) */
        if (c && w->st == WS_BUSY && c->st == CS_READY && STAILQ_EMPTY(&w->bsent) && /* read: it can answer */
            client_callback_loop(g, c, w) == 0) {
            w->relay = 1;
        } else {
            outq_copy(&w->c.out, g->no_client_err, g->no_client_err_len);
            conn_mark_dirty(g, &w->c);
        }
        break;
    }
    if (w->relay && w->to_self && !w->collect && w->cl && !w->cl->eof)
        w->cl->streaming = 1; /* nothing else goes into its stream until this message ends */
    return 0;
}

static void on_message_end(struct gw *g, struct worker *w)
{
    w->hdr_have = 0;
    if (w->relay && !w->to_self)
        deliver_whole(g, w);
    else if (w->relay && w->cl && w->cl->streaming && !w->collect)
        client_stream_end_loop(g, w->cl);
    w->relay = 0;
    if (w->mtype != KIPC_RESPONSE || w->st != WS_BUSY)
        return;
    if (w->swallow > 0) {
        forget_sent(g, w, 0); /* a chaser came back: one client's broadcasts before it ran */
        if (--w->swallow == 0 && w->async_run)
            request_done(g, w);
        return;
    }
    request_done(g, w);
}

/* Route the bytes of one read: headers, then message bodies, message by message. */
static void route(struct gw *g, struct worker *w, struct chunk *ch)
{
    const uint8_t *p = ch->p;
    size_t n = ch->len, off = 0;
    while (off < n && w->c.fd >= 0) {
        if (w->hdr_have < 8) {
            size_t k = QG_MIN(8u - w->hdr_have, n - off);
            memcpy(w->hdr + w->hdr_have, p + off, k);
            w->hdr_have = (uint8_t)(w->hdr_have + k);
            off += k;
            if (w->hdr_have < 8)
                break;
            if (on_header(g, w))
                break;
            deliver(g, w, NULL, w->hdr, 8);
            continue;
        }
        size_t k = (size_t)QG_MIN((uint64_t)(n - off), w->left);
        if (w->want_type && k) {
            w->is_error = p[off] == (uint8_t)KT_ERROR;
            w->want_type = 0;
        }
        if (off == 0 && k == n) {
            deliver(g, w, ch, p, k);
            ch = NULL;
        } else {
            deliver(g, w, NULL, p + off, k);
        }
        off += k;
        w->left -= k;
        if (w->left == 0)
            on_message_end(g, w);
    }
    chunk_free(ch);
}

#define SPLICE_MIN 65536

/* Move reply bytes from the worker's socket to the client's inside the kernel, through the
 * client's pipe. Only for the body of a relayed response whose first byte was seen, and only
 * when nothing is queued in the client's out (the pipe goes ahead of it). Returns bytes moved,
 * 0 when splicing does not apply or nothing came, -1 if the worker connection was closed. */
static ssize_t splice_body(struct gw *g, struct worker *w, size_t budget)
{
    struct client *c = w->cl;
    if (!g->cfg.splice || !c || !w->to_self || c->eof || !w->relay || w->collect || w->want_type ||
        w->mtype != KIPC_RESPONSE ||
        w->hdr_have < 8 || w->left < SPLICE_MIN || c->c.out.bytes || c->c.fd < 0)
        return 0;
    size_t room = client_pipe_room_loop(g, c);
    if (!room) {
        if (c->has_pipe) /* full: wait for the client to take some */
            pause_reading(g, w);
        return 0;
    }
    ssize_t n = splice(w->c.fd, NULL, c->pipe_wr, NULL, (size_t)QG_MIN((uint64_t)QG_MIN(room, budget), w->left),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == 0) {
        conn_close(g, &w->c, "worker closed the connection");
        return -1;
    }
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : (conn_close(g, &w->c, strerror(errno)), -1);
    c->piped += (size_t)n;
    w->left -= (uint64_t)n;
    w->sent_any = 1;
    if (client_pipe_flush_loop(g, c) == 0 && c->piped == c->pipe_cap)
        pause_reading(g, w); /* the client is not keeping up: stop reading until it does */
    if (c->piped)
        conn_mark_dirty(g, &c->c);
    if (w->left == 0)
        on_message_end(g, w);
    return n;
}

static void worker_read_loop(struct gw *g, struct worker *w)
{
    size_t budget = (size_t)g->cfg.read_budget;
    while (budget && w->c.fd >= 0 && !w->paused) {
        ssize_t sp = splice_body(g, w, budget);
        if (sp < 0)
            return;
        if (sp > 0) {
            budget -= QG_MIN((size_t)sp, budget);
            if (w->st == WS_BUSY)
                arm_query_timer(g, w);
            continue;
        }
        if (w->paused)
            break;
        size_t want = w->hdr_have == 8 && w->left ? (size_t)QG_MIN(w->left, (uint64_t)g->cfg.chunk_size)
                                                  : (size_t)QG_MIN(BOUNDARY_READ, g->cfg.chunk_size);
        want = QG_MIN(want, budget);
        struct chunk *ch = chunk_new(want);
        if (!ch) {
            conn_close(g, &w->c, "out of memory");
            return;
        }
        ssize_t r = read(w->c.fd, ch->p, want);
        if (r <= 0) {
            chunk_free(ch);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                break;
            conn_close(g, &w->c, r == 0 ? "worker closed the connection" : strerror(errno));
            return;
        }
        ch->len = (size_t)r;
        budget -= (size_t)r;
        if (w->st == WS_BUSY)
            arm_query_timer(g, w);
        route(g, w, ch);
        if ((size_t)r < want)
            break;
    }
    if (budget == 0)
        g->work_pending = 1;
}

static void finish_connect(struct gw *g, struct worker *w)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(w->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
        conn_close(g, &w->c, err ? strerror(err) : "connect failed");
        return;
    }
    send_handshake(g, w);
}

static void read_capability(struct gw *g, struct worker *w)
{
    uint8_t cap;
    ssize_t r = read(w->c.fd, &cap, 1);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r != 1) {
        conn_close(g, &w->c, "closed during the handshake ('access: check the group's user and password)");
        return;
    }
    w->cap = cap;
    w->backoff = g->cfg.reconnect_min;
    w->grp->unavailable = 0;
    timer_cancel(g, &w->tm);
    log_info(w->c.name, "connected (capability %d)", cap);
    worker_set_state(w, WS_IDLE);
    dispatch_worker_idle_loop(g, w);
}

void worker_on_event_loop(struct gw *g, struct worker *w, uint32_t ev)
{
    if (w->c.fd < 0)
        return;
    switch (w->st) {
    case WS_CONNECTING:
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            finish_connect(g, w);
        return;
    case WS_HANDSHAKE:
        if (ev & EPOLLOUT)
            conn_flush_loop(g, &w->c);
        if (w->c.fd >= 0 && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            read_capability(g, w);
        return;
    default:
        if (ev & EPOLLOUT)
            conn_flush_loop(g, &w->c);
        if (w->c.fd >= 0 && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            worker_read_loop(g, w);
        return;
    }
}

void worker_client_gone_loop(struct gw *g, struct worker *w)
{
    struct client *c = w->cl;
    if (c)
        client_cancel_calls_loop(g, c, w); /* a callback it waits on gets its error */
    if (c && c->c.closing) { /* closed for good: its reply is drained and dropped */
        w->cl = NULL;
        if (w->to_self) {
            w->relay = 0;
            inbuf_free(&w->coll);
            w->collect = 0;
        }
    }
    worker_resume_loop(g, w);
}

int worker_broadcast_loop(struct gw *g, struct group *grp, struct client *c, struct req *r)
{
    int up = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink)
        up += is_up(w) && !w->removed;
    if (!up)
        return 0;
    struct bmsg *m = malloc(sizeof *m + r->len);
    if (!m)
        return 0;
    m->refs = up;
    m->cl_id = c->c.id;
    m->cl_gen = c->c.gen;
    m->seq = r->seq;
    m->len = r->len;
    memcpy(m->data, r->msg, r->len);
    TAILQ_FOREACH(w, &grp->workers, glink) {
        if (!is_up(w) || w->removed)
            continue;
        struct bnode *b = malloc(sizeof *b);
        if (!b) {
            bmsg_release(g, m);
            continue;
        }
        *b = (struct bnode){.m = m, .cl_id = m->cl_id, .cl_gen = m->cl_gen, .seq = m->seq};
        STAILQ_INSERT_TAIL(&w->bq, b, link);
    }
    g->work_pending = 1;
    return up;
}

void worker_nested_reply_loop(struct gw *g, struct worker *w, uint8_t *msg, size_t len)
{
    struct chunk *ch = chunk_wrap(msg, len);
    if (!ch)
        return;
    outq_push(&w->c.out, ch);
    conn_mark_dirty(g, &w->c);
}

/* After the socket is gone: fail or finish the request, then reconnect (or go, if removed). */
void worker_teardown(struct gw *g, struct worker *w)
{
    timer_cancel(g, &w->tm);
    dispatch_worker_unidle_loop(g, w);
    struct client *c = w->cl;
    int busy = w->st == WS_BUSY, was_up = is_up(w), async_run = w->async_run, sent_any = w->sent_any;
    /* a message cut in the middle of its stream leaves the client's stream broken: closed */
    int cut = w->relay && w->to_self && !w->collect && w->hdr_have == 8 && c && !c->eof;
    w->cl = NULL;
    inbuf_free(&w->coll);
    w->hdr_have = 0;
    w->left = 0;
    w->swallow = 0;
    w->paused = 0;
    w->collect = 0;
    w->relay = 0;
    w->async_run = 0;
    w->last_id = w->last_gen = 0; /* a new connection has served nobody yet */
    /* down first: what follows may start a client's next request, never on this worker */
    worker_set_state(w, WS_DOWN);
    if (c && busy) {
        client_set_worker(c, NULL);
        struct req *h = client_head(c);
        for (struct req *r = h; g->hooks.lost && r && r->state == RS_RUNNING; r = STAILQ_NEXT(r, link))
            g->hooks.lost(g->hooks.ctx, c->c.id, c->c.gen, r->seq); /* given up on with the worker */
        if (cut || (sent_any && !c->eof)) {
            conn_close(g, &c->c, "worker lost in the middle of the reply");
        } else if (async_run || c->eof) {
            client_head_done_loop(g, c);
        } else if (w->timed_out) {
            client_error_loop(g, c, h, "qgate: timeout (%s sent nothing for %lld ms)", w->addr,
                              (long long)g->cfg.query_timeout);
        } else {
            client_error_loop(g, c, h, "qgate: worker %s lost", w->addr);
        }
    }
    w->timed_out = 0;
    drop_broadcasts(g, w);
    if (w->removed) {
        TAILQ_REMOVE(&w->grp->workers, w, glink);
        w->grp->nworkers--;
        w->c.closing = 1;
        STAILQ_INSERT_TAIL(&g->closed, &w->c, closed_link);
        return;
    }
    if (was_up)
        schedule_reconnect(g, w);
    else
        connect_failed(g, w);
}

void worker_remove_loop(struct gw *g, struct worker *w)
{
    w->removed = 1;
    if (w->st == WS_BUSY) {
        log_info(w->c.name, "removed from the configuration: closing after the current request");
        return;
    }
    if (w->st == WS_RESOLVING) /* the resolution's completion finishes it */
        return;
    if (w->c.fd >= 0) {
        conn_close(g, &w->c, "removed from the configuration");
        return;
    }
    worker_teardown(g, w); /* down: no socket, nothing running; unlink and free */
}

int worker_busy_count(const struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++) {
        const struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            n += w->st == WS_BUSY;
    }
    return n;
}

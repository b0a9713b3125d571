/* worker.c: the back-end side: connect and q's handshake to each worker, reconnect with
 * back-off, send requests, and stream replies through to clients (cut-through) with
 * backpressure, or collect them whole when a pool job must transform them. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
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

static void worker_set_state(struct worker *w, enum worker_state st)
{
    log_debug(w->c.name, "state %s -> %s", worker_state_name(w->st), worker_state_name(st));
    w->st = (uint8_t)st;
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

static int resolve(struct worker *w)
{
    char host[256];
    int port;
    if (net_parse_hostport(w->addr, "localhost", host, sizeof host, &port))
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(strcmp(host, "localhost") ? host : "127.0.0.1", ps, &hints, &ai))
        return -1;
    memcpy(&w->sa, ai->ai_addr, ai->ai_addrlen);
    w->salen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

struct worker *worker_new(struct gw *g, struct group *grp, const char *addr)
{
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->c.kind = EV_WORKER;
    w->c.fd = -1;
    w->grp = grp;
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    snprintf(w->c.name, sizeof w->c.name, "w %s", addr);
    w->backoff = g->cfg.reconnect_min;
    if (resolve(w))
        log_warn(w->c.name, "cannot resolve %s yet; will retry", addr);
    w->gnext = grp->workers;
    grp->workers = w;
    grp->nworkers++;
    timer_arm(g, &w->tm, g->now_ms, on_reconnect_timer);
    return w;
}

static void on_connect_timeout(struct gw *g, struct timer *t)
{
    struct worker *w = (struct worker *)((char *)t - offsetof(struct worker, tm));
    conn_close(g, &w->c, w->st == WS_CONNECTING ? "connect timed out" : "handshake timed out");
}

void worker_connect_loop(struct gw *g, struct worker *w)
{
    if (w->c.fd >= 0)
        return;
    if (!w->salen && resolve(w)) {
        log_warn(w->c.name, "cannot resolve address");
        connect_failed(g, w);
        return;
    }
    int fd = socket(w->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_warn(w->c.name, "socket: %s", strerror(errno));
        connect_failed(g, w);
        return;
    }
    net_tune(fd);
    if (connect(fd, (struct sockaddr *)&w->sa, w->salen) && errno != EINPROGRESS) {
        log_debug(w->c.name, "connect: %s", strerror(errno));
        close(fd);
        connect_failed(g, w);
        return;
    }
    if (conn_register(g, &w->c, fd, EPOLLOUT)) {
        close(fd);
        connect_failed(g, w);
        return;
    }
    w->c.want_out = 1;
    worker_set_state(w, WS_CONNECTING);
    timer_arm(g, &w->tm, g->now_ms + g->cfg.worker_connect_timeout, on_connect_timeout);
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
    struct client *c = w->cl;
    g->timeouts++;
    log_warn(w->c.name, "no reply byte for %lld ms: dropping the connection", (long long)g->cfg.query_timeout);
    if (c && !w->sent_any && !w->async_run) {
        w->cl = NULL;
        client_set_worker(c, NULL);
        client_error_loop(g, c, c->head, "qgate: timeout (%s sent nothing for %lld ms)", w->addr,
                          (long long)g->cfg.query_timeout);
    }
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
        if (cl->head && cl->head->seq == m->seq && cl->head->state == RS_RUNNING && !cl->w)
            client_head_done_loop(g, cl);
    }
    free(m);
}

/* Take the worker's pending broadcasts off it: releasing one can start its client's next
 * request, which may queue a new broadcast on this same worker. */
static struct bnode *take_broadcasts(struct worker *w)
{
    struct bnode *list = w->bq_head;
    w->bq_head = w->bq_tail = NULL;
    return list;
}

static void drop_broadcasts(struct gw *g, struct worker *w)
{
    for (struct bnode *b = take_broadcasts(w), *n; b; b = n) {
        n = b->next;
        bmsg_release(g, b->m);
        free(b);
    }
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

void worker_start_loop(struct gw *g, struct worker *w, struct client *c)
{
    int swallow = 0;
    if (w->bq_head) {
        for (struct bnode *b = take_broadcasts(w), *n; b; b = n) {
            n = b->next;
            outq_copy(&w->c.out, b->m->data, b->m->len);
            bmsg_release(g, b->m);
            free(b);
        }
        outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
        swallow++;
    }
    w->async_run = 1; /* a run without a client: broadcasts only */
    w->cl = c;
    if (c) {
        struct req *r = c->head;
        timer_cancel(g, &c->tm);
        if (r->type == KIPC_SYNC) {
            send_request(w, c, r);
            w->async_run = 0;
        } else {
            /* async messages right behind the head go too, followed by one chaser */
            int n = 0;
            for (struct req *x = r; x && x->type == KIPC_ASYNC && n < ASYNC_BATCH_MAX; x = x->next, n++) {
                if (x != r && x->state != RS_WAITING)
                    break;
                send_request(w, c, x);
            }
            outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
            swallow++;
        }
        w->cl_id = c->c.id;
        w->cl_gen = c->c.gen;
        w->req_seq = r->seq;
        client_set_worker(c, w);
        log_debug(w->c.name, "running %s request %llu of %s", r->type == KIPC_SYNC ? "sync" : "async",
                  (unsigned long long)r->seq, c->c.name);
    }
    w->swallow = swallow;
    w->sent_any = 0;
    w->collect = 0;
    w->t_start_us = gw_now_us();
    worker_set_state(w, WS_BUSY);
    arm_query_timer(g, w);
    conn_mark_dirty(g, &w->c);
}

/* The request is finished on the worker: free it for the next one. */
static void request_done(struct gw *g, struct worker *w)
{
    struct client *c = w->cl;
    if (!w->async_run) {
        uint64_t us = (uint64_t)(gw_now_us() - w->t_start_us);
        hist_add(&w->lat, us);
        w->served++;
        if (w->is_error)
            w->errors++;
    }
    w->cl = NULL;
    timer_cancel(g, &w->tm);
    if (c) {
        if (w->collect) {
            struct req *r = c->head;
            int old = c->cap < 3;
            struct job *j = job_new(old ? job_check_reply : job_compress_reply, JK_REPLY);
            client_set_worker(c, NULL);
            if (!j || !r) {
                job_free(j);
                conn_close(g, &c->c, "out of memory");
            } else {
                r->state = RS_LOCAL;
                j->arg = c->cap;
                j->in = w->coll.p;
                j->in_len = w->coll.len;
                w->coll = (struct inbuf){0};
                gw_submit(g, old ? g->readers : g->writers, j, &c->c, r->seq);
            }
        } else {
            client_head_done_loop(g, c);
        }
    }
    inbuf_free(&w->coll);
    w->collect = 0;
    if (w->removed) {
        conn_close(g, &w->c, "removed from the configuration");
        return;
    }
    worker_set_state(w, WS_IDLE);
    dispatch_worker_idle_loop(g, w);
}

static void pause_if_full(struct gw *g, struct worker *w, struct client *c)
{
    if (!w->paused && c->c.out.bytes > (size_t)g->cfg.client_high_water) {
        w->paused = 1;
        conn_set_events(g, &w->c, w->c.events & ~(uint32_t)EPOLLIN);
        timer_cancel(g, &w->tm); /* a slow client is not a slow query */
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

/* Bytes of the message being read: to the client, into the collection, or dropped. A whole
 * chunk is handed over without copying. */
static void deliver(struct gw *g, struct worker *w, struct chunk *ch, const uint8_t *p, size_t n)
{
    struct client *c = w->cl;
    if (!w->relay || !c) {
        chunk_free(ch);
        return;
    }
    if (w->collect) {
        if (inbuf_reserve(&w->coll, w->coll.len + n)) {
            chunk_free(ch);
            conn_close(g, &c->c, "out of memory collecting a reply");
            return;
        }
        memcpy(w->coll.p + w->coll.len, p, n);
        w->coll.len += n;
        chunk_free(ch);
        return;
    }
    if (ch)
        outq_push(&c->c.out, ch);
    else if (outq_copy(&c->c.out, p, n)) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    w->sent_any = 1;
    conn_mark_dirty(g, &c->c);
    pause_if_full(g, w, c);
}

static int needs_collect(struct gw *g, const struct client *c, const struct kipc_hdr *h)
{
    if (c->cap < 3)
        return 1;
    return g->cfg.compress && !c->local && c->cap >= 1 && !h->compressed && h->len >= KZIP_MIN_LEN &&
           h->len <= (uint64_t)g->cfg.compress_max;
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
    struct client *c = w->cl;
    switch (h.type) {
    case KIPC_RESPONSE:
        if (w->swallow > 0 || w->st != WS_BUSY)
            break;
        w->want_type = 1;
        w->is_error = 0;
        w->relay = c != NULL;
        if (c && needs_collect(g, c, &h))
            w->collect = 1; /* grown as bytes arrive: a header's claim reserves nothing */
        break;
    case KIPC_ASYNC: /* sent while serving a request: for that request's client */
        w->relay = c != NULL && w->st == WS_BUSY;
        break;
    case KIPC_SYNC: /* a nested request: the client answers it */
        if (c && w->st == WS_BUSY) {
            w->relay = 1;
            c->nested_id = w->c.id;
            c->nested_gen = w->c.gen;
        } else {
            outq_copy(&w->c.out, g->no_client_err, g->no_client_err_len);
            conn_mark_dirty(g, &w->c);
        }
        break;
    }
    return 0;
}

static void on_message_end(struct gw *g, struct worker *w)
{
    w->hdr_have = 0;
    if (w->mtype != KIPC_RESPONSE || w->st != WS_BUSY)
        return;
    if (w->swallow > 0) {
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
 * client's pipe. Only for the body of a relayed message whose first byte was seen, and only
 * when nothing is queued in the client's out (the pipe goes ahead of it). Returns bytes moved,
 * 0 when splicing does not apply or nothing came, -1 if the worker connection was closed. */
static ssize_t splice_body(struct gw *g, struct worker *w, size_t budget)
{
    struct client *c = w->cl;
    if (!g->cfg.splice || !c || !w->relay || w->collect || w->want_type || w->hdr_have < 8 ||
        w->left < SPLICE_MIN || c->c.out.bytes)
        return 0;
    size_t room = client_pipe_room_loop(g, c);
    if (!room) {
        if (c->has_pipe) { /* full: wait for the client to take some */
            w->paused = 1;
            conn_set_events(g, &w->c, w->c.events & ~(uint32_t)EPOLLIN);
            timer_cancel(g, &w->tm);
        }
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
    if (client_pipe_flush_loop(g, c) == 0 && c->piped == c->pipe_cap) {
        w->paused = 1; /* the client is not keeping up: stop reading until it does */
        conn_set_events(g, &w->c, w->c.events & ~(uint32_t)EPOLLIN);
        timer_cancel(g, &w->tm);
    }
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
    w->grp->nup++;
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
    if (c && c->nested_gen && c->nested_id == w->c.id && c->nested_gen == w->c.gen) {
        outq_copy(&w->c.out, g->no_client_err, g->no_client_err_len);
        conn_mark_dirty(g, &w->c);
    }
    w->cl = NULL;
    w->relay = 0;
    inbuf_free(&w->coll);
    w->collect = 0;
    worker_resume_loop(g, w);
}

int worker_broadcast_loop(struct gw *g, struct group *grp, struct client *c, struct req *r)
{
    int up = 0;
    for (struct worker *w = grp->workers; w; w = w->gnext)
        if ((w->st == WS_IDLE || w->st == WS_BUSY) && !w->removed)
            up++;
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
    for (struct worker *w = grp->workers; w; w = w->gnext) {
        if (!((w->st == WS_IDLE || w->st == WS_BUSY) && !w->removed))
            continue;
        struct bnode *b = malloc(sizeof *b);
        if (!b) {
            bmsg_release(g, m);
            continue;
        }
        b->m = m;
        b->next = NULL;
        if (w->bq_tail)
            w->bq_tail->next = b;
        else
            w->bq_head = b;
        w->bq_tail = b;
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
    w->cl = NULL;
    if (c && w->st == WS_BUSY) {
        client_set_worker(c, NULL);
        if (w->async_run) {
            client_head_done_loop(g, c);
        } else if (!w->sent_any) {
            client_error_loop(g, c, c->head, "qgate: worker %s lost", w->addr);
        } else {
            conn_close(g, &c->c, "worker lost in the middle of the reply");
        }
    }
    drop_broadcasts(g, w);
    inbuf_free(&w->coll);
    w->hdr_have = 0;
    w->left = 0;
    w->swallow = 0;
    w->paused = 0;
    w->collect = 0;
    w->async_run = 0;
    int was_up = w->st == WS_IDLE || w->st == WS_BUSY;
    if (was_up)
        w->grp->nup--;
    worker_set_state(w, WS_DOWN);
    if (w->removed) {
        struct group *grp = w->grp;
        for (struct worker **pp = &grp->workers; *pp; pp = &(*pp)->gnext)
            if (*pp == w) {
                *pp = w->gnext;
                grp->nworkers--;
                break;
            }
        w->c.closing = 1;
        w->c.next_closed = g->closed;
        g->closed = &w->c;
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
    if (w->c.fd >= 0) {
        conn_close(g, &w->c, "removed from the configuration");
        return;
    }
    worker_teardown(g, w); /* down: no socket, nothing running; unlink and free */
}

int worker_busy_count(const struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++)
        for (struct worker *w = g->groups[i].workers; w; w = w->gnext)
            n += w->st == WS_BUSY;
    return n;
}

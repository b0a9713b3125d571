/* client.c: the client side: accept, q's handshake, framing, the per-client request FIFO
 * (answered in order), and the replies. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"
#include "auth.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "net.h"

#define ST_NAME(e) #e,
static const char *const state_names[] = {CLIENT_STATES(ST_NAME)};
#undef ST_NAME

const char *client_state_name(int st) { return st >= 0 && st <= CS_CLOSING ? state_names[st] : "?"; }

/* The one setter of a client's state; logs the transition at debug level. */
static void client_set_state(struct client *c, enum client_state st)
{
    log_debug(c->c.name, "state %s -> %s", client_state_name(c->st), client_state_name(st));
    c->st = (uint8_t)st;
}

static void update_name(struct client *c)
{
    snprintf(c->c.name, sizeof c->c.name, "c%u %s%s%s", c->c.id, c->peer, c->user[0] ? " " : "", c->user);
}

static void on_handshake_timeout(struct gw *g, struct timer *t)
{
    struct client *c = (struct client *)((char *)t - offsetof(struct client, tm));
    g->handshake_failures++;
    log_info(c->c.name, "handshake not done within %lld ms", (long long)g->cfg.handshake_timeout);
    conn_close(g, &c->c, "handshake timeout");
}

void client_accept_loop(struct gw *g, int lfd, int is_uds)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                log_warn(NULL, "accept: %s", strerror(errno));
            return;
        }
        if (g->nclients >= g->cfg.max_clients || g->draining) {
            log_warn(NULL, "refusing a connection: %s", g->draining ? "draining" : "max_clients reached");
            close(fd);
            continue;
        }
        struct client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->c.kind = EV_CLIENT;
        c->c.fd = -1;
        if (!is_uds)
            net_tune(fd);
        c->local = (uint8_t)(is_uds || net_peer_is_local(fd));
        if (conn_register(g, &c->c, fd, EPOLLIN | EPOLLRDHUP)) {
            close(fd);
            free(c);
            continue;
        }
        g->nclients++;
        if (is_uds)
            snprintf(c->peer, sizeof c->peer, "unix");
        else
            net_peer_name(fd, c->peer, sizeof c->peer);
        update_name(c);
        log_debug(c->c.name, "connected");
        timer_arm(g, &c->tm, g->now_ms + g->cfg.handshake_timeout, on_handshake_timeout);
    }
}

static void set_reading(struct gw *g, struct client *c, int on)
{
    uint32_t ev = on ? c->c.events | EPOLLIN : c->c.events & ~(uint32_t)EPOLLIN;
    conn_set_events(g, &c->c, ev);
}

/* Requests held past client_max_pending bytes stop reading from the client (TCP does the rest). */
static void check_pending(struct gw *g, struct client *c)
{
    if (!c->paused && c->pending > (size_t)g->cfg.client_max_pending) {
        c->paused = 1;
        set_reading(g, c, 0);
        log_debug(c->c.name, "paused: %zu bytes of requests waiting", c->pending);
    } else if (c->paused && c->pending <= (size_t)g->cfg.client_max_pending / 2 && c->st == CS_READY &&
               !g->draining) {
        c->paused = 0;
        set_reading(g, c, 1);
    }
}

static void req_free(struct req *r)
{
    free(r->msg);
    chunk_free(r->reply);
    free(r);
}

/* Drop the request bytes (sent, or answered without a worker). */
static void req_drop_msg(struct client *c, struct req *r)
{
    if (r->msg) {
        c->pending -= req_cost(r);
        free(r->msg);
        r->msg = NULL;
    }
}

static void take_messages(struct gw *g, struct client *c);
static void close_pipe(struct client *c);

static void start_local(struct gw *g, struct client *c, struct req *r, struct job *j, struct pool *p)
{
    r->state = RS_LOCAL;
    gw_submit(g, p, j, &c->c, r->seq);
}

void client_error_loop(struct gw *g, struct client *c, struct req *r, const char *fmt, ...)
{
    struct job *j = job_new(job_encode_error, JK_REPLY);
    va_list ap;
    va_start(ap, fmt);
    if (j)
        vsnprintf(j->text, sizeof j->text, fmt, ap);
    va_end(ap);
    req_drop_msg(c, r);
    if (!j) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    log_debug(c->c.name, "request %llu: error '%s", (unsigned long long)r->seq, j->text);
    start_local(g, c, r, j, g->writers);
}

static void on_queue_timeout(struct gw *g, struct timer *t)
{
    struct client *c = (struct client *)((char *)t - offsetof(struct client, tm));
    struct req *r = c->head;
    if (!r || r->state != RS_QUEUED)
        return;
    dispatch_dequeue_loop(g, c);
    g->timeouts++;
    log_info(c->c.name, "request waited %lld ms for a worker", (long long)(g->now_ms - r->t_arrive));
    client_error_loop(g, c, r, "qgate: timeout (queued %lld ms)", (long long)(g->now_ms - r->t_arrive));
    check_pending(g, c);
}

/* Start the head request: a gateway command goes to the reader pool, a broadcast to every
 * worker, anything else to its group's queue. */
static void start_head(struct gw *g, struct client *c, struct req *r)
{
    if (r->type == KIPC_SYNC && r->msg[2] == 0 && jobs_peek_command(r->msg + 8, r->len - 8)) {
        struct job *j = job_new(job_parse_command, JK_COMMAND);
        if (!j) {
            conn_close(g, &c->c, "out of memory");
            return;
        }
        j->in = r->msg;
        j->in_len = r->len;
        r->msg = NULL;
        c->pending -= req_cost(r);
        start_local(g, c, r, j, g->readers);
        return;
    }
    if (r->type == KIPC_ASYNC && c->grp->cfg.async_mode == CFG_ASYNC_BROADCAST) {
        r->state = RS_RUNNING;
        if (worker_broadcast_loop(g, c->grp, c, r) == 0) { /* no worker up to take it */
            log_warn(c->c.name, "async message dropped: no worker of group %s is up", c->grp->cfg.name);
            client_head_done_loop(g, c);
        }
        return;
    }
    if (c->grp->unavailable && r->type == KIPC_SYNC) {
        client_error_loop(g, c, r, "qgate: no worker of group %s is up", c->grp->cfg.name);
        return;
    }
    if (dispatch_enqueue_loop(g, c)) {
        g->busy_replies++;
        if (r->type == KIPC_SYNC) {
            client_error_loop(g, c, r, "qgate: busy");
            return;
        }
    }
    r->state = RS_QUEUED;
    if (g->cfg.queue_timeout > 0 && r->type == KIPC_SYNC)
        timer_arm(g, &c->tm, r->t_arrive + g->cfg.queue_timeout, on_queue_timeout);
    g->work_pending = 1; /* dispatch this iteration */
}

void client_advance_loop(struct gw *g, struct client *c)
{
    struct req *r;
    while (!c->c.closing && (r = c->head)) {
        if (r->state == RS_READY) {
            c->head = r->next;
            if (!c->head)
                c->tail = NULL;
            if (r->type == KIPC_SYNC) {
                outq_push(&c->c.out, r->reply);
                r->reply = NULL;
                conn_mark_dirty(g, &c->c);
            }
            req_free(r);
            continue;
        }
        if (r->state != RS_WAITING)
            return;
        start_head(g, c, r);
        if (c->head == r && r->state != RS_READY)
            return;
    }
    check_pending(g, c);
}

void client_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len)
{
    struct req *r = c->head;
    if (!r || r->seq != seq || r->state != RS_LOCAL) {
        free(msg);
        return;
    }
    if (r->type != KIPC_SYNC) { /* nobody waits for an async message's reply */
        free(msg);
        client_head_done_loop(g, c);
        return;
    }
    r->reply = chunk_wrap(msg, len);
    if (!r->reply) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    r->state = RS_READY;
    if (r->close_after) {
        /* the bad message's error: nothing after it is read or answered */
        for (struct req *x = r->next, *n; x; x = n) {
            n = x->next;
            req_drop_msg(c, x);
            req_free(x);
        }
        r->next = NULL;
        c->tail = r;
    }
    client_advance_loop(g, c);
}

void client_head_done_loop(struct gw *g, struct client *c)
{
    client_set_worker(c, NULL);
    if (c->has_pipe && !c->piped)
        close_pipe(c);
    timer_cancel(g, &c->tm);
    while (c->head && c->head->state == RS_RUNNING) {
        struct req *r = c->head;
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        req_drop_msg(c, r);
        req_free(r);
    }
    client_advance_loop(g, c);
}

/* A header the gateway cannot accept: answer 'qgate: badmsg, after the replies owed, then close. */
static void bad_message(struct gw *g, struct client *c, const char *why)
{
    g->badmsgs++;
    log_info(c->c.name, "bad message: %s", why);
    client_set_state(c, CS_FLUSHING);
    set_reading(g, c, 0);
    inbuf_free(&c->c.in);
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    r->seq = c->next_seq++;
    r->type = KIPC_SYNC;
    r->close_after = 1;
    r->t_arrive = g->now_ms;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    client_error_loop(g, c, r, "qgate: badmsg %s", why);
}

/* Accept the client: the capability byte, its group, and on to requests. */
static void finish_handshake(struct gw *g, struct client *c)
{
    if (outq_copy(&c->c.out, &c->cap, 1)) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    conn_mark_dirty(g, &c->c);
    timer_cancel(g, &c->tm);
    c->grp = dispatch_route(g, c->user);
    client_set_state(c, CS_READY);
    g->handshakes++;
    log_debug(c->c.name, "handshake: capability %d, group %s", c->cap, c->grp->cfg.name);
}

static int do_handshake(struct gw *g, struct client *c)
{
    struct kipc_hs hs;
    qg_status st = kipc_hs_parse(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), KIPC_HS_MAX_DEFAULT, &hs);
    if (st == QG_AGAIN)
        return 0;
    if (st != QG_OK) {
        g->handshake_failures++;
        log_info(c->c.name, "handshake longer than %d bytes", KIPC_HS_MAX_DEFAULT);
        conn_close(g, &c->c, "handshake too long");
        return -1;
    }
    snprintf(c->user, sizeof c->user, "%.*s", (int)QG_MIN(hs.user_len, sizeof c->user - 1), hs.user);
    for (char *p = c->user; *p; p++)
        if (*p < 32 || *p > 126)
            *p = '?';
    update_name(c);
    c->cap = kipc_cap_negotiate(hs.cap, KIPC_CAP_MAX);
    if (!g->auth) { /* any credentials are accepted until a users file is configured */
        inbuf_consume(&c->c.in, hs.len);
        finish_handshake(g, c);
        return 0;
    }
    /* hashing is not the loop's work: a reader checks, the client waits in AUTH */
    struct job *j = job_new(job_check_credentials, JK_AUTH);
    size_t clen = hs.pass_len ? hs.user_len + 1 + hs.pass_len : hs.user_len;
    if (!j || !(j->in = malloc(clen ? clen : 1))) {
        job_free(j);
        conn_close(g, &c->c, "out of memory");
        return -1;
    }
    memcpy(j->in, inbuf_data(&c->c.in), clen);
    j->in_len = clen;
    j->ctx = auth_ref(g->auth);
    j->ctx_free = auth_unref;
    inbuf_consume(&c->c.in, hs.len);
    client_set_state(c, CS_AUTH);
    set_reading(g, c, 0);
    gw_submit(g, g->readers, j, &c->c, 0);
    return 0;
}

static struct ustate *user_state(struct gw *g, const char *name)
{
    for (struct ustate *u = g->users; u; u = u->next)
        if (!strcmp(u->name, name))
            return u;
    struct ustate *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    snprintf(u->name, sizeof u->name, "%s", name);
    u->next = g->users;
    g->users = u;
    return u;
}

void client_set_worker(struct client *c, struct worker *w)
{
    if (c->us && !c->w && w)
        c->us->inflight++;
    else if (c->us && c->w && !w)
        c->us->inflight--;
    c->w = w;
}

void client_auth_done_loop(struct gw *g, struct client *c, int ok, int admin, int max_conns, int max_inflight)
{
    if (c->st != CS_AUTH)
        return;
    if (!ok) {
        g->handshake_failures++;
        log_warn(c->c.name, "access denied: user '%s' from %s", c->user, c->peer);
        conn_close(g, &c->c, "bad credentials ('access)");
        return;
    }
    struct ustate *u = user_state(g, c->user);
    if (!u) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    u->admin = (uint8_t)admin; /* the users file as loaded now */
    u->max_conns = max_conns;
    u->max_inflight = max_inflight;
    if (u->max_conns > 0 && u->conns >= u->max_conns) {
        g->handshake_failures++;
        log_warn(c->c.name, "user '%s' already has %d connections (max_conns): refused", c->user, u->conns);
        conn_close(g, &c->c, "over max_conns ('access)");
        return;
    }
    u->conns++;
    c->us = u;
    finish_handshake(g, c);
    set_reading(g, c, 1);
    take_messages(g, c);
}

/* Turn whole messages at the front of the input into requests (frames budget permitting). */
static void take_messages(struct gw *g, struct client *c)
{
    int frames = 0;
    while (c->st == CS_READY && !c->c.closing) {
        struct kipc_hdr h;
        size_t need;
        const char *why;
        qg_status st = kipc_frame_check(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), (uint64_t)g->cfg.max_message,
                                        &h, &need, &why);
        if (st == QG_ERR) {
            bad_message(g, c, why);
            return;
        }
        if (st == QG_AGAIN)
            break;
        if (frames == g->cfg.frames_budget) {
            if (!c->in_backlog) {
                c->in_backlog = 1;
                c->next_backlog = g->backlog;
                g->backlog = c;
            }
            g->work_pending = 1;
            break;
        }
        frames++;
        uint8_t *msg = inbuf_take(&c->c.in, (size_t)h.len);
        if (!msg) {
            conn_close(g, &c->c, "out of memory");
            return;
        }
        if (h.type == KIPC_RESPONSE) { /* the answer to a worker's nested request */
            struct conn *wc = c->nested_gen ? conn_lookup(g, c->nested_id, c->nested_gen) : NULL;
            c->nested_id = c->nested_gen = 0;
            if (wc && wc->kind == EV_WORKER)
                worker_nested_reply_loop(g, (struct worker *)wc, msg, (size_t)h.len);
            else {
                log_warn(c->c.name, "response message nobody asked for: dropped");
                free(msg);
            }
            continue;
        }
        struct req *r = calloc(1, sizeof *r);
        if (!r) {
            free(msg);
            conn_close(g, &c->c, "out of memory");
            return;
        }
        r->seq = c->next_seq++;
        r->type = h.type;
        r->msg = msg;
        r->len = (size_t)h.len;
        r->t_arrive = g->now_ms;
        c->pending += req_cost(r);
        if (c->tail)
            c->tail->next = r;
        else
            c->head = r;
        c->tail = r;
    }
    inbuf_release_idle(&c->c.in);
    client_advance_loop(g, c);
}

void client_backlog_loop(struct gw *g)
{
    struct client *list = g->backlog;
    g->backlog = NULL;
    while (list) {
        struct client *c = list;
        list = c->next_backlog;
        c->in_backlog = 0;
        if (!c->c.closing)
            take_messages(g, c);
    }
}

static void client_read_loop(struct gw *g, struct client *c)
{
    size_t budget = (size_t)g->cfg.read_budget;
    while (budget && !c->c.closing && (c->st == CS_HANDSHAKE || c->st == CS_READY) && !c->paused) {
        size_t want = 16384;
        size_t avail = inbuf_avail(&c->c.in);
        if (c->st == CS_READY && avail >= KIPC_HDR_LEN) {
            struct kipc_hdr h;
            const char *why;
            if (kipc_hdr_parse(inbuf_data(&c->c.in), avail, (uint64_t)g->cfg.max_message, &h, &why) == QG_OK &&
                h.len > avail)
                want = QG_MAX(want, (size_t)h.len - avail); /* grows with what arrives */
        }
        want = QG_MIN(want, budget);
        if (inbuf_reserve(&c->c.in, avail + want)) {
            conn_close(g, &c->c, "out of memory");
            return;
        }
        ssize_t n = read(c->c.fd, c->c.in.p + c->c.in.len, want);
        if (n == 0) {
            conn_close(g, &c->c, "client closed the connection");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                conn_close(g, &c->c, strerror(errno));
            break;
        }
        c->c.in.len += (size_t)n;
        budget -= (size_t)n;
        if (c->st == CS_HANDSHAKE && do_handshake(g, c))
            return;
        if (c->st == CS_READY && !c->in_backlog)
            take_messages(g, c);
        if ((size_t)n < want)
            break;
    }
    if (budget == 0)
        g->work_pending = 1;
}

static void on_linger_timeout(struct gw *g, struct timer *t)
{
    struct client *c = (struct client *)((char *)t - offsetof(struct client, tm));
    conn_close(g, &c->c, "closed after a bad message");
}

void client_linger_loop(struct gw *g, struct client *c)
{
    if (c->st != CS_FLUSHING)
        return;
    client_set_state(c, CS_LINGER);
    shutdown(c->c.fd, SHUT_WR);
    c->paused = 0;
    set_reading(g, c, 1);
    timer_arm(g, &c->tm, g->now_ms + 2000, on_linger_timeout);
}

/* Read and drop whatever the client still sends, until it closes. */
static void linger_read(struct gw *g, struct client *c)
{
    uint8_t buf[4096];
    for (int i = 0; i < 64; i++) {
        ssize_t n = read(c->c.fd, buf, sizeof buf);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_close(g, &c->c, "closed after a bad message");
        return;
    }
}

void client_on_event_loop(struct gw *g, struct client *c, uint32_t ev)
{
    if (ev & EPOLLOUT)
        conn_flush_loop(g, &c->c);
    if (c->c.closing)
        return;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        if (c->st == CS_LINGER) {
            linger_read(g, c);
            return;
        }
        if (c->paused || c->st == CS_FLUSHING || c->st == CS_AUTH) {
            /* not reading: only notice a peer that went away */
            if (ev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
                conn_close(g, &c->c, "client closed the connection");
            return;
        }
        client_read_loop(g, c);
    }
}

#define PIPE_SIZE (1 << 20)

size_t client_pipe_room_loop(struct gw *g, struct client *c)
{
    (void)g;
    if (!c->has_pipe) {
        int p[2];
        if (pipe2(p, O_NONBLOCK | O_CLOEXEC))
            return 0;
        int cap = fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE);
        if (cap <= 0)
            cap = fcntl(p[1], F_GETPIPE_SZ);
        c->pipe_rd = p[0];
        c->pipe_wr = p[1];
        c->pipe_cap = cap > 0 ? (size_t)cap : 65536;
        c->has_pipe = 1;
    }
    return c->pipe_cap - c->piped;
}

static void close_pipe(struct client *c)
{
    if (c->has_pipe) {
        close(c->pipe_rd);
        close(c->pipe_wr);
        c->has_pipe = 0;
        c->piped = 0;
    }
}

int client_pipe_flush_loop(struct gw *g, struct client *c)
{
    size_t budget = (size_t)g->cfg.write_budget;
    while (c->piped && budget) {
        ssize_t n = splice(c->pipe_rd, NULL, c->c.fd, NULL, QG_MIN(c->piped, budget),
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            c->piped -= (size_t)n;
            budget -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        conn_close(g, &c->c, n == 0 ? "client closed the connection" : strerror(errno));
        return -1;
    }
    if (!c->piped && !c->w)
        close_pipe(c); /* memory follows active connections */
    if (c->w && c->w->paused && c->piped <= c->pipe_cap / 2 && c->c.out.bytes <= (size_t)g->cfg.client_low_water)
        worker_resume_loop(g, c->w);
    if (c->piped && !budget) {
        conn_mark_dirty(g, &c->c);
        g->work_pending = 1;
    }
    return 0;
}

void client_output_drained_loop(struct gw *g, struct client *c)
{
    if (c->w && c->w->paused)
        worker_resume_loop(g, c->w);
}

void client_pause_all_loop(struct gw *g)
{
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == EV_CLIENT && !x->closing) {
            struct client *c = (struct client *)x;
            c->paused = 1;
            set_reading(g, c, 0);
        }
    }
}

void client_teardown(struct gw *g, struct client *c)
{
    timer_cancel(g, &c->tm);
    close_pipe(c);
    if (c->queued)
        dispatch_dequeue_loop(g, c);
    if (c->w) {
        worker_client_gone_loop(g, c->w);
        client_set_worker(c, NULL);
    }
    if (c->us)
        c->us->conns--;
    for (struct req *r = c->head, *n; r; r = n) {
        n = r->next;
        req_free(r);
    }
    c->head = c->tail = NULL;
    c->pending = 0;
}

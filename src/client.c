/* client.c: the client side: accept, q's handshake, framing and validation, the per-client
 * request FIFO (answered in order; what a client sent before it left still runs), replies,
 * and the output bound (backpressure, client_stall_timeout). */
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
#include "kcodec.h"
#include "kipc.h"
#include "log.h"
#include "net.h"

/* Bodies up to this size are validated on the loop as they arrive: walking them costs no more
 * than copying them would (bench-codec, "validate small"); larger or compressed ones are
 * validated on the reader pool before they run. */
#define VALIDATE_ON_LOOP_MAX 16384
/* What is read from a client whose input ended, to run what it sent before it left. */
#define GONE_DRAIN_MAX ((size_t)64 << 20)

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
    snprintf(c->c.name, sizeof c->c.name, "c%llu %s%s%s", (unsigned long long)c->serial, c->peer,
             c->user[0] ? " " : "", c->user);
}

static struct client *of_timer(struct timer *t, size_t off) { return (struct client *)((char *)t - off); }

static void on_handshake_timeout(struct gw *g, struct timer *t)
{
    struct client *c = of_timer(t, offsetof(struct client, tm));
    g->handshake_failures++;
    log_info(c->c.name, "handshake not done within %lld ms", (long long)g->cfg.handshake_timeout);
    conn_close(g, &c->c, "handshake timeout");
}

/* accept failed for want of file descriptors: give up the reserve one, accept and close the
 * connection at once (the client sees a close, as when q is out of fds), take the reserve
 * back. Without it the listener, level-triggered, would wake the loop for ever. */
static void refuse_for_emfile(struct gw *g, int lfd)
{
    g->emfile_refused++;
    if (g->now_ms - g->emfile_logged_ms >= 1000) {
        log_warn(NULL, "out of file descriptors: refusing connections (%llu so far)",
                 (unsigned long long)g->emfile_refused);
        g->emfile_logged_ms = g->now_ms;
    }
    if (g->reserve_fd < 0)
        return;
    close(g->reserve_fd);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
    g->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void client_accept_loop(struct gw *g, int lfd, int is_uds)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                refuse_for_emfile(g, lfd);
            else if (errno != EAGAIN && errno != EINTR)
                log_warn(NULL, "accept: %s", strerror(errno));
            return;
        }
        if (g->nclients >= g->cfg.max_clients || g->draining) {
            log_warn(NULL, "refusing a connection: %s", g->draining ? "draining" : "max_clients reached");
            close(fd);
            continue;
        }
        if (!is_uds)
            net_tune(fd);
        client_adopt_loop(g, fd, is_uds, is_uds || net_peer_is_local(fd));
    }
}

struct client *client_adopt_loop(struct gw *g, int fd, int is_uds, int local)
{
    struct client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->c.kind = EV_CLIENT;
    c->c.fd = -1;
    c->local = (uint8_t)local;
    STAILQ_INIT(&c->reqs);
    STAILQ_INIT(&c->calls);
    if (conn_register(g, &c->c, fd, EPOLLIN | EPOLLRDHUP)) {
        close(fd);
        free(c);
        return NULL;
    }
    c->serial = ++g->next_serial;
    g->nclients++;
    if (is_uds)
        snprintf(c->peer, sizeof c->peer, "unix");
    else
        net_peer_name(fd, c->peer, sizeof c->peer);
    update_name(c);
    log_debug(c->c.name, "connected");
    timer_arm(g, &c->tm, g->now_ms + g->cfg.handshake_timeout, on_handshake_timeout);
    return c;
}

static void set_reading(struct gw *g, struct client *c, int on)
{
    uint32_t ev = on ? c->c.events | EPOLLIN | EPOLLRDHUP : c->c.events & ~(uint32_t)(EPOLLIN | EPOLLRDHUP);
    conn_set_events(g, &c->c, ev);
}

/* Does a worker wait for c's answer to a callback? */
static int owes_answer(struct gw *g, const struct client *c)
{
    const struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!k->cancelled && conn_lookup(g, k->w_id, k->w_gen))
            return 1;
    return 0;
}

/* Requests held past client_max_pending bytes stop reading from the client (TCP does the rest),
 * except while it owes a worker the answer to a callback: that answer may be behind what it
 * has sent since, and the worker, blocked until it comes, is what drains the client's queue. */
static void check_pending(struct gw *g, struct client *c)
{
    int owes = c->ncalls && owes_answer(g, c);
    if (c->paused && owes && c->st == CS_READY && !g->draining && !c->eof) {
        c->paused = 0;
        set_reading(g, c, 1);
    } else if (!c->paused && c->pending > (size_t)g->cfg.client_max_pending && !owes) {
        c->paused = 1;
        set_reading(g, c, 0);
        log_debug(c->c.name, "paused: %zu bytes of requests waiting", c->pending);
    } else if (c->paused && c->pending <= (size_t)g->cfg.client_max_pending / 2 && c->st == CS_READY &&
               !g->draining && !c->eof) {
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

static void pop_head(struct client *c)
{
    struct req *r = client_head(c);
    STAILQ_REMOVE_HEAD(&c->reqs, link);
    req_drop_msg(c, r);
    req_free(r);
}

/* Drop every request behind the head (a bad message: nothing after it is answered). */
static void drop_behind_head(struct client *c)
{
    struct req *r = client_head(c);
    STAILQ_REMOVE_HEAD(&c->reqs, link);
    while (client_head(c))
        pop_head(c);
    STAILQ_INSERT_HEAD(&c->reqs, r, link);
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
    if (r == client_head(c))
        timer_cancel(g, &c->tm); /* its queue timeout */
    if (!j) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    log_debug(c->c.name, "request %llu: error '%s", (unsigned long long)r->seq, j->text);
    start_local(g, c, r, j, g->writers);
}

static void on_queue_timeout(struct gw *g, struct timer *t)
{
    struct client *c = of_timer(t, offsetof(struct client, tm));
    struct req *r = client_head(c);
    if (!r || r->state != RS_QUEUED)
        return;
    dispatch_dequeue_loop(g, c);
    g->timeouts++;
    log_info(c->c.name, "request waited %lld ms for a worker", (long long)(g->now_ms - r->t_arrive));
    client_error_loop(g, c, r, "qgate: timeout (queued %lld ms)", (long long)(g->now_ms - r->t_arrive));
    check_pending(g, c);
}

static int group_has_worker_up(const struct group *grp)
{
    const struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink)
        if ((w->st == WS_IDLE || w->st == WS_BUSY) && !w->removed)
            return 1;
    return 0;
}

/* Start the head request: a body to validate goes to a reader first, a gateway command to a
 * reader, a broadcast to every worker up, anything else to its group's queue. It never
 * finishes here, so the FIFO is walked by client_advance_loop alone, without recursion. */
/* Hand request r's bytes to a reader job (it owns them now): validation or a command. */
static void to_reader(struct gw *g, struct client *c, struct req *r, job_fn fn, int kind, int state)
{
    struct job *j = job_new(fn, kind);
    if (!j) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    j->in = r->msg;
    j->in_len = r->len;
    j->aux[0] = g->cfg.max_message;
    r->msg = NULL;
    c->pending -= req_cost(r);
    r->state = (uint8_t)state;
    gw_submit(g, g->readers, j, &c->c, r->seq);
}

static void start_head(struct gw *g, struct client *c, struct req *r)
{
    if (r->unchecked) {
        to_reader(g, c, r, job_validate_msg, JK_CHECK, RS_CHECKING);
        return;
    }
    int cmd = r->type == KIPC_SYNC ? jobs_peek_command(r->msg, r->len) : 0;
    if (cmd < 0) {
        client_error_loop(g, c, r, "qgate: bad command: a command is .qgate.name[] or (`.qgate.name; arg), "
                                   "under %d bytes", GWCMD_MAX_LEN);
        return;
    }
    if (cmd) {
        to_reader(g, c, r, job_parse_command, JK_COMMAND, RS_LOCAL);
        return;
    }
    if (r->type == KIPC_ASYNC && c->grp->cfg.async_mode == CFG_ASYNC_BROADCAST && group_has_worker_up(c->grp)) {
        r->state = RS_RUNNING;
        if (worker_broadcast_loop(g, c->grp, c, r))
            return;
        r->state = RS_WAITING; /* out of memory: it waits in the queue like the rest */
    }
    if (c->grp->unavailable && r->type == KIPC_SYNC) {
        client_error_loop(g, c, r, "qgate: no worker of group %s is up", c->grp->cfg.name);
        return;
    }
    if (dispatch_enqueue_loop(g, c)) { /* full: sync requests only */
        g->busy_replies++;
        client_error_loop(g, c, r, "qgate: busy");
        return;
    }
    r->state = RS_QUEUED;
    if (g->cfg.queue_timeout > 0 && r->type == KIPC_SYNC)
        timer_arm(g, &c->tm, r->t_arrive + g->cfg.queue_timeout, on_queue_timeout);
    g->work_pending = 1; /* dispatch this iteration */
}

int client_output_full(const struct gw *g, const struct client *c)
{
    return c->c.out.bytes + c->piped + c->held.bytes > (size_t)g->cfg.client_high_water;
}

void client_stream_end_loop(struct gw *g, struct client *c)
{
    c->streaming = 0;
    if (!c->held.head)
        return;
    while (c->held.head) { /* in the order they came */
        struct chunk *ch = c->held.head;
        c->held.head = ch->next;
        outq_push(&c->c.out, ch);
    }
    c->held = (struct outq){0};
    conn_mark_dirty(g, &c->c);
}

/* Whole messages still unread in the input buffer? */
static int has_whole_message(const struct gw *g, const struct client *c)
{
    struct kipc_hdr h;
    size_t need;
    const char *why;
    return kipc_frame_check(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), (uint64_t)g->cfg.max_message, &h, &need,
                            &why) == QG_OK;
}

/* A client whose input ended goes once everything it sent has run. */
static void finish_if_gone(struct gw *g, struct client *c)
{
    if (c->eof && !c->c.closing && c->st != CS_AUTH && !client_head(c) && !c->in_backlog &&
        !has_whole_message(g, c))
        conn_close(g, &c->c, "client closed the connection");
}

void client_advance_loop(struct gw *g, struct client *c)
{
    struct req *r;
    while (!c->c.closing && (r = client_head(c))) {
        if (r->state == RS_READY) {
            STAILQ_REMOVE_HEAD(&c->reqs, link);
            log_debug(c->c.name, "request %llu: reply of %zu bytes%s", (unsigned long long)r->seq,
                      r->reply ? r->reply->len : 0, c->c.fd >= 0 ? "" : " dropped (the client has gone)");
            if (r->type == KIPC_SYNC && c->c.fd >= 0) {
                outq_push(&c->c.out, r->reply);
                r->reply = NULL;
                conn_mark_dirty(g, &c->c);
            }
            req_free(r);
            continue;
        }
        /* a client that reads nothing gets nothing more: its output bounds what it costs */
        if (r->state == RS_WAITING && !client_output_full(g, c))
            start_head(g, c, r);
        break;
    }
    if (c->c.closing)
        return;
    check_pending(g, c);
    finish_if_gone(g, c);
}

void client_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len)
{
    /* the head's, usually; a bad message's error is made as soon as it is seen, behind the
     * requests still owed, and waits there for its turn */
    struct req *r;
    STAILQ_FOREACH(r, &c->reqs, link)
        if (r->seq == seq)
            break;
    if (!r || r->state != RS_LOCAL) {
        free(msg);
        return;
    }
    if (r->type != KIPC_SYNC) { /* nobody waits for an async message's reply */
        free(msg);
        if (r == client_head(c))
            client_head_done_loop(g, c);
        return;
    }
    r->reply = chunk_wrap(msg, len);
    if (!r->reply) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    r->state = RS_READY;
    if (r->close_after && r == client_head(c)) /* the bad message's error: nothing after it */
        drop_behind_head(c);
    client_advance_loop(g, c);
}

void client_head_done_loop(struct gw *g, struct client *c)
{
    client_set_worker(c, NULL);
    if (c->has_pipe && !c->piped)
        close_pipe(c);
    timer_cancel(g, &c->tm);
    while (client_head(c) && client_head(c)->state == RS_RUNNING)
        pop_head(c);
    client_advance_loop(g, c);
}

/* Stop reading after a bad message: 'qgate: badmsg comes after the replies owed, then close. */
static void stop_for_bad_message(struct gw *g, struct client *c, const char *why)
{
    g->badmsgs++;
    log_info(c->c.name, "bad message: %s", why);
    client_cancel_calls_loop(g, c, NULL); /* q reads nothing after a bad message: no answer comes */
    if (c->st != CS_GONE)
        client_set_state(c, CS_FLUSHING);
    set_reading(g, c, 0);
    inbuf_free(&c->c.in);
    if (c->in_backlog) {
        TAILQ_REMOVE(&g->backlog, c, backlog_link);
        c->in_backlog = 0;
    }
}

/* A header, or a small body, that the gateway cannot accept: its request (seq next) answers
 * 'qgate: badmsg after the replies owed. */
static void bad_message(struct gw *g, struct client *c, const char *why)
{
    stop_for_bad_message(g, c, why);
    if (c->eof) /* nobody to tell: what came before still runs */
        return;
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    r->seq = c->next_seq++;
    r->type = KIPC_SYNC;
    r->close_after = 1;
    r->t_arrive = g->now_ms;
    STAILQ_INSERT_TAIL(&c->reqs, r, link);
    client_error_loop(g, c, r, "qgate: badmsg %s", why);
}

/* The head request's body failed validation on the reader pool: it is answered 'qgate: badmsg
 * in its place, and what came after it is dropped. */
static void bad_head(struct gw *g, struct client *c, const char *why)
{
    struct req *r = client_head(c);
    drop_behind_head(c);
    stop_for_bad_message(g, c, why);
    if (c->eof) {
        pop_head(c);
        finish_if_gone(g, c);
        return;
    }
    r->type = KIPC_SYNC;
    r->close_after = 1;
    r->unchecked = 0;
    client_error_loop(g, c, r, "qgate: badmsg %s", why);
}

void client_checked_loop(struct gw *g, struct client *c, struct job *j)
{
    struct req *r = client_head(c);
    if (!r || r->seq != j->seq || r->state != RS_CHECKING)
        return;
    if (j->result) {
        bad_head(g, c, j->text);
        return;
    }
    r->msg = j->in;
    j->in = NULL;
    c->pending += req_cost(r);
    r->unchecked = 0;
    r->state = RS_WAITING;
    client_advance_loop(g, c);
}

/* Accept the client: the capability byte, its group, and on to requests. */
static void finish_handshake(struct gw *g, struct client *c)
{
    if (c->c.fd >= 0 && outq_copy(&c->c.out, &c->cap, 1)) {
        conn_close(g, &c->c, "out of memory");
        return;
    }
    conn_mark_dirty(g, &c->c);
    timer_cancel(g, &c->tm);
    c->grp = dispatch_route(g, c->us ? c->us->name : c->user);
    client_set_state(c, c->eof ? CS_GONE : CS_READY);
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

int client_callback_loop(struct gw *g, struct client *c, struct worker *w)
{
    struct call *k = calloc(1, sizeof *k);
    if (!k)
        return -1;
    k->w_id = w->c.id;
    k->w_gen = w->c.gen;
    STAILQ_INSERT_TAIL(&c->calls, k, link);
    c->ncalls++;
    check_pending(g, c);
    return 0;
}

static void tell_no_answer(struct gw *g, struct call *k)
{
    struct conn *wc = k->cancelled ? NULL : conn_lookup(g, k->w_id, k->w_gen);
    k->cancelled = 1;
    if (wc && wc->kind == EV_WORKER) {
        outq_copy(&wc->out, g->no_client_err, g->no_client_err_len);
        conn_mark_dirty(g, wc);
    }
}

void client_cancel_calls_loop(struct gw *g, struct client *c, const struct worker *w)
{
    struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!w || (k->w_id == w->c.id && k->w_gen == w->c.gen))
            tell_no_answer(g, k);
}

/* The callback a response from c answers (the oldest), taken off its list; NULL if none. */
static struct call *take_call(struct client *c)
{
    struct call *k = STAILQ_FIRST(&c->calls);
    if (k) {
        STAILQ_REMOVE_HEAD(&c->calls, link);
        c->ncalls--;
    }
    return k;
}

static void free_calls(struct client *c)
{
    struct call *k;
    while ((k = take_call(c)))
        free(k);
}

void client_set_worker(struct client *c, struct worker *w)
{
    if (c->us && !c->w && w)
        c->us->inflight++;
    else if (c->us && c->w && !w)
        c->us->inflight--;
    c->w = w;
}

void client_auth_done_loop(struct gw *g, struct client *c, int ok, const char *entry, int admin, int max_conns,
                           int max_inflight)
{
    if (c->st != CS_AUTH)
        return;
    if (!ok) {
        g->handshake_failures++;
        log_warn(c->c.name, "access denied: user '%s' from %s", c->user, c->peer);
        conn_close(g, &c->c, "bad credentials ('access)");
        return;
    }
    struct ustate *u = user_state(g, entry); /* the entry's exact name, not the printable one */
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
    if (c->c.closing)
        return;
    if (!c->eof)
        set_reading(g, c, 1);
    take_messages(g, c);
}

void client_users_reloaded_loop(struct gw *g)
{
    const struct auth_db *db = g->auth ? auth_db_of(g->auth) : NULL;
    for (struct ustate *u = g->users; u; u = u->next) {
        const struct auth_user *e = db ? auth_find(db, u->name, strlen(u->name)) : NULL;
        if (u->admin && !(e && e->admin))
            log_info(NULL, "reload: user %s is no longer an admin", u->name);
        u->admin = e ? e->admin : 0;
        u->max_conns = e ? e->max_conns : 0;
        u->max_inflight = e ? e->max_inflight : 0;
    }
}

/* A response from the client: the answer to the oldest callback relayed to it. */
static void take_response(struct gw *g, struct client *c, uint8_t *msg, size_t len)
{
    struct call *k = take_call(c);
    struct conn *wc = k && !k->cancelled ? conn_lookup(g, k->w_id, k->w_gen) : NULL;
    struct call kept = k ? *k : (struct call){0};
    int asked = k != NULL;
    free(k);
    check_pending(g, c); /* the pause for client_max_pending may apply again */
    if (!wc || wc->kind != EV_WORKER) {
        log_warn(c->c.name, asked ? "answer to a callback whose worker has gone: dropped"
                                  : "response message nobody asked for: dropped");
        free(msg);
        return;
    }
    if (msg[2] || len > VALIDATE_ON_LOOP_MAX) { /* a reader validates it before it goes on */
        struct job *j = job_new(job_validate_msg, JK_NESTED);
        if (!j) {
            free(msg);
            conn_close(g, &c->c, "out of memory");
            return;
        }
        j->in = msg;
        j->in_len = len;
        j->aux[0] = g->cfg.max_message;
        j->aux[1] = kept.w_id;
        j->aux[2] = kept.w_gen;
        gw_submit(g, g->readers, j, &c->c, 0);
        return;
    }
    struct kerr e;
    if (kcodec_validate(msg + 8, len - 8, msg[0], NULL, &e) != QG_OK) {
        free(msg);
        tell_no_answer(g, &kept); /* the worker is told its answer is not coming */
        char why[96];
        snprintf(why, sizeof why, "%s at byte %zu", e.why, e.off + 8);
        bad_message(g, c, why);
        return;
    }
    worker_nested_reply_loop(g, (struct worker *)wc, msg, len);
}

void client_nested_checked_loop(struct gw *g, struct client *c, struct job *j)
{
    struct call k = {.w_id = (uint32_t)j->aux[1], .w_gen = (uint32_t)j->aux[2]};
    struct conn *wc = conn_lookup(g, k.w_id, k.w_gen);
    if (j->result) {
        tell_no_answer(g, &k);
        bad_message(g, c, j->text);
        return;
    }
    if (wc && wc->kind == EV_WORKER) {
        worker_nested_reply_loop(g, (struct worker *)wc, j->in, j->in_len);
        j->in = NULL;
    }
}

/* Turn whole messages at the front of the input into requests (frames budget permitting). */
static void take_messages(struct gw *g, struct client *c)
{
    int frames = 0;
    while ((c->st == CS_READY || c->st == CS_GONE) && !c->c.closing) {
        struct kipc_hdr h;
        size_t need;
        const char *why;
        qg_status st = kipc_frame_check(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), (uint64_t)g->cfg.max_message,
                                        &h, &need, &why);
        if (st == QG_ERR) {
            bad_message(g, c, why);
            break;
        }
        if (st == QG_AGAIN)
            break;
        if (frames == g->cfg.frames_budget) {
            if (!c->in_backlog) {
                c->in_backlog = 1;
                TAILQ_INSERT_TAIL(&g->backlog, c, backlog_link);
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
        if (h.type == KIPC_RESPONSE) {
            take_response(g, c, msg, (size_t)h.len);
            continue;
        }
        int unchecked = h.compressed || h.len > VALIDATE_ON_LOOP_MAX;
        if (!unchecked && !(h.type == KIPC_SYNC && jobs_peek_command(msg, (size_t)h.len))) {
            struct kerr e;
            if (kcodec_validate(msg + 8, (size_t)h.len - 8, h.le, NULL, &e) != QG_OK) {
                free(msg);
                char bad[96];
                snprintf(bad, sizeof bad, "%s at byte %zu", e.why, e.off + 8);
                bad_message(g, c, bad);
                break;
            }
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
        r->unchecked = (uint8_t)unchecked;
        r->t_arrive = g->now_ms;
        c->pending += req_cost(r);
        STAILQ_INSERT_TAIL(&c->reqs, r, link);
        log_debug(c->c.name, "request %llu: %s, %zu bytes%s", (unsigned long long)r->seq, kipc_type_name(r->type),
                  r->len, unchecked ? ", validated on a reader" : "");
    }
    if (c->c.closing)
        return;
    if (c->eof && !c->in_backlog) /* a message cut by the close never arrives */
        inbuf_free(&c->c.in);
    inbuf_release_idle(&c->c.in);
    client_advance_loop(g, c);
}

void client_backlog_loop(struct gw *g)
{
    for (int n = 0; n < g->nclients + 1 && !TAILQ_EMPTY(&g->backlog); n++) {
        struct client *c = TAILQ_FIRST(&g->backlog);
        TAILQ_REMOVE(&g->backlog, c, backlog_link);
        c->in_backlog = 0;
        take_messages(g, c); /* may put it back, at the tail */
    }
}

/* The client's input ended (EOF, a reset, a failed write): it has left. What it sent before
 * still runs, in order, with nobody to answer: q runs every message it read before it sees
 * the close. The socket goes now; the client goes when its last request has run. */
void client_peer_gone_loop(struct gw *g, struct client *c, const char *why)
{
    if (c->c.closing || c->eof)
        return;
    if (c->st == CS_HANDSHAKE || c->st == CS_LINGER) {
        conn_close(g, &c->c, why);
        return;
    }
    /* what is still unread was sent before the close: take it, whatever the pause */
    size_t got = 0;
    while (c->c.fd >= 0 && (c->st == CS_READY || c->st == CS_AUTH) && got < GONE_DRAIN_MAX) {
        size_t avail = inbuf_avail(&c->c.in);
        if (inbuf_reserve(&c->c.in, avail + 65536))
            break;
        ssize_t n = read(c->c.fd, c->c.in.p + c->c.in.len, 65536);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            break;
        if (n > 0) {
            c->c.in.len += (size_t)n;
            got += (size_t)n;
        }
    }
    log_debug(c->c.name, "input ended (%s): %s (%zu bytes unread)", why,
              client_head(c) || inbuf_avail(&c->c.in) ? "its requests still run" : "nothing held", inbuf_avail(&c->c.in));
    c->eof = 1;
    c->paused = 0;
    c->streaming = 0;
    outq_clear(&c->held);
    timer_cancel(g, &c->stall_tm);
    close_pipe(c);
    conn_drop_socket(g, &c->c);
    if (c->w)
        worker_client_gone_loop(g, c->w); /* its reply is drained */
    client_cancel_calls_loop(g, c, NULL); /* a worker waiting on a callback gets an error */
    if (c->st == CS_AUTH) /* the credentials check returns first */
        return;
    client_set_state(c, CS_GONE);
    take_messages(g, c);
}

static void client_read_loop(struct gw *g, struct client *c)
{
    size_t budget = (size_t)g->cfg.read_budget;
    while (budget && !c->c.closing && c->c.fd >= 0 && (c->st == CS_HANDSHAKE || c->st == CS_READY) && !c->paused) {
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
            client_peer_gone_loop(g, c, "client closed the connection");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                client_peer_gone_loop(g, c, strerror(errno));
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
    struct client *c = of_timer(t, offsetof(struct client, tm));
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
    if (c->c.closing || c->c.fd < 0)
        return;
    if (c->st == CS_LINGER) {
        if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
            linger_read(g, c);
        return;
    }
    int reading = (c->st == CS_HANDSHAKE || c->st == CS_READY) && !c->paused;
    if (reading && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
        client_read_loop(g, c); /* reads to the end, and notices it */
    else if (ev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
        client_peer_gone_loop(g, c, "client closed the connection"); /* not reading: notice it now */
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
    while (c->piped && budget && c->c.fd >= 0) {
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
        client_peer_gone_loop(g, c, n == 0 ? "client closed the connection" : strerror(errno));
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

static void on_stall_timeout(struct gw *g, struct timer *t)
{
    struct client *c = of_timer(t, offsetof(struct client, stall_tm));
    if (!c->c.out.bytes && !c->piped)
        return;
    int64_t quiet = g->now_ms - c->stall_since;
    if (quiet < g->cfg.client_stall_timeout) {
        timer_arm(g, &c->stall_tm, c->stall_since + g->cfg.client_stall_timeout, on_stall_timeout);
        return;
    }
    g->stalls++;
    log_info(c->c.name, "accepted no byte of %zu waiting for %lld ms", c->c.out.bytes + c->piped, (long long)quiet);
    conn_close(g, &c->c, "stalled: accepted no byte of its reply within client_stall_timeout");
}

void client_flushed_loop(struct gw *g, struct client *c, size_t before, size_t wrote)
{
    size_t now = c->c.out.bytes + c->piped;
    if (before > (size_t)g->cfg.client_low_water && now <= (size_t)g->cfg.client_low_water) {
        if (c->w && c->w->paused)
            worker_resume_loop(g, c->w);
        struct req *h = client_head(c);
        if (h && h->state == RS_WAITING)
            client_advance_loop(g, c); /* it was held back by the output bound */
        if (c->c.closing)
            return;
    }
    if (c->st == CS_FLUSHING && now == 0 && !client_head(c)) {
        client_linger_loop(g, c);
        return;
    }
    if (!now) {
        timer_cancel(g, &c->stall_tm);
        return;
    }
    if (g->cfg.client_stall_timeout <= 0)
        return;
    if (wrote || !c->stall_tm.pos) /* the clock starts, or starts again, with a byte accepted */
        c->stall_since = g->now_ms;
    if (!c->stall_tm.pos)
        timer_arm(g, &c->stall_tm, c->stall_since + g->cfg.client_stall_timeout, on_stall_timeout);
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
    timer_cancel(g, &c->stall_tm);
    if (c->in_backlog) {
        TAILQ_REMOVE(&g->backlog, c, backlog_link);
        c->in_backlog = 0;
    }
    close_pipe(c);
    outq_clear(&c->held);
    dispatch_dequeue_loop(g, c);
    if (c->w) {
        worker_client_gone_loop(g, c->w);
        client_set_worker(c, NULL);
    }
    if (c->us)
        c->us->conns--;
    client_cancel_calls_loop(g, c, NULL);
    free_calls(c);
    while (client_head(c)) {
        struct req *r = client_head(c);
        STAILQ_REMOVE_HEAD(&c->reqs, link);
        req_free(r);
    }
    c->pending = 0;
}

struct client *client_by_serial(struct gw *g, uint64_t serial)
{
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == EV_CLIENT && !x->closing && ((struct client *)x)->serial == serial)
            return (struct client *)x;
    }
    return NULL;
}

struct clients_snapshot *gw_clients_snapshot(struct gw *g)
{
    struct clients_snapshot *s = calloc(1, sizeof *s + (size_t)g->nclients * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (uint32_t id = 0; id < g->next_id && s->n < g->nclients; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != EV_CLIENT || x->closing)
            continue;
        struct client *c = (struct client *)x;
        struct client_row *r = &s->rows[s->n++];
        r->id = (int64_t)c->serial;
        snprintf(r->user, sizeof r->user, "%s", c->user);
        snprintf(r->peer, sizeof r->peer, "%s", c->peer);
        snprintf(r->group, sizeof r->group, "%s", c->grp ? c->grp->cfg.name : "");
        snprintf(r->state, sizeof r->state, "%s", client_state_name(c->st));
        for (char *p = r->state; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        struct req *q;
        STAILQ_FOREACH(q, &c->reqs, link)
            r->requests++;
        r->running = c->w != NULL;
    }
    return s;
}

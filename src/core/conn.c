/* conn.c: the connection table (id, generation), epoll registration, the lists a connection
 * can be on (flush list, backlog, room waiters, a group's queue or idle list, closed list) and
 * its timers, its output (queued bytes, a splice pipe ahead of them, whole messages held for a
 * message boundary), and the single teardown path. Reading and writing its socket is stream.c's. The
 * kinds' own behaviour comes in through their struct connops. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "gw.h"
#include "log.h"
#include "net.h"
#include "pool.h"
#include "qg.h"

/* A freed id is reused only once this many others have been freed after it (and then oldest
 * first), so that a late completion or an admin's stale id meets a new generation rarely, and
 * never the next connection. */
#define ID_QUARANTINE 256

static int grow_table(struct gw *g)
{
    uint32_t cap = g->tab_cap ? g->tab_cap * 2 : 1024;
    struct conn **tab = realloc(g->tab, cap * sizeof *tab);
    if (!tab)
        return -1;
    g->tab = tab;
    uint32_t *gens = realloc(g->gens, cap * sizeof *gens);
    if (!gens)
        return -1;
    g->gens = gens;
    uint32_t *ring = malloc(cap * sizeof *ring);
    if (!ring)
        return -1;
    for (uint32_t i = 0; i < g->nfree; i++) /* unwrap the FIFO into the bigger ring */
        ring[i] = g->free_ids[(g->free_head + i) % g->tab_cap];
    free(g->free_ids);
    g->free_ids = ring;
    g->free_head = 0;
    for (uint32_t i = g->tab_cap; i < cap; i++) {
        g->tab[i] = NULL;
        g->gens[i] = 0;
    }
    g->tab_cap = cap;
    return 0;
}

static void free_id(struct gw *g, uint32_t id)
{
    g->free_ids[(g->free_head + g->nfree) % g->tab_cap] = id;
    g->nfree++;
}

static int alloc_id(struct gw *g, uint32_t *id)
{
    if (g->nfree <= ID_QUARANTINE && (g->next_id < g->tab_cap || grow_table(g) == 0)) {
        *id = g->next_id++;
        return 0;
    }
    if (!g->nfree)
        return -1;
    *id = g->free_ids[g->free_head]; /* the oldest freed */
    g->free_head = (g->free_head + 1) % g->tab_cap;
    g->nfree--;
    return 0;
}

/* Workers live in their own epoll set (served between batches), everything else in the main one. */
static int backend(const struct conn *c) { return c->kind == CONN_WORKER; }

int conn_register_loop(struct gw *g, struct conn *c, const struct connops *ops, int kind, int fd, uint32_t events)
{
    uint32_t id;
    if (alloc_id(g, &id))
        return -1;
    c->ev.ops = &ops->ev;
    c->kind = (uint8_t)kind;
    c->id = id;
    c->gen = ++g->gens[id];
    c->fd = fd;
    c->closing = 0;
    c->events = events;
    if (!c->waiters.h.tqh_last)
        conn_q_init(&c->waiters);
    if (loop_watch(g, fd, &c->ev, events, backend(c))) {
        free_id(g, id);
        c->fd = -1;
        return -1;
    }
    c->registered = 1;
    g->tab[id] = c;
    return 0;
}

struct conn *conn_lookup_loop(struct gw *g, uint32_t id, uint32_t gen)
{
    if (id >= g->tab_cap || !g->tab[id] || g->gens[id] != gen)
        return NULL;
    return g->tab[id];
}

void conn_set_events_loop(struct gw *g, struct conn *c, uint32_t events)
{
    if (c->events == events || c->fd < 0 || !c->registered)
        return;
    if (loop_modify_loop(g, c->fd, &c->ev, events, backend(c)) == 0)
        c->events = events;
}

void conn_set_reading_loop(struct gw *g, struct conn *c, int on)
{
    uint32_t bits = EPOLLIN | EPOLLRDHUP;
    on = on && !c->waits_room && !c->in_job; /* (it reads again once its message has room, or its job is done) */
    conn_set_events_loop(g, c, on ? c->events | bits : c->events & ~bits);
}

/* ---- the lists ---------------------------------------------------------------------------- */

void conn_q_init(struct connq *q)
{
    TAILQ_INIT(&q->h);
    q->n = 0;
}

void conn_wait_on_loop(struct conn *c, struct conn *target) { conn_queue_in_loop(&target->waiters, c); }

void conn_wake_all_loop(struct gw *g, struct conn *target)
{
    struct connq woken; /* taken aside: a waiter whose wait goes on puts itself back */
    conn_q_init(&woken);
    struct conn *x;
    while ((x = connq_first(&target->waiters)))
        conn_queue_in_loop(&woken, x);
    while ((x = connq_first(&woken))) {
        conn_queue_out_loop(x);
        conn_ops(x)->on_wake(g, x);
    }
}

void conn_timer_fire_loop(struct gw *g, struct timer *t)
{
    struct conn_timer *ct = (struct conn_timer *)t;
    ct->fn(g, ct->c);
}

/* ---- output ------------------------------------------------------------------------------- */

void conn_push_whole_loop(struct gw *g, struct conn *c, struct chunk *ch)
{
    outq_push(c->streaming ? &c->held : &c->out, ch);
    if (!c->streaming)
        conn_mark_owed(c);
    conn_mark_dirty_loop(g, c);
}

void conn_pipe_close_all_loop(struct conn *c)
{
    {
        close(c->pipe_rd);
        close(c->pipe_wr);
        c->has_pipe = 0;
        c->piped = 0;
    }
}

/* ---- teardown ----------------------------------------------------------------------------- */

int conn_take_socket_loop(struct gw *g, struct conn *c)
{
    int fd = c->fd;
    if (fd >= 0 && c->registered)
        loop_unwatch_loop(g, fd, backend(c));
    c->fd = -1;
    c->registered = 0;
    return fd;
}

void conn_drop_socket_loop(struct gw *g, struct conn *c)
{
    conn_unmark_dirty_loop(g, c);
    conn_pipe_close_loop(c);
    int fd = conn_take_socket_loop(g, c);
    if (fd >= 0)
        close(fd);
    size_t counted = buf_pending_bytes;
    outq_clear(&c->out);
    outq_clear(&c->held);
    conn_room_given_loop(g, counted); /* (requests that never reached their worker) */
    c->streaming = 0;
    c->events = 0;
    c->want_out = 0;
    conn_wake_loop(g, c); /* nothing of its output is left to wait for */
}

/* Off every list it can be on, its timers cancelled. */
static void leave_lists(struct gw *g, struct conn *c)
{
    conn_unmark_dirty_loop(g, c);
    conn_backlog_remove_loop(g, c);
    conn_room_leave_loop(g, c);
    conn_queue_out_loop(c);
    for (int i = 0; i < CONN_TIMERS; i++)
        conn_timer_cancel_loop(g, c, i);
}

/* Release the socket and the id; the struct lives on until the end of the iteration (clients)
 * or until it leaves the configuration (workers reconnect under the same struct). */
static void detach(struct gw *g, struct conn *c)
{
    conn_drop_socket_loop(g, c);
    if (c->id < g->tab_cap && g->tab[c->id] == c) {
        g->tab[c->id] = NULL;
        g->gens[c->id]++;
        free_id(g, c->id);
    }
    inbuf_free(&c->in);
    c->rd = (struct rdstate){0};
    c->framed = 0; /* a worker reconnecting starts with its handshake again */
    c->in_job = 0; /* (a job still out for the old socket finds it gone: its id's generation moved on) */
    c->epoch++;
}

void conn_close_loop(struct gw *g, struct conn *c, const char *why)
{
    if (c->closing || (c->kind == CONN_WORKER && c->fd < 0))
        return;
    if (c->kind == CONN_CLIENT && g->hooks.closed)
        g->hooks.closed(g->hooks.ctx, c->id, c->gen, why);
    c->closing = 1; /* while it closes: what its teardown sets off cannot close it again */
    leave_lists(g, c);
    conn_ops(c)->on_close(g, c, why); /* the kind's teardown: it logs why */
    detach(g, c);
    if (c->kind != CONN_WORKER)
        conn_free_later_loop(g, c); /* a client or a metrics connection goes for good */
    else if (!c->doomed)
        c->closing = 0; /* a worker connects again under the same struct */
}

void conn_free_later_loop(struct gw *g, struct conn *c)
{
    leave_lists(g, c);
    c->closing = 1;
    if (!c->doomed) {
        STAILQ_INSERT_TAIL(&g->closed, c, closed_link);
        loop_due_loop(g, LOOP_DUE_REAP);
    }
    c->doomed = 1;
}

void conn_reap_loop(struct gw *g)
{
    while (!STAILQ_EMPTY(&g->closed)) {
        struct conn *c = STAILQ_FIRST(&g->closed);
        STAILQ_REMOVE_HEAD(&g->closed, closed_link);
        conn_ops(c)->free(c);
    }
}

void conn_submit_loop(struct pool *p, struct job *j, const struct conn *c, uint64_t seq)
{
    j->conn_id = c->id;
    j->conn_gen = c->gen;
    j->seq = seq;
    pool_submit(p, j);
}

/* ---- listeners out of descriptors ---------------------------------------------------------- */

#define EMFILE_PAUSE_MS 100

static void on_listener_timer(struct gw *g, struct timer *t)
{
    struct listener *l = (struct listener *)((char *)t - offsetof(struct listener, tm));
    if (g->reserve_fd < 0)
        g->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    l->stopped = 0;
    if (l->fd >= 0 && loop_modify_loop(g, l->fd, &l->ev, EPOLLIN, 0))
        log_error(NULL, "a listener could not be watched again after running out of descriptors");
}

/* Does a connection wait on listener l? (accept4 takes a descriptor number before it looks for
 * one: with none left it fails with EMFILE whether one waits or not, as on the turn after the
 * last connection accepted.) */
static int one_waits(const struct listener *l)
{
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void emfile(struct gw *g, struct listener *l, int kind)
{
    if (g->reserve_fd >= 0) {
        close(g->reserve_fd);
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            conn_refused_loop(g, kind, NULL, "out of file descriptors: refusing connections%s (%llu so far)",
                              kind == REFUSED_METRICS_FDS ? " to the metrics port" : "", /* (its own count) */
                              (unsigned long long)g->refused[kind].n + 1);
        }
        g->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (g->reserve_fd >= 0)
            return;
    }
    /* no reserve to give up (taken meanwhile): rather than spin on a level-triggered listener
     * that cannot accept, stop watching it for a while (what waits is taken after, not refused) */
    if (l->stopped || l->fd < 0)
        return;
    log_limited(&g->refused[kind].log, g->loop.now_ms, LOG_WARN, NULL,
                "out of file descriptors, with no reserve descriptor: not accepting for %d ms", EMFILE_PAUSE_MS);
    l->stopped = 1;
    loop_modify_loop(g, l->fd, &l->ev, 0, 0);
    loop_timer_arm_loop(g, &l->tm, g->loop.now_ms + EMFILE_PAUSE_MS, on_listener_timer);
}

int conn_accept_loop(struct gw *g, struct listener *l, int kind, struct log_limit *lim, const char *what, int *own)
{
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0)
        return fd;
    int e = errno;
    if ((e == EMFILE || e == ENFILE) && !one_waits(l))
        return -1; /* none to refuse: nothing counted */
    if ((e == EMFILE || e == ENFILE) && own && *own >= 0) {
        close(*own);
        *own = -1;
        if ((fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
            log_limited(lim, g->loop.now_ms, LOG_WARN, NULL, "%s: out of file descriptors: one connection "
                        "taken on this listener's own reserve descriptor", what);
            return fd;
        }
        e = errno;
        *own = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (e == EMFILE || e == ENFILE)
        emfile(g, l, kind);
    else if (e != EAGAIN && e != EINTR)
        log_limited(lim, g->loop.now_ms, LOG_WARN, NULL, "%s: %s", what, strerror(e));
    return -1;
}

void conn_listener_close_loop(struct gw *g, struct listener *l)
{
    loop_timer_cancel_loop(g, &l->tm);
    l->stopped = 0;
    if (l->fd < 0)
        return;
    loop_unwatch_loop(g, l->fd, 0);
    close(l->fd);
    l->fd = -1;
}

/* ---- refusals ------------------------------------------------------------------------------- */

#define REFUSAL_NAME(e, s) s,
static const char *const refusal_names[] = {GW_REFUSALS(REFUSAL_NAME)};
#undef REFUSAL_NAME

const char *conn_refusal_name(int kind) { return kind >= 0 && kind < GW_NREFUSALS ? refusal_names[kind] : "?"; }

void conn_refused_loop(struct gw *g, int kind, const char *who, const char *fmt, ...)
{
    g->refused[kind].n++;
    va_list ap;
    va_start(ap, fmt);
    log_vlimited(&g->refused[kind].log, g->loop.now_ms, LOG_WARN, who, fmt, ap);
    va_end(ap);
}

void conn_keepalive_loop(const struct gw *g, int fd, const char *who)
{
    const struct net_keepalive ka = {.idle_ms = g->cfg.keepalive_idle,
                                     .interval_ms = g->cfg.keepalive_interval,
                                     .user_timeout_ms = g->cfg.tcp_user_timeout,
                                     .count = g->cfg.keepalive_count};
    if (net_keepalive(fd, &ka))
        log_warn(who, "keepalive: %s", strerror(errno));
}

void conn_keepalive_all_loop(struct gw *g)
{
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *c = g->tab[id];
        if (c && c->fd >= 0 && !c->closing && (c->kind == CONN_CLIENT || c->kind == CONN_WORKER))
            conn_keepalive_loop(g, c->fd, c->name);
    }
}

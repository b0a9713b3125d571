/* conn.c: the connection table (id, generation), epoll registration, the flush list, output
 * flushing and the single teardown path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"

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

/* Workers live in their own epoll set (see gw_run), everything else in the main one. */
static int epfd_of(const struct gw *g, const struct conn *c) { return c->kind == EV_WORKER ? g->wepfd : g->epfd; }

int conn_register(struct gw *g, struct conn *c, int fd, uint32_t events)
{
    uint32_t id;
    if (alloc_id(g, &id))
        return -1;
    c->id = id;
    c->gen = ++g->gens[id];
    c->fd = fd;
    c->closing = 0;
    c->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd_of(g, c), EPOLL_CTL_ADD, fd, &ev)) {
        free_id(g, id);
        c->fd = -1;
        return -1;
    }
    c->registered = 1;
    g->tab[id] = c;
    return 0;
}

struct conn *conn_lookup(struct gw *g, uint32_t id, uint32_t gen)
{
    if (id >= g->tab_cap || !g->tab[id] || g->gens[id] != gen)
        return NULL;
    return g->tab[id];
}

void conn_set_events(struct gw *g, struct conn *c, uint32_t events)
{
    if (c->events == events || c->fd < 0 || !c->registered)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd_of(g, c), EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->events = events;
}

void conn_mark_dirty(struct gw *g, struct conn *c)
{
    if (c->dirty || c->closing || c->fd < 0)
        return;
    c->dirty = 1;
    TAILQ_INSERT_TAIL(&g->dirty, c, dirty_link);
    g->ndirty++;
}

void conn_unmark_dirty(struct gw *g, struct conn *c)
{
    if (!c->dirty)
        return;
    TAILQ_REMOVE(&g->dirty, c, dirty_link);
    g->ndirty--;
    c->dirty = 0;
}

void conn_drop_socket(struct gw *g, struct conn *c)
{
    conn_unmark_dirty(g, c);
    if (c->fd >= 0) {
        if (c->registered)
            epoll_ctl(epfd_of(g, c), EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->registered = 0;
    outq_clear(&c->out);
    c->events = 0;
    c->want_out = 0;
}

/* Release the socket and the id. The struct itself lives on until the end of the iteration
 * (clients) or for good (workers reconnect under the same struct). */
static void conn_detach(struct gw *g, struct conn *c)
{
    conn_drop_socket(g, c);
    if (c->id < g->tab_cap && g->tab[c->id] == c) {
        g->tab[c->id] = NULL;
        g->gens[c->id]++;
        free_id(g, c->id);
    }
    inbuf_free(&c->in);
}

void conn_close(struct gw *g, struct conn *c, const char *why)
{
    if (c->closing)
        return;
    if (c->kind == EV_CLIENT) {
        struct client *cl = (struct client *)c;
        log_at(cl->st == CS_READY || cl->st == CS_GONE ? LOG_INFO : LOG_DEBUG, c->name, "closed: %s", why);
        if (g->hooks.closed)
            g->hooks.closed(g->hooks.ctx, c->id, c->gen, why);
        c->closing = 1;
        client_teardown(g, cl); /* off its queue, backlog, timers, worker, pipe */
        conn_detach(g, c);
        STAILQ_INSERT_TAIL(&g->closed, c, closed_link);
        g->nclients--;
    } else {
        struct worker *w = (struct worker *)c;
        if (c->fd < 0)
            return;
        log_at(w->removed ? LOG_INFO : LOG_WARN, c->name, "connection closed: %s", why);
        conn_detach(g, c);
        worker_teardown(g, w); /* fails or finishes its request, schedules the reconnect */
    }
}

int conn_flush_loop(struct gw *g, struct conn *c)
{
    if (c->fd < 0 || c->closing)
        return -1;
    struct client *cl = c->kind == EV_CLIENT ? (struct client *)c : NULL;
    size_t before = c->out.bytes + (cl ? cl->piped : 0);
    if (cl && cl->piped) {
        /* spliced bytes are older than anything in out: they go first */
        if (client_pipe_flush_loop(g, cl))
            return -1;
        if (cl->piped) {
            if (!c->want_out && !c->dirty) {
                c->want_out = 1;
                conn_set_events(g, c, c->events | EPOLLOUT);
            }
            client_flushed_loop(g, cl, before, before - cl->piped - c->out.bytes);
            return 0;
        }
    }
    if (c->out.bytes) {
        ssize_t w = outq_flush(&c->out, c->fd, (size_t)g->cfg.write_budget);
        if (w < 0) {
            const char *why = errno == EPIPE || errno == ECONNRESET ? "peer closed" : strerror(errno);
            if (cl)
                client_peer_gone_loop(g, cl, why); /* what it sent before still runs */
            else
                conn_close(g, c, why);
            return -1;
        }
        if (c->out.bytes && (size_t)w >= (size_t)g->cfg.write_budget) {
            conn_mark_dirty(g, c); /* budget used up: more next iteration */
            g->work_pending = 1;
        }
    }
    int want = c->out.bytes > 0 && !c->dirty;
    if (want != c->want_out) {
        c->want_out = (uint8_t)want;
        conn_set_events(g, c, want ? c->events | EPOLLOUT : c->events & ~(uint32_t)EPOLLOUT);
    }
    if (cl)
        client_flushed_loop(g, cl, before, before - c->out.bytes - cl->piped);
    return 0;
}

void gw_flush_dirty_loop(struct gw *g)
{
    /* only those dirty now: one that stays dirty (budget used up) goes to the tail for the
     * next iteration; a connection closed meanwhile has left the list */
    for (int n = g->ndirty; n > 0 && !TAILQ_EMPTY(&g->dirty); n--) {
        struct conn *c = TAILQ_FIRST(&g->dirty);
        conn_unmark_dirty(g, c);
        conn_flush_loop(g, c);
    }
}

void conn_reap_loop(struct gw *g)
{
    while (!STAILQ_EMPTY(&g->closed)) {
        struct conn *c = STAILQ_FIRST(&g->closed);
        STAILQ_REMOVE_HEAD(&g->closed, closed_link);
        if (c->kind == EV_WORKER)
            worker_free((struct worker *)c);
        else
            free(c);
    }
}

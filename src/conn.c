/* conn.c: the connection table (id, generation), epoll registration, output flushing and the
 * single teardown path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"

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
    uint32_t *fr = realloc(g->free_ids, cap * sizeof *fr);
    if (!fr)
        return -1;
    g->free_ids = fr;
    for (uint32_t i = g->tab_cap; i < cap; i++) {
        g->tab[i] = NULL;
        g->gens[i] = 0;
    }
    g->tab_cap = cap;
    return 0;
}

/* Workers live in their own epoll set (see gw_run), everything else in the main one. */
static int epfd_of(const struct gw *g, const struct conn *c) { return c->kind == EV_WORKER ? g->wepfd : g->epfd; }

int conn_register(struct gw *g, struct conn *c, int fd, uint32_t events)
{
    uint32_t id;
    if (g->nfree)
        id = g->free_ids[--g->nfree];
    else {
        if (g->next_id == g->tab_cap && grow_table(g))
            return -1;
        id = g->next_id++;
    }
    c->id = id;
    c->gen = ++g->gens[id];
    c->fd = fd;
    c->closing = 0;
    c->events = events;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd_of(g, c), EPOLL_CTL_ADD, fd, &ev)) {
        g->free_ids[g->nfree++] = id;
        return -1;
    }
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
    if (c->events == events || c->fd < 0)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(epfd_of(g, c), EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->events = events;
}

void conn_mark_dirty(struct gw *g, struct conn *c)
{
    if (c->dirty || c->closing)
        return;
    c->dirty = 1;
    c->next_dirty = g->dirty;
    g->dirty = c;
}

/* Release the id and the socket. The struct itself lives on until the end of the iteration
 * (clients) or for good (workers reconnect under the same struct). */
static void conn_detach(struct gw *g, struct conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd_of(g, c), EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    if (c->id < g->tab_cap && g->tab[c->id] == c) {
        g->tab[c->id] = NULL;
        g->gens[c->id]++;
        g->free_ids[g->nfree++] = c->id;
    }
    outq_clear(&c->out);
    inbuf_free(&c->in);
    c->events = 0;
    c->want_out = 0;
}

void conn_close(struct gw *g, struct conn *c, const char *why)
{
    if (c->closing || c->fd < 0)
        return;
    if (c->kind == EV_CLIENT) {
        struct client *cl = (struct client *)c;
        log_at(cl->st == CS_READY ? LOG_INFO : LOG_DEBUG, c->name, "closed: %s", why);
        c->closing = 1;
        client_teardown(g, cl);
        conn_detach(g, c);
        c->next_closed = g->closed;
        g->closed = c;
        g->nclients--;
    } else {
        struct worker *w = (struct worker *)c;
        log_at(w->removed ? LOG_INFO : LOG_WARN, c->name, "connection closed: %s", why);
        conn_detach(g, c);
        worker_teardown(g, w); /* fails or finishes its request, schedules the reconnect */
    }
}

int conn_flush_loop(struct gw *g, struct conn *c)
{
    if (c->fd < 0 || c->closing)
        return -1;
    if (c->kind == EV_CLIENT && ((struct client *)c)->piped) {
        /* spliced bytes are older than anything in out: they go first */
        struct client *cl = (struct client *)c;
        if (client_pipe_flush_loop(g, cl))
            return -1;
        if (cl->piped) {
            if (!c->want_out && !c->dirty) {
                c->want_out = 1;
                conn_set_events(g, c, c->events | EPOLLOUT);
            }
            return 0;
        }
    }
    size_t before = c->out.bytes;
    if (before) {
        ssize_t w = outq_flush(&c->out, c->fd, (size_t)g->cfg.write_budget);
        if (w < 0) {
            conn_close(g, c, errno == EPIPE || errno == ECONNRESET ? "peer closed" : strerror(errno));
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
    if (c->kind == EV_CLIENT) {
        struct client *cl = (struct client *)c;
        if (before > (size_t)g->cfg.client_low_water && c->out.bytes <= (size_t)g->cfg.client_low_water)
            client_output_drained_loop(g, cl);
        if (cl->st == CS_FLUSHING && c->out.bytes == 0 && !cl->head)
            client_linger_loop(g, cl);
    }
    return 0;
}

void conn_reap_loop(struct gw *g)
{
    while (g->closed) {
        struct conn *c = g->closed;
        g->closed = c->next_closed;
        free(c);
    }
}

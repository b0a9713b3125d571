/* tail.c: a closed client's last output, written out on its socket (tail.h). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "stream.h"
#include "tail.h"

struct tail {
    struct conn c;       /* first: a connection of kind CONN_TAIL */
    int64_t since;       /* when its output last accepted a byte (or it began) */
    uint8_t shut;        /* all written, our side shut: lingering until the peer closes */
    uint32_t from_id, from_gen; /* the client it was */
    struct tail_who who;
};

enum { TAIL_TM = 0 };

static struct tail *tail_of(struct conn *x) { return (struct tail *)x; }

static void on_timer(struct gw *g, struct conn *x)
{
    struct tail *t = tail_of(x);
    if (t->shut) {
        conn_close_loop(g, x, "its last output written; the peer did not close within the linger");
        return;
    }
    int64_t bound = g->cfg.client_stall_timeout;
    if (bound <= 0) /* (a reload lifted it) */
        return;
    if (g->loop.now_ms - t->since < bound) {
        conn_timer_arm_loop(g, x, TAIL_TM, t->since + bound, on_timer);
        return;
    }
    log_warn(x->name, "%zu bytes of its last output not written: the peer accepted none for client_stall_timeout",
             conn_pending(x));
    conn_close_loop(g, x, "stalled");
}

static void on_flushed(struct gw *g, struct conn *x, size_t before, size_t wrote)
{
    (void)before;
    struct tail *t = tail_of(x);
    if (wrote)
        t->since = g->loop.now_ms;
    if (t->shut || conn_pending(x))
        return;
    t->shut = 1; /* our FIN after its last byte; what the peer sends now is read and dropped */
    stream_linger_loop(g, x, TAIL_TM, on_timer);
}

static void on_event(struct gw *g, struct evsrc *s, uint32_t ev)
{
    struct conn *x = (struct conn *)s;
    if (x->closing)
        return;
    if (ev & EPOLLOUT)
        stream_flush_loop(g, x);
    if (x->closing || x->fd < 0)
        return;
    if (tail_of(x)->shut) {
        if (stream_lingered_loop(g, x, ev))
            conn_close_loop(g, x, "its last output written, then the peer closed");
    } else if (ev & (EPOLLHUP | EPOLLERR)) {
        conn_close_loop(g, x, "the peer is gone");
    }
}

static void on_close(struct gw *g, struct conn *x, const char *why)
{
    log_debug(x->name, "closed: %s", why);
    g->ntails--;
}

static void tail_free(struct conn *x) { free(tail_of(x)); }

static const struct connops tail_ops = {
    .ev = {.on_event = on_event},
    .on_close = on_close,
    .on_flushed = on_flushed,
    .free = tail_free,
};

void tail_timeouts_reloaded_loop(struct gw *g)
{
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_TAIL || x->closing || tail_of(x)->shut)
            continue;
        if (g->cfg.client_stall_timeout <= 0) {
            conn_timer_cancel_loop(g, x, TAIL_TM);
            continue;
        }
        if (!conn_timer_armed(x, TAIL_TM)) /* no limit until now: its clock starts now, as a client's
                                            * (helper round 37d: at f63ad4d it was closed at once) */
            tail_of(x)->since = g->loop.now_ms;
        conn_timer_arm_loop(g, x, TAIL_TM, tail_of(x)->since + g->cfg.client_stall_timeout, on_timer);
    }
}

void tail_origin(const struct conn *x, uint32_t *id, uint32_t *gen)
{
    const struct tail *t = (const struct tail *)x;
    *id = t->from_id;
    *gen = t->from_gen;
}

const struct tail_who *tail_who(const struct conn *x) { return &((const struct tail *)x)->who; }

struct conn *tail_by_serial_loop(struct gw *g, uint64_t serial)
{
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_TAIL && !x->closing && tail_of(x)->who.serial == serial)
            return x;
    }
    return NULL;
}

void tail_close_loop(struct gw *g, struct conn *c, const struct tail_who *who, const char *why)
{
    struct tail *t = NULL;
    if (!c->closing && c->kind == CONN_CLIENT) {
        g->tails++; /* (every client closed so, whatever it is still owed: cut_streams) */
        if (c->fd >= 0 && (c->out.bytes || c->piped))
            t = calloc(1, sizeof *t);
    }
    if (t) {
        int fd = conn_take_socket_loop(g, c);
        if (conn_register_loop(g, &t->c, &tail_ops, CONN_TAIL, fd, 0)) {
            close(fd); /* (what it was owed goes with the close, as before) */
            free(t);
            t = NULL;
        }
    }
    if (t) {
        struct conn *x = &t->c;
        outq_append(&x->out, &c->out); /* (its bytes stay counted as pending until written) */
        conn_mark_owed(x); /* all of it, the cut message's part too: a drain waits for it (helper round
                            * 37a: at 247b1c8 the drain ended with that part unwritten) */
        if (c->has_pipe) { /* spliced bytes first: they are older than anything in out */
            x->pipe_rd = c->pipe_rd;
            x->pipe_wr = c->pipe_wr;
            x->piped = c->piped;
            x->pipe_cap = c->pipe_cap;
            x->has_pipe = 1;
            c->has_pipe = 0;
            c->piped = 0;
        }
        t->from_id = c->id;
        t->from_gen = c->gen;
        t->who = *who;
        g->ntails++;
        snprintf(x->name, sizeof x->name, "%.120s (its last output)", c->name);
        t->since = g->loop.now_ms;
        if (g->cfg.client_stall_timeout > 0)
            conn_timer_arm_loop(g, x, TAIL_TM, t->since + g->cfg.client_stall_timeout, on_timer);
        conn_mark_dirty_loop(g, x);
        log_info(x->name, "%zu bytes queued for it before the cut: written, then the close", conn_pending(x));
    }
    conn_close_loop(g, c, why);
}

/* broadcast.c: an async message a client sends to every worker of its group (a publish to the
 * pool, docs/design.md): one copy of its bytes, referenced by a node queued on each worker up. A
 * worker sends what it owes before its next request: one sender's run of them at a time, with a
 * chaser after it, and nothing more until that chaser's reply has returned. Meanwhile what the
 * worker sends is that sender's (run.c routes it): a worker may answer its sync messages out of
 * order (-30!), so a second sender's run sent behind the first chaser could publish before that
 * chaser's reply, and be taken for the first's. The sender's turn comes back when every worker has taken the message. */
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"

#define BATCH_MAX 4096

static void bmsg_free(struct bmsg *m)
{
    buf_shared_unref(m->msg);
    free(m);
}

/* Give the client of a finished broadcast its turn back. */
static void bmsg_release(struct gw *g, struct bmsg *m)
{
    if (--m->refs > 0)
        return;
    struct conn *x = conn_lookup_loop(g, m->cl_id, m->cl_gen);
    if (x && x->kind == CONN_CLIENT) {
        struct client *c = client_of(x);
        struct req *h = client_head(c);
        if (h && h->seq == m->seq && h->state == RS_RUNNING && !c->w)
            request_head_done_loop(g, c);
    }
    bmsg_free(m);
}

/* Sent broadcasts ran (the chaser after one client's run came back: one segment), or went
 * down with the worker (all: lost, told to the test hook). */
void broadcast_forget_sent_loop(struct gw *g, struct worker *w, int lost)
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

void broadcast_drop_loop(struct gw *g, struct worker *w)
{
    /* the worker is DOWN already: releasing one can start its client's next broadcast, which
     * must not be queued here again */
    while (!STAILQ_EMPTY(&w->bq)) {
        struct bnode *b = STAILQ_FIRST(&w->bq);
        STAILQ_REMOVE_HEAD(&w->bq, link);
        worker_owes_update(w);
        if (g->hooks.lost)
            g->hooks.lost(g->hooks.ctx, b->cl_id, b->cl_gen, b->seq);
        bmsg_release(g, b->m);
        free(b);
    }
    broadcast_forget_sent_loop(g, w, 1);
}

void broadcast_free_loop(struct worker *w)
{
    while (!STAILQ_EMPTY(&w->bq)) {
        struct bnode *b = STAILQ_FIRST(&w->bq);
        STAILQ_REMOVE_HEAD(&w->bq, link);
        worker_owes_update(w);
        if (--b->m->refs == 0)
            bmsg_free(b->m);
        free(b);
    }
    while (!STAILQ_EMPTY(&w->bsent)) {
        struct bnode *b = STAILQ_FIRST(&w->bsent);
        STAILQ_REMOVE_HEAD(&w->bsent, link);
        free(b);
    }
}

/* Does w take a broadcast (or an async .qgate.all) now? Not a worker still given to a session (a
 * reload made its group a request pool): it runs nothing owed until its client has gone, and the
 * sender's turn would wait for it as long. */
static int takes_broadcast(const struct worker *w) { return worker_is_lead(w) && worker_takes_work(w) && !w->sess; }

int broadcast_queue_loop(struct gw *g, struct group *grp, struct client *c, struct req *r)
{
    int up = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink)
        up += takes_broadcast(w); /* once to each worker (its lead), not to one leaving the
                                   * configuration, disabled, or given to a client's session */
    struct bmsg *m = up ? malloc(sizeof *m) : NULL;
    uint8_t *bytes = m ? malloc(r->len) : NULL;
    struct shared *msg = bytes ? buf_shared_wrap((uint8_t *)memcpy(bytes, r->msg + r->off, r->len), r->len) : NULL;
    if (!msg) {
        free(m);
        return 0;
    }
    *m = (struct bmsg){.refs = up, .cl_id = c->c.id, .cl_gen = c->c.gen, .seq = r->seq, .msg = msg};
    TAILQ_FOREACH(w, &grp->workers, glink) {
        if (!takes_broadcast(w))
            continue;
        struct bnode *b = malloc(sizeof *b);
        if (!b) {
            bmsg_release(g, m);
            continue;
        }
        *b = (struct bnode){.m = m, .cl_id = m->cl_id, .cl_gen = m->cl_gen, .seq = m->seq};
        STAILQ_INSERT_TAIL(&w->bq, b, link);
        worker_owes_update(w);
        if (g->hooks.dispatched)
            g->hooks.dispatched(g->hooks.ctx, &w->c, c->c.id, c->c.gen, r->seq);
    }
    g->loop.dispatch_pending = 1;
    return up;
}

/* Send the run of one sender's broadcasts w owes first (up to max messages, 0: a batch), with
 * what releasing them queues next (that client's following broadcasts), and a chaser after
 * them: what the worker sends until its reply is known to be that client's. Returns the
 * chasers sent (1, or 0 if w owes nothing). */
int broadcast_send_loop(struct gw *g, struct worker *w, int max)
{
    int n = 0;
    struct bnode *prev = NULL;
    while (!STAILQ_EMPTY(&w->bq) && n < (max ? max : BATCH_MAX)) {
        struct bnode *b = STAILQ_FIRST(&w->bq);
        if (prev && (prev->cl_id != b->cl_id || prev->cl_gen != b->cl_gen))
            break;
        STAILQ_REMOVE_HEAD(&w->bq, link);
        worker_owes_update(w);
        outq_share(&w->c.out, b->m->msg); /* one copy, whatever the number of workers */
        struct bmsg *m = b->m;
        b->m = NULL;
        STAILQ_INSERT_TAIL(&w->bsent, b, link);
        prev = b;
        bmsg_release(g, m); /* may queue the client's next broadcast on w->bq */
        n++;
    }
    if (!prev)
        return 0;
    outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
    prev->seg_end = 1;
    return 1;
}


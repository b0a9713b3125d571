/* pipeline.c: pipeline = N (a group's key): while every worker of a group is busy, a waiting
 * sync request may go to a busy worker behind what it runs, up to N on a worker (struct worker
 * fol[]); q runs them in order, so each reply is its own client's as the run before it ends.
 * What a loss, a client gone and a callback do with the held ones is relay.c's. */
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"

/* pipeline > 1: c's head goes to the busy worker of grp holding the fewest requests, behind
 * what that one runs. Only a sync request, to a worker in rotation (not disabled) running a
 * client's request and owing no broadcast or fan-out part (those go first when it is free). */
int pipeline_follow_loop(struct gw *g, struct group *grp, struct client *c)
{
    struct req *r = client_head(c);
    if (r->type != KIPC_SYNC || r->fan)
        return 0;
    struct worker *best = NULL, *w;
    TAILQ_FOREACH(w, &grp->workers, glink)
        if (w->st == WS_BUSY && w->run == RUN_REQUEST && worker_takes_work(w) && !w->sess && !w->in_call &&
            w->nfol + 1 < grp->cfg.pipeline &&
            w->nfol < PIPELINE_MAX - 1 && STAILQ_EMPTY(&w->bq) && STAILQ_EMPTY(&w->fq) && (!best || w->nfol < best->nfol))
            best = w;
    if (!best)
        return -1;
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    relay_send_request_loop(g, best, c, r);
    best->fol[best->nfol++] = (struct follower){.cl = c, .id = c->c.id, .gen = c->c.gen, .seq = r->seq};
    client_set_worker_loop(c, best);
    conn_mark_dirty_loop(g, &best->c);
    log_debug(best->c.name, "holding sync request %llu of %s behind %d", (unsigned long long)r->seq, c->c.name,
              best->nfol);
    return 1;
}

/* The run has ended and a request was sent behind it: that one is the run now. */
void pipeline_next_loop(struct gw *g, struct worker *w)
{
    struct follower f = w->fol[0];
    memmove(w->fol, w->fol + 1, (size_t)--w->nfol * sizeof w->fol[0]);
    w->cl = f.cl; /* NULL: its client closed, the reply is drained */
    w->req_seq = f.seq;
    w->run = RUN_REQUEST;
    w->busy = WB_SENT; /* a new run begins, as worker_set_state_loop(BUSY) begins one */
    w->is_error = 0;
    w->t_start_us = g->loop.now_us;
    w->last_id = f.id; /* its async messages are its client's, or dropped if that has gone */
    w->last_gen = f.gen;
    worker_arm_query_timer_loop(g, w);
    log_debug(w->c.name, "running sync request %llu of %s, held behind the last", (unsigned long long)f.seq,
              f.cl ? f.cl->c.name : "a client that has gone");
}

/* pipeline.c: pipeline = N (a group's key): while every worker of a group is busy, a waiting
 * sync request may go to a busy worker behind what it runs, up to N on a worker (struct worker
 * fol[]); q runs them in order, so each reply is its own client's as the run before it ends.
 * pipeline_wait bounds the wait that buys: a request goes behind a run only when what the worker
 * runs and holds are queries learned to end, together, within it (struct learned: each query's
 * slowest recent run, by a hash of its bytes). A query never seen, once slow, timed out or
 * lost with its worker runs alone until it has shown itself fast again; one that has called its
 * client back, for good. What a loss, a client gone and a callback do with the held ones is
 * relay.c's and lost.c's. */
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"

/* Bodies longer than this are not learned: nothing is sent behind them. */
#define PIPELINE_KEY_MAX 4096

uint64_t pipeline_key(const struct gw *g, const struct group *grp, const struct req *r)
{
    if (!group_pipelines(grp) || !grp->cfg.pipeline_wait || !r->msg || r->len <= 8 || r->len > PIPELINE_KEY_MAX)
        return 0;
    if (g->hooks.query_key)
        return g->hooks.query_key(g->hooks.ctx, r->msg + r->off, r->len);
    const uint8_t *p = r->msg + r->off + 8;
    size_t n = r->len - 8;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = 0;
        memcpy(&v, p + i, n - i < 8 ? n - i : 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    return h ? h : 1;
}

/* key's slot: it holds key's query, or another's that takes it */
static struct learned *slot(const struct group *grp, uint64_t key)
{
    return (struct learned *)&grp->learned[key & (PIPELINE_LEARNED - 1)];
}

void pipeline_learn_loop(struct group *grp, uint64_t key, int64_t us)
{
    if (!key)
        return;
    struct learned *e = slot(grp, key);
    uint32_t u = us < 0 ? 0u : us > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    uint32_t decayed = e->worst_us - e->worst_us / 8; /* a slow run is forgotten over a few fast ones */
    if (e->key != key)
        *e = (struct learned){.key = key, .worst_us = u};
    else
        e->worst_us = u > decayed ? u : decayed;
}

int64_t pipeline_learned_us(const struct group *grp, uint64_t key)
{
    const struct learned *e = slot(grp, key);
    return key && e->key == key && !e->calls_back ? (int64_t)e->worst_us : -1;
}

void pipeline_calls_back_loop(struct group *grp, uint64_t key)
{
    if (!key)
        return;
    struct learned *e = slot(grp, key);
    if (e->key != key)
        *e = (struct learned){.key = key};
    e->calls_back = 1;
}

/* May a request wait behind what w runs and holds? Yes with no pipeline_wait; else only when all
 * of it is learned to end within pipeline_wait, its run so far included. */
static int may_wait_behind(const struct gw *g, const struct group *grp, const struct worker *w)
{
    int64_t budget = grp->cfg.pipeline_wait * 1000, ran = g->loop.now_us - w->t_start_us;
    if (!budget)
        return 1;
    int64_t e = pipeline_learned_us(grp, w->run_key);
    if (e < 0 || ran >= budget)
        return 0;
    e = ran > e ? ran : e;
    for (int i = 0; i < w->nfol && e < budget; i++) {
        int64_t f = pipeline_learned_us(grp, w->fol[i].key);
        if (f < 0)
            return 0;
        e += f;
    }
    return e < budget;
}

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
            w->nfol < PIPELINE_MAX - 1 && STAILQ_EMPTY(&w->bq) && STAILQ_EMPTY(&w->fq) && (!best || w->nfol < best->nfol) &&
            may_wait_behind(g, grp, w))
            best = w;
    if (!best)
        return -1;
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    uint64_t key = pipeline_key(g, grp, r);
    relay_send_request_loop(g, best, c, r);
    best->fol[best->nfol++] = (struct follower){.cl = c, .id = c->c.id, .gen = c->c.gen, .seq = r->seq, .key = key};
    grp->pipelined++;
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
    w->run_key = f.key;
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

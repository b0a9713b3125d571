/* pipeline.c: pipeline = N (a group's key): each worker is reached over N connections (its
 * lead, which takes broadcasts and fan-out parts, and N-1 others), each carrying one request at
 * a time, so a reply is always its own connection's request's, whatever order the worker answers
 * in (-30! deferred responses). While every worker of the group is busy, a waiting sync request
 * may go to a free connection of a busy worker: q finds it waiting when it is done, with no
 * round trip lost. pipeline_wait bounds the wait that buys: only when what the worker runs on
 * its other connections are queries learned to end, together, within it (core/query.c: each
 * query's slowest recent run, by a hash of its bytes). A query never seen, once slow, timed out
 * or lost with its worker runs alone until it has shown itself fast again; one that has called
 * its client back, for good. A request sent so is still held up by a learned-fast query that
 * turns slow: that is the trade, and why pipeline = 1 is the default. */
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"

/* Does lead's worker run anything on any of its connections? */
static int runs_any(const struct worker *lead)
{
    for (const struct worker *x = lead; x; x = worker_sibling(x))
        if (x->st == WS_BUSY)
            return 1;
    return 0;
}

static struct conn *idle_first(struct gw *g, struct group *grp)
{
    (void)g;
    for (struct conn *x = connq_first(&grp->idle); x; x = connq_next(x)) /* (one idle out of rotation
                                                                        * runs only what it owes) */
        if (worker_takes_work(worker_of(x)) && (!group_pipelines(grp) || !runs_any(worker_of(x))))
            return x;
    return NULL;
}

/* May a request wait for what lead's worker runs on its other connections? Yes with no
 * pipeline_wait; else only when every one of those runs is a client's request learned to end,
 * together, within pipeline_wait, none of them has taken that long, and none calls back.
 * Returns how many connections it runs on (0: none may take it), its free connection in *free. */
static int may_wait_for(const struct gw *g, const struct group *grp, struct worker *lead, struct worker **free)
{
    if (!worker_takes_work(lead) || lead->sess || !STAILQ_EMPTY(&lead->bq) || !STAILQ_EMPTY(&lead->fq) ||
        !STAILQ_EMPTY(&lead->bsent))
        return 0; /* what it owes or has just sent goes first: a client's order across the pool */
    int64_t budget = grp->cfg.pipeline_wait * 1000, e = 0;
    int busy = 0;
    *free = NULL;
    for (struct worker *x = lead; x; x = worker_sibling(x)) {
        if (x->st == WS_IDLE && !*free && worker_takes_work(x)) {
            *free = x;
            continue;
        }
        if (x->st != WS_BUSY)
            continue;
        if (x->run.kind != RUN_REQUEST || x->run.phase == WB_CALLED)
            return 0;
        busy++;
        int64_t ran = loop_stamp_us_loop(g) - run_began_us(x), l = query_learned_us(grp->queries, x->run.key);
        if (budget && (l < 0 || ran >= budget))
            return 0;
        e += ran > l ? ran : l;
    }
    return *free && (!budget || e < budget) ? busy : 0;
}

/* pipeline > 1, every worker busy: c's head goes to a free connection of the busy worker of grp
 * running the fewest requests, when it may wait for them. Only a sync request. */
static int follow(struct gw *g, struct group *grp, struct conn *x)
{
    struct client *c = client_of(x);
    struct req *r = client_head(c);
    if (r->type != KIPC_SYNC || r->fan)
        return 0;
    struct worker *best = NULL, *w, *free;
    int fewest = 0;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        int busy = worker_is_lead(w) ? may_wait_for(g, grp, w, &free) : 0;
        if (busy && (!best || busy < fewest)) {
            best = free;
            fewest = busy;
        }
    }
    if (!best)
        return -1;
    grp->pipelined++;
    log_debug(best->c.name, "sync request %llu of %s: to a worker running %d request%s, on its connection %d",
              (unsigned long long)r->seq, c->c.name, fewest, fewest > 1 ? "s" : "", best->slot);
    run_begin_loop(g, best, c);
    return 1;
}

const struct group_mode pipeline_mode = {
    .name = "pipeline",
    .idle_first = idle_first,
    .follow = follow,
    .end = run_plain_end_loop,
};

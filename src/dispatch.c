/* dispatch.c: worker groups: routing, the queue of waiting clients, idle workers, and handing
 * requests to idle workers round-robin across waiting clients. */
#include <string.h>

#include "gw.h"
#include "kipc.h"
#include "log.h"

static int in_list(const char *list, const char *user)
{
    char item[64];
    for (const char *p = list; config_list_next(&p, item, sizeof item);)
        if (user[0] && !strcmp(item, user))
            return 1;
    return 0;
}

struct group *dispatch_route(struct gw *g, const char *user)
{
    for (int i = 0; i < g->ngroups; i++)
        if (g->groups[i].cfg.users[0] && in_list(g->groups[i].cfg.users, user))
            return &g->groups[i];
    for (int i = 0; i < g->ngroups; i++)
        if (!g->groups[i].cfg.users[0])
            return &g->groups[i];
    return &g->groups[0];
}

int dispatch_enqueue_loop(struct gw *g, struct client *c)
{
    struct group *grp = c->grp;
    struct req *r = client_head(c);
    if (c->queued)
        return 0;
    if (r && r->type == KIPC_SYNC && grp->qlen >= g->cfg.max_queue && TAILQ_EMPTY(&grp->idle))
        return -1;
    TAILQ_INSERT_TAIL(&grp->queue, c, qlink);
    grp->qlen++;
    c->queued = 1;
    g->work_pending = 1;
    log_debug(c->c.name, "request %llu queued in group %s (%d waiting)", r ? (unsigned long long)r->seq : 0ULL,
              grp->cfg.name, grp->qlen);
    return 0;
}

void dispatch_dequeue_loop(struct gw *g, struct client *c)
{
    (void)g;
    if (!c->queued)
        return;
    TAILQ_REMOVE(&c->grp->queue, c, qlink);
    c->queued = 0;
    c->grp->qlen--;
}

void dispatch_worker_idle_loop(struct gw *g, struct worker *w)
{
    if (w->idle_listed)
        return;
    TAILQ_INSERT_TAIL(&w->grp->idle, w, ilink);
    w->idle_listed = 1;
    g->work_pending = 1;
}

void dispatch_worker_unidle_loop(struct gw *g, struct worker *w)
{
    (void)g;
    if (!w->idle_listed)
        return;
    TAILQ_REMOVE(&w->grp->idle, w, ilink);
    w->idle_listed = 0;
}

/* A broadcast waiting for a worker to be up: send it to every worker up now. */
static void start_broadcast(struct gw *g, struct client *c)
{
    struct req *r = client_head(c);
    dispatch_dequeue_loop(g, c);
    r->state = RS_RUNNING;
    if (!worker_broadcast_loop(g, c->grp, c, r)) { /* out of memory: it waits again */
        r->state = RS_QUEUED;
        dispatch_enqueue_loop(g, c);
    }
}

void dispatch_run_loop(struct gw *g, struct group *grp)
{
    /* broadcasts first: an idle worker sends what it owes before taking a request */
    for (struct worker *w = TAILQ_FIRST(&grp->idle), *n; w; w = n) {
        n = TAILQ_NEXT(w, ilink);
        if (!STAILQ_EMPTY(&w->bq)) {
            dispatch_worker_unidle_loop(g, w);
            worker_start_loop(g, w, NULL);
        }
    }
    /* the worker idle longest takes the client waiting longest whose user is under its
     * max_inflight (one user cannot take every worker); a broadcast takes no worker of its
     * own: it goes to every worker up */
    while (!TAILQ_EMPTY(&grp->idle) && !TAILQ_EMPTY(&grp->queue)) {
        struct worker *w = TAILQ_FIRST(&grp->idle);
        struct client *c = TAILQ_FIRST(&grp->queue);
        while (c && c->us && c->us->max_inflight > 0 && c->us->inflight >= c->us->max_inflight &&
               !(client_head(c)->type == KIPC_ASYNC && grp->cfg.async_mode == CFG_ASYNC_BROADCAST))
            c = TAILQ_NEXT(c, qlink);
        if (!c)
            break;
        if (client_head(c)->type == KIPC_ASYNC && grp->cfg.async_mode == CFG_ASYNC_BROADCAST) {
            start_broadcast(g, c);
            continue;
        }
        dispatch_worker_unidle_loop(g, w);
        dispatch_dequeue_loop(g, c);
        worker_start_loop(g, w, c);
    }
}

void dispatch_all_loop(struct gw *g)
{
    for (int i = 0; i < g->ngroups; i++)
        dispatch_run_loop(g, &g->groups[i]);
}

void dispatch_fail_group_loop(struct gw *g, struct group *grp)
{
    /* async messages cannot be answered: they wait for a worker; sync requests are told */
    for (struct client *c = TAILQ_FIRST(&grp->queue), *n; c; c = n) {
        n = TAILQ_NEXT(c, qlink);
        struct req *r = client_head(c);
        if (r && r->state == RS_QUEUED && r->type == KIPC_SYNC) {
            dispatch_dequeue_loop(g, c);
            client_error_loop(g, c, r, "qgate: no worker of group %s is up", grp->cfg.name);
        }
    }
}

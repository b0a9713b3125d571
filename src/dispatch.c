/* dispatch.c: worker groups: routing, the queue of waiting clients, idle workers, and handing
 * requests to idle workers round-robin across waiting clients. */
#include <string.h>

#include "gw.h"
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
    if (grp->qlen >= g->cfg.max_queue && !grp->idle_head)
        return -1;
    c->qnext = NULL;
    c->qprev = grp->qtail;
    if (grp->qtail)
        grp->qtail->qnext = c;
    else
        grp->qhead = c;
    grp->qtail = c;
    grp->qlen++;
    c->queued = 1;
    g->work_pending = 1;
    return 0;
}

void dispatch_dequeue_loop(struct gw *g, struct client *c)
{
    (void)g;
    if (!c->queued)
        return;
    struct group *grp = c->grp;
    if (c->qprev)
        c->qprev->qnext = c->qnext;
    else
        grp->qhead = c->qnext;
    if (c->qnext)
        c->qnext->qprev = c->qprev;
    else
        grp->qtail = c->qprev;
    c->qprev = c->qnext = NULL;
    c->queued = 0;
    grp->qlen--;
}

void dispatch_worker_idle_loop(struct gw *g, struct worker *w)
{
    struct group *grp = w->grp;
    if (w->idle_listed)
        return;
    w->inext = NULL;
    w->iprev = grp->idle_tail;
    if (grp->idle_tail)
        grp->idle_tail->inext = w;
    else
        grp->idle_head = w;
    grp->idle_tail = w;
    w->idle_listed = 1;
    g->work_pending = 1;
}

void dispatch_worker_unidle_loop(struct gw *g, struct worker *w)
{
    (void)g;
    struct group *grp = w->grp;
    if (!w->idle_listed)
        return;
    if (w->iprev)
        w->iprev->inext = w->inext;
    else
        grp->idle_head = w->inext;
    if (w->inext)
        w->inext->iprev = w->iprev;
    else
        grp->idle_tail = w->iprev;
    w->inext = w->iprev = NULL;
    w->idle_listed = 0;
}

void dispatch_run_loop(struct gw *g, struct group *grp)
{
    /* broadcasts first: an idle worker sends what it owes before taking a request */
    for (struct worker *w = grp->idle_head, *n; w; w = n) {
        n = w->inext;
        if (w->bq_head) {
            dispatch_worker_unidle_loop(g, w);
            worker_start_loop(g, w, NULL);
        }
    }
    /* the worker idle longest takes the client waiting longest whose user is under its
     * max_inflight (one user cannot take every worker) */
    while (grp->idle_head && grp->qhead) {
        struct worker *w = grp->idle_head;
        struct client *c = grp->qhead;
        while (c && c->us && c->us->max_inflight > 0 && c->us->inflight >= c->us->max_inflight)
            c = c->qnext;
        if (!c)
            break;
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
    while (grp->qhead) {
        struct client *c = grp->qhead;
        dispatch_dequeue_loop(g, c);
        if (c->head && c->head->state == RS_QUEUED)
            client_error_loop(g, c, c->head, "qgate: no worker of group %s is up", grp->cfg.name);
    }
}

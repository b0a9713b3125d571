/* dispatch.c: worker groups: routing, the queue of waiting clients, the idle workers, and
 * handing requests to idle workers round-robin across waiting clients. It knows both sides
 * only through their ops (g->front, g->back) and their connections. */
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gw.h"
#include "log.h"

struct group *dispatch_group_add_loop(struct gw *g, const struct group_cfg *gc)
{
    if (g->ngroups == CFG_MAX_GROUPS)
        return NULL;
    struct group *grp = &g->groups[g->ngroups];
    memset(grp, 0, sizeof *grp);
    TAILQ_INIT(&grp->workers);
    conn_q_init(&grp->idle);
    conn_q_init(&grp->spare);
    conn_q_init(&grp->queue);
    conn_q_init(&grp->held);
    grp->cfg = *gc;
    grp->index = g->ngroups++;
    return grp;
}

struct group *dispatch_group_find_loop(struct gw *g, const char *name)
{
    for (int i = 0; i < g->ngroups; i++)
        if (!strcmp(g->groups[i].cfg.name, name))
            return &g->groups[i];
    return NULL;
}

static int in_list(const char *list, const char *user)
{
    char item[64];
    for (const char *p = list; config_list_next(&p, item, sizeof item);)
        if (user[0] && !strcmp(item, user))
            return 1;
    return 0;
}

struct group *dispatch_route_loop(struct gw *g, const char *user)
{
    for (int i = 0; i < g->ngroups; i++)
        if (g->groups[i].cfg.users[0] && in_list(g->groups[i].cfg.users, user))
            return &g->groups[i];
    for (int i = 0; i < g->ngroups; i++)
        if (!g->groups[i].cfg.users[0])
            return &g->groups[i];
    return &g->groups[0];
}

int dispatch_admits_loop(const struct gw *g, const struct group *grp, const char *user)
{
    if (grp->cfg.users[0])
        return in_list(grp->cfg.users, user);
    for (int i = 0; i < g->ngroups; i++)
        if (g->groups[i].cfg.users[0] && in_list(g->groups[i].cfg.users, user))
            return 0;
    return 1;
}

int dispatch_full_loop(const struct gw *g, const struct group *grp)
{
    return grp->queue.n >= g->cfg.max_queue && (!grp->idle.n || grp->paused);
}

void dispatch_queue_loop(struct gw *g, struct group *grp, struct conn *client, uint64_t seq)
{
    conn_queue_in_loop(&grp->queue, client);
    g->loop.work_pending = 1; /* dispatched this iteration */
    log_debug(client->name, "request %llu queued in group %s (%d waiting)", (unsigned long long)seq, grp->cfg.name,
              grp->queue.n);
}

void dispatch_hold_loop(struct gw *g, struct group *grp, struct conn *client, uint64_t seq)
{
    (void)g;
    conn_queue_in_loop(&grp->held, client);
    log_debug(client->name, "request %llu held: group %s is paused", (unsigned long long)seq, grp->cfg.name);
}

/* Idle workers of grp that owe what (OWES_ANY, OWES_PARTS) run it. */
static void run_owed(struct gw *g, struct group *grp, int what)
{
    for (struct conn *w = connq_first(&grp->idle), *n; w; w = n) {
        n = connq_next(w);
        if (g->back->owes(w, what))
            g->back->start(g, w, NULL);
        if (n && n->q != &grp->idle) /* a start may start others (a broadcast released): again */
            n = connq_first(&grp->idle);
    }
}

void dispatch_run_loop(struct gw *g, struct group *grp)
{
    /* fan-out parts first: an idle worker runs what it was given (its broadcasts before them,
     * a client's order); with nobody waiting, its broadcasts too, in batches; with clients
     * waiting, a worker sends one owed broadcast before each request it takes (relay.c), so that
     * one client's flood of broadcasts holds nobody else's request back for long */
    run_owed(g, grp, connq_first(&grp->queue) && !grp->paused ? OWES_FIRST : OWES_ANY);
    if (grp->paused) /* what was given to its workers runs; nothing new starts */
        return;
    /* the worker idle longest takes the client waiting longest that may start (a user under
     * its max_inflight: one user cannot take every worker); a broadcast takes no worker of its
     * own: it goes to every worker up */
    struct conn *w;
    while ((w = connq_first(&grp->queue) ? g->back->idle_first(g, grp) : NULL)) {
        struct conn *c = connq_first(&grp->queue);
        int how = WAIT_NOT_NOW;
        while (c && (how = g->front->ready(g, c)) == WAIT_NOT_NOW)
            c = connq_next(c);
        if (!c)
            break;
        if (how == WAIT_BROADCAST)
            g->front->broadcast(g, c);
        else
            g->back->start(g, w, c);
    }
    run_owed(g, grp, OWES_ANY); /* what the clients left, none of them ready for a worker */
    /* pipeline > 1, every worker busy: sync requests still waiting go to free connections of the
     * busy workers running fewest, as pipeline_wait allows */
    for (struct conn *c = group_pipelines(grp) && connq_first(&grp->queue) ? connq_first(&grp->queue) : NULL, *n; c;
         c = n) {
        n = connq_next(c);
        if (g->front->ready(g, c) == WAIT_WORKER && g->back->follow(g, grp, c) < 0)
            break;
    }
}

void dispatch_all_loop(struct gw *g)
{
    for (int i = 0; i < g->ngroups; i++)
        dispatch_run_loop(g, &g->groups[i]);
}

void dispatch_fail_group_loop(struct gw *g, struct group *grp)
{
    if (grp->paused) /* held for the resume, which fails them then if no worker is up */
        return;
    /* async messages cannot be answered: they wait for a worker; sync requests are told */
    for (struct conn *c = connq_first(&grp->queue), *n; c; c = n) {
        n = connq_next(c);
        g->front->no_worker(g, c);
    }
}

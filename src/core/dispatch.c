/* dispatch.c: worker groups: routing, the queue of waiting clients, the idle workers, and
 * handing requests to idle workers round-robin across waiting clients; and the completion of
 * pauses (a .qgate.pause[] is answered once no worker of its groups runs anything, checked
 * after each dispatch phase while one waits). It knows both sides only through their ops
 * (g->front, g->back, a group's mode) and their connections. */
#include <stdio.h>
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
    if (!(grp->queries = calloc(QUERY_SLOTS, sizeof *grp->queries)))
        return NULL;
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
    for (int stale = 0; stale < 2; stale++) { /* the file's groups first, then those kept from before */
        for (int i = 0; i < g->ngroups; i++)
            if (g->groups[i].stale == stale && g->groups[i].cfg.users[0] && in_list(g->groups[i].cfg.users, user))
                return &g->groups[i];
        for (int i = 0; i < g->ngroups; i++)
            if (g->groups[i].stale == stale && !g->groups[i].cfg.users[0])
                return &g->groups[i];
    }
    return &g->groups[0];
}

int dispatch_admits_loop(const struct gw *g, const struct group *grp, const char *user)
{
    if (grp->cfg.users[0])
        return in_list(grp->cfg.users, user);
    for (int i = 0; i < g->ngroups; i++) /* (one the file no longer has lists no one) */
        if (!g->groups[i].stale && g->groups[i].cfg.users[0] && in_list(g->groups[i].cfg.users, user))
            return 0;
    return 1;
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
        if (w->owes && g->back->owes(w, what))
            g->back->start(g, w, NULL);
        if (n && n->q != &grp->idle) /* a start may start others (a broadcast released): again */
            n = connq_first(&grp->idle);
    }
}

void dispatch_run_loop(struct gw *g, struct group *grp)
{
    /* fan-out parts first: an idle worker runs what it was given (its broadcasts before them,
     * a client's order); with nobody waiting, its broadcasts too, in batches; with clients
     * waiting, a worker takes turns, one owed broadcast (alone) then a request (run.c), so that
     * one client's flood of broadcasts holds nobody else's request back for long */
    run_owed(g, grp, connq_first(&grp->queue) && !grp->paused ? OWES_FIRST : OWES_ANY);
    if (grp->paused) /* what was given to its workers runs; nothing new starts */
        return;
    /* the worker idle longest takes the client waiting longest that may start (a user under
     * its max_inflight: one user cannot take every worker); a broadcast takes no worker of its
     * own: it goes to every worker up */
    struct conn *w;
    while ((w = connq_first(&grp->queue) ? grp->mode->idle_first(g, grp) : NULL)) {
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
    for (struct conn *c = grp->mode->follow && connq_first(&grp->queue) ? connq_first(&grp->queue) : NULL, *n; c;
         c = n) {
        n = connq_next(c);
        if (g->front->ready(g, c) == WAIT_WORKER && grp->mode->follow(g, grp, c) < 0)
            break;
    }
}

/* ---- pauses ------------------------------------------------------------------------------------ */

/* A .qgate.pause[] waiting for its group (or every group: grp -1) to have nothing running. */
struct pause_wait {
    SLIST_ENTRY(pause_wait) link;
    uint32_t id, gen;
    uint64_t seq;
    int grp;
};

/* Is the pause of group index gi (-1: every group) complete? */
static int pause_done(const struct gw *g, int gi)
{
    for (int i = 0; i < g->ngroups; i++)
        if ((gi < 0 || gi == i) && g->back->busy(&g->groups[i]))
            return 0;
    return 1;
}

/* Answer the pauses that are complete, and those of a group resumed (NULL: none). */
static void answer_pauses(struct gw *g, const struct group *resumed)
{
    struct pause_wait **pp = &SLIST_FIRST(&g->pause_waits);
    while (*pp) {
        struct pause_wait *p = *pp;
        int cancel = resumed && (p->grp < 0 || p->grp == resumed->index);
        if (!cancel && !pause_done(g, p->grp)) {
            pp = &SLIST_NEXT(p, link);
            continue;
        }
        *pp = SLIST_NEXT(p, link);
        char why[CFG_NAME_MAX + 64];
        if (cancel)
            snprintf(why, sizeof why, "qgate: group %s was resumed before its pause completed", resumed->cfg.name);
        else
            snprintf(why, sizeof why, "pause of %s complete: no worker of it runs anything",
                     p->grp < 0 ? "every group" : g->groups[p->grp].cfg.name);
        g->front->pause_done(g, p->id, p->gen, p->seq, !cancel, why);
        free(p);
    }
}

int dispatch_pause_wait_loop(struct gw *g, const struct conn *client, uint64_t seq, int gi)
{
    if (pause_done(g, gi))
        return 1;
    struct pause_wait *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    *p = (struct pause_wait){.id = client->id, .gen = client->gen, .seq = seq, .grp = gi};
    SLIST_INSERT_HEAD(&g->pause_waits, p, link);
    return 0;
}

void dispatch_resumed_loop(struct gw *g, const struct group *grp) { answer_pauses(g, grp); }

void dispatch_free(struct gw *g)
{
    for (int i = 0; g->groups && i < g->ngroups; i++) {
        free(g->groups[i].queries);
        g->groups[i].queries = NULL;
    }
    while (!SLIST_EMPTY(&g->pause_waits)) {
        struct pause_wait *p = SLIST_FIRST(&g->pause_waits);
        SLIST_REMOVE_HEAD(&g->pause_waits, link);
        free(p);
    }
}

/* The dispatch phase of the iteration: every group, then the pauses that are complete. */
void dispatch_all_loop(struct gw *g)
{
    for (int i = 0; i < g->ngroups; i++)
        dispatch_run_loop(g, &g->groups[i]);
    if (!SLIST_EMPTY(&g->pause_waits))
        answer_pauses(g, NULL);
}

void dispatch_fail_group_loop(struct gw *g, struct group *grp)
{
    if (grp->paused) /* held for the resume, which fails them then if no worker is up */
        return;
    /* sync requests are told; async messages are dropped, counted, logged */
    for (struct conn *c = connq_first(&grp->queue), *n; c; c = n) {
        n = connq_next(c);
        g->front->no_worker(g, c);
    }
}

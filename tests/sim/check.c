/* check.c: the gateway's own invariants, checked after every gateway iteration: every
 * connection on exactly the lists its state says, counts that match, each client's output
 * within its bound; and the world as it stands, for the report of a failure. */
#include <string.h>
#include <sys/epoll.h>

#include "auth.h"
#include "client.h"
#include "conn.h"
#include "dispatch.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "worker.h"
#include "sim_int.h"

/* ---- the gateway's own invariants ---------------------------------------------------------- */

static int conn_live(struct gw *g, const struct conn *x)
{
    for (uint32_t id = 0; id < g->next_id; id++)
        if (g->tab[id] == x)
            return 1;
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            if (&w->c == x)
                return 1;
    }
    return 0;
}

/* A paused group's held list, and its disabled workers: a held client's head is HELD there; a
 * DISABLED worker is disabled, connected, on no list, given nothing, owing nothing; a disabled
 * worker is idle in the rotation only while it owes what it was given before. */
static void check_held_and_disabled(struct group *grp)
{
    int nh = 0;
    for (struct conn *y = connq_first(&grp->held); y; y = connq_next(y), nh++)
        if (y->kind != CONN_CLIENT || y->q != &grp->held || !conn_live(&S->g, y) || !client_head(client_of(y)) ||
            client_head(client_of(y))->state != RS_HELD || client_head(client_of(y))->grp != grp)
            fail("group %s's held list holds %s, which is not held there", grp->cfg.name, y->name);
    if (nh != grp->held.n)
        fail("group %s: held.n %d, its held list holds %d", grp->cfg.name, grp->held.n, nh);
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        int owes = !STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->fq);
        if (w->st == WS_DISABLED && (!w->disabled || w->c.fd < 0 || w->c.q || w->sess || w->run.cl || owes))
            fail("%s is DISABLED: not disabled, not connected, on a list, given a client or owing work", w->c.name);
        if (w->disabled && w->st == WS_IDLE && !owes)
            fail("%s is disabled, idle on the idle list, and owes nothing", w->c.name);
        S->res->disabled_seen += w->st == WS_DISABLED;
        S->outages += w->disabled && !S->outages; /* out of service: what needs every worker may fail */
    }
}

/* pipeline = N: each worker's connections lie one after another, its lead first, at most N of
 * them in use; a request went to a busy worker only behind client requests learned fast (with
 * pipeline_wait): of the runs of a worker's connections, by when they began, every one but the
 * last is a client's request with a query that can be learned (broadcasts and fan-out parts,
 * owed by the lead, may start whenever it is idle). */
static void check_connections(struct group *grp)
{
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        if (!worker_is_lead(w))
            continue;
        int n = 0, busy = 0, live = 0;
        const struct worker *last = NULL;
        for (struct worker *x = w; x; x = worker_sibling(x)) {
            n++;
            live += !x->removed;
            if (x->slot && (x->sess || !STAILQ_EMPTY(&x->bq) || !STAILQ_EMPTY(&x->bsent) || !STAILQ_EMPTY(&x->fq) ||
                            x->run.fp))
                fail("%s, not its worker's lead, has a session, broadcasts or fan-out parts", x->c.name);
            if (x->st != WS_BUSY || x->run.reset || /* (the reset query: owed by its connection, sent behind
                                                      * nothing: seed 25129, a reload's removed ones) */
                (worker_is_lead(x) && x->run.kind != RUN_REQUEST && x->run.kind != RUN_ASYNC))
                continue;
            busy++;
            if (!last || x->run.started_us > last->run.started_us)
                last = x;
        }
        int conns = group_pipelines(grp) ? grp->cfg.pipeline : 1;
        if (!w->removed && live > conns)
            fail("%s: %d connections to one worker, pipeline %d", w->c.name, live, conns);
        if (busy > 1)
            S->res->held += busy - 1, S->res->held_learned += S->pipeline_wait ? busy - 1 : 0;
        for (struct worker *x = w; busy > 1 && x; x = worker_sibling(x)) {
            if (x == last || x->st != WS_BUSY || x->run.reset ||
                (worker_is_lead(x) && x->run.kind != RUN_REQUEST && x->run.kind != RUN_ASYNC))
                continue;
            if (x->run.kind != RUN_REQUEST || (S->pipeline_wait && !x->run.key))
                fail("%s runs %s (query key %llu) while a request went to another connection of its worker after it",
                     x->c.name, x->run.kind == RUN_REQUEST ? "a request" : "an async batch", (unsigned long long)x->run.key);
        }
    }
}

/* What a client's output may hold: client_high_water, the splice pipe, and what each worker
 * that may feed it adds before it stops (a read, one whole message: its running request's, its
 * session's, or the workers of its group, whose broadcasts' and .qgate.all's messages come to
 * it), and one reply made here (the longest message a fake worker sends bounds each, merges of
 * them too: one per worker of the group). */
static size_t output_bound(const struct conn *x)
{
    const struct gw *g = &S->g;
    const struct client *c = (const struct client *)x;
    size_t feeders = 2;
    const struct worker *w;
    if (c->grp)
        TAILQ_FOREACH(w, &c->grp->workers, glink)
            feeders += worker_is_lead(w);
    size_t read = (size_t)QG_MIN(QG_MAX(g->cfg.chunk_size, 65536), g->cfg.read_budget);
    return (size_t)g->cfg.client_high_water + (x->has_pipe ? x->pipe_cap : 0) + feeders * (read + S->max_msg + 256);
}

/* A client in the table: on its group's queue or held list exactly as its head request's state
 * says (held only while that group is paused); its worker, session and fan-out its own; its
 * output within its bound; gone only once its peer has. */
static void check_client(struct conn *x)
{
    struct gw *g = &S->g;
    struct client *c = (struct client *)x;
    struct req *h = client_head(c);
    if (c->w && (c->w->run.cl != c || c->w->st != WS_BUSY))
        fail("%s points at worker %s, which is not running its request", x->name, c->w->c.name);
    if (c->fo && (!h || h->state != RS_RUNNING || !h->fan))
        fail("%s has a fan-out, and its head is not a running .qgate.all", x->name);
    if (h && h->fan && h->type == KIPC_SYNC && h->state == RS_RUNNING && !c->fo)
        fail("%s: its head .qgate.all runs with no fan-out", x->name);
    if (c->sess && (c->sess->sess != c || (c->w && c->w != c->sess)))
        fail("%s has session worker %s, which is not its, or runs its request on another", x->name, c->sess->addr);
    /* the head's group: its client's, or routed to (none: a route to no group, answered) */
    int queued = h && h->grp && x->q == &h->grp->queue;
    int held_p = h && h->grp && x->q == &h->grp->held; /* ... or its held list, while that group is paused */
    if (c->sess && queued)
        fail("%s has a session worker, and is on its group's queue", x->name);
    if (x->q && !queued && !held_p)
        fail("%s is on a list that is not its group's queue nor its held list", x->name);
    if (queued != (h && h->state == RS_QUEUED))
        fail("%s: queued %d, head request %s", x->name, queued, h ? "not queued" : "absent");
    if (held_p != (h && h->state == RS_HELD))
        fail("%s: on the held list %d, head request %s", x->name, held_p, h ? "not held" : "absent");
    if (held_p && (!h->grp->paused || !((h->fan && h->type == KIPC_SYNC) || (c->sess && h->grp == c->grp))))
        fail("%s is held, and its group is not paused or its head is neither a session's nor a .qgate.all",
             x->name);
    S->res->paused_held += h && (held_p || queued) && h->grp->paused;
    int here = 0, listed = 0; /* answered nested by the gateway: run now (LOCAL), or answered and
                               * waiting for an older one (READY), or its body still being
                               * validated on a reader (CHECKING); on the nested list, in order */
    const struct req *r;
    for (r = h; r; r = TAILQ_NEXT(r, link)) {
        here += r->nested;
        if (r->nested && r->state != RS_LOCAL && r->state != RS_READY && !(r->state == RS_CHECKING && r->unchecked))
            fail("%s: its request %llu, answered nested by the gateway, is %s", x->name, (unsigned long long)r->seq,
                 request_state_name(r->state));
    }
    uint64_t last = 0;
    TAILQ_FOREACH(r, &c->nested, nlink) {
        listed++;
        if (!r->nested || (listed > 1 && r->seq <= last))
            fail("%s: its nested list holds request %llu out of order, or not nested", x->name,
                 (unsigned long long)r->seq);
        last = r->seq;
    }
    if (here != listed)
        fail("%s: %d requests answered nested by the gateway in its FIFO, %d on its nested list", x->name, here, listed);
    const struct conn *wn = (r = TAILQ_FIRST(&c->nested)) && r->wn_wait ? conn_lookup_loop(g, r->wn_id, r->wn_gen) : NULL;
    if (r && r->state == RS_READY && !(wn && wn->kind == CONN_WORKER && g->back->nested_owed(wn, c) > 0))
        fail("%s: its oldest nested request %llu is answered, and not sent (nor a bad message's error waiting for "
             "its worker's nested replies)", x->name, (unsigned long long)r->seq);
    if (c->st == CS_READY && !c->eof && !c->paused && !x->paused && !x->waits_room && !x->in_job && !g->draining &&
        x->fd >= 0 && !(x->events & EPOLLIN))
        fail("%s reads nothing, and nothing holds its reading", x->name);
    if ((c->st == CS_GONE) != (c->eof && c->st != CS_AUTH))
        fail("%s: state %s with eof %d", x->name, client_state_name(c->st), c->eof);
    if (conn_pending(x) > output_bound(x))
        fail("%s holds %zu bytes of output, over its bound %zu (client_high_water %lld)", x->name, conn_pending(x),
             output_bound(x), (long long)g->cfg.client_high_water);
    if (c->eof && !c->half && (x->fd >= 0 || x->has_pipe || conn_timer_armed(x, CLIENT_TM_STALL)))
        fail("%s has gone but keeps its socket, pipe or stall timer", x->name);
    if (c->half && (!c->eof || x->fd < 0 || (x->events & EPOLLIN))) /* it shut its side: its replies go out */
        fail("%s half-closed: eof %d, socket %d, reading %d", x->name, c->eof, x->fd, !!(x->events & EPOLLIN));
    if (c->st == CS_GONE && !h && !x->in_backlog && c->c.in.len == c->c.in.off &&
        !(c->half && (conn_pending(x) || x->streaming))) /* (a half-closed one gets the rest of a message
                                                           * being streamed to it: its worker sends on) */
        fail("%s has gone with nothing left to run or write, and is still open", x->name);
    /* pending_max: a client waiting for room reads nothing, its message's header first in its
     * input; one given the room is on the backlog to frame it; room kept is for a message begun */
    struct kipc_hdr wh = {0};
    const char *why;
    if (x->waits_room && ((x->events & EPOLLIN) || x->rd.phase != RD_BOUNDARY || inbuf_avail(&x->in) < 8 ||
                          kipc_hdr_parse(inbuf_data(&x->in), 8, UINT64_MAX, &wh, &why) != QG_OK ||
                          wh.len != x->room_need || x->room_need <= 65536 ||
                          c->room_granted || (c->st != CS_READY && c->st != CS_GONE)))
        fail("%s waits for room for %llu bytes: reading %d, phase %d, %zu bytes held, granted %d, state %s", x->name,
             (unsigned long long)x->room_need, !!(x->events & EPOLLIN), x->rd.phase, inbuf_avail(&x->in),
             c->room_granted, client_state_name(c->st));
    if (c->room_granted && (!x->in_backlog || x->waits_room))
        fail("%s was given room and is not on the backlog to frame its message", x->name);
    if (c->gathering && !c->room_granted && x->rd.phase != RD_WHOLE)
        fail("%s keeps room for %zu bytes and reads no message", x->name, c->gathering);
}

/* The table: each connection in its own slot, none closed, on the flush list only with a socket,
 * a metrics one on the metrics list; each client checked. What it counts, for the lists. */
static void check_table(int *nclients, int *ntails, int *nmetrics, int *backlog, size_t *pending, size_t *big,
                        int *waiting)
{
    struct gw *g = &S->g;
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x)
            continue;
        if (x->id != id)
            fail("table slot %u holds connection %u", id, x->id);
        if (x->closing)
            fail("closed connection %s is still in the table", x->name);
        if (x->dirty && x->fd < 0)
            fail("%s is on the flush list without a socket", x->name);
        *ntails += x->kind == CONN_TAIL;
        if (x->kind == CONN_METRICS) {
            (*nmetrics)++;
            if (x->q != &g->metrics_conns || x->fd < 0)
                fail("%s: a metrics connection not on the metrics list, or without its socket", x->name);
        }
        *backlog += x->in_backlog; /* (a worker too: what it read behind a message a job had) */
        for (const struct chunk *ch = x->out.head; ch; ch = ch->next) { /* requests on a worker's queue */
            if (ch->pending && x->kind != CONN_WORKER)
                fail("%s holds output counted against pending_max", x->name);
            *pending += ch->pending;
            *big += ch->pending > BUF_PENDING_SMALL ? ch->pending : 0;
        }
        if (x->paused_any) { /* not for its output: for the replies its client is owed nested by the
                              * gateway, or for another part's callback */
            const struct client *wc = (const struct client *)x->waits_on;
            S->res->nested_waits++;
            int called = 0; /* another part of its .qgate.all has a callback out to it */
            for (int i = 0; wc && x->waits_on->kind == CONN_CLIENT && wc->fo && i < wc->fo->n; i++) {
                const struct fpart *p = wc->fo->part[i];
                called |= p->st == FP_RUNNING && &p->w->c != x && p->w->run.phase == WB_CALLED;
            }
            /* or it owes a callback's answer yet, and reads (one whose worker was lost too) */
            int owes = wc && x->waits_on->kind == CONN_CLIENT && wc->fo && wc->ncalls && wc->st == CS_READY;
            if (x->kind != CONN_WORKER || !x->paused || !wc || x->waits_on->kind != CONN_CLIENT ||
                (!client_nested_owed(wc) && !called && !owes))
                fail("%s waits on %s, which is owed nothing nested, and no other part of whose .qgate.all has a "
                     "callback out, nor owes an answer it may still give", x->name, wc ? x->waits_on->name : "nothing");
        }
        if (x->in_job && (x->kind == CONN_METRICS || x->in_backlog || (x->events & EPOLLIN)))
            fail("%s waits for a job with a message it read: a %s, on the backlog %d, reading %d", x->name,
                 x->kind == CONN_WORKER ? "worker" : x->kind == CONN_CLIENT ? "client (its message for its worker)"
                                                                             : "scraper",
                 x->in_backlog, !!(x->events & EPOLLIN));
        if (x->kind != CONN_CLIENT)
            continue;
        (*nclients)++;
        check_client(x);
        struct client *c = (struct client *)x;
        size_t fc = c->fo ? c->fo->counted : 0;
        *pending += c->gathering + fc;
        *big += (c->gathering > BUF_PENDING_SMALL ? c->gathering : 0) + (fc > BUF_PENDING_SMALL ? fc : 0);
        struct req *r;
        TAILQ_FOREACH(r, &c->reqs, link) {
            size_t rc = r->counted ? r->in_len : 0;
            *pending += rc;
            *big += rc > BUF_PENDING_SMALL ? rc : 0;
        }
        const struct unasked *u; /* answers it sent before a callback asked, held */
        size_t ub = 0;
        STAILQ_FOREACH(u, &c->unasked, link) {
            ub += u->len + sizeof *u;
            *pending += u->len;
            *big += u->len > BUF_PENDING_SMALL ? u->len : 0;
        }
        if (ub != c->unasked_bytes)
            fail("%s holds %zu bytes of answers nobody asked for yet, counted %zu", x->name, ub, c->unasked_bytes);
        *waiting += x->waits_room;
    }
}

/* The counts and the gateway-wide lists (flush, backlog) against what the table holds. */
static void check_lists(int nclients, int ntails, int nmetrics, int backlog)
{
    struct gw *g = &S->g;
    int dirty = 0;
    if (g->bad_transitions)
        fail("%llu state transitions outside the tables of worker.c, run.c, client.c or request.c (see the log)", (unsigned long long)g->bad_transitions);
    if (nclients != g->nclients)
        fail("nclients is %d, the table holds %d clients", g->nclients, nclients);
    if (ntails != g->ntails) /* (max_clients counts them) */
        fail("ntails is %d, the table holds %d cut clients' last output", g->ntails, ntails);
    if (nmetrics != g->nmconns || nmetrics != g->metrics_conns.n)
        fail("nmconns %d, the metrics list holds %d, the table %d", g->nmconns, g->metrics_conns.n, nmetrics);
    struct conn *x;
    int wdirty = 0;
    TAILQ_FOREACH(x, &g->wdirty, dirty_link) {
        wdirty++;
        if (!conn_live(g, x) || !x->dirty || x->kind != CONN_WORKER)
            fail("a freed, unmarked or non-worker connection is on the workers' flush list");
    }
    TAILQ_FOREACH(x, &g->dirty, dirty_link) {
        dirty++;
        if (!conn_live(g, x) || !x->dirty || x->kind == CONN_WORKER)
            fail("a freed, unmarked or worker connection is on the flush list");
    }
    if (wdirty != g->nwdirty || dirty + wdirty != g->ndirty)
        fail("ndirty %d and nwdirty %d, the flush lists hold %d and %d", g->ndirty, g->nwdirty, dirty, wdirty);
    int nb = 0;
    TAILQ_FOREACH(x, &g->backlog, backlog_link) {
        nb++;
        if (!conn_live(g, x) || !x->in_backlog)
            fail("a freed or unmarked connection is on the backlog list");
    }
    if (nb != backlog)
        fail("%d connections marked in the backlog, the list holds %d", backlog, nb);
}

/* A group's queue: its clients, each with its head request QUEUED there. */
static void check_queue(struct group *grp)
{
    int n = 0;
    for (struct conn *y = connq_first(&grp->queue); y; y = connq_next(y)) {
        n++;
        struct client *c = client_of(y);
        struct req *h = client_head(c);
        if (y->kind != CONN_CLIENT || y->q != &grp->queue || c->grp != grp || !conn_live(&S->g, y) || !h ||
            h->state != RS_QUEUED)
            fail("group %s's queue holds %s, which is not queued there", grp->cfg.name, y->name);
    }
    if (n != grp->queue.n)
        fail("group %s: queue.n %d, its queue holds %d", grp->cfg.name, grp->queue.n, n);
}

/* A group's idle workers: leads IDLE on the idle list, their other connections on spare. How
 * many the two lists hold. */
static int check_idle_lists(struct group *grp)
{
    int idle = 0;
    for (int k = 0; k < 2; k++) {
        struct connq *q = k ? &grp->spare : &grp->idle;
        int nq = 0;
        for (struct conn *y = connq_first(q); y; y = connq_next(y), nq++) {
            struct worker *w = worker_of(y);
            if (y->kind != CONN_WORKER || w->st != WS_IDLE || y->q != q || worker_is_lead(w) == k)
                fail("%s is on the %s list in state %s", y->name, k ? "spare" : "idle", worker_state_name(w->st));
        }
        if (nq != q->n)
            fail("group %s: %s.n %d, its list holds %d", grp->cfg.name, k ? "spare" : "idle", q->n, nq);
        idle += nq;
    }
    return idle;
}

/* A worker connection: a fan-out part, a session, a client's request, a pause for a client's
 * output and broadcasts only in the states that may have them; a socket only when connected. */
static void check_worker(struct worker *w)
{
    struct gw *g = &S->g;
    if (w->run.fp && (w->st != WS_BUSY || w->run.kind != RUN_FANOUT))
        fail("%s (%s) holds a fan-out part outside a fan-out run", w->c.name, worker_state_name(w->st));
    if (w->run.nested && (w->st != WS_BUSY || (w->run.kind != RUN_REQUEST && w->run.kind != RUN_ASYNC) ||
                          w->run.phase == WB_RELAYING || w->run.phase == WB_COLLECTING))
        fail("%s (%s, run kind %d, phase %d) owes %d nested replies outside a client's run, or relays its reply",
             w->c.name, worker_state_name(w->st), w->run.kind, w->run.phase, w->run.nested);
    if (!STAILQ_EMPTY(&w->fq) && w->st != WS_IDLE && w->st != WS_BUSY)
        fail("%s is %s and owes fan-out parts", w->c.name, worker_state_name(w->st));
    if (w->st == WS_PINNED && (!w->sess || w->sess->sess != w))
        fail("%s is pinned, but not to a client that has it", w->c.name);
    if (w->sess && (w->sess->sess != w || !conn_live(g, &w->sess->c) || (w->st != WS_BUSY && w->st != WS_PINNED)))
        fail("%s (%s) is given to %s, which does not have it, or is freed", w->c.name, worker_state_name(w->st),
             w->sess->c.name);
    if (w->sess && w->grp->cfg.pool_mode != CFG_POOL_SESSION && !w->end_due)
        fail("%s is in a session, in a group with pool = request (and its end is not held back)", w->c.name);
    S->res->held_ends += w->end_due;
    if (w->end_due && (!w->sess || w->c.rd.phase != RD_BODY ||
                       (w->st != WS_PINNED && (w->st != WS_BUSY || w->run.cl != w->sess)))) /* (the message
                                * streamed to its client, or drained once that client's output has
                                * gone; BUSY: the client's next request began meanwhile) */
        fail("%s holds back the end of a session, in the middle of no message", w->c.name);
    if (w->run.cl && !conn_live(g, &w->run.cl->c))
        fail("%s runs a request of a freed client", w->c.name);
    if (w->run.cl && (w->st != WS_BUSY || w->run.cl->w != w))
        fail("%s (%s) runs a request of %s, which does not point at it", w->c.name, worker_state_name(w->st),
             w->run.cl->c.name);
    if (w->c.paused && (w->st != WS_BUSY && w->st != WS_PINNED))
        fail("%s is %s, and paused for a client's output", w->c.name, worker_state_name(w->st));
    if (w->c.paused && !w->c.q && w->c.fd >= 0)
        fail("%s is paused for a client's output, and waits on none", w->c.name);
    if (w->st != WS_IDLE && w->st != WS_BUSY && (!STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->bsent)))
        fail("%s is %s with broadcasts queued on it", w->c.name, worker_state_name(w->st));
    if ((w->st == WS_DOWN || w->st == WS_RESOLVING) && w->c.fd >= 0)
        fail("%s is %s with a socket", w->c.name, worker_state_name(w->st));
}

/* A group: its queue, held list, idle lists and connections; each worker; its counts of idle
 * workers and of workers up. */
static void check_group(struct group *grp)
{
    int up = 0, nidle = 0;
    check_queue(grp);
    check_held_and_disabled(grp);
    int idle = check_idle_lists(grp);
    check_connections(grp);
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        up += worker_is_lead(w) && worker_is_up(w);
        nidle += w->st == WS_IDLE;
        check_worker(w);
    }
    if (idle != nidle)
        fail("group %s: %d idle workers, %d on the idle list", grp->cfg.name, nidle, idle);
    if (up != grp->nup)
        fail("group %s: nup %d, %d workers up", grp->cfg.name, grp->nup, up);
}

/* Each user's counts of connections and requests in flight, and its limits those of the users
 * file in force. */
static void check_users(void)
{
    struct gw *g = &S->g;
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link) {
        int inflight = 0, conns = 0;
        for (uint32_t id = 0; id < g->next_id; id++) {
            struct conn *y = g->tab[id];
            if (y && y->kind == CONN_CLIENT && ((struct client *)y)->us == u) {
                conns++;
                inflight += ((struct client *)y)->w != NULL;
            }
        }
        if (u->inflight != inflight || u->conns != conns)
            fail("user %s: inflight %d conns %d, counted %d and %d", u->name, u->inflight, u->conns, inflight, conns);
        const struct auth_user *e = g->auth ? auth_find(auth_db_of(g->auth), u->name, strlen(u->name)) : NULL;
        if (e && conns && (u->admin != e->admin || u->max_inflight != e->max_inflight || u->max_conns != e->max_conns))
            fail("user %s: admin %d max_inflight %d max_conns %d, the users file in force says %d, %d, %d", u->name,
                 u->admin, u->max_inflight, u->max_conns, e->admin, e->max_inflight, e->max_conns);
    }
}

/* Every connection on exactly the lists its state says; counts that match. */
void check_gateway(void)
{
    int nclients = 0, ntails = 0, backlog = 0, nmetrics = 0;
    S->res->checks++;
    (void)reset_query_on(); /* a reset query off for a while is seen, however short (its epoch) */
    (void)session_era(); /* ... and group main a request pool for a while (its sessions ended) */
    check_log();
    check_alog();
    size_t pending = 0, big = 0;
    int waiting = 0, nw = 0;
    check_table(&nclients, &ntails, &nmetrics, &backlog, &pending, &big, &waiting);
    check_lists(nclients, ntails, nmetrics, backlog);
    if (pending != buf_pending_bytes || big != buf_pending_big) /* every byte counted is a client's, or
                                                                  * on its way to a worker */
        fail("%zu bytes counted against pending_max (%zu of big messages), the clients and workers' queues hold %zu (%zu)",
             buf_pending_bytes, buf_pending_big, pending, big);
    struct conn *x;
    TAILQ_FOREACH(x, &S->g.room_waiters, room_link) {
        nw++;
        if (!conn_live(&S->g, x) || !x->waits_room || x->kind != CONN_CLIENT)
            fail("a freed, unmarked or non-client connection waits for room");
    }
    if (nw != waiting)
        fail("%d clients marked waiting for room, the list holds %d", waiting, nw);
    int removed = 0;
    for (int i = 0; i < S->g.ngroups; i++) {
        check_group(&S->g.groups[i]);
        struct worker *w;
        TAILQ_FOREACH(w, &S->g.groups[i].workers, glink)
            removed += w->removed != 0;
    }
    if (removed != S->g.loop.nremoved)
        fail("%d worker connections removed by a reload are still there, the loop counts %d", removed,
             S->g.loop.nremoved);
    check_users();
}

/* What everyone holds, for the report of a failure. */
void dump_world(void)
{
    static const char *const rs[] = {"WAITING", "CHECKING", "QUEUED", "RUNNING", "LOCAL", "READY", "HELD"};
    struct gw *g = &S->g;
    if (!g->tab)
        return;
    tr("--- the world at the failure:");
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT)
            continue;
        struct client *c = (struct client *)x;
        struct fclient *f = fclient_of(x->id, x->gen);
        struct req *h = client_head(c);
        tr("gw %s: %s, head %lld %s, out %zu held %zu piped %zu, paused %d calls %d, worker %s | C%d: %s, %zu unsent, "
           "%d unread, %d pending", x->name, client_state_name(c->st), h ? (long long)h->seq : -1LL,
           h ? rs[h->state] : "-", x->out.bytes, x->held.bytes, x->piped, c->paused, c->ncalls,
           c->w ? c->w->addr : "-", f ? f->cid : -1, f ? (f->st == FC_DONE ? "closed" : f->stalled ? "stalled" : "reading") : "gone",
           f ? f->out.len - f->out_off : 0, f ? unread(f->fd) : 0, f ? f->pend.n - f->pend_off : 0);
        tr("    input %zu bytes (phase %d), %d unread in its socket, events %#x, stream paused %d, backlog %d, "
           "waits for room %d (%llu), granted %d, room kept %zu, in a job %d", inbuf_avail(&x->in), x->rd.phase,
           x->fd >= 0 ? unread(x->fd) : -1, x->events, x->paused, x->in_backlog, x->waits_room,
           (unsigned long long)x->room_need, c->room_granted, c->gathering, x->in_job);
    }
    tr("pending_max %lld: %zu bytes counted", (long long)g->cfg.pending_max, buf_pending_bytes);
    struct conn *d;
    TAILQ_FOREACH(d, &g->wdirty, dirty_link)
        tr("on the workers' flush list: %s (fd %d, out %zu, want_out %d, events %#x)", d->name, d->fd, d->out.bytes,
           d->want_out, d->events);
    TAILQ_FOREACH(d, &g->dirty, dirty_link)
        tr("on the flush list: %s (fd %d, out %zu, want_out %d, events %#x)", d->name, d->fd, d->out.bytes, d->want_out,
           d->events);
    tr("pools: %zu reader jobs, %zu writer jobs queued; reloading %d", pool_queued(g->readers),
       pool_queued(g->writers), g->reloading);
    for (int k = 0; k < S->nw; k++)
        if (!gw_worker_of(&S->w[k]))
            tr("W%d: %s the configuration, not in the gateway; %d connections, refuse %d", k,
               S->w[k].in_config ? "in" : "out of", fw_live(&S->w[k]), S->w[k].refuse);
    for (int i = 0; i < MAXC; i++) {
        struct fclient *f = &S->cl[i];
        if ((f->st == FC_HS || f->st == FC_READY) && !conn_lookup_loop(g, f->gid, f->ggen))
            tr("C%d (%s, %s): the gateway has no connection for it; %zu unsent, %d unread, %d pending, fd %d",
               f->cid, f->st == FC_HS ? "handshake" : "ready", f->stalled ? "stalled" : "reading",
               f->out.len - f->out_off, unread(f->fd), f->pend.n - f->pend_off, f->fd);
    }
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink) {
            struct fworker *fw = worker_of_addr(w->addr);
            const struct fwconn *k = NULL;
            for (int j = 0; fw && j < FW_CONNS; j++)
                if (fw->k[j].gw_fd >= 0 && fw->k[j].gw_fd == w->c.fd)
                    k = &fw->k[j];
            tr("gw %s: %s, for %s, swallow %d, bq %d bsent %d, paused %d, in a job %d, input %zu, events %#x | W%d: fd %d, "
               "%zu in, %zu to send, cb %d, %d unread, %d deferred", w->c.name, worker_state_name(w->st),
               w->run.cl ? w->run.cl->c.name : "-", w->run.swallow, !STAILQ_EMPTY(&w->bq), !STAILQ_EMPTY(&w->bsent),
               w->c.paused, w->c.in_job, inbuf_avail(&w->c.in), w->c.events, fw ? fw->wid : -1, k ? k->fd : -1,
               k ? k->in.len : 0, k ? k->out.len - k->out_off : 0, fw ? fw->waiting_cb : 0, k ? unread(k->fd) : 0,
               fw ? fw->deferred.n : 0);
        }
    }
}


/* Is a session group's reset query on now (the gateway's configuration)? Seen after every
 * iteration (check_gateway) and where asked: each time it comes back on is a new epoch, and a
 * message queued in an earlier one may run without a reset (seed 951497: off for one reload,
 * between two askings, it was not seen). */
int reset_query_on(void)
{
    int on = 0;
    for (int i = 0; i < S->g.ngroups; i++)
        on |= S->g.groups[i].cfg.pool_mode == CFG_POOL_SESSION && S->g.groups[i].cfg.reset_query[0];
    if (on && !S->reset_on)
        S->reset_epoch++;
    S->reset_on = on;
    return on;
}

/* Group main's session era now: 0 while the gateway has it a request pool, else the number of
 * times it has made it a session pool (each time, every session of the last era has ended or
 * ends once the message being streamed to it has). Seen after every iteration, as the reset
 * query is, and at each dispatch. */
int session_era(void)
{
    int on = 0;
    for (int i = 0; i < S->g.ngroups; i++)
        if (!strcmp(S->g.groups[i].cfg.name, "main"))
            on = S->g.groups[i].cfg.pool_mode == CFG_POOL_SESSION;
    if (on && !S->gw_session)
        S->sess_era++;
    S->gw_session = on;
    return on ? S->sess_era : 0;
}

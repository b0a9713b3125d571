/* report.c: snapshots for .qgate.stats[] and .qgate.totals[], the periodic summary line; the
 * metrics page's HTTP side is mhttp.c's. */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "access.h"
#include "client.h"
#include "gw.h"
#include "jobs.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "pool.h"
#include "version.h"
#include "query.h"
#include "worker.h"


/* ---- snapshots -------------------------------------------------------------------------------- */

struct stats_snapshot *report_stats_loop(struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++)
        n += g->groups[i].nworkers; /* a row per worker (its connections summed into it) */
    struct stats_snapshot *s = calloc(1, sizeof *s + (size_t)n * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        struct worker *w;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            if (!worker_is_lead(w) || s->n == n)
                continue;
            struct stats_row *r = &s->rows[s->n++];
            snprintf(r->addr, sizeof r->addr, "%s", w->addr);
            snprintf(r->group, sizeof r->group, "%s", grp->cfg.name);
            qg_copy_lower(r->state, sizeof r->state, worker_state_name(w->st));
            r->renewing = w->renewing != 0;
            snprintf(r->transport, sizeof r->transport, "%s", /* (down: none; before, its last attempt's) */
                     w->st == WS_DOWN || w->st == WS_RESOLVING ? "" : worker_via_name(w->via));
            r->served = (int64_t)w->served;
            r->errors = (int64_t)w->errors;
            r->session = w->sess ? (int64_t)w->sess->serial : INT64_MIN; /* 0N: given to nobody */
            r->queued = grp->queue.n;
            for (const struct worker *x = w; x; x = worker_sibling(x)) {
                if (x != w) {
                    r->served += (int64_t)x->served;
                    r->errors += (int64_t)x->errors;
                    hist_merge(&r->lat, &x->lat);
                } else {
                    r->lat = w->lat;
                }
                r->dropped += (int64_t)x->dropped;
                r->inflight += x->st == WS_BUSY;
                if (x->st == WS_BUSY && x->run.cl && (!r->started_ms || x->run.started_us / 1000 < r->started_ms)) {
                    r->client = (int64_t)x->run.cl->serial; /* its longest-running client's */
                    r->started_ms = x->run.started_us / 1000;
                }
            }
            r->started_ms = r->started_ms ? gw_wall_ms(g, r->started_ms) : 0;
            if (!r->client)
                r->client = INT64_MIN; /* 0N: running no client's request */
        }
    }
    return s;
}

struct queries_snapshot *report_queries_loop(struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++)
        for (int k = 0; g->groups[i].queries && k < QUERY_SLOTS; k++)
            n += g->groups[i].queries[k].key && g->groups[i].queries[k].calls;
    struct queries_snapshot *s = calloc(1, sizeof *s + (size_t)n * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < g->ngroups; i++)
        for (int k = 0; g->groups[i].queries && k < QUERY_SLOTS && s->n < n; k++) {
            const struct qslot *e = &g->groups[i].queries[k];
            if (!e->key || !e->calls)
                continue;
            struct query_row *r = &s->rows[s->n++];
            *r = (struct query_row){.key = (int64_t)e->key, .calls = (int64_t)e->calls, .errors = (int64_t)e->errors,
                                    .wait_us = (int64_t)e->wait_us, .wait_max_us = e->wait_max_us,
                                    .run_us = (int64_t)e->run_us, .run_max_us = e->run_max_us,
                                    .bytes_in = (int64_t)e->bytes_in, .bytes_out = (int64_t)e->bytes_out,
                                    .last_ms = gw_wall_ms(g, e->last_ms)};
            snprintf(r->group, sizeof r->group, "%s", g->groups[i].cfg.name);
            snprintf(r->text, sizeof r->text, "%s", e->text);
        }
    return s;
}

static void snap_groups(struct gw *g, struct metrics_snap *s)
{
    for (int i = 0; i < g->ngroups && i < CFG_MAX_GROUPS; i++) {
        struct group *grp = &g->groups[i];
        struct metrics_group *m = &s->groups[s->ngroups++];
        snprintf(m->name, sizeof m->name, "%s", grp->cfg.name);
        m->paused = grp->paused;
        m->pipelined = grp->pipelined;
        memcpy(m->ended, grp->ended, sizeof m->ended);
        m->req_bytes = grp->req_bytes;
        m->reply_bytes = grp->reply_bytes;
        m->refused_busy = grp->refused_busy;
        m->refused_timeout = grp->refused_timeout;
        m->refused_no_worker = grp->refused_no_worker;
        m->wait = grp->wait;
        m->run = grp->run;
        m->total = grp->total;
        m->queued = grp->queue.n + grp->held.n; /* held: by a pause, a session's or a .qgate.all's */
        const struct connq *qs[2] = {&grp->queue, &grp->held};
        for (int k = 0; k < 2; k++) {
            struct conn *x;
            TAILQ_FOREACH(x, &qs[k]->h, qlink) {
                struct req *r = client_head(client_of(x));
                if (r && g->loop.now_ms - r->t_arrive > m->maxwait_ms)
                    m->maxwait_ms = g->loop.now_ms - r->t_arrive;
            }
        }
    }
}

struct metrics_snap *report_totals_loop(struct gw *g)
{
    struct metrics_snap *s = calloc(1, sizeof *s);
    if (!s || !(s->workers = report_stats_loop(g))) {
        free(s);
        return NULL;
    }
    snprintf(s->version, sizeof s->version, "%s", QG_VERSION);
    s->uptime_ms = g->loop.now_ms - g->started_ms;
    s->start_wall_ms = g->started_wall_ms;
    s->nclient_states = CS_CLOSING + 1;
    for (int i = 0; i < s->nclient_states; i++)
        qg_copy_lower(s->client_state[i], sizeof s->client_state[i], client_state_name(i));
    s->nworker_states = WS_DISABLED + 1;
    for (int i = 0; i < s->nworker_states; i++)
        qg_copy_lower(s->worker_state[i], sizeof s->worker_state[i], worker_state_name(i));
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *c = g->tab[id];
        if (c && c->kind == CONN_CLIENT)
            s->clients[client_of(c)->st]++;
    }
    s->clients[CS_CLOSING] += g->ntails; /* (a cut client's last output: closing, as .qgate.clients[] shows it) */
    s->accepted = g->accepted;
    s->handshakes = g->handshakes;
    s->query_timeouts = g->query_timeouts;
    s->req_bytes = g->req_bytes;
    s->reply_bytes = g->reply_bytes;
    memcpy(s->ended, g->ended, sizeof s->ended);
    s->nrefusals = GW_NREFUSALS;
    for (int i = 0; i < GW_NREFUSALS; i++) {
        s->refusal[i] = conn_refusal_name(i);
        s->refused[i] = g->refused[i].n;
    }
    struct alog_counts ac;
    access_counts_loop(g, &ac);
    s->alog_lines = ac.lines;
    s->alog_dropped = ac.dropped;
    s->alog_errors = ac.errors;
    s->alog_queued = ac.queued - ac.held;
    s->log_dropped = log_dropped_total();
    s->held_bytes = buf_held_bytes;
    s->held_passed = g->held_passed;
    s->nested = g->nested;
    s->pending_bytes = buf_pending_bytes;
    s->pending_waits = g->pending_waits;
    s->tails = g->tails;
    snap_groups(g, s);
    return s;
}

/* ---- the summary line ---------------------------------------------------------------------------- */

static uint64_t sum(const uint64_t *v, int n)
{
    uint64_t t = 0;
    for (int i = 0; i < n; i++)
        t += v[i];
    return t;
}

static void on_stats_timer(struct gw *g, struct timer *t)
{
    uint64_t ended = sum(g->ended, ALOG_NOUTCOMES), refused = 0;
    char why[512] = "";
    size_t o = 0;
    for (int i = 0; i < GW_NREFUSALS; i++) {
        refused += g->refused[i].n;
        if (g->refused[i].n && o < sizeof why - 64)
            o += (size_t)snprintf(why + o, sizeof why - o, "%s%s %llu", o ? ", " : " (", conn_refusal_name(i),
                                  (unsigned long long)g->refused[i].n);
    }
    if (o)
        snprintf(why + o, sizeof why - o, ")");
    int up = 0, workers = 0, queued = 0;
    for (int i = 0; i < g->ngroups; i++) {
        up += g->groups[i].nup;
        workers += g->groups[i].nworkers;
        queued += g->groups[i].queue.n;
    }
    double secs = (double)(g->loop.now_ms - g->stats_last_ms) / 1e3;
    log_info(NULL, "stats: %llu requests (%.1f/s), %llu q errors, %llu gateway errors, %llu refused%s; %d clients, "
             "%d queued, workers %d/%d up",
             (unsigned long long)ended, secs > 0 ? (double)(ended - g->stats_last_ended) / secs : 0.0,
             (unsigned long long)g->ended[ALOG_ERROR], (unsigned long long)g->ended[ALOG_GWERROR],
             (unsigned long long)refused, why, g->nclients + g->ntails, queued, up, workers);
    g->stats_last_ended = ended;
    g->stats_last_ms = g->loop.now_ms;
    if (g->cfg.stats_period > 0)
        loop_timer_arm_loop(g, t, g->loop.now_ms + g->cfg.stats_period, on_stats_timer);
}

void report_reloaded_loop(struct gw *g)
{
    loop_timer_cancel_loop(g, &g->stats_tm);
    if (g->cfg.stats_period > 0)
        loop_timer_arm_loop(g, &g->stats_tm, g->loop.now_ms + g->cfg.stats_period, on_stats_timer);
}

int report_init(struct gw *g, const struct config *cfg)
{
    loop_clock_loop(g);
    g->started_ms = g->stats_last_ms = g->loop.now_ms;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g->started_wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (cfg->stats_period > 0)
        loop_timer_arm_loop(g, &g->stats_tm, g->loop.now_ms + cfg->stats_period, on_stats_timer);
    return 0;
}



/* loop.c: the loop thread: epoll, the timer heap, signals, and the iteration of DESIGN.md:
 * clock, wait, ready fds within budgets, completions drained whole, dispatch, flush, timers,
 * reclaim. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "jobs.h"
#include "log.h"

int64_t gw_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- timer heap ------------------------------------------------------------------------- */

static void heap_swap(struct timers *ts, int a, int b)
{
    struct timer *t = ts->h[a];
    ts->h[a] = ts->h[b];
    ts->h[b] = t;
    ts->h[a]->pos = a + 1;
    ts->h[b]->pos = b + 1;
}

static void heap_up(struct timers *ts, int i)
{
    while (i > 0) {
        int p = (i - 1) / 2;
        if (ts->h[p]->when <= ts->h[i]->when)
            break;
        heap_swap(ts, i, p);
        i = p;
    }
}

static void heap_down(struct timers *ts, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < ts->n && ts->h[l]->when < ts->h[m]->when)
            m = l;
        if (r < ts->n && ts->h[r]->when < ts->h[m]->when)
            m = r;
        if (m == i)
            return;
        heap_swap(ts, i, m);
        i = m;
    }
}

static void heap_remove(struct timers *ts, struct timer *t)
{
    int i = t->pos - 1;
    ts->n--;
    if (i != ts->n) {
        ts->h[i] = ts->h[ts->n];
        ts->h[i]->pos = i + 1;
        heap_down(ts, i);
        heap_up(ts, i);
    }
    t->pos = 0;
}

void timer_arm(struct gw *g, struct timer *t, int64_t when_ms, void (*fn)(struct gw *, struct timer *))
{
    struct timers *ts = &g->timers;
    if (t->pos)
        heap_remove(ts, t);
    if (ts->n == ts->cap) {
        int cap = ts->cap ? ts->cap * 2 : 256;
        struct timer **h = realloc(ts->h, (size_t)cap * sizeof *h);
        if (!h) {
            log_error(NULL, "out of memory for timers");
            return;
        }
        ts->h = h;
        ts->cap = cap;
    }
    t->when = when_ms;
    t->fn = fn;
    ts->h[ts->n] = t;
    t->pos = ++ts->n;
    heap_up(ts, ts->n - 1);
}

void timer_cancel(struct gw *g, struct timer *t)
{
    if (t->pos)
        heap_remove(&g->timers, t);
}

int64_t timers_next(const struct timers *ts) { return ts->n ? ts->h[0]->when : -1; }

struct timer *timers_pop_due(struct timers *ts, int64_t now)
{
    if (!ts->n || ts->h[0]->when > now)
        return NULL;
    struct timer *t = ts->h[0];
    heap_remove(ts, t);
    return t;
}

void timers_free(struct timers *ts)
{
    free(ts->h);
    *ts = (struct timers){0};
}

/* ---- completions ------------------------------------------------------------------------ */

/* A reader named the gateway command of cl's head request: check who may run it, do what it
 * says, and have a writer encode the reply. */
static void on_command(struct gw *g, struct client *cl, struct job *j)
{
    struct req *r = client_head(cl);
    if (!r || r->seq != j->seq || r->state != RS_LOCAL)
        return;
    if (j->result == GWCMD_UNKNOWN) {
        client_error_loop(g, cl, r, "qgate: unknown command %s", j->text);
        return;
    }
    if (gwcmd_admin_only(j->result) && !(cl->us && cl->us->admin)) {
        log_warn(cl->c.name, "refused %s: not an admin", j->text);
        client_error_loop(g, cl, r, "qgate: access (admin only): %s", j->text);
        return;
    }
    if (j->result == GWCMD_RELOAD) { /* answered when the reload is done */
        log_info(cl->c.name, ".qgate.reload[] by admin %s", cl->user);
        if (gw_reload_loop(g, &cl->c, j->seq))
            client_error_loop(g, cl, r, "qgate: a reload is already under way, and another waits");
        return;
    }
    struct job *w = job_new(job_encode_command, JK_REPLY);
    if (!w)
        return;
    w->arg = j->result;
    switch (j->result) {
    case GWCMD_STATS:
        w->ctx = gw_stats_snapshot(g);
        w->ctx_free = free;
        break;
    case GWCMD_CLIENTS:
        w->ctx = gw_clients_snapshot(g);
        w->ctx_free = free;
        break;
    case GWCMD_DISCONNECT: {
        /* the id .qgate.clients[] shows: a serial number, never reused */
        int64_t id = j->aux[0];
        struct client *x = id > 0 ? client_by_serial(g, (uint64_t)id) : NULL;
        if (!x) {
            job_free(w);
            client_error_loop(g, cl, r, "qgate: no client %lld", (long long)id);
            return;
        }
        log_info(cl->c.name, "disconnecting client %lld (%s) as admin %s asked", (long long)id, x->c.name, cl->user);
        char why[128];
        snprintf(why, sizeof why, "disconnected by admin %s", cl->user);
        conn_close(g, &x->c, why);
        if (x == cl) { /* it disconnected itself: nobody to answer */
            job_free(w);
            return;
        }
        break;
    }
    default:
        break;
    }
    gw_submit(g, g->writers, w, &cl->c, j->seq);
}

void gw_completion_loop(struct gw *g, struct job *j)
{
    /* completions that name no client connection */
    if (j->kind == JK_RESOLVE) {
        worker_resolved_loop(g, j);
        job_free(j);
        return;
    }
    if (j->kind == JK_RELOAD) {
        gw_reload_done_loop(g, j);
        job_free(j);
        return;
    }
    struct conn *c = conn_lookup(g, j->conn_id, j->conn_gen);
    if (!c || c->kind != EV_CLIENT) { /* stale: the connection went, or its id was reused */
        job_free(j);
        return;
    }
    struct client *cl = (struct client *)c;
    switch (j->kind) {
    case JK_COMMAND:
        on_command(g, cl, j);
        break;
    case JK_AUTH:
        client_auth_done_loop(g, cl, j->result, j->text, (int)j->aux[0], (int)j->aux[1], (int)j->aux[2]);
        break;
    case JK_CHECK:
        client_checked_loop(g, cl, j);
        break;
    case JK_NESTED:
        client_nested_checked_loop(g, cl, j);
        break;
    case JK_REPLY:
        if (j->out) {
            client_reply_loop(g, cl, j->seq, j->out, j->out_len);
            j->out = NULL;
        } else {
            conn_close(g, c, "out of memory making a reply");
        }
        break;
    default:
        break;
    }
    job_free(j);
}

/* Handle a list of completions, oldest first. */
static int handle_completions(struct gw *g, struct job *j)
{
    int n = 0;
    for (struct job *next; j; j = next) {
        next = j->next;
        gw_completion_loop(g, j);
        n++;
    }
    return n;
}

int gw_drain_pool_loop(struct gw *g, struct pool *p) { return handle_completions(g, pool_drain_loop(p)); }

/* Completions already posted, taken between wake-ups without a system call. */
static int take_pool(struct gw *g, struct pool *p) { return handle_completions(g, pool_take_loop(p)); }

static void on_signal(struct gw *g)
{
    struct signalfd_siginfo si;
    while (read(g->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            log_info(NULL, "SIGHUP: reloading %s", g->config_path[0] ? g->config_path : "(no config file)");
            if (gw_reload_loop(g, NULL, 0))
                log_error(NULL, "SIGHUP: out of memory starting the reload");
        } else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            log_info(NULL, "%s: draining (up to %lld ms)", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                     (long long)g->cfg.drain_timeout);
            gw_drain_loop(g);
        }
    }
}

/* Serve the workers and the pools: replies, completions, the next requests to the workers
 * that are free, then the bytes. gw_run calls this between every few client events as well as when the worker
 * set is ready, so that a worker's round trip never waits for a whole sweep of clients: one
 * request per worker per iteration would cap a busy gateway's worker throughput at the rate
 * of iterations (the ssdb defect, on the worker side). */
static void service_workers(struct gw *g)
{
    struct epoll_event evs[64];
    int n = epoll_wait(g->wepfd, evs, (int)QG_ARRAY_LEN(evs), 0);
    for (int i = 0; i < n; i++) {
        struct worker *w = evs[i].data.ptr;
        if (!w->c.closing)
            worker_on_event_loop(g, w, evs[i].events);
    }
    /* completions too: a gateway command takes a reader hop and a writer hop, and should not
     * wait a whole iteration for each */
    take_pool(g, g->readers);
    take_pool(g, g->writers);
    dispatch_all_loop(g);
    gw_flush_dirty_loop(g);
}

/* How many client events between two services of the workers and pools. Each service lets
 * every worker finish one round trip, so with 2 x workers client events between services,
 * requests bound for workers and requests the gateway answers itself share the loop about
 * evenly (measured with bench/run mix: 200 fast and 200 .qgate.ping[] connections). */
static int client_events_per_service(const struct gw *g)
{
    int w = 0;
    for (int i = 0; i < g->ngroups; i++)
        w += g->groups[i].nworkers;
    return QG_MAX(4, QG_MIN(64, 2 * w));
}

/* Is anything received still to be answered: a worker busy, a client with requests held or
 * reply bytes unsent? (SIGTERM waits for this to be false.) */
static int work_in_flight(struct gw *g)
{
    if (worker_busy_count(g))
        return 1;
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *c = g->tab[id];
        if (c && c->kind == EV_CLIENT && (client_head((struct client *)c) || c->out.bytes || ((struct client *)c)->piped))
            return 1;
    }
    return 0;
}

void gw_clock_loop(struct gw *g)
{
    g->now_us = g->hooks.now_us ? g->hooks.now_us(g->hooks.ctx) : gw_now_us();
    g->now_ms = g->now_us / 1000;
}

int gw_wait_ms(const struct gw *g)
{
    if (g->work_pending || !TAILQ_EMPTY(&g->dirty) || !TAILQ_EMPTY(&g->backlog))
        return 0;
    int64_t next = timers_next(&g->timers);
    if (next < 0)
        return -1;
    return next <= g->now_ms ? 0 : (int)QG_MIN(next - g->now_ms, 60000);
}

int gw_run(struct gw *g)
{
    while (!g->stop) {
        gw_clock_loop(g);
        if (gw_step_loop(g, gw_wait_ms(g)))
            return 1;
    }
    return g->exit_code;
}

int gw_step_loop(struct gw *g, int timeout)
{
    struct epoll_event evs[256];
    {
        g->work_pending = 0;
        int n = epoll_wait(g->epfd, evs, (int)QG_ARRAY_LEN(evs), timeout);
        if (n < 0 && errno != EINTR) {
            log_error(NULL, "epoll_wait: %s", strerror(errno));
            return -1;
        }
        gw_clock_loop(g);
        int since_service = 0, per_service = client_events_per_service(g);
        for (int i = 0; i < n; i++) {
            struct evsrc *s = evs[i].data.ptr;
            if (++since_service == per_service) {
                since_service = 0;
                service_workers(g);
            }
            switch (s->kind) {
            case EV_LISTENER:
                client_accept_loop(g, s == &g->ev_listen_tcp ? g->lfd_tcp : g->lfd_uds, s == &g->ev_listen_uds);
                break;
            case EV_POOL: /* clear the eventfd and take the list */
                gw_drain_pool_loop(g, s == &g->ev_readers ? g->readers : g->writers);
                break;
            case EV_SIGNAL:
                on_signal(g);
                break;
            case EV_CLIENT:
                if (!((struct conn *)s)->closing)
                    client_on_event_loop(g, (struct client *)s, evs[i].events);
                break;
            case EV_WORKERS:
                service_workers(g);
                break;
            }
        }
        client_backlog_loop(g);
        take_pool(g, g->readers);
        take_pool(g, g->writers);
        dispatch_all_loop(g);
        gw_flush_dirty_loop(g);
        struct timer *t;
        while ((t = timers_pop_due(&g->timers, g->now_ms)))
            t->fn(g, t);
        conn_reap_loop(g);
        if (g->draining && !work_in_flight(g)) {
            log_info(NULL, "drained: exiting");
            g->stop = 1;
        }
    }
    return 0;
}

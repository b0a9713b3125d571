/* loop.c: the loop thread: epoll over event sources (each carries its ops), the timer heap,
 * completions handed to their kind's handler, and the iteration of docs/design.md: clock, wait,
 * ready sources within budgets (the worker set served between batches), completions drained
 * whole, then the phases the gateway set (backlog, dispatch, flush), timers, reclaim. It knows
 * no kind of connection and no kind of job. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"
#include "qg.h"
#include "pool.h"

/* Its state is the first member of struct gw (gw.h): the loop knows nothing else of it. */
static struct loop *lp(struct gw *g) { return (struct loop *)(void *)g; }
static const struct loop *lpc(const struct gw *g) { return (const struct loop *)(const void *)g; }


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

void loop_timer_arm_loop(struct gw *g, struct timer *t, int64_t when_ms, void (*fn)(struct gw *, struct timer *))
{
    struct timers *ts = &lp(g)->timers;
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

void loop_timer_cancel_loop(struct gw *g, struct timer *t)
{
    if (t->pos)
        heap_remove(&lp(g)->timers, t);
}

int64_t loop_timers_next(const struct timers *ts) { return ts->n ? ts->h[0]->when : -1; }

struct timer *loop_timers_pop_due(struct timers *ts, int64_t now)
{
    if (!ts->n || ts->h[0]->when > now)
        return NULL;
    struct timer *t = ts->h[0];
    heap_remove(ts, t);
    return t;
}

void loop_timers_free(struct timers *ts)
{
    free(ts->h);
    *ts = (struct timers){0};
}

/* ---- sources and completions ------------------------------------------------------------ */

int loop_init(struct gw *g, const struct loop_phases *phases, int64_t (*clock)(void *), void *clock_ctx)
{
    lp(g)->phases = *phases;
    lp(g)->clock = clock;
    lp(g)->clock_ctx = clock_ctx;
    loop_clock_loop(g);
    lp(g)->epfd = epoll_create1(EPOLL_CLOEXEC);
    lp(g)->wepfd = epoll_create1(EPOLL_CLOEXEC);
    return lp(g)->epfd < 0 || lp(g)->wepfd < 0 ? -1 : 0;
}

/* A worker connection is in both sets: the main one, so that one wait reports it with the
 * clients (no second wait to learn which worker is ready), and the worker set, which is polled
 * between batches of client events. */
int loop_watch(struct gw *g, int fd, struct evsrc *s, uint32_t events, int backend)
{
    struct epoll_event ev = {.events = events, .data.ptr = s};
    if (epoll_ctl(lp(g)->epfd, EPOLL_CTL_ADD, fd, &ev))
        return -1;
    if (backend && epoll_ctl(lp(g)->wepfd, EPOLL_CTL_ADD, fd, &ev)) {
        epoll_ctl(lp(g)->epfd, EPOLL_CTL_DEL, fd, NULL);
        return -1;
    }
    return 0;
}

int loop_modify_loop(struct gw *g, int fd, struct evsrc *s, uint32_t events, int backend)
{
    struct epoll_event ev = {.events = events, .data.ptr = s};
    int rc = epoll_ctl(lp(g)->epfd, EPOLL_CTL_MOD, fd, &ev);
    return backend ? rc | epoll_ctl(lp(g)->wepfd, EPOLL_CTL_MOD, fd, &ev) : rc;
}

void loop_unwatch_loop(struct gw *g, int fd, int backend)
{
    epoll_ctl(lp(g)->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (backend)
        epoll_ctl(lp(g)->wepfd, EPOLL_CTL_DEL, fd, NULL);
}

void loop_on_job(struct gw *g, int kind, job_done_fn fn)
{
    if (kind >= 0 && kind < LOOP_JOB_KINDS)
        lp(g)->on_job[kind] = fn;
}

static void on_pool(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)ev; /* clear the eventfd and take the list */
    loop_drain_pool_loop(g, ((struct pool_src *)s)->pool);
}
static const struct evops pool_ops = {.on_event = on_pool};

int loop_watch_pool(struct gw *g, struct pool *p, struct evsrc *s)
{
    struct pool_src *ps = (struct pool_src *)s;
    if (lp(g)->npools == (int)QG_ARRAY_LEN(lp(g)->psrc))
        return -1;
    ps->pool = p;
    ps->ev.ops = &pool_ops;
    lp(g)->psrc[lp(g)->npools++] = ps;
    return loop_watch(g, pool_fd(p), s, EPOLLIN, 0);
}

void loop_free(struct gw *g)
{
    if (lp(g)->epfd >= 0)
        close(lp(g)->epfd);
    if (lp(g)->wepfd >= 0)
        close(lp(g)->wepfd);
    lp(g)->epfd = lp(g)->wepfd = -1;
    loop_timers_free(&lp(g)->timers);
}

void loop_completion_loop(struct gw *g, struct job *j)
{
    job_done_fn fn = j->kind >= 0 && j->kind < LOOP_JOB_KINDS ? lp(g)->on_job[j->kind] : NULL;
    if (fn)
        fn(g, j);
    job_free(j);
}

/* Handle a list of completions, oldest first. */
static int handle_completions(struct gw *g, struct job *j)
{
    int n = 0;
    for (struct job *next; j; j = next) {
        next = job_next(j);
        loop_completion_loop(g, j);
        n++;
    }
    return n;
}

int loop_drain_pool_loop(struct gw *g, struct pool *p) { return handle_completions(g, pool_drain_loop(p)); }

/* Completions already posted, taken between wake-ups without a system call. */
static void take_pools(struct gw *g)
{
    for (int i = 0; i < lp(g)->npools; i++)
        handle_completions(g, pool_take_loop(lp(g)->psrc[i]->pool));
}

/* A phase that runs every iteration (dispatch). */
static void phase(struct gw *g, void (*fn)(struct gw *))
{
    if (fn)
        fn(g);
}

/* A phase that runs when due: a plain request's iteration calls no phase it has no work for. */
static void phase_due(struct gw *g, unsigned what, void (*fn)(struct gw *))
{
    if (!(lp(g)->due & what))
        return;
    lp(g)->due &= ~what;
    if (fn)
        fn(g);
}

/* Serve the workers and the pools: replies, completions, the next requests to the workers
 * that are free, then the bytes. loop_step_loop calls this between every few events, so that a
 * worker's round trip never waits for a whole sweep of clients: one request per worker per
 * iteration would cap a busy gateway's worker throughput at the rate of iterations (the ssdb
 * defect, on the worker side). A worker served here is passed over if the main wait's list
 * names it later in the same iteration (its events were taken; what is left is reported by
 * the next wait). */
static void service_backends(struct gw *g)
{
    struct epoll_event evs[64];
    int n = epoll_wait(lp(g)->wepfd, evs, (int)QG_ARRAY_LEN(evs), 0);
    for (int i = 0; i < n; i++) {
        struct evsrc *s = evs[i].data.ptr;
        s->served = lp(g)->iter;
        s->ops->on_event(g, s, evs[i].events);
    }
    /* completions too: a gateway command takes a reader hop and a writer hop, and should not
     * wait a whole iteration for each */
    take_pools(g);
    lp(g)->dispatch_pending = 0; /* what asked for it so far is dispatched now: no spin for it */
    phase(g, lp(g)->phases.dispatch);
    phase_due(g, LOOP_DUE_FLUSH, lp(g)->phases.flush);
}

/* How many events between two services of the workers and pools. Each service lets every
 * worker finish one round trip, so with 2 x workers client events between services, requests
 * bound for workers and requests the gateway answers itself share the loop about evenly
 * (measured with bench/run mix: 200 fast and 200 .qgate.ping[] connections). */
static int events_per_service(const struct gw *g) { return QG_MAX(4, QG_MIN(64, 2 * lpc(g)->nbackends)); }

void loop_clock_loop(struct gw *g)
{
    lp(g)->now_us = lp(g)->clock ? lp(g)->clock(lp(g)->clock_ctx) : loop_now_us();
    lp(g)->now_ms = lp(g)->now_us / 1000;
}

int loop_wait_ms_loop(struct gw *g)
{
    if (lp(g)->work_pending || lp(g)->dispatch_pending || (lp(g)->due & (LOOP_DUE_BACKLOG | LOOP_DUE_FLUSH)))
        return 0;
    int64_t next = loop_timers_next(&lp(g)->timers);
    if (next < 0)
        return -1;
    return next <= lp(g)->now_ms ? 0 : (int)QG_MIN(next - lp(g)->now_ms, 60000);
}

int loop_run_loop(struct gw *g)
{
    while (!lp(g)->stop) {
        loop_clock_loop(g);
        if (loop_step_loop(g, loop_wait_ms_loop(g)))
            return 1;
    }
    return lp(g)->exit_code;
}

int loop_step_loop(struct gw *g, int timeout)
{
    struct epoll_event evs[256];
    lp(g)->work_pending = 0;
    int n = epoll_wait(lp(g)->epfd, evs, (int)QG_ARRAY_LEN(evs), timeout);
    if (n < 0 && errno != EINTR) {
        log_error(NULL, "epoll_wait: %s", strerror(errno));
        return -1;
    }
    loop_clock_loop(g);
    uint64_t iter = ++lp(g)->iter;
    int since_service = 0, per_service = events_per_service(g);
    for (int i = 0; i < n; i++) {
        struct evsrc *s = evs[i].data.ptr;
        if (++since_service == per_service) {
            since_service = 0;
            if (i + 1 < n) /* (before the batch's last event the iteration's own phases are as near) */
                service_backends(g);
        }
        if (s->served != iter)
            s->ops->on_event(g, s, evs[i].events);
    }
    phase_due(g, LOOP_DUE_BACKLOG, lp(g)->phases.backlog);
    take_pools(g);
    lp(g)->dispatch_pending = 0; /* what asked for it so far is dispatched now: no spin for it */
    phase(g, lp(g)->phases.dispatch);
    phase_due(g, LOOP_DUE_FLUSH, lp(g)->phases.flush);
    struct timer *t;
    while ((t = loop_timers_pop_due(&lp(g)->timers, lp(g)->now_ms)))
        t->fn(g, t);
    phase_due(g, LOOP_DUE_REAP, lp(g)->phases.reap);
    if (lp(g)->phases.finished && lp(g)->phases.finished(g))
        lp(g)->stop = 1;
    return 0;
}

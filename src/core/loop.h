/* loop.h: the loop thread's machinery, knowing nothing of clients, workers or job kinds:
 * epoll over event sources that carry their own ops, a min-heap of timers, the cached clock,
 * completions handed to the handler registered for their kind, and the iteration of
 * docs/design.md with the steps it does not own (backlog, dispatch, flush, reap) as hooks. */
#ifndef LOOP_H
#define LOOP_H

#include <stdint.h>
#include <time.h>

struct gw;
struct job;
struct pool;

/* ---- timers: a min-heap of deadlines in ms; an all-zero timer is inactive ---------------- */
struct timer {
    int64_t when;
    int pos; /* 1-based heap index; 0 = not armed */
    void (*fn)(struct gw *g, struct timer *t);
};

struct timers {
    struct timer **h;
    int n, cap;
};

/* ---- event sources ----------------------------------------------------------------------- */
struct evsrc;
/* What epoll reported for s. */
typedef void (*ev_fn)(struct gw *g, struct evsrc *s, uint32_t events);

/* The ops every event source carries (connections extend them: conn.h). */
struct evops {
    ev_fn on_event;
};

/* What epoll's data points at: every registered object starts with one. */
struct evsrc {
    const struct evops *ops;
    uint64_t served;     /* the iteration in which a service of the worker set took its events */
};

/* The steps of an iteration that belong to others; the gateway sets them (gateway.c). The
 * backlog, flush and reap phases run only when due (struct loop.due: set by whoever makes
 * their work, conn.h's lists); dispatch runs every iteration. */
struct loop_phases {
    void (*backlog)(struct gw *g);   /* messages left over by a budget */
    void (*dispatch)(struct gw *g);  /* queued requests to idle workers */
    void (*flush)(struct gw *g);     /* output of connections marked dirty */
    void (*reap)(struct gw *g);      /* free what closed this iteration */
    int (*finished)(struct gw *g);   /* leave the loop (a drain is complete) */
};

/* A completion's handler (struct job.kind indexes them). The loop frees the job after it. */
typedef void (*job_done_fn)(struct gw *g, struct job *j);
#define LOOP_JOB_KINDS 16

/* A pool whose completions the loop takes (loop_watch_pool). */
struct pool_src {
    struct evsrc ev;
    struct pool *pool;
};

/* The loop's state: the first member of struct gw (gw.h), so that the loop reaches it from
 * the struct gw * every callback carries without knowing the rest. The fields above the line
 * are read (and work_pending, due, dispatch_pending, stop, nbackends set) by the other modules. */
struct loop {
    int64_t now_us, now_ms; /* cached clock, read once per iteration */
    int work_pending;       /* something to do without waiting: epoll timeout 0 */
    unsigned due;           /* LOOP_DUE_*: phases with work (loop_due_loop); backlog and flush
                             * due: the next epoll_wait does not block */
    int dispatch_pending;   /* something for the dispatch phase (a request queued, a worker free,
                             * a run owed): done by this iteration's dispatch when set before it,
                             * else the next iteration's without waiting */
    int stop;               /* leave the loop */
    int exit_code;
    int nbackends;          /* connections in the worker set (workers configured) */
    int nremoved;           /* ... of them removed by a reload, not yet gone */
    /* ---- */
    int epfd;               /* everything: listeners, clients, workers, pools, signals */
    int wepfd;              /* worker connections again, alone: served between batches of clients */
    uint64_t iter;          /* iterations so far */
    struct timers timers;
    job_done_fn on_job[LOOP_JOB_KINDS];
    struct loop_phases phases;
    struct pool_src *psrc[2];
    int npools;
    int64_t (*clock)(void *ctx); /* NULL = CLOCK_MONOTONIC (tests/sim brings its own) */
    void *clock_ctx;
};

/* Phases with work: set where the work is made, cleared by the loop just before the phase runs
 * (work made during it sets it again, for the next iteration). */
enum { LOOP_DUE_BACKLOG = 1u, LOOP_DUE_FLUSH = 2u, LOOP_DUE_REAP = 4u };
static inline void loop_due_loop(struct gw *g, unsigned what) { ((struct loop *)(void *)g)->due |= what; }

/* Create the two epoll sets (sources, and the worker set served between batches), with the
 * iteration's phases and a clock (NULL: CLOCK_MONOTONIC). 0 or -1. */
int loop_init(struct gw *g, const struct loop_phases *phases, int64_t (*clock)(void *), void *clock_ctx);
/* Watch fd for events in the main set (the second set: backend != 0). 0 or -1. */
int loop_watch(struct gw *g, int fd, struct evsrc *s, uint32_t events, int backend);
/* Change what fd is watched for; stop watching it (before it is closed). 0 or -1. */
int loop_modify_loop(struct gw *g, int fd, struct evsrc *s, uint32_t events, int backend);
void loop_unwatch_loop(struct gw *g, int fd, int backend);
/* Handle completions of kind with fn. */
void loop_on_job(struct gw *g, int kind, job_done_fn fn);
/* Watch a pool's completion eventfd; its completions are handed to their kinds' handlers. */
int loop_watch_pool(struct gw *g, struct pool *p, struct evsrc *s);
void loop_free(struct gw *g);

/* CLOCK_MONOTONIC in microseconds. */
static inline int64_t loop_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
/* Read the clock into now_us and now_ms. */
void loop_clock_loop(struct gw *g);
/* The clock now, as the moment of an event within the iteration: a request's arrival, its
 * sending, its reply's end (now_us is the iteration's start, the same for every event of it, so
 * two replies read in one iteration would be timed alike). Inline: a vDSO read on the hot path. */
static inline int64_t loop_stamp_us_loop(const struct gw *g)
{
    const struct loop *l = (const struct loop *)(const void *)g; /* the first member of struct gw */
    return l->clock ? l->clock(l->clock_ctx) : loop_now_us();
}
/* How long the next iteration may wait in epoll: 0 if work is pending, else until the next
 * timer (at most 60 s), -1 for no limit. */
int loop_wait_ms_loop(struct gw *g);
/* One iteration of the loop (docs/design.md): epoll_wait up to timeout_ms, clock, ready sources
 * within budgets, completions, the phases, timers, reclaim. 0, or -1 if epoll failed. */
int loop_step_loop(struct gw *g, int timeout_ms);
/* Run the loop until the finished phase says so or stop is set. */
int loop_run_loop(struct gw *g);

void loop_timer_arm_loop(struct gw *g, struct timer *t, int64_t when_ms, void (*fn)(struct gw *, struct timer *));
void loop_timer_cancel_loop(struct gw *g, struct timer *t);
int64_t loop_timers_next(const struct timers *ts);
/* Remove and return the earliest timer due at or before now, or NULL. */
struct timer *loop_timers_pop_due(struct timers *ts, int64_t now);
void loop_timers_free(struct timers *ts);

/* Handle one completion (its kind's handler), then free it. */
void loop_completion_loop(struct gw *g, struct job *j);
/* Take a pool's whole completion list in one splice and handle every job; returns how many. */
int loop_drain_pool_loop(struct gw *g, struct pool *p);

#endif

/* loop.h: the loop thread's machinery, knowing nothing of clients, workers or job kinds:
 * epoll over event sources that carry their own ops, a min-heap of timers, the cached clock,
 * completions handed to the handler registered for their kind, and the iteration of
 * DESIGN.md with the steps it does not own (backlog, dispatch, flush, reap) as hooks. */
#ifndef LOOP_H
#define LOOP_H

#include <stdint.h>

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
};

/* The steps of an iteration that belong to others; the gateway sets them (gateway.c). */
struct loop_phases {
    void (*backlog)(struct gw *g);   /* messages left over by a budget */
    void (*dispatch)(struct gw *g);  /* queued requests to idle workers */
    void (*flush)(struct gw *g);     /* output of connections marked dirty */
    void (*reap)(struct gw *g);      /* free what closed this iteration */
    int (*in_flight)(struct gw *g);  /* work received and not finished (SIGTERM waits for it) */
};

/* A completion's handler (struct job.kind indexes them). The loop frees the job after it. */
typedef void (*job_done_fn)(struct gw *g, struct job *j);
#define LOOP_JOB_KINDS 16

/* Create the two epoll sets (sources, and the worker set served between batches). 0 or -1. */
int loop_init(struct gw *g);
/* Watch fd for events in the main set (the second set: backend != 0). 0 or -1. */
int loop_watch(struct gw *g, int fd, struct evsrc *s, uint32_t events, int backend);
/* Handle completions of kind with fn. */
void loop_on_job(struct gw *g, int kind, job_done_fn fn);
/* Watch a pool's completion eventfd; its completions are handed to their kinds' handlers. */
int loop_watch_pool(struct gw *g, struct pool *p, struct evsrc *s);
void loop_free(struct gw *g);

int64_t gw_now_us(void);
/* Read the clock (the hook's, or CLOCK_MONOTONIC) into g->now_us and g->now_ms. */
void gw_clock_loop(struct gw *g);
/* How long the next iteration may wait in epoll: 0 if work is pending, else until the next
 * timer (at most 60 s), -1 for no limit. */
int gw_wait_ms(const struct gw *g);
/* One iteration of the loop (DESIGN.md): epoll_wait up to timeout_ms, clock, ready sources
 * within budgets, completions, the phases, timers, reclaim. 0, or -1 if epoll failed. */
int gw_step_loop(struct gw *g, int timeout_ms);
/* Run the loop until SIGTERM has drained or g->stop is set. */
int gw_run(struct gw *g);

void timer_arm(struct gw *g, struct timer *t, int64_t when_ms, void (*fn)(struct gw *, struct timer *));
void timer_cancel(struct gw *g, struct timer *t);
int64_t timers_next(const struct timers *ts);
/* Remove and return the earliest timer due at or before now, or NULL. */
struct timer *timers_pop_due(struct timers *ts, int64_t now);
void timers_free(struct timers *ts);

/* Handle one completion (its kind's handler), then free it. */
void gw_completion_loop(struct gw *g, struct job *j);
/* Take a pool's whole completion list in one splice and handle every job; returns how many. */
int gw_drain_pool_loop(struct gw *g, struct pool *p);

#endif

/* test_loop.c: src/core/loop.c alone (issue 22), without connections, clients, workers or the
 * gateway: fake event sources (eventfds, each a struct evsrc with its own ops), a fake clock, fake
 * phases (struct loop_phases) and manual pools (pool_create with 0 threads, pool_run_one). Every
 * step of an iteration writes to one trace, which the tests compare whole:
 *
 *   wait:T    the loop's epoll_wait on the main set, with the timeout it asked for
 *   wpoll:T   the poll of the worker set (struct evsrc watched with backend != 0)
 *   NAME      a source's on_event
 *   aN, bN    a completion of kind K_A, K_B (N: its seq) handled
 *   backlog dispatch flush reap fin    the phases (fin: the finished phase was asked); backlog,
 *             flush and reap only when due (loop_due_loop), as src's due makes them
 *   T:NAME    a timer fired
 *
 * epoll_wait is this file's own (below): it records the timeout the loop asked for, then looks
 * without blocking, and a timeout that runs out passes on the fake clock. No test sleeps or reads
 * the real clock, and a loop that would block forever cannot hang the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "loop.h"
#include "pool.h"
#include "tutil.h"

static struct gw g;

/* ---- the trace ------------------------------------------------------------------------------ */

static char trace[16384];

__attribute__((format(printf, 1, 2))) static void rec(const char *fmt, ...)
{
    size_t l = strlen(trace);
    if (l && l < sizeof trace - 1)
        trace[l++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trace + l, sizeof trace - l, fmt, ap);
    va_end(ap);
}

static void trace_reset(void) { trace[0] = 0; }

/* ---- the fake clock (µs) and the fake wait -------------------------------------------------- */

static int64_t clk_us;
static int clock_reads;

static int64_t fake_clock(void *ctx)
{
    assert_ptr_equal(ctx, &clk_us);
    clock_reads++;
    return clk_us;
}

static void set_ms(int64_t ms) { clk_us = ms * 1000; }

/* The loop's epoll_wait (it is called nowhere else in what this test links): the timeout is
 * recorded, the set is looked at without blocking, and when nothing is ready a positive timeout
 * runs out on the fake clock. */
int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
    int n = epoll_pwait(epfd, evs, max, 0, NULL), err = errno;
    if (epfd == g.loop.wepfd) {
        rec("wpoll:%d", timeout);
    } else {
        rec("wait:%d", timeout);
        if (n == 0 && timeout > 0)
            clk_us += (int64_t)timeout * 1000;
    }
    errno = err;
    return n;
}

/* ---- fake sources ---------------------------------------------------------------------------- */

struct src {
    struct evsrc ev; /* first: epoll's data points here */
    int fd;          /* an eventfd: readable once fired */
    const char *name;
    int keep;        /* its event leaves it readable: level-triggered, it is reported every wait */
    void (*then)(struct src *s); /* runs after its event is recorded */
    unsigned due;    /* LOOP_DUE_* its event makes due (as a read that queues output does) */
};

static struct src srcs[32];
static int nsrcs;

static void src_event(struct gw *gw, struct evsrc *s, uint32_t events)
{
    struct src *x = (struct src *)s;
    assert_ptr_equal(gw, &g);
    assert_true(events & EPOLLIN);
    rec("%s", x->name);
    if (!x->keep) {
        uint64_t v;
        assert_int_equal(read(x->fd, &v, sizeof v), (ssize_t)sizeof v);
    }
    if (x->due)
        loop_due_loop(gw, x->due);
    if (x->then)
        x->then(x);
}

static const struct evops src_ops = {.on_event = src_event};

/* A source watched in the main set, and in the worker set too if backend. */
static struct src *src_new(const char *name, int backend)
{
    assert_true(nsrcs < (int)(sizeof srcs / sizeof srcs[0]));
    struct src *s = &srcs[nsrcs++];
    memset(s, 0, sizeof *s);
    s->ev.ops = &src_ops;
    s->name = name;
    s->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(s->fd >= 0);
    assert_int_equal(loop_watch(&g, s->fd, &s->ev, EPOLLIN, backend), 0);
    return s;
}

/* Make s readable: epoll reports sources in the order they became ready. */
static void src_fire(struct src *s)
{
    uint64_t one = 1;
    assert_int_equal(write(s->fd, &one, sizeof one), (ssize_t)sizeof one);
}

/* ---- manual pools and completions ------------------------------------------------------------ */

enum { K_A = 1, K_B = 2, K_BULK = 3, K_NONE = 4 };

static struct pool *pa, *pb;
static struct pool_src psa, psb;
static int bulk_handled, bulk_disorder;
static uint64_t bulk_first_iter, bulk_last_iter;

static void job_run(struct job *j) { j->result = (int)j->seq + 1000; } /* "on the pool" */

static void on_a(struct gw *gw, struct job *j)
{
    assert_ptr_equal(gw, &g);
    assert_int_equal(j->kind, K_A);
    assert_int_equal(j->result, (int)j->seq + 1000); /* it ran before it came back */
    rec("a%llu", (unsigned long long)j->seq);
}

static void on_b(struct gw *gw, struct job *j)
{
    (void)gw;
    assert_int_equal(j->kind, K_B);
    rec("b%llu", (unsigned long long)j->seq);
}

/* Bulk completions are counted, not traced: each in the iteration it came in and in order. */
static void on_bulk(struct gw *gw, struct job *j)
{
    if (!bulk_handled++)
        bulk_first_iter = gw->loop.iter;
    bulk_last_iter = gw->loop.iter;
    if (j->seq != (uint64_t)bulk_handled)
        bulk_disorder++;
}

/* Queue a job of kind on p and run it there: its completion is posted, as a pool thread posts it. */
static void post(struct pool *p, int kind, uint64_t seq)
{
    struct job *j = job_new(job_run, kind);
    assert_non_null(j);
    j->seq = seq;
    pool_submit(p, j);
    assert_int_equal(pool_run_one(p, 0), 0);
}

/* ---- fake phases ------------------------------------------------------------------------------ */

static uint64_t finish_at;        /* finished says yes from this iteration on (0: never) */
static void (*dispatch_hook)(void); /* more for the dispatch phase to do */
static int bulk_at_dispatch;      /* bulk completions handled when dispatch last ran */

static int flush_again;           /* the flush phase makes itself due again, this many times */

/* A phase's bit is cleared before it runs (work it makes is for the next iteration). */
static void ph_backlog(struct gw *gw)
{
    assert_false(gw->loop.due & LOOP_DUE_BACKLOG);
    rec("backlog");
}
static void ph_dispatch(struct gw *gw)
{
    (void)gw;
    rec("dispatch");
    bulk_at_dispatch = bulk_handled;
    if (dispatch_hook)
        dispatch_hook();
}
static void ph_flush(struct gw *gw)
{
    assert_false(gw->loop.due & LOOP_DUE_FLUSH);
    rec("flush");
    if (flush_again > 0) {
        flush_again--;
        loop_due_loop(gw, LOOP_DUE_FLUSH); /* a budget cut it short: the rest next iteration */
    }
}
static void ph_reap(struct gw *gw)
{
    assert_false(gw->loop.due & LOOP_DUE_REAP);
    rec("reap");
    if (gw->loop.iter > 1000)
        fail_msg("the loop did not end");
}
static int ph_finished(struct gw *gw)
{
    rec("fin");
    return finish_at && gw->loop.iter >= finish_at;
}

static const struct loop_phases phases = {
    .backlog = ph_backlog,
    .dispatch = ph_dispatch,
    .flush = ph_flush,
    .reap = ph_reap,
    .finished = ph_finished,
};

/* ---- named timers ----------------------------------------------------------------------------- */

struct ntimer {
    struct timer t;          /* first: the heap holds it */
    const char *name;
    int fires;
    int64_t rearm_ms;        /* its callback arms it again, this long from now (0: not) */
    struct ntimer *cancels;  /* its callback cancels this one */
};

static void on_ntimer(struct gw *gw, struct timer *t)
{
    struct ntimer *n = (struct ntimer *)t;
    rec("T:%s", n->name);
    n->fires++;
    assert_int_equal(t->pos, 0); /* off the heap while it runs */
    if (n->rearm_ms)
        loop_timer_arm_loop(gw, t, gw->loop.now_ms + n->rearm_ms, on_ntimer);
    if (n->cancels)
        loop_timer_cancel_loop(gw, &n->cancels->t);
}

static void arm(struct ntimer *n, const char *name, int64_t when_ms)
{
    n->name = name;
    loop_timer_arm_loop(&g, &n->t, when_ms, on_ntimer);
}

/* ---- setup ------------------------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    memset(&g, 0, sizeof g);
    trace_reset();
    nsrcs = 0;
    finish_at = 0;
    flush_again = 0;
    dispatch_hook = NULL;
    bulk_handled = bulk_disorder = bulk_at_dispatch = 0;
    bulk_first_iter = bulk_last_iter = 0;
    clock_reads = 0;
    set_ms(1000);
    assert_int_equal(loop_init(&g, &phases, fake_clock, &clk_us), 0);
    assert_int_equal(g.loop.now_ms, 1000);
    pa = pool_create("test-a", 0);
    pb = pool_create("test-b", 0);
    assert_non_null(pa);
    assert_non_null(pb);
    memset(&psa, 0, sizeof psa);
    memset(&psb, 0, sizeof psb);
    assert_int_equal(loop_watch_pool(&g, pa, &psa.ev), 0);
    assert_int_equal(loop_watch_pool(&g, pb, &psb.ev), 0);
    loop_on_job(&g, K_A, on_a);
    loop_on_job(&g, K_B, on_b);
    loop_on_job(&g, K_BULK, on_bulk);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < nsrcs; i++)
        close(srcs[i].fd);
    loop_free(&g);
    pool_destroy(pa);
    pool_destroy(pb);
    return 0;
}

static void step(void) { assert_int_equal(loop_step_loop(&g, 0), 0); }

/* An iteration with nothing fired, which must find nothing to do, then a clean trace. epoll keeps
 * a level-triggered source it reported on its ready list, in place, until a wait finds it no
 * longer ready: after this, the order in which the next sources are fired is the order in which
 * the next wait reports them. */
static void settle(void)
{
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 dispatch fin");
    trace_reset();
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void post_b2(struct src *s) { (void)s, post(pb, K_B, 2); }

/* One iteration's steps in order: the wait, the sources it reported (a pool's eventfd among
 * them: its completions are handled there), the backlog, the completions posted since the wait
 * (taken without a wake-up), dispatch, flush, the timers due, the reap, and last the finished
 * question. A timer not yet due does not fire; a completion posted during the iteration is not
 * handled a second time when its eventfd is reported by the next wait. */
static void test_iteration_order(void **state)
{
    (void)state;
    struct ntimer due = {0}, later = {0};
    arm(&due, "due", 1000);
    arm(&later, "later", 1001);
    post(pa, K_A, 1);                   /* ready before the wait: pa's eventfd is reported */
    struct src *s1 = src_new("s1", 0);
    s1->then = post_b2;                 /* posted during the iteration, after the wait */
    src_fire(s1);
    s1->due = LOOP_DUE_BACKLOG | LOOP_DUE_FLUSH | LOOP_DUE_REAP;

    step();
    /* loop.c's header lists "completions drained whole, then the phases (backlog, dispatch,
     * flush)"; the code takes the completions posted since the wait after the backlog phase
     * (reported, not changed). What this asserts is what the code does. */
    assert_string_equal(trace, "wait:0 a1 s1 backlog b2 dispatch flush T:due reap fin");
    assert_int_equal(g.loop.iter, 1);
    assert_int_equal(due.fires, 1);
    assert_int_equal(later.fires, 0);
    assert_int_equal(g.loop.stop, 0);

    /* pb's eventfd was written during iteration 1: the next wait reports it, with nothing left */
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 dispatch fin");
    uint64_t v;
    assert_int_equal(read(pool_fd(pb), &v, sizeof v), -1); /* cleared by that wake-up */
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(g.loop.iter, 2);
}

/* The clock is read once per iteration, after the wait: what a source does to the clock meanwhile
 * is seen by the next iteration (its timers then). */
static void advance_clock(struct src *s) { (void)s, set_ms(1100); }

static void test_clock_once_per_iteration(void **state)
{
    (void)state;
    set_ms(2000);
    loop_clock_loop(&g);
    assert_int_equal(g.loop.now_ms, 2000);
    clk_us = 1234567;
    loop_clock_loop(&g);
    assert_int_equal(g.loop.now_us, 1234567);
    assert_int_equal(g.loop.now_ms, 1234);

    set_ms(1000);
    struct ntimer t = {0};
    arm(&t, "t", 1050);
    struct src *s1 = src_new("s1", 0);
    s1->then = advance_clock;
    src_fire(s1);
    int reads = clock_reads;
    step();
    assert_int_equal(clock_reads, reads + 1);
    assert_int_equal(g.loop.now_ms, 1000); /* as read after the wait */
    assert_string_equal(trace, "wait:0 s1 dispatch fin");
    trace_reset();
    step();
    assert_int_equal(g.loop.now_ms, 1100);
    assert_string_equal(trace, "wait:0 dispatch T:t fin");
}

/* The backlog, flush and reap phases run only in an iteration they are due in (loop_due_loop,
 * which conn.h's lists call), once each: a plain request's iteration calls no phase it has no
 * work for. The backlog or flush due keeps the next wait from blocking; the reap alone does not
 * (it comes at the end of the iteration that made it due). A flush that makes itself due again
 * runs in the next iteration, which does not wait; then the loop blocks again. */
static void test_phases_when_due(void **state)
{
    (void)state;
    step();
    assert_string_equal(trace, "wait:0 dispatch fin");
    assert_int_equal(g.loop.due, 0);
    assert_int_equal(loop_wait_ms_loop(&g), -1);

    struct src *s = src_new("s", 0);
    s->due = LOOP_DUE_REAP;
    src_fire(s);
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 s dispatch reap fin");
    assert_int_equal(g.loop.due, 0);

    s->due = LOOP_DUE_BACKLOG | LOOP_DUE_REAP;
    src_fire(s);
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 s backlog dispatch reap fin");

    /* loop_run_loop: the flush made due by s's event, then twice by itself */
    s->due = LOOP_DUE_FLUSH;
    flush_again = 2;
    src_fire(s);
    finish_at = g.loop.iter + 4;
    trace_reset();
    assert_int_equal(loop_run_loop(&g), 0);
    assert_string_equal(trace, "wait:-1 s dispatch flush fin wait:0 dispatch flush fin "
                               "wait:0 dispatch flush fin wait:-1 dispatch fin");
    assert_int_equal(g.loop.due, 0);
}

/* Many completions queued: all handled in the one iteration that woke for them, in order, never
 * one per wake-up (the ssdb defect); the same for many posted during an iteration, all handled
 * before that iteration's dispatch. A completion of a kind with no handler is freed (ASan's leak
 * check). */
static void post_bulk_100(struct src *s)
{
    (void)s;
    for (int i = 0; i < 100; i++)
        post(pa, K_BULK, (uint64_t)bulk_handled + (uint64_t)i + 1);
}

static void test_completions_drained_whole(void **state)
{
    (void)state;
    for (uint64_t i = 1; i <= 200; i++)
        post(pa, K_BULK, i);
    assert_int_equal(pool_eventfd_writes(pa), 1); /* one wake-up announces them all */
    step();
    assert_int_equal(bulk_handled, 200);
    assert_int_equal(bulk_first_iter, 1);
    assert_int_equal(bulk_last_iter, 1);
    assert_int_equal(bulk_disorder, 0);
    assert_int_equal(bulk_at_dispatch, 200);
    assert_string_equal(trace, "wait:0 dispatch fin");

    trace_reset();
    step(); /* nothing left for a second wake-up */
    assert_int_equal(bulk_handled, 200);
    assert_string_equal(trace, "wait:0 dispatch fin");

    /* 100 posted by a source's event, after the wait: all before this iteration's dispatch */
    bulk_handled = 0;
    struct src *s1 = src_new("s1", 0);
    s1->then = post_bulk_100;
    src_fire(s1);
    trace_reset();
    step();
    assert_int_equal(bulk_handled, 100);
    assert_int_equal(bulk_at_dispatch, 100);
    assert_int_equal(bulk_first_iter, 3);
    assert_int_equal(bulk_last_iter, 3);
    assert_int_equal(bulk_disorder, 0);

    /* both pools in one iteration; kinds without a handler (or out of range) are freed */
    loop_on_job(&g, 99, on_a);  /* ignored: out of range */
    loop_on_job(&g, -1, on_a);
    post(pa, K_A, 7);
    post(pb, K_B, 8);
    post(pa, K_NONE, 9);
    post(pb, 99, 10);
    post(pa, K_A, 11);
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 a7 a11 b8 dispatch fin");
}

/* How long the next wait may block: 0 with work pending (the flag, the backlog or flush due), else
 * until the next timer (0 if it is due or past, at most 60 s), -1 with no timer. The step clears
 * work_pending before its wait; a phase that sets it leaves it set for the next. */
static void set_pending(void) { g.loop.work_pending = 1; }

static void test_wait_ms(void **state)
{
    (void)state;
    assert_int_equal(loop_wait_ms_loop(&g), -1);
    struct ntimer t = {0}, u = {0};
    arm(&t, "t", 1250);
    assert_int_equal(loop_wait_ms_loop(&g), 250);
    arm(&u, "u", 1200); /* the earliest decides */
    assert_int_equal(loop_wait_ms_loop(&g), 200);
    loop_timer_cancel_loop(&g, &u.t);
    set_ms(1100);
    loop_clock_loop(&g);
    assert_int_equal(loop_wait_ms_loop(&g), 150);
    g.loop.work_pending = 1;
    assert_int_equal(loop_wait_ms_loop(&g), 0);
    g.loop.work_pending = 0;
    loop_due_loop(&g, LOOP_DUE_BACKLOG); /* a phase has work: no blocking */
    assert_int_equal(loop_wait_ms_loop(&g), 0);
    g.loop.due = LOOP_DUE_FLUSH;
    assert_int_equal(loop_wait_ms_loop(&g), 0);
    g.loop.due = LOOP_DUE_REAP; /* the reap comes at the end of the iteration: nothing to wake for */
    assert_int_equal(loop_wait_ms_loop(&g), 150);
    g.loop.due = 0;
    set_ms(1250);
    loop_clock_loop(&g);
    assert_int_equal(loop_wait_ms_loop(&g), 0); /* due */
    set_ms(1300);
    loop_clock_loop(&g);
    assert_int_equal(loop_wait_ms_loop(&g), 0); /* past: not negative */
    arm(&t, "t", g.loop.now_ms + 600000);
    assert_int_equal(loop_wait_ms_loop(&g), 60000);
    loop_timer_cancel_loop(&g, &t.t);
    assert_int_equal(loop_wait_ms_loop(&g), -1);

    g.loop.work_pending = 1;
    step();
    assert_int_equal(g.loop.work_pending, 0);
    dispatch_hook = set_pending;
    step();
    assert_int_equal(g.loop.work_pending, 1);
}

/* dispatch_pending (a request queued, a worker freed) asks for the dispatch phase: set before it
 * (by an event, a completion) it is done in this iteration and the next wait blocks, so a
 * request does not cost an empty iteration; set by the dispatch phase or after it, the next
 * wait does not block. */
static void set_dispatch(void) { g.loop.dispatch_pending = 1; }

static void test_dispatch_pending(void **state)
{
    (void)state;
    g.loop.dispatch_pending = 1; /* as an event's handler sets it */
    assert_int_equal(loop_wait_ms_loop(&g), 0);
    step();
    assert_int_equal(g.loop.dispatch_pending, 0); /* the dispatch phase ran: nothing left */
    assert_int_equal(loop_wait_ms_loop(&g), -1);
    dispatch_hook = set_dispatch; /* a dispatch that frees a worker, say: once more, at once */
    step();
    dispatch_hook = NULL;
    assert_int_equal(g.loop.dispatch_pending, 1);
    assert_int_equal(loop_wait_ms_loop(&g), 0);
    step();
    assert_int_equal(loop_wait_ms_loop(&g), -1);
}

/* loop_run_loop waits as loop_wait_ms_loop says: until the timer (the fake wait lets the time pass),
 * then not at all after a phase set work_pending, then with no limit once nothing is left. */
static void pending_on_first(void)
{
    if (g.loop.iter == 1)
        g.loop.work_pending = 1;
}

static void test_run_loop_waits(void **state)
{
    (void)state;
    struct ntimer t = {0};
    arm(&t, "t", 1250);
    dispatch_hook = pending_on_first;
    finish_at = 3;
    assert_int_equal(loop_run_loop(&g), 0);
    assert_string_equal(trace, "wait:250 dispatch T:t fin "
                               "wait:0 dispatch fin "
                               "wait:-1 dispatch fin");
    assert_int_equal(g.loop.iter, 3);
    assert_int_equal(g.loop.now_ms, 1250);
}

/* finished ends loop_run_loop after the iteration that said so, with exit_code; so does stop,
 * set by a phase (the rest of that iteration runs); stop set before it runs no iteration; an
 * epoll failure ends it with 1. */
static void stop_on_second(void)
{
    if (g.loop.iter == 2) {
        g.loop.stop = 1;
        g.loop.exit_code = 3;
    }
}

static char logged[512];
static void sink(const char *line, size_t len) { snprintf(logged, sizeof logged, "%.*s", (int)len, line); }

static void test_finished_and_stop(void **state)
{
    (void)state;
    struct src *busy = src_new("busy", 0);
    busy->keep = 1; /* always ready: the waits return at once */
    src_fire(busy);

    finish_at = 2;
    g.loop.exit_code = 5;
    assert_int_equal(loop_run_loop(&g), 5);
    assert_int_equal(g.loop.iter, 2);
    assert_int_equal(g.loop.stop, 1);
    assert_string_equal(trace, "wait:-1 busy dispatch fin wait:-1 busy dispatch fin");

    /* stop before it runs: no iteration */
    trace_reset();
    assert_int_equal(loop_run_loop(&g), 5);
    assert_int_equal(g.loop.iter, 2);
    assert_string_equal(trace, "");

    /* stop from a phase, in iteration 2 of this run */
    g.loop.stop = 0;
    g.loop.iter = 0;
    g.loop.exit_code = 0;
    finish_at = 0;
    dispatch_hook = stop_on_second;
    trace_reset();
    assert_int_equal(loop_run_loop(&g), 3);
    assert_int_equal(g.loop.iter, 2);
    assert_string_equal(trace, "wait:-1 busy dispatch fin wait:-1 busy dispatch fin");

    /* epoll fails */
    g.loop.stop = 0;
    int epfd = g.loop.epfd;
    g.loop.epfd = nsrcs ? srcs[0].fd : -1; /* not an epoll fd: EINVAL */
    log_sink = sink;
    logged[0] = 0;
    int rc = loop_run_loop(&g);
    log_sink = NULL;
    g.loop.epfd = epfd;
    assert_int_equal(rc, 1);
    assert_non_null(strstr(logged, "epoll_wait"));
}

/* Timers fire in deadline order, each once, after flush; a cancelled one never fires (also when
 * cancelled by a timer that fires before it in the same iteration); one armed again before it is
 * due fires once, at its new deadline; one re-armed from its own callback fires again when the
 * new deadline comes, not in the same iteration. */
static void test_timers(void **state)
{
    (void)state;
    struct ntimer a = {0}, b = {0}, c = {0}, d = {0}, e = {0}, f = {0}, r = {0}, x = {0};
    arm(&a, "a", 1030);
    arm(&b, "b", 1010);
    arm(&c, "c", 1020);
    arm(&d, "d", 1015);
    arm(&e, "e", 1050);
    arm(&f, "f", 1040);
    arm(&r, "r", 1005);
    arm(&x, "x", 1012);
    arm(&x, "x", 1055); /* moved */
    loop_timer_cancel_loop(&g, &d.t);
    loop_timer_cancel_loop(&g, &d.t); /* twice: a no-op */
    b.cancels = &f;
    r.rearm_ms = 20;
    assert_int_equal(loop_timers_next(&g.loop.timers), 1005);

    set_ms(1040);
    step();
    assert_string_equal(trace, "wait:0 dispatch T:r T:b T:c T:a fin");
    assert_int_equal(loop_timers_next(&g.loop.timers), 1050);

    r.rearm_ms = 0;
    set_ms(1060);
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 dispatch T:e T:x T:r fin");
    assert_int_equal(loop_timers_next(&g.loop.timers), -1);

    set_ms(5000);
    trace_reset();
    step();
    assert_string_equal(trace, "wait:0 dispatch fin");
    assert_int_equal(d.fires + f.fires, 0);
    assert_int_equal(r.fires, 2);
    assert_int_equal(x.fires, 1);
}

/* Many timers with random deadlines, some moved, some cancelled: those left fire once each, in
 * deadline order (the heap). */
#define NSTRESS 500
static struct stimer {
    struct timer t;
    int cancelled, fires;
} st[NSTRESS];
static int64_t last_when;
static int stress_fired, stress_disorder;

static void on_stress(struct gw *gw, struct timer *t)
{
    struct stimer *s = (struct stimer *)t;
    assert_true(t->when <= gw->loop.now_ms);
    if (t->when < last_when)
        stress_disorder++;
    last_when = t->when;
    s->fires++;
    stress_fired++;
}

static void test_timer_heap(void **state)
{
    (void)state;
    uint64_t seed = 42;
    memset(st, 0, sizeof st);
    stress_fired = stress_disorder = 0;
    for (int i = 0; i < NSTRESS; i++)
        loop_timer_arm_loop(&g, &st[i].t, 1000 + (int64_t)(tutil_rand(&seed) % 1000), on_stress);
    int left = NSTRESS;
    for (int i = 0; i < NSTRESS; i++) {
        uint64_t r = tutil_rand(&seed) % 4;
        if (r == 0) {
            loop_timer_cancel_loop(&g, &st[i].t);
            st[i].cancelled = 1;
            left--;
        } else if (r == 1) {
            loop_timer_arm_loop(&g, &st[i].t, 1000 + (int64_t)(tutil_rand(&seed) % 1000), on_stress);
        }
    }
    last_when = 0;
    set_ms(1500); /* about half are due */
    step();
    int first = stress_fired;
    assert_true(first > 0 && first < left);
    set_ms(3000);
    step();
    assert_int_equal(stress_fired, left);
    assert_int_equal(stress_disorder, 0);
    for (int i = 0; i < NSTRESS; i++)
        assert_int_equal(st[i].fires, !st[i].cancelled);
}

/* The worker set (sources watched with backend != 0) is served between batches of the main list:
 * before every per-th event, with per = 2 x nbackends within [4, 64], the worker set is polled
 * without blocking, its ready sources handled, the completions posted since taken, and dispatch
 * and flush run; a source it served is passed over when the main list names it later in the same
 * iteration. */
static void post_a1(struct src *s) { (void)s, post(pa, K_A, 1); }

static void test_worker_set_between_batches(void **state)
{
    (void)state;
    static const char *names[] = {"m1", "m2", "m3", "m4", "m5", "m6", "m7"};
    struct src *m[7];
    for (int i = 0; i < 7; i++)
        m[i] = src_new(names[i], 0);
    struct src *w = src_new("w", 1);
    m[0]->then = post_a1;

    /* nbackends 1: per = 4 (the least); w ready last, served in the service, passed over after */
    g.loop.nbackends = 1;
    for (int i = 0; i < 5; i++)
        src_fire(m[i]);
    src_fire(w);
    w->due = LOOP_DUE_FLUSH; /* it queued output: flushed in the service, not again after */
    m[4]->due = LOOP_DUE_FLUSH; /* and m5 after the service: flushed at the iteration's end */
    step();
    assert_string_equal(trace, "wait:0 m1 m2 m3 wpoll:0 w a1 dispatch flush m4 m5 "
                               "dispatch flush fin");
    w->due = m[4]->due = 0;

    /* w ready first: handled from the main list; the service finds the worker set empty */
    m[0]->then = NULL;
    settle();
    src_fire(w);
    for (int i = 0; i < 5; i++)
        src_fire(m[i]);
    step();
    assert_string_equal(trace, "wait:0 w m1 m2 wpoll:0 dispatch m3 m4 m5 dispatch fin");

    /* nbackends 3: per = 6 */
    g.loop.nbackends = 3;
    settle();
    for (int i = 0; i < 7; i++)
        src_fire(m[i]);
    src_fire(w);
    step();
    assert_string_equal(trace, "wait:0 m1 m2 m3 m4 m5 wpoll:0 w dispatch m6 m7 "
                               "dispatch fin");

    /* fewer events than per: no service; w from the main list */
    settle();
    src_fire(m[0]);
    src_fire(w);
    step();
    assert_string_equal(trace, "wait:0 m1 w dispatch fin");

    /* exactly per events (nbackends 1: 4): the per-th is the batch's last, no service before it
     * (the iteration's own phases come next: a service there cost an empty wait per iteration) */
    g.loop.nbackends = 1;
    settle();
    for (int i = 0; i < 3; i++)
        src_fire(m[i]);
    src_fire(w);
    step();
    assert_string_equal(trace, "wait:0 m1 m2 m3 w dispatch fin");
}

/* A source no longer watched is reported by neither set; one watched for nothing is not reported
 * until it is watched for EPOLLIN again (in both sets, for a worker). */
static void test_unwatch_and_modify(void **state)
{
    (void)state;
    struct src *m = src_new("m", 0), *w = src_new("w", 1), *v = src_new("v", 1);
    g.loop.nbackends = 1;
    assert_int_equal(loop_modify_loop(&g, v->fd, &v->ev, 0, 1), 0);
    loop_unwatch_loop(&g, m->fd, 0);
    loop_unwatch_loop(&g, w->fd, 1);
    src_fire(m);
    src_fire(w);
    src_fire(v);
    step();
    assert_string_equal(trace, "wait:0 dispatch fin");
    /* v watched again, in both sets: the worker set serves it (the main list is long enough) */
    struct src *n[4];
    for (int i = 0; i < 4; i++)
        n[i] = src_new("n", 0);
    settle();
    for (int i = 0; i < 4; i++)
        src_fire(n[i]);
    assert_int_equal(loop_modify_loop(&g, v->fd, &v->ev, EPOLLIN, 1), 0); /* ready: after the n */
    step();
    assert_string_equal(trace, "wait:0 n n n wpoll:0 v dispatch n dispatch fin");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_iteration_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_once_per_iteration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_phases_when_due, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completions_drained_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_ms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_loop_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finished_and_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timer_heap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_set_between_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwatch_and_modify, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

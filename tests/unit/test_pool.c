/* test_pool.c: the completion list (one eventfd write per empty -> non-empty transition, the
 * whole list taken in one splice, oldest first), real threads, and teardown with work in
 * flight. Also meant to run under ThreadSanitizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "tutil.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static int fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, 0);
    assert_true(r >= 0);
    return r == 1 && (p.revents & POLLIN);
}

static void never_run(struct job *j)
{
    (void)j;
    fail_msg("a job posted with pool_complete must not run");
}

static struct job *posted_job(uint64_t id)
{
    struct job *j = job_new(never_run, 7);
    assert_non_null(j);
    j->seq = id;
    return j;
}

/* Check that list holds exactly ids first..first+n-1 in order; free it. */
static void check_and_free_fifo(struct job *list, uint64_t first, uint64_t n)
{
    uint64_t got = 0;
    for (struct job *j = list, *next; j; j = next) {
        next = job_next(j);
        if (j->seq != first + got)
            fail_msg("completion %llu has id %llu, expected %llu", (unsigned long long)got,
                     (unsigned long long)j->seq, (unsigned long long)(first + got));
        assert_int_equal(j->kind, 7);
        got++;
        job_free(j);
    }
    assert_int_equal(got, n);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- job objects ----------------------------------------------------------------------------- */

static atomic_int ctx_freed;

static void count_free(void *ctx)
{
    atomic_fetch_add(&ctx_freed, 1);
    free(ctx);
}

static void test_job_new_free(void **state)
{
    (void)state;
    struct job *j = job_new(never_run, 3);
    assert_non_null(j);
    assert_ptr_equal(j->run, never_run);
    assert_int_equal(j->kind, 3);
    assert_null(job_next(j));
    assert_null(j->in);
    assert_null(j->out);
    assert_null(j->ctx);
    assert_int_equal(j->result, 0);
    /* job_free releases in, out and ctx (through ctx_free) */
    j->in = malloc(10);
    j->out = malloc(20);
    j->ctx = malloc(30);
    j->ctx_free = count_free;
    atomic_store(&ctx_freed, 0);
    job_free(j);
    assert_int_equal(atomic_load(&ctx_freed), 1);
    job_free(NULL);
}

/* ---- the completion list, driven from this thread -------------------------------------------- */

static void test_completion_batching(void **state)
{
    (void)state;
    struct pool *p = pool_create("t", 1);
    assert_non_null(p);
    int fd = pool_fd(p);
    assert_true(fd >= 0);
    assert_int_equal(pool_eventfd_writes(p), 0);
    assert_int_equal(pool_jobs_done(p), 0);

    /* nothing waiting: NULL, at once (the watchdog turns a blocking read into a failure) */
    alarm(30);
    assert_false(fd_readable(fd));
    assert_null(pool_drain_loop(p));
    assert_null(pool_drain_loop(p));
    alarm(0);
    assert_int_equal(pool_eventfd_writes(p), 0);

    /* K completions: one eventfd write, one drain returns all K, oldest first */
    enum { K = 1000 };
    for (uint64_t i = 0; i < K; i++) {
        pool_complete(p, posted_job(i));
        assert_int_equal(pool_eventfd_writes(p), 1);
        assert_true(fd_readable(fd));
    }
    assert_int_equal(pool_jobs_done(p), K);
    check_and_free_fifo(pool_drain_loop(p), 0, K);
    assert_int_equal(pool_eventfd_writes(p), 1);
    /* the drain cleared the eventfd, and took everything */
    assert_false(fd_readable(fd));
    assert_null(pool_drain_loop(p));

    /* 3, drain, 2, drain: one write per batch */
    for (uint64_t i = 0; i < 3; i++)
        pool_complete(p, posted_job(100 + i));
    assert_int_equal(pool_eventfd_writes(p), 2);
    assert_true(fd_readable(fd));
    check_and_free_fifo(pool_drain_loop(p), 100, 3);
    assert_false(fd_readable(fd));
    for (uint64_t i = 0; i < 2; i++)
        pool_complete(p, posted_job(200 + i));
    assert_int_equal(pool_eventfd_writes(p), 3);
    assert_true(fd_readable(fd));
    check_and_free_fifo(pool_drain_loop(p), 200, 2);
    assert_false(fd_readable(fd));
    assert_null(pool_drain_loop(p));
    assert_int_equal(pool_eventfd_writes(p), 3);
    assert_int_equal(pool_jobs_done(p), K + 5);

    /* the list is usable again after being emptied: a single job comes back alone */
    pool_complete(p, posted_job(300));
    assert_int_equal(pool_eventfd_writes(p), 4);
    struct job *one = pool_drain_loop(p);
    assert_non_null(one);
    assert_null(job_next(one));
    check_and_free_fifo(one, 300, 1);
    pool_destroy(p);
}

/* ---- real threads ---------------------------------------------------------------------------- */

enum { NJOBS = 2000 };

static uint64_t expect_out(uint64_t id, int k)
{
    return k == 0 ? ~id : id * id + 0x9e3779b97f4a7c15ULL;
}

/* Runs on a pool thread; touches only its job (and its immutable context). */
static void square_job(struct job *j)
{
    uint64_t id, salt;
    memcpy(&id, j->in, sizeof id);
    memcpy(&salt, j->ctx, sizeof salt);
    uint64_t o[2] = {expect_out(id, 0), expect_out(id, 1) ^ salt};
    j->out = malloc(sizeof o);
    if (j->out) {
        memcpy(j->out, o, sizeof o);
        j->out_len = sizeof o;
    }
    j->result = (int)(id % 1000) + 1;
}

static void test_threads(void **state)
{
    (void)state;
    struct pool *p = pool_create("t", 4);
    assert_non_null(p);
    int fd = pool_fd(p);
    unsigned char *seen = calloc(NJOBS, 1);
    assert_non_null(seen);
    atomic_store(&ctx_freed, 0);

    for (uint64_t i = 0; i < NJOBS; i++) {
        struct job *j = job_new(square_job, 1);
        assert_non_null(j);
        j->seq = i;
        j->in = malloc(sizeof i);
        assert_non_null(j->in);
        memcpy(j->in, &i, sizeof i);
        j->in_len = sizeof i;
        uint64_t *salt = malloc(sizeof *salt);
        assert_non_null(salt);
        *salt = i * 31;
        j->ctx = salt;
        j->ctx_free = count_free;
        pool_submit(p, j);
    }

    /* Wait on the eventfd as the loop does; drain whenever it is readable. The deadline only
     * keeps a lost wake-up from hanging the test. */
    int64_t deadline = now_ms() + 20000;
    uint64_t received = 0, drains = 0, nonempty_drains = 0;
    while (received < NJOBS) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            fail_msg("lost wake-up: %llu of %d jobs came back, %llu done, eventfd %s",
                     (unsigned long long)received, NJOBS, (unsigned long long)pool_jobs_done(p),
                     fd_readable(fd) ? "readable" : "not readable");
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        assert_true(r >= 0);
        if (r == 0)
            continue;
        struct job *list = pool_drain_loop(p);
        drains++;
        if (list)
            nonempty_drains++;
        for (struct job *j = list, *next; j; j = next) {
            next = job_next(j);
            assert_true(j->seq < NJOBS);
            if (seen[j->seq])
                fail_msg("job %llu came back twice", (unsigned long long)j->seq);
            seen[j->seq] = 1;
            received++;
            assert_int_equal(j->kind, 1);
            assert_int_equal(j->result, (int)(j->seq % 1000) + 1);
            assert_non_null(j->out);
            assert_int_equal(j->out_len, 16);
            uint64_t o[2];
            memcpy(o, j->out, sizeof o);
            assert_true(o[0] == expect_out(j->seq, 0));
            assert_true(o[1] == (expect_out(j->seq, 1) ^ (j->seq * 31)));
            job_free(j);
        }
    }
    for (int i = 0; i < NJOBS; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(pool_jobs_done(p), NJOBS);
    assert_int_equal(atomic_load(&ctx_freed), NJOBS);
    /* Every write marks an empty -> non-empty transition, and each transition is followed by a
     * drain that takes a non-empty list, so writes <= non-empty drains (<= drains + 1). */
    uint64_t w = pool_eventfd_writes(p);
    if (w > nonempty_drains)
        fail_msg("%llu eventfd writes for %llu non-empty drains (%llu drains)", (unsigned long long)w,
                 (unsigned long long)nonempty_drains, (unsigned long long)drains);
    assert_true(w <= drains + 1);
    assert_true(nonempty_drains >= 1);
    /* With every job back the list is empty, so the next completion writes again. (A thread may
     * still be finishing its own counter update, hence >=.) */
    while (pool_drain_loop(p)) /* cannot return anything: all jobs are back */
        fail_msg("a drain after the last job returned more jobs");
    pool_complete(p, posted_job(NJOBS));
    assert_true(pool_eventfd_writes(p) >= w + 1);
    assert_true(fd_readable(fd));
    check_and_free_fifo(pool_drain_loop(p), NJOBS, 1);
    free(seen);
    pool_destroy(p);
}

/* ---- teardown with work everywhere ----------------------------------------------------------- */

struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int started, open;
};

struct gate_ctx {
    struct gate *g;
};

static void gated_job(struct job *j)
{
    struct gate *g = ((struct gate_ctx *)j->ctx)->g;
    pthread_mutex_lock(&g->m);
    g->started++;
    pthread_cond_broadcast(&g->c);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
    j->out = malloc(8);
    j->out_len = 8;
}

static void plain_job(struct job *j)
{
    j->out = malloc(32);
    j->out_len = 32;
    j->result = 1;
}

static struct job *counted_job(job_fn fn, uint64_t id, void *ctx)
{
    struct job *j = job_new(fn, 2);
    assert_non_null(j);
    j->seq = id;
    j->in = malloc(16);
    assert_non_null(j->in);
    j->in_len = 16;
    j->ctx = ctx ? ctx : malloc(8);
    assert_non_null(j->ctx);
    j->ctx_free = count_free;
    return j;
}

static void test_destroy_with_work(void **state)
{
    (void)state;
    enum { NTHREADS = 2, NQUEUED = 100, NPOSTED = 50 };
    struct gate g = {.started = 0, .open = 0};
    pthread_mutex_init(&g.m, NULL);
    pthread_cond_init(&g.c, NULL);
    atomic_store(&ctx_freed, 0);

    struct pool *p = pool_create("t", NTHREADS);
    assert_non_null(p);
    /* occupy every thread */
    for (int i = 0; i < NTHREADS; i++) {
        struct gate_ctx *gc = malloc(sizeof *gc);
        assert_non_null(gc);
        gc->g = &g;
        pool_submit(p, counted_job(gated_job, (uint64_t)i, gc));
    }
    pthread_mutex_lock(&g.m);
    while (g.started < NTHREADS)
        pthread_cond_wait(&g.c, &g.m);
    pthread_mutex_unlock(&g.m);
    /* these stay queued: every thread is busy */
    for (int i = 0; i < NQUEUED; i++)
        pool_submit(p, counted_job(plain_job, 1000 + (uint64_t)i, NULL));
    /* and these are completions the loop never drained */
    for (int i = 0; i < NPOSTED; i++)
        pool_complete(p, counted_job(never_run, 5000 + (uint64_t)i, NULL));
    assert_int_equal(pool_jobs_done(p), NPOSTED);
    assert_int_equal(pool_eventfd_writes(p), 1);
    assert_int_equal(atomic_load(&ctx_freed), 0);

    /* let the busy threads finish (they may pick up some queued jobs before they see the stop) */
    pthread_mutex_lock(&g.m);
    g.open = 1;
    pthread_cond_broadcast(&g.c);
    pthread_mutex_unlock(&g.m);
    pool_destroy(p);
    /* every job, wherever it was, was freed exactly once (LSan checks in, out and the rest) */
    assert_int_equal(atomic_load(&ctx_freed), NTHREADS + NQUEUED + NPOSTED);

    /* a pool destroyed at once, with jobs submitted and never waited for */
    atomic_store(&ctx_freed, 0);
    p = pool_create("t", 3);
    assert_non_null(p);
    for (int i = 0; i < 200; i++)
        pool_submit(p, counted_job(plain_job, (uint64_t)i, NULL));
    pool_destroy(p);
    assert_int_equal(atomic_load(&ctx_freed), 200);

    /* and an idle one */
    p = pool_create("t", 2);
    assert_non_null(p);
    pool_destroy(p);
    pool_destroy(NULL);

    pthread_mutex_destroy(&g.m);
    pthread_cond_destroy(&g.c);
}

/* Heavy jobs (a zip bomb's decompression) take at most N - 1 of N threads: with two threads and
 * two heavy jobs blocked, a short job submitted after them still runs at once (a login waited
 * 15 s behind two bombs before); the second heavy job waits for the first. */
static void test_heavy_leaves_a_thread(void **state)
{
    (void)state;
    struct gate g = {.started = 0, .open = 0};
    pthread_mutex_init(&g.m, NULL);
    pthread_cond_init(&g.c, NULL);
    atomic_store(&ctx_freed, 0);
    struct pool *p = pool_create("t", 2);
    assert_non_null(p);
    for (int i = 0; i < 2; i++) {
        struct gate_ctx *gc = malloc(sizeof *gc);
        assert_non_null(gc);
        gc->g = &g;
        struct job *j = counted_job(gated_job, (uint64_t)i, gc);
        j->heavy = 1;
        pool_submit(p, j);
    }
    pthread_mutex_lock(&g.m);
    while (g.started < 1)
        pthread_cond_wait(&g.c, &g.m);
    pthread_mutex_unlock(&g.m);
    pool_submit(p, counted_job(plain_job, 100, NULL));
    /* the short job completes while the first heavy one still holds its thread */
    struct job *got = NULL;
    int64_t until = now_ms() + 20000;
    while (!got && now_ms() < until) {
        struct pollfd pf = {.fd = pool_fd(p), .events = POLLIN};
        assert_true(poll(&pf, 1, 100) >= 0);
        got = pool_drain_loop(p);
    }
    assert_non_null(got);
    assert_int_equal(got->seq, 100);
    assert_null(job_next(got));
    job_free(got);
    pthread_mutex_lock(&g.m);
    assert_int_equal(g.started, 1); /* the second heavy job has not begun */
    g.open = 1;
    pthread_cond_broadcast(&g.c);
    pthread_mutex_unlock(&g.m);
    int done = 0;
    until = now_ms() + 20000;
    while (done < 2 && now_ms() < until) {
        struct pollfd pf = {.fd = pool_fd(p), .events = POLLIN};
        assert_true(poll(&pf, 1, 100) >= 0);
        for (struct job *j = pool_drain_loop(p), *n; j; j = n) {
            n = job_next(j);
            done++;
            job_free(j);
        }
    }
    assert_int_equal(done, 2);
    assert_int_equal(g.started, 2);
    pool_destroy(p);
    assert_int_equal(atomic_load(&ctx_freed), 3);
    pthread_mutex_destroy(&g.m);
    pthread_cond_destroy(&g.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_new_free),
        cmocka_unit_test(test_completion_batching),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_destroy_with_work),
        cmocka_unit_test(test_heavy_leaves_a_thread),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}

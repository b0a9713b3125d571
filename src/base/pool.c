/* pool.c: thread pools with a job queue and a completion list drained whole by the loop. */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

struct pool {
    struct pool_head head; /* first: pool_take_loop reads it through a struct pool * */
    char name[16];
    pthread_mutex_t qlock; /* jobs waiting for a thread */
    pthread_cond_t qcond;
    struct joblist queue;
    size_t queued;         /* jobs in queue */
    int heavy_running, heavy_max; /* heavy jobs running; at most nthreads - 1 (1 for one thread) */
    int stop;
    pthread_mutex_t clock; /* completions waiting for the loop */
    struct joblist done;
    int efd;
    int nthreads;
    pthread_t *threads;
    atomic_uint_fast64_t efd_writes, jobs_done, jobs_submitted;
};

long job_new_fail_at;

struct job *job_new(job_fn run, int kind)
{
    if (job_new_fail_at > 0 && --job_new_fail_at == 0)
        return NULL; /* a test's out of memory */
    struct job *j = calloc(1, sizeof *j);
    if (j) {
        j->run = run;
        j->kind = kind;
    }
    return j;
}

void job_free(struct job *j)
{
    if (!j)
        return;
    free(j->in);
    free(j->out);
    if (j->ctx && j->ctx_free)
        j->ctx_free(j->ctx);
    free(j);
}

void pool_complete(struct pool *p, struct job *j)
{
    /* counted before it can be taken: a job the loop holds has always been counted */
    atomic_fetch_add(&p->jobs_done, 1);
    pthread_mutex_lock(&p->clock);
    int was_empty = STAILQ_EMPTY(&p->done);
    STAILQ_INSERT_TAIL(&p->done, j, link);
    atomic_store(&p->head.has_done, 1);
    pthread_mutex_unlock(&p->clock);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(p->efd, &one, sizeof one);
        (void)w; /* the counter cannot overflow: the loop reads it every wake-up */
        atomic_fetch_add(&p->efd_writes, 1);
    }
}

/* The first queued job this thread may run: a heavy one only while fewer than heavy_max run
 * (the others wait their turn, in order). Under qlock. */
static struct job *next_job(struct pool *p)
{
    struct job *j;
    STAILQ_FOREACH(j, &p->queue, link)
        if (!j->heavy || p->heavy_running < p->heavy_max)
            return j;
    return NULL;
}

static void *pool_main(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->qlock);
        struct job *j;
        while (!(j = next_job(p)) && !p->stop)
            pthread_cond_wait(&p->qcond, &p->qlock);
        if (p->stop) {
            pthread_mutex_unlock(&p->qlock);
            return NULL;
        }
        STAILQ_REMOVE(&p->queue, j, job, link);
        p->queued--;
        p->heavy_running += j->heavy;
        pthread_mutex_unlock(&p->qlock);
        int heavy = j->heavy;
        j->run(j);
        pool_complete(p, j); /* (j may be gone now) */
        if (heavy) {
            pthread_mutex_lock(&p->qlock);
            p->heavy_running--;
            pthread_cond_broadcast(&p->qcond); /* a heavy job waiting may run now */
            pthread_mutex_unlock(&p->qlock);
        }
    }
}

struct pool *pool_create(const char *name, int nthreads)
{
    /* nthreads 0: a manual pool, whose jobs run when pool_run_one says (tests/sim) */
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->name, sizeof p->name, "%s", name);
    pthread_mutex_init(&p->qlock, NULL);
    pthread_cond_init(&p->qcond, NULL);
    pthread_mutex_init(&p->clock, NULL);
    STAILQ_INIT(&p->queue);
    STAILQ_INIT(&p->done);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->threads = calloc((size_t)(nthreads ? nthreads : 1), sizeof *p->threads);
    if (p->efd < 0 || !p->threads) {
        pool_destroy(p);
        return NULL;
    }
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_main, p)) {
            pool_destroy(p);
            return NULL;
        }
        p->nthreads++;
    }
    p->heavy_max = nthreads > 1 ? nthreads - 1 : 1;
    return p;
}

int pool_fd(const struct pool *p) { return p->efd; }

void pool_submit(struct pool *p, struct job *j)
{
    atomic_fetch_add(&p->jobs_submitted, 1);
    pthread_mutex_lock(&p->qlock);
    STAILQ_INSERT_TAIL(&p->queue, j, link);
    p->queued++;
    pthread_cond_signal(&p->qcond);
    pthread_mutex_unlock(&p->qlock);
}

size_t pool_queued(struct pool *p)
{
    pthread_mutex_lock(&p->qlock);
    size_t n = p->queued;
    pthread_mutex_unlock(&p->qlock);
    return n;
}

int pool_run_one(struct pool *p, size_t k)
{
    pthread_mutex_lock(&p->qlock);
    struct job *j = STAILQ_FIRST(&p->queue);
    for (size_t i = 0; j && i < k; i++)
        j = STAILQ_NEXT(j, link);
    if (j) {
        STAILQ_REMOVE(&p->queue, j, job, link);
        p->queued--;
    }
    pthread_mutex_unlock(&p->qlock);
    if (!j)
        return -1;
    j->run(j);
    pool_complete(p, j);
    return 0;
}

/* Splice the whole completion list out under the lock: the jobs stay linked (job_next). */
struct job *pool_take_all_loop(struct pool *p)
{
    pthread_mutex_lock(&p->clock);
    struct job *all = STAILQ_FIRST(&p->done);
    STAILQ_INIT(&p->done);
    atomic_store(&p->head.has_done, 0);
    pthread_mutex_unlock(&p->clock);
    return all;
}

struct job *pool_drain_loop(struct pool *p)
{
    uint64_t n;
    ssize_t r = read(p->efd, &n, sizeof n);
    (void)r; /* EAGAIN when a previous drain already took what this wake-up announced */
    return pool_take_all_loop(p);
}

void pool_destroy(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->qlock);
    p->stop = 1;
    pthread_cond_broadcast(&p->qcond);
    pthread_mutex_unlock(&p->qlock);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    struct job *j;
    while ((j = STAILQ_FIRST(&p->queue))) {
        STAILQ_REMOVE_HEAD(&p->queue, link);
        job_free(j);
    }
    while ((j = STAILQ_FIRST(&p->done))) {
        STAILQ_REMOVE_HEAD(&p->done, link);
        job_free(j);
    }
    if (p->efd >= 0)
        close(p->efd);
    pthread_mutex_destroy(&p->qlock);
    pthread_cond_destroy(&p->qcond);
    pthread_mutex_destroy(&p->clock);
    free(p->threads);
    free(p);
}

uint64_t pool_eventfd_writes(const struct pool *p) { return atomic_load(&((struct pool *)p)->efd_writes); }
uint64_t pool_jobs_done(const struct pool *p) { return atomic_load(&((struct pool *)p)->jobs_done); }
uint64_t pool_jobs_submitted(const struct pool *p) { return atomic_load(&((struct pool *)p)->jobs_submitted); }

/* pool.h: reader and writer thread pools. Jobs are pure functions (bytes and an immutable
 * context in, bytes and a decision out); completions come back to the loop through a
 * mutex-protected intrusive list signalled by an eventfd and are taken out whole. */
#ifndef POOL_H
#define POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct job;
typedef void (*job_fn)(struct job *j);

struct job {
    STAILQ_ENTRY(job) link;     /* on a pool's queue or completion list; job_next walks a drained one */
    job_fn run;                 /* runs on a pool thread; touches only this job */
    int kind;                   /* what the loop does with the completion */
    uint32_t conn_id, conn_gen; /* the connection it is for: a stale one is dropped */
    uint64_t seq;               /* the request it answers */
    uint8_t *in;                /* owned input bytes */
    size_t in_len;
    void *ctx;                  /* owned immutable context, freed with ctx_free */
    void (*ctx_free)(void *ctx);
    int result;                 /* decision: 0 ok, or the kind's own (an enum gwcmd, a match) */
    uint8_t heavy;              /* long to run (a big or compressed message): a pool of N threads
                                 * runs at most N - 1 such at once, so that one thread stays for the
                                 * short ones (a login's credentials, a command) */
    _Alignas(8) unsigned char args[64]; /* what the kind takes and gives besides its bytes: typed
                                 * per kind by those who make jobs (jobs.h, union job_args) */
    uint8_t *out;               /* owned output bytes (a whole message) */
    size_t out_len;
    char text[192];             /* error text, command name */
};

STAILQ_HEAD(joblist, job);

/* A job over this many bytes of input, or with a compressed message, is heavy. */
#define JOB_HEAVY_MIN ((size_t)1 << 20)
static inline int job_heavy_msg(const uint8_t *m, size_t len) { return len > JOB_HEAVY_MIN || (len > 2 && m[2]); }

struct job *job_new(job_fn run, int kind);
/* Tests: when set to N > 0, the Nth job_new from now fails, as out of memory would (0: never). */
extern long job_new_fail_at;
/* The job after j in a list taken by pool_drain_loop or pool_take_loop, or NULL. */
static inline struct job *job_next(const struct job *j) { return STAILQ_NEXT(j, link); }
void job_free(struct job *j);

struct pool;
/* The first member of struct pool: what the loop looks at without a call. */
struct pool_head {
    atomic_int has_done; /* a hint that completions are waiting (set and cleared under the lock) */
};

/* Start nthreads threads. NULL on failure. With nthreads 0 the pool is manual: jobs wait in
 * its queue until pool_run_one runs them (tests/sim chooses the order). */
struct pool *pool_create(const char *name, int nthreads);
/* The eventfd to watch: readable when completions are waiting. */
int pool_fd(const struct pool *p);
/* Queue a job (the pool owns it until it comes back as a completion). */
void pool_submit(struct pool *p, struct job *j);
/* Loop side: clear the eventfd and take every completed job, oldest first, in one splice. */
struct job *pool_drain_loop(struct pool *p);
/* Loop side, between wake-ups: take every completed job without touching the eventfd, and
 * without taking the lock when there is nothing (a cheap look). The eventfd still wakes the
 * loop for what was posted; pool_drain_loop then clears it. */
struct job *pool_take_all_loop(struct pool *p);
static inline struct job *pool_take_loop(struct pool *p)
{
    return atomic_load(&((struct pool_head *)(void *)p)->has_done) ? pool_take_all_loop(p) : NULL;
}
/* Post a finished job as a pool thread does (used by the threads, and by tests). The eventfd is
 * written only when the list goes from empty to non-empty. */
void pool_complete(struct pool *p, struct job *j);
/* Jobs submitted and not yet taken by a thread. */
size_t pool_queued(struct pool *p);
/* Manual pools: run the k-th queued job (0 = oldest) on the caller's thread and post its
 * completion as a pool thread would. 0, or -1 if there is no such job. */
int pool_run_one(struct pool *p, size_t k);
/* Stop the threads and free every job still held. */
void pool_destroy(struct pool *p);

/* Counters, for tests and stats. */
uint64_t pool_eventfd_writes(const struct pool *p);
uint64_t pool_jobs_done(const struct pool *p);
uint64_t pool_jobs_submitted(const struct pool *p);

#endif

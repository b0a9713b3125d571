/* stats.h: latency histograms and the snapshot behind .qgate.stats[]. */
#ifndef STATS_H
#define STATS_H

#include <stdint.h>

#include "kcodec.h"

/* Log-linear histogram of microseconds: exact below 32, then 16 buckets per power of two
 * (relative error under 7%). All-zero is empty. */
#define HIST_SUB 16
#define HIST_BUCKETS (32 + 16 * 40)
struct hist {
    uint64_t n;
    uint64_t sum;        /* of the values added (µs) */
    uint32_t b[HIST_BUCKETS];
};

/* The bucket of v (µs). */
static inline int hist_bucket_of(uint64_t v)
{
    if (v < 32)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* v in [2^e, 2^(e+1)), e >= 5 */
    int sub = (int)((v >> (e - 4)) & (HIST_SUB - 1));
    int b = 32 + (e - 5) * HIST_SUB + sub;
    return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}
static inline void hist_add(struct hist *h, uint64_t us)
{
    h->b[hist_bucket_of(us)]++;
    h->n++;
    h->sum += us;
}
/* Add src's counts to dst. */
void hist_merge(struct hist *dst, const struct hist *src);
/* How many values lie in buckets whose upper edge is at most us (a Prometheus bucket le). */
uint64_t hist_count_le(const struct hist *h, uint64_t us);
/* The value at quantile q (0..1), the upper edge of its bucket; 0 when empty. */
uint64_t hist_quantile(const struct hist *h, double q);

/* One row of .qgate.stats[]. */
struct stats_row {
    char addr[300];
    char group[64];
    char state[16];
    uint8_t renewing;    /* its session ended: connecting again at once (up, for qgate_worker_up) */
    char transport[8];   /* unix, tcp, or empty: never tried */
    int64_t served, errors, inflight, queued, dropped;
    int64_t session;     /* pool = session: the id (.qgate.clients[]) of the client it is given to, or 0N */
    int64_t client;      /* the client whose request it runs (the longest running, over its connections), or 0N */
    int64_t started_ms;  /* when that run began, wall clock (ms since the epoch); 0: none */
    struct hist lat;
};

struct stats_snapshot {
    int n;
    struct stats_row rows[];
};

/* The table ([] address; group; state; served; errors; inflight; queued; p50_us; p99_us;
 * dropped; session; transport), a row per worker (its connections summed): dropped counts async
 * messages the worker sent that belonged to nobody (while it ran no client's request in a pool =
 * request group, or for a client that had gone); session is the id of the client a pool =
 * session worker is given to (0N: none);
 * transport is how its connection (or the last attempt) goes: `unix or `tcp. */
K stats_table(const struct stats_snapshot *s);

/* One row of .qgate.clients[] (admin only). */
struct client_row {
    int64_t id;
    char user[64];
    char peer[64];
    char group[64];
    char state[16];
    int64_t requests;  /* requests held: waiting, queued, running */
    int64_t running;   /* 1 while one of them is on a worker */
    int64_t connected_ms; /* wall clock, ms since the epoch */
    char worker[300];  /* the worker running its request, or empty */
    int64_t since_ms;  /* when that run began (wall clock); 0: nothing running */
    char query[64];    /* the first bytes of the running query, or empty */
};

struct clients_snapshot {
    int n;
    struct client_row rows[];
};

/* The table ([] id; user; peer; group; state; requests; running; connected; worker; since;
 * query): connected and since timestamps (since 0Np when nothing runs), worker a symbol, query a
 * string. */
K stats_clients_table(const struct clients_snapshot *s);

/* One row of .qgate.pools[]: a group, its clients waiting and its workers by state. */
struct pools_row {
    char group[64];
    uint8_t paused;      /* .qgate.pause[] */
    int64_t waiting;     /* clients whose head request waits for a worker (queued or held) */
    int64_t active;      /* workers running a run, or given to a session */
    int64_t idle, down;  /* free; not connected (down, resolving, connecting, handshake) */
    int64_t disabled;    /* connected, out of rotation (.qgate.disable[]), idle */
    int64_t maxwait_ms;  /* the longest a waiting request has waited so far; 0 if none */
    int64_t served, errors; /* runs of requests its workers ended, and q errors: kept over reloads */
};

struct pools_snapshot {
    int n;
    struct pools_row rows[];
};

/* The table ([] group; paused; waiting; active; idle; down; disabled; maxwait_ms; served;
 * errors): group a symbol, paused a boolean, the rest longs. */
K stats_pools_table(const struct pools_snapshot *s);

/* One row of .qgate.queries[] (admin only): a query a group learned (core/query.c). */
struct query_row {
    char group[64];
    int64_t key;         /* its hash */
    char text[64];       /* its first bytes */
    int64_t calls, errors;
    int64_t wait_us, wait_max_us, run_us, run_max_us; /* waits and runs: summed, the longest */
    int64_t bytes_in, bytes_out;
    int64_t last_ms;     /* when a run of it last ended (wall clock) */
};

struct queries_snapshot {
    int n;
    struct query_row rows[];
};

/* The table ([] group; key; query; calls; errors; wait_us; wait_mean_us; wait_max_us; run_us;
 * run_mean_us; run_max_us; bytes_in; bytes_out; last): group a symbol, query a string, last a
 * timestamp, the rest longs. */
K stats_queries_table(const struct queries_snapshot *s);

/* A wall-clock time (ms since the epoch) as a q timestamp (ns since 2000.01.01); 0: 0Np. */
int64_t stats_timestamp(int64_t wall_ms);

#endif

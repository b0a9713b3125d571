/* stats.c: latency histograms and the .qgate.stats[] table. */
#include "stats.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static uint64_t bucket_top(int b)
{
    if (b < 32)
        return (uint64_t)b;
    int e = (b - 32) / HIST_SUB + 5, sub = (b - 32) % HIST_SUB;
    return ((uint64_t)(HIST_SUB + sub + 1) << (e - 4)) - 1;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
    for (int b = 0; b < HIST_BUCKETS; b++)
        dst->b[b] += src->b[b];
    dst->n += src->n;
    dst->sum += src->sum;
}

uint64_t hist_count_le(const struct hist *h, uint64_t us)
{
    uint64_t n = 0;
    for (int b = 0; b < HIST_BUCKETS && bucket_top(b) <= us; b++)
        n += h->b[b];
    return n;
}

uint64_t hist_quantile(const struct hist *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->n + 0.999999);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        seen += h->b[b];
        if (seen >= rank)
            return bucket_top(b);
    }
    return bucket_top(HIST_BUCKETS - 1);
}

/* A symbol column from n rows of size stride starting at base + off. */
static K syms_of_rows(const void *base, int n, size_t stride, size_t off)
{
    const char **v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (int i = 0; i < n; i++)
        v[i] = (const char *)base + (size_t)i * stride + off;
    K x = k_symv(n, v);
    free(v);
    return x;
}

/* Every column of cols (n of them) made? Else cols is freed: 0. */
static int cols_made(K cols, int n)
{
    for (int c = 0; c < n; c++)
        if (!kK(cols)[c]) {
            k_free(cols);
            return 0;
        }
    return 1;
}

/* A column of strings (char vectors) from n rows, as syms_of_rows. */
static K strs_of_rows(const void *base, int n, size_t stride, size_t off)
{
    K x = k_list(n);
    for (int i = 0; x && i < n; i++) {
        const char *v = (const char *)base + (size_t)i * stride + off;
        if (!(kK(x)[i] = k_str(v, strlen(v)))) {
            k_free(x);
            return NULL;
        }
    }
    return x;
}

int64_t stats_timestamp(int64_t wall_ms)
{
    return wall_ms ? (wall_ms - 946684800000LL) * 1000000LL : INT64_MIN; /* since 2000.01.01; 0Np */
}

static K syms_of(const struct stats_snapshot *s, size_t off)
{
    return syms_of_rows(s->rows, s->n, sizeof s->rows[0], off);
}

K stats_table(const struct stats_snapshot *s)
{
    static const char *names[] = {"address", "group", "state", "served", "errors",
                                  "inflight", "queued", "p50_us", "p99_us", "dropped", "session",
                                  "transport", "client", "started"};
    enum { NCOLS = sizeof names / sizeof names[0] };
    K cols = k_list(NCOLS);
    if (!cols)
        return NULL;
    kK(cols)[0] = syms_of(s, offsetof(struct stats_row, addr));
    kK(cols)[1] = syms_of(s, offsetof(struct stats_row, group));
    kK(cols)[2] = syms_of(s, offsetof(struct stats_row, state));
    for (int c = 3; c < 11; c++)
        kK(cols)[c] = k_vec(KT_LONG, s->n);
    kK(cols)[11] = syms_of(s, offsetof(struct stats_row, transport));
    kK(cols)[12] = k_vec(KT_LONG, s->n);
    kK(cols)[13] = k_vec(KT_TIMESTAMP, s->n);
    if (!cols_made(cols, NCOLS))
        return NULL;
    for (int i = 0; i < s->n; i++) {
        const struct stats_row *r = &s->rows[i];
        kJ(kK(cols)[3])[i] = r->served;
        kJ(kK(cols)[4])[i] = r->errors;
        kJ(kK(cols)[5])[i] = r->inflight;
        kJ(kK(cols)[6])[i] = r->queued;
        kJ(kK(cols)[7])[i] = (int64_t)hist_quantile(&r->lat, 0.50);
        kJ(kK(cols)[8])[i] = (int64_t)hist_quantile(&r->lat, 0.99);
        kJ(kK(cols)[9])[i] = r->dropped;
        kJ(kK(cols)[10])[i] = r->session;
        kJ(kK(cols)[12])[i] = r->client;
        kJ(kK(cols)[13])[i] = stats_timestamp(r->started_ms);
    }
    return k_table(k_dict(k_symv(NCOLS, names), cols));
}

K stats_clients_table(const struct clients_snapshot *s)
{
    static const char *names[] = {"id", "user", "peer", "group", "state", "requests", "running",
                                  "connected", "worker", "since", "query"};
    enum { NCOLS = sizeof names / sizeof names[0] };
    K cols = k_list(NCOLS);
    if (!cols)
        return NULL;
    size_t stride = sizeof s->rows[0];
    kK(cols)[0] = k_vec(KT_LONG, s->n);
    kK(cols)[1] = syms_of_rows(s->rows, s->n, stride, offsetof(struct client_row, user));
    kK(cols)[2] = syms_of_rows(s->rows, s->n, stride, offsetof(struct client_row, peer));
    kK(cols)[3] = syms_of_rows(s->rows, s->n, stride, offsetof(struct client_row, group));
    kK(cols)[4] = syms_of_rows(s->rows, s->n, stride, offsetof(struct client_row, state));
    kK(cols)[5] = k_vec(KT_LONG, s->n);
    kK(cols)[6] = k_vec(KT_LONG, s->n);
    kK(cols)[7] = k_vec(KT_TIMESTAMP, s->n);
    kK(cols)[8] = syms_of_rows(s->rows, s->n, stride, offsetof(struct client_row, worker));
    kK(cols)[9] = k_vec(KT_TIMESTAMP, s->n);
    kK(cols)[10] = strs_of_rows(s->rows, s->n, stride, offsetof(struct client_row, query));
    if (!cols_made(cols, NCOLS))
        return NULL;
    for (int i = 0; i < s->n; i++) {
        kJ(kK(cols)[0])[i] = s->rows[i].id;
        kJ(kK(cols)[5])[i] = s->rows[i].requests;
        kJ(kK(cols)[6])[i] = s->rows[i].running;
        kJ(kK(cols)[7])[i] = stats_timestamp(s->rows[i].connected_ms);
        kJ(kK(cols)[9])[i] = stats_timestamp(s->rows[i].since_ms);
    }
    return k_table(k_dict(k_symv(NCOLS, names), cols));
}

K stats_queries_table(const struct queries_snapshot *s)
{
    static const char *names[] = {"group", "key", "query", "calls", "errors", "wait_us", "wait_mean_us",
                                  "wait_max_us", "run_us", "run_mean_us", "run_max_us", "bytes_in", "bytes_out", "last"};
    enum { NCOLS = sizeof names / sizeof names[0] };
    K cols = k_list(NCOLS);
    if (!cols)
        return NULL;
    size_t stride = sizeof s->rows[0];
    kK(cols)[0] = syms_of_rows(s->rows, s->n, stride, offsetof(struct query_row, group));
    kK(cols)[1] = k_vec(KT_LONG, s->n);
    kK(cols)[2] = strs_of_rows(s->rows, s->n, stride, offsetof(struct query_row, text));
    for (int c = 3; c < NCOLS - 1; c++)
        kK(cols)[c] = k_vec(KT_LONG, s->n);
    kK(cols)[NCOLS - 1] = k_vec(KT_TIMESTAMP, s->n);
    if (!cols_made(cols, NCOLS))
        return NULL;
    for (int i = 0; i < s->n; i++) {
        const struct query_row *r = &s->rows[i];
        int64_t v[] = {r->key, 0, r->calls, r->errors, r->wait_us, r->calls ? r->wait_us / r->calls : 0, r->wait_max_us,
                       r->run_us, r->calls ? r->run_us / r->calls : 0, r->run_max_us, r->bytes_in, r->bytes_out};
        for (int c = 1; c < NCOLS - 1; c++)
            if (c != 2)
                kJ(kK(cols)[c])[i] = v[c - 1];
        kJ(kK(cols)[NCOLS - 1])[i] = stats_timestamp(r->last_ms);
    }
    return k_table(k_dict(k_symv(NCOLS, names), cols));
}

K stats_pools_table(const struct pools_snapshot *s)
{
    static const char *names[] = {"group", "paused", "waiting", "active", "idle", "down", "disabled", "maxwait_ms",
                                  "served", "errors"};
    enum { NCOLS = sizeof names / sizeof names[0] };
    K cols = k_list(NCOLS);
    if (!cols)
        return NULL;
    kK(cols)[0] = syms_of_rows(s->rows, s->n, sizeof s->rows[0], offsetof(struct pools_row, group));
    kK(cols)[1] = k_vec(KT_BOOL, s->n);
    for (int c = 2; c < NCOLS; c++)
        kK(cols)[c] = k_vec(KT_LONG, s->n);
    if (!cols_made(cols, NCOLS))
        return NULL;
    for (int i = 0; i < s->n; i++) {
        const struct pools_row *r = &s->rows[i];
        const int64_t v[] = {r->waiting, r->active, r->idle, r->down, r->disabled, r->maxwait_ms, r->served, r->errors};
        kG(kK(cols)[1])[i] = r->paused;
        for (int c = 2; c < NCOLS; c++)
            kJ(kK(cols)[c])[i] = v[c - 2];
    }
    return k_table(k_dict(k_symv(NCOLS, names), cols));
}

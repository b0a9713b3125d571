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

static K syms_of(const struct stats_snapshot *s, size_t off)
{
    return syms_of_rows(s->rows, s->n, sizeof s->rows[0], off);
}

K stats_table(const struct stats_snapshot *s)
{
    static const char *names[] = {"address", "group", "state", "served", "errors",
                                  "inflight", "queued", "p50_us", "p99_us", "dropped", "session",
                                  "transport"};
    enum { NCOLS = sizeof names / sizeof names[0] };
    K cols = k_list(NCOLS);
    if (!cols)
        return NULL;
    kK(cols)[0] = syms_of(s, offsetof(struct stats_row, addr));
    kK(cols)[1] = syms_of(s, offsetof(struct stats_row, group));
    kK(cols)[2] = syms_of(s, offsetof(struct stats_row, state));
    for (int c = 3; c < NCOLS - 1; c++)
        kK(cols)[c] = k_vec(KT_LONG, s->n);
    kK(cols)[NCOLS - 1] = syms_of(s, offsetof(struct stats_row, transport));
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
    }
    return k_table(k_dict(k_symv(NCOLS, names), cols));
}

K stats_clients_table(const struct clients_snapshot *s)
{
    static const char *names[] = {"id", "user", "peer", "group", "state", "requests", "running"};
    K cols = k_list(7);
    if (!cols)
        return NULL;
    kK(cols)[0] = k_vec(KT_LONG, s->n);
    kK(cols)[1] = syms_of_rows(s->rows, s->n, sizeof s->rows[0], offsetof(struct client_row, user));
    kK(cols)[2] = syms_of_rows(s->rows, s->n, sizeof s->rows[0], offsetof(struct client_row, peer));
    kK(cols)[3] = syms_of_rows(s->rows, s->n, sizeof s->rows[0], offsetof(struct client_row, group));
    kK(cols)[4] = syms_of_rows(s->rows, s->n, sizeof s->rows[0], offsetof(struct client_row, state));
    kK(cols)[5] = k_vec(KT_LONG, s->n);
    kK(cols)[6] = k_vec(KT_LONG, s->n);
    if (!cols_made(cols, 7))
        return NULL;
    for (int i = 0; i < s->n; i++) {
        kJ(kK(cols)[0])[i] = s->rows[i].id;
        kJ(kK(cols)[5])[i] = s->rows[i].requests;
        kJ(kK(cols)[6])[i] = s->rows[i].running;
    }
    return k_table(k_dict(k_symv(7, names), cols));
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

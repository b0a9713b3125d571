/* metrics.c: the snapshot's Prometheus page and .qgate.totals[] dictionary (writer pool). */
#include "metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "kipc.h"
#include "pool.h"

void metrics_snap_free(void *ctx)
{
    struct metrics_snap *s = ctx;
    if (s)
        free(s->workers);
    free(s);
}

/* ---- a growing text -------------------------------------------------------------------------- */

struct text {
    char *p;
    size_t len, cap;
    int oom;
};

static void tprintf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(struct text *t, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !t->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        /* no buffer yet: vsnprintf(NULL, 0) only measures (NULL + 0 is undefined) */
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

/* A label value: \ " and newline escaped. */
static const char *label(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; *s && o + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') {
            buf[o++] = '\\';
            buf[o++] = *s == '\n' ? 'n' : *s;
        } else {
            buf[o++] = *s;
        }
    }
    buf[o] = 0;
    return buf;
}

static void head(struct text *t, const char *name, const char *type, const char *help)
{
    tprintf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The latency buckets shown (µs), and +Inf. */
static const uint64_t le_us[] = {100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
                                 1000000, 2500000, 5000000, 10000000, 30000000, 60000000};

static void histogram(struct text *t, const char *name, const char *labels, const struct hist *h)
{
    for (size_t i = 0; i < sizeof le_us / sizeof le_us[0]; i++)
        tprintf(t, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, (double)le_us[i] / 1e6,
                (unsigned long long)hist_count_le(h, le_us[i]));
    tprintf(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->n);
    tprintf(t, "%s_sum{%s} %.6f\n", name, labels, (double)h->sum / 1e6);
    tprintf(t, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->n);
}

/* One unlabelled metric: its HELP and TYPE lines, then its value. */
static void scalar(struct text *t, const char *name, const char *type, const char *help, uint64_t v)
{
    head(t, name, type, help);
    tprintf(t, "%s %llu\n", name, (unsigned long long)v);
}

static void render_totals(struct text *t, const struct metrics_snap *s)
{
    char v[64];
    head(t, "qgate_build_info", "gauge", "qgate's version");
    tprintf(t, "qgate_build_info{version=\"%s\"} 1\n", label(s->version, v, sizeof v));
    head(t, "qgate_start_time_seconds", "gauge", "when the gateway started, seconds since the epoch");
    tprintf(t, "qgate_start_time_seconds %.3f\n", (double)s->start_wall_ms / 1e3);
    head(t, "qgate_uptime_seconds", "gauge", "seconds since the gateway started");
    tprintf(t, "qgate_uptime_seconds %.3f\n", (double)s->uptime_ms / 1e3);
    head(t, "qgate_clients", "gauge", "client connections, by state");
    for (int i = 0; i < s->nclient_states; i++)
        tprintf(t, "qgate_clients{state=\"%s\"} %lld\n", s->client_state[i], (long long)s->clients[i]);
    scalar(t, "qgate_connections_accepted_total", "counter", "client connections accepted", s->accepted);
    scalar(t, "qgate_handshakes_total", "counter", "client handshakes completed", s->handshakes);
    head(t, "qgate_requests_total", "counter",
         "requests ended, by outcome: ok, error (a q error), gwerror (the gateway's), gone (the client left first), "
         "closed (its connection was closed first)");
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        tprintf(t, "qgate_requests_total{outcome=\"%s\"} %llu\n", alog_outcome_name(i), (unsigned long long)s->ended[i]);
    head(t, "qgate_refused_total", "counter", "connections and requests refused, by reason");
    for (int i = 0; i < s->nrefusals; i++)
        tprintf(t, "qgate_refused_total{reason=\"%s\"} %llu\n", s->refusal[i], (unsigned long long)s->refused[i]);
    scalar(t, "qgate_query_timeouts_total", "counter", "worker connections dropped for query_timeout", s->query_timeouts);
    scalar(t, "qgate_request_bytes_total", "counter", "bytes of the requests ended, as clients sent them", s->req_bytes);
    scalar(t, "qgate_reply_bytes_total", "counter", "bytes of their replies, as workers sent them or the gateway made them", s->reply_bytes);
    scalar(t, "qgate_access_log_lines_total", "counter", "access log lines that reached the file whole", s->alog_lines);
    scalar(t, "qgate_access_log_dropped_total", "counter",
         "access log lines not written: the file behind (16 MiB queued), a write failed or cut short, no file open, "
         "or left at exit", s->alog_dropped);
    scalar(t, "qgate_access_log_errors_total", "counter", "failed writes and opens of the access log", s->alog_errors);
    scalar(t, "qgate_access_log_queued", "gauge",
         "access log lines waiting for its thread to write them (not a line cut before its newline by a full "
         "disk, which waits for room)", s->alog_queued);
    scalar(t, "qgate_log_dropped_total", "counter",
         "log lines dropped: stderr behind (1 MiB queued: a stalled journald, a stopped pipe reader)", s->log_dropped);
    scalar(t, "qgate_held_bytes", "gauge",
         "bytes held whole for clients (replies collected to change them, and the replies made, until written): "
         "bounded by hold_max", s->held_bytes);
    scalar(t, "qgate_held_passed_total", "counter",
         "replies sent as the worker sent them, not decompressed or compressed, because hold_max was reached", s->held_passed);
    scalar(t, "qgate_nested_total", "counter",
         "messages clients sent while they owed a worker a callback's answer, run nested on that worker as q runs them",
         s->nested);
    scalar(t, "qgate_pending_bytes", "gauge",
         "bytes of requests read whole (from their header) and not yet sent to a worker or answered: bounded by "
         "pending_max", s->pending_bytes);
    scalar(t, "qgate_pending_waits_total", "counter",
         "messages whose reading waited for room under pending_max", s->pending_waits);
    scalar(t, "qgate_cut_streams_total", "counter",
         "clients closed as their worker was lost in the middle of a message to them (what was queued ahead written first)", s->tails);
}

static void render_groups(struct text *t, const struct metrics_snap *s)
{
    const struct stats_snapshot *w = s->workers;
    char gl[160], wl[700];
    head(t, "qgate_group_queued", "gauge", "clients whose request waits for a worker of the group");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_queued{group=\"%s\"} %lld\n", label(s->groups[i].name, gl, sizeof gl),
                (long long)s->groups[i].queued);
    head(t, "qgate_group_longest_wait_seconds", "gauge", "how long the longest-waiting queued request has waited");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_longest_wait_seconds{group=\"%s\"} %.3f\n", label(s->groups[i].name, gl, sizeof gl),
                (double)s->groups[i].maxwait_ms / 1e3);
    head(t, "qgate_group_paused", "gauge", "1 while the group is paused (.qgate.pause[])");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_paused{group=\"%s\"} %d\n", label(s->groups[i].name, gl, sizeof gl), s->groups[i].paused);
    head(t, "qgate_group_pipelined_total", "counter",
         "requests sent to a busy worker, on another of its connections (pipeline, pipeline_wait)");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_pipelined_total{group=\"%s\"} %llu\n", label(s->groups[i].name, gl, sizeof gl),
                (unsigned long long)s->groups[i].pipelined);
    head(t, "qgate_group_requests_total", "counter",
         "requests of the group ended, by outcome (as qgate_requests_total): kept over reloads");
    for (int i = 0; i < s->ngroups; i++)
        for (int o = 0; o < ALOG_NOUTCOMES; o++)
            tprintf(t, "qgate_group_requests_total{group=\"%s\",outcome=\"%s\"} %llu\n",
                    label(s->groups[i].name, gl, sizeof gl), alog_outcome_name(o), (unsigned long long)s->groups[i].ended[o]);
    head(t, "qgate_group_refused_total", "counter",
         "requests of the group refused: busy (max_queue), queue_timeout, no_worker (none of it up)");
    for (int i = 0; i < s->ngroups; i++) {
        const struct metrics_group *m = &s->groups[i];
        label(m->name, gl, sizeof gl);
        tprintf(t, "qgate_group_refused_total{group=\"%s\",reason=\"busy\"} %llu\n", gl, (unsigned long long)m->refused_busy);
        tprintf(t, "qgate_group_refused_total{group=\"%s\",reason=\"queue_timeout\"} %llu\n", gl,
                (unsigned long long)m->refused_timeout);
        tprintf(t, "qgate_group_refused_total{group=\"%s\",reason=\"no_worker\"} %llu\n", gl,
                (unsigned long long)m->refused_no_worker);
    }
    head(t, "qgate_group_request_bytes_total", "counter", "bytes of the group's requests ended, as clients sent them");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_request_bytes_total{group=\"%s\"} %llu\n", label(s->groups[i].name, gl, sizeof gl),
                (unsigned long long)s->groups[i].req_bytes);
    head(t, "qgate_group_reply_bytes_total", "counter", "bytes of their replies");
    for (int i = 0; i < s->ngroups; i++)
        tprintf(t, "qgate_group_reply_bytes_total{group=\"%s\"} %llu\n", label(s->groups[i].name, gl, sizeof gl),
                (unsigned long long)s->groups[i].reply_bytes);
    head(t, "qgate_workers", "gauge", "workers of the group, by state");
    for (int i = 0; i < s->ngroups; i++)
        for (int k = 0; k < s->nworker_states; k++) {
            int n = 0;
            for (int r = 0; w && r < w->n; r++)
                n += !strcmp(w->rows[r].group, s->groups[i].name) && !strcmp(w->rows[r].state, s->worker_state[k]);
            tprintf(t, "qgate_workers{group=\"%s\",state=\"%s\"} %d\n", label(s->groups[i].name, gl, sizeof gl),
                    s->worker_state[k], n);
        }
    head(t, "qgate_worker_up", "gauge",
         "1 while the worker is connected and in rotation (idle, busy, or given to a session), or connecting again at "
         "once for the next session");
    for (int r = 0; w && r < w->n; r++)
        tprintf(t, "qgate_worker_up{group=\"%s\",worker=\"%s\"} %d\n", label(w->rows[r].group, gl, sizeof gl),
                label(w->rows[r].addr, wl, sizeof wl),
                w->rows[r].renewing || !strcmp(w->rows[r].state, "idle") || !strcmp(w->rows[r].state, "busy") ||
                    !strcmp(w->rows[r].state, "pinned"));
    head(t, "qgate_worker_state", "gauge", "1 for the worker's state, 0 for the others");
    for (int r = 0; w && r < w->n; r++)
        for (int k = 0; k < s->nworker_states; k++)
            tprintf(t, "qgate_worker_state{group=\"%s\",worker=\"%s\",state=\"%s\"} %d\n",
                    label(w->rows[r].group, gl, sizeof gl), label(w->rows[r].addr, wl, sizeof wl), s->worker_state[k],
                    !strcmp(w->rows[r].state, s->worker_state[k]));
    head(t, "qgate_worker_requests_total", "counter", "requests the worker ran");
    for (int r = 0; w && r < w->n; r++)
        tprintf(t, "qgate_worker_requests_total{group=\"%s\",worker=\"%s\"} %lld\n",
                label(w->rows[r].group, gl, sizeof gl), label(w->rows[r].addr, wl, sizeof wl), (long long)w->rows[r].served);
    head(t, "qgate_worker_errors_total", "counter", "q errors the worker answered");
    for (int r = 0; w && r < w->n; r++)
        tprintf(t, "qgate_worker_errors_total{group=\"%s\",worker=\"%s\"} %lld\n",
                label(w->rows[r].group, gl, sizeof gl), label(w->rows[r].addr, wl, sizeof wl), (long long)w->rows[r].errors);
    head(t, "qgate_worker_async_dropped_total", "counter",
         "async messages from the worker that belonged to nobody (sent while it ran no client's request in a pool = "
         "request group, or for a client that had gone): dropped");
    for (int r = 0; w && r < w->n; r++)
        tprintf(t, "qgate_worker_async_dropped_total{group=\"%s\",worker=\"%s\"} %lld\n",
                label(w->rows[r].group, gl, sizeof gl), label(w->rows[r].addr, wl, sizeof wl), (long long)w->rows[r].dropped);
}

static void render_latency(struct text *t, const struct metrics_snap *s)
{
    const struct stats_snapshot *w = s->workers;
    char gl[160], wl[700], lb[900];
    static const struct {
        const char *name, *help;
        size_t off;
    } hs[] = {
        {"qgate_group_queue_wait_seconds", "time a sync request of the group waited for a worker: from its arrival to when "
         "its run began (after any run ahead of it on that worker)", offsetof(struct metrics_group, wait)},
        {"qgate_group_run_seconds", "time a sync request of the group ran: from when its run began to the end of its reply",
         offsetof(struct metrics_group, run)},
        {"qgate_request_duration_seconds", "time a sync request of the group took in all: from its arrival to its end",
         offsetof(struct metrics_group, total)},
    };
    for (size_t k = 0; k < sizeof hs / sizeof hs[0]; k++) {
        head(t, hs[k].name, "histogram", hs[k].help);
        for (int i = 0; i < s->ngroups; i++) {
            snprintf(lb, sizeof lb, "group=\"%s\"", label(s->groups[i].name, gl, sizeof gl));
            histogram(t, hs[k].name, lb, (const struct hist *)(const void *)((const char *)&s->groups[i] + hs[k].off));
        }
    }
    head(t, "qgate_worker_request_duration_seconds", "histogram",
         "time a request ran on the worker, from when its run began to the end of its reply");
    for (int r = 0; w && r < w->n; r++) {
        snprintf(lb, sizeof lb, "group=\"%s\",worker=\"%s\"", label(w->rows[r].group, gl, sizeof gl),
                 label(w->rows[r].addr, wl, sizeof wl));
        histogram(t, "qgate_worker_request_duration_seconds", lb, &w->rows[r].lat);
    }
}

char *metrics_render(const struct metrics_snap *s, size_t *len)
{
    struct text t = {0};
    render_totals(&t, s);
    render_groups(&t, s);
    render_latency(&t, s);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    *len = t.len;
    return t.p;
}

void job_metrics_page(struct job *j)
{
    size_t n = 0;
    char *body = metrics_render(j->ctx, &n);
    if (!body)
        return;
    char hdr[256];
    int h = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     n);
    if ((j->out = malloc((size_t)h + n + 1))) { /* (a HEAD's connection is sent the header alone) */
        memcpy(j->out, hdr, (size_t)h);
        memcpy(j->out + h, body, n);
        j->out_len = (size_t)h + n;
    }
    free(body);
}

K metrics_totals(const struct metrics_snap *s)
{
    static const char *const outcomes[] = {"ok", "errors", "gwerrors", "gone", "closed"};
    const char *names[64];
    int64_t vals[64];
    int n = 0;
    uint64_t requests = 0;
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        requests += s->ended[i];
    int64_t clients = 0;
    for (int i = 0; i < s->nclient_states; i++)
        clients += s->clients[i];
#define KV(k, v) (names[n] = (k), vals[n++] = (int64_t)(v))
    KV("uptime_ms", s->uptime_ms);
    KV("clients", clients);
    KV("connections", s->accepted);
    KV("handshakes", s->handshakes);
    KV("requests", requests);
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        KV(outcomes[i], s->ended[i]);
    KV("request_bytes", s->req_bytes);
    KV("reply_bytes", s->reply_bytes);
    KV("query_timeouts", s->query_timeouts);
    KV("alog_lines", s->alog_lines);
    KV("alog_dropped", s->alog_dropped);
    KV("alog_errors", s->alog_errors);
    KV("log_dropped", s->log_dropped);
    KV("held_bytes", s->held_bytes);
    KV("held_passed", s->held_passed);
    KV("nested", s->nested);
    KV("pending_bytes", s->pending_bytes);
    KV("pending_waits", s->pending_waits);
    KV("cut_streams", s->tails);
    uint64_t pipelined = 0;
    for (int i = 0; i < s->ngroups; i++)
        pipelined += s->groups[i].pipelined;
    KV("pipelined", pipelined);
    uint64_t refused = 0;
    for (int i = 0; i < s->nrefusals; i++)
        refused += s->refused[i];
    KV("refused", refused);
    char rn[METRICS_MAX_REFUSALS][48];
    for (int i = 0; i < s->nrefusals && n < 60; i++) {
        snprintf(rn[i], sizeof rn[i], "refused_%s", s->refusal[i]);
        KV(rn[i], s->refused[i]);
    }
#undef KV
    K v = k_vec(KT_LONG, n);
    if (!v)
        return NULL;
    memcpy(kJ(v), vals, (size_t)n * sizeof vals[0]);
    return k_dict(k_symv(n, names), v);
}

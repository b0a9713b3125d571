/* ops.c: snapshots for .qgate.stats[] and .qgate.totals[], the metrics listener and its HTTP
 * connections, the periodic summary line. */
#include "ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "access.h"
#include "client.h"
#include "gw.h"
#include "jobs.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "pool.h"
#include "version.h"
#include "worker.h"

#define MCONN_MAX 32          /* metrics connections at once; more are closed at accept */
#define MCONN_TIMEOUT_MS 10000 /* to send a request and take the page */
#define MREQ_MAX 4096         /* an HTTP request's head */

/* ---- snapshots -------------------------------------------------------------------------------- */

struct stats_snapshot *ops_stats_snapshot_loop(struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++)
        n += g->groups[i].nworkers; /* a row per worker (its connections summed into it) */
    struct stats_snapshot *s = calloc(1, sizeof *s + (size_t)n * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        struct worker *w;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            if (!worker_is_lead(w) || s->n == n)
                continue;
            struct stats_row *r = &s->rows[s->n++];
            snprintf(r->addr, sizeof r->addr, "%s", w->addr);
            snprintf(r->group, sizeof r->group, "%s", grp->cfg.name);
            qg_copy_lower(r->state, sizeof r->state, worker_state_name(w->st));
            snprintf(r->transport, sizeof r->transport, "%s", worker_via_name(w->via));
            r->served = (int64_t)w->served;
            r->errors = (int64_t)w->errors;
            r->session = w->sess ? (int64_t)w->sess->serial : INT64_MIN; /* 0N: given to nobody */
            r->queued = grp->queue.n;
            for (const struct worker *x = w; x; x = worker_sibling(x)) {
                if (x != w) {
                    r->served += (int64_t)x->served;
                    r->errors += (int64_t)x->errors;
                    hist_merge(&r->lat, &x->lat);
                } else {
                    r->lat = w->lat;
                }
                r->dropped += (int64_t)x->dropped;
                r->inflight += x->st == WS_BUSY;
            }
        }
    }
    return s;
}

static void snap_groups(struct gw *g, struct metrics_snap *s)
{
    for (int i = 0; i < g->ngroups && i < CFG_MAX_GROUPS; i++) {
        struct group *grp = &g->groups[i];
        struct metrics_group *m = &s->groups[s->ngroups++];
        snprintf(m->name, sizeof m->name, "%s", grp->cfg.name);
        m->paused = grp->paused;
        m->pipelined = grp->pipelined;
        m->queued = grp->queue.n + grp->held.n; /* held: by a pause, a session's or a .qgate.all's */
        const struct connq *qs[2] = {&grp->queue, &grp->held};
        for (int k = 0; k < 2; k++) {
            struct conn *x;
            TAILQ_FOREACH(x, &qs[k]->h, qlink) {
                struct req *r = client_head(client_of(x));
                if (r && g->loop.now_ms - r->t_arrive > m->maxwait_ms)
                    m->maxwait_ms = g->loop.now_ms - r->t_arrive;
            }
        }
    }
}

struct metrics_snap *ops_snapshot_loop(struct gw *g)
{
    struct metrics_snap *s = calloc(1, sizeof *s);
    if (!s || !(s->workers = ops_stats_snapshot_loop(g))) {
        free(s);
        return NULL;
    }
    snprintf(s->version, sizeof s->version, "%s", QG_VERSION);
    s->uptime_ms = g->loop.now_ms - g->started_ms;
    s->start_wall_ms = g->started_wall_ms;
    s->nclient_states = CS_CLOSING + 1;
    for (int i = 0; i < s->nclient_states; i++)
        qg_copy_lower(s->client_state[i], sizeof s->client_state[i], client_state_name(i));
    s->nworker_states = WS_DISABLED + 1;
    for (int i = 0; i < s->nworker_states; i++)
        qg_copy_lower(s->worker_state[i], sizeof s->worker_state[i], worker_state_name(i));
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *c = g->tab[id];
        if (c && c->kind == CONN_CLIENT)
            s->clients[client_of(c)->st]++;
    }
    s->accepted = g->accepted;
    s->handshakes = g->handshakes;
    s->query_timeouts = g->query_timeouts;
    s->req_bytes = g->req_bytes;
    s->reply_bytes = g->reply_bytes;
    memcpy(s->ended, g->ended, sizeof s->ended);
    s->nrefusals = GW_NREFUSALS;
    for (int i = 0; i < GW_NREFUSALS; i++) {
        s->refusal[i] = gw_refusal_name(i);
        s->refused[i] = g->refused[i].n;
    }
    struct alog_counts ac;
    access_counts_loop(g, &ac);
    s->alog_lines = ac.lines;
    s->alog_dropped = ac.dropped;
    s->alog_errors = ac.errors;
    snap_groups(g, s);
    return s;
}

/* ---- the summary line ---------------------------------------------------------------------------- */

static uint64_t sum(const uint64_t *v, int n)
{
    uint64_t t = 0;
    for (int i = 0; i < n; i++)
        t += v[i];
    return t;
}

static void on_stats_timer(struct gw *g, struct timer *t)
{
    uint64_t ended = sum(g->ended, ALOG_NOUTCOMES), refused = 0;
    char why[512] = "";
    size_t o = 0;
    for (int i = 0; i < GW_NREFUSALS; i++) {
        refused += g->refused[i].n;
        if (g->refused[i].n && o < sizeof why - 64)
            o += (size_t)snprintf(why + o, sizeof why - o, "%s%s %llu", o ? ", " : " (", gw_refusal_name(i),
                                  (unsigned long long)g->refused[i].n);
    }
    if (o)
        snprintf(why + o, sizeof why - o, ")");
    int up = 0, workers = 0, queued = 0;
    for (int i = 0; i < g->ngroups; i++) {
        up += g->groups[i].nup;
        workers += g->groups[i].nworkers;
        queued += g->groups[i].queue.n;
    }
    double secs = (double)(g->loop.now_ms - g->stats_last_ms) / 1e3;
    log_info(NULL, "stats: %llu requests (%.1f/s), %llu q errors, %llu gateway errors, %llu refused%s; %d clients, "
             "%d queued, workers %d/%d up",
             (unsigned long long)ended, secs > 0 ? (double)(ended - g->stats_last_ended) / secs : 0.0,
             (unsigned long long)g->ended[ALOG_ERROR], (unsigned long long)g->ended[ALOG_GWERROR],
             (unsigned long long)refused, why, g->nclients, queued, up, workers);
    g->stats_last_ended = ended;
    g->stats_last_ms = g->loop.now_ms;
    if (g->cfg.stats_period > 0)
        timer_arm_loop(g, t, g->loop.now_ms + g->cfg.stats_period, on_stats_timer);
}

void ops_reloaded_loop(struct gw *g)
{
    timer_cancel_loop(g, &g->stats_tm);
    if (g->cfg.stats_period > 0)
        timer_arm_loop(g, &g->stats_tm, g->loop.now_ms + g->cfg.stats_period, on_stats_timer);
}

/* ---- metrics over HTTP ---------------------------------------------------------------------------- */

struct mconn {
    struct evsrc ev;      /* first: epoll's data points here */
    struct mconn *next;
    int fd;
    uint64_t serial;      /* names it to the page's job */
    int64_t deadline_ms;
    int waiting;          /* the page is being made */
    char in[MREQ_MAX];
    size_t inlen;
    uint8_t *out;
    size_t outlen, off;
};

static void mconn_close(struct gw *g, struct mconn *m)
{
    for (struct mconn **p = &g->mconns; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    loop_unwatch_loop(g, m->fd, 0);
    close(m->fd);
    free(m->out);
    free(m);
    g->nmconns--;
}

/* Write what is left; closed once all is out (or on an error). */
static void mconn_write(struct gw *g, struct mconn *m)
{
    while (m->off < m->outlen) {
        ssize_t n = send(m->fd, m->out + m->off, m->outlen - m->off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            loop_modify_loop(g, m->fd, &m->ev, EPOLLOUT, 0);
            return;
        }
        if (n <= 0)
            break;
        m->off += (size_t)n;
    }
    mconn_close(g, m);
}

static void mconn_reply(struct gw *g, struct mconn *m, const char *status, const char *text)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, strlen(text), text);
    if (!(m->out = malloc((size_t)n))) {
        mconn_close(g, m);
        return;
    }
    memcpy(m->out, buf, (size_t)n);
    m->outlen = (size_t)n;
    mconn_write(g, m);
}

/* A whole request head: GET (or HEAD) /metrics or / gets the page, made on the writer pool. */
static void mconn_request(struct gw *g, struct mconn *m)
{
    int head = !strncmp(m->in, "HEAD ", 5);
    if (strncmp(m->in, "GET ", 4) && !head) {
        mconn_reply(g, m, "405 Method Not Allowed", "qgate: only GET /metrics\n");
        return;
    }
    const char *path = m->in + (head ? 5 : 4);
    size_t plen = strcspn(path, " ?\r\n");
    if (!((plen == 8 && !memcmp(path, "/metrics", 8)) || (plen == 1 && path[0] == '/'))) {
        mconn_reply(g, m, "404 Not Found", "qgate: the metrics are at /metrics\n");
        return;
    }
    struct job *j = job_new(job_metrics_page, JK_METRICS);
    if (!j || !(j->ctx = ops_snapshot_loop(g))) {
        job_free(j);
        mconn_reply(g, m, "503 Service Unavailable", "qgate: out of memory\n");
        return;
    }
    j->ctx_free = metrics_snap_free;
    j->arg = head;
    j->aux[0] = (int64_t)m->serial;
    m->waiting = 1;
    loop_modify_loop(g, m->fd, &m->ev, 0, 0);
    pool_submit(g->writers, j);
}

static void on_mconn(struct gw *g, struct evsrc *s, uint32_t ev)
{
    struct mconn *m = (struct mconn *)s;
    if (m->waiting)
        return;
    if (m->outlen) {
        mconn_write(g, m);
        return;
    }
    ssize_t n = recv(m->fd, m->in + m->inlen, sizeof m->in - 1 - m->inlen, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 || (ev & (EPOLLERR | EPOLLHUP))) {
        mconn_close(g, m);
        return;
    }
    m->inlen += (size_t)n;
    m->in[m->inlen] = 0;
    if (strstr(m->in, "\r\n\r\n") || strstr(m->in, "\n\n"))
        mconn_request(g, m);
    else if (m->inlen == sizeof m->in - 1)
        mconn_reply(g, m, "431 Request Header Fields Too Large", "qgate: request head too long\n");
}

static const struct evops mconn_ops = {.on_event = on_mconn};

void ops_page_done_loop(struct gw *g, struct job *j)
{
    struct mconn *m = g->mconns;
    while (m && m->serial != (uint64_t)j->aux[0])
        m = m->next;
    if (!m) /* it went meanwhile */
        return;
    m->waiting = 0;
    if (!j->out) {
        mconn_reply(g, m, "503 Service Unavailable", "qgate: out of memory\n");
        return;
    }
    m->out = j->out;
    m->outlen = j->out_len;
    j->out = NULL;
    mconn_write(g, m);
}

static void on_metrics_timer(struct gw *g, struct timer *t)
{
    for (struct mconn *m = g->mconns, *n; m; m = n) {
        n = m->next;
        if (g->loop.now_ms >= m->deadline_ms)
            mconn_close(g, m);
    }
    if (g->mconns)
        timer_arm_loop(g, t, g->loop.now_ms + 1000, on_metrics_timer);
}

static void on_metrics_listener(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)s;
    (void)ev;
    for (int i = 0; i < 16; i++) {
        int fd = accept4(g->listen_metrics.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct mconn *m = g->nmconns < MCONN_MAX ? calloc(1, sizeof *m) : NULL;
        if (!m) {
            close(fd);
            continue;
        }
        m->fd = fd;
        m->ev.ops = &mconn_ops;
        m->serial = ++g->mconn_serial;
        m->deadline_ms = g->loop.now_ms + MCONN_TIMEOUT_MS;
        if (loop_watch(g, fd, &m->ev, EPOLLIN, 0)) {
            close(fd);
            free(m);
            continue;
        }
        m->next = g->mconns;
        g->mconns = m;
        g->nmconns++;
        if (!g->metrics_tm.pos)
            timer_arm_loop(g, &g->metrics_tm, g->loop.now_ms + 1000, on_metrics_timer);
    }
}

static const struct evops metrics_listener_ops = {.on_event = on_metrics_listener};

int ops_init(struct gw *g, const struct config *cfg)
{
    g->listen_metrics.fd = -1;
    gw_clock_loop(g);
    g->started_ms = g->stats_last_ms = g->loop.now_ms;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g->started_wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (cfg->stats_period > 0)
        timer_arm_loop(g, &g->stats_tm, g->loop.now_ms + cfg->stats_period, on_stats_timer);
    if (!cfg->metrics_port)
        return 0;
    const char *bind = cfg->metrics_bind[0] ? cfg->metrics_bind : cfg->bind;
    int fd = net_listen_tcp(bind, cfg->metrics_port, 64, NET_NONBLOCK, NULL);
    if (fd < 0) {
        log_error(NULL, "cannot listen for metrics on %s:%d: %s", bind, cfg->metrics_port, strerror(errno));
        return -1;
    }
    g->listen_metrics.fd = fd;
    g->listen_metrics.ev.ops = &metrics_listener_ops;
    if (loop_watch(g, fd, &g->listen_metrics.ev, EPOLLIN, 0))
        return -1;
    log_info(NULL, "metrics on http://%s:%d/metrics", bind, cfg->metrics_port);
    return 0;
}

void ops_free(struct gw *g)
{
    while (g->mconns)
        mconn_close(g, g->mconns);
    if (g->listen_metrics.fd >= 0) {
        loop_unwatch_loop(g, g->listen_metrics.fd, 0);
        close(g->listen_metrics.fd);
        g->listen_metrics.fd = -1;
    }
}

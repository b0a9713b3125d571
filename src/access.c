/* access.c: the access log, loop side: records, batches to the writer pool, reopening. */
#include "access.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alog.h"
#include "client.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "pool.h"

#define BATCH_BYTES (256 * 1024)  /* hand a batch over at once from this size */
#define FLUSH_MS 100              /* else within this long */
#define HELD_MAX (16 * 1024 * 1024) /* records held while the disk is slow: beyond, dropped */

struct gw_name {
    struct gw_name *next;
    char s[];
};

const char *access_name_loop(struct gw *g, const char *s)
{
    for (struct gw_name *n = g->names; n; n = n->next)
        if (!strcmp(n->s, s))
            return n->s;
    size_t len = strlen(s);
    struct gw_name *n = malloc(sizeof *n + len + 1);
    if (!n)
        return "?";
    memcpy(n->s, s, len + 1);
    g->names_bytes += sizeof *n + len + 1;
    n->next = g->names;
    g->names = n;
    return n->s;
}

int access_init(struct gw *g, char *err, size_t errlen)
{
    g->alog_fd = -1;
    if (!g->cfg.access_log[0])
        return 0;
    g->alog_fd = alog_open(g->cfg.access_log, err, errlen);
    return g->alog_fd < 0 ? -1 : 0;
}

static void submit(struct gw *g)
{
    if (g->alog_busy || g->alog_fd < 0 || !g->alog.len)
        return;
    struct alog_buf *b = malloc(sizeof *b);
    struct job *j = b ? job_new(job_alog_write, JK_ALOG) : NULL;
    if (!j) {
        free(b);
        return; /* held: the next record or the timer tries again */
    }
    *b = g->alog;
    g->alog = (struct alog_buf){0};
    j->ctx = b;
    j->ctx_free = alog_buf_ctx_free;
    j->arg = g->alog_fd;
    g->alog_busy = 1;
    timer_cancel_loop(g, &g->alog_tm);
    pool_submit(g->writers, j);
}

static void on_flush_timer(struct gw *g, struct timer *t)
{
    (void)t;
    submit(g);
}

static void reopen(struct gw *g)
{
    g->alog_reopen = 0;
    char err[1200];
    int fd = g->cfg.access_log[0] ? alog_open(g->cfg.access_log, err, sizeof err) : -1;
    if (g->cfg.access_log[0] && fd < 0) {
        log_error(NULL, "%s (still writing to the file open before)", err);
        return;
    }
    if (g->alog_fd >= 0)
        close(g->alog_fd);
    g->alog_fd = fd;
    if (fd < 0)
        alog_buf_free(&g->alog);
    log_info(NULL, "access log %s%s", fd >= 0 ? "reopened: " : "off", g->cfg.access_log);
}

void access_reopen_loop(struct gw *g)
{
    if (g->alog_busy)
        g->alog_reopen = 1;
    else if (g->alog_fd >= 0 || g->cfg.access_log[0])
        reopen(g);
}

void access_done_loop(struct gw *g, struct job *j)
{
    g->alog_busy = 0;
    g->alog_lines += (uint64_t)j->aux[0];
    if (j->result) {
        g->alog_errors++;
        if (g->loop.now_ms - g->alog_warned_ms >= 10000) {
            g->alog_warned_ms = g->loop.now_ms;
            log_error(NULL, "%s", j->text);
        }
    }
    if (g->alog_reopen)
        reopen(g);
    if (g->alog.len >= BATCH_BYTES)
        submit(g);
    else if (g->alog.len)
        timer_arm_loop(g, &g->alog_tm, g->loop.now_ms + FLUSH_MS, on_flush_timer);
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void access_req_loop(struct gw *g, const struct client *c, const struct req *r, int answered)
{
    int sync = r->type == KIPC_SYNC;
    int outcome = !answered ? ALOG_CLOSED : sync && c->eof && r->outcome == ALOG_OK ? ALOG_GONE : r->outcome;
    uint64_t reply = r->reply_len ? r->reply_len : r->reply ? r->reply->len : 0;
    g->ended[outcome]++;
    g->req_bytes += r->in_len;
    g->reply_bytes += reply;
    if (g->alog_fd < 0)
        return;
    if (g->alog.len >= HELD_MAX) {
        g->alog_dropped++;
        if (g->loop.now_ms - g->alog_warned_ms >= 10000) {
            g->alog_warned_ms = g->loop.now_ms;
            log_error(NULL, "access log: the disk is behind; %llu lines dropped so far",
                      (unsigned long long)g->alog_dropped);
        }
        return;
    }
    int64_t now = g->loop.now_us, ran = r->t_run_us;
    struct alog_fields f = {.wall_us = wall_us(), .client = c->serial, .user = c->user, .peer = c->peer,
                            .group = r->grp ? r->grp->cfg.name : "", .worker = r->wname, .error = r->etext,
                            .sync = sync, .outcome = outcome, .req_bytes = r->in_len,
                            .reply_bytes = reply,
                            .queued_us = (ran ? ran : now) - r->t_in_us, .run_us = ran ? now - ran : 0};
    if (alog_append(&g->alog, &f))
        g->alog_dropped++;
    else if (g->alog.len >= BATCH_BYTES)
        submit(g);
    else if (!g->alog_tm.pos && !g->alog_busy)
        timer_arm_loop(g, &g->alog_tm, g->loop.now_ms + FLUSH_MS, on_flush_timer);
}

/* Teardown: the job out (if any) comes back first, so lines keep their order and none is lost. */
void access_close(struct gw *g)
{
    for (int tries = 0; g->alog_busy && g->writers && tries < 100; tries++) {
        struct pollfd pfd = {.fd = pool_fd(g->writers), .events = POLLIN};
        poll(&pfd, 1, 100);
        struct job *j = pool_drain_loop(g->writers), *n;
        for (; j; j = n) {
            n = job_next(j);
            if (j->kind == JK_ALOG) /* not access_done_loop: no timer now (the heap holds the freed) */
                g->alog_busy = 0;
            job_free(j);
        }
    }
    if (g->alog_fd >= 0 && g->alog.len && !g->alog_busy) {
        struct job j = {.ctx = &g->alog, .arg = g->alog_fd};
        job_alog_write(&j);
    }
    alog_buf_free(&g->alog);
    if (g->alog_fd >= 0)
        close(g->alog_fd);
    g->alog_fd = -1;
    while (g->names) {
        struct gw_name *n = g->names;
        g->names = n->next;
        free(n);
    }
}

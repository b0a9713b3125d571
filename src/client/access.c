/* access.c: the access log, loop side: each request's end counted, its record queued for the
 * access log's thread (alog.c), reopening asked of it. */
#include "access.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alog.h"
#include "client.h"
#include "query.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"

#define QUEUE_MAX (16 * 1024 * 1024) /* records waiting for the file: beyond, dropped */
#define OPEN_WAIT_MS 2000            /* setup waits this long for the file to open */
#define EXIT_WAIT_MS 2000            /* teardown gives the thread this long to write what is queued */

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

static struct alog_writer *start_writer(struct gw *g)
{
    return g->hooks.alog_start ? g->hooks.alog_start(g->hooks.ctx) : alog_writer_start(QUEUE_MAX);
}

int access_init(struct gw *g, char *err, size_t errlen)
{
    if (!g->cfg.access_log[0])
        return 0;
    if (!(g->alogw = start_writer(g))) {
        snprintf(err, errlen, "access_log %s: cannot start its thread: %s", g->cfg.access_log, strerror(errno));
        return -1;
    }
    alog_writer_reopen(g->alogw, g->cfg.access_log, 0);
    int r = alog_writer_opened(g->alogw, OPEN_WAIT_MS, err, errlen);
    if (r < 0) {
        alog_writer_stop(g->alogw, 1000, NULL);
        g->alogw = NULL;
        return -1;
    }
    if (r > 0)
        log_warn(NULL, "access_log %s: still opening after %d ms (a FIFO nobody reads? a hung mount?): going on; "
                 "its lines wait for the file (%d MiB at most, then dropped)", g->cfg.access_log, OPEN_WAIT_MS,
                 QUEUE_MAX >> 20);
    return 0;
}

void access_reopen_loop(struct gw *g)
{
    if (!g->alogw) {
        if (!g->cfg.access_log[0])
            return;
        if (!(g->alogw = start_writer(g))) { /* a thread made, nothing opened: no wait */
            log_error(NULL, "access_log %s: cannot start its thread: %s", g->cfg.access_log, strerror(errno));
            return;
        }
    }
    alog_writer_reopen(g->alogw, g->cfg.access_log, 1);
}

void access_counts_loop(struct gw *g, struct alog_counts *c)
{
    if (g->alogw)
        alog_writer_counts(g->alogw, c);
    else
        *c = (struct alog_counts){0};
}

size_t access_bytes_loop(struct gw *g) { return g->alogw ? alog_writer_bytes(g->alogw) : 0; }

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
    int64_t now = loop_stamp_us_loop(g), ran = r->t_run_us;
    g->ended[outcome]++;
    g->req_bytes += r->in_len;
    g->reply_bytes += reply;
    struct group *grp = r->grp;
    if (grp) { /* the group's totals, and its query's: waiting until its run began, then running */
        int64_t began = r->t_began_us ? r->t_began_us : ran, wait = (began ? began : now) - r->t_in_us;
        int64_t run = began ? now - began : 0;
        grp->ended[outcome]++;
        grp->req_bytes += r->in_len;
        grp->reply_bytes += reply;
        if (sync && began) {
            hist_add(&grp->wait, (uint64_t)QG_MAX(wait, 0));
            hist_add(&grp->run, (uint64_t)QG_MAX(run, 0));
        }
        if (sync)
            hist_add(&grp->total, (uint64_t)QG_MAX(now - r->t_in_us, 0));
        if (r->key)
            query_end_loop(grp->queries, r->key, outcome == ALOG_ERROR, wait, run, r->in_len, reply, g->loop.now_ms);
    }
    if (!g->alogw || !g->cfg.access_log[0] || (c->us && c->us->monitor && !g->cfg.access_log_monitors))
        return;
    char qf[QUERY_TEXT + 24] = ""; /* access_log_query: the query's key, or its first bytes */
    if (g->cfg.access_log_query == CFG_AQ_HASH && r->key)
        snprintf(qf, sizeof qf, "%lld", (long long)r->key); /* as .qgate.queries[] shows it */
    else if (g->cfg.access_log_query == CFG_AQ_TEXT && r->key && r->qtext)
        snprintf(qf, sizeof qf, "%s", r->qtext);
    struct alog_fields f = {.wall_us = wall_us(), .client = c->serial, .user = c->user, .peer = c->peer,
                            .group = r->grp ? r->grp->cfg.name : "", .worker = r->wname, .error = r->etext,
                            .sync = sync, .outcome = outcome, .req_bytes = r->in_len,
                            .reply_bytes = reply,
                            .queued_us = (ran ? ran : now) - r->t_in_us, .run_us = ran ? now - ran : 0,
                            .reason = outcome == ALOG_CLOSED ? (c->drop_why ? c->drop_why : "not run") : NULL,
                            .query = qf[0] ? qf : NULL};
    uint64_t dropped = alog_writer_put(g->alogw, &f);
    if (dropped && (!g->alog_warned_ms || g->loop.now_ms - g->alog_warned_ms >= 10000)) {
        g->alog_warned_ms = g->loop.now_ms;
        log_error(NULL, "access log: the file is behind (%d MiB of lines waiting for it); %llu lines dropped so far",
                  QUEUE_MAX >> 20, (unsigned long long)dropped);
    }
}

/* Teardown: after the closes (their requests' records are queued too). */
void access_close(struct gw *g)
{
    if (g->alogw)
        alog_writer_stop(g->alogw, EXIT_WAIT_MS, &g->alog_last);
    g->alogw = NULL;
    while (g->names) {
        struct gw_name *n = g->names;
        g->names = n->next;
        free(n);
    }
}

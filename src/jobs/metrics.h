/* metrics.h: what the gateway counts, as one snapshot taken on the loop (report.c), and its two
 * renderings made on the writer pool: the Prometheus text page (metrics_port) and the
 * .qgate.totals[] dictionary. */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "alog.h"
#include "config.h"
#include "kcodec.h"
#include "stats.h"

#define METRICS_MAX_STATES 8
#define METRICS_MAX_REFUSALS 16

struct metrics_group {
    char name[CFG_NAME_MAX];
    int64_t queued;       /* clients whose head request waits for a worker */
    int64_t maxwait_ms;   /* the longest any of them has waited */
    int paused;           /* .qgate.pause[] */
    uint64_t pipelined;   /* requests sent behind another's run */
    /* its totals, whatever became of its workers (struct group's) */
    uint64_t ended[ALOG_NOUTCOMES], req_bytes, reply_bytes;
    uint64_t refused_busy, refused_timeout, refused_no_worker;
    struct hist wait, run, total;
};

struct metrics_snap {
    char version[32];
    int64_t uptime_ms, start_wall_ms;
    int nclient_states;
    char client_state[METRICS_MAX_STATES][16];   /* lower case */
    int nworker_states;
    char worker_state[METRICS_MAX_STATES][16];   /* lower case, as .qgate.stats[] shows them */
    int64_t clients[METRICS_MAX_STATES];
    uint64_t accepted, handshakes, query_timeouts, req_bytes, reply_bytes;
    uint64_t ended[ALOG_NOUTCOMES];
    int nrefusals;
    const char *refusal[METRICS_MAX_REFUSALS];    /* static names */
    uint64_t refused[METRICS_MAX_REFUSALS];
    uint64_t alog_lines, alog_dropped, alog_errors;
    uint64_t alog_queued;                         /* lines waiting for the access log's thread */
    uint64_t log_dropped;                         /* the log's lines dropped (log_dropped_total) */
    uint64_t held_bytes;                          /* bytes held whole for clients (hold_max's) */
    uint64_t held_passed;                         /* replies sent as they came for hold_max */
    uint64_t nested;                              /* messages clients sent nested, run on the worker that called back */
    uint64_t pending_bytes;                       /* requests held whole (pending_max's) */
    uint64_t pending_waits;                       /* messages that waited for room under it */
    uint64_t tails;                               /* clients closed with a cut stream, their queued output written first */
    int ngroups;
    struct metrics_group groups[CFG_MAX_GROUPS];
    struct stats_snapshot *workers;               /* owned */
};

void metrics_snap_free(void *ctx);
/* The Prometheus text exposition (version 0.0.4) of s: malloc'd, its length in *len; NULL on
 * ENOMEM. */
char *metrics_render(const struct metrics_snap *s, size_t *len);
/* The .qgate.totals[] dictionary (symbols to longs). */
K metrics_totals(const struct metrics_snap *s);
/* writer: j->ctx a struct metrics_snap: j->out = a whole HTTP/1.1 200 response carrying the
 * page (a HEAD's connection is sent its header alone). */
struct job;
void job_metrics_page(struct job *j);

#endif

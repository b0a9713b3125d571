/* sinks.c: the gateway's side channels, and their fakes: the log's sink (its lines in the
 * trace; in some worlds a queue whose reader stops), the access log's file (in some worlds
 * written by the simulation's pumps to a disk that stalls or fills), and the scrapers of the
 * metrics page. Each is checked against the gateway's counts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alog.h"
#include "log.h"
#include "mhttp.h"
#include "sim_int.h"

/* ---- the log's sink ---------------------------------------------------------------------- */

/* The gateway's log lines go into the trace. */
static void on_log(const char *line, size_t n)
{
    /* drop the wall-clock date and time the gateway puts first */
    const char *p = n > 24 ? line + 24 : line;
    size_t len = n - (size_t)(p - line);
    while (len && (p[len - 1] == '\n'))
        len--;
    tr("  gw %.*s", (int)len, p);
}

/* The log sink of worlds whose log goes through the queue (log_start_manual): lines come when
 * the sink takes them (log_event); the "dropped" lines are summed to check them. */
static uint64_t log_given, log_reported;

static void on_log_queued(const char *line, size_t n)
{
    const char *d = memmem(line, n, " log lines dropped: the log was behind", 38);
    if (d) {
        const char *p = d;
        while (p > line && p[-1] >= '0' && p[-1] <= '9')
            p--;
        log_reported += strtoull(p, NULL, 10);
    } else {
        log_given++;
    }
    on_log(line, n);
}

/* In worlds whose log is queued, its reader stops (a stalled journald, a full pipe), goes on,
 * or takes some of what is queued. While it is stopped the queue fills and lines are dropped;
 * the gateway is unaffected (every other invariant still holds). */
void log_event(void)
{
    if (!S->log_queued)
        return;
    if (chance(25)) {
        S->log_stalled = !S->log_stalled;
        tr("the log's reader %s", S->log_stalled ? "stops" : "resumes");
    }
    if (!S->log_stalled)
        log_pump(chance(30) ? (size_t)-1 : (size_t)(1 + rnd(4096)));
}

void check_log(void)
{
    if (!S->log_queued)
        return;
    struct log_counts lc;
    log_counts(&lc);
    if (lc.offered != lc.written + lc.dropped + lc.queued)
        fail("the log: %llu lines offered, %llu written, %llu dropped, %llu queued", (unsigned long long)lc.offered,
             (unsigned long long)lc.written, (unsigned long long)lc.dropped, (unsigned long long)lc.queued);
    if (lc.written != log_given || lc.queued_bytes > S->log_cap)
        fail("the log: %llu lines written, the sink got %llu; %llu bytes queued in %zu", (unsigned long long)lc.written,
             (unsigned long long)log_given, (unsigned long long)lc.queued_bytes, S->log_cap);
    if (!lc.queued && !S->log_stalled && log_reported != lc.dropped) /* drained: the dropped line has come */
        fail("the log: %llu lines dropped, %llu said", (unsigned long long)lc.dropped, (unsigned long long)log_reported);
}

/* The gateway's log lines go to the trace from the start of a run. */
void log_sink_start(void)
{
    log_sink = on_log;
    log_given = log_reported = 0;
}

/* In worlds whose log is queued: the queue, its reader log_event. */
void log_queue_start(void)
{
    if (S->log_queued && log_start_manual(S->log_cap, on_log_queued))
        fail("log_start_manual failed");
}

/* A run failed: the lines still in the log's queue go to the trace too. */
void log_sink_failed(void)
{
    if (S->log_queued) {
        tr("(the lines still in the log's queue)");
        log_stop(0);
    }
}

/* At the end, in worlds whose log is queued: the reader takes the rest; every line offered was
 * written or dropped, and the drops were said. */
void check_log_end(void)
{
    if (!S->log_queued)
        return;
    struct log_counts lc;
    log_stop(0);
    log_counts(&lc);
    if (lc.offered != lc.written + lc.dropped || lc.written != log_given || log_reported != lc.dropped)
        fail("the end: the log had %llu lines offered, %llu written (the sink got %llu), %llu dropped (%llu said)",
             (unsigned long long)lc.offered, (unsigned long long)lc.written, (unsigned long long)log_given,
             (unsigned long long)lc.dropped, (unsigned long long)log_reported);
    S->res->log_dropped = (long)lc.dropped;
}

/* ---- the access log's sink ----------------------------------------------------------------- */

/* In worlds whose access log has no thread (alog_writer_start_manual, a small queue), its file
 * stalls (takes nothing: the queue fills and records are dropped), its disk fills (so many bytes
 * of room, then ENOSPC: writes cut short) and gets room again. Every write goes through
 * sim_alog_write, which knows where a line was cut and so whether each line of the file is whole. */
static ssize_t sim_alog_write(void *ctx, int fd, const void *p, size_t len)
{
    (void)ctx;
    const char *b = p;
    if (S->alog_cut && len && b[0] != '\n')
        fail("the access log: a line glued to the %s a write cut short", S->alog_cut == 1 ? "fragment" : "line");
    if (S->alog_room != SIZE_MAX && len > S->alog_room) {
        const char *nl = memrchr(b, '\n', S->alog_room);
        if (nl && chance(40)) /* the disk full just before a line's newline: the line is all there */
            S->alog_room = (size_t)(nl - b);
        len = S->alog_room;
    }
    if (!len) {
        errno = ENOSPC;
        if (S->alog_midline && !S->alog_cut)
            S->alog_cut = b[0] == '\n' ? 2 : 1; /* the writer gives up its line here */
        return -1;
    }
    ssize_t r = write(fd, p, len);
    if (r <= 0)
        fail("the access log: write: %s", strerror(errno));
    if (S->alog_room != SIZE_MAX)
        S->alog_room -= (size_t)r;
    if (S->alog_cut == 1)
        S->alog_frags++;
    S->alog_cut = 0;
    S->alog_midline = b[r - 1] != '\n';
    return r;
}

struct alog_writer *hook_alog_start(void *ctx)
{
    (void)ctx;
    return alog_writer_start_manual(S->alog_cap, sim_alog_write, NULL);
}

/* The file: every line whole but the fragments, none glued to one; lines counted = whole lines. */
static void check_alog_file(const struct alog_counts *c)
{
    FILE *f = fopen(S->alog_path, "r");
    if (!f)
        fail("the access log: %s: %s", S->alog_path, strerror(errno));
    char line[ALOG_LINE_MAX + 2];
    uint64_t complete = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (!n || line[n - 1] != '\n')
            break; /* the fragment or line still open */
        complete++;
        if (strncmp(line, "time=", n - 1 < 5 ? n - 1 : 5) || strstr(line + 1, "time=")) /* a fragment: the start of one */
            fail("the access log: line %llu is not one record: %.200s", (unsigned long long)complete, line);
    }
    fclose(f);
    if (complete != c->lines + (uint64_t)S->alog_frags)
        fail("the access log: %llu lines in the file, %llu counted written, %ld fragments ended",
             (unsigned long long)complete, (unsigned long long)c->lines, S->alog_frags);
}

void check_alog(void)
{
    if (!S->alog_manual || !S->g.alogw)
        return;
    struct alog_counts c;
    alog_writer_counts(S->g.alogw, &c);
    uint64_t ended = 0;
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        ended += S->g.ended[i];
    if (c.offered != ended || c.offered != c.lines + c.dropped + c.queued)
        fail("the access log: %llu requests ended, %llu records offered, %llu lines, %llu dropped, %llu queued",
             (unsigned long long)ended, (unsigned long long)c.offered, (unsigned long long)c.lines,
             (unsigned long long)c.dropped, (unsigned long long)c.queued);
}

void alog_event(void)
{
    if (!S->alog_manual || !S->g.alogw)
        return;
    int k = rnd(100);
    if (k < 20) {
        S->alog_stalled = !S->alog_stalled;
        tr("the access log's file %s", S->alog_stalled ? "stalls" : "takes lines again");
    } else if (k < 35) {
        S->alog_room = S->alog_room == SIZE_MAX ? (size_t)rnd(2048) : SIZE_MAX;
        if (S->alog_room == SIZE_MAX)
            tr("the access log's disk has room again");
        else
            tr("the access log's disk fills: %zu bytes of room", S->alog_room);
    }
    if (S->alog_stalled)
        return;
    alog_writer_pump(S->g.alogw);
    struct alog_counts c;
    alog_writer_counts(S->g.alogw, &c);
    if (c.queued > (S->alog_cut == 2)) /* a line cut before its newline waits for it */
        fail("the access log: %llu records still queued after a pump", (unsigned long long)c.queued);
    check_alog_file(&c);
}

/* Before the gateway goes: in worlds with the access log's sink, its disk gets room and its file
 * takes what is left. The requests ended, for check_alog_end once gw_free has written the last
 * lines. */
uint64_t alog_sink_finish(void)
{
    uint64_t ended = 0;
    for (int i = 0; i < ALOG_NOUTCOMES; i++)
        ended += S->g.ended[i];
    if (S->alog_manual) { /* the disk gets room, the file takes what is left */
        S->alog_room = SIZE_MAX;
        S->alog_stalled = 0;
    }
    return ended;
}

/* After gw_free: a line of the access log for each request ended, but those counted dropped
 * (with its sink, its file stalled or full); none cut at the end. */
void check_alog_end(uint64_t ended)
{
    if (S->alog_manual) {
        const struct alog_counts *c = &S->g.alog_last;
        if (c->offered != ended || c->lines + c->dropped != ended || S->alog_cut)
            fail("the end: the access log had %llu records for %llu requests ended: %llu lines, %llu dropped%s",
                 (unsigned long long)c->offered, (unsigned long long)ended, (unsigned long long)c->lines,
                 (unsigned long long)c->dropped, S->alog_cut ? "; its file ends in a cut line" : "");
        check_alog_file(c);
        S->res->alog_lines = (long)c->lines;
        S->res->alog_dropped = (long)c->dropped;
        S->res->alog_frags = S->alog_frags;
    } else if (S->alog) {
        FILE *f = fopen(S->alog_path, "r");
        uint64_t lines = 0;
        for (int ch; f && (ch = fgetc(f)) != EOF;)
            lines += ch == '\n';
        if (f)
            fclose(f);
        if (lines != ended)
            fail("the end: the access log has %llu lines for %llu requests ended", (unsigned long long)lines,
                 (unsigned long long)ended);
        S->res->alog_lines = lines;
    }
}

/* ---- fake scrapers of the metrics page ------------------------------------------------------- */

/* A scraper connects, sends its request (or part of it, or junk), reads what comes, or goes at
 * any point: before, while and after its page is made (the writer pool runs when it will). */
void scrape_event(void)
{
    int i = rnd(4);
    int *fd = &S->scraper[i];
    if (*fd < 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
            fail("socketpair: %s", strerror(errno));
        set_sndbuf(sv[0]);
        set_sndbuf(sv[1]);
        S->in_gw = 1;
        int rc = mhttp_adopt_loop(&S->g, sv[0], chance(50) ? "sim-a" : "sim-b");
        S->in_gw = 0;
        *fd = sv[1];
        tr("scraper %d connects%s", i, rc ? " (refused: 503)" : "");
        return;
    }
    int what = rnd(10);
    if (what < 4) {
        static const char get[] = "GET /metrics HTTP/1.1\r\nHost: sim\r\n\r\n";
        const char *m = chance(10) ? "POST / HTTP/1.1\r\n\r\n" : get;
        size_t n = strlen(m), k = chance(30) ? 1 + (size_t)rnd((int)n) : n;
        ssize_t w = write(*fd, m, k);
        S->res->scrapes += w == (ssize_t)n && m == get;
        tr("scraper %d sends %zd of %zu bytes of its request", i, w, n);
    } else if (what < 8) {
        char buf[8192];
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0)
            S->moved += (size_t)n;
        if (n == 0) {
            tr("scraper %d: the gateway closed it", i);
            close(*fd);
            *fd = -1;
        }
    } else {
        tr("scraper %d goes (resets)", i);
        close(*fd);
        *fd = -1;
    }
}

/* qload.c: a load generator for benchmarks: many closed-loop kdb+ client connections in one
 * thread on epoll, in classes that each repeat one request; or N idle connections held open.
 * Prints one summary line per class on stdout; optionally every counted request to CSV. With
 * --reconnect, a connection the peer closes is opened again and its request sent again, as a q
 * client that reopens its handle would (tests/net/test_haproxy.sh: gateways restarted under it).
 *
 * A connection's states (io.state):
 *   NEW -> CONNECTING -> HS_SEND -> HS_READ -> READY <-> SEND -> RECV -> READY ...
 *   any open failure: CLOSED, or with --reconnect BACKOFF -> CONNECTING (bounded tries)
 *   closed by the peer: CLOSED, or with --reconnect CONNECTING again (resend = the request) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "modes.h"
#include "util.h"

#define MAX_INFLIGHT_OPENS 256       /* connects + handshakes at once (listen backlogs) */
#define OPEN_TIMEOUT_NS 5000000000LL /* one connection's connect + handshake */
#define IDLE_OPEN_LIMIT_NS 30000000000LL /* --idle: the whole opening phase */
#define DRAIN_NS 5000000000LL        /* wait for outstanding replies after the run */
#define REOPEN_TRIES 8               /* --reconnect: opens in a row that may fail */
#define BACKOFF_MIN_NS 50000000LL    /* --reconnect: pause after the first failed open, doubling */
#define BACKOFF_MAX_NS 1000000000LL
#define BACKOFF_SCAN_NS 10000000LL   /* how often connections in back-off are looked at */
#define SCAN_NS 100000000LL          /* how often open timeouts are checked */
#define READ_BUDGET (1u << 20)       /* bytes read from one connection per event */
#define SCRATCH_LEN (256u << 10)     /* replies are read here and not kept */
#define MAX_MESSAGE (1ULL << 40)     /* the header's 40-bit length */
#define NS 1000000000LL

enum cstate {
    ST_NEW,                       /* not opened yet */
    ST_CONNECTING = EP_CONNECTING, /* non-blocking connect in progress */
    ST_HS_SEND = EP_HS_SEND,       /* sending user:pass CAP NUL */
    ST_HS_READ = EP_HS_READ,       /* waiting for the capability byte */
    ST_SEND,       /* writing the request */
    ST_RECV,       /* waiting for the whole reply */
    ST_READY,      /* open, no request outstanding (idle mode, or stopped) */
    ST_CLOSED,
    ST_BACKOFF,    /* --reconnect: an open failed; the next one starts at topen */
};

struct cls {
    const char *name;
    char *mode;                  /* as given, whitespace shown as '_' */
    long count;
    uint8_t *msg;                /* the whole sync message */
    size_t msg_len;
    int64_t *lat;                /* ns of counted requests */
    size_t nlat, cap_lat;
    long qerrors, failed;        /* failed: connections lost during a request */
    long open_failed, access_failed, unfinished;
    long retried;                /* --reconnect: requests sent again on a reopened connection */
    long extra;                  /* responses that came with no request outstanding */
    long replies;                /* responses to requests, counted or not */
    long reconnects;             /* --reconnect: connections opened again after the peer closed */
};

/* One connection: no input buffer; replies are scanned in a shared scratch buffer. */
struct conn {
    struct epconn io;            /* fd, epoll mask, state, bytes written */
    uint8_t hgot;                /* header bytes of the current message so far */
    uint8_t first;               /* next body byte is the first */
    uint8_t is_err;              /* current message's body starts with 0x80 */
    uint8_t rtype, rcomp;        /* current message's type, compression */
    uint8_t resend;              /* --reconnect: the request is outstanding; send it once open */
    uint8_t tries;               /* --reconnect: opens that failed in a row */
    uint16_t cls;
    uint32_t target;
    uint32_t gen;                /* opens so far; with the index, io.id (stale events dropped) */
    uint64_t left;               /* body bytes of the current message still to come */
    int64_t t0;                  /* request send time (kept across a resend) */
    int64_t topen;               /* open start; in ST_BACKOFF, when the next open starts */
    uint64_t counted;            /* counted requests, for --sample */
    uint8_t hdr[8];
};

static struct {
    struct target *targets;
    int ntargets;
    struct cls *classes;
    int nclasses;
    struct conn *conns;
    long nconns;
    uint8_t hs[1100];
    size_t hs_len;
    struct eploop loop;
    long next_open, inflight, scan_lo;
    int64_t last_scan;
    int sending;                 /* closed loop running: send after each reply */
    long outstanding;            /* requests sent and not answered */
    int64_t mstart, mend;        /* measurement window */
    int cpu_pids[8], ncpu_pids;  /* --cpu: processes whose CPU time the window is charged */
    double cpu0, cpu1;           /* their user + system seconds at its start and end */
    FILE *csv;
    const char *label;
    long sample;
    long idle_dropped;           /* idle mode: closed by the peer while held */
    int reconnect;               /* --reconnect */
    long nbackoff;               /* connections in ST_BACKOFF */
    uint8_t *scratch;
} G;

static void usage(void)
{
    fprintf(stderr,
            "usage: qload -g host:port[,host:port...] [-u user:pass] [--class NAME:MODE:COUNT]...\n"
            "             [--seconds S] [--warmup S] [--csv FILE] [--label TEXT] [--sample N]\n"
            "             [--cpu PID[,PID...]] [--reconnect]\n"
            "       qload -g host:port[,...] [-u user:pass] --idle N [--hold S]\n"
            "  one thread, epoll: COUNT closed-loop connections per class, each sending MODE's\n"
            "  request again as soon as the reply is in. MODE: a q/client.q mode (fast, med, big,\n"
            "  throw:ERR, ...; see qclient --modes) or text=Q (the char vector Q, sync).\n"
            "  Connection i goes to target i %% ntargets; host \"unix\" is q's Unix socket.\n"
            "  -u defaults to qload:qload. --warmup (default 1) seconds are not counted, then\n"
            "  --seconds (default 5) are; then up to 5 s for outstanding replies.\n"
            "  stdout, one line per class:\n"
            "    qload class=NAME mode=MODE conns=N requests=R rps=X p50_us=A p99_us=B max_us=C qerrors=E failed=F\n"
            "          [cpu_us_per_req=U] [retried=T extra=X]\n"
            "  failed: connections lost during a request, or that could not be opened.\n"
            "  SIGINT/SIGTERM end the run early, outstanding replies still awaited; a second\n"
            "  signal ends it at once. Responses that came when no request was outstanding (a\n"
            "  request answered twice shows here) are counted: extra=X with --reconnect, else\n"
            "  said on stderr when there are any.\n"
            "  --cpu: each line also says cpu_us_per_req=U, the user + system CPU those\n"
            "  processes spent (every thread, from /proc/PID/stat) over the counted seconds,\n"
            "  per counted request of every class.\n"
            "  --reconnect (not with --idle; the class lines end with retried=T extra=X, and\n"
            "  without it are as they always were): a connection the peer closes (EOF, reset) is\n"
            "  opened again to the same target and the request it had outstanding is sent again\n"
            "  there, counted in retried=T, not failed (its latency runs from the first send).\n"
            "  An open that fails (refused, timed out, closed without a byte) is tried again,\n"
            "  %d in a row at most, %d ms apart doubling to %d ms, then counts as failed.\n"
            "  stderr then says, per class, replies= (every response to a request, in the\n"
            "  counted seconds or not) and reconnects=. Sending again is safe against qgate only\n"
            "  because a draining qgate (SIGTERM) answers every request it has read before it\n"
            "  closes, and never runs one it had not read: what was outstanding at the close\n"
            "  never ran (qload sends nothing on a connection while its reply is outstanding).\n"
            "  After a crash (kill -9) a resent request may have run already, as when q dies:\n"
            "  resend only what may run twice.\n"
            "  --csv appends label,class,conn,t_ms,latency_us,status per counted request (every\n"
            "  Nth of each connection with --sample N). --idle N opens N connections, prints\n"
            "    qload idle conns=N opened=O failed=F handshake_secs=T handshakes_per_sec=H\n"
            "  and holds them --hold S seconds (default 0). Exit 0, 1 if any connection failed,\n"
            "  2 on bad usage.\n",
            REOPEN_TRIES, (int)(BACKOFF_MIN_NS / 1000000), (int)(BACKOFF_MAX_NS / 1000000));
    exit(2);
}

/* ---- setup ---------------------------------------------------------------------------------- */

static int add_targets(const char *list)
{
    char *dup = strdup(list);
    if (!dup)
        return -1;
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct target *t = realloc(G.targets, (size_t)(G.ntargets + 1) * sizeof *t);
        if (!t) {
            rc = -1;
            break;
        }
        G.targets = t;
        if (target_parse(&G.targets[G.ntargets], tok, 1, "qload", "target")) {
            rc = -1;
            break;
        }
        G.ntargets++;
    }
    free(dup);
    return rc;
}

/* NAME:MODE:COUNT; MODE may itself hold colons (throw:ERR, text=a:1). */
static int add_class(const char *spec)
{
    const char *c1 = strchr(spec, ':'), *c2 = strrchr(spec, ':');
    if (!c1 || c2 == c1 || c1 == spec)
        return -1;
    long count;
    if (arg_long(c2 + 1, &count) || count < 1)
        return -1;
    struct cls *t = realloc(G.classes, (size_t)(G.nclasses + 1) * sizeof *t);
    if (!t)
        return -1;
    G.classes = t;
    struct cls *k = &G.classes[G.nclasses];
    memset(k, 0, sizeof *k);
    k->count = count;
    char *name = strndup(spec, (size_t)(c1 - spec));
    char *mode = strndup(c1 + 1, (size_t)(c2 - c1 - 1));
    if (!name || !mode) {
        free(name);
        free(mode);
        return -1;
    }
    for (char *p = name; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '=')
            *p = '_';
    K req = NULL;
    if (!strncmp(mode, "text=", 5)) {
        req = k_str(mode + 5, strlen(mode + 5));
    } else {
        const struct qmode *m = qmode_find(mode);
        if (!m) {
            fprintf(stderr, "qload: unknown mode %s (see qclient --modes, or use text=Q)\n", mode);
            free(name);
            free(mode);
            return -1;
        }
        const char *arg = strchr(mode, ':');
        req = qmode_request(m, arg ? arg + 1 : NULL, 7);
    }
    k->msg = req ? kcodec_encode_msg(req, KIPC_SYNC, &k->msg_len) : NULL;
    k_free(req);
    if (!k->msg) {
        fprintf(stderr, "qload: out of memory\n");
        exit(1);
    }
    for (char *p = mode; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '\n')
            *p = '_';
    k->name = name;
    k->mode = mode;
    G.nclasses++;
    return 0;
}

/* ---- connections ---------------------------------------------------------------------------- */

/* Is a request of c's outstanding: being sent, awaited, or to be sent again once c reopens? */
static int has_request(const struct conn *c)
{
    return c->io.state == ST_SEND || c->io.state == ST_RECV || c->resend;
}

static void conn_close(struct conn *c)
{
    if (c->io.state == ST_CLOSED || c->io.state == ST_NEW)
        return;
    if (ep_opening(&c->io))
        G.inflight--;
    if (c->io.state == ST_BACKOFF)
        G.nbackoff--;
    if (has_request(c))
        G.outstanding--;
    c->resend = 0;
    ep_close(&c->io);
    c->io.state = ST_CLOSED;
}

static void send_request(struct conn *c, int64_t now);
static void write_request(struct conn *c, int64_t now);
static void start_open(struct conn *c, int64_t now);

/* The connection could not be opened: refused, timed out, or (access) closed without a byte.
 * With --reconnect it is tried again after a pause, REOPEN_TRIES in a row at most (through a
 * proxy, a gateway that is down looks like any of the three). A request it was to send again
 * is then lost, and counted failed. */
static void open_failed(struct conn *c, int access, int64_t now)
{
    if (G.reconnect && c->tries + 1 < REOPEN_TRIES) {
        int64_t pause = BACKOFF_MIN_NS << c->tries;
        c->tries++;
        G.inflight--;
        ep_close(&c->io);
        c->io.state = ST_BACKOFF;
        c->topen = now + QG_MIN(pause, BACKOFF_MAX_NS);
        G.nbackoff++;
        return;
    }
    if (G.classes) /* idle mode counts what did not open at the end */
        (*(c->resend ? &G.classes[c->cls].failed
                     : access ? &G.classes[c->cls].access_failed : &G.classes[c->cls].open_failed))++;
    conn_close(c);
}

/* Lost during a request. */
static void request_failed(struct conn *c)
{
    if (G.classes)
        G.classes[c->cls].failed++;
    conn_close(c);
}

/* The peer closed c (EOF, reset, a write refused). With --reconnect, while the run sends or a
 * request is outstanding, c is opened again to the same target and that request is sent again
 * once it is open; else a request it had is lost. */
static void peer_closed(struct conn *c, int64_t now)
{
    int busy = c->io.state == ST_SEND || c->io.state == ST_RECV;
    if (G.reconnect && (busy || G.sending)) {
        ep_close(&c->io); /* the request stays outstanding */
        c->resend = (uint8_t)busy;
        c->tries = 0;
        G.classes[c->cls].reconnects++;
        start_open(c, now);
        return;
    }
    if (busy) {
        request_failed(c);
        return;
    }
    if (!G.classes && c->io.state == ST_READY)
        G.idle_dropped++;
    conn_close(c);
}

static void start_open(struct conn *c, int64_t now)
{
    long i = (long)(c - G.conns);
    c->topen = now;
    c->gen++;
    c->io.id = (uint64_t)i | (uint64_t)c->gen << 32; /* events of the last fd no longer match */
    c->io.state = ST_CONNECTING;
    if (i < G.scan_lo)
        G.scan_lo = i; /* a reopen: scan_open_timeouts must see it */
    G.inflight++;
    if (ep_connect(&G.loop, &c->io, &G.targets[c->target]))
        open_failed(c, 0, now);
}

/* Start connections while fewer than MAX_INFLIGHT_OPENS are connecting or shaking hands. */
static void pump_opens(int64_t now)
{
    while (G.inflight < MAX_INFLIGHT_OPENS && G.next_open < G.nconns)
        start_open(&G.conns[G.next_open++], now);
}

/* --reconnect: start the opens whose pause is over (within the same bound on opens at once).
 * The deadline of the next, 0 if none waits. */
static int64_t pump_reopens(int64_t now)
{
    if (!G.nbackoff)
        return 0;
    int64_t next = 0;
    for (long i = 0; i < G.next_open && G.nbackoff; i++) {
        struct conn *c = &G.conns[i];
        if (c->io.state != ST_BACKOFF)
            continue;
        if (now >= c->topen && G.inflight < MAX_INFLIGHT_OPENS) {
            G.nbackoff--;
            start_open(c, now);
        } else {
            next = now + BACKOFF_SCAN_NS;
        }
    }
    return next;
}

/* Close connections whose connect + handshake took too long. At most every SCAN_NS. */
static void scan_open_timeouts(int64_t now, int force)
{
    if (!G.inflight || (!force && now - G.last_scan < SCAN_NS))
        return;
    G.last_scan = now;
    while (G.scan_lo < G.next_open && !ep_opening(&G.conns[G.scan_lo].io))
        G.scan_lo++;
    for (long i = G.scan_lo; i < G.next_open; i++) {
        struct conn *c = &G.conns[i];
        if (ep_opening(&c->io) && now - c->topen >= OPEN_TIMEOUT_NS)
            open_failed(c, 0, now);
    }
}

static void opened(struct conn *c, int64_t now)
{
    G.inflight--;
    c->tries = 0;
    c->io.state = ST_READY;
    c->hgot = 0;
    ep_watch(&G.loop, &c->io, EPOLLIN);
    if (c->resend) { /* the same request, on the new connection; still outstanding */
        c->resend = 0;
        G.classes[c->cls].retried++;
        write_request(c, now);
    } else if (G.sending) {
        send_request(c, now);
    }
}

static void send_request(struct conn *c, int64_t now)
{
    c->t0 = now;
    G.outstanding++;
    write_request(c, now);
}

/* Write c's request from its first byte (it counts as outstanding already). */
static void write_request(struct conn *c, int64_t now)
{
    const struct cls *k = &G.classes[c->cls];
    c->io.state = ST_SEND;
    c->io.off = 0;
    if (ep_flush(&G.loop, &c->io, k->msg, k->msg_len)) {
        peer_closed(c, now);
        return;
    }
    if (c->io.off == k->msg_len)
        c->io.state = ST_RECV;
}

static void reply_done(struct conn *c, int64_t now)
{
    struct cls *k = &G.classes[c->cls];
    G.outstanding--;
    k->replies++;
    c->io.state = ST_READY;
    if (now >= G.mstart && now < G.mend) {
        int64_t lat = now - c->t0;
        if (c->is_err)
            k->qerrors++;
        if (k->nlat == k->cap_lat) {
            size_t nc = k->cap_lat ? k->cap_lat * 2 : 4096;
            int64_t *l = realloc(k->lat, nc * sizeof *l);
            if (!l) {
                fprintf(stderr, "qload: out of memory\n");
                exit(1);
            }
            k->lat = l;
            k->cap_lat = nc;
        }
        k->lat[k->nlat++] = lat;
        if (G.csv && c->counted++ % (uint64_t)G.sample == 0)
            fprintf(G.csv, "%s,%s,%ld,%.3f,%.1f,%s\n", G.label, k->name, (long)(c - G.conns),
                    (double)(now - G.mstart) / 1e6, (double)lat / 1e3, c->is_err ? "qerror" : "ok");
    }
    if (G.sending)
        send_request(c, now);
}

/* Scan received bytes: headers, the first body byte, lengths. Whole responses end requests
 * (one with no request outstanding is counted extra); async and sync messages from the peer
 * are skipped. Stops where c is closed or reopened (the rest was the old connection's). -1 on
 * a malformed header. */
static int scan_input(struct conn *c, const uint8_t *p, size_t n, int64_t *now)
{
    uint64_t id = c->io.id;
    while (n && c->io.state != ST_CLOSED && c->io.id == id) {
        if (c->hgot < 8) {
            size_t take = QG_MIN((size_t)(8 - c->hgot), n);
            memcpy(c->hdr + c->hgot, p, take);
            c->hgot = (uint8_t)(c->hgot + take);
            p += take;
            n -= take;
            if (c->hgot < 8)
                break;
            struct kipc_hdr h;
            const char *why;
            if (kipc_hdr_parse(c->hdr, 8, MAX_MESSAGE, &h, &why) != QG_OK) {
                fprintf(stderr, "qload: conn %ld: bad message header: %s\n", (long)(c - G.conns), why);
                return -1;
            }
            c->left = h.len - 8;
            c->first = 1;
            c->is_err = 0;
            c->rtype = h.type;
            c->rcomp = h.compressed;
        }
        if (n && c->first) {
            c->is_err = !c->rcomp && p[0] == 0x80; /* q error; errors are never worth compressing */
            c->first = 0;
        }
        size_t take = c->left < n ? (size_t)c->left : n;
        c->left -= take;
        p += take;
        n -= take;
        if (!c->left) {
            c->hgot = 0;
            if (c->rtype == KIPC_RESPONSE && (c->io.state == ST_RECV || c->io.state == ST_SEND)) {
                *now = mono_ns();
                reply_done(c, *now);
            } else if (c->rtype == KIPC_RESPONSE && G.classes) {
                G.classes[c->cls].extra++;
            }
        }
    }
    return 0;
}

static void on_readable(struct conn *c, int64_t *now)
{
    size_t total = 0;
    uint64_t id = c->io.id;
    while (total < READ_BUDGET && c->io.state != ST_CLOSED && c->io.id == id) {
        ssize_t r = ep_read(&c->io, G.scratch, SCRATCH_LEN);
        if (r == 0)
            return;
        if (r < 0) { /* closed or reset */
            peer_closed(c, *now);
            return;
        }
        total += (size_t)r;
        if (scan_input(c, G.scratch, (size_t)r, now)) {
            if (c->io.state == ST_SEND || c->io.state == ST_RECV)
                request_failed(c);
            else
                conn_close(c);
            return;
        }
        if ((size_t)r < SCRATCH_LEN)
            return;
    }
}

static void on_event(struct conn *c, uint32_t ev, int64_t *now)
{
    if (ep_opening(&c->io)) {
        int r = ep_open_step(&G.loop, &c->io, ev, G.hs, G.hs_len);
        if (r == EP_OPEN)
            opened(c, *now);
        else if (r != EP_WAIT)
            open_failed(c, r == EP_ACCESS, *now);
        return;
    }
    switch (c->io.state) {
    case ST_SEND:
        if (ev & EPOLLOUT) {
            const struct cls *k = &G.classes[c->cls];
            if (ep_flush(&G.loop, &c->io, k->msg, k->msg_len)) {
                peer_closed(c, *now);
                return;
            }
            if (c->io.off == k->msg_len)
                c->io.state = ST_RECV;
        }
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
            on_readable(c, now);
        return;
    case ST_RECV:
    case ST_READY:
        on_readable(c, now);
        return;
    default:
        return;
    }
}

/* One epoll_wait until deadline (absolute ns, 0 = none). Signals only interrupt it here. An
 * event of a connection's previous fd (its io.id has moved on) is dropped. */
static void poll_once(int64_t deadline, const sigset_t *waitmask)
{
    static struct epoll_event evs[1024];
    int n = ep_wait(&G.loop, evs, (int)QG_ARRAY_LEN(evs), deadline, 60 * NS, waitmask);
    int64_t now = mono_ns();
    for (int i = 0; i < n; i++) {
        struct conn *c = &G.conns[evs[i].data.u64 & 0xffffffffu];
        if (c->io.state != ST_CLOSED && c->io.id == evs[i].data.u64)
            on_event(c, evs[i].events, &now);
    }
}

static int64_t min_deadline(int64_t a, int64_t b) { return !a ? b : !b ? a : QG_MIN(a, b); }

/* ---- the two modes -------------------------------------------------------------------------- */

static int run_idle(long n, double hold, const sigset_t *waitmask)
{
    int64_t start = mono_ns(), open_limit = start + IDLE_OPEN_LIMIT_NS;
    while (!stop_signals && (G.next_open < G.nconns || G.inflight)) {
        int64_t now = mono_ns();
        if (now >= open_limit)
            break;
        pump_opens(now);
        scan_open_timeouts(now, 0);
        if (G.next_open >= G.nconns && !G.inflight)
            break;
        poll_once(min_deadline(open_limit, G.inflight ? now + SCAN_NS : 0), waitmask);
    }
    int64_t done = mono_ns();
    long opened_n = 0;
    for (long i = 0; i < G.nconns; i++) {
        if (ep_opening(&G.conns[i].io))
            conn_close(&G.conns[i]); /* cut short: counts as failed */
        opened_n += G.conns[i].io.state == ST_READY;
    }
    double secs = (double)(done - start) / 1e9;
    long failed = n - opened_n;
    printf("qload idle conns=%ld opened=%ld failed=%ld handshake_secs=%.3f handshakes_per_sec=%.0f\n", n,
           opened_n, failed, secs, secs > 0 ? (double)opened_n / secs : 0.0);
    fflush(stdout);
    int64_t hold_end = done + (int64_t)(hold * 1e9);
    while (!stop_signals && mono_ns() < hold_end)
        poll_once(hold_end, waitmask);
    if (G.idle_dropped)
        fprintf(stderr, "qload idle: %ld connections closed by the peer while held\n", G.idle_dropped);
    for (long i = 0; i < G.nconns; i++)
        conn_close(&G.conns[i]);
    return failed || G.idle_dropped ? 1 : 0;
}

/* User + system seconds of the --cpu processes so far (every thread), from /proc. */
static double cpu_seconds(void)
{
    double t = 0;
    for (int i = 0; i < G.ncpu_pids; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", G.cpu_pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold spaces */
        unsigned long long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            t += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    return t;
}

static int run_load(double warmup, double seconds, const sigset_t *waitmask)
{
    int64_t start = mono_ns();
    G.mstart = start + (int64_t)(warmup * 1e9);
    G.mend = G.mstart + (int64_t)(seconds * 1e9);
    G.sending = 1;
    int warned = 0, cpu_started = 0;
    while (!stop_signals) {
        int64_t now = mono_ns();
        if (now >= G.mend)
            break;
        if (!cpu_started && now >= G.mstart) {
            G.cpu0 = cpu_seconds();
            cpu_started = 1;
        }
        if (!warned && now >= G.mstart) { /* once: later opens are reconnects */
            warned = 1;
            if (warmup > 0 && (G.inflight || G.next_open < G.nconns))
                fprintf(stderr, "qload: %ld connections still opening when measurement started\n",
                        G.nconns - G.next_open + G.inflight);
        }
        pump_opens(now);
        int64_t reopen_at = pump_reopens(now);
        scan_open_timeouts(now, 0);
        int64_t dl = now < G.mstart ? G.mstart : G.mend;
        if (G.inflight || G.next_open < G.nconns)
            dl = QG_MIN(dl, now + SCAN_NS);
        poll_once(min_deadline(dl, reopen_at), waitmask);
    }
    int64_t end = mono_ns();
    G.cpu1 = cpu_seconds();
    if (!cpu_started)
        G.cpu0 = G.cpu1;
    double measured;
    if (stop_signals) {
        G.mend = QG_MIN(G.mend, end); /* nothing completing from here on counts */
        measured = end > G.mstart ? (double)(G.mend - G.mstart) / 1e9 : 0;
    } else {
        measured = (double)(G.mend - G.mstart) / 1e9;
    }
    /* Stop sending; drop unfinished opens (but reopens that carry a request); wait a while for
     * outstanding replies (a first signal ends the run, a second this wait). */
    G.sending = 0;
    long not_opened = G.nconns - G.next_open;
    for (long i = 0; i < G.nconns; i++) {
        struct conn *c = &G.conns[i];
        if (c->resend)
            continue;
        if (ep_opening(&c->io)) {
            not_opened += c->gen == 1; /* a reopen was opened before */
            conn_close(c);
        } else if (c->io.state == ST_READY || c->io.state == ST_BACKOFF) {
            conn_close(c);
        }
    }
    if (not_opened)
        fprintf(stderr, "qload: %ld connections were never opened (the run ended first)\n", not_opened);
    int64_t drain_end = mono_ns() + DRAIN_NS;
    while (stop_signals < 2 && G.outstanding > 0) {
        int64_t now = mono_ns();
        if (now >= drain_end)
            break;
        int64_t reopen_at = pump_reopens(now);
        scan_open_timeouts(now, 0);
        poll_once(min_deadline(min_deadline(drain_end, reopen_at), G.inflight ? now + SCAN_NS : 0), waitmask);
    }
    for (long i = 0; i < G.nconns; i++) {
        struct conn *c = &G.conns[i];
        if (has_request(c))
            G.classes[c->cls].unfinished++;
        conn_close(c);
    }

    int rc = 0;
    size_t all = 0;
    for (int j = 0; j < G.nclasses; j++)
        all += G.classes[j].nlat;
    char cpu[64] = "";
    if (G.ncpu_pids)
        snprintf(cpu, sizeof cpu, " cpu_us_per_req=%.2f", all ? (G.cpu1 - G.cpu0) * 1e6 / (double)all : 0.0);
    for (int j = 0; j < G.nclasses; j++) {
        struct cls *k = &G.classes[j];
        size_t n = k->nlat;
        double p50, p99, mx;
        lat_summary(k->lat, n, 0, &p50, &p99, &mx);
        long failed = k->failed + k->open_failed + k->access_failed;
        char more[64] = ""; /* only with --reconnect: scripts match the line as it was */
        if (G.reconnect)
            snprintf(more, sizeof more, " retried=%ld extra=%ld", k->retried, k->extra);
        printf("qload class=%s mode=%s conns=%ld requests=%zu rps=%.1f p50_us=%.0f p99_us=%.0f "
               "max_us=%.0f qerrors=%ld failed=%ld%s%s\n",
               k->name, k->mode, k->count, n, measured > 0 ? (double)n / measured : 0.0, p50, p99,
               mx, k->qerrors, failed, cpu, more);
        if (G.reconnect)
            fprintf(stderr, "qload class=%s: replies=%ld reconnects=%ld\n", k->name, k->replies, k->reconnects);
        else if (k->extra)
            fprintf(stderr, "qload class=%s: extra=%ld responses with no request outstanding\n", k->name,
                    k->extra);
        if (failed || k->unfinished)
            fprintf(stderr,
                    "qload class=%s: lost_during_request=%ld connect_failed=%ld access_failed=%ld "
                    "unanswered_at_end=%ld\n",
                    k->name, k->failed, k->open_failed, k->access_failed, k->unfinished);
        if (failed)
            rc = 1;
    }
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv)
{
    const char *gw = NULL, *userpass = "qload:qload", *csv_path = NULL;
    double seconds = 5, warmup = 1, hold = 0;
    long idle = -1;
    G.label = "";
    G.sample = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-g") && more)
            gw = argv[++i];
        else if (!strcmp(a, "-u") && more)
            userpass = argv[++i];
        else if (!strcmp(a, "--class") && more) {
            if (add_class(argv[++i])) {
                fprintf(stderr, "qload: bad --class %s (NAME:MODE:COUNT)\n", argv[i]);
                usage();
            }
        } else if (!strcmp(a, "--seconds") && more) {
            if (arg_double(argv[++i], &seconds, 1))
                usage();
        } else if (!strcmp(a, "--warmup") && more) {
            if (arg_double(argv[++i], &warmup, 1))
                usage();
        } else if (!strcmp(a, "--hold") && more) {
            if (arg_double(argv[++i], &hold, 1))
                usage();
        } else if (!strcmp(a, "--idle") && more) {
            if (arg_long(argv[++i], &idle) || idle < 1)
                usage();
        } else if (!strcmp(a, "--cpu") && more) {
            for (char *p = argv[++i], *e; *p && G.ncpu_pids < (int)QG_ARRAY_LEN(G.cpu_pids); p = *e ? e + 1 : e) {
                long v = strtol(p, &e, 10);
                if (v <= 0 || (*e && *e != ','))
                    usage();
                G.cpu_pids[G.ncpu_pids++] = (int)v;
            }
        } else if (!strcmp(a, "--sample") && more) {
            if (arg_long(argv[++i], &G.sample) || G.sample < 1)
                usage();
        } else if (!strcmp(a, "--csv") && more)
            csv_path = argv[++i];
        else if (!strcmp(a, "--label") && more)
            G.label = argv[++i];
        else if (!strcmp(a, "--reconnect"))
            G.reconnect = 1;
        else
            usage();
    }
    if (!gw || (idle < 0) == (G.nclasses == 0) || seconds > 1e6 || warmup > 1e6 || hold > 1e6 ||
        (G.reconnect && idle > 0))
        usage();
    if (add_targets(gw) || !G.ntargets)
        usage();

    G.hs_len = hs_build_userpass(G.hs, sizeof G.hs, userpass);
    if (!G.hs_len) {
        fprintf(stderr, "qload: credentials too long\n");
        usage();
    }

    if (idle > 0) {
        G.nconns = idle;
        free(G.classes);
        G.classes = NULL;
    } else {
        for (int j = 0; j < G.nclasses; j++)
            G.nconns += G.classes[j].count;
    }
    if (nofile_raise((rlim_t)G.nconns + 64, "qload"))
        return 2;
    G.conns = calloc((size_t)G.nconns, sizeof *G.conns);
    G.scratch = malloc(SCRATCH_LEN);
    G.loop = (struct eploop){.epfd = epoll_create1(EPOLL_CLOEXEC), .prog = "qload"};
    if (!G.conns || !G.scratch || G.loop.epfd < 0) {
        fprintf(stderr, "qload: cannot set up: %s\n", strerror(errno));
        return 1;
    }
    long idx = 0;
    for (int j = 0; j < G.nclasses; j++)
        for (long k = 0; k < G.classes[j].count; k++)
            G.conns[idx++].cls = (uint16_t)j;
    for (long i = 0; i < G.nconns; i++) {
        G.conns[i].io.fd = -1;
        G.conns[i].io.id = (uint64_t)i;
        G.conns[i].target = (uint32_t)(i % G.ntargets);
    }
    if (csv_path) {
        G.csv = fopen(csv_path, "a");
        if (!G.csv) {
            fprintf(stderr, "qload: %s: %s\n", csv_path, strerror(errno));
            return 1;
        }
        setvbuf(G.csv, NULL, _IOFBF, 1 << 20);
    }

    /* SIGINT/SIGTERM are blocked except inside epoll_pwait, so no wake-up is lost. */
    sigset_t waitmask;
    stop_signals_block(&waitmask);

    int rc = idle > 0 ? run_idle(idle, hold, &waitmask) : run_load(warmup, seconds, &waitmask);

    if (G.csv && fclose(G.csv)) {
        fprintf(stderr, "qload: %s: %s\n", csv_path, strerror(errno));
        rc = 1;
    }
    close(G.loop.epfd);
    for (int j = 0; j < G.nclasses; j++) {
        free(G.classes[j].lat);
        free(G.classes[j].msg);
        free(G.classes[j].mode);
        free((char *)G.classes[j].name);
    }
    free(G.classes);
    free(G.targets);
    free(G.conns);
    free(G.scratch);
    return rc;
}

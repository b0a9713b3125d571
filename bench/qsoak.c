/* qsoak.c: a soak client for the gateway. CONNS closed-loop connections in one thread on epoll,
 * each sending sync char-vector requests "echo ID|PAD" of random size and checking that every
 * reply is exactly its own request's text (not another request's, not a second copy). Once a
 * second it samples the gateway's RSS and open descriptors (--pid), optionally to CSV.
 * Prints one summary line on stdout; progress, anomalies and q error texts on stderr. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "util.h"

#define NS 1000000000LL
#define MS 1000000LL
#define RECONNECT_NS (100 * MS)    /* after a connection closes */
#define RETRY_NS (200 * MS)        /* after a refused (or failed) connect */
#define OPEN_TIMEOUT_NS (5 * NS)   /* connect + handshake */
#define DRAIN_NS (30 * NS)         /* wait for outstanding replies after the run (--drain) */
#define HARD_EXTRA_NS (8 * NS)     /* the whole run ends by seconds + drain + this */
#define TICK_NS (100 * MS)         /* longest epoll wait */
#define PROGRESS_NS (10 * NS)
#define READ_BUDGET (1u << 20)     /* bytes read from one connection per event */
#define IN_MIN (64u << 10)         /* input buffer size kept between replies */
#define KEEP_MAX (1u << 20)        /* buffers above this are freed after a reply */
#define MAX_REPLY (256ULL << 20)   /* a longer reply cannot be ours: protocol error */
#define MAX_ERRTEXTS 64
#define MAX_ANOMALY_LOG 20         /* anomalies described on stderr */
#define REQ_PREFIX 19              /* header 8, type 1, attr 1, length 4, "echo " 5 */
#define EXEC_NAME ".gateway.exec"
#define EXEC_HEAD (6 + 1 + sizeof EXEC_NAME) /* --exec: a 2-list, then the symbol, before the text */

enum cstate {
    ST_WAIT,                       /* closed; (re)connect at t_next */
    ST_CONNECTING = EP_CONNECTING, /* non-blocking connect in progress */
    ST_HS_SEND = EP_HS_SEND,       /* sending user CAP NUL */
    ST_HS_READ = EP_HS_READ,       /* waiting for the capability byte */
    ST_READY,      /* open, nothing being sent */
    ST_SEND,       /* writing a request */
    ST_RECV,       /* request written, waiting for its reply */
    ST_OFF,        /* closed for good (the run is over) */
};

struct conn {
    struct epconn io;     /* fd, epoll mask, state, bytes of the request written */
    uint8_t outstanding;  /* a request was sent (or is being sent) and has no reply yet */
    uint64_t rng;         /* this connection's PRNG state */
    uint64_t seq;         /* next sequence number; never reused, survives reconnects */
    uint64_t cur;         /* sequence number of the last request */
    int64_t t_next;       /* ST_WAIT: when to connect; opening: when to give up */
    uint8_t *req;         /* the last request, whole message; kept until its reply */
    size_t req_cap, req_len;
    uint8_t *in;          /* received bytes not yet consumed */
    size_t in_cap, in_len;
    uint64_t *done;       /* bitmap of answered sequence numbers (ok, qerror, corrupted) */
    size_t done_words;
};

struct errtext {
    char *text;
    long count;
};

struct sample {
    long rss_kb, fds; /* -1 when not known */
};

static struct {
    struct target target;
    struct conn *conns;
    long nconns;
    uint8_t hs[64];
    size_t hs_len;
    struct eploop loop;   /* its bytes_out: bytes sent */
    int sending;          /* closed loop running: send after each reply */
    long outstanding;     /* requests without a reply on open connections */
    /* request outcomes: requests = ok + qerrors + corrupted + closed + lost (+ outstanding) */
    long requests, ok, qerrors, closed, lost, corrupted;
    /* replies that answer nothing of ours */
    long duplicated, misrouted;
    long cycle;           /* --cycle N: each connection repeats N requests (ids seq % N) */
    long per_conn;        /* --requests N: each connection sends N, then closes; 0 = no limit */
    long conns_done;      /* connections that have sent their N and are closed */
    long taken;           /* --requests: another request's reply taken as the answer (in misrouted) */
    long max_pad;         /* --max-pad N: pads over N are taken mod N + 1; -1 = none */
    int exec;             /* --exec: requests are (`.gateway.exec; "echo ...") */
    size_t prefix;        /* bytes of a request before its "ID|PAD" */
    long refused, hs_rejected, open_timeouts, reconnects, ignored_msgs, anomalies;
    uint64_t bytes_in;
    struct errtext errs[MAX_ERRTEXTS];
    int nerrs;
    long errs_other;
    /* sampling */
    int pid;
    FILE *csv;
    int64_t start;
    double warmup_s;
    long nsamples;
    long rss_min, rss_max, rss_warm, rss_last, fds_min, fds_max, fds_last;
    int pid_gone_warned;
} G;

static void usage(void)
{
    fprintf(stderr,
            "usage: qsoak -g host:port [-c CONNS] [--seconds S] [--pid GATEWAY_PID] [--csv FILE]\n"
            "             [--seed N] [--cycle N] [--requests N] [--exec] [--max-pad N] [--drain S]\n"
            "  soak client: CONNS (default 64) connections, one thread, epoll. Each loops: a sync\n"
            "  char vector \"echo ID|PAD\" (ID c<conn>-<seq>; PAD random: 70%% 0-100 bytes, 25%%\n"
            "  1-64 KiB, 5%% 1-4 MiB), then waits for the reply, which must be \"ID|PAD\".\n"
            "  Replies are classified ok, qerror (q error), duplicated (an already answered id of\n"
            "  the connection, or a reply with nothing outstanding), misrouted (any other id, or\n"
            "  the right id with a different body); a connection closing with a request\n"
            "  outstanding counts closed (reconnect after 100 ms; refused: retry every 200 ms).\n"
            "  After --seconds (default 60) sending stops; replies still missing after --drain\n"
            "  (default 30) s are lost. --pid samples the gateway's VmRSS and open fds each\n"
            "  second; --csv writes\n"
            "    t_s,rss_kb,fds,ok,qerror,closed,lost,duplicated,misrouted\n"
            "  per sample. Progress every 10 s and q error texts go to stderr; stdout gets one line:\n"
            "    qsoak requests=N ok=A qerrors=B closed=C lost=D duplicated=E misrouted=F\n"
            "      rss_kb_min=.. rss_kb_max=.. rss_kb_after_warmup_first=.. rss_kb_last=..\n"
            "      fds_min=.. fds_max=.. fds_last=..\n"
            "  (na without --pid; warmup is min(60 s, 20%% of the run)). Exit 0 if lost,\n"
            "  duplicated and misrouted are 0 and at least one reply was ok; 1 otherwise;\n"
            "  2 on bad usage. SIGINT ends the run early (a second one ends the drain).\n"
            "  --cycle N: connection c sends the same N requests over and over (ID c<conn>-<seq\n"
            "  mod N>, PAD drawn from conn and seq mod N), as q users repeat their queries, so a\n"
            "  gateway can learn them; a reply of another of the N counts duplicated.\n"
            "  --requests N: each connection sends N requests, then closes; the run ends when\n"
            "  every connection has (or at --seconds, whichever comes first), and a reply with\n"
            "  another request's id (an earlier one of the connection too) is taken as the\n"
            "  answer, as q's h x takes whatever response comes (counted misrouted, and in\n"
            "  taken= on stderr), so that a run with misrouted replies ends too:\n"
            "  requests = ok + qerrors + closed + lost + misrouted answers.\n"
            "  --exec: each request is (`.gateway.exec; \"echo ID|PAD\"), as q/client.q sends it\n"
            "  to a -30! gateway such as bench/gw30 (whose reply is the worker's, \"ID|PAD\").\n"
            "  --max-pad N: a PAD drawn longer than N bytes is taken mod N+1 (shorter runs).\n");
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "qsoak: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return q;
}

/* ---- random requests ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* 70% 0-100 bytes, 25% 1-64 KiB, 5% 1-4 MiB. */
static size_t draw_pad(uint64_t *s)
{
    uint64_t r = rng_next(s) % 100;
    if (r < 70)
        return (size_t)(rng_next(s) % 101);
    if (r < 95)
        return (size_t)(1024 + rng_next(s) % (64 * 1024 - 1024 + 1));
    return (size_t)((1u << 20) + rng_next(s) % (3u * (1u << 20) + 1));
}

static void fill_pad(uint64_t *s, uint8_t *p, size_t n)
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    while (n) {
        uint64_t r = rng_next(s);
        for (int k = 0; k < 8 && n; k++, n--, r >>= 8)
            *p++ = (uint8_t)alpha[r & 63];
    }
}

/* "c<conn>-<seq>|" at the start of t: 1 and the two numbers, else 0. */
static int parse_id(const uint8_t *t, size_t n, long *conn, uint64_t *seq)
{
    size_t i = 1, d;
    if (n < 5 || t[0] != 'c')
        return 0;
    uint64_t a = 0, b = 0;
    for (d = 0; i < n && d < 18 && t[i] >= '0' && t[i] <= '9'; i++, d++)
        a = a * 10 + (uint64_t)(t[i] - '0');
    if (!d || i >= n || t[i] != '-')
        return 0;
    for (i++, d = 0; i < n && d < 19 && t[i] >= '0' && t[i] <= '9'; i++, d++)
        b = b * 10 + (uint64_t)(t[i] - '0');
    if (!d || i >= n || t[i] != '|')
        return 0;
    *conn = (long)a;
    *seq = b;
    return 1;
}

static void mark_done(struct conn *c, uint64_t seq)
{
    size_t w = (size_t)(seq / 64);
    if (w >= c->done_words) {
        size_t nw = QG_MAX(w + 1, c->done_words * 2);
        c->done = xrealloc(c->done, nw * sizeof *c->done);
        memset(c->done + c->done_words, 0, (nw - c->done_words) * sizeof *c->done);
        c->done_words = nw;
    }
    c->done[w] |= 1ULL << (seq % 64);
}

static int is_done(const struct conn *c, uint64_t seq)
{
    size_t w = (size_t)(seq / 64);
    return w < c->done_words && (c->done[w] >> (seq % 64)) & 1;
}

static void errtext_add(const char *t, size_t n)
{
    n = QG_MIN(n, (size_t)200);
    for (int i = 0; i < G.nerrs; i++)
        if (strlen(G.errs[i].text) == n && !memcmp(G.errs[i].text, t, n)) {
            G.errs[i].count++;
            return;
        }
    if (G.nerrs == MAX_ERRTEXTS) {
        G.errs_other++;
        return;
    }
    char *s = strndup(t, n);
    if (!s) {
        G.errs_other++;
        return;
    }
    G.errs[G.nerrs++] = (struct errtext){.text = s, .count = 1};
}

/* Describe a reply that is not what it should be (the first MAX_ANOMALY_LOG of them). */
static void anomaly(const struct conn *c, const char *what, const uint8_t *body, size_t n)
{
    if (G.anomalies++ >= MAX_ANOMALY_LOG)
        return;
    char got[64];
    size_t k = 0;
    const uint8_t *t = n >= 6 && body[0] == KT_CHAR ? body + 6 : body;
    size_t tn = t == body ? n : n - 6;
    for (; k < tn && k < 48; k++)
        got[k] = t[k] >= 32 && t[k] < 127 ? (char)t[k] : '.';
    got[k] = 0;
    fprintf(stderr, "qsoak: conn %ld: %s: outstanding=%s c%ld-%" PRIu64 " reply type %d, %zu bytes: \"%s%s\"\n",
            (long)(c - G.conns), what, c->outstanding ? "yes" : "no", (long)(c - G.conns), c->cur,
            n ? (int)(int8_t)body[0] : 0, n, got, tn > k ? "..." : "");
}

/* ---- connections ---------------------------------------------------------------------------- */

static int is_open(const struct conn *c) { return c->io.state >= ST_READY && c->io.state <= ST_RECV; }

/* Close c. A request still outstanding counts as closed. Reconnect after delay while the run
 * lasts (delay < 0: never). */
static void conn_drop(struct conn *c, int64_t now, int64_t delay)
{
    if (c->outstanding) {
        G.closed++;
        G.outstanding--;
        c->outstanding = 0;
    }
    ep_close(&c->io);
    free(c->in);
    c->in = NULL;
    c->in_cap = c->in_len = 0;
    if (G.sending && delay >= 0) {
        c->io.state = ST_WAIT;
        c->t_next = now + delay;
    } else {
        c->io.state = ST_OFF;
    }
}

static void start_open(struct conn *c, int64_t now)
{
    if (ep_connect(&G.loop, &c->io, &G.target)) {
        G.refused++;
        c->t_next = now + RETRY_NS;
        return;
    }
    c->t_next = now + OPEN_TIMEOUT_NS;
}

static void send_next(struct conn *c, int64_t now);

/* The request is written: wait for its reply, or (answered already) go on to the next. */
static void sent(struct conn *c, int64_t now)
{
    if (c->outstanding) {
        c->io.state = ST_RECV;
        return;
    }
    c->io.state = ST_READY;
    if (G.sending)
        send_next(c, now);
}

static void write_request(struct conn *c, int64_t now)
{
    if (ep_flush(&G.loop, &c->io, c->req, c->req_len)) {
        conn_drop(c, now, RECONNECT_NS);
        return;
    }
    if (c->io.off == c->req_len)
        sent(c, now);
}

static void send_next(struct conn *c, int64_t now)
{
    if (G.per_conn && c->seq >= (uint64_t)G.per_conn) { /* its N are sent and answered */
        conn_drop(c, now, -1);
        G.conns_done++;
        return;
    }
    char id[48];
    uint64_t idseq = G.cycle ? c->seq % (uint64_t)G.cycle : c->seq, prng = c->rng;
    int idn = snprintf(id, sizeof id, "c%ld-%" PRIu64 "|", (long)(c - G.conns), idseq);
    uint64_t *rs = &c->rng;
    if (G.cycle) { /* the same pad each time round: from the connection and idseq */
        prng = ((uint64_t)(c - G.conns) + 1) * 0x9e3779b97f4a7c15ULL ^ (idseq + 1) * 0x100000001b3ULL;
        rs = &prng;
    }
    size_t pad = draw_pad(rs);
    if (G.max_pad >= 0 && pad > (size_t)G.max_pad)
        pad %= (size_t)G.max_pad + 1;
    size_t text = 5 + (size_t)idn + pad; /* "echo " ID "|" PAD */
    size_t total = G.prefix - 5 + text;
    if (total > c->req_cap) {
        free(c->req);
        c->req = malloc(total);
        if (!c->req) {
            fprintf(stderr, "qsoak: out of memory\n");
            exit(1);
        }
        c->req_cap = total;
    }
    kipc_hdr_write(c->req, KIPC_SYNC, 0, total);
    uint8_t *p = c->req + 8;
    if (G.exec) { /* (`.gateway.exec; "...") */
        memcpy(p, "\x00\x00\x02\x00\x00\x00", 6);
        p[6] = (uint8_t)-KT_SYM;
        memcpy(p + 7, EXEC_NAME, sizeof EXEC_NAME);
        p += EXEC_HEAD;
    }
    p[0] = KT_CHAR;
    p[1] = 0;
    qg_st32(p + 2, (uint32_t)text);
    memcpy(p + 6, "echo ", 5);
    memcpy(c->req + G.prefix, id, (size_t)idn);
    fill_pad(rs, c->req + G.prefix + idn, pad);
    c->req_len = total;
    c->io.off = 0;
    c->cur = c->seq++;
    c->outstanding = 1;
    c->io.state = ST_SEND;
    G.outstanding++;
    G.requests++;
    write_request(c, now);
}

/* The outstanding request has its answer (right or wrong). */
static void finish(struct conn *c, int64_t now)
{
    mark_done(c, c->cur);
    c->outstanding = 0;
    G.outstanding--;
    if (c->io.state == ST_RECV) {
        c->io.state = ST_READY;
        if (c->req_cap > KEEP_MAX) {
            free(c->req);
            c->req = NULL;
            c->req_cap = c->req_len = 0;
        }
        if (G.sending)
            send_next(c, now);
    } /* else still writing it (answered early): sent() goes on */
}

/* Classify one response body. */
static void classify(struct conn *c, const uint8_t *body, size_t n, int le, int64_t now)
{
    if (!c->outstanding) {
        G.duplicated++;
        anomaly(c, "duplicated (nothing outstanding)", body, n);
        return;
    }
    const char *et;
    size_t el;
    if (kcodec_is_error(body, n, &et, &el)) {
        G.qerrors++;
        errtext_add(et, el);
        finish(c, now);
        return;
    }
    if (n >= 6 && body[0] == KT_CHAR && qg_ld32o(body + 2, le) == n - 6) {
        const uint8_t *t = body + 6;
        size_t tn = n - 6, want = c->req_len - G.prefix;
        if (tn == want && !memcmp(t, c->req + G.prefix, want)) {
            G.ok++;
            finish(c, now);
            return;
        }
        long cn;
        uint64_t sq;
        if (parse_id(t, tn, &cn, &sq) && cn == (long)(c - G.conns)) {
            if (sq == (G.cycle ? c->cur % (uint64_t)G.cycle : c->cur)) { /* our id, another body: corrupted */
                G.misrouted++;
                G.corrupted++;
                anomaly(c, "misrouted (right id, body differs)", body, n);
                finish(c, now);
                return;
            }
            if (!G.per_conn && (G.cycle ? sq < (uint64_t)G.cycle : sq < c->seq && is_done(c, sq))) {
                G.duplicated++;
                anomaly(c, "duplicated (already answered id)", body, n);
                return;
            }
        }
        G.misrouted++;
        anomaly(c, "misrouted (another request's reply)", body, n);
        if (G.per_conn) { /* taken as the answer, as h x would */
            G.taken++;
            finish(c, now);
        }
        return;
    }
    /* neither our char vector nor an error: the answer is corrupt */
    G.misrouted++;
    G.corrupted++;
    anomaly(c, "misrouted (not a char vector)", body, n);
    finish(c, now);
}

static void handle_msg(struct conn *c, const uint8_t *msg, size_t len, const struct kipc_hdr *h, int64_t now)
{
    if (h->type != KIPC_RESPONSE) { /* async (or sync) messages from the server are ignored */
        G.ignored_msgs++;
        return;
    }
    const uint8_t *body = msg + 8;
    size_t n = len - 8;
    uint8_t *plain = NULL;
    if (h->compressed) {
        size_t u = kzip_uncompressed_len(msg, len);
        const char *why = "";
        if (u < 9 || u > MAX_REPLY || !(plain = malloc(u)) ||
            kzip_decompress(msg, len, plain, u, &why) != QG_OK) {
            fprintf(stderr, "qsoak: conn %ld: bad compressed reply: %s\n", (long)(c - G.conns), why);
            free(plain);
            static const uint8_t none[1] = {0};
            classify(c, none, 0, 1, now); /* counts as a corrupt answer */
            return;
        }
        body = plain + 8;
        n = u - 8;
    }
    classify(c, body, n, h->le, now);
    free(plain);
}

/* Consume whole messages at the front of c->in. -1 if the stream is broken or c was closed. */
static int process_input(struct conn *c, int64_t now)
{
    size_t off = 0;
    while (c->in_len - off >= 8) {
        struct kipc_hdr h;
        const char *why;
        if (kipc_hdr_parse(c->in + off, 8, MAX_REPLY, &h, &why) != QG_OK) {
            fprintf(stderr, "qsoak: conn %ld: bad message header: %s\n", (long)(c - G.conns), why);
            G.misrouted++; /* the framing is lost: not a reply of ours */
            return -1;
        }
        if (c->in_len - off < h.len)
            break;
        handle_msg(c, c->in + off, (size_t)h.len, &h, now);
        if (c->io.fd < 0)
            return -1;
        off += (size_t)h.len;
    }
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    if (c->in_cap > KEEP_MAX && c->in_len <= IN_MIN) { /* a big reply is done: give it back */
        if (!c->in_len) {
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        } else {
            c->in = xrealloc(c->in, IN_MIN);
            c->in_cap = IN_MIN;
        }
    }
    return 0;
}

static void on_readable(struct conn *c, int64_t now)
{
    size_t total = 0;
    while (total < READ_BUDGET && c->io.fd >= 0) {
        size_t want = IN_MIN;
        if (c->in_len >= 8) {
            struct kipc_hdr h;
            const char *why;
            if (kipc_hdr_parse(c->in, 8, MAX_REPLY, &h, &why) == QG_OK)
                want = QG_MAX(want, (size_t)h.len);
        }
        if (want > c->in_cap) {
            c->in = xrealloc(c->in, want);
            c->in_cap = want;
        }
        ssize_t r = ep_read(&c->io, c->in + c->in_len, c->in_cap - c->in_len);
        if (r == 0)
            return;
        if (r < 0) {
            conn_drop(c, now, RECONNECT_NS); /* closed or reset */
            return;
        }
        total += (size_t)r;
        G.bytes_in += (uint64_t)r;
        c->in_len += (size_t)r;
        if (process_input(c, now)) {
            if (c->io.fd >= 0)
                conn_drop(c, now, RECONNECT_NS);
            return;
        }
    }
}

static void on_event(struct conn *c, uint32_t ev, int64_t now)
{
    if (ep_opening(&c->io)) {
        int r = ep_open_step(&G.loop, &c->io, ev, G.hs, G.hs_len);
        if (r == EP_OPEN) {
            c->io.state = ST_READY;
            ep_watch(&G.loop, &c->io, EPOLLIN);
            if (G.sending)
                send_next(c, now);
        } else if (r != EP_WAIT) {
            if (r == EP_CONNECT_FAILED)
                G.refused++;
            else
                G.hs_rejected++;
            conn_drop(c, now, RETRY_NS);
        }
        return;
    }
    switch (c->io.state) {
    case ST_SEND:
        if (ev & EPOLLOUT) {
            write_request(c, now);
            if (c->io.fd < 0)
                return;
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

/* Start due (re)connections; give up on opens that took too long. Returns the next time
 * something is due here (or deadline). */
static int64_t tend(int64_t now, int64_t deadline)
{
    for (long i = 0; i < G.nconns; i++) {
        struct conn *c = &G.conns[i];
        if (c->io.state == ST_WAIT && now >= c->t_next) {
            if (c->seq)
                G.reconnects++;
            start_open(c, now);
        } else if (ep_opening(&c->io) && now >= c->t_next) {
            G.open_timeouts++;
            conn_drop(c, now, RETRY_NS);
        }
        if (c->io.state <= ST_HS_READ) /* ST_WAIT or opening */
            deadline = QG_MIN(deadline, c->t_next);
    }
    return deadline;
}

/* One epoll_wait until deadline (absolute ns). Signals only interrupt it here. */
static void poll_once(int64_t deadline, const sigset_t *waitmask)
{
    static struct epoll_event evs[256];
    int n = ep_wait(&G.loop, evs, (int)QG_ARRAY_LEN(evs), deadline, TICK_NS, waitmask);
    int64_t now = mono_ns();
    for (int i = 0; i < n; i++) {
        struct conn *c = &G.conns[evs[i].data.u64];
        if (c->io.fd >= 0)
            on_event(c, evs[i].events, now);
    }
}

/* ---- sampling ------------------------------------------------------------------------------- */

static long read_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

static long count_fds(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static struct sample take_sample(int64_t now)
{
    struct sample s = {-1, -1};
    double t = (double)(now - G.start) / 1e9;
    if (G.pid > 0) {
        s.rss_kb = read_rss_kb(G.pid);
        s.fds = count_fds(G.pid);
        if ((s.rss_kb < 0 || s.fds < 0) && !G.pid_gone_warned) {
            fprintf(stderr, "qsoak: t=%.1fs: cannot read /proc/%d (gateway gone?)\n", t, G.pid);
            G.pid_gone_warned = 1;
        }
    }
    if (s.rss_kb >= 0) {
        G.rss_min = G.rss_min < 0 ? s.rss_kb : QG_MIN(G.rss_min, s.rss_kb);
        G.rss_max = QG_MAX(G.rss_max, s.rss_kb);
        if (G.rss_warm < 0 && t >= G.warmup_s)
            G.rss_warm = s.rss_kb;
        G.rss_last = s.rss_kb;
    }
    if (s.fds >= 0) {
        G.fds_min = G.fds_min < 0 ? s.fds : QG_MIN(G.fds_min, s.fds);
        G.fds_max = QG_MAX(G.fds_max, s.fds);
        G.fds_last = s.fds;
    }
    G.nsamples++;
    if (G.csv) {
        char r[24] = "", f[24] = "";
        if (s.rss_kb >= 0)
            snprintf(r, sizeof r, "%ld", s.rss_kb);
        if (s.fds >= 0)
            snprintf(f, sizeof f, "%ld", s.fds);
        fprintf(G.csv, "%.1f,%s,%s,%ld,%ld,%ld,%ld,%ld,%ld\n", t, r, f, G.ok, G.qerrors, G.closed, G.lost,
                G.duplicated, G.misrouted);
        fflush(G.csv);
    }
    return s;
}

/* A sample into *last if one is due (*next_sample); the next is due a second later, never in the past. */
static void sample_if_due(int64_t now, int64_t *next_sample, struct sample *last)
{
    if (now < *next_sample)
        return;
    *last = take_sample(now);
    *next_sample += NS;
    if (*next_sample <= now)
        *next_sample = now + NS;
}

static void progress(int64_t now, const struct sample *s, long *last_done, int64_t *last_t)
{
    long nopen = 0;
    for (long i = 0; i < G.nconns; i++)
        nopen += is_open(&G.conns[i]);
    long done = G.ok + G.qerrors + G.corrupted;
    double dt = (double)(now - *last_t) / 1e9;
    fprintf(stderr,
            "qsoak: t=%.0fs requests=%ld ok=%ld qerrors=%ld closed=%ld duplicated=%ld misrouted=%ld "
            "outstanding=%ld open=%ld/%ld rps=%.0f rss_kb=%ld fds=%ld\n",
            (double)(now - G.start) / 1e9, G.requests, G.ok, G.qerrors, G.closed, G.duplicated,
            G.misrouted, G.outstanding, nopen, G.nconns, dt > 0 ? (double)(done - *last_done) / dt : 0.0,
            s->rss_kb, s->fds);
    *last_done = done;
    *last_t = now;
}

static void put_val(char *buf, size_t len, long v)
{
    if (v < 0)
        snprintf(buf, len, "na");
    else
        snprintf(buf, len, "%ld", v);
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *gw = NULL, *csv_path = NULL;
    double seconds = 60, drain_s = (double)DRAIN_NS / NS;
    long conns = 64, pid = 0, seed = 1;
    G.max_pad = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-g") && more)
            gw = argv[++i];
        else if (!strcmp(a, "-c") && more) {
            if (arg_long(argv[++i], &conns) || conns < 1 || conns > 100000)
                usage();
        } else if (!strcmp(a, "--seconds") && more) {
            if (arg_double(argv[++i], &seconds, 0) || seconds > 1e7)
                usage();
        } else if (!strcmp(a, "--pid") && more) {
            if (arg_long(argv[++i], &pid) || pid < 1 || pid > 0x7fffffff)
                usage();
        } else if (!strcmp(a, "--csv") && more)
            csv_path = argv[++i];
        else if (!strcmp(a, "--seed") && more) {
            if (arg_long(argv[++i], &seed))
                usage();
        } else if (!strcmp(a, "--cycle") && more) {
            if (arg_long(argv[++i], &G.cycle) || G.cycle < 1 || G.cycle > 1000000)
                usage();
        } else if (!strcmp(a, "--requests") && more) {
            if (arg_long(argv[++i], &G.per_conn) || G.per_conn < 1)
                usage();
        } else if (!strcmp(a, "--max-pad") && more) {
            if (arg_long(argv[++i], &G.max_pad))
                usage();
        } else if (!strcmp(a, "--drain") && more) {
            if (arg_double(argv[++i], &drain_s, 1) || drain_s > 1e6)
                usage();
        } else if (!strcmp(a, "--exec"))
            G.exec = 1;
        else
            usage();
    }
    if (!gw || target_parse(&G.target, gw, 0, "qsoak", "address"))
        usage();
    int64_t drain_ns = (int64_t)(drain_s * 1e9);
    G.hs_len = kipc_hs_build(G.hs, sizeof G.hs, "qsoak", NULL, KIPC_CAP_MAX);
    G.prefix = REQ_PREFIX + (G.exec ? EXEC_HEAD : 0);
    G.pid = (int)pid;
    G.nconns = conns;
    G.rss_min = G.rss_max = G.rss_warm = G.rss_last = -1;
    G.fds_min = G.fds_max = G.fds_last = -1;
    G.warmup_s = QG_MIN(60.0, 0.2 * seconds);
    G.conns = calloc((size_t)conns, sizeof *G.conns);
    G.loop = (struct eploop){.epfd = epoll_create1(EPOLL_CLOEXEC), .prog = "qsoak"};
    if (!G.conns || G.loop.epfd < 0 || !G.hs_len) {
        fprintf(stderr, "qsoak: cannot set up: %s\n", strerror(errno));
        return 1;
    }
    for (long i = 0; i < conns; i++) {
        struct conn *c = &G.conns[i];
        c->io.fd = -1;
        c->io.id = (uint64_t)i;
        c->io.state = ST_WAIT;
        c->rng = ((uint64_t)seed * 0x100000001b3ULL) ^ ((uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL);
    }
    if (csv_path) {
        G.csv = fopen(csv_path, "w");
        if (!G.csv) {
            fprintf(stderr, "qsoak: %s: %s\n", csv_path, strerror(errno));
            return 1;
        }
        fprintf(G.csv, "t_s,rss_kb,fds,ok,qerror,closed,lost,duplicated,misrouted\n");
    }

    /* SIGINT/SIGTERM are blocked except inside epoll_pwait, so no wake-up is lost. */
    sigset_t waitmask;
    stop_signals_block(&waitmask);

    int64_t start = mono_ns();
    G.start = start;
    int64_t end_send = start + (int64_t)(seconds * 1e9), hard_end = end_send + drain_ns + HARD_EXTRA_NS;
    int64_t next_sample = start + NS, next_progress = start + PROGRESS_NS, last_t = start;
    long last_done = 0;
    struct sample last = {-1, -1};
    fprintf(stderr, "qsoak: %ld connections to %s for %.0f s (seed %ld)\n", conns, G.target.name, seconds, seed);

    /* the run */
    G.sending = 1;
    for (;;) {
        int64_t now = mono_ns();
        if (stop_signals || now >= end_send || (G.per_conn && G.conns_done == G.nconns))
            break;
        sample_if_due(now, &next_sample, &last);
        if (now >= next_progress) {
            progress(now, &last, &last_done, &last_t);
            next_progress += PROGRESS_NS;
        }
        poll_once(tend(now, QG_MIN(next_sample, end_send)), &waitmask);
    }

    /* the drain: no new requests; close what has nothing outstanding */
    G.sending = 0;
    int64_t now = mono_ns();
    if (now < end_send) /* stopped early by a signal */
        end_send = now;
    for (long i = 0; i < conns; i++) {
        struct conn *c = &G.conns[i];
        if (!c->outstanding && c->io.state != ST_OFF)
            conn_drop(c, now, -1);
    }
    int stop_at = stop_signals ? 2 : 1;
    int64_t drain_end = QG_MIN(now + drain_ns, hard_end);
    while (G.outstanding > 0 && stop_signals < stop_at) {
        now = mono_ns();
        if (now >= drain_end)
            break;
        sample_if_due(now, &next_sample, &last);
        poll_once(QG_MIN(next_sample, drain_end), &waitmask);
    }
    now = mono_ns();
    for (long i = 0; i < conns; i++) {
        struct conn *c = &G.conns[i];
        if (c->outstanding) {
            G.lost++;
            G.outstanding--;
            c->outstanding = 0;
            fprintf(stderr, "qsoak: conn %ld: c%ld-%" PRIu64 " lost (no reply %.0f s after the run)\n", i, i,
                    c->cur, (double)(now - end_send) / 1e9);
        }
        conn_drop(c, now, -1);
    }
    last = take_sample(now); /* the final row carries lost */
    double run_s = (double)(QG_MIN(now, end_send) - start) / 1e9;

    char rmin[24], rmax[24], rwarm[24], rlast[24], fmin[24], fmax[24], flast[24];
    put_val(rmin, sizeof rmin, G.rss_min);
    put_val(rmax, sizeof rmax, G.rss_max);
    put_val(rwarm, sizeof rwarm, G.rss_warm >= 0 ? G.rss_warm : G.rss_last);
    put_val(rlast, sizeof rlast, G.rss_last);
    put_val(fmin, sizeof fmin, G.fds_min);
    put_val(fmax, sizeof fmax, G.fds_max);
    put_val(flast, sizeof flast, G.fds_last);
    printf("qsoak requests=%ld ok=%ld qerrors=%ld closed=%ld lost=%ld duplicated=%ld misrouted=%ld "
           "rss_kb_min=%s rss_kb_max=%s rss_kb_after_warmup_first=%s rss_kb_last=%s fds_min=%s "
           "fds_max=%s fds_last=%s\n",
           G.requests, G.ok, G.qerrors, G.closed, G.lost, G.duplicated, G.misrouted, rmin, rmax, rwarm,
           rlast, fmin, fmax, flast);
    fflush(stdout);

    fprintf(stderr,
            "qsoak: details: run_s=%.1f answered_per_s=%.0f corrupted=%ld (in misrouted) refused=%ld "
            "handshake_rejected=%ld open_timeouts=%ld reconnects=%ld ignored_msgs=%ld sent_mb=%.1f "
            "received_mb=%.1f samples=%ld warmup_s=%.0f taken=%ld (in misrouted)\n",
            run_s, run_s > 0 ? (double)(G.ok + G.qerrors) / run_s : 0.0, G.corrupted, G.refused,
            G.hs_rejected, G.open_timeouts, G.reconnects, G.ignored_msgs, (double)G.loop.bytes_out / 1e6,
            (double)G.bytes_in / 1e6, G.nsamples, G.warmup_s, G.taken);
    if (G.requests != G.ok + G.qerrors + G.corrupted + G.taken + G.closed + G.lost)
        fprintf(stderr, "qsoak: internal error: requests %ld != ok+qerrors+corrupted+taken+closed+lost\n",
                G.requests);
    for (int i = 0; i < G.nerrs; i++) {
        fprintf(stderr, "qsoak: qerror %ld x '%s\n", G.errs[i].count, G.errs[i].text);
        free(G.errs[i].text);
    }
    if (G.errs_other)
        fprintf(stderr, "qsoak: qerror %ld x (other texts)\n", G.errs_other);

    int rc = G.lost || G.duplicated || G.misrouted || !G.ok ? 1 : 0;
    if (!G.ok)
        fprintf(stderr, "qsoak: no request was answered ok\n");
    if (G.csv && fclose(G.csv)) {
        fprintf(stderr, "qsoak: %s: %s\n", csv_path, strerror(errno));
        rc = 1;
    }
    for (long i = 0; i < conns; i++) {
        free(G.conns[i].req);
        free(G.conns[i].done);
    }
    free(G.conns);
    close(G.loop.epfd);
    return rc;
}

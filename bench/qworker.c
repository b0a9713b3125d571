/* qworker.c: a stand-in for q/worker.q on machines without q: q's handshake, tbl2, and the
 * requests of q/client.q answered with the bytes q would send. One thread, like q. */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "modes.h"
#include "net.h"
#include "tbl2.h"
#include "util.h"

#define MAX_MESSAGE (1ULL << 34)
static struct tbl2 tbl2;

static struct {
    const char *user; /* required user:pass, or NULL for any */
    int quiet;
    int compress_all; /* compress as if every peer were remote (tests) */
    const char *fault; /* misbehave, for fault-injection tests (see usage) */
    uint64_t rng;
    long defer_every;  /* --defer N:MS: every Nth sync request answered MS ms later, as -30! does */
    int defer_ms;
    long fickle_every; /* --fickle K:MS[:FIRST]: the FIRSTth "fickle X" and every Kth after sleep MS ms first */
    int fickle_ms;
    long fickle_first;
} opt;

static int my_port;       /* the TCP port it listens on ("callback X": %p in X) */
static long sync_seen;   /* sync requests served (held ones not counted), over every connection */
static long fickle_seen; /* "fickle X" queries served */

/* What q would do with the message: the reply, computed; NULL reply for "rows" replies. */
struct reply {
    int64_t rows; /* >= 0 or QMODE_ALL_ROWS: a slice of tbl2 */
    K k;          /* otherwise this object (possibly an error) */
    int held;     /* "hold TAG": no reply yet */
};

/* A sync request's reply deferred (--defer), as .z.pg does with -30!(::): sent at due by
 * -30!(h;0b;x) while the worker goes on serving this connection and the others. */
struct deferred {
    int64_t due;  /* ms, monotonic */
    long seq;     /* which sync request of the process (1 = the first) */
    struct reply r;
};

struct wconn {
    int fd;
    int ready;   /* handshake done */
    int local;   /* peer on this host: never compress */
    uint8_t cap;
    struct msgbuf in;
    size_t pos;        /* in: served up to here (a callback's wait takes what follows first) */
    char peer[64];
    int64_t later_at;  /* "later MS X": when to publish X (ms, monotonic), 0 = nothing due */
    char *later;
    char *hold;        /* "hold TAG": a request that runs until "release TAG" arrives on any
                        * connection (a long query a test ends when it wants); nothing more is
                        * read from this connection meanwhile, as q is busy */
    struct deferred *def; /* deferred replies, due in this order */
    int ndef, def_cap;
    /* Output written only when the socket takes it (POLLOUT), never blocking the loop: used
     * while a flood runs and until what was queued behind it is out. */
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    size_t flood;         /* "flood SIZE": publish SIZE-byte char vectors while > 0 */
    uint64_t flood_msgs;  /* flood messages queued */
    uint64_t out_bytes;   /* bytes written from out */
};

/* Every connection, for "release TAG" to find the one it ends. */
static struct wconn *conns;
static int nconns;

static void logf_(struct wconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct wconn *c, const char *fmt, ...)
{
    if (opt.quiet)
        return;
    char ts[32];
    time_t t = time(NULL);
    strftime(ts, sizeof ts, "%H:%M:%S", localtime(&t));
    fprintf(stderr, "%s qworker %s: ", ts, c ? c->peer : "-");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                poll(&pf, 1, -1);
                continue;
            }
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Output goes through out (in order) while a flood runs or out still holds bytes. */
static int out_queued(const struct wconn *c) { return c->flood || c->out_off < c->out_len; }

static int out_append(struct wconn *c, const struct iovec *iov, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + total > c->out_cap) {
        size_t cap = QG_MAX(c->out_len + total, c->out_cap * 2);
        uint8_t *p = realloc(c->out, cap);
        if (!p)
            return -1;
        c->out = p;
        c->out_cap = cap;
    }
    for (int i = 0; i < n; i++) {
        memcpy(c->out + c->out_len, iov[i].iov_base, iov[i].iov_len);
        c->out_len += iov[i].iov_len;
    }
    return 0;
}

/* Write a message made of these pieces on c: at once (blocking, as q writes a reply), or
 * behind what out holds. */
static int conn_writev(struct wconn *c, struct iovec *iov, int n)
{
    if (out_queued(c))
        return out_append(c, iov, n);
    return writev_all(c->fd, iov, n);
}

/* Send a response made of the given pieces, compressed as q would for a remote peer. */
static int send_pieces(struct wconn *c, struct iovec *iov, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if ((!c->local || opt.compress_all) && c->cap >= 1 && total >= KZIP_MIN_LEN && total <= INT32_MAX) {
        uint8_t *m = malloc(total), *z = malloc(total / 2);
        size_t o = 0, zl = 0;
        if (m && z) {
            for (int i = 0; i < n; i++) {
                memcpy(m + o, iov[i].iov_base, iov[i].iov_len);
                o += iov[i].iov_len;
            }
            zl = kzip_compress(m, total, z);
        }
        int rc = 0;
        if (zl) {
            struct iovec zi = {z, zl};
            rc = conn_writev(c, &zi, 1);
        }
        free(m);
        free(z);
        if (zl)
            return rc;
    }
    return conn_writev(c, iov, n);
}

static int send_rows(struct wconn *c, int64_t k)
{
    uint8_t head[TBL2_HEAD_LEN];
    size_t total = tbl2_head(&tbl2, k, head);
    struct iovec iov[2] = {{head, sizeof head}, {tbl2.col, total - sizeof head}};
    return send_pieces(c, iov, 2);
}

static int send_k(struct wconn *c, K x)
{
    size_t len;
    uint8_t *m = x ? kcodec_encode_msg(x, KIPC_RESPONSE, &len) : NULL;
    k_free(x);
    if (!m)
        return -1;
    struct iovec iov = {m, len};
    int rc = send_pieces(c, &iov, 1);
    free(m);
    return rc;
}

static K k_long(int64_t v)
{
    K x = k_atom(-KT_LONG);
    if (x)
        x->j = v;
    return x;
}


static int serve_buffered(struct wconn *c);
static int serve(struct wconn *c, const uint8_t *msg, size_t len);
static void conn_free(struct wconn *c);

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

static struct reply unsupported(const char *what)
{
    char msg[128];
    snprintf(msg, sizeof msg, "qworker: unsupported %s", what);
    return (struct reply){.k = k_err(msg)};
}

/* Any message, compressed as q compresses every type for a remote peer. */
static int send_msg(struct wconn *c, K x, int type)
{
    size_t len;
    uint8_t *m = x ? kcodec_encode_msg(x, type, &len) : NULL;
    k_free(x);
    if (!m)
        return -1;
    struct iovec iov = {m, len};
    int rc = send_pieces(c, &iov, 1);
    free(m);
    return rc;
}

/* "text N": a string of N bytes, "qgate 0 qgate 1 ...", which compresses well. */
static K k_text(long long n)
{
    K t = k_vec(KT_CHAR, n);
    for (long long i = 0, o = 0; t && o < n; i++) {
        char w[32];
        int k = snprintf(w, sizeof w, "qgate %lld ", i);
        for (int j = 0; j < k && o < n; j++)
            kC(t)[o++] = w[j];
    }
    return t;
}

/* The value V of "publish N V" and "callvalue V": guid (an atom), timestamp, timespan, or
 * text N; NULL if it names none. */
static K value_named(const char *v)
{
    long long n;
    char tail;
    K x = NULL;
    if (!strcmp(v, "guid") && (x = k_atom(-KT_GUID)))
        memset(x->u, 0x5a, sizeof x->u);
    else if (!strcmp(v, "timestamp") && (x = k_atom(-KT_TIMESTAMP)))
        x->j = 818035200000000000LL; /* 2025.12.04D00:00:00 */
    else if (!strcmp(v, "timespan") && (x = k_atom(-KT_TIMESPAN)))
        x->j = 3600000000000LL;
    else if (sscanf(v, "text %lld%c", &n, &tail) == 1 && n >= 0 && n <= (1LL << 30))
        x = k_text(n);
    return x;
}

/* The next flood message into out: an async char vector of c->flood bytes. */
static int flood_fill(struct wconn *c)
{
    size_t n = c->flood, total = 8 + 6 + n;
    uint8_t hd[14];
    kipc_hdr_write(hd, KIPC_ASYNC, 0, total);
    hd[8] = KT_CHAR;
    hd[9] = 0;
    qg_st32(hd + 10, (uint32_t)n);
    struct iovec iov = {hd, sizeof hd};
    if (out_append(c, &iov, 1))
        return -1;
    if (c->out_len + n > c->out_cap) {
        uint8_t *p = realloc(c->out, c->out_len + n);
        if (!p)
            return -1;
        c->out = p;
        c->out_cap = c->out_len + n;
    }
    for (size_t i = 0; i < n; i++) /* "flood 0 flood 1 ..." would cost more: a pattern will do */
        c->out[c->out_len + i] = (uint8_t)('a' + (c->flood_msgs + i) % 26);
    c->out_len += n;
    c->flood_msgs++;
    return 0;
}

/* c is writable: write what out holds, refilled while a flood runs, up to budget bytes or
 * until the socket is full. -1 if c must close. */
static int on_writable(struct wconn *c, size_t budget)
{
    size_t done = 0;
    while (done < budget) {
        if (c->out_off == c->out_len) {
            c->out_off = c->out_len = 0;
            if (!c->flood)
                break;
            if (flood_fill(c))
                return -1;
        }
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        c->out_off += (size_t)w;
        c->out_bytes += (uint64_t)w;
        done += (size_t)w;
    }
    if (c->out_off == c->out_len && !c->flood && c->out_cap > (1u << 20)) { /* done: give it back */
        free(c->out);
        c->out = NULL;
        c->out_off = c->out_len = c->out_cap = 0;
    }
    return 0;
}

/* The next message on c (malloc'd, whole; hd its header), from what was read already and then
 * the socket, waiting for it. NULL if the connection failed or sent a bad header. */
static uint8_t *next_blocking(struct wconn *c, struct kipc_hdr *hd)
{
    uint8_t h[8];
    size_t avail = c->in.len - c->pos, take = QG_MIN(avail, sizeof h);
    const char *why;
    memcpy(h, c->in.p + c->pos, take);
    c->pos += take;
    if ((take < sizeof h && net_read_all(c->fd, h + take, sizeof h - take)) ||
        kipc_hdr_parse(h, 8, MAX_MESSAGE, hd, &why) != QG_OK)
        return NULL;
    uint8_t *m = malloc(hd->len);
    if (!m)
        return NULL;
    memcpy(m, h, 8);
    avail = c->in.len - c->pos;
    take = (size_t)QG_MIN((uint64_t)avail, hd->len - 8);
    memcpy(m + 8, c->in.p + c->pos, take);
    c->pos += take;
    if (take < hd->len - 8 && net_read_all(c->fd, m + 8 + take, hd->len - 8 - take)) {
        free(m);
        return NULL;
    }
    return m;
}

/* "notify N TEXT": N async messages TEXT to the caller, then N; "publish N V": the same with
 * value V (value_named). "callback TEXT": a sync request TEXT to the caller, whose answer is the
 * reply (q serves it with .z.w); "callvalue V": the same with value V. */
static struct reply eval_peer(struct wconn *c, const char *s, size_t n)
{
    K call = NULL;
    if (n > 10 && !memcmp(s, "callvalue ", 10) && !(call = value_named(s + 10)))
        return (struct reply){.k = k_err("callvalue: guid, timestamp, timespan or text N")};
    int calls = 1; /* "twocalls TEXT": two, the second sent before the first is answered (no q does
                    * that: a broken worker, for tests); the second's answer is the reply */
    size_t at = n > 9 && !memcmp(s, "callback ", 9) ? 9 : n > 9 && !memcmp(s, "twocalls ", 9) ? (calls = 2, 9) : 0;
    if (!call && at) {
        char text[512];
        size_t tn = 0;
        for (size_t i = at; i < n && tn < sizeof text - 8; i++) /* %p: this worker's port */
            if (s[i] == '%' && i + 1 < n && s[i + 1] == 'p')
                tn += (size_t)snprintf(text + tn, sizeof text - tn, "%d", my_port), i++;
            else
                text[tn++] = s[i];
        call = k_str(text, tn);
    }
    if (call) {
        logf_(c, "calling back"); /* (a test's evidence: which worker called back) */
        if (calls == 2) {
            K again = k_str(kC(call), (size_t)call->n);
            if (!again || send_msg(c, again, KIPC_SYNC)) {
                k_free(call);
                return (struct reply){.k = k_err("close")};
            }
        }
        if (send_msg(c, call, KIPC_SYNC))
            return (struct reply){.k = k_err("close")};
        for (;;) { /* like q in h x: wait on this handle for the response, and run what else
                    * comes on it meanwhile (nested: a sync one answered before ours comes), in
                    * the order it came: what was read already first */
            struct kipc_hdr hd;
            uint8_t *m = next_blocking(c, &hd);
            if (!m)
                return (struct reply){.k = k_err("close")};
            if (hd.type != KIPC_RESPONSE) {
                logf_(c, "nested %s message, while in a callback", kipc_type_name(hd.type));
                int rc = serve(c, m, hd.len);
                free(m);
                if (rc)
                    return (struct reply){.k = k_err("close")};
                continue;
            }
            K x = NULL;
            struct kerr e;
            qg_status st = kcodec_decode(m + 8, hd.len - 8, hd.le, NULL, &x, &e);
            free(m);
            if (hd.type == KIPC_RESPONSE && st == QG_OK && x->t == KT_ERROR)
                logf_(c, "callback answered with an error: '%s", x->s); /* (a test's evidence) */
            if (hd.type == KIPC_RESPONSE && --calls == 0)
                return (struct reply){.k = st == QG_OK ? x : k_err("badmsg")};
            k_free(x);
        }
    }
    int count = 0, off = 0;
    if (sscanf(s, "publish %d %n", &count, &off) == 1 && off > 0 && count >= 0 && count <= 100000) {
        for (int i = 0; i < count; i++) {
            K x = value_named(s + off);
            if (!x)
                return (struct reply){.k = k_err("publish: guid, timestamp, timespan or text N")};
            if (send_msg(c, x, KIPC_ASYNC))
                break;
        }
        return (struct reply){.k = k_long(count)};
    }
    if (sscanf(s, "notify %d %n", &count, &off) == 1 && off > 0 && count >= 0 && count <= 100000) {
        for (int i = 0; i < count; i++)
            if (send_msg(c, k_str(s + off, n - (size_t)off), KIPC_ASYNC))
                break;
        return (struct reply){.k = k_long(count)};
    }
    return (struct reply){0};
}

/* Globals, as q keeps them: one set per process, seen by every connection. "NAME:TEXT" sets
 * NAME (answers TEXT), "NAME" answers it or the q error 'NAME, "delete NAME from `." removes
 * it (a session's reset query). Text values only: enough to show where state lives. */
#define NGLOBALS 64
static struct {
    char name[32];
    char *val;
} globals[NGLOBALS];

static int is_name(const char *s, size_t n)
{
    if (n == 0 || n >= sizeof globals[0].name || !isalpha((unsigned char)s[0]))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)s[i]))
            return 0;
    return 1;
}

static int global_find(const char *s, size_t n)
{
    for (int i = 0; i < NGLOBALS; i++)
        if (globals[i].val && strlen(globals[i].name) == n && !memcmp(globals[i].name, s, n))
            return i;
    return -1;
}

static struct reply eval_global(struct wconn *c, const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    if (colon && is_name(s, (size_t)(colon - s))) {
        size_t nl = (size_t)(colon - s);
        int i = global_find(s, nl);
        for (int k = 0; i < 0 && k < NGLOBALS; k++)
            if (!globals[k].val)
                i = k;
        if (i < 0)
            return (struct reply){.k = k_err("wsfull")};
        free(globals[i].val);
        memcpy(globals[i].name, s, nl);
        globals[i].name[nl] = 0;
        globals[i].val = strndup(colon + 1, n - nl - 1);
        logf_(c, "set %s", globals[i].name);
        return (struct reply){.k = k_str(colon + 1, n - nl - 1)};
    }
    if (is_name(s, n)) {
        int i = global_find(s, n);
        if (i >= 0)
            return (struct reply){.k = k_str(globals[i].val, strlen(globals[i].val))};
        char e[40];
        snprintf(e, sizeof e, "%.*s", (int)n, s);
        return (struct reply){.k = k_err(e)};
    }
    if (n > 7 + 8 && !memcmp(s, "delete ", 7) && !memcmp(s + n - 8, " from `.", 8) && is_name(s + 7, n - 15)) {
        int i = global_find(s + 7, n - 15);
        if (i >= 0) {
            logf_(c, "deleted %s", globals[i].name);
            free(globals[i].val);
            globals[i].val = NULL;
        }
        return (struct reply){.k = k_sym(".")};
    }
    return (struct reply){0};
}

/* The plain char vector queries tests use: "", rows N, sleep MS, echo X, err X, notify N X,
 * callback X, later MS X (answers MS at once, then publishes X async MS ms later), tell X
 * (publishes X async on every other connection at once, answers how many), hold TAG
 * (answers TAG when "release TAG" comes, on any connection; that answers how many it ended),
 * hangup TAG (closes the connections holding TAG, unanswered; answers how many: a q lost
 * mid-request that is back at once, listening, for a test that must not race a restart), crash N
 * (half of text N's reply, then the process exits). */
static struct reply eval_text(struct wconn *c, const char *s, size_t n)
{
    char buf[64];
    if (n == 0)
        return (struct reply){.k = k_prim(KT_UNARY, 0)};
    if ((n > 7 && !memcmp(s, "notify ", 7)) || (n > 9 && !memcmp(s, "callback ", 9)) || (n > 9 && !memcmp(s, "twocalls ", 9)) ||
        (n > 8 && !memcmp(s, "publish ", 8)) || (n > 10 && !memcmp(s, "callvalue ", 10))) {
        char *z = strndup(s, n); /* NUL-terminated for sscanf */
        struct reply r = z ? eval_peer(c, z, n) : (struct reply){0};
        free(z);
        if (r.k)
            return r;
    }
    if (n > 5 && !memcmp(s, "echo ", 5)) {
        logf_(c, "echo %.*s", (int)QG_MIN(n - 5, (size_t)60), s + 5);
        return (struct reply){.k = k_str(s + 5, n - 5)};
    }
    if (n > 7 && !memcmp(s, "fickle ", 7)) { /* X at once, but every Kth one MS ms late (--fickle) */
        fickle_seen++;
        if (opt.fickle_every && fickle_seen >= opt.fickle_first && (fickle_seen - opt.fickle_first) % opt.fickle_every == 0) {
            logf_(c, "fickle #%ld: sleep %d ms", fickle_seen, opt.fickle_ms);
            sleep_ms(opt.fickle_ms);
        }
        return (struct reply){.k = k_str(s + 7, n - 7)};
    }
    if (n == 4 && !memcmp(s, "stop", 4)) { /* ends this connection's flood: answers its messages */
        if (c->flood)
            logf_(c, "flood stopped: %llu messages of %zu bytes, %llu bytes written", (unsigned long long)c->flood_msgs,
                  c->flood, (unsigned long long)c->out_bytes);
        c->flood = 0;
        return (struct reply){.k = k_long((int64_t)c->flood_msgs)};
    }
    if (n > 5 && n < sizeof buf && !memcmp(s, "hold ", 5)) {
        free(c->hold);
        c->hold = strndup(s + 5, n - 5);
        logf_(c, "hold %s", c->hold);
        return (struct reply){.held = 1};
    }
    if (n > 5 && !memcmp(s, "tell ", 5)) { /* publishes X async on every other connection now, then
                                            * answers how many (a publish a test makes happen
                                            * at a moment of its choosing, not a timer's) */
        long told = 0;
        for (int i = 0; i < nconns; i++) {
            struct wconn *h = &conns[i];
            if (h == c || h->fd < 0 || !h->ready)
                continue;
            logf_(h, "tell: publishing \"%.*s\"", (int)QG_MIN(n - 5, (size_t)60), s + 5);
            send_msg(h, k_str(s + 5, n - 5), KIPC_ASYNC);
            told++;
        }
        return (struct reply){.k = k_long(told)};
    }
    if (n > 8 && n < sizeof buf && !memcmp(s, "release ", 8)) { /* answers how many it ended */
        char *tag = strndup(s + 8, n - 8);
        long ended = 0;
        for (int i = 0; tag && i < nconns; i++) {
            struct wconn *h = &conns[i];
            if (h->fd < 0 || !h->hold || strcmp(h->hold, tag))
                continue;
            logf_(h, "released %s", tag);
            free(h->hold);
            h->hold = NULL;
            send_msg(h, k_str(tag, strlen(tag)), KIPC_RESPONSE); /* its reply: the tag */
            ended++;
            if (serve_buffered(h)) /* what it sent meanwhile */
                conn_free(h);
        }
        free(tag);
        return (struct reply){.k = k_long(ended)};
    }
    if (n > 7 && n < sizeof buf && !memcmp(s, "hangup ", 7)) {
        char *tag = strndup(s + 7, n - 7);
        long closed = 0;
        for (int i = 0; tag && i < nconns; i++) {
            struct wconn *h = &conns[i];
            if (h == c || h->fd < 0 || !h->hold || strcmp(h->hold, tag))
                continue;
            logf_(h, "hangup %s: closing, unanswered", tag);
            conn_free(h);
            closed++;
        }
        free(tag);
        return (struct reply){.k = k_long(closed)};
    }
    int later_ms = 0, later_off = 0;
    if (n > 6 && !memcmp(s, "later ", 6)) {
        /* answer now; publish X on this connection MS ms later, while idle (a timer's pub) */
        char *z = strndup(s, n); /* (X may be long: NUL-terminated for sscanf) */
        if (z && sscanf(z, "later %d %n", &later_ms, &later_off) == 1 && later_off > 0 && later_ms >= 0) {
            free(c->later);
            c->later = strdup(z + later_off);
            c->later_at = mono_ms() + later_ms;
            free(z);
            return (struct reply){.k = k_long(later_ms)};
        }
        free(z);
    }
    if (n > 4 && !memcmp(s, "err ", 4)) {
        char *e = strndup(s + 4, n - 4);
        struct reply r = {.k = k_err(e ? e : "err")};
        free(e);
        return r;
    }
    if (n < sizeof buf) {
        memcpy(buf, s, n);
        buf[n] = 0;
        long long v;
        char tail;
        if (sscanf(buf, "rows %lld%c", &v, &tail) == 1 && v >= 0)
            return (struct reply){.rows = v};
        if (sscanf(buf, "text %lld%c", &v, &tail) == 1 && v >= 0 && v <= (1LL << 30)) {
            if (v >= 1000000) /* (a big one: a test's evidence that it runs) */
                logf_(c, "text %lld", v);
            return (struct reply){.k = k_text(v)};
        }
        if (sscanf(buf, "crash %lld%c", &v, &tail) == 1 && v >= 2 && v <= (1LL << 30) && !out_queued(c)) {
            /* a q that dies in the middle of its reply (killed while it writes): the reply "text
             * N" would be, uncompressed, its first half written, then the process exits */
            size_t len = 0;
            K t = k_text(v);
            uint8_t *m = t ? kcodec_encode_msg(t, KIPC_RESPONSE, &len) : NULL;
            k_free(t);
            struct iovec iov = {m, len / 2};
            logf_(c, "crash %lld: writing %zu of the reply's %zu bytes, then exiting", v, len / 2, len);
            if (m)
                writev_all(c->fd, &iov, 1);
            _exit(3);
        }
        if (sscanf(buf, "flood %lld%c", &v, &tail) == 1 && v >= 0 && v <= (1LL << 30)) {
            /* answers SIZE, then publishes SIZE-byte char vectors as fast as the socket takes them */
            logf_(c, "flood %lld: publishing until \"stop\" or the close", v);
            c->flood = (size_t)v;
            c->flood_msgs = c->out_bytes = 0;
            return (struct reply){.k = k_long(v)};
        }
        if (sscanf(buf, "sleep %lld%c", &v, &tail) == 1 && v >= 0 && v <= 3600000) {
            logf_(c, "sleep %lld ms", v);
            sleep_ms((int)v);
            return (struct reply){.k = k_long(v)};
        }
    }
    struct reply gr = eval_global(c, s, n);
    if (gr.k)
        return gr;
    snprintf(buf, sizeof buf, "query \"%.*s\"", (int)(n > 40 ? 40 : n), s);
    return unsupported(buf);
}

/* Apply a function (a lambda, or its text as a string) to arg, as value (f; arg) does. */
static struct reply apply(struct wconn *c, K f, K arg)
{
    const char *src;
    size_t len;
    if (f->t == KT_LAMBDA) {
        src = kC(kK(f)[0]);
        len = (size_t)kK(f)[0]->n;
    } else if (f->t == KT_CHAR) {
        src = kC(f);
        len = (size_t)f->n;
    } else {
        return unsupported("function");
    }
    const struct qmode *m = qmode_by_fn(src, len);
    if (!m)
        return unsupported("lambda");
    logf_(c, "%s", m->name);
    if (m->throws) {
        if (arg->t == -KT_SYM)
            return (struct reply){.k = k_err(arg->s)};
        if (arg->t == KT_CHAR) {
            char *e = strndup(kC(arg), (size_t)arg->n);
            struct reply r = {.k = k_err(e ? e : "type")};
            free(e);
            return r;
        }
        return (struct reply){.k = k_err("type")};
    }
    if (m->exit_per_mille && (int)(xorshift64(&opt.rng) % 1000) < m->exit_per_mille) {
        logf_(c, "killer: exit 0");
        exit(0);
    }
    if (m->sleep_ms)
        sleep_ms(m->sleep_ms);
    return (struct reply){.rows = m->rows};
}

static struct reply eval(struct wconn *c, K x)
{
    if (x->t == KT_CHAR)
        return eval_text(c, kC(x), (size_t)x->n);
    if (x->t == KT_LIST && x->n == 2) {
        K f = kK(x)[0], a = kK(x)[1];
        if (kname_eq(f, ".gateway.exec")) {
            if (a->t == KT_LIST && a->n == 2)
                return apply(c, kK(a)[0], kK(a)[1]);
            return unsupported(".gateway.exec argument");
        }
        return apply(c, f, a);
    }
    char what[48];
    snprintf(what, sizeof what, "message of type %d", x->t);
    return unsupported(what);
}

/* The worker side of q/30gw.q: (.gw.run; id; query) arrives async; the query is run under
 * protected evaluation and (`.gateway.reply; id; (isError; result)) goes back async. */
static int is_gw_run(K x)
{
    if (x->t != KT_LIST || x->n != 3 || kK(x)[0]->t != KT_LAMBDA || kK(x)[1]->t != -KT_LONG)
        return 0;
    K src = kK(kK(x)[0])[0];
    return (size_t)src->n == strlen(QMODE_GW_RUN) && !memcmp(kC(src), QMODE_GW_RUN, (size_t)src->n);
}

static int post_gw_reply(struct wconn *c, K x)
{
    int64_t id = kK(x)[1]->j;
    K q = kK(x)[2];
    struct reply r = q->t == KT_LIST && q->n == 2 ? apply(c, kK(q)[0], kK(q)[1]) : eval(c, q);
    /* (`.gateway.reply; id; (isError; result)) */
    static const char name[] = ".gateway.reply";
    uint8_t pre[8 + 6 + 1 + sizeof name + 9 + 6 + 2];
    uint8_t *p = pre + 8;
    memcpy(p, "\x00\x00\x03\x00\x00\x00", 6), p += 6;
    *p++ = (uint8_t)-KT_SYM;
    memcpy(p, name, sizeof name), p += sizeof name;
    *p++ = (uint8_t)-KT_LONG;
    qg_st64(p, (uint64_t)id), p += 8;
    memcpy(p, "\x00\x00\x02\x00\x00\x00", 6), p += 6;
    *p++ = (uint8_t)-KT_BOOL;
    int rc;
    if (!r.k) { /* a slice of tbl2: the table bytes go out without copying */
        *p++ = 0;
        uint8_t head[TBL2_HEAD_LEN];
        size_t total = tbl2_head(&tbl2, r.rows, head);
        size_t body = total - TBL2_HEAD_LEN;
        kipc_hdr_write(pre, KIPC_ASYNC, 0, sizeof pre + (TBL2_HEAD_LEN - 8) + body);
        struct iovec iov[3] = {{pre, sizeof pre}, {head + 8, TBL2_HEAD_LEN - 8}, {tbl2.col, body}};
        return send_pieces(c, iov, 3);
    }
    int err = r.k->t == KT_ERROR;
    *p++ = (uint8_t)err;
    K v = err ? k_str(r.k->s, strlen(r.k->s)) : r.k; /* the error's text, as a string */
    if (err)
        k_free(r.k);
    size_t vlen = v ? kcodec_size(v) : 0;
    uint8_t *m = v ? malloc(sizeof pre + vlen) : NULL;
    if (!m) {
        k_free(v);
        return -1;
    }
    memcpy(m, pre, sizeof pre);
    kcodec_write(v, m + sizeof pre, 1);
    kipc_hdr_write(m, KIPC_ASYNC, 0, sizeof pre + vlen);
    struct iovec iov = {m, sizeof pre + vlen};
    rc = send_pieces(c, &iov, 1);
    free(m);
    k_free(v);
    return rc;
}

/* Serve one whole message. Returns -1 if the connection must close. */
static int serve(struct wconn *c, const uint8_t *msg, size_t len)
{
    struct kipc_hdr h;
    const char *why = "";
    if (kipc_hdr_parse(msg, len, MAX_MESSAGE, &h, &why) != QG_OK)
        return -1;
    uint8_t *plain = NULL;
    if (h.compressed) {
        size_t n = kzip_uncompressed_len(msg, len);
        if (n < 9 || n > MAX_MESSAGE || !(plain = malloc(n)) ||
            kzip_decompress(msg, len, plain, n, &why) != QG_OK) {
            logf_(c, "badmsg: %s", why);
            free(plain);
            return -1;
        }
        msg = plain;
        len = n;
    }
    K x;
    struct kerr e = {0};
    if (kcodec_decode(msg + 8, len - 8, h.le, NULL, &x, &e) != QG_OK) {
        logf_(c, "badmsg: %s at byte %zu; closing, as q does", e.why, e.off + 8);
        free(plain);
        return -1;
    }
    free(plain);
    if (is_gw_run(x)) {
        int rc = post_gw_reply(c, x);
        k_free(x);
        return rc;
    }
    if (h.type != KIPC_SYNC)
        logf_(c, "%s message", kipc_type_name(h.type));
    struct reply r = eval(c, x);
    k_free(x);
    if (r.held)
        return 0; /* answered by "release TAG" */
    if (h.type != KIPC_SYNC) {
        k_free(r.k);
        return 0;
    }
    sync_seen++;
    if (opt.defer_every && sync_seen % opt.defer_every == 0) { /* -30!(::): answered later */
        if (c->ndef == c->def_cap) {
            int cap = c->def_cap ? c->def_cap * 2 : 4;
            struct deferred *d = realloc(c->def, (size_t)cap * sizeof *d);
            if (!d) {
                k_free(r.k);
                return -1;
            }
            c->def = d;
            c->def_cap = cap;
        }
        c->def[c->ndef++] = (struct deferred){.due = mono_ms() + opt.defer_ms, .seq = sync_seen, .r = r};
        logf_(c, "defer: sync request #%ld answered in %d ms", sync_seen, opt.defer_ms);
        return 0;
    }
    return r.k ? send_k(c, r.k) : send_rows(c, r.rows);
}

/* Send the deferred replies of c that are due (-30!(h;0b;x)). -1 if c must close. */
static int send_deferred(struct wconn *c, int64_t now)
{
    int k = 0, rc = 0;
    for (; k < c->ndef && c->def[k].due <= now; k++) {
        struct reply r = c->def[k].r;
        logf_(c, "deferred reply #%ld sent", c->def[k].seq);
        if (rc == 0)
            rc = r.k ? send_k(c, r.k) : send_rows(c, r.rows);
        else
            k_free(r.k);
    }
    memmove(c->def, c->def + k, (size_t)(c->ndef - k) * sizeof *c->def);
    c->ndef -= k;
    return rc;
}

static void conn_free(struct wconn *c)
{
    close(c->fd);
    c->fd = -1;
    free(c->in.p);
    c->in = (struct msgbuf){0};
    free(c->later);
    c->later = NULL;
    free(c->hold);
    c->hold = NULL;
    for (int k = 0; k < c->ndef; k++)
        k_free(c->def[k].r.k);
    free(c->def);
    c->def = NULL;
    c->ndef = c->def_cap = 0;
    free(c->out);
    c->out = NULL;
    c->out_off = c->out_len = c->out_cap = 0;
    c->flood = 0;
}

/* Read what is there and serve every whole message. -1 closes. */
/* --fault: what a broken worker does instead of answering. -1 closes the connection. */
static int fault_reply(struct wconn *c)
{
    if (!strcmp(opt.fault, "hang")) {
        logf_(c, "fault hang: not answering");
        return 0;
    }
    if (!strcmp(opt.fault, "garbage")) {
        uint8_t junk[64];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)(xorshift64(&opt.rng) | 0x80); /* byte 0 never a valid byte order */
        logf_(c, "fault garbage: answering with 64 random bytes");
        return net_write_all(c->fd, junk, sizeof junk);
    }
    if (!strcmp(opt.fault, "badzip")) { /* 3000 bytes compressed, the stream's first item made a
                                         * back-reference: to nothing */
        char t[3000];
        memset(t, 'z', sizeof t);
        K x = k_str(t, sizeof t);
        size_t len = 0;
        uint8_t *m = x ? kcodec_encode_msg(x, KIPC_RESPONSE, &len) : NULL, *z = m ? malloc(len) : NULL;
        k_free(x);
        size_t zl = z ? kzip_compress(m, len, z) : 0;
        free(m);
        if (!zl) {
            free(z);
            return -1;
        }
        z[12] |= 1;
        logf_(c, "fault badzip: answering with a compressed message that cannot be decompressed");
        int rc = net_write_all(c->fd, z, zl);
        free(z);
        return rc;
    }
    if (!strcmp(opt.fault, "bighdr")) {
        uint8_t h[8];
        kipc_hdr_write(h, KIPC_RESPONSE, 0, 2000000000u);
        logf_(c, "fault bighdr: a header claiming 2,000,000,000 bytes, then nothing");
        return net_write_all(c->fd, h, sizeof h);
    }
    return -1;
}

static int on_readable(struct wconn *c)
{
    if (msgbuf_room(&c->in))
        return -1;
    ssize_t r = msgbuf_read(&c->in, c->fd);
    if (r == 0)
        return -1;
    if (r < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    size_t off = 0;
    if (!c->ready) {
        struct kipc_hs hs;
        qg_status st = kipc_hs_parse(c->in.p, c->in.len, KIPC_HS_MAX_DEFAULT, &hs);
        if (st == QG_AGAIN)
            return 0;
        if (st != QG_OK)
            return -1;
        if (opt.fault && !strcmp(opt.fault, "hsclose")) {
            logf_(c, "fault hsclose: closing during the handshake");
            return -1;
        }
        if (opt.user) {
            size_t ul = strlen(opt.user);
            size_t cl = hs.pass_len ? hs.user_len + 1 + hs.pass_len : hs.user_len;
            if (cl != ul || memcmp(hs.user, opt.user, ul)) {
                logf_(c, "access denied for '%.*s'", (int)hs.user_len, hs.user);
                return -1;
            }
        }
        c->cap = kipc_cap_negotiate(hs.cap, KIPC_CAP_MAX);
        if (net_write_all(c->fd, &c->cap, 1))
            return -1;
        if (opt.fault && !strcmp(opt.fault, "upclose")) {
            logf_(c, "fault upclose: closing after the handshake");
            return -1;
        }
        c->ready = 1;
        off = hs.len;
    }
    msgbuf_consume(&c->in, off);
    return serve_buffered(c);
}

/* Serve the whole messages in c's buffer, up to a held one. -1 if c must close. */
static int serve_buffered(struct wconn *c)
{
    while (!c->hold) {
        struct kipc_hdr h;
        const char *why;
        size_t off = c->pos;
        qg_status st = msgbuf_next(&c->in, off, MAX_MESSAGE, &h, &why);
        if (st == QG_ERR) {
            logf_(c, "badmsg: %s", why);
            return -1;
        }
        if (st == QG_ENOMEM)
            return -1;
        if (st == QG_AGAIN)
            break;
        int twice = opt.fault && !strcmp(opt.fault, "twice");
        if (opt.fault && !twice && fault_reply(c))
            return -1;
        c->pos = off + (size_t)h.len; /* (taken before it is served: a callback's wait reads on from here) */
        if ((!opt.fault || twice) && serve(c, c->in.p + off, (size_t)h.len))
            return -1;
        if (twice && h.type == KIPC_SYNC) { /* a second response, right behind the first */
            logf_(c, "fault twice: a second response");
            if (send_msg(c, k_str("qworker: a second response", 26), KIPC_RESPONSE))
                return -1;
        }
    }
    msgbuf_consume(&c->in, c->pos);
    c->pos = 0;
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: qworker -p [host:]port [--rows N] [--seed S] [--user u:p] [--quiet] [--no-uds]\n"
            "               [--uds-path PATH] [--uds-mute] [--compress]\n"
            "               [--fault hang|garbage|badzip|bighdr|hsclose|upclose|twice]\n"
            "               [--defer N:MS]\n"
            "               [--fickle K:MS[:FIRST]]\n"
            "  a stand-in for q/worker.q: holds tbl2 (N random 8-10 letter strings, default\n"
            "  10000000) and answers q/client.q's requests, plus the test queries\n"
            "  \"rows N\", \"sleep MS\", \"echo X\", \"err X\", \"notify N X\" (N async messages X\n"
            "  back, then N), globals (\"a:X\", \"a\", \"delete a from `.\", one set per process),\n"
            "  \"callback X\" (sync request X back, %%p in X its port; its answer is the reply; what\n"
            "  else comes on that connection meanwhile runs nested, as in q's h x), \"twocalls X\"\n"
            "  (two, the second sent before the first is answered, as no q does: a broken worker;\n"
            "  the second's answer is the reply),\n"
            "  \"publish N V\" and \"callvalue V\" (the same with value V: guid, timestamp, timespan,\n"
            "  text N), every message over 2000 bytes compressed for a remote peer as q does,\n"
            "  \"text N\" (a string of N bytes, \"qgate 0 qgate 1 ...\", which compresses well).\n"
            "  \"crash N\" writes the first half of \"text N\"'s reply, uncompressed, and exits (a q\n"
            "  that dies in the middle of a reply).\n"
            "  Port 0 picks a free port; the\n"
            "  first line on stdout is \"qworker listening on HOST:PORT\". Replies over 2000 bytes\n"
            "  are compressed as q does for remote peers; --compress treats every peer as remote.\n"
            "  --user u:p closes connections with other credentials, as q -U does.\n"
            "  --fault makes it a broken worker for tests: hang (never answers), garbage (answers\n"
            "  with random bytes), badzip (answers with a compressed message that cannot be\n"
            "  decompressed), bighdr (a header claiming 2 GB, then nothing), hsclose (closes\n"
            "  during the handshake), upclose (completes the handshake, then closes: a flapping q),\n"
            "  twice (answers, then sends a second response right behind).\n"
            "  It listens on q's abstract Unix socket for its port too (@/tmp/kx.PORT, as q -p\n"
            "  does) unless --no-uds; --uds-path listens on a filesystem socket PATH instead;\n"
            "  --uds-mute closes each Unix-socket connection at once (a socket that does not\n"
            "  answer q's handshake).\n"
            "  --defer N:MS: every Nth sync request the process serves (counted over all its\n"
            "  connections, deterministically: the Nth, 2Nth, ...; \"hold\" not counted) is answered\n"
            "  MS ms later, as .z.pg does with -30!(::) and -30!(h;0b;x): meanwhile the worker goes\n"
            "  on reading and answering every other message, on that connection (so a later request\n"
            "  there is answered first) and on the others. Each deferral and each deferred reply is\n"
            "  logged (\"defer: sync request #K ...\", \"deferred reply #K sent\").\n"
            "  \"fickle X\" answers X; with --fickle K:MS every Kth \"fickle ...\" query of the process\n"
            "  (counted over all connections; the FIRSTth, default K, then every Kth after) sleeps\n"
            "  MS ms first (the worker busy, as q is), the others answer at once: the same bytes,\n"
            "  usually fast, sometimes slow.\n"
            "  \"flood SIZE\" answers SIZE, then publishes async char vectors of SIZE bytes on that\n"
            "  connection as fast as its socket takes them (written when writable, never blocking\n"
            "  the worker), until the connection closes or \"stop\" arrives on it (\"stop\" answers\n"
            "  how many it queued; its reply follows the flood's last message).\n");
    exit(2);
}

/* "N:MS" (N >= 1, 0 <= MS <= 3600000): 0, or -1 */
static int every_ms(const char *s, long *every, int *ms)
{
    const char *colon = strchr(s, ':');
    char nb[32];
    long n, m;
    if (!colon || (size_t)(colon - s) >= sizeof nb)
        return -1;
    memcpy(nb, s, (size_t)(colon - s));
    nb[colon - s] = 0;
    if (arg_long(nb, &n) || n < 1 || arg_long(colon + 1, &m) || m > 3600000)
        return -1;
    *every = n;
    *ms = (int)m;
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen_at = NULL;
    int64_t rows = 10000000;
    uint64_t seed = 42;
    int uds = 1, uds_mute = 0;
    const char *uds_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-p") && i + 1 < argc)
            listen_at = argv[++i];
        else if (!strcmp(a, "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(a, "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--user") && i + 1 < argc)
            opt.user = argv[++i];
        else if (!strcmp(a, "--quiet"))
            opt.quiet = 1;
        else if (!strcmp(a, "--compress"))
            opt.compress_all = 1;
        else if (!strcmp(a, "--fault") && i + 1 < argc)
            opt.fault = argv[++i];
        else if (!strcmp(a, "--no-uds"))
            uds = 0;
        else if (!strcmp(a, "--uds-path") && i + 1 < argc)
            uds_path = argv[++i];
        else if (!strcmp(a, "--uds-mute"))
            uds_mute = 1;
        else if (!strcmp(a, "--defer") && i + 1 < argc) {
            if (every_ms(argv[++i], &opt.defer_every, &opt.defer_ms))
                usage();
        } else if (!strcmp(a, "--fickle") && i + 1 < argc) {
            char spec[64];
            snprintf(spec, sizeof spec, "%s", argv[++i]);
            char *first = strchr(spec, ':') ? strchr(strchr(spec, ':') + 1, ':') : NULL;
            if (first)
                *first++ = 0;
            if (every_ms(spec, &opt.fickle_every, &opt.fickle_ms) ||
                (first && (arg_long(first, &opt.fickle_first) || opt.fickle_first < 1)))
                usage();
            if (!first)
                opt.fickle_first = opt.fickle_every;
        } else
            usage();
    }
    if (!listen_at || rows < 0 || rows > INT32_MAX)
        usage();
    char host[256];
    int port;
    if (net_parse_hostport(listen_at, "0.0.0.0", host, sizeof host, &port)) {
        fprintf(stderr, "qworker: bad address %s\n", listen_at);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    opt.rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20) ^ 0x9e3779b97f4a7c15ULL;
    int64_t t0 = mono_ns();
    if (tbl2_build(&tbl2, rows, seed)) {
        fprintf(stderr, "qworker: no memory for %lld rows\n", (long long)rows);
        return 1;
    }
    int64_t t1 = mono_ns();
    int bound;
    int lfd = net_listen_tcp(host, port, 512, NET_NONBLOCK, &bound);
    if (lfd < 0) {
        fprintf(stderr, "qworker: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
        return 1;
    }
    int ufd = !uds ? -2 : uds_path ? net_listen_uds_path(uds_path, 512, 1) : net_listen_uds(bound, 512, 1);
    if (uds && ufd < 0)
        fprintf(stderr, "qworker: no Unix socket (%s): %s\n", uds_path ? uds_path : "abstract", strerror(errno));
    my_port = bound;
    printf("qworker listening on %s:%d rows=%lld built_ms=%.0f%s\n", host, bound, (long long)rows,
           (double)(t1 - t0) / 1e6, ufd >= 0 ? " unix" : "");
    fflush(stdout);

    struct pollfd *pfd = NULL;
    int n = 0, cap = 0;
    for (;;) {
        if (cap < n + 2) {
            cap = cap ? cap * 2 : 64;
            conns = realloc(conns, (size_t)cap * sizeof *conns);
            pfd = realloc(pfd, (size_t)(cap + 2) * sizeof *pfd);
            if (!conns || !pfd)
                return 1;
        }
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = ufd >= 0 ? ufd : -1, .events = POLLIN};
        int64_t due = -1, now = mono_ms();
        for (int i = 0; i < n; i++) {
            struct wconn *c = &conns[i];
            pfd[i + 2] = (struct pollfd){.fd = c->fd,
                                         .events = (short)((c->hold ? 0 : POLLIN) | (out_queued(c) ? POLLOUT : 0))};
            if (c->later_at && (due < 0 || c->later_at - now < due))
                due = c->later_at > now ? c->later_at - now : 0;
            if (c->ndef && (due < 0 || c->def[0].due - now < due))
                due = c->def[0].due > now ? c->def[0].due - now : 0;
        }
        if (poll(pfd, (nfds_t)n + 2, (int)due) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        int polled = n;
        now = mono_ms();
        for (int i = 0; i < n; i++)
            if (conns[i].later_at && conns[i].later_at <= now) { /* published while idle */
                conns[i].later_at = 0;
                logf_(&conns[i], "later: publishing \"%s\"", conns[i].later);
                send_msg(&conns[i], k_str(conns[i].later, strlen(conns[i].later)), KIPC_ASYNC);
                free(conns[i].later);
                conns[i].later = NULL;
                free(conns[i].hold);
                conns[i].hold = NULL;
            }
        for (int i = 0; i < n; i++)
            if (conns[i].fd >= 0 && conns[i].ndef && conns[i].def[0].due <= now && send_deferred(&conns[i], now)) {
                logf_(&conns[i], "handle closed");
                conn_free(&conns[i]);
            }
        for (int l = 0; l < 2; l++) {
            if (!(pfd[l].revents & POLLIN))
                continue;
            int fd = accept4(pfd[l].fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0 || n + 1 >= cap) {
                if (fd >= 0)
                    close(fd);
                continue;
            }
            if (l == 1 && uds_mute) {
                close(fd);
                continue;
            }
            net_tune(fd);
            conns[n] = (struct wconn){.fd = fd, .local = net_peer_is_local(fd)};
            net_peer_name(fd, conns[n].peer, sizeof conns[n].peer);
            n++;
            nconns = n;
        }
        for (int i = 0; i < polled; i++) {
            short ev = pfd[i + 2].revents;
            if (!ev || conns[i].fd < 0)
                continue;
            /* the write budget per turn lets every other connection be served between */
            if (((ev & POLLOUT) && on_writable(&conns[i], 1u << 20)) || ((ev & ~POLLOUT) && on_readable(&conns[i]))) {
                logf_(&conns[i], "handle closed");
                conn_free(&conns[i]);
            }
        }
        int w = 0;
        for (int i = 0; i < n; i++)
            if (conns[i].fd >= 0)
                conns[w++] = conns[i];
        n = nconns = w;
    }
}

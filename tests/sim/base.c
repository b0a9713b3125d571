/* base.c: what every part of the simulation uses: its own memory, accounted apart from the
 * gateway's; the trace and the report of a violation; the PRNG (or a fuzzer's bytes) that
 * makes every choice; the q messages both fake sides write and parse. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "sim_int.h"

#define TRACE_N 600      /* events and gateway log lines kept for the report */
#define TRACE_LINE 200

/* ---- allocation accounting: what the simulation itself holds is not the gateway's -------- */

size_t sim_bytes;

void *sx_realloc(void *p, size_t old, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    sim_bytes = sim_bytes - (p ? (old ? old : 1) : 0) + (n ? n : 1);
    return q;
}

void sx_free(void *p, size_t n)
{
    if (p) {
        free(p);
        sim_bytes -= n ? n : 1;
    }
}

void sb_reserve(struct sbuf *b, size_t need)
{
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->p = sx_realloc(b->p, b->p ? b->cap : 0, cap);
    b->cap = cap;
}

void sb_add(struct sbuf *b, const void *p, size_t n)
{
    if (!n)
        return;
    sb_reserve(b, b->len + n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void sb_drop(struct sbuf *b, size_t n) /* remove the first n bytes */
{
    if (!n)
        return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void sb_free(struct sbuf *b)
{
    sx_free(b->p, b->cap);
    *b = (struct sbuf){0};
}

/* ---- trace -------------------------------------------------------------------------------- */

static char trace[TRACE_N][TRACE_LINE];
static long trace_n;

void tr(const char *fmt, ...)
{
    char *line = trace[trace_n % TRACE_N];
    int n = snprintf(line, TRACE_LINE, "%6ld t=%-8lld ", S ? S->step : 0L,
                     S ? (long long)(S->now_us / 1000) : 0LL);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, TRACE_LINE - (size_t)n, fmt, ap);
    va_end(ap);
    trace_n++;
    if (S && S->o->verbose)
        fprintf(stderr, "%s\n", line);
}

void print_trace(void)
{
    long from = trace_n > TRACE_N ? trace_n - TRACE_N : 0;
    fprintf(stderr, "--- the last %ld events and gateway log lines:\n", trace_n - from);
    for (long i = from; i < trace_n; i++)
        fprintf(stderr, "%s\n", trace[i % TRACE_N]);
}

/* A new run's trace starts empty. */
void trace_reset(void) { trace_n = 0; }

void fail(const char *fmt, ...)
{
    dump_world();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->res->what, sizeof S->res->what, fmt, ap);
    va_end(ap);
    S->res->failed_step = S->step;
    tr("VIOLATION: %s", S->res->what);
    longjmp(S->fail, 1);
}

void on_death(void)
{
    if (!S)
        return;
    fprintf(stderr, "sim: the process died at step %ld of seed %llu\n", S->step, (unsigned long long)S->o->seed);
    print_trace();
}

/* ---- choices ------------------------------------------------------------------------------ */

static uint64_t rnd64(void)
{
    if (S->o->data) { /* a fuzzer's bytes, then zeros */
        uint64_t v = 0;
        for (int i = 0; i < 4; i++)
            v = v << 8 | (S->data_off < S->o->len ? S->o->data[S->data_off++] : 0);
        return v;
    }
    uint64_t x = S->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    S->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* 0 .. n-1 */
int rnd(int n) { return n <= 1 ? 0 : (int)(rnd64() % (uint64_t)n); }
int chance(int pct) { return rnd(100) < pct; }
int side_chance(uint64_t a, uint64_t b, int pct)
{
    uint64_t z = S->o->seed * 0x9E3779B97F4A7C15ULL ^ a * 0xBF58476D1CE4E5B9ULL ^ b * 0x94D049BB133111EBULL;
    z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ z >> 27) * 0x94D049BB133111EBULL;
    return (int)((z ^ z >> 31) % 100) < pct;
}
int enabled(int k) { return !(S->o->disabled & (1u << k)); }

int unread(int fd)
{
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

void set_sndbuf(int fd)
{
    int sz = 2048 << rnd(6); /* 2 KiB .. 64 KiB: writes come back short */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
}

/* ---- messages ----------------------------------------------------------------------------- */

/* A whole message of type t carrying x (freed), appended to b. */
void put_msg(struct sbuf *b, int t, K x)
{
    size_t len;
    uint8_t *m = kcodec_encode_msg(x, t, &len);
    k_free(x);
    if (!m)
        fail("out of memory encoding");
    sb_add(b, m, len);
    free(m);
}

void put_text(struct sbuf *b, int t, const char *fmt, ...)
{
    char s[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    put_msg(b, t, k_str(s, strlen(s)));
}

/* Take one whole message from the front of b: its type and value (decompressed and decoded;
 * the caller frees it). 0 if none is whole yet; -1 if the bytes are not a message q would
 * accept (*why). *compressed says whether it came compressed. */
int take_msg(struct sbuf *b, int *type, K *x, int *compressed, const char **why)
{
    if (b->len < 8)
        return 0;
    struct kipc_hdr h;
    if (kipc_hdr_parse(b->p, b->len, (uint64_t)1 << 32, &h, why) != QG_OK)
        return -1;
    if (b->len < h.len)
        return 0;
    uint8_t *plain = b->p;
    size_t plen = (size_t)h.len;
    if (h.compressed) {
        plen = kzip_uncompressed_len(b->p, (size_t)h.len);
        if (plen < 9 || plen > (1u << 28) || !(plain = malloc(plen)) ||
            kzip_decompress(b->p, (size_t)h.len, plain, plen, why) != QG_OK) {
            free(plain == b->p ? NULL : plain);
            *why = "bad compressed message";
            return -1;
        }
    }
    struct kerr e;
    qg_status st = kcodec_decode(plain + 8, plen - 8, h.le, NULL, x, &e);
    if (plain != b->p)
        free(plain);
    if (st != QG_OK) {
        *why = e.why;
        return -1;
    }
    *type = h.type;
    *compressed = h.compressed;
    sb_drop(b, (size_t)h.len);
    return 1;
}

/* The text of a char vector (or "" for anything else), NUL-terminated in buf. */
const char *text_of(K x, char *buf, size_t n)
{
    if (x->t != KT_CHAR) {
        buf[0] = 0;
        return buf;
    }
    snprintf(buf, n, "%.*s", (int)QG_MIN((int64_t)n - 1, x->n), kC(x));
    return buf;
}

/* Write up to want bytes of b from *off to fd; what was written is dropped from b's front now
 * and then (counted in *base, if given). Returns what write returned. */
ssize_t sb_send(int fd, struct sbuf *b, size_t *off, size_t *base, size_t want)
{
    ssize_t k = write(fd, b->p + *off, QG_MIN(want, b->len - *off));
    if (k <= 0)
        return k;
    S->moved += (size_t)k;
    *off += (size_t)k;
    if (*off > 65536) {
        sb_drop(b, *off);
        if (base)
            *base += *off;
        *off = 0;
    }
    return k;
}

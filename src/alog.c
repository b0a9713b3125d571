/* alog.c: access-log records, their logfmt lines, and the writer job. Pure but for the job's
 * write: runs on the writer pool, touching nothing of the loop's. */
#include "alog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define NSTR 5 /* user, peer, group, worker, error */

struct rec_hdr {
    uint32_t size; /* the record's bytes, strings included */
    uint8_t sync, outcome;
    uint8_t slen[NSTR];
    int64_t wall_us, queued_us, run_us;
    uint64_t client, req_bytes, reply_bytes;
};

static size_t cut(const char *s) { return s ? strnlen(s, 255) : 0; }

int alog_append(struct alog_buf *b, const struct alog_fields *f)
{
    const char *s[NSTR] = {f->user, f->peer, f->group, f->worker, f->error};
    struct rec_hdr h = {.sync = (uint8_t)f->sync, .outcome = (uint8_t)f->outcome, .wall_us = f->wall_us,
                        .queued_us = f->queued_us, .run_us = f->run_us, .client = f->client,
                        .req_bytes = f->req_bytes, .reply_bytes = f->reply_bytes};
    size_t size = sizeof h;
    for (int i = 0; i < NSTR; i++) {
        h.slen[i] = (uint8_t)cut(s[i]);
        size += h.slen[i];
    }
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + size)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    h.size = (uint32_t)size;
    uint8_t *o = b->p + b->len;
    memcpy(o, &h, sizeof h);
    o += sizeof h;
    for (int i = 0; i < NSTR; i++) {
        memcpy(o, s[i] ? s[i] : "", h.slen[i]);
        o += h.slen[i];
    }
    b->len += size;
    b->n++;
    return 0;
}

void alog_buf_free(struct alog_buf *b)
{
    free(b->p);
    *b = (struct alog_buf){0};
}

void alog_buf_ctx_free(void *ctx)
{
    if (ctx)
        alog_buf_free(ctx);
    free(ctx);
}

/* ---- lines ------------------------------------------------------------------------------------ */

static char *put(char *o, const char *s)
{
    size_t n = strlen(s);
    memcpy(o, s, n);
    return o + n;
}

static char *put_u(char *o, uint64_t v)
{
    char t[24];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (n)
        *o++ = t[--n];
    return o;
}

static char *put_i(char *o, int64_t v)
{
    if (v < 0) {
        *o++ = '-';
        return put_u(o, (uint64_t)0 - (uint64_t)v);
    }
    return put_u(o, (uint64_t)v);
}

/* A logfmt value: bare when it is a plain word (or empty: key=), else quoted with \" \\ \n \r
 * \t and \xNN. */
static char *put_v(char *o, const char *s, size_t n)
{
    int bare = 1;
    for (size_t i = 0; i < n && bare; i++)
        bare = (unsigned char)s[i] > ' ' && s[i] != '"' && s[i] != '=' && s[i] != '\\' && (unsigned char)s[i] < 0x7f;
    if (bare) {
        memcpy(o, s, n);
        return o + n;
    }
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            *o++ = '\\';
            *o++ = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
        } else if (ch < ' ' || ch == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            o = put(o, "\\x");
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    return o;
}

static char *put_time(char *o, int64_t us)
{
    time_t sec = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char t[40];
    int n = snprintf(t, sizeof t, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
    memcpy(o, t, (size_t)n);
    return o + n;
}

#define OUTCOME_NAME(e, s) s,
static const char *const outcome_names[] = {ALOG_OUTCOMES(OUTCOME_NAME)};
#undef OUTCOME_NAME

const char *alog_outcome_name(int outcome) { return outcome >= 0 && outcome < ALOG_NOUTCOMES ? outcome_names[outcome] : "?"; }

size_t alog_format(const uint8_t *p, size_t *rec_len, char *out)
{
    static const char *const keys[NSTR] = {" user=", " peer=", " group=", " worker=", " error="};
    struct rec_hdr h;
    memcpy(&h, p, sizeof h);
    *rec_len = h.size;
    const char *s[NSTR];
    const char *q = (const char *)p + sizeof h;
    for (int i = 0; i < NSTR; i++) {
        s[i] = q;
        q += h.slen[i];
    }
    char *o = put(out, "time=");
    o = put_time(o, h.wall_us);
    o = put_u(put(o, " client="), h.client);
    for (int i = 0; i < 4; i++)
        o = put_v(put(o, keys[i]), s[i], h.slen[i]);
    o = put(o, h.sync ? " type=sync" : " type=async");
    o = put_u(put(o, " req_bytes="), h.req_bytes);
    o = put_u(put(o, " reply_bytes="), h.reply_bytes);
    o = put_i(put(o, " queued_us="), h.queued_us);
    o = put_i(put(o, " run_us="), h.run_us);
    o = put(put(o, " outcome="), alog_outcome_name(h.outcome));
    if (h.slen[4])
        o = put_v(put(o, keys[4]), s[4], h.slen[4]);
    *o++ = '\n';
    return (size_t)(o - out);
}

/* ---- the file ----------------------------------------------------------------------------------- */

int alog_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        snprintf(err, errlen, "access_log %s: %s", path, strerror(errno));
    return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void job_alog_write(struct job *j)
{
    const struct alog_buf *b = j->ctx;
    size_t cap = 1 << 20, len = 0, off = 0;
    char *out = malloc(cap);
    j->result = 0;
    j->aux[0] = 0;
    if (!out) {
        j->result = ENOMEM;
        snprintf(j->text, sizeof j->text, "out of memory formatting %llu lines", (unsigned long long)b->n);
        return;
    }
    while (off < b->len && !j->result) {
        size_t rl;
        len += alog_format(b->p + off, &rl, out + len);
        off += rl;
        j->aux[0]++;
        if (cap - len < ALOG_LINE_MAX || off == b->len) {
            j->result = write_all(j->arg, out, len);
            len = 0;
        }
    }
    if (j->result)
        snprintf(j->text, sizeof j->text, "writing the access log: %s", strerror(j->result));
    free(out);
}

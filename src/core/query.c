/* query.c: what a group learns of each query it runs (query.h): pipelining's measure of how
 * long it runs, and its totals for .qgate.queries[]. A run's key is its message's hash, made
 * once as the run begins: the one place the loop reads a message's bytes beyond its header
 * for anything but validation, bounded at QUERY_KEY_MAX bytes. */
#include "query.h"

#include <stdio.h>
#include <string.h>

#include "gw.h"
#include "log.h"
#include "qg.h"

uint64_t query_key(const struct gw *g, const uint8_t *m, size_t len)
{
    if (g->hooks.query_key)
        return g->hooks.query_key(g->hooks.ctx, m, len);
    const uint8_t *p = m + 8;
    size_t n = len > 8 ? len - 8 : 0;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    if (n > QUERY_KEY_MAX)
        n = QUERY_KEY_MAX;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = 0;
        memcpy(&v, p + i, n - i < 8 ? n - i : 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    return h ? h : 1;
}

static struct qslot *slot(const struct qslot *t, uint64_t key)
{
    return t ? (struct qslot *)&t[key & (QUERY_SLOTS - 1)] : NULL;
}

/* s's printable bytes (n of them, or up to a NUL if n is 0) appended to out: ASCII and whole
 * well-formed UTF-8 characters as they are (a character that does not fit is left out whole),
 * any other byte '?'. */
static size_t put(char *out, size_t at, const uint8_t *s, size_t n, size_t avail)
{
    size_t lim = n && n < avail ? n : avail;
    for (size_t i = 0; i < lim && (n || s[i] != 0) && at + 1 < QUERY_TEXT; i++) {
        size_t k = s[i] >= 0x80 ? log_utf8_seq(s + i, lim - i) : 0;
        if (k && at + k >= QUERY_TEXT)
            break;
        if (k) {
            memcpy(out + at, s + i, k);
            at += k;
            i += k - 1;
        } else
            out[at++] = s[i] >= 32 && s[i] < 127 ? (char)s[i] : '?';
    }
    out[at] = 0;
    return at;
}

/* The first bytes of the query in message m, as a q user would recognise them: a string's
 * text, a symbol, a call's name. */
void query_text(char *out, const uint8_t *m, size_t len)
{
    out[0] = 0;
    if (len < 10) {
        return;
    }
    if (m[2]) {
        snprintf(out, QUERY_TEXT, "(compressed, %zu bytes)", len);
        return;
    }
    const uint8_t *b = m + 8, *end = m + len;
    int8_t t = (int8_t)b[0];
    if (t == 10 && len >= 14) { /* a string: q's text */
        uint32_t n = qg_ld32o(b + 2, m[0]);
        put(out, 0, b + 6, n, (size_t)(end - (b + 6)));
    } else if (t == -11) { /* a symbol: a function called with nothing */
        put(out, 0, b + 1, 0, (size_t)(end - (b + 1)));
    } else if (t == 0 && len >= 15) { /* a call: (f; args): its first item, then what follows */
        const uint8_t *f = b + 6;
        size_t at = put(out, 0, (const uint8_t *)"(", 1, 1);
        if ((int8_t)f[0] == -11) {
            at = put(out, at, (const uint8_t *)"`", 1, 1);
            at = put(out, at, f + 1, 0, (size_t)(end - (f + 1)));
        } else if ((int8_t)f[0] == 10 && end - f >= 6) {
            at = put(out, at, f + 6, qg_ld32o(f + 2, m[0]), (size_t)(end - (f + 6)));
        }
        put(out, at, (const uint8_t *)";..)", 4, 4);
    } else {
        snprintf(out, QUERY_TEXT, "(type %d, %zu bytes)", t, len);
    }
}

void query_begin_loop(struct qslot *t, uint64_t key, const uint8_t *m, size_t len)
{
    struct qslot *e = slot(t, key);
    if (!e || e->key == key)
        return;
    *e = (struct qslot){.key = key};
    query_text(e->text, m, len);
}

uint64_t query_run_loop(const struct gw *g, struct qslot *t, const uint8_t *m, size_t len)
{
    uint64_t key = query_key(g, m, len);
    query_begin_loop(t, key, m, len);
    return key;
}

void query_end_loop(struct qslot *t, uint64_t key, int error, int64_t wait_us, int64_t run_us, uint64_t in_bytes,
                    uint64_t out_bytes, int64_t now_ms)
{
    struct qslot *e = slot(t, key);
    if (!e || e->key != key)
        return;
    uint32_t w = wait_us < 0 ? 0 : wait_us > UINT32_MAX ? UINT32_MAX : (uint32_t)wait_us;
    uint32_t r = run_us < 0 ? 0 : run_us > UINT32_MAX ? UINT32_MAX : (uint32_t)run_us;
    e->calls++;
    e->errors += error != 0;
    e->wait_us += w;
    e->run_us += r;
    e->wait_max_us = QG_MAX(e->wait_max_us, w);
    e->run_max_us = QG_MAX(e->run_max_us, r);
    e->bytes_in += in_bytes;
    e->bytes_out += out_bytes;
    e->last_ms = now_ms;
}

void query_learn_loop(struct qslot *t, uint64_t key, int64_t us)
{
    struct qslot *e = key ? slot(t, key) : NULL;
    if (!e)
        return;
    uint32_t u = us < 0 ? 0u : us > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    uint32_t decayed = e->worst_us - e->worst_us / 8; /* a slow run is forgotten over a few fast ones */
    if (e->key != key)
        *e = (struct qslot){.key = key, .worst_us = u, .learned = 1};
    else
        e->worst_us = e->learned && decayed > u ? decayed : u;
    e->learned = 1;
}

int64_t query_learned_us(const struct qslot *t, uint64_t key)
{
    const struct qslot *e = key ? slot(t, key) : NULL;
    return e && e->key == key && e->learned && !e->calls_back ? (int64_t)e->worst_us : -1;
}

void query_calls_back_loop(struct qslot *t, uint64_t key)
{
    struct qslot *e = key ? slot(t, key) : NULL;
    if (!e)
        return;
    if (e->key != key)
        *e = (struct qslot){.key = key};
    e->calls_back = 1;
}

void query_reset_loop(struct qslot *t)
{
    for (int i = 0; t && i < QUERY_SLOTS; i++) {
        struct qslot *e = &t[i];
        e->calls = e->errors = e->wait_us = e->run_us = e->bytes_in = e->bytes_out = 0;
        e->wait_max_us = e->run_max_us = 0;
        e->last_ms = 0;
    }
}

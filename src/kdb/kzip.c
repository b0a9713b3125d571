/* kzip.c: kdb+ IPC compression: the LZ scheme with a 256-slot XOR-hash table (docs/kdb-ipc.md 4). */
#include "kzip.h"

#include <string.h>

/* Store v in the order of a header's byte 0 (1 = little-endian). */
static void st32o(uint8_t *p, uint32_t v, int le)
{
    if (le) {
        qg_st32(p, v);
    } else {
        p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
    }
}

size_t kzip_compress(const uint8_t *m, size_t t, uint8_t *o)
{
    if (t < 9 || t > INT32_MAX)
        return 0;
    size_t cap = t / 2;
    if (cap < 17)
        return 0;
    uint32_t last[256] = {0};
    memcpy(o, m, 4);
    o[2] = 1;
    st32o(o + 8, (uint32_t)t, m[0]); /* lengths in the message's own byte order */
    size_t ctl = 12, w = 12, s = 8, pend = 0;
    uint8_t flags = 0, bit = 0, h = 0, pend_h = 0;
    while (s < t) {
        if (bit == 0) {
            if (w > cap - 17)
                return 0;
            o[ctl] = flags;
            ctl = w++;
            flags = 0;
            bit = 1;
        }
        int literal = 1;
        uint32_t cand = 0;
        if (s + 2 < t) {
            h = m[s] ^ m[s + 1];
            cand = last[h];
            literal = cand == 0 || m[cand] != m[s];
        }
        if (pend) {
            last[pend_h] = (uint32_t)pend;
            pend = 0;
        }
        if (literal) {
            pend_h = h;
            pend = s;
            o[w++] = m[s++];
        } else {
            last[h] = (uint32_t)s;
            flags |= bit;
            size_t src = cand + 2;
            s += 2;
            size_t start = s, lim = s + 255 < t ? s + 255 : t;
            while (s < lim && m[src] == m[s]) {
                s++;
                src++;
            }
            o[w++] = h;
            o[w++] = (uint8_t)(s - start);
        }
        bit = (uint8_t)(bit << 1);
    }
    o[ctl] = flags;
    st32o(o + 4, (uint32_t)w, m[0]);
    return w;
}

size_t kzip_uncompressed_len(const uint8_t *c, size_t clen)
{
    if (clen < 12)
        return 0;
    return qg_ld32o(c + 8, c[0]);
}

size_t kzip_max_len(size_t clen) { return clen < 12 ? 0 : 8 + ((clen - 12) / 17 + 1) * (8 * 257); }

/* Copy len bytes from out+src to out+w (src < w) with the byte-at-a-time meaning of an
 * overlapping copy. May write up to 15 bytes past w+len: the caller guarantees the room. */
static inline void copy_fast(uint8_t *out, size_t src, size_t w, size_t len)
{
    size_t d = w - src;
    uint8_t *o = out + w;
    const uint8_t *i = out + src;
    if (d >= 16) {
        for (size_t k = 0; k < len; k += 16)
            memcpy(o + k, i + k, 16);
    } else if (d >= 8) {
        for (size_t k = 0; k < len; k += 8)
            memcpy(o + k, i + k, 8);
    } else if (d == 1) {
        memset(o, *i, len);
    } else {
        for (size_t k = 0; k < len; k++)
            o[k] = i[k];
    }
}

/* Exact copy, never past w+len. */
static inline void copy_exact(uint8_t *out, size_t src, size_t w, size_t len)
{
    if (w - src >= len)
        memcpy(out + w, out + src, len);
    else if (w - src == 1)
        memset(out + w, out[src], len);
    else
        for (size_t i = 0; i < len; i++)
            out[w + i] = out[src + i];
}

/* Room a whole group of 8 items may need: 8 back-references of 257 bytes, plus the 15-byte
 * overrun of copy_fast. */
#define GROUP_OUT_MAX (8 * 257 + 16)
#define GROUP_IN_MAX 17

/* The decompressor's state. The hash table update of docs/kdb-ipc.md 4.2, restated so that it
 * needs no reads of the output: a literal hashes the pair it completes (previous byte, this
 * byte) at w-1 when the previous item was a literal too ("pend"); a back-reference with slot h
 * completes the pair at w-1 with its first byte (out[src]), and the pair at its own start
 * equals the one at src, whose hash is h, so last[h] becomes w. Pairs inside a copy are never
 * hashed. */
struct unz {
    const uint8_t *c;
    size_t clen, r;
    uint8_t *out;
    size_t n, w;
    unsigned prev, pend;
    uint32_t last[256];
};

static inline void unz_literal(struct unz *u)
{
    uint8_t b = u->c[u->r++];
    if (u->pend)
        u->last[u->prev ^ b] = (uint32_t)(u->w - 1);
    u->out[u->w++] = b;
    u->prev = b;
    u->pend = 1;
}

/* A back-reference (2 bytes in: slot, length - 2). fast: room to spare, copy_fast may overrun;
 * else bounded by the declared length. NULL, or why it is bad. */
static inline const char *unz_ref(struct unz *u, int fast)
{
    unsigned h = u->c[u->r];
    size_t src = u->last[h], len = 2 + (size_t)u->c[u->r + 1];
    u->r += 2;
    if (src == 0)
        return "back-reference to an empty slot";
    if (!fast && len > u->n - u->w)
        return "back-reference past the declared length";
    if (u->pend)
        u->last[u->prev ^ u->out[src]] = (uint32_t)(u->w - 1);
    if (fast)
        copy_fast(u->out, src, u->w, len);
    else
        copy_exact(u->out, src, u->w, len);
    u->last[h] = (uint32_t)u->w;
    u->w += len;
    u->pend = 0;
    return NULL;
}

/* A whole group of 8 items with room to spare in and out: no bounds checks per item. */
static inline const char *unz_group_fast(struct unz *u)
{
    unsigned f = u->c[u->r++];
    for (int k = 0; k < 8; k++, f >>= 1) {
        const char *why = f & 1 ? unz_ref(u, 1) : (unz_literal(u), NULL);
        if (why)
            return why;
    }
    return NULL;
}

size_t kzip_peek(const uint8_t *body, size_t n, uint8_t *out, size_t cap)
{
    size_t r = 4, k = 0; /* (past the plain length) */
    unsigned flags = 0, bit = 0;
    while (k < cap) {
        if (bit == 0) {
            if (r >= n)
                break;
            flags = body[r++];
            bit = 1;
        }
        if ((flags & bit) || r >= n) /* a back-reference: what it copies is not kept here */
            break;
        out[k++] = body[r++];
        bit = (bit << 1) & 0xff;
    }
    return k;
}

qg_status kzip_decompress(const uint8_t *c, size_t clen, uint8_t *out, size_t n, const char **why)
{
    if (clen < 13 || n < 9 || kzip_uncompressed_len(c, clen) != n || n > kzip_max_len(clen)) {
        *why = "compressed header inconsistent";
        return QG_ERR;
    }
    struct unz u = {.c = c, .clen = clen, .r = 12, .out = out, .n = n, .w = 8};
    memcpy(out, c, 8);
    out[2] = 0;
    st32o(out + 4, (uint32_t)n, c[0]);
    unsigned flags = 0, bit = 0;
    const char *bad = NULL;
    while (u.w < n && !bad) {
        if (bit == 0 && clen - u.r >= GROUP_IN_MAX && n - u.w >= GROUP_OUT_MAX) {
            bad = unz_group_fast(&u);
            continue;
        }
        if (bit == 0) {
            if (u.r >= clen)
                break;
            flags = c[u.r++];
            bit = 1;
        }
        if (u.r + ((flags & bit) ? 2 : 1) > clen)
            break;
        if (flags & bit)
            bad = unz_ref(&u, 0);
        else
            unz_literal(&u);
        bit = (bit << 1) & 0xff;
    }
    if (!bad && u.w < n)
        bad = "compressed stream truncated";
    if (!bad && u.r != clen)
        bad = "compressed stream longer than its contents";
    if (bad)
        *why = bad;
    return bad ? QG_ERR : QG_OK;
}

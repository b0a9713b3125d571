/* kzip.c: kdb+ IPC compression: the LZ scheme with a 256-slot XOR-hash table (kdb-ipc.md 4). */
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

/* The hash table update of kdb-ipc.md 4.2, restated so that it needs no reads of the output:
 * a literal hashes the pair it completes (previous byte, this byte) at w-1 when the previous
 * item was a literal too ("pend"); a back-reference with slot h completes the pair at w-1 with
 * its first byte (out[src]), and the pair at its own start equals the one at src, whose hash
 * is h, so last[h] becomes w. Pairs inside a copy are never hashed. */
#define LITERAL(b)                                  \
    do {                                            \
        uint8_t b_ = (b);                           \
        if (pend)                                   \
            last[prev ^ b_] = (uint32_t)(w - 1);    \
        out[w++] = b_;                              \
        prev = b_;                                  \
        pend = 1;                                   \
    } while (0)

qg_status kzip_decompress(const uint8_t *c, size_t clen, uint8_t *out, size_t n, const char **why)
{
    if (clen < 13 || n < 9 || kzip_uncompressed_len(c, clen) != n) {
        *why = "compressed header inconsistent";
        return QG_ERR;
    }
    uint32_t last[256] = {0};
    memcpy(out, c, 8);
    out[2] = 0;
    st32o(out + 4, (uint32_t)n, c[0]);
    size_t w = 8, r = 12;
    unsigned flags = 0, bit = 0, prev = 0, pend = 0;
    while (w < n) {
        if (bit == 0 && clen - r >= GROUP_IN_MAX && n - w >= GROUP_OUT_MAX) {
            /* a whole group with room to spare: no bounds checks per item */
            unsigned f = c[r++];
            for (int k = 0; k < 8; k++, f >>= 1) {
                if (f & 1) {
                    unsigned h = c[r];
                    size_t src = last[h], len = 2 + (size_t)c[r + 1];
                    r += 2;
                    if (src == 0)
                        goto empty_slot;
                    if (pend)
                        last[prev ^ out[src]] = (uint32_t)(w - 1);
                    copy_fast(out, src, w, len);
                    last[h] = (uint32_t)w;
                    w += len;
                    pend = 0;
                } else {
                    LITERAL(c[r]);
                    r++;
                }
            }
            continue;
        }
        if (bit == 0) {
            if (r >= clen)
                goto short_stream;
            flags = c[r++];
            bit = 1;
        }
        if (flags & bit) {
            if (clen - r < 2)
                goto short_stream;
            unsigned h = c[r];
            size_t src = last[h], len = 2 + (size_t)c[r + 1];
            r += 2;
            if (src == 0)
                goto empty_slot;
            if (len > n - w) {
                *why = "back-reference past the declared length";
                return QG_ERR;
            }
            if (pend)
                last[prev ^ out[src]] = (uint32_t)(w - 1);
            copy_exact(out, src, w, len);
            last[h] = (uint32_t)w;
            w += len;
            pend = 0;
        } else {
            if (r >= clen)
                goto short_stream;
            LITERAL(c[r]);
            r++;
        }
        bit = (bit << 1) & 0xff;
    }
    if (r != clen) {
        *why = "compressed stream longer than its contents";
        return QG_ERR;
    }
    return QG_OK;
empty_slot:
    *why = "back-reference to an empty slot";
    return QG_ERR;
short_stream:
    *why = "compressed stream truncated";
    return QG_ERR;
}

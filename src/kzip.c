/* kzip.c: kdb+ IPC compression: the LZ scheme with a 256-slot XOR-hash table (kdb-ipc.md 4). */
#include "kzip.h"

#include <string.h>

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
    qg_st32(o + 8, (uint32_t)t);
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
    qg_st32(o + 4, (uint32_t)w);
    return w;
}

size_t kzip_uncompressed_len(const uint8_t *c, size_t clen)
{
    if (clen < 12)
        return 0;
    return qg_ld32o(c + 8, c[0]);
}

#define HASH_TO(lim)                                        \
    do {                                                    \
        while (p + 1 < (lim)) {                             \
            last[out[p] ^ out[p + 1]] = (uint32_t)p;        \
            p++;                                            \
        }                                                   \
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
    if (c[0])
        qg_st32(out + 4, (uint32_t)n);
    else {
        out[4] = (uint8_t)(n >> 24); out[5] = (uint8_t)(n >> 16); out[6] = (uint8_t)(n >> 8); out[7] = (uint8_t)n;
    }
    size_t w = 8, p = 8, r = 12;
    unsigned flags = 0, bit = 0;
    while (w < n) {
        if (bit == 0) {
            if (r >= clen)
                goto short_stream;
            flags = c[r++];
            bit = 1;
        }
        if (flags & bit) {
            if (clen - r < 2)
                goto short_stream;
            size_t src = last[c[r]];
            size_t len = 2 + (size_t)c[r + 1];
            r += 2;
            if (src == 0) {
                *why = "back-reference to an empty slot";
                return QG_ERR;
            }
            if (len > n - w) {
                *why = "back-reference past the declared length";
                return QG_ERR;
            }
            size_t w0 = w;
            if (w - src >= len) {
                memcpy(out + w, out + src, len);
            } else if (w - src == 1) {
                memset(out + w, out[src], len);
            } else {
                for (size_t i = 0; i < len; i++)
                    out[w + i] = out[src + i];
            }
            w += 2;
            HASH_TO(w); /* pairs up to the match start; none inside the copy */
            w = w0 + len;
            p = w;
        } else {
            if (r >= clen)
                goto short_stream;
            out[w++] = c[r++];
            HASH_TO(w);
        }
        bit = (bit << 1) & 0xff;
    }
    if (r != clen) {
        *why = "compressed stream longer than its contents";
        return QG_ERR;
    }
    return QG_OK;
short_stream:
    *why = "compressed stream truncated";
    return QG_ERR;
}

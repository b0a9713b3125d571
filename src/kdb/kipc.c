/* kipc.c: kdb+ IPC framing: header checks, frame completeness, handshake in both roles. */
#include "kipc.h"

#include <string.h>

qg_status kipc_frame_check(const uint8_t *p, size_t n, uint64_t max_len, struct kipc_hdr *h,
                           size_t *need, const char **why)
{
    qg_status st = kipc_hdr_parse(p, n, max_len, h, why);
    if (st == QG_AGAIN) {
        *need = KIPC_HDR_LEN;
        return QG_AGAIN;
    }
    if (st != QG_OK)
        return st;
    *need = (size_t)h->len;
    return n >= h->len ? QG_OK : QG_AGAIN;
}

void kipc_hdr_write(uint8_t out[KIPC_HDR_LEN], enum kipc_msgtype type, int compressed, uint64_t len)
{
    out[0] = 1;
    out[1] = (uint8_t)type;
    out[2] = compressed ? 1 : 0;
    out[3] = (uint8_t)(len >> 32);
    qg_st32(out + 4, (uint32_t)len);
}

void kipc_hdr_len_write(uint8_t m[KIPC_HDR_LEN], uint32_t len)
{
    m[2] = 0;
    m[3] = 0;
    if (m[0])
        qg_st32(m + 4, len);
    else
        for (int i = 0; i < 4; i++)
            m[4 + i] = (uint8_t)(len >> (24 - 8 * i));
}

qg_status kipc_hs_parse(const uint8_t *p, size_t n, size_t max_len, struct kipc_hs *hs)
{
    size_t lim = n < max_len ? n : max_len;
    const uint8_t *z = memchr(p, 0, lim);
    if (!z)
        return n >= max_len ? QG_ERR : QG_AGAIN;
    size_t clen = (size_t)(z - p);
    hs->len = clen + 1;
    hs->cap = 0;
    if (n == clen + 2 && p[clen + 1] == 0 && (clen == 0 || p[clen - 1] >= 32)) { /* "user:pw" 00 00: capability 0
            * given, then the NUL (a byte alone after it: no message starts so; one sent right
            * behind the handshake has 8 bytes or more) */
        if (clen + 2 > max_len) /* (over the bound by its last byte: not taken for a handshake of
                                 * max_len bytes, its NUL left for a message's first byte) */
            return QG_ERR;
        hs->len = clen + 2; /* (the credentials end at the first NUL: the capability byte) */
    } else if (clen > 0 && p[clen - 1] < 32) {
        hs->cap = p[clen - 1];
        clen--;
    }
    const char *c = (const char *)p;
    const char *colon = memchr(c, ':', clen);
    hs->user = c;
    if (colon) {
        hs->user_len = (size_t)(colon - c);
        hs->pass = colon + 1;
        hs->pass_len = clen - hs->user_len - 1;
    } else {
        hs->user_len = clen;
        hs->pass = c + clen;
        hs->pass_len = 0;
    }
    return QG_OK;
}

size_t kipc_hs_build(uint8_t *out, size_t outlen, const char *user, const char *pass, uint8_t cap)
{
    size_t ul = user ? strlen(user) : 0;
    size_t pl = pass ? strlen(pass) : 0;
    size_t len = ul + (pl ? 1 + pl : 0) + 2;
    if (len > outlen)
        return 0;
    if (ul)
        memcpy(out, user, ul);
    size_t o = ul;
    if (pl) {
        out[o++] = ':';
        memcpy(out + o, pass, pl);
        o += pl;
    }
    out[o++] = cap;
    out[o++] = 0;
    return o;
}

const char *kipc_type_name(int type)
{
    switch (type) {
    case KIPC_ASYNC: return "async";
    case KIPC_SYNC: return "sync";
    case KIPC_RESPONSE: return "response";
    default: return "?";
    }
}

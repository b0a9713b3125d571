/* kipc.h: kdb+ IPC framing: the 8-byte header, the handshake and capability negotiation. */
#ifndef KIPC_H
#define KIPC_H

#include "qg.h"

#define KIPC_HDR_LEN 8
#define KIPC_HS_MAX_DEFAULT 1024 /* longest handshake we accept (docs/design.md: 1 KiB) */
#define KIPC_CAP_MAX 3           /* highest capability we advertise: compression, guid */
#define KIPC_CAP_BIG 6           /* the capability under which byte 3 carries length bits */

enum kipc_msgtype { KIPC_ASYNC = 0, KIPC_SYNC = 1, KIPC_RESPONSE = 2 };

/* A decoded message header. len counts the whole message, header included. */
struct kipc_hdr {
    uint8_t le;         /* 1 = little-endian body, 0 = big-endian */
    uint8_t type;       /* enum kipc_msgtype */
    uint8_t compressed; /* 1 = body is kdb+ IPC compressed (kzip) */
    uint64_t len;       /* total length: bytes 4..7 (plus byte 3 as bits 32..39 under cap 6) */
};

/* Decode and check the header in the first 8 bytes of p, from a peer of capability cap: byte 3
 * holds length bits 32..39 only when cap is 6 or more (messages over 4 GiB), and must be 0
 * otherwise. Returns QG_AGAIN if n < 8, QG_ERR (with *why set to a static reason) if the header
 * is not one q would accept or its length is below 9 or above max_len, else QG_OK. (Inline: it
 * is read for every message either side sends.) */
static inline QG_MUSTCHECK qg_status kipc_hdr_parse_cap(const uint8_t *p, size_t n, uint64_t max_len, int cap,
                                                         struct kipc_hdr *h, const char **why)
{
    if (n < KIPC_HDR_LEN)
        return QG_AGAIN;
    if (p[0] > 1) {
        *why = "byte order not 0 or 1";
        return QG_ERR;
    }
    if (p[1] > KIPC_RESPONSE) {
        *why = "message type not 0, 1 or 2";
        return QG_ERR;
    }
    if (p[2] > 1) {
        *why = "compression flag not 0 or 1";
        return QG_ERR;
    }
    if (p[3] && cap < KIPC_CAP_BIG) {
        *why = "byte 3 set (length over 4 GiB needs capability 6)";
        return QG_ERR;
    }
    h->le = p[0];
    h->type = p[1];
    h->compressed = p[2];
    h->len = (uint64_t)qg_ld32o(p + 4, h->le) | ((uint64_t)p[3] << 32);
    if (h->len < KIPC_HDR_LEN + 1 + (h->compressed ? 4u : 0u)) {
        *why = "length too small";
        return QG_ERR;
    }
    if (h->len > max_len) {
        *why = "length over max_message";
        return QG_ERR;
    }
    return QG_OK;
}

/* The same from a peer of capability below 6: byte 3 must be 0. */
static inline QG_MUSTCHECK qg_status kipc_hdr_parse(const uint8_t *p, size_t n, uint64_t max_len,
                                                     struct kipc_hdr *h, const char **why)
{
    return kipc_hdr_parse_cap(p, n, max_len, 0, h, why);
}

/* Is a whole message at the front of p? QG_OK when all h->len bytes are present, QG_AGAIN
 * when more are needed (*need is the total wanted so far: 8, then the message length),
 * QG_ERR when the header is bad (see kipc_hdr_parse). */
qg_status kipc_frame_check(const uint8_t *p, size_t n, uint64_t max_len, struct kipc_hdr *h,
                           size_t *need, const char **why) QG_MUSTCHECK;

/* Write a little-endian header for a message of len bytes in total. */
void kipc_hdr_write(uint8_t out[KIPC_HDR_LEN], enum kipc_msgtype type, int compressed, uint64_t len);
/* Set the length of message m (uncompressed now) to len, in m's byte order (m[0]). */
void kipc_hdr_len_write(uint8_t m[KIPC_HDR_LEN], uint32_t len);

/* A parsed client handshake. Pointers refer into the caller's buffer. */
struct kipc_hs {
    size_t len;          /* bytes consumed, terminating NUL included */
    const char *user;    /* credentials up to the first ':' */
    size_t user_len;
    const char *pass;    /* after the first ':'; empty if none */
    size_t pass_len;
    uint8_t cap;         /* capability byte, 0 for pre-2.6 clients that send none */
};

/* Parse "user:password" CAP NUL from the start of p. QG_AGAIN until the NUL arrives;
 * QG_ERR if max_len bytes arrive without one. As aiokdb does, the byte before the NUL is a
 * capability only if it is below 32 (older clients send none). */
qg_status kipc_hs_parse(const uint8_t *p, size_t n, size_t max_len, struct kipc_hs *hs) QG_MUSTCHECK;

/* Build a client handshake "user[:pass]" CAP NUL into out. Returns its length, or 0 if it does
 * not fit in outlen bytes or user/pass contain a NUL. pass may be NULL or empty. */
size_t kipc_hs_build(uint8_t *out, size_t outlen, const char *user, const char *pass, uint8_t cap);

/* The capability both sides use: the smaller of the two. */
static inline uint8_t kipc_cap_negotiate(uint8_t peer, uint8_t ours) { return peer < ours ? peer : ours; }

/* Name of a message type for logs ("async", "sync", "response", "?"). */
const char *kipc_type_name(int type);

#endif

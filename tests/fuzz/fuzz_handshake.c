/* fuzz_handshake.c: libFuzzer target for kipc_hs_parse, the client handshake parser.
 * The input is what a client sent before its first message. Checks: the result agrees with
 * where the first NUL is (and the 1 KiB cap; a second NUL alone right after it, behind
 * credentials that end in no capability byte, is capability 0 given); on success every output lies inside the bytes
 * consumed, the pieces add up to the consumed length, a shorter prefix is QG_AGAIN, and
 * kipc_hs_build of the parsed credentials parses back to the same credentials. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kipc.h"
#include "check.h"

/* [q, q+len) inside [lo, hi]. */
static int inside(const void *q, size_t len, const uint8_t *lo, const uint8_t *hi)
{
    const uint8_t *b = q;
    return b >= lo && b <= hi && len <= (size_t)(hi - b);
}

static char *dup_text(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    CHECK(d);
    if (len)
        memcpy(d, s, len);
    d[len] = 0;
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const size_t cap = KIPC_HS_MAX_DEFAULT;
    struct kipc_hs hs;
    memset(&hs, 0xa5, sizeof hs);
    qg_status st = kipc_hs_parse(data, size, cap, &hs);

    size_t lim = size < cap ? size : cap;
    const uint8_t *nul = lim ? memchr(data, 0, lim) : NULL;
    if (!nul) {
        CHECK(st == (size >= cap ? QG_ERR : QG_AGAIN));
        return 0;
    }
    /* consumed: exactly up to and including the first NUL, within the cap; and a second NUL
     * alone right after it ("user:pw" 00 00: capability 0 given), refused when that NUL is past
     * the cap (not taken for a handshake of cap bytes, the NUL left to misframe what follows) */
    size_t used = (size_t)(nul - data) + 1;
    int cap0 = size == used + 1 && data[used] == 0 && (used == 1 || data[used - 2] >= 32);
    if (cap0 && used + 1 > cap) {
        CHECK(st == QG_ERR);
        return 0;
    }
    CHECK(st == QG_OK);
    CHECK(hs.len == used + (size_t)cap0);
    CHECK(hs.len <= size && hs.len <= cap);
    const uint8_t *end = data + used - 1; /* the first NUL: credentials lie before it */

    CHECK(hs.cap < 32);
    CHECK(hs.user == (const char *)data);
    CHECK(inside(hs.user, hs.user_len, data, end));
    CHECK(inside(hs.pass, hs.pass_len, data, end));
    CHECK(!memchr(hs.user, ':', hs.user_len));
    CHECK(!memchr(hs.user, 0, hs.user_len) && !memchr(hs.pass, 0, hs.pass_len));

    size_t content = used - 1, cap_bytes = hs.cap ? 1 : 0;
    if (hs.cap)
        CHECK(data[content - 1] == hs.cap);
    else
        CHECK(content == 0 || data[content - 1] >= 32);
    int colon = hs.user_len < content - cap_bytes;
    if (colon) {
        CHECK(data[hs.user_len] == ':');
        CHECK((const uint8_t *)hs.pass == data + hs.user_len + 1);
    }
    CHECK(hs.user_len + (size_t)colon + hs.pass_len + cap_bytes == content);

    /* incremental arrival: a byte fewer than the first NUL is not yet a handshake (capability 0
     * given: the first NUL alone is a pre-2.6 one, of the same credentials) */
    struct kipc_hs hs2;
    CHECK(kipc_hs_parse(data, used - 1, cap, &hs2) == QG_AGAIN);
    if (cap0)
        CHECK(kipc_hs_parse(data, used, cap, &hs2) == QG_OK && hs2.len == used && hs2.cap == 0 &&
              hs2.user_len == hs.user_len && hs2.pass_len == hs.pass_len);
    /* the same bytes under a cap that cuts off the NUL */
    CHECK(kipc_hs_parse(data, size, used - 1, &hs2) == QG_ERR);

    /* round trip through the builder (cap 0 is a pre-2.6 client: nothing to build) */
    char *user = dup_text(hs.user, hs.user_len), *pass = dup_text(hs.pass, hs.pass_len);
    uint8_t out[KIPC_HS_MAX_DEFAULT + 8];
    uint8_t bcap = hs.cap ? hs.cap : 3;
    size_t bl = kipc_hs_build(out, sizeof out, user, pass, bcap);
    CHECK(bl == hs.user_len + (hs.pass_len ? 1 + hs.pass_len : 0) + 2);
    CHECK(kipc_hs_parse(out, bl, sizeof out, &hs2) == QG_OK);
    CHECK(hs2.len == bl && hs2.cap == bcap);
    CHECK(hs2.user_len == hs.user_len && !memcmp(hs2.user, user, hs.user_len));
    CHECK(hs2.pass_len == hs.pass_len && !memcmp(hs2.pass, pass, hs.pass_len));
    /* a buffer one byte short is refused */
    CHECK(kipc_hs_build(out, bl - 1, user, pass, bcap) == 0);
    free(user);
    free(pass);
    return 0;
}

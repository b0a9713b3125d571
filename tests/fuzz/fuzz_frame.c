/* fuzz_frame.c: libFuzzer target for kipc_frame_check (and kipc_hdr_parse under it).
 * The input is a byte stream as read from a socket: frames are taken from its front in a loop
 * with max_message 1 MiB, as the gateway's read path does. Checks the need/len invariants:
 * QG_AGAIN asks for more than is there (8 for a header, then the whole message), QG_OK means
 * h.len bytes (9..max) are present and the header fields are in range, QG_ERR gives a reason
 * and only ever for a whole header. Each complete uncompressed body also goes through
 * kvalidate_check (it must not crash; any verdict is fine). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "kipc.h"
#include "check.h"

#define MAX_MESSAGE ((uint64_t)1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        const uint8_t *p = data + off;
        size_t n = size - off;
        struct kipc_hdr h;
        memset(&h, 0x5a, sizeof h);
        size_t need = 0;
        const char *why = NULL;
        qg_status st = kipc_frame_check(p, n, MAX_MESSAGE, &h, &need, &why);

        /* the header parser alone agrees */
        struct kipc_hdr h2;
        const char *why2 = NULL;
        qg_status st2 = kipc_hdr_parse(p, n, MAX_MESSAGE, &h2, &why2);

        if (st == QG_ERR) {
            CHECK(st2 == QG_ERR);
            CHECK(n >= KIPC_HDR_LEN);
            CHECK(why && *why && why2 && !strcmp(why, why2));
            /* only a header q would reject: bad flag bytes or a length out of 9..max */
            uint64_t len = (uint64_t)qg_ld32o(p + 4, p[0]) | ((uint64_t)p[3] << 32);
            CHECK(p[0] > 1 || p[1] > KIPC_RESPONSE || p[2] > 1 || len < 9 || len > MAX_MESSAGE ||
                  (p[2] && len < 13));
            return 0;
        }
        CHECK(st == QG_OK || st == QG_AGAIN);
        if (n < KIPC_HDR_LEN) {
            CHECK(st == QG_AGAIN && st2 == QG_AGAIN && need == KIPC_HDR_LEN);
            return 0;
        }
        CHECK(st2 == QG_OK);
        CHECK(h.le == p[0] && h.type == p[1] && h.compressed == p[2]);
        CHECK(h.le <= 1 && h.type <= KIPC_RESPONSE && h.compressed <= 1);
        CHECK(h.len == h2.len && h.le == h2.le && h.type == h2.type && h.compressed == h2.compressed);
        CHECK(h.len >= KIPC_HDR_LEN + 1 + (h.compressed ? 4u : 0u) && h.len <= MAX_MESSAGE);
        CHECK(need == h.len);
        if (st == QG_AGAIN) {
            CHECK(need > n);
            return 0;
        }
        CHECK(need <= n);

        /* the same frame arriving a byte at a time: AGAIN with the same need until complete */
        size_t part = h.len - 1;
        CHECK(kipc_frame_check(p, part, MAX_MESSAGE, &h2, &need, &why) == QG_AGAIN && need == h.len);
        CHECK(kipc_frame_check(p, KIPC_HDR_LEN - 1, MAX_MESSAGE, &h2, &need, &why) == QG_AGAIN &&
              need == KIPC_HDR_LEN);
        /* and refused by a smaller max_message */
        why = NULL;
        CHECK(kipc_frame_check(p, n, h.len - 1, &h2, &need, &why) == QG_ERR && why);

        if (!h.compressed) {
            struct kerr e;
            if (kvalidate_check(p + KIPC_HDR_LEN, (size_t)h.len - KIPC_HDR_LEN, h.le, NULL, &e) != QG_OK)
                CHECK(e.why && e.off <= (size_t)h.len - KIPC_HDR_LEN);
        }
        off += (size_t)h.len;
    }
    return 0;
}

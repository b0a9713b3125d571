/* fuzz_kzip.c: libFuzzer target for the IPC decompressor and compressor.
 * 1. The input, as is, is a whole compressed message (header included): kzip_uncompressed_len
 *    gives the size it declares; if that is 9..4 MiB, exactly that many bytes are allocated
 *    and kzip_decompress must stay inside both buffers (ASan checks), and on success produce a
 *    plain header: byte order and type kept, byte 2 = 0, the declared length.
 * 2. The input, behind a little-endian 8-byte header of ours, is a plain message: when
 *    kzip_compress makes it smaller (into a buffer of exactly t/2 bytes), the result must be a
 *    well-formed compressed header and decompress back to exactly the message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kipc.h"
#include "kzip.h"
#include "check.h"

#define MAX_PLAIN ((size_t)1 << 22)

static void decompress_as_is(const uint8_t *c, size_t clen)
{
    size_t n = kzip_uncompressed_len(c, clen);
    if (clen < 12)
        CHECK(n == 0);
    if (n < 9 || n > MAX_PLAIN)
        return;
    uint8_t *out = malloc(n);
    CHECK(out);
    const char *why = NULL;
    if (kzip_decompress(c, clen, out, n, &why) == QG_OK) {
        CHECK(out[0] == c[0] && out[1] == c[1] && out[2] == 0 && out[3] == c[3]);
        CHECK(qg_ld32o(out + 4, c[0]) == (uint32_t)n);
    } else {
        CHECK(why && *why);
    }
    free(out);
}

static void round_trip(const uint8_t *data, size_t size, int le)
{
    size_t t = KIPC_HDR_LEN + size;
    if (t > INT32_MAX)
        return;
    uint8_t *m = malloc(t);
    CHECK(m);
    kipc_hdr_write(m, KIPC_RESPONSE, 0, t);
    if (!le) { /* the same message from a big-endian peer */
        m[0] = 0;
        m[4] = (uint8_t)(t >> 24); m[5] = (uint8_t)(t >> 16); m[6] = (uint8_t)(t >> 8); m[7] = (uint8_t)t;
    }
    memcpy(m + KIPC_HDR_LEN, data, size);

    size_t zcap = t / 2;
    uint8_t *z = malloc(zcap ? zcap : 1);
    CHECK(z);
    size_t zl = kzip_compress(m, t, z);
    if (zl) {
        CHECK(zl <= zcap && zl >= 13);
        CHECK(z[0] == le && z[1] == KIPC_RESPONSE && z[2] == 1 && z[3] == 0);
        CHECK(qg_ld32o(z + 4, le) == (uint32_t)zl);
        CHECK(kzip_uncompressed_len(z, zl) == t);
        /* the compressed message passes the frame check the gateway applies */
        struct kipc_hdr h;
        size_t need;
        const char *why = NULL;
        CHECK(kipc_frame_check(z, zl, UINT32_MAX, &h, &need, &why) == QG_OK && h.len == zl);

        uint8_t *back = malloc(t);
        CHECK(back);
        why = NULL;
        qg_status st = kzip_decompress(z, zl, back, t, &why);
        if (st != QG_OK) {
            fprintf(stderr, "fuzz_kzip: decompress(compress(x)) failed: %s\n", why ? why : "?");
            abort();
        }
        if (memcmp(back, m, t)) {
            size_t i = 0;
            while (back[i] == m[i])
                i++;
            fprintf(stderr, "fuzz_kzip: decompress(compress(x)) differs at byte %zu of %zu\n", i, t);
            abort();
        }
        free(back);
    }
    free(z);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decompress_as_is(data, size);
    round_trip(data, size, 1);
    round_trip(data, size, 0);
    return 0;
}

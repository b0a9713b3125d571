/* test_kipc.c: header, framing and handshake parsing, at every split point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kipc.h"
#include "tutil.h"

static void expect_hdr_err(const char *hex, uint64_t max, const char *why)
{
    size_t n;
    uint8_t *b = tutil_unhex(hex, &n);
    struct kipc_hdr h;
    const char *w = NULL;
    assert_int_equal(kipc_hdr_parse(b, n, max, &h, &w), QG_ERR);
    assert_string_equal(w, why);
    free(b);
}

static void test_header(void **state)
{
    (void)state;
    struct kipc_hdr h;
    const char *why;
    /* h"1+1": little-endian sync, 17 bytes */
    static const uint8_t le[] = {1, 1, 0, 0, 0x11, 0, 0, 0};
    assert_int_equal(kipc_hdr_parse(le, 8, 1 << 20, &h, &why), QG_OK);
    assert_int_equal(h.le, 1);
    assert_int_equal(h.type, KIPC_SYNC);
    assert_int_equal(h.compressed, 0);
    assert_int_equal(h.len, 17);
    /* the same header from a big-endian peer */
    static const uint8_t be[] = {0, 2, 1, 0, 0, 0, 0x01, 0x02};
    assert_int_equal(kipc_hdr_parse(be, 8, 1 << 20, &h, &why), QG_OK);
    assert_int_equal(h.le, 0);
    assert_int_equal(h.type, KIPC_RESPONSE);
    assert_int_equal(h.compressed, 1);
    assert_int_equal(h.len, 258);
    /* byte 3 holds length bits 32..39, but only from a peer of capability 6 */
    static const uint8_t big[] = {1, 2, 0, 1, 0, 0, 0, 0};
    assert_int_equal(kipc_hdr_parse_cap(big, 8, UINT64_MAX, KIPC_CAP_BIG, &h, &why), QG_OK);
    assert_true(h.len == (1ULL << 32));
    for (int cap = 0; cap < KIPC_CAP_BIG; cap++) {
        assert_int_equal(kipc_hdr_parse_cap(big, 8, UINT64_MAX, cap, &h, &why), QG_ERR);
        assert_string_equal(why, "byte 3 set (length over 4 GiB needs capability 6)");
    }
    assert_int_equal(kipc_hdr_parse(big, 8, UINT64_MAX, &h, &why), QG_ERR);
    /* fewer than 8 bytes: wait */
    for (size_t n = 0; n < 8; n++)
        assert_int_equal(kipc_hdr_parse(le, n, 1 << 20, &h, &why), QG_AGAIN);

    expect_hdr_err("0201000011000000", 1 << 20, "byte order not 0 or 1");
    expect_hdr_err("0103000011000000", 1 << 20, "message type not 0, 1 or 2");
    expect_hdr_err("0101020011000000", 1 << 20, "compression flag not 0 or 1");
    expect_hdr_err("0101000008000000", 1 << 20, "length too small");
    expect_hdr_err("010101000c000000", 1 << 20, "length too small");
    expect_hdr_err("0101000011000000", 16, "length over max_message");
    expect_hdr_err("0101000100000000", UINT32_MAX, "byte 3 set (length over 4 GiB needs capability 6)");
    expect_hdr_err("01010080ffffffff", UINT64_MAX, "byte 3 set (length over 4 GiB needs capability 6)");
}

static void test_header_write(void **state)
{
    (void)state;
    uint8_t b[8];
    kipc_hdr_write(b, KIPC_RESPONSE, 0, 17);
    assert_memory_equal(b, "\x01\x02\x00\x00\x11\x00\x00\x00", 8);
    kipc_hdr_write(b, KIPC_ASYNC, 1, (5ULL << 32) + 3);
    assert_memory_equal(b, "\x01\x00\x01\x05\x03\x00\x00\x00", 8);
}

/* Three messages back to back, fed to the framer split at every pair of points. */
static void test_frame_every_split(void **state)
{
    (void)state;
    static const uint8_t stream[] = {
        1, 1, 0, 0, 17, 0, 0, 0, 0x0a, 0, 3, 0, 0, 0, '1', '+', '1',   /* h"1+1" */
        1, 2, 0, 0, 17, 0, 0, 0, 0xf9, 2, 0, 0, 0, 0, 0, 0, 0,         /* 2 */
        1, 0, 0, 0, 14, 0, 0, 0, 0x80, 't', 'y', 'p', 'e', 0,          /* 'type */
    };
    static const size_t lens[] = {17, 17, 14};
    const size_t total = sizeof stream;
    for (size_t a = 0; a <= total; a++) {
        for (size_t b = a; b <= total; b++) {
            /* deliver [0,a), then [a,b), then [b,total) into a buffer, framing after each */
            uint8_t buf[64];
            size_t have = 0, off = 0, got = 0;
            size_t cuts[] = {a, b, total};
            size_t pos = 0;
            for (int k = 0; k < 3; k++) {
                memcpy(buf + have, stream + pos, cuts[k] - pos);
                have += cuts[k] - pos;
                pos = cuts[k];
                for (;;) {
                    struct kipc_hdr h;
                    size_t need;
                    const char *why;
                    qg_status st = kipc_frame_check(buf + off, have - off, 1024, &h, &need, &why);
                    assert_int_not_equal(st, QG_ERR);
                    if (st == QG_AGAIN) {
                        assert_true(need > have - off);
                        break;
                    }
                    assert_int_equal(h.len, lens[got]);
                    assert_memory_equal(buf + off, stream + (got == 0 ? 0 : got == 1 ? 17 : 34), h.len);
                    off += h.len;
                    got++;
                }
            }
            assert_int_equal(got, 3);
            assert_int_equal(off, total);
        }
    }
}

static void test_handshake_every_split(void **state)
{
    (void)state;
    static const char hs[] = "user:pa:ss\x03";
    const size_t n = sizeof hs; /* includes the NUL */
    for (size_t cut = 0; cut < n; cut++) {
        struct kipc_hs h;
        assert_int_equal(kipc_hs_parse((const uint8_t *)hs, cut, KIPC_HS_MAX_DEFAULT, &h), QG_AGAIN);
    }
    struct kipc_hs h;
    assert_int_equal(kipc_hs_parse((const uint8_t *)hs, n, KIPC_HS_MAX_DEFAULT, &h), QG_OK);
    assert_int_equal(h.len, n);
    assert_int_equal(h.cap, 3);
    assert_int_equal(h.user_len, 4);
    assert_memory_equal(h.user, "user", 4);
    assert_int_equal(h.pass_len, 5);
    assert_memory_equal(h.pass, "pa:ss", 5);
}

static void test_handshake_forms(void **state)
{
    (void)state;
    struct kipc_hs h;
    static const struct {
        const char *bytes;
        size_t n, len;
        int cap;
        size_t user_len, pass_len;
    } cases[] = {
        {"hello\x03", 7, 7, 3, 5, 0},  /* "hello\3\0": user only (forum thread 15286) */
        {"bob:pw", 7, 7, 0, 3, 2},      /* pre-2.6 client: no capability byte */
        {"\x06", 2, 2, 6, 0, 0},        /* empty credentials with capability 6 */
        {"a\x03\0\x01\x01", 5, 3, 3, 1, 0}, /* bytes after the NUL are not the handshake's */
        /* capability 0 given: "bob:pw" 00 00, both NULs the handshake's (the second was read as
         * the first byte of a message, big-endian, and the first request never answered) */
        {"bob:pw\0", 8, 8, 0, 3, 2},
        {"\0", 2, 2, 0, 0, 0},
        {"bob:pw\x03\0", 9, 8, 3, 3, 2}, /* capability 3, then a NUL: not capability 0 given */
        /* ... but a message right behind a pre-2.6 handshake stays a message */
        {"bob:pw\0\0\x01\0\0\x0e\0\0\0", 15, 7, 0, 3, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(kipc_hs_parse((const uint8_t *)cases[i].bytes, cases[i].n, 1024, &h), QG_OK);
        assert_int_equal(h.len, cases[i].len);
        assert_int_equal(h.cap, cases[i].cap);
        assert_int_equal(h.user_len, cases[i].user_len);
        assert_int_equal(h.pass_len, cases[i].pass_len);
    }
    /* over the cap without a NUL: refused; at the cap with a NUL in it: fine */
    uint8_t big[2048];
    memset(big, 'x', sizeof big);
    assert_int_equal(kipc_hs_parse(big, 1023, 1024, &h), QG_AGAIN);
    assert_int_equal(kipc_hs_parse(big, 1024, 1024, &h), QG_ERR);
    assert_int_equal(kipc_hs_parse(big, 2048, 1024, &h), QG_ERR);
    big[1023] = 0;
    assert_int_equal(kipc_hs_parse(big, 2048, 1024, &h), QG_OK);
    assert_int_equal(h.len, 1024);
    /* capability 0 given, 1025 bytes with nothing behind: over the cap by its last NUL, refused
     * (it was taken for a 1024-byte handshake, that NUL left as a message's first byte) */
    big[1024] = 0;
    assert_int_equal(kipc_hs_parse(big, 1025, 1024, &h), QG_ERR);
    big[1022] = 0; /* 1024 bytes: fine */
    assert_int_equal(kipc_hs_parse(big, 1024, 1024, &h), QG_OK);
    assert_int_equal(h.len, 1024);
    assert_int_equal(h.cap, 0);
}

static void test_handshake_build(void **state)
{
    (void)state;
    uint8_t b[32];
    size_t n = kipc_hs_build(b, sizeof b, "user", "pass", 3);
    assert_int_equal(n, 11);
    assert_memory_equal(b, "\x75\x73\x65\x72\x3a\x70\x61\x73\x73\x03\x00", 11);
    n = kipc_hs_build(b, sizeof b, "user", NULL, 3);
    assert_int_equal(n, 6);
    assert_memory_equal(b, "user\x03\x00", 6);
    assert_int_equal(kipc_hs_build(b, 5, "user", NULL, 3), 0);
    /* what we build, we parse back */
    struct kipc_hs h;
    n = kipc_hs_build(b, sizeof b, "ann", "s3:cret", 3);
    assert_int_equal(kipc_hs_parse(b, n, 1024, &h), QG_OK);
    assert_int_equal(h.user_len, 3);
    assert_int_equal(h.pass_len, 7);
    assert_int_equal(h.cap, 3);
}

static void test_capability(void **state)
{
    (void)state;
    for (int c = 0; c <= 6; c++)
        assert_int_equal(kipc_cap_negotiate((uint8_t)c, KIPC_CAP_MAX), c < 3 ? c : 3);
    assert_string_equal(kipc_type_name(KIPC_ASYNC), "async");
    assert_string_equal(kipc_type_name(7), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_header_write),
        cmocka_unit_test(test_frame_every_split),
        cmocka_unit_test(test_handshake_every_split),
        cmocka_unit_test(test_handshake_forms),
        cmocka_unit_test(test_handshake_build),
        cmocka_unit_test(test_capability),
    };
    return cmocka_run_group_tests_name("kipc", tests, NULL, NULL);
}

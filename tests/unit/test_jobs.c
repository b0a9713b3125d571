/* test_jobs.c: the peeks the loop makes at a message (routes), and the reader's validation
 * job handing back a compressed route decompressed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "pool.h"
#include "tutil.h"

/* (name; grp; query) as a sync message; name a symbol (`x) or a string ("x") */
static uint8_t *route_msg(const char *name, int name_is_sym, K grp, K query, size_t *len)
{
    K l = k_list(3);
    kK(l)[0] = name_is_sym ? k_sym(name) : k_str(name, strlen(name));
    kK(l)[1] = grp;
    kK(l)[2] = query;
    uint8_t *m = kcodec_encode_msg(l, KIPC_SYNC, len);
    k_free(l);
    assert_non_null(m);
    return m;
}

static void test_peek_route(void **state)
{
    (void)state;
    char grp[64];
    size_t len, qoff = 0, qlen;
    for (int sym = 0; sym < 2; sym++) {
        uint8_t *m = route_msg(".qgate.on", sym, k_sym("hdb"), k_str("select from t", 13), &len);
        assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), 1);
        assert_string_equal(grp, "hdb");
        /* the query's bytes are the tail: exactly what q would serialise for the query alone */
        K q = k_str("select from t", 13);
        uint8_t *alone = kcodec_encode_msg(q, KIPC_SYNC, &qlen);
        k_free(q);
        assert_int_equal(len - qoff, qlen - 8);
        assert_memory_equal(m + qoff, alone + 8, qlen - 8);
        free(alone);
        free(m);
    }
    /* not routes: another name, a plain string, a compressed message, a command */
    uint8_t *m = route_msg(".qgate.one", 1, k_sym("hdb"), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), 0);
    free(m);
    K s = k_str(".qgate.on", 9);
    m = kcodec_encode_msg(s, KIPC_SYNC, &len);
    k_free(s);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), 0);
    m[2] = 1;
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), 0);
    free(m);
    /* shaped wrong: the group a string, a name too long, two items, four */
    m = route_msg(".qgate.on", 1, k_str("hdb", 3), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), -1);
    free(m);
    char longname[100];
    memset(longname, 'g', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    m = route_msg(".qgate.on", 1, k_sym(longname), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), -1);
    free(m);
    K two = k_list(2);
    kK(two)[0] = k_sym(".qgate.on");
    kK(two)[1] = k_sym("hdb");
    m = kcodec_encode_msg(two, KIPC_SYNC, &len);
    k_free(two);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), -1);
    free(m);
    K four = k_list(4);
    kK(four)[0] = k_sym(".qgate.on");
    kK(four)[1] = k_sym("hdb");
    kK(four)[2] = k_str("x", 1);
    kK(four)[3] = k_str("y", 1);
    m = kcodec_encode_msg(four, KIPC_SYNC, &len);
    k_free(four);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff), -1);
    /* every prefix of a route is no route, or a malformed one: never a read past the end */
    for (size_t n = 0; n < len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, m, n);
        assert_true(jobs_peek_route(p, n, grp, sizeof grp, &qoff) <= 0);
        free(p);
    }
    free(m);
}

/* A compressed route (a remote client's big query) comes back from the reader decompressed,
 * so the loop can take it apart; any other compressed message comes back as it was sent. */
static void test_validate_hands_back_compressed_route(void **state)
{
    (void)state;
    char text[6000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + (i / 11) % 4);
    size_t len;
    uint8_t *plain = route_msg(".qgate.on", 1, k_sym("hdb"), k_str(text, sizeof text), &len);
    for (int is_route = 1; is_route >= 0; is_route--) {
        if (!is_route)
            memcpy(plain + 8 + 6 + 1, ".qgate.ox", 9); /* (`.qgate.ox; ...): a plain call */
        uint8_t *z = malloc(len);
        size_t zlen = kzip_compress(plain, len, z);
        assert_true(zlen > 0 && zlen < len / 2);
        struct job *j = job_new(job_validate_msg, 0);
        j->in = z;
        j->in_len = zlen;
        j->aux[0] = 1 << 20;
        job_validate_msg(j);
        assert_int_equal(j->result, 0);
        if (is_route) {
            assert_non_null(j->out);
            assert_int_equal(j->out_len, len);
            assert_memory_equal(j->out, plain, len); /* byte 2 = 0, the plain length */
            char grp[64];
            size_t qoff;
            assert_int_equal(jobs_peek_route(j->out, j->out_len, grp, sizeof grp, &qoff), 1);
        } else {
            assert_null(j->out);
        }
        job_free(j);
    }
    free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peek_route),
        cmocka_unit_test(test_validate_hands_back_compressed_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_pipeline.c: what pipeline_wait learns of a query: its key (the same bytes, the same
 * key; none to learn when the group does not learn, or the body is over 4 KiB), the slowest of
 * its recent runs (a slow run forgotten over fast ones), a query that calls back never
 * learned fast, and a newer query taking an older one's slot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "gw.h"
#include "kipc.h"
#include "worker.h"

static struct group *group_new(int pipeline, int64_t wait_ms)
{
    struct group *grp = calloc(1, sizeof *grp);
    assert_non_null(grp);
    grp->cfg.pipeline = pipeline;
    grp->cfg.pipeline_wait = wait_ms;
    return grp;
}

/* A sync message carrying the char vector s, as r's bytes. */
static void req_of(struct req *r, uint8_t *buf, size_t cap, const char *s)
{
    size_t n = strlen(s), len = 8 + 6 + n;
    assert_true(len <= cap);
    memset(buf, 0, 14);
    buf[0] = 1;
    buf[1] = KIPC_SYNC;
    memcpy(buf + 4, &(uint32_t){(uint32_t)len}, 4);
    buf[8] = 10;
    memcpy(buf + 10, &(uint32_t){(uint32_t)n}, 4);
    memcpy(buf + 14, s, n);
    *r = (struct req){.type = KIPC_SYNC, .msg = buf, .len = len};
}

static void test_key(void **state)
{
    (void)state;
    static struct gw g; /* no hooks: the hash of the bytes */
    struct group *grp = group_new(3, 1);
    uint8_t a[64], b[64], c[64];
    struct req ra, rb, rc;
    req_of(&ra, a, sizeof a, "select from t where sym=`a");
    req_of(&rb, b, sizeof b, "select from t where sym=`a");
    req_of(&rc, c, sizeof c, "select from t where sym=`b");
    uint64_t ka = pipeline_key(&g, grp, &ra);
    assert_int_not_equal(ka, 0);
    assert_int_equal(ka, pipeline_key(&g, grp, &rb));
    assert_int_not_equal(ka, pipeline_key(&g, grp, &rc));
    /* a routed request: its query's bytes start at off */
    uint8_t d[80];
    memset(d, 0xee, 16);
    struct req rd;
    req_of(&rd, d + 16, sizeof d - 16, "select from t where sym=`a");
    rd.msg = d;
    rd.off = 16;
    assert_int_equal(ka, pipeline_key(&g, grp, &rd));
    /* nothing to learn: no pipelining, no pipeline_wait, a session pool, over 4 KiB */
    grp->cfg.pipeline = 1;
    assert_int_equal(pipeline_key(&g, grp, &ra), 0);
    grp->cfg.pipeline = 3;
    grp->cfg.pipeline_wait = 0;
    assert_int_equal(pipeline_key(&g, grp, &ra), 0);
    grp->cfg.pipeline_wait = 1;
    grp->cfg.pool_mode = CFG_POOL_SESSION;
    assert_int_equal(pipeline_key(&g, grp, &ra), 0);
    grp->cfg.pool_mode = CFG_POOL_REQUEST;
    static uint8_t big[5000];
    char *s = malloc(4200);
    memset(s, 'x', 4199);
    s[4199] = 0;
    struct req rbig;
    req_of(&rbig, big, sizeof big, s);
    free(s);
    assert_int_equal(pipeline_key(&g, grp, &rbig), 0);
    free(grp);
}

static void test_learn(void **state)
{
    (void)state;
    struct group *grp = group_new(3, 1);
    uint64_t k = 0x1234567;
    assert_int_equal(pipeline_learned_us(grp, k), -1);
    assert_int_equal(pipeline_learned_us(grp, 0), -1);
    pipeline_learn_loop(grp, 0, 10); /* no key: nothing learned */
    assert_int_equal(pipeline_learned_us(grp, 0), -1);
    pipeline_learn_loop(grp, k, 200);
    assert_int_equal(pipeline_learned_us(grp, k), 200);
    pipeline_learn_loop(grp, k, 300); /* slower: the slowest counts */
    assert_int_equal(pipeline_learned_us(grp, k), 300);
    pipeline_learn_loop(grp, k, 100); /* faster: forgotten by an eighth a run */
    assert_int_equal(pipeline_learned_us(grp, k), 300 - 300 / 8);
    /* one slow run (8 ms), then fast ones: it is learned fast (under 1 ms) again within 20 */
    pipeline_learn_loop(grp, k, 8000);
    int runs = 0;
    while (pipeline_learned_us(grp, k) >= 1000 && runs < 100) {
        pipeline_learn_loop(grp, k, 50);
        runs++;
    }
    assert_true(runs > 10 && runs <= 20);
    /* a key with the same slot takes it: the older is not learned any more */
    uint64_t k2 = k + PIPELINE_LEARNED;
    pipeline_learn_loop(grp, k2, 70);
    assert_int_equal(pipeline_learned_us(grp, k2), 70);
    assert_int_equal(pipeline_learned_us(grp, k), -1);
    /* a query that called back is never learned fast again, however fast its runs */
    pipeline_learn_loop(grp, k2, 70);
    pipeline_calls_back_loop(grp, k2);
    assert_int_equal(pipeline_learned_us(grp, k2), -1);
    for (int i = 0; i < 100; i++)
        pipeline_learn_loop(grp, k2, 10);
    assert_int_equal(pipeline_learned_us(grp, k2), -1);
    pipeline_calls_back_loop(grp, 0); /* no key: nothing */
    /* times out of range are held in range */
    pipeline_learn_loop(grp, k, -5);
    assert_int_equal(pipeline_learned_us(grp, k), 0);
    pipeline_learn_loop(grp, k, INT64_MAX);
    assert_int_equal(pipeline_learned_us(grp, k), UINT32_MAX);
    free(grp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_learn),
    };
    return cmocka_run_group_tests_name("pipeline", tests, NULL, NULL);
}

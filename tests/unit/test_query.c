/* test_query.c: what a group learns of each query (src/core/query.c): its key (the same bytes,
 * the same key; pipelining learns none when the group does not pipeline or learn, or the query
 * is over 4 KiB), the slowest of its recent runs (a slow run forgotten over fast ones), a query
 * that calls back never learned fast, a newer query taking an older one's slot; and its totals
 * for .qgate.queries[]: its text, calls, errors, waits and runs, bytes, a reset. */
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
#include "query.h"
#include "worker.h"

static struct group *group_new(int pipeline, int64_t wait_ms)
{
    struct group *grp = calloc(1, sizeof *grp);
    assert_non_null(grp);
    grp->cfg.pipeline = pipeline;
    grp->cfg.pipeline_wait = wait_ms;
    grp->queries = calloc(QUERY_SLOTS, sizeof *grp->queries);
    assert_non_null(grp->queries);
    return grp;
}

static void group_free(struct group *grp)
{
    free(grp->queries);
    free(grp);
}

/* The key pipelining learns r's query by, as run.c takes it. */
static uint64_t learn_key(const struct gw *g, const struct group *grp, const struct req *r)
{
    return group_learn_key(grp, query_key(g, r->msg + r->off, r->len), r->len);
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
    uint64_t ka = learn_key(&g, grp, &ra);
    assert_int_not_equal(ka, 0);
    assert_int_equal(ka, learn_key(&g, grp, &rb));
    assert_int_not_equal(ka, learn_key(&g, grp, &rc));
    /* a routed request: its query's bytes start at off */
    uint8_t d[80];
    memset(d, 0xee, 16);
    struct req rd;
    req_of(&rd, d + 16, sizeof d - 16, "select from t where sym=`a");
    rd.msg = d;
    rd.off = 16;
    assert_int_equal(ka, learn_key(&g, grp, &rd));
    /* nothing to learn: no pipelining, no pipeline_wait, a session pool, over 4 KiB */
    grp->cfg.pipeline = 1;
    assert_int_equal(learn_key(&g, grp, &ra), 0);
    grp->cfg.pipeline = 3;
    grp->cfg.pipeline_wait = 0;
    assert_int_equal(learn_key(&g, grp, &ra), 0);
    grp->cfg.pipeline_wait = 1;
    grp->cfg.pool_mode = CFG_POOL_SESSION;
    assert_int_equal(learn_key(&g, grp, &ra), 0);
    grp->cfg.pool_mode = CFG_POOL_REQUEST;
    static uint8_t big[5000];
    char *s = malloc(4200);
    memset(s, 'x', 4199);
    s[4199] = 0;
    struct req rbig;
    req_of(&rbig, big, sizeof big, s);
    free(s);
    assert_int_equal(learn_key(&g, grp, &rbig), 0);
    group_free(grp);
}

static void test_learn(void **state)
{
    (void)state;
    struct group *grp = group_new(3, 1);
    uint64_t k = 0x1234567;
    assert_int_equal(query_learned_us(grp->queries, k), -1);
    assert_int_equal(query_learned_us(grp->queries, 0), -1);
    query_learn_loop(grp->queries, 0, 10); /* no key: nothing learned */
    assert_int_equal(query_learned_us(grp->queries, 0), -1);
    query_learn_loop(grp->queries, k, 200);
    assert_int_equal(query_learned_us(grp->queries, k), 200);
    query_learn_loop(grp->queries, k, 300); /* slower: the slowest counts */
    assert_int_equal(query_learned_us(grp->queries, k), 300);
    query_learn_loop(grp->queries, k, 100); /* faster: forgotten by an eighth a run */
    assert_int_equal(query_learned_us(grp->queries, k), 300 - 300 / 8);
    /* one slow run (8 ms), then fast ones: it is learned fast (under 1 ms) again within 20 */
    query_learn_loop(grp->queries, k, 8000);
    int runs = 0;
    while (query_learned_us(grp->queries, k) >= 1000 && runs < 100) {
        query_learn_loop(grp->queries, k, 50);
        runs++;
    }
    assert_true(runs > 10 && runs <= 20);
    /* a key with the same slot takes it: the older is not learned any more */
    uint64_t k2 = k + QUERY_SLOTS;
    query_learn_loop(grp->queries, k2, 70);
    assert_int_equal(query_learned_us(grp->queries, k2), 70);
    assert_int_equal(query_learned_us(grp->queries, k), -1);
    /* a query that called back is never learned fast again, however fast its runs */
    query_learn_loop(grp->queries, k2, 70);
    query_calls_back_loop(grp->queries, k2);
    assert_int_equal(query_learned_us(grp->queries, k2), -1);
    for (int i = 0; i < 100; i++)
        query_learn_loop(grp->queries, k2, 10);
    assert_int_equal(query_learned_us(grp->queries, k2), -1);
    query_calls_back_loop(grp->queries, 0); /* no key: nothing */
    /* times out of range are held in range */
    query_learn_loop(grp->queries, k, -5);
    assert_int_equal(query_learned_us(grp->queries, k), 0);
    query_learn_loop(grp->queries, k, INT64_MAX);
    assert_int_equal(query_learned_us(grp->queries, k), UINT32_MAX);
    group_free(grp);
}

/* A query's totals: its text from its first bytes (a string, a symbol, a call's name), its calls,
 * errors, waits and runs (summed, and the longest), bytes; a run of another query that takes
 * its slot starts afresh; a reset forgets the totals, not what pipelining learned. */
static void test_totals(void **state)
{
    (void)state;
    static struct gw g;
    struct group *grp = group_new(1, 0);
    uint8_t a[64];
    struct req ra;
    req_of(&ra, a, sizeof a, "select from t where sym=`a");
    uint64_t k = query_key(&g, ra.msg, ra.len);
    query_begin_loop(grp->queries, k, ra.msg, ra.len);
    const struct qslot *e = &grp->queries[k & (QUERY_SLOTS - 1)];
    assert_int_equal(e->key, k);
    assert_string_equal(e->text, "select from t where sym=`a");
    assert_int_equal(e->calls, 0);
    query_end_loop(grp->queries, k, 0, 100, 2000, 30, 400, 7);
    query_end_loop(grp->queries, k, 1, 300, 1000, 30, 50, 9);
    assert_int_equal(e->calls, 2);
    assert_int_equal(e->errors, 1);
    assert_int_equal(e->wait_us, 400);
    assert_int_equal(e->wait_max_us, 300);
    assert_int_equal(e->run_us, 3000);
    assert_int_equal(e->run_max_us, 2000);
    assert_int_equal(e->bytes_in, 60);
    assert_int_equal(e->bytes_out, 450);
    assert_int_equal(e->last_ms, 9);
    query_begin_loop(grp->queries, k, ra.msg, ra.len); /* the same query again: its totals stay */
    assert_int_equal(e->calls, 2);
    query_end_loop(grp->queries, k + 1, 0, 1, 1, 1, 1, 1); /* another's end: nothing here */
    assert_int_equal(e->calls, 2);
    query_learn_loop(grp->queries, k, 500);
    query_reset_loop(grp->queries);
    assert_int_equal(e->calls, 0);
    assert_int_equal(e->run_us, 0);
    assert_int_equal(query_learned_us(grp->queries, k), 500); /* pipelining's measure stays */
    uint64_t k2 = k + QUERY_SLOTS; /* its slot taken by another: afresh */
    query_begin_loop(grp->queries, k2, ra.msg, ra.len);
    assert_int_equal(e->key, k2);
    assert_int_equal(query_learned_us(grp->queries, k), -1);
    /* the texts: a symbol, a call by name, a call by a string (node-q), compressed, another type */
    static const uint8_t sym[] = {1, 1, 0, 0, 14, 0, 0, 0, 0xf5, 'f', 'o', 'o', 0, 0};
    query_begin_loop(grp->queries, 11, sym, 13);
    assert_string_equal(grp->queries[11].text, "foo");
    static const uint8_t call[] = {1, 1, 0, 0, 23, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0xf5, 'f', 0, 0xf9, 1, 0, 0, 0, 0};
    query_begin_loop(grp->queries, 12, call, sizeof call);
    assert_string_equal(grp->queries[12].text, "(`f;..)");
    static const uint8_t scall[] = {1, 1, 0, 0, 25, 0, 0, 0, 0, 0, 2, 0, 0, 0, 10, 0, 2, 0, 0, 0, 'g', 'h', 0xfa, 1, 0};
    query_begin_loop(grp->queries, 13, scall, sizeof scall);
    assert_string_equal(grp->queries[13].text, "(gh;..)");
    static const uint8_t zip[] = {1, 1, 1, 0, 20, 0, 0, 0, 40, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    query_begin_loop(grp->queries, 14, zip, sizeof zip);
    assert_string_equal(grp->queries[14].text, "(compressed, 20 bytes)");
    static const uint8_t lng[] = {1, 1, 0, 0, 17, 0, 0, 0, 0xf9, 1, 0, 0, 0, 0, 0, 0, 0};
    query_begin_loop(grp->queries, 15, lng, sizeof lng);
    assert_string_equal(grp->queries[15].text, "(type -7, 17 bytes)");
    /* a symbol that runs to the message's end without its NUL (validation refuses it later, but
     * the text is made first): read no byte past the message (ASan) */
    static const uint8_t cut[] = {1, 1, 0, 0, 12, 0, 0, 0, 0xf5, 'a', 'b', 'c'};
    static const uint8_t cutcall[] = {1, 1, 0, 0, 17, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0xf5, 'f', 'g'};
    uint8_t *m = malloc(sizeof cut), *mc = malloc(sizeof cutcall);
    assert_non_null(m);
    assert_non_null(mc);
    memcpy(m, cut, sizeof cut);
    memcpy(mc, cutcall, sizeof cutcall);
    query_begin_loop(grp->queries, 16, m, sizeof cut);
    assert_string_equal(grp->queries[16].text, "abc");
    query_begin_loop(grp->queries, 17, mc, sizeof cutcall);
    assert_string_equal(grp->queries[17].text, "(`fg;..)");
    free(m);
    free(mc);
    /* UTF-8 stays (before, each byte above 0x7f was '?'): a whole character kept, a byte that
     * starts none '?', a character cut by the message's end '?', and one that does not fit in
     * the text left out whole (never half of it) */
    uint8_t u[160];
    struct req ru;
    req_of(&ru, u, sizeof u, "select from t where c=\"caf\xc3\xa9\" \xff");
    query_begin_loop(grp->queries, 18, ru.msg, ru.len);
    assert_string_equal(grp->queries[18].text, "select from t where c=\"caf\xc3\xa9\" ?");
    req_of(&ru, u, sizeof u, "x\xe2\x82\xac");
    query_begin_loop(grp->queries, 19, ru.msg, ru.len - 1); /* the euro sign cut by the end */
    assert_string_equal(grp->queries[19].text, "x??");
    char fill[QUERY_TEXT + 8];
    memset(fill, 'a', QUERY_TEXT - 2); /* room for one more byte only */
    strcpy(fill + QUERY_TEXT - 2, "\xe2\x82\xac");
    req_of(&ru, u, sizeof u, fill);
    query_begin_loop(grp->queries, 20, ru.msg, ru.len);
    assert_int_equal(strlen(grp->queries[20].text), QUERY_TEXT - 2);
    assert_int_equal(strspn(grp->queries[20].text, "a"), QUERY_TEXT - 2);
    group_free(grp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_learn),
        cmocka_unit_test(test_totals),
    };
    return cmocka_run_group_tests_name("query", tests, NULL, NULL);
}

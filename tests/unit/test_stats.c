/* test_stats.c: the latency histogram (exact below 32, under 7% above) and the .qgate.stats[]
 * table, down to its serialised form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "kipc.h"
#include "metrics.h"
#include "stats.h"
#include "tutil.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static struct hist *hist_new(void)
{
    struct hist *h = calloc(1, sizeof *h);
    assert_non_null(h);
    return h;
}

/* top is the upper edge of v's bucket: at least v, and under 7% above it. */
static void assert_close_above(uint64_t top, uint64_t v)
{
    if (top < v || (double)(top - v) > 0.07 * (double)v)
        fail_msg("value %llu reported as %llu", (unsigned long long)v, (unsigned long long)top);
}

/* ---- the histogram ------------------------------------------------------------------------- */

static void test_hist_empty(void **state)
{
    (void)state;
    struct hist *h = hist_new();
    assert_int_equal(hist_quantile(h, 0.0), 0);
    assert_int_equal(hist_quantile(h, 0.5), 0);
    assert_int_equal(hist_quantile(h, 0.99), 0);
    assert_int_equal(hist_quantile(h, 1.0), 0);
    free(h);
}

static void test_hist_small_exact(void **state)
{
    (void)state;
    /* each value alone */
    for (uint64_t v = 0; v < 32; v++) {
        struct hist *h = hist_new();
        hist_add(h, v);
        assert_int_equal(h->n, 1);
        assert_int_equal(hist_quantile(h, 0.0), v);
        assert_int_equal(hist_quantile(h, 0.5), v);
        assert_int_equal(hist_quantile(h, 1.0), v);
        free(h);
    }
    /* all of them together: the (i+1)-th smallest is i */
    struct hist *h = hist_new();
    for (uint64_t v = 31;; v--) {
        hist_add(h, v);
        if (!v)
            break;
    }
    assert_int_equal(h->n, 32);
    for (int i = 0; i < 32; i++)
        assert_int_equal(hist_quantile(h, ((double)i + 0.5) / 32.0), i);
    assert_int_equal(hist_quantile(h, 1.0), 31);
    /* repeated values count */
    struct hist *r = hist_new();
    for (int i = 0; i < 9; i++)
        hist_add(r, 3);
    hist_add(r, 20);
    assert_int_equal(r->n, 10);
    assert_int_equal(hist_quantile(r, 0.5), 3);
    assert_int_equal(hist_quantile(r, 0.9), 3);
    assert_int_equal(hist_quantile(r, 0.95), 20);
    free(r);
    free(h);
}

static void check_single(uint64_t v)
{
    struct hist *h = hist_new();
    hist_add(h, v);
    uint64_t top = hist_quantile(h, 0.5);
    assert_close_above(top, v);
    /* every quantile of a single value is that value's bucket */
    assert_int_equal(hist_quantile(h, 0.0), top);
    assert_int_equal(hist_quantile(h, 1.0), top);
    free(h);
}

static void test_hist_single_values(void **state)
{
    (void)state;
    /* 32 up to 4096 every value, then powers of two and their neighbours, then random */
    for (uint64_t v = 32; v <= 4096; v++)
        check_single(v);
    for (uint64_t p = 32; p <= 1000000000ULL; p *= 2) {
        check_single(p - 1);
        check_single(p);
        check_single(p + 1);
        check_single(p + p / 2);
    }
    check_single(999999999ULL);
    check_single(1000000000ULL);
    uint64_t s = 0x1234567887654321ULL;
    for (int i = 0; i < 20000; i++) {
        uint64_t v = 32 + tutil_rand(&s) % (1000000000ULL - 32 + 1);
        check_single(v);
    }
    /* values in different buckets report different tops, in order */
    struct hist *a = hist_new(), *b = hist_new();
    hist_add(a, 1000);
    hist_add(b, 1100);
    assert_true(hist_quantile(a, 0.5) < hist_quantile(b, 0.5));
    free(a);
    free(b);
}

static void test_hist_quantiles(void **state)
{
    (void)state;
    struct hist *h = hist_new();
    /* inserted out of order: the histogram does not care */
    uint64_t s = 42;
    uint64_t *vals = malloc(10000 * sizeof *vals);
    assert_non_null(vals);
    for (int i = 0; i < 10000; i++)
        vals[i] = (uint64_t)i + 1;
    for (int i = 9999; i > 0; i--) {
        int j = (int)(tutil_rand(&s) % (uint64_t)(i + 1));
        uint64_t t = vals[i];
        vals[i] = vals[j];
        vals[j] = t;
    }
    for (int i = 0; i < 10000; i++)
        hist_add(h, vals[i]);
    free(vals);
    assert_int_equal(h->n, 10000);
    assert_close_above(hist_quantile(h, 0.50), 5000);
    assert_close_above(hist_quantile(h, 0.99), 9900);
    assert_close_above(hist_quantile(h, 1.0), 10000);
    assert_int_equal(hist_quantile(h, 0.0), 1);
    assert_int_equal(hist_quantile(h, 0.0001), 1);
    /* monotonic in q */
    uint64_t prev = 0;
    for (int i = 0; i <= 1000; i++) {
        uint64_t x = hist_quantile(h, i / 1000.0);
        if (x < prev)
            fail_msg("quantile %.3f = %llu < %llu", i / 1000.0, (unsigned long long)x, (unsigned long long)prev);
        prev = x;
    }
    /* a bimodal distribution: p50 in the low mode, p99 in the high one */
    struct hist *m = hist_new();
    for (int i = 0; i < 980; i++)
        hist_add(m, 200);
    for (int i = 0; i < 20; i++)
        hist_add(m, 50000);
    assert_close_above(hist_quantile(m, 0.5), 200);
    assert_close_above(hist_quantile(m, 0.98), 200);
    assert_close_above(hist_quantile(m, 0.99), 50000);
    free(m);
    free(h);
}

/* ---- the stats table ----------------------------------------------------------------------- */

#define NCOLS 14
static const char *const colnames[NCOLS] = {"address", "group", "state", "served", "errors", "inflight",
                                            "queued", "p50_us", "p99_us", "dropped", "session", "transport",
                                            "client", "started"};

static void check_shape(K t, int64_t n)
{
    assert_non_null(t);
    assert_int_equal(t->t, KT_TABLE);
    K d = kK(t)[0];
    assert_non_null(d);
    assert_int_equal(d->t, KT_DICT);
    K keys = kK(d)[0], cols = kK(d)[1];
    assert_int_equal(keys->t, KT_SYM);
    assert_int_equal(keys->n, NCOLS);
    for (int i = 0; i < NCOLS; i++)
        assert_string_equal(kS(keys)[i], colnames[i]);
    assert_int_equal(cols->t, KT_LIST);
    assert_int_equal(cols->n, NCOLS);
    for (int c = 0; c < NCOLS; c++) {
        K col = kK(cols)[c];
        assert_non_null(col);
        assert_int_equal(col->t, c < 3 || c == 11 ? KT_SYM : c == 13 ? KT_TIMESTAMP : KT_LONG);
        assert_int_equal(col->n, n);
    }
}

/* Serialise t; check the header, the opening bytes, validation, and that it decodes to the same
 * shape. Returns the decoded table (free it). */
static K encode_check(K t, int64_t nrows)
{
    size_t len = 0;
    uint8_t *m = kcodec_encode_msg(t, KIPC_RESPONSE, &len);
    assert_non_null(m);
    assert_int_equal(len, 8 + kcodec_size(t));
    struct kipc_hdr h;
    const char *why = NULL;
    assert_int_equal(kipc_hdr_parse(m, len, UINT64_MAX, &h, &why), QG_OK);
    assert_int_equal(h.type, KIPC_RESPONSE);
    assert_int_equal(h.len, len);
    /* table, no attribute, dict, then the column names as a symbol vector of 12 */
    static const uint8_t head[] = {98, 0, 99, 11, 0, NCOLS, 0, 0, 0};
    assert_memory_equal(m + 8, head, sizeof head);
    assert_memory_equal(m + 8 + sizeof head, "address\0group\0state\0", 20);
    struct kerr err = {0};
    if (kvalidate_check(m + 8, len - 8, 1, NULL, &err) != QG_OK)
        fail_msg("stats table fails validation at %zu: %s", err.off, err.why);
    K back = NULL;
    assert_int_equal(kcodec_decode(m + 8, len - 8, 1, NULL, &back, &err), QG_OK);
    check_shape(back, nrows);
    free(m);
    return back;
}

static struct stats_snapshot *snapshot_new(int n)
{
    struct stats_snapshot *s = calloc(1, sizeof *s + (size_t)n * sizeof s->rows[0]);
    assert_non_null(s);
    s->n = n;
    return s;
}

static void test_table_two_rows(void **state)
{
    (void)state;
    struct stats_snapshot *s = snapshot_new(2);
    strcpy(s->rows[0].addr, "localhost:5001");
    strcpy(s->rows[0].group, "main");
    strcpy(s->rows[0].state, "busy");
    s->rows[0].served = 12345;
    s->rows[0].errors = 7;
    s->rows[0].inflight = 1;
    s->rows[0].queued = 3;
    for (int i = 0; i < 98; i++)
        hist_add(&s->rows[0].lat, 100);
    for (int i = 0; i < 2; i++)
        hist_add(&s->rows[0].lat, 70000);
    strcpy(s->rows[1].addr, "rdb1:5010");
    strcpy(s->rows[1].group, "rdb");
    strcpy(s->rows[1].state, "down");
    s->rows[1].served = 0;
    s->rows[1].errors = 1LL << 40; /* a long, not an int */
    s->rows[1].inflight = 0;
    s->rows[1].queued = 99;
    s->rows[0].session = 42;        /* given to client 42 */
    s->rows[1].session = INT64_MIN; /* 0N: given to nobody */
    strcpy(s->rows[0].transport, "unix");
    s->rows[0].client = 9;                   /* running client 9's request */
    s->rows[0].started_ms = 946684800000LL + 1500; /* since 2000.01.01D00:00:01.5 */
    s->rows[1].client = INT64_MIN;           /* 0N: nobody's */
    /* row 1 never tried: an empty symbol */
    /* row 1 has an empty histogram: quantiles 0 */

    K t = stats_table(s);
    check_shape(t, 2);
    K cols = kK(kK(t)[0])[1];
    assert_string_equal(kS(kK(cols)[0])[0], "localhost:5001");
    assert_string_equal(kS(kK(cols)[0])[1], "rdb1:5010");
    assert_string_equal(kS(kK(cols)[1])[0], "main");
    assert_string_equal(kS(kK(cols)[1])[1], "rdb");
    assert_string_equal(kS(kK(cols)[2])[0], "busy");
    assert_string_equal(kS(kK(cols)[2])[1], "down");
    static const int64_t want[2][4] = {{12345, 7, 1, 3}, {0, 1LL << 40, 0, 99}};
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++)
            assert_true(kJ(kK(cols)[3 + c])[r] == want[r][c]);
    int64_t p50 = kJ(kK(cols)[7])[0], p99 = kJ(kK(cols)[8])[0];
    assert_int_equal(p50, hist_quantile(&s->rows[0].lat, 0.50));
    assert_int_equal(p99, hist_quantile(&s->rows[0].lat, 0.99));
    assert_close_above((uint64_t)p50, 100);
    assert_close_above((uint64_t)p99, 70000);
    assert_int_equal(kJ(kK(cols)[7])[1], 0);
    assert_int_equal(kJ(kK(cols)[8])[1], 0);
    assert_true(kJ(kK(cols)[10])[0] == 42);
    assert_true(kJ(kK(cols)[10])[1] == INT64_MIN);
    assert_string_equal(kS(kK(cols)[11])[0], "unix");
    assert_string_equal(kS(kK(cols)[11])[1], "");
    assert_true(kJ(kK(cols)[12])[0] == 9);
    assert_true(kJ(kK(cols)[12])[1] == INT64_MIN);
    assert_true(kJ(kK(cols)[13])[0] == 1500000000LL); /* ns since 2000.01.01 */
    assert_true(kJ(kK(cols)[13])[1] == INT64_MIN);    /* 0Np: nothing running */
    /* the table owns copies of the strings, not pointers into the snapshot */
    memset(s->rows, 0, 2 * sizeof s->rows[0]);
    assert_string_equal(kS(kK(cols)[0])[0], "localhost:5001");
    assert_string_equal(kS(kK(cols)[2])[1], "down");

    K back = encode_check(t, 2);
    K bc = kK(kK(back)[0])[1];
    assert_string_equal(kS(kK(bc)[0])[1], "rdb1:5010");
    assert_string_equal(kS(kK(bc)[1])[0], "main");
    assert_true(kJ(kK(bc)[4])[1] == (1LL << 40));
    assert_int_equal(kJ(kK(bc)[7])[0], p50);
    k_free(back);
    k_free(t);
    free(s);
}

static void test_table_empty(void **state)
{
    (void)state;
    struct stats_snapshot *s = snapshot_new(0);
    K t = stats_table(s);
    check_shape(t, 0);
    K back = encode_check(t, 0);
    k_free(back);
    k_free(t);
    free(s);
}

/* ---- the pools table ----------------------------------------------------------------------- */

/* .qgate.pools[]: a row per group, group a symbol, paused a boolean, the counts longs; the
 * table survives the wire as q would read it. */
static void test_pools_table(void **state)
{
    (void)state;
    static const char *const names[] = {"group", "paused", "waiting", "active", "idle", "down", "disabled",
                                        "maxwait_ms", "served", "errors"};
    struct pools_snapshot *s = calloc(1, sizeof *s + 2 * sizeof s->rows[0]);
    assert_non_null(s);
    s->n = 2;
    s->rows[0] = (struct pools_row){.group = "rdb", .paused = 1, .waiting = 3, .active = 2, .idle = 0, .down = 1,
                                    .disabled = 1, .maxwait_ms = 1500, .served = 1LL << 40, .errors = 7};
    s->rows[1] = (struct pools_row){.group = "hdb", .idle = 4};
    K t = stats_pools_table(s);
    free(s);
    size_t len = 0;
    uint8_t *m = kcodec_encode_msg(t, KIPC_RESPONSE, &len);
    k_free(t);
    assert_non_null(m);
    K x = NULL;
    struct kerr err = {0};
    assert_int_equal(kcodec_decode(m + 8, len - 8, 1, NULL, &x, &err), QG_OK);
    free(m);
    assert_int_equal(x->t, KT_TABLE);
    K keys = kK(kK(x)[0])[0], cols = kK(kK(x)[0])[1];
    assert_int_equal(keys->n, 10);
    for (int c = 0; c < 10; c++) {
        assert_string_equal(kS(keys)[c], names[c]);
        assert_int_equal(kK(cols)[c]->t, c == 0 ? KT_SYM : c == 1 ? KT_BOOL : KT_LONG);
        assert_int_equal(kK(cols)[c]->n, 2);
    }
    assert_string_equal(kS(kK(cols)[0])[0], "rdb");
    assert_string_equal(kS(kK(cols)[0])[1], "hdb");
    assert_int_equal(kG(kK(cols)[1])[0], 1);
    assert_int_equal(kG(kK(cols)[1])[1], 0);
    static const int64_t want[2][8] = {{3, 2, 0, 1, 1, 1500, 1LL << 40, 7}, {0, 0, 4, 0, 0, 0, 0, 0}};
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 8; c++)
            assert_true(kJ(kK(cols)[2 + c])[r] == want[r][c]);
    k_free(x);
}

/* x's wire form decoded again, as a q client would read it. */
static K round_trip(K x)
{
    size_t len = 0;
    uint8_t *m = kcodec_encode_msg(x, KIPC_RESPONSE, &len);
    k_free(x);
    assert_non_null(m);
    struct kerr err = {0};
    assert_int_equal(kvalidate_check(m + 8, len - 8, 1, NULL, &err), QG_OK);
    K back = NULL;
    assert_int_equal(kcodec_decode(m + 8, len - 8, 1, NULL, &back, &err), QG_OK);
    free(m);
    assert_int_equal(back->t, KT_TABLE);
    return back;
}

/* .qgate.clients[]: connected and since are timestamps (since 0Np when nothing runs), worker a
 * symbol, query a string. */
static void test_clients_table(void **state)
{
    (void)state;
    static const char *const names[] = {"id", "user", "peer", "group", "state", "requests", "running",
                                        "connected", "worker", "since", "query"};
    struct clients_snapshot *s = calloc(1, sizeof *s + 2 * sizeof s->rows[0]);
    assert_non_null(s);
    s->n = 2;
    s->rows[0] = (struct client_row){.id = 7, .user = "alice", .peer = "10.0.0.9:4001", .group = "main",
                                     .state = "ready", .requests = 1, .running = 1,
                                     .connected_ms = 946684800000LL + 1000, .worker = "w1:5001",
                                     .since_ms = 946684800000LL + 2000, .query = "select from t"};
    s->rows[1] = (struct client_row){.id = 8, .user = "bob", .state = "ready", .connected_ms = 946684800000LL};
    K x = round_trip(stats_clients_table(s));
    free(s);
    K keys = kK(kK(x)[0])[0], cols = kK(kK(x)[0])[1];
    assert_int_equal(keys->n, 11);
    for (int c = 0; c < 11; c++)
        assert_string_equal(kS(keys)[c], names[c]);
    assert_int_equal(kK(cols)[7]->t, KT_TIMESTAMP);
    assert_true(kJ(kK(cols)[7])[0] == 1000000000LL);
    assert_true(kJ(kK(cols)[7])[1] == 0);
    assert_string_equal(kS(kK(cols)[8])[0], "w1:5001");
    assert_string_equal(kS(kK(cols)[8])[1], "");
    assert_true(kJ(kK(cols)[9])[0] == 2000000000LL);
    assert_true(kJ(kK(cols)[9])[1] == INT64_MIN);
    assert_int_equal(kK(cols)[10]->t, KT_LIST);
    K q = kK(kK(cols)[10])[0];
    assert_int_equal(q->t, KT_CHAR);
    assert_memory_equal(kC(q), "select from t", 13);
    assert_int_equal(kK(kK(cols)[10])[1]->n, 0);
    k_free(x);
}

/* .qgate.queries[]: a row per query learned, the means made from the sums, last a timestamp. */
static void test_queries_table(void **state)
{
    (void)state;
    static const char *const names[] = {"group", "key", "query", "calls", "errors", "wait_us", "wait_mean_us",
                                        "wait_max_us", "run_us", "run_mean_us", "run_max_us", "bytes_in", "bytes_out",
                                        "last"};
    struct queries_snapshot *s = calloc(1, sizeof *s + 1 * sizeof s->rows[0]);
    assert_non_null(s);
    s->n = 1;
    s->rows[0] = (struct query_row){.group = "main", .key = -5, .text = "select from t", .calls = 4, .errors = 1,
                                    .wait_us = 400, .wait_max_us = 250, .run_us = 8000, .run_max_us = 5000,
                                    .bytes_in = 120, .bytes_out = 1 << 20, .last_ms = 946684800000LL + 3};
    K x = round_trip(stats_queries_table(s));
    free(s);
    K keys = kK(kK(x)[0])[0], cols = kK(kK(x)[0])[1];
    assert_int_equal(keys->n, 14);
    for (int c = 0; c < 14; c++)
        assert_string_equal(kS(keys)[c], names[c]);
    assert_string_equal(kS(kK(cols)[0])[0], "main");
    assert_memory_equal(kC(kK(kK(cols)[2])[0]), "select from t", 13);
    static const int64_t want[] = {-5, 0, 4, 1, 400, 100, 250, 8000, 2000, 5000, 120, 1 << 20};
    for (int c = 1; c < 13; c++)
        if (c != 2)
            assert_true(kJ(kK(cols)[c])[0] == want[c - 1]);
    assert_int_equal(kK(cols)[13]->t, KT_TIMESTAMP);
    assert_true(kJ(kK(cols)[13])[0] == 3000000LL);
    k_free(x);
}

/* qgate_worker_up: 1 for a worker in rotation, 0 for one down or connecting, and 1 for one
 * connecting again at once because its session ended (a worker renewed between sessions is not
 * down: an alert on min_over_time(qgate_worker_up[1m]) == 0 must not fire for it). */
static void test_worker_up_gauge(void **state)
{
    (void)state;
    struct metrics_snap *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->workers = calloc(1, sizeof *s->workers + 4 * sizeof s->workers->rows[0]);
    assert_non_null(s->workers);
    const char *st[4] = {"idle", "connecting", "handshake", "pinned"};
    const int renewing[4] = {0, 0, 1, 0};
    for (int i = 0; i < 4; i++) {
        struct stats_row *r = &s->workers->rows[s->workers->n++];
        snprintf(r->addr, sizeof r->addr, "h:%d", i);
        snprintf(r->group, sizeof r->group, "main");
        snprintf(r->state, sizeof r->state, "%s", st[i]);
        r->renewing = (uint8_t)renewing[i];
    }
    size_t len = 0;
    char *page = metrics_render(s, &len);
    assert_non_null(page);
    assert_non_null(strstr(page, "qgate_worker_up{group=\"main\",worker=\"h:0\"} 1\n"));
    assert_non_null(strstr(page, "qgate_worker_up{group=\"main\",worker=\"h:1\"} 0\n"));
    assert_non_null(strstr(page, "qgate_worker_up{group=\"main\",worker=\"h:2\"} 1\n"));
    assert_non_null(strstr(page, "qgate_worker_up{group=\"main\",worker=\"h:3\"} 1\n"));
    free(page);
    metrics_snap_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clients_table),
        cmocka_unit_test(test_queries_table),
        cmocka_unit_test(test_worker_up_gauge),
        cmocka_unit_test(test_hist_empty),
        cmocka_unit_test(test_hist_small_exact),
        cmocka_unit_test(test_hist_single_values),
        cmocka_unit_test(test_hist_quantiles),
        cmocka_unit_test(test_table_two_rows),
        cmocka_unit_test(test_table_empty),
        cmocka_unit_test(test_pools_table),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}

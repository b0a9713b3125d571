/* test_kcodec.c: K codec against real-q vectors, generated round trips, and hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "tutil.h"

static struct qvec *vecs;
static int nvecs;

static int setup(void **state)
{
    (void)state;
    nvecs = tutil_load_vectors("QExpressions3.out", &vecs);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (nvecs > 0)
        tutil_free_vectors(vecs, nvecs);
    return 0;
}

#define NEED_VECTORS()                                                                   \
    do {                                                                                 \
        if (nvecs < 0)                                                                   \
            fail_msg("%s/qpython is missing: the real-q vectors are part of the tree",       \
                     tutil_testdata_dir());                                              \
    } while (0)

/* Re-encode x in byte order le and compare with want. */
static void assert_encodes_to(K x, const uint8_t *want, size_t len, int le)
{
    size_t n = kcodec_size(x);
    assert_int_equal(n, len);
    uint8_t *b = malloc(n);
    uint8_t *end = kcodec_write(x, b, le);
    assert_ptr_equal(end, b + n);
    assert_memory_equal(b, want, n);
    free(b);
}

static const struct qvec *find(const char *expr)
{
    for (int i = 0; i < nvecs; i++)
        if (!strcmp(vecs[i].expr, expr))
            return &vecs[i];
    fail_msg("no vector for %s", expr);
    return NULL;
}

static K decode_ok(const uint8_t *p, size_t n, int le)
{
    K x;
    struct kerr e = {0};
    qg_status st = kcodec_decode(p, n, le, NULL, &x, &e);
    if (st != QG_OK)
        fail_msg("decode failed: %s at %zu", e.why, e.off);
    return x;
}

static K decode_expr(const char *expr)
{
    const struct qvec *v = find(expr);
    return decode_ok(v->body, v->len, 1);
}

static void test_real_q_vectors_round_trip(void **state)
{
    (void)state;
    NEED_VECTORS();
    assert_int_equal(nvecs, 118);
    for (int i = 0; i < nvecs; i++) {
        struct kerr e = {0};
        if (kvalidate_check(vecs[i].body, vecs[i].len, 1, NULL, &e) != QG_OK)
            fail_msg("%s: validate: %s at %zu", vecs[i].expr, e.why, e.off);
        K x = decode_ok(vecs[i].body, vecs[i].len, 1);
        assert_encodes_to(x, vecs[i].body, vecs[i].len, 1);
        /* the same value in big-endian order decodes to the same object */
        size_t n = kcodec_size(x);
        uint8_t *be = malloc(n);
        kcodec_write(x, be, 0);
        K y = decode_ok(be, n, 0);
        assert_encodes_to(y, vecs[i].body, vecs[i].len, 1);
        k_free(y);
        free(be);
        k_free(x);
    }
}

static void test_real_q_values_decoded(void **state)
{
    (void)state;
    NEED_VECTORS();
    K x;

    x = decode_expr("1i");
    assert_int_equal(x->t, -KT_INT);
    assert_int_equal(x->i, 1);
    k_free(x);

    x = decode_expr("-234h");
    assert_int_equal(x->t, -KT_SHORT);
    assert_int_equal(x->h, -234);
    k_free(x);

    x = decode_expr("89421099511627575j");
    assert_true(x->j == 89421099511627575LL);
    k_free(x);

    x = decode_expr("3.23 0n");
    assert_int_equal(x->t, KT_FLOAT);
    assert_int_equal(x->n, 2);
    assert_true(fabs(kF(x)[0] - 3.23) < 1e-12);
    assert_true(isnan(kF(x)[1]));
    k_free(x);

    x = decode_expr("2001.01.01");
    assert_int_equal(x->t, -KT_DATE);
    assert_int_equal(x->i, 366);
    k_free(x);

    x = decode_expr("``quick``fox");
    assert_int_equal(x->t, KT_SYM);
    assert_int_equal(x->n, 4);
    assert_string_equal(kS(x)[1], "quick");
    assert_string_equal(kS(x)[2], "");
    k_free(x);

    x = decode_expr("{x+y}");
    assert_int_equal(x->t, KT_LAMBDA);
    assert_string_equal(x->s, "");
    assert_int_equal(kK(x)[0]->n, 5);
    assert_memory_equal(kC(kK(x)[0]), "{x+y}", 5);
    k_free(x);

    x = decode_expr("1+`");
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "type");
    k_free(x);

    x = decode_expr("\"G\"$\"8c680a01-5a49-5aab-5a65-d4bfddb6a661\"");
    assert_int_equal(x->t, -KT_GUID);
    assert_int_equal(x->u[0], 0x8c);
    assert_int_equal(x->u[15], 0x61);
    k_free(x);

    x = decode_expr("flip `name`iq!(`Dent`Beeblebrox`Prefect;98 42 126)");
    assert_int_equal(x->t, KT_TABLE);
    K d = kK(x)[0];
    assert_int_equal(d->t, KT_DICT);
    assert_string_equal(kS(kK(d)[0])[1], "iq");
    K cols = kK(d)[1];
    assert_int_equal(cols->n, 2);
    assert_int_equal(kJ(kK(cols)[1])[2], 126);
    k_free(x);

    x = decode_expr("([k: 1 2 3] v: `a`b`c)");
    assert_int_equal(x->t, KT_DICT);
    assert_int_equal(kK(x)[0]->t, KT_TABLE);
    assert_int_equal(kK(x)[1]->t, KT_TABLE);
    k_free(x);

    x = decode_expr("sums");
    assert_int_equal(x->t, KT_SCAN);
    assert_int_equal(kK(x)[0]->t, KT_BINARY);
    assert_int_equal(kK(x)[0]->g, 1);
    k_free(x);
}

/* Every proper prefix of a valid object is rejected, never read past. */
static void test_truncations_rejected(void **state)
{
    (void)state;
    NEED_VECTORS();
    for (int i = 0; i < nvecs; i++) {
        for (size_t cut = 0; cut < vecs[i].len; cut++) {
            uint8_t *b = malloc(cut ? cut : 1);
            memcpy(b, vecs[i].body, cut);
            struct kerr e = {0};
            K x = NULL;
            if (kvalidate_check(b, cut, 1, NULL, &e) == QG_OK)
                fail_msg("%s: prefix %zu accepted", vecs[i].expr, cut);
            assert_non_null(e.why);
            assert_true(e.off <= cut);
            assert_int_equal(kcodec_decode(b, cut, 1, NULL, &x, &e), QG_ERR);
            assert_null(x);
            free(b);
        }
    }
}

/* Random mutations: never a crash; whatever validates decodes and re-encodes to itself. */
static void test_mutations(void **state)
{
    (void)state;
    NEED_VECTORS();
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    long accepted = 0, rejected = 0;
    for (int round = 0; round < 400; round++) {
        for (int i = 0; i < nvecs; i++) {
            size_t n = vecs[i].len;
            uint8_t *b = malloc(n);
            memcpy(b, vecs[i].body, n);
            int muts = 1 + (int)(tutil_rand(&seed) % 3);
            for (int m = 0; m < muts; m++) {
                size_t at = tutil_rand(&seed) % n;
                switch (tutil_rand(&seed) % 4) {
                case 0: b[at] ^= (uint8_t)(1u << (tutil_rand(&seed) % 8)); break;
                case 1: b[at] = (uint8_t)tutil_rand(&seed); break;
                case 2: b[at] = (uint8_t)(b[at] + 1); break;
                default: b[at] = (uint8_t[]){0, 0xff, 0x7f, 0x80, 0x63, 0x62, 0x0b}[tutil_rand(&seed) % 7]; break;
                }
            }
            int le = (int)(tutil_rand(&seed) & 1);
            struct kerr e = {0};
            K x = NULL;
            qg_status st = kcodec_decode(b, n, le, NULL, &x, &e);
            if (st == QG_OK) {
                accepted++;
                size_t sz = kcodec_size(x);
                assert_int_equal(sz, n);
                uint8_t *o = malloc(sz);
                kcodec_write(x, o, le);
                assert_memory_equal(o, b, n);
                free(o);
                k_free(x);
            } else {
                rejected++;
                assert_int_equal(st, QG_ERR);
                assert_true(e.off <= n);
            }
            free(b);
        }
    }
    print_message("mutations: %ld accepted, %ld rejected\n", accepted, rejected);
    assert_true(rejected > 0 && accepted > 0);
}

static void expect_bad(const char *hex, int le, const char *why, size_t off)
{
    size_t n;
    uint8_t *b = tutil_unhex(hex, &n);
    struct kerr e = {0};
    assert_int_equal(kvalidate_check(b, n, le, NULL, &e), QG_ERR);
    if (strcmp(e.why, why) || e.off != off)
        fail_msg("%s: got '%s' at %zu, want '%s' at %zu", hex, e.why, e.off, why, off);
    free(b);
}

static void test_rejections(void **state)
{
    (void)state;
    expect_bad("03000100000001", 1, "unknown type", 0);          /* type 3 */
    expect_bad("fd", 1, "unknown type", 0);                      /* atom -3 */
    expect_bad("1400010000000100000000000000", 1, "unknown type", 0); /* enum 20 */
    expect_bad("4d00", 1, "unknown type", 0);                    /* 77 anymap */
    expect_bad("7000", 1, "unknown type", 0);                    /* 112 */
    expect_bad("0a05030000006162", 1, "bad attribute", 1);
    expect_bad("0a0003000000616263ff", 1, "bytes after object", 9);
    expect_bad("0a00ffffffff", 1, "negative count", 2);
    expect_bad("0a0004000000616263", 1, "count past end of message", 2);
    expect_bad("0b0002000000610062", 1, "symbol without NUL", 8);
    expect_bad("f5616263", 1, "symbol without NUL", 1);
    expect_bad("806e6f", 1, "error text without NUL", 1);
    expect_bad("f9010000", 1, "truncated atom", 0);
    expect_bad("0a0000000003", 0, "count past end of message", 2); /* big-endian count 3 */
    expect_bad("64000b00000000", 1, "lambda source not a char vector", 2);
    expect_bad("6800000000", 1, "empty projection or composition", 1);
    /* table: names and columns disagree; columns of different lengths; no dictionary */
    expect_bad("6200630b0002000000610062000000010000000700010000000100000000000000", 1,
               "table names and columns differ in count", 15);
    expect_bad("6200630b000200000061006200000002000000"
               "0700010000000100000000000000" "0700020000000100000000000000020000000000000000",
               1, "table columns differ in length", 33);
    expect_bad("62000b0000000000", 1, "table without column dictionary", 2);
    expect_bad("6200630b00010000006100000001000000f90100000000000000", 1,
               "table column not a list", 17);
}

static void test_nesting_limit(void **state)
{
    (void)state;
    /* enlist enlist ... 1: depth d lists around a long atom */
    for (int depth = 1; depth <= 200; depth += 199) {
        size_t n = (size_t)depth * 6 + 9;
        uint8_t *b = malloc(n), *p = b;
        for (int i = 0; i < depth; i++) {
            memcpy(p, "\x00\x00\x01\x00\x00\x00", 6);
            p += 6;
        }
        memcpy(p, "\xf9\x01\x00\x00\x00\x00\x00\x00\x00", 9);
        struct kerr e = {0};
        struct kcodec_opts o = {.max_depth = 64};
        qg_status st = kvalidate_check(b, n, 1, &o, &e);
        if (depth <= 64) {
            assert_int_equal(st, QG_OK);
        } else {
            assert_int_equal(st, QG_ERR);
            assert_string_equal(e.why, "nesting too deep");
            assert_int_equal(e.off, 65 * 6);
        }
        free(b);
    }
}

/* ---- generated objects of every type ---- */

static uint64_t gseed = 42;
static uint64_t rnd(uint64_t n) { return tutil_rand(&gseed) % n; }

static const int basic_types[] = {1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};

static void fill_item(int t, uint8_t *d, int sz)
{
    /* a third of the time a null or an infinity */
    uint64_t r = rnd(9);
    if (sz == 2 && r < 3) { int16_t v = r == 0 ? INT16_MIN : r == 1 ? INT16_MAX : -INT16_MAX; memcpy(d, &v, 2); return; }
    if (sz == 4 && t != KT_REAL && r < 3) { int32_t v = r == 0 ? INT32_MIN : r == 1 ? INT32_MAX : -INT32_MAX; memcpy(d, &v, 4); return; }
    if (sz == 8 && t != KT_FLOAT && t != KT_DATETIME && r < 3) { int64_t v = r == 0 ? INT64_MIN : r == 1 ? INT64_MAX : -INT64_MAX; memcpy(d, &v, 8); return; }
    if (t == KT_REAL && r < 3) { float v = r == 0 ? NAN : r == 1 ? INFINITY : -INFINITY; memcpy(d, &v, 4); return; }
    if ((t == KT_FLOAT || t == KT_DATETIME) && r < 3) { double v = r == 0 ? NAN : r == 1 ? INFINITY : -INFINITY; memcpy(d, &v, 8); return; }
    if (t == KT_GUID && r == 0) { memset(d, 0, 16); return; }
    for (int i = 0; i < sz; i++)
        d[i] = (uint8_t)rnd(256);
    if (t == KT_BOOL)
        d[0] &= 1;
    if (t == KT_CHAR)
        d[0] = (uint8_t)(' ' + rnd(95));
}

static char *rand_name(char *buf)
{
    int l = (int)rnd(6);
    for (int i = 0; i < l; i++)
        buf[i] = (char)('a' + rnd(26));
    buf[l] = 0;
    return buf;
}

static K gen_vector(int t, int64_t n)
{
    if (t == KT_SYM) {
        char names[64][8];
        const char *ptr[64];
        if (n > 64)
            n = 64;
        for (int64_t i = 0; i < n; i++)
            ptr[i] = rand_name(names[i]);
        return k_symv(n, ptr);
    }
    K x = k_vec((int8_t)t, n);
    int sz = ktype_size(t);
    for (int64_t i = 0; i < n; i++)
        fill_item(t, kG(x) + i * sz, sz);
    return x;
}

static K gen(int depth);

static K gen_table(int64_t rows)
{
    int ncol = 1 + (int)rnd(4);
    char names[4][16];
    const char *ptr[4];
    for (int i = 0; i < ncol; i++) {
        snprintf(names[i], sizeof names[i], "c%d", i);
        ptr[i] = names[i];
    }
    K cols = k_list(ncol);
    for (int i = 0; i < ncol; i++) {
        if (rnd(4) == 0) {
            K c = k_list(rows);
            for (int64_t r = 0; r < rows; r++)
                kK(c)[r] = gen_vector(KT_CHAR, (int64_t)rnd(5));
            kK(cols)[i] = c;
        } else {
            int t = basic_types[rnd(QG_ARRAY_LEN(basic_types))];
            kK(cols)[i] = gen_vector(t, t == KT_SYM && rows > 64 ? 64 : rows);
        }
    }
    /* a symbol column is capped at 64 rows by gen_vector; keep every column that long */
    if (rows > 64)
        for (int i = 0; i < ncol; i++)
            if (kK(cols)[i]->n != rows) {
                k_free(kK(cols)[i]);
                kK(cols)[i] = gen_vector(KT_LONG, rows);
            }
    return k_table(k_dict(k_symv(ncol, ptr), cols));
}

static K gen(int depth)
{
    int pick = (int)rnd(depth > 3 ? 3 : 14);
    switch (pick) {
    case 0: { /* atom */
        int t = basic_types[rnd(QG_ARRAY_LEN(basic_types))];
        if (t == KT_SYM) {
            char b[8];
            return k_sym(rand_name(b));
        }
        K x = k_atom((int8_t)-t);
        fill_item(t, x->u, ktype_size(t));
        return x;
    }
    case 1: { /* vector */
        int t = basic_types[rnd(QG_ARRAY_LEN(basic_types))];
        K x = gen_vector(t, (int64_t)rnd(20));
        x->attr = (uint8_t)(rnd(3) == 0 ? rnd(5) : 0);
        return x;
    }
    case 2: return k_err("type");
    case 3: { /* general list */
        K x = k_list((int64_t)rnd(5));
        for (int64_t i = 0; i < x->n; i++)
            kK(x)[i] = gen(depth + 1);
        return x;
    }
    case 4: return k_dict(gen(depth + 1), gen(depth + 1));
    case 5: { /* sorted dictionary */
        K x = k_dict(gen_vector(KT_LONG, 3), gen(depth + 1));
        x->t = KT_SORTED_DICT;
        kK(x)[0]->attr = 1;
        return x;
    }
    case 6: return gen_table((int64_t)rnd(100));
    case 7: { /* keyed table */
        int64_t rows = (int64_t)rnd(10);
        return k_dict(gen_table(rows), gen_table(rows));
    }
    case 8: return k_lambda(rnd(2) ? "" : "d", "{x+y}");
    case 9: return k_prim((int8_t)(KT_UNARY + rnd(3)), (uint8_t)rnd(40));
    case 10:
    case 11: { /* projection, composition */
        K x = k_compound((int8_t)(KT_PROJECTION + rnd(2)), 1 + (int64_t)rnd(3));
        kK(x)[0] = k_lambda("", "{x*y+z}");
        for (int64_t i = 1; i < x->n; i++)
            kK(x)[i] = gen(depth + 1);
        return x;
    }
    case 12: { /* iterators */
        K x = k_compound((int8_t)(KT_EACH + rnd(6)), 1);
        kK(x)[0] = k_prim(KT_BINARY, (uint8_t)rnd(20));
        return x;
    }
    default: { /* guid vector */
        return gen_vector(KT_GUID, (int64_t)rnd(4));
    }
    }
}

static void test_generated_round_trips(void **state)
{
    (void)state;
    int types_seen[256] = {0};
    for (int i = 0; i < 3000; i++) {
        K x = gen(0);
        types_seen[(uint8_t)x->t] = 1;
        for (int le = 0; le <= 1; le++) {
            size_t n = kcodec_size(x);
            uint8_t *b = malloc(n);
            kcodec_write(x, b, le);
            struct kerr e = {0};
            K y = NULL;
            if (kcodec_decode(b, n, le, NULL, &y, &e) != QG_OK)
                fail_msg("round %d le %d type %d: %s at %zu", i, le, x->t, e.why, e.off);
            assert_encodes_to(y, b, n, le);
            k_free(y);
            free(b);
        }
        k_free(x);
    }
    /* every type was generated at least once */
    for (int t = 1; t <= 19; t++)
        if (t != 3) {
            assert_true(types_seen[(uint8_t)t] || types_seen[(uint8_t)-t]);
        }
    for (int t = 98; t <= 111; t++)
        assert_true(types_seen[t]);
    assert_true(types_seen[127]);
    assert_true(types_seen[(uint8_t)KT_ERROR]);
}

/* Symbols can be interned instead of copied (the -30! gateway model uses it). */
static const char *intern_counting(void *ctx, const char *s, size_t len)
{
    (*(int *)ctx)++;
    static char pool[4096];
    static size_t used;
    if (used + len + 1 > sizeof pool)
        used = 0;
    memcpy(pool + used, s, len);
    pool[used + len] = 0;
    used += len + 1;
    return pool + used - len - 1;
}

static void test_interning_hook(void **state)
{
    (void)state;
    static const uint8_t body[] = {0x0b, 0, 3, 0, 0, 0, 'a', 0, 'b', 'c', 0, 0};
    int calls = 0;
    struct kcodec_opts o = {.intern = intern_counting, .intern_ctx = &calls};
    K x;
    struct kerr e;
    assert_int_equal(kcodec_decode(body, sizeof body, 1, &o, &x, &e), QG_OK);
    assert_int_equal(calls, 3);
    assert_string_equal(kS(x)[1], "bc");
    assert_encodes_to(x, body, sizeof body, 1);
    k_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_q_vectors_round_trip),
        cmocka_unit_test(test_real_q_values_decoded),
        cmocka_unit_test(test_truncations_rejected),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_generated_round_trips),
        cmocka_unit_test(test_interning_hook),
    };
    return cmocka_run_group_tests_name("kcodec", tests, setup, teardown);
}

/* test_kmerge.c: the fan-out merge against values serialised by a real q process: for every
 * list and table of tests/data/qpython/QExpressions3.out, merging two replies of it must give
 * the bytes of q's x,x, made here by splicing q's own bytes (a vector's items twice, under a
 * count twice as large); the other rules (first error, general list, `list) on small values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "kipc.h"
#include "kmerge.h"
#include "qg.h"
#include "tutil.h"

/* q's bytes of a,b for vector bodies a and b of one type (0..19): a's items then b's, under
 * the sum of their counts, the attribute dropped. */
static uint8_t *splice(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, size_t *out_len)
{
    size_t ai = alen - 6, bi = blen - 6;
    uint8_t *o = malloc(6 + ai + bi);
    assert_non_null(o);
    o[0] = a[0];
    o[1] = 0;
    qg_st32(o + 2, qg_ld32(a + 2) + qg_ld32(b + 2));
    memcpy(o + 6, a + 6, ai);
    memcpy(o + 6 + ai, b + 6, bi);
    *out_len = 6 + ai + bi;
    return o;
}

static uint8_t *splice_twice(const uint8_t *b, size_t len, size_t *out_len) { return splice(b, len, b, len, out_len); }

static uint8_t *encode(K x, size_t *len)
{
    *len = kcodec_size(x);
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    assert_ptr_equal(kcodec_write(x, b, 1), b + *len);
    return b;
}

static K decode(const uint8_t *b, size_t len)
{
    K x = NULL;
    struct kerr e;
    assert_int_equal(kcodec_decode(b, len, 1, NULL, &x, &e), QG_OK);
    return x;
}

/* What q sends for x,x of table t (decoded from q's bytes b): each column spliced from its
 * own bytes (kcodec_write gives q's bytes back: test_kcodec), the names as they were. */
static K table_twice(const uint8_t *b, size_t len)
{
    K t = decode(b, len), d = kK(t)[0], cols = kK(d)[1];
    for (int64_t c = 0; c < cols->n; c++) {
        size_t cl, sl;
        uint8_t *cb = encode(kK(cols)[c], &cl), *sb = splice_twice(cb, cl, &sl);
        k_free(kK(cols)[c]);
        kK(cols)[c] = decode(sb, sl);
        free(cb);
        free(sb);
    }
    return t;
}

/* kmerge_bytes on the parts' messages gives exactly the bytes of kmerge's value (or does not
 * apply); both ways, and `list too. The parts are left as they were. */
static int bytes_applied;
static void bytes_path_agrees(K *parts, int n, const char *what)
{
    for (int as_list = 0; as_list < 2; as_list++) {
        uint8_t *m[4];
        size_t l[4];
        K copy[4];
        for (int i = 0; i < n; i++) {
            m[i] = kcodec_encode_msg(parts[i], KIPC_RESPONSE, &l[i]);
            copy[i] = decode(m[i] + 8, l[i] - 8);
        }
        size_t bl = 0;
        uint8_t *bm = kmerge_bytes((const uint8_t *const *)m, l, n, as_list, &bl);
        K x = kmerge(copy, n, as_list);
        size_t kl;
        uint8_t *km = kcodec_encode_msg(x, KIPC_RESPONSE, &kl);
        if (bm) {
            bytes_applied++;
            if (bl != kl || memcmp(bm, km, kl))
                fail_msg("kmerge_bytes of %s (as_list %d): %zu bytes, kmerge's %zu, differ", what, as_list, bl, kl);
        }
        free(bm);
        free(km);
        k_free(x);
        for (int i = 0; i < n; i++)
            free(m[i]);
    }
}

static int is_list_type(int t) { return t == KT_LIST || (t >= 1 && t <= 19 && t != 3); }

static void test_real_q_lists_and_tables(void **state)
{
    (void)state;
    struct qvec *v;
    int n = tutil_load_vectors("QExpressions3.out", &v);
    if (n < 0)
        fail_msg("tests/data/qpython/QExpressions3.out is missing");
    int lists = 0, tables = 0, keyed = 0, others = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *b = v[i].body;
        size_t len = v[i].len;
        int t = (int8_t)b[0];
        K want = NULL;
        if (is_list_type(t)) {
            /* with the next value of its type in the file (another reply), then the other way */
            int k = i + 1;
            while (k < n && (int8_t)v[k].body[0] != t)
                k++;
            const uint8_t *b2 = k < n ? v[k].body : b;
            size_t len2 = k < n ? v[k].len : len, wl;
            uint8_t *wb = splice(b, len, b2, len2, &wl);
            K want2 = decode(wb, wl);
            free(wb);
            K pp[2] = {decode(b, len), decode(b2, len2)};
            bytes_path_agrees(pp, 2, v[i].expr);
            K got2 = kmerge(pp, 2, 0);
            size_t g2l, w2l;
            uint8_t *g2 = encode(got2, &g2l), *w2 = encode(want2, &w2l);
            if (g2l != w2l || memcmp(g2, w2, g2l))
                fail_msg("merge of %s with %s: not q's x,y", v[i].expr, k < n ? v[k].expr : v[i].expr);
            others += k < n;
            free(g2);
            free(w2);
            k_free(got2);
            k_free(want2);
            wb = splice_twice(b, len, &wl);
            want = decode(wb, wl);
            free(wb);
            lists++;
        } else if (t == KT_TABLE) {
            want = table_twice(b, len);
            tables++;
        } else if (t == KT_DICT && len > 2 && b[1] == KT_TABLE) { /* keyed: 99 98 ... */
            K kt = decode(b, len);
            size_t kl, vl;
            uint8_t *kb = encode(kK(kt)[0], &kl), *vb = encode(kK(kt)[1], &vl);
            want = k_dict(table_twice(kb, kl), table_twice(vb, vl));
            free(kb);
            free(vb);
            k_free(kt);
            keyed++;
        } else {
            continue;
        }
        K parts[2] = {decode(b, len), decode(b, len)};
        bytes_path_agrees(parts, 2, v[i].expr);
        K got = kmerge(parts, 2, 0);
        assert_null(parts[0]);
        assert_non_null(got);
        size_t gl, wl;
        uint8_t *gb = encode(got, &gl), *wb = encode(want, &wl);
        if (gl != wl || memcmp(gb, wb, gl))
            fail_msg("merge of two replies of %s: not q's x,x (%zu bytes, want %zu)", v[i].expr, gl, wl);
        free(gb);
        free(wb);
        k_free(got);
        k_free(want);
    }
    /* every basic vector type, the general lists, and the tables of the file took part */
    assert_true(lists >= 40); /* the file has 40 lists, 14 tables, 2 keyed tables */
    assert_true(tables >= 8);
    assert_true(keyed >= 2);
    print_message("merged %d lists (%d with another value of their type), %d tables, %d keyed tables\n", lists, others, tables, keyed);
    assert_true(others >= 20); /* merged with a different value of the same type */
    assert_true(bytes_applied >= 2 * (lists + others) + tables + keyed); /* the bytes path took them */
    tutil_free_vectors(v, n);
}

static K longs(int n, int64_t from)
{
    K x = k_vec(KT_LONG, n);
    for (int i = 0; i < n; i++)
        kJ(x)[i] = from + i;
    return x;
}

static K table1(const char *name, K col)
{
    K cols = k_list(1);
    kK(cols)[0] = col;
    return k_table(k_dict(k_symv(1, &name), cols));
}

static void test_rules(void **state)
{
    (void)state;
    /* the first error, in worker order, whatever else came */
    K p[3] = {longs(2, 0), k_err("second"), k_err("third")};
    K x = kmerge(p, 3, 0);
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "second");
    k_free(x);
    /* `list: the replies as they are, errors too */
    K q[2] = {longs(2, 0), k_err("e")};
    x = kmerge(q, 2, 1);
    assert_int_equal(x->t, KT_LIST);
    assert_int_equal(x->n, 2);
    assert_int_equal(kK(x)[0]->t, KT_LONG);
    assert_int_equal(kK(x)[1]->t, KT_ERROR);
    k_free(x);
    /* vectors of two types, atoms, tables of other columns: a general list of the replies */
    K r[2] = {longs(2, 0), k_str("ab", 2)};
    x = kmerge(r, 2, 0);
    assert_int_equal(x->t, KT_LIST);
    assert_int_equal(x->n, 2);
    k_free(x);
    K s[2] = {k_atom(-KT_LONG), k_atom(-KT_LONG)};
    x = kmerge(s, 2, 0);
    assert_int_equal(x->t, KT_LIST);
    k_free(x);
    K t[2] = {table1("a", longs(2, 0)), table1("b", longs(2, 0))};
    x = kmerge(t, 2, 0);
    assert_int_equal(x->t, KT_LIST);
    k_free(x);
    /* a column whose type differs between replies: a general list of its items */
    K u[2] = {table1("a", longs(2, 5)), table1("a", k_str("xy", 2))};
    x = kmerge(u, 2, 0);
    assert_int_equal(x->t, KT_TABLE);
    K col = kK(kK(kK(x)[0])[1])[0];
    assert_int_equal(col->t, KT_LIST);
    assert_int_equal(col->n, 4);
    assert_int_equal(kK(col)[1]->t, -KT_LONG);
    assert_int_equal(kK(col)[1]->j, 6);
    assert_int_equal(kK(col)[2]->t, -KT_CHAR);
    assert_int_equal(kK(col)[3]->g, 'y');
    k_free(x);
    /* four workers' tables in worker order; one worker */
    K w[4] = {table1("a", longs(3, 0)), table1("a", longs(3, 3)), table1("a", longs(0, 0)), table1("a", longs(1, 6))};
    x = kmerge(w, 4, 0);
    col = kK(kK(kK(x)[0])[1])[0];
    assert_int_equal(col->n, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(kJ(col)[i], i);
    k_free(x);
    K one[1] = {longs(3, 1)};
    x = kmerge(one, 1, 0);
    assert_int_equal(x->t, KT_LONG);
    assert_int_equal(x->n, 3);
    k_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_q_lists_and_tables),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

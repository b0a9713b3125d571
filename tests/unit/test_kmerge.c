/* test_kmerge.c: the fan-out merge is q's raze of the replies in worker order (,/ over them),
 * case by case against the KX reference (code.kx.com ref/raze, ref/join, basics/joins,
 * ref/upsert, ref/uj), the expected values built with kcodec.h's constructors or decoded from
 * the bytes a real q sent (tests/data/qpython/QExpressions3.out); each compared with kmerge's
 * result by its serialised bytes. Then: kmerge_bytes agrees with kmerge byte for byte wherever
 * it applies, and applies where it should; and job_merge's partial form. Cases marked
 * "decided" are where the reference is silent (kmerge.c's head says what was decided). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kmerge.h"
#include "pool.h"
#include "qg.h"
#include "tutil.h"

static struct qvec *qv;
static int nqv;

static int setup(void **state)
{
    (void)state;
    nqv = tutil_load_vectors("QExpressions3.out", &qv);
    return nqv < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tutil_free_vectors(qv, nqv);
    return 0;
}

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

/* The value of q expression expr as q serialised it. */
static K qval(const char *expr)
{
    for (int i = 0; i < nqv; i++)
        if (!strcmp(qv[i].expr, expr))
            return decode(qv[i].body, qv[i].len);
    fail_msg("no %s in QExpressions3.out", expr);
    return NULL;
}

/* ---- K values, briefly ------------------------------------------------------------------ */

#define NARGS(T, ...) (int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T))

static K J(int64_t v)
{
    K x = k_atom(-KT_LONG);
    x->j = v;
    return x;
}

static K F(double v)
{
    K x = k_atom(-KT_FLOAT);
    x->f = v;
    return x;
}

static K R(float v)
{
    K x = k_atom(-KT_REAL);
    x->e = v;
    return x;
}

static K C(char c)
{
    K x = k_atom(-KT_CHAR);
    x->g = (uint8_t)c;
    return x;
}

static K S(const char *s) { return k_sym(s); }
static K STR(const char *s) { return k_str(s, strlen(s)); }
static K NIL(void) { return k_list(0); }

static K jv(const int64_t *a, int n)
{
    K x = k_vec(KT_LONG, n);
    memcpy(kJ(x), a, (size_t)n * sizeof *a);
    return x;
}
#define JV(...) jv((const int64_t[]){__VA_ARGS__}, NARGS(int64_t, __VA_ARGS__))

static K iv(const int32_t *a, int n)
{
    K x = k_vec(KT_INT, n);
    memcpy(kI(x), a, (size_t)n * sizeof *a);
    return x;
}
#define IV(...) iv((const int32_t[]){__VA_ARGS__}, NARGS(int32_t, __VA_ARGS__))

static K fv(const double *a, int n)
{
    K x = k_vec(KT_FLOAT, n);
    memcpy(kF(x), a, (size_t)n * sizeof *a);
    return x;
}
#define FV(...) fv((const double[]){__VA_ARGS__}, NARGS(double, __VA_ARGS__))

static K bv(const char *bits)
{
    K x = k_vec(KT_BOOL, (int64_t)strlen(bits));
    for (size_t i = 0; bits[i]; i++)
        kG(x)[i] = bits[i] == '1';
    return x;
}

#define SV(...) k_symv(NARGS(const char *, __VA_ARGS__), (const char *[]){__VA_ARGS__})

static K list(K *a, int n)
{
    K x = k_list(n);
    for (int i = 0; i < n; i++)
        kK(x)[i] = a[i];
    return x;
}
#define L(...) list((K[]){__VA_ARGS__}, NARGS(K, __VA_ARGS__))

static K D(K keys, K vals) { return k_dict(keys, vals); }
/* TAB(SV("a","b"), col_a, col_b): the table of those columns */
#define TAB(names, ...) k_table(k_dict(names, L(__VA_ARGS__)))

/* ---- the comparison ---------------------------------------------------------------------- */

static char *hex(const uint8_t *b, size_t n)
{
    char *s = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++)
        snprintf(s + 2 * i, 3, "%02x", b[i]);
    s[2 * n] = 0;
    return s;
}

/* kmerge_bytes on the parts' messages gives exactly the bytes of kmerge's value, both ways
 * (as_list too), or does not apply. The parts are left as they were. Returns whether it
 * applied to the merge (as_list 0). */
static int bytes_path_agrees(K *parts, int n, const char *what)
{
    int applied = 0;
    for (int as_list = 0; as_list < 2; as_list++) {
        uint8_t *m[8];
        size_t l[8];
        K copy[8];
        assert_true(n <= 8);
        for (int i = 0; i < n; i++) {
            m[i] = kcodec_encode_msg(parts[i], KIPC_RESPONSE, &l[i]);
            copy[i] = decode(m[i] + 8, l[i] - 8);
        }
        size_t bl = 0;
        uint8_t *bm = kmerge_bytes((const uint8_t *const *)m, l, n, as_list, &bl);
        K x = kmerge(copy, n, as_list);
        assert_non_null(x);
        size_t kl;
        uint8_t *km = kcodec_encode_msg(x, KIPC_RESPONSE, &kl);
        if (bm) {
            if (!as_list)
                applied = 1;
            if (bl != kl || memcmp(bm, km, kl)) {
                char *a = hex(bm + 8, bl - 8), *b = hex(km + 8, kl - 8);
                fail_msg("kmerge_bytes of %s (as_list %d) differs from kmerge:\n bytes %s\n K     %s", what, as_list, a, b);
            }
        } else {
            assert_true(!as_list); /* `list always applies */
        }
        free(bm);
        free(km);
        k_free(x);
        for (int i = 0; i < n; i++)
            free(m[i]);
    }
    return applied;
}

static int cases, bytes_cases;

/* raze of the replies parts[0..n) (consumed) is want (consumed), by serialised bytes; and the
 * bytes path agrees with it. Returns whether the bytes path applied. */
static int raze_is(const char *what, K want, K *parts, int n)
{
    int applied = bytes_path_agrees(parts, n, what);
    K got = kmerge(parts, n, 0);
    for (int i = 0; i < n; i++)
        assert_null(parts[i]); /* consumed */
    assert_non_null(got);
    size_t gl, wl;
    uint8_t *gb = encode(got, &gl), *wb = encode(want, &wl);
    if (gl != wl || memcmp(gb, wb, gl)) {
        char *g = hex(gb, gl), *w = hex(wb, wl);
        fail_msg("raze of %s:\n got  %s\n want %s", what, g, w);
    }
    free(gb);
    free(wb);
    k_free(got);
    k_free(want);
    cases++;
    bytes_cases += applied;
    return applied;
}
#define RAZE(what, want, ...) raze_is(what, want, (K[]){__VA_ARGS__}, NARGS(K, __VA_ARGS__))

/* q's error 'type, as a real q sent it (the body of 1+`) */
static K qtype(void) { return qval("1+`"); }

/* ---- the cases --------------------------------------------------------------------------- */

/* ref/raze: "raze x: return the items of x joined, collapsing one level of nesting"; it is
 * ,/ (Join Over). ref/join: "The result is a vector if both arguments are vectors or atoms of
 * the same type; otherwise a mixed list." */
static void test_atoms_and_lists(void **state)
{
    (void)state;
    /* ref/raze: raze (1 2;3 4 5) is 1 2 3 4 5 */
    assert_true(RAZE("vectors of one type", JV(1, 2, 3, 4, 5), JV(1, 2), JV(3, 4, 5)));
    /* ref/raze: b:(1 2;(3 4;5 6);7;8); raze b is 1,2,(3 4),(5 6),7,8 (one level only) */
    RAZE("ref/raze's b", L(J(1), J(2), JV(3, 4), JV(5, 6), J(7), J(8)), JV(1, 2), L(JV(3, 4), JV(5, 6)), J(7), J(8));
    /* ref/join: atoms of the same type join to a vector: raze (1;2;3) is 1 2 3 */
    assert_true(RAZE("atoms of one type", JV(1, 2, 3), J(1), J(2), J(3)));
    /* ref/join: "otherwise a mixed list" */
    RAZE("atoms of different types", L(J(1), S("a"), F(2.5)), J(1), S("a"), F(2.5));
    /* ref/join: 1 2.4 5,-7.9 is 1.00 2.40 5.00 -7.90 (float vector and atom) */
    assert_true(RAZE("vector + atom", FV(1, 2.4, 5, -7.9), FV(1, 2.4, 5), F(-7.9)));
    assert_true(RAZE("atom + vector", JV(1, 2, 3), J(1), JV(2, 3)));
    /* ref/join: 1 2.4 5, -7.9 10e is (1.00;2.40;5.00;-7.90e;10.00e) (float and real) */
    K r = k_vec(KT_REAL, 2);
    kE(r)[0] = -7.9f;
    kE(r)[1] = 10;
    RAZE("mixed vectors (float, real)", L(F(1), F(2.4), F(5), R(-7.9f), R(10)), FV(1, 2.4, 5), r);
    RAZE("vector + atom of another type", L(J(1), J(2), S("a")), JV(1, 2), S("a"));
    RAZE("mixed vectors (long, symbol)", L(J(1), J(2), S("x"), S("y")), JV(1, 2), SV("x", "y"));
    /* ref/join: (0;1 2.5;01b),(`a;"abc") is (0;1.00 2.50;01b;`a;"abc") */
    assert_true(RAZE("general lists", L(J(0), FV(1, 2.5), bv("01"), S("a"), STR("abc")), L(J(0), FV(1, 2.5), bv("01")),
                     L(S("a"), STR("abc"))));
    RAZE("general list + atom + vector", L(S("a"), STR("abc"), J(3), J(4), J(5)), L(S("a"), STR("abc")), J(3), JV(4, 5));
    /* strings are char vectors, chars their atoms */
    assert_true(RAZE("strings", STR("abcde"), STR("ab"), STR("cd"), C('e')));
    assert_true(RAZE("symbols", SV("a", "b", "c", "d", "e"), SV("a", "b"), S("c"), SV("d", "e")));
    assert_true(RAZE("symbol atoms", SV("x", "y"), S("x"), S("y")));
    /* functions join as items of a general list */
    RAZE("lambdas", L(qval("{x+y}"), qval("{x+y}")), qval("{x+y}"), qval("{x+y}"));
    /* four workers, one of them empty, in worker order */
    assert_true(RAZE("four vectors", JV(0, 1, 2, 3, 4, 5, 6), JV(0, 1, 2), JV(3, 4, 5), k_vec(KT_LONG, 0), JV(6)));
}

/* () is the general empty list: (),1 2 is 1 2 (the brief; kdbfaq: a list begun as () takes the
 * type of what is joined to it). A typed empty is a vector of its type (ref/join's rule). */
static void test_empties(void **state)
{
    (void)state;
    RAZE("() + vector (q's ())", JV(1, 2), qval("()"), JV(1, 2));
    RAZE("vector + ()", JV(1, 2), JV(1, 2), NIL());
    RAZE("() + () + symbols", SV("a", "b"), NIL(), NIL(), SV("a", "b"));
    assert_true(RAZE("() + ()", NIL(), NIL(), qval("()")));
    RAZE("() + atom: ,42", JV(42), NIL(), J(42));
    assert_true(RAZE("() + general list", L(J(1), S("a")), NIL(), L(J(1), S("a"))));
    /* ref/join: a vector if both are vectors of the same type */
    assert_true(RAZE("typed empty + vector of its type", JV(1, 2), k_vec(KT_LONG, 0), JV(1, 2)));
    /* decided: ref/join's rule, "otherwise a mixed list": `long$() is a long vector */
    RAZE("typed empty + vector of another type", L(S("a"), S("b")), k_vec(KT_LONG, 0), SV("a", "b"));
    assert_true(RAZE("typed empties", k_symv(0, NULL), k_symv(0, NULL), k_symv(0, NULL)));
}

/* ref/join: "When both arguments are dictionaries, Join has upsert semantics." */
static void test_dictionaries(void **state)
{
    (void)state;
    /* ref/join: (`a`b`c!1 2 3),`c`d!4 5 is a b c d!1 2 4 5 */
    RAZE("dictionaries (ref/join)", D(SV("a", "b", "c", "d"), JV(1, 2, 4, 5)), D(SV("a", "b", "c"), JV(1, 2, 3)),
         D(SV("c", "d"), JV(4, 5)));
    /* ,/ left to right: the last worker's value for a key wins; new keys in order */
    RAZE("three dictionaries", D(SV("a", "b", "c", "d"), JV(5, 3, 4, 6)), D(SV("a", "b"), JV(1, 2)), D(SV("b", "c"), JV(3, 4)),
         D(SV("a", "d"), JV(5, 6)));
    RAZE("a dictionary with itself (q's (enlist `a)!(enlist 1))", qval("(enlist `a)!(enlist 1)"),
         qval("(enlist `a)!(enlist 1)"), qval("(enlist `a)!(enlist 1)"));
    /* decided: values of two types make a general list (Join, unlike Append, promotes) */
    RAZE("dictionaries, values of two types", D(SV("a", "b", "c"), L(J(1), S("x"), S("y"))), D(SV("a", "b"), JV(1, 2)),
         D(SV("b", "c"), SV("x", "y")));
    RAZE("dictionaries, keys of two types", D(L(S("a"), S("b"), J(1), J(2)), JV(1, 2, 3, 4)), D(SV("a", "b"), JV(1, 2)),
         D(JV(1, 2), JV(3, 4)));
}

/* q's own dictionaries. Keys match by value across representations: 1 (a long in q's general
 * list of keys) is the 1 of 1 2; 2h is not 2. */
static void test_dictionaries_q(void **state)
{
    (void)state;
    K gk = qval("(1;2h;3.234;\"4\")!(`one;2 3;\"456\";(7;8 9))");
    K keys = kK(gk)[0], vals = kK(gk)[1]; /* (1;2h;3.234;"4") and (`one;2 3;"456";(7;8 9)) */
    K wk = k_list(5), wv = k_list(5);
    for (int i = 0; i < 4; i++) {
        kK(wk)[i] = kK(keys)[i];
        kK(wv)[i] = kK(vals)[i];
        kK(keys)[i] = kK(vals)[i] = NULL;
    }
    kK(wk)[4] = J(2);
    k_free(kK(wv)[0]);
    kK(wv)[0] = S("abc"); /* key 1 found: replaced */
    kK(wv)[4] = S("cdefgh");
    k_free(gk);
    RAZE("q's (1;2h;3.234;\"4\")!... with q's 1 2!`abc`cdefgh", D(wk, wv), qval("(1;2h;3.234;\"4\")!(`one;2 3;\"456\";(7;8 9))"),
         qval("1 2!`abc`cdefgh"));
    RAZE("q's general-keyed dictionary with itself", qval("(1;2h;3.234;\"4\")!(`one;2 3;\"456\";(7;8 9))"),
         qval("(1;2h;3.234;\"4\")!(`one;2 3;\"456\";(7;8 9))"), qval("(1;2h;3.234;\"4\")!(`one;2 3;\"456\";(7;8 9))"));
    /* a dictionary of rows (its values a table): rows upserted likewise */
    RAZE("q's `abc`def`gh!([] one: 1 2 3; two: 4 5 6), with more rows",
         D(SV("abc", "def", "gh", "ij"), TAB(SV("one", "two"), JV(1, 2, 7, 8), JV(4, 5, 9, 10))),
         qval("`abc`def`gh!([] one: 1 2 3; two: 4 5 6)"), D(SV("gh", "ij"), TAB(SV("one", "two"), JV(7, 8), JV(9, 10))));
    /* ref/raze: d:`a`b!(1 2;3 5); raze (10;d) is 'type ("cannot join integer and dictionary") */
    RAZE("atom + dictionary (ref/raze)", qtype(), J(10), D(SV("a", "b"), L(JV(1, 2), JV(3, 5))));
    RAZE("dictionary + vector (decided: 'type both ways)", qtype(), D(SV("a", "b"), JV(1, 2)), JV(3, 4));
    RAZE("() + dictionary (decided: () joins as nothing)", D(SV("a"), JV(1)), NIL(), D(SV("a"), JV(1)));
}

/* basics/joins: for tables x,y is x upsert y; ref/upsert: "If the table is keyed, any new
 * records that match on key are updated. Otherwise, new records are inserted."; ref/join:
 * "Join for keyed tables is strict; both the key and data columns must match in names and
 * datatypes." */
static void test_keyed_tables(void **state)
{
    (void)state;
    /* ref/upsert: a:([s:`q`w`e]r:1 2 3;u:5 6 7); a upsert ([s:`e`r`q]r:30 4 10;u:70 8 50) is
     * ([s:`q`w`e`r] r:10 2 30 4; u:50 6 70 8) */
    RAZE("keyed tables, overlapping keys (ref/upsert)",
         D(TAB(SV("s"), SV("q", "w", "e", "r")), TAB(SV("r", "u"), JV(10, 2, 30, 4), JV(50, 6, 70, 8))),
         D(TAB(SV("s"), SV("q", "w", "e")), TAB(SV("r", "u"), JV(1, 2, 3), JV(5, 6, 7))),
         D(TAB(SV("s"), SV("e", "r", "q")), TAB(SV("r", "u"), JV(30, 4, 10), JV(70, 8, 50))));
    /* two key columns: a key is the whole row of them */
    RAZE("keyed tables, two key columns",
         D(TAB(SV("a", "b"), JV(1, 3, 3), JV(2, 5, 4)), TAB(SV("c", "d"), JV(15, 40, 45), JV(25, 50, 55))),
         D(TAB(SV("a", "b"), JV(1, 3), JV(2, 5)), TAB(SV("c", "d"), JV(10, 40), JV(20, 50))),
         D(TAB(SV("a", "b"), JV(1, 3), JV(2, 4)), TAB(SV("c", "d"), JV(15, 45), JV(25, 55))));
    /* q's own keyed tables: x,x is x (every key found, its row replaced by the same) */
    RAZE("q's ([k: 1 2 3] v: `a`b`c) twice", qval("([k: 1 2 3] v: `a`b`c)"), qval("([k: 1 2 3] v: `a`b`c)"),
         qval("([k: 1 2 3] v: `a`b`c)"));
    RAZE("q's ([eid:1001 1002 1003] pos:...;dates:...) twice", qval("([eid:1001 1002 1003] pos:`d1`d2`d3;dates:(2001.01.01;2000.05.01;0Nd))"),
         qval("([eid:1001 1002 1003] pos:`d1`d2`d3;dates:(2001.01.01;2000.05.01;0Nd))"),
         qval("([eid:1001 1002 1003] pos:`d1`d2`d3;dates:(2001.01.01;2000.05.01;0Nd))"));
    /* three workers: the third replaces a row the second appended */
    RAZE("q's ([k: 1 2 3] v: `a`b`c) and two more",
         D(TAB(SV("k"), JV(1, 2, 3, 4, 5)), TAB(SV("v"), SV("a", "y", "c", "z", "w"))), qval("([k: 1 2 3] v: `a`b`c)"),
         D(TAB(SV("k"), JV(2, 4)), TAB(SV("v"), SV("x", "z"))), D(TAB(SV("k"), JV(5, 2)), TAB(SV("v"), SV("w", "y"))));
    /* "strict": datatypes must match. The reference names no error: 'type (decided) */
    RAZE("keyed tables, value types differ", qtype(), qval("([k: 1 2 3] v: `a`b`c)"), D(TAB(SV("k"), JV(4)), TAB(SV("v"), FV(1.5))));
    RAZE("keyed tables, key types differ", qtype(), qval("([k: 1 2 3] v: `a`b`c)"), D(TAB(SV("k"), IV(4)), TAB(SV("v"), SV("d"))));
    /* names must match: 'mismatch (decided, as tables that do not conform) */
    RAZE("keyed tables, value names differ", k_err("mismatch"), qval("([k: 1 2 3] v: `a`b`c)"),
         D(TAB(SV("k"), JV(4)), TAB(SV("w"), SV("d"))));
    RAZE("keyed tables, key names differ", k_err("mismatch"), qval("([k: 1 2 3] v: `a`b`c)"),
         D(TAB(SV("j"), JV(4)), TAB(SV("v"), SV("d"))));
    /* decided: shapes q joins in ways the reference does not describe */
    const char *shape = "qgate: .qgate.all cannot raze these replies; use `list";
    RAZE("dictionary + keyed table", k_err(shape), D(SV("a"), JV(1)), qval("([k: 1 2 3] v: `a`b`c)"));
    RAZE("keyed table + table", k_err(shape), qval("([k: 1 2 3] v: `a`b`c)"), TAB(SV("k", "v"), JV(4), SV("d")));
    RAZE("table + keyed table", k_err(shape), TAB(SV("k", "v"), JV(4), SV("d")), qval("([k: 1 2 3] v: `a`b`c)"));
}

/* ref/join: "Tables can be joined row-wise": t:([]a:1 2 3;b:`a`b`c); s:([]a:10 11;b:`d`e) */
static void test_tables(void **state)
{
    (void)state;
    assert_true(RAZE("tables, the same columns (ref/join)", TAB(SV("a", "b"), JV(1, 2, 3, 10, 11), SV("a", "b", "c", "d", "e")),
                     TAB(SV("a", "b"), JV(1, 2, 3), SV("a", "b", "c")), TAB(SV("a", "b"), JV(10, 11), SV("d", "e"))));
    /* each column joins as lists do: a column of two types becomes a general list */
    RAZE("tables, a column of two types", TAB(SV("a"), L(J(1), J(2), S("x"), S("y"))), TAB(SV("a"), JV(1, 2)), TAB(SV("a"), SV("x", "y")));
    /* ref/uj: s:([]a:1 2;b:2 3;c:5 7); t:([]a:1 2 3;b:2 3 7;c:10 20 30;d:"ABC"); s,t is 'mismatch */
    RAZE("tables, different columns (ref/uj)", k_err("mismatch"), TAB(SV("a", "b", "c"), JV(1, 2), JV(2, 3), JV(5, 7)),
         TAB(SV("a", "b", "c", "d"), JV(1, 2, 3), JV(2, 3, 7), JV(10, 20, 30), STR("ABC")));
    RAZE("tables, other names", k_err("mismatch"), TAB(SV("a"), JV(1)), TAB(SV("b"), JV(1)));
    /* an untyped empty table's columns are (): they join as nothing */
    RAZE("untyped empty table + rows", TAB(SV("a", "b"), JV(1, 2), SV("x", "y")), TAB(SV("a", "b"), NIL(), NIL()),
         TAB(SV("a", "b"), JV(1, 2), SV("x", "y")));
    RAZE("rows + untyped empty table", TAB(SV("a", "b"), JV(1, 2), SV("x", "y")), TAB(SV("a", "b"), JV(1, 2), SV("x", "y")),
         TAB(SV("a", "b"), NIL(), NIL()));
    /* q's typed empty table: its columns have types */
    assert_true(RAZE("q's ([] name:`symbol$(); iq:`int$()) + rows", TAB(SV("name", "iq"), SV("a", "b"), IV(1, 2)),
                     qval("([] name:`symbol$(); iq:`int$())"), TAB(SV("name", "iq"), SV("a", "b"), IV(1, 2))));
    RAZE("typed empty table + rows of other types", TAB(SV("name", "iq"), SV("a"), L(J(7))), qval("([] name:`symbol$(); iq:`int$())"),
         TAB(SV("name", "iq"), SV("a"), JV(7)));
    /* decided: columns matched by name, in the left's order */
    RAZE("tables, columns in another order", TAB(SV("a", "b"), JV(1, 2, 3), SV("x", "y", "z")), TAB(SV("a", "b"), JV(1, 2), SV("x", "y")),
         TAB(SV("b", "a"), SV("z"), JV(3)));
    assert_true(RAZE("four tables, one empty", TAB(SV("a"), JV(0, 1, 2, 3, 4, 5, 6)), TAB(SV("a"), JV(0, 1, 2)), TAB(SV("a"), JV(3, 4, 5)),
                     TAB(SV("a"), k_vec(KT_LONG, 0)), TAB(SV("a"), JV(6))));
    /* q's tables: general list columns, strings */
    assert_true(RAZE("q's 1#([] sym:`x`x`x;str:\"  a\") with -1#", TAB(SV("sym", "str"), SV("x", "x"), STR(" a")),
                     qval("1#([] sym:`x`x`x;str:\"  a\")"), qval("-1#([] sym:`x`x`x;str:\"  a\")")));
    /* table and atom: 'type (the brief; ref/raze: raze needs items that can be joined) */
    RAZE("table + atom", qtype(), TAB(SV("a"), JV(1)), J(2));
    RAZE("atom + table", qtype(), J(2), TAB(SV("a"), JV(1)));
    RAZE("vector + table", qtype(), JV(1, 2), TAB(SV("a"), JV(1)));
    RAZE("table + () (decided: () joins as nothing)", TAB(SV("a"), JV(1)), TAB(SV("a"), JV(1)), NIL());
    /* basics/joins: "A join combines data from two tables, or from a table and a dictionary":
     * a dictionary is a row (decided: its keys must be the columns, in any order) */
    RAZE("table + dictionary (a row)", TAB(SV("a", "b"), JV(1, 2, 3), SV("x", "y", "z")), TAB(SV("a", "b"), JV(1, 2), SV("x", "y")),
         D(SV("b", "a"), L(S("z"), J(3))));
    RAZE("table + two rows", TAB(SV("a", "b"), JV(1, 2, 3), L(S("x"), S("y"), STR("zz"))), TAB(SV("a", "b"), JV(1), SV("x")),
         D(SV("a", "b"), L(J(2), S("y"))), D(SV("a", "b"), L(J(3), STR("zz"))));
    RAZE("dictionary + table (decided: the row first, its key order)", TAB(SV("b", "a"), SV("w", "x", "y"), JV(0, 1, 2)),
         D(SV("b", "a"), L(S("w"), J(0))), TAB(SV("a", "b"), JV(1, 2), SV("x", "y")));
    RAZE("table + dictionary of other keys", k_err("mismatch"), TAB(SV("a", "b"), JV(1), SV("x")), D(SV("a", "c"), JV(1, 2)));
}

/* kmerge's `list of the n replies p (freed) is want (freed), and the bytes path's agrees */
static void list_is(K *p, int n, K want)
{
    bytes_path_agrees(p, n, "`list");
    K x = kmerge(p, n, 1);
    size_t xl, wl;
    uint8_t *xb = encode(x, &xl), *wb = encode(want, &wl);
    assert_int_equal(xl, wl);
    assert_memory_equal(xb, wb, xl);
    free(xb);
    free(wb);
    k_free(x);
    k_free(want);
    for (int i = 0; i < n; i++)
        k_free(p[i]);
}

/* The gateway's own rules around raze: the first q error in worker order is the answer, with
 * `list too; one reply is raze enlist x; `list is the replies as they are. */
static void test_errors_single_list(void **state)
{
    (void)state;
    assert_true(RAZE("errors: the first in worker order", k_err("second"), JV(1, 2), k_err("second"), k_err("third")));
    RAZE("an error before replies that would not join", k_err("e"), TAB(SV("a"), JV(1)), TAB(SV("b"), JV(1)), k_err("e"));
    assert_true(RAZE("q's error", qtype(), qtype(), JV(1)));
    /* ref/raze: raze 42 is ,42 ("atom returned as a list"); raze of a one-item list is its item */
    assert_true(RAZE("one reply, an atom", JV(42), J(42)));
    assert_true(RAZE("one reply, a symbol", SV("abc"), qval("`abc")));
    assert_true(RAZE("one reply, q's 1 2 3", qval("1 2 3"), qval("1 2 3")));
    K s = JV(1, 2, 3), s2 = JV(1, 2, 3);
    s->attr = s2->attr = 1; /* `s#: a single reply keeps its attribute */
    assert_true(RAZE("one reply, `s#1 2 3", s, s2));
    assert_true(RAZE("one reply, q's table", qval("flip `abc`def!(1 2 3; 4 5 6)"), qval("flip `abc`def!(1 2 3; 4 5 6)")));
    assert_true(RAZE("one reply, q's keyed table", qval("([k: 1 2 3] v: `a`b`c)"), qval("([k: 1 2 3] v: `a`b`c)")));
    assert_true(RAZE("one reply, q's dictionary", qval("1 2!`abc`cdefgh"), qval("1 2!`abc`cdefgh")));
    assert_true(RAZE("one reply, q's lambda", qval("{x+y}"), qval("{x+y}")));
    assert_true(RAZE("one reply, q's ()", qval("()"), qval("()")));
    assert_true(RAZE("one reply, q's ::", qval("::"), qval("::")));
    /* `list: the general list of the replies as they are */
    K p[3] = {JV(1, 2), S("e"), TAB(SV("a"), JV(1))};
    list_is(p, 3, L(JV(1, 2), S("e"), TAB(SV("a"), JV(1))));
    /* and a q error among them is the answer, the first in worker order: q has no list that
     * holds an error (a client reading one signals it, or cannot read it at all) */
    K e[4] = {JV(1, 2), k_err("e"), TAB(SV("a"), JV(1)), k_err("f")};
    list_is(e, 4, k_err("e"));
}

/* q's -8! bytes of a,b for vector bodies a and b of one type (0..19): a's items then b's,
 * under the sum of their counts, the attribute dropped. */
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

/* What q sends for x,x of table t (decoded from q's bytes b): each column spliced from its
 * own bytes, the names as they were. */
static K table_twice(const uint8_t *b, size_t len)
{
    K t = decode(b, len), d = kK(t)[0], cols = kK(d)[1];
    for (int64_t c = 0; c < cols->n; c++) {
        size_t cl, sl;
        uint8_t *cb = encode(kK(cols)[c], &cl), *sb = splice(cb, cl, cb, cl, &sl);
        k_free(kK(cols)[c]);
        kK(cols)[c] = decode(sb, sl);
        free(cb);
        free(sb);
    }
    return t;
}

static int is_list_type(int t) { return t == KT_LIST || (t >= 1 && t <= 19 && t != 3); }

/* Every list and table of QExpressions3.out merged with itself, and every list with the next
 * value of its type: q's x,y spliced from q's own bytes; the bytes path takes them all.
 * Keyed tables: x,x is x (upsert), on K objects. */
static void test_real_q_values(void **state)
{
    (void)state;
    int lists = 0, tables = 0, keyed = 0, others = 0;
    for (int i = 0; i < nqv; i++) {
        const uint8_t *b = qv[i].body;
        size_t len = qv[i].len, wl;
        int t = (int8_t)b[0];
        K want = NULL;
        if (is_list_type(t)) {
            int k = i + 1;
            while (k < nqv && (int8_t)qv[k].body[0] != t)
                k++;
            if (k < nqv) {
                uint8_t *wb = splice(b, len, qv[k].body, qv[k].len, &wl);
                assert_true(RAZE(qv[i].expr, decode(wb, wl), decode(b, len), decode(qv[k].body, qv[k].len)));
                free(wb);
                others++;
            }
            uint8_t *wb = splice(b, len, b, len, &wl);
            want = decode(wb, wl);
            free(wb);
            lists++;
        } else if (t == KT_TABLE) {
            want = table_twice(b, len);
            tables++;
        } else if (t == KT_DICT && len > 2 && b[1] == KT_TABLE) { /* keyed: 99 98 ... */
            assert_false(RAZE(qv[i].expr, decode(b, len), decode(b, len), decode(b, len)));
            keyed++;
            continue;
        } else {
            continue;
        }
        assert_true(RAZE(qv[i].expr, want, decode(b, len), decode(b, len)));
    }
    assert_true(lists >= 40); /* the file has 40 lists, 14 tables, 2 keyed tables */
    assert_true(tables >= 8);
    assert_true(keyed >= 2);
    assert_true(others >= 20);
    print_message("q's values: %d lists (%d with another of their type), %d tables, %d keyed tables\n", lists, others, tables,
                  keyed);
}

/* The bytes path applies where it is exact and leaves the rest to K objects (RAZE checks
 * they agree wherever it applies). */
static void test_bytes_path(void **state)
{
    (void)state;
    /* keyed tables may share keys, dictionaries upsert: K objects, even when no key repeats */
    assert_false(RAZE("keyed, keys distinct", D(TAB(SV("k"), JV(1, 2)), TAB(SV("v"), SV("a", "b"))), D(TAB(SV("k"), JV(1)), TAB(SV("v"), SV("a"))),
                      D(TAB(SV("k"), JV(2)), TAB(SV("v"), SV("b")))));
    assert_false(RAZE("dictionaries", D(SV("a", "b"), JV(1, 2)), D(SV("a"), JV(1)), D(SV("b"), JV(2))));
    /* () with a typed list, types that differ, a column whose type differs, other orders */
    assert_false(RAZE("() + vector", JV(1), NIL(), JV(1)));
    assert_false(RAZE("two types", L(J(1), S("a")), J(1), S("a")));
    assert_false(RAZE("tables, () column", TAB(SV("a"), JV(1)), TAB(SV("a"), NIL()), TAB(SV("a"), JV(1))));
    assert_false(RAZE("tables, other order", TAB(SV("a", "b"), JV(1, 2), JV(3, 4)), TAB(SV("a", "b"), JV(1), JV(3)), TAB(SV("b", "a"), JV(4), JV(2))));
    assert_false(RAZE("table + row", TAB(SV("a"), JV(1, 2)), TAB(SV("a"), JV(1)), D(SV("a"), JV(2))));
    /* where it applies: general lists with (), a lone non-empty one as it is */
    assert_true(RAZE("() + general list + ()", L(J(1), S("a")), NIL(), L(J(1), S("a")), NIL()));
    assert_true(RAZE("general lists with ()", L(J(1), S("a"), J(2)), L(J(1), S("a")), NIL(), L(J(2))));
    assert_true(RAZE("tables of general columns", TAB(SV("a"), L(STR("x"), STR("y"))), TAB(SV("a"), L(STR("x"))),
                     TAB(SV("a"), L(STR("y")))));
    K sv = JV(1, 2);
    sv->attr = 1;
    assert_true(RAZE("`s#1 2,3 (attribute dropped)", JV(1, 2, 3), sv, J(3)));
    /* a message that is not one whole object: the bytes path does not take it */
    K one = JV(1, 2);
    size_t l;
    uint8_t *m = kcodec_encode_msg(one, KIPC_RESPONSE, &l), *mm[2] = {m, m};
    size_t ll[2] = {l - 1, l}, ol;
    assert_null(kmerge_bytes((const uint8_t *const *)mm, ll, 2, 0, &ol));
    mm[0][0] = 0; /* big-endian: K objects */
    ll[0] = l;
    assert_null(kmerge_bytes((const uint8_t *const *)mm, ll, 2, 0, &ol));
    free(m);
    k_free(one);
    print_message("%d cases, the bytes path took %d\n", cases, bytes_cases);
}

/* job_merge's partial form: `workers`result!(`$names; merged), or the error. */
static struct job *run_merge(K *parts, int n, int as_list, const char *const *names)
{
    struct merge_in *in = calloc(1, sizeof *in + (size_t)n * sizeof in->part[0]);
    in->n = n;
    in->as_list = as_list;
    in->partial = 1;
    in->names = calloc((size_t)n, sizeof *in->names);
    for (int i = 0; i < n; i++) {
        in->part[i].p = kcodec_encode_msg(parts[i], KIPC_RESPONSE, &in->part[i].len);
        in->names[i] = strdup(names[i]);
        k_free(parts[i]);
    }
    struct job *j = job_new(job_merge, 0);
    j->ctx = in;
    j->ctx_free = jobs_merge_in_free;
    job_args(j)->reply = (struct job_reply){.cap = 3, .max = 1 << 24, .compress_max = 1 << 24, .merge_max = 1 << 24};
    job_merge(j);
    return j;
}

static void partial_is(const char *what, K want, K *parts, int n, int as_list, const char *const *names)
{
    struct job *j = run_merge(parts, n, as_list, names);
    assert_non_null(j->out);
    assert_int_equal(j->out[1], KIPC_RESPONSE);
    size_t wl;
    uint8_t *wb = encode(want, &wl);
    if (j->out_len - 8 != wl || memcmp(j->out + 8, wb, wl)) {
        char *g = hex(j->out + 8, j->out_len - 8), *w = hex(wb, wl);
        fail_msg("partial %s:\n got  %s\n want %s", what, g, w);
    }
    free(wb);
    k_free(want);
    job_free(j);
}
#define PARTIAL(what, want, as_list, names, ...) \
    partial_is(what, want, (K[]){__VA_ARGS__}, NARGS(K, __VA_ARGS__), as_list, names)

static K workers(K names, K result) { return D(SV("workers", "result"), L(names, result)); }

static void test_partial(void **state)
{
    (void)state;
    const char *w2[] = {"hdb1:5010", "unix:///tmp/q.sock"}, *w3[] = {"a:1", "b:2", "c:3"};
    PARTIAL("vectors (bytes path)", workers(SV("hdb1:5010", "unix:///tmp/q.sock"), JV(1, 2, 3)), 0, w2, JV(1, 2), J(3));
    PARTIAL("keyed tables (K objects)",
            workers(SV("a:1", "b:2", "c:3"), D(TAB(SV("k"), JV(1, 2)), TAB(SV("v"), SV("c", "b")))), 0, w3,
            D(TAB(SV("k"), JV(1)), TAB(SV("v"), SV("a"))), D(TAB(SV("k"), JV(2)), TAB(SV("v"), SV("b"))),
            D(TAB(SV("k"), JV(1)), TAB(SV("v"), SV("c"))));
    PARTIAL("`list", workers(SV("hdb1:5010", "unix:///tmp/q.sock"), L(JV(1, 2), S("e"))), 1, w2, JV(1, 2), S("e"));
    PARTIAL("`list, a q error among the replies", k_err("e"), 1, w2, JV(1, 2), k_err("e"));
    PARTIAL("one worker", workers(SV("a:1"), JV(42)), 0, w3, J(42));
    PARTIAL("a q error among the replies", k_err("e"), 0, w2, JV(1, 2), k_err("e"));
    PARTIAL("raze's 'mismatch", k_err("mismatch"), 0, w2, TAB(SV("a"), JV(1)), TAB(SV("b"), JV(1)));
    PARTIAL("raze's 'type", k_err("type"), 0, w3, TAB(SV("a"), JV(1)), J(1), J(2));
    PARTIAL("a table (K objects: () column)", workers(SV("a:1", "b:2"), TAB(SV("a"), JV(5))), 0, w3, TAB(SV("a"), NIL()),
            TAB(SV("a"), JV(5)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_atoms_and_lists), cmocka_unit_test(test_empties),
        cmocka_unit_test(test_dictionaries),    cmocka_unit_test(test_dictionaries_q),
        cmocka_unit_test(test_keyed_tables),    cmocka_unit_test(test_tables),
        cmocka_unit_test(test_errors_single_list), cmocka_unit_test(test_real_q_values),
        cmocka_unit_test(test_bytes_path),      cmocka_unit_test(test_partial),
    };
    return cmocka_run_group_tests_name("kmerge", tests, setup, teardown);
}

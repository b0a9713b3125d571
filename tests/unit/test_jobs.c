/* test_jobs.c: the peeks the loop makes at a message (routes, commands), the parse of a
 * routing form (every form, every way one is malformed), the reader's parse of a gateway
 * command and its argument, and the reader's validation job reading routes (a large one's
 * form handed back, a compressed one decompressed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "pool.h"
#include "tutil.h"

/* A message carrying x (freed), as a client sends it. */
static uint8_t *msg_of(K x, size_t *len)
{
    uint8_t *m = kcodec_encode_msg(x, KIPC_SYNC, len);
    k_free(x);
    assert_non_null(m);
    return m;
}

/* (f; arg) with f a symbol or (node-q) a string; arg NULL for (f) alone. */
static K call(const char *f, int f_is_sym, K arg)
{
    K l = k_list(arg ? 2 : 1);
    kK(l)[0] = f_is_sym ? k_sym(f) : k_str(f, strlen(f));
    if (arg)
        kK(l)[1] = arg;
    return l;
}

static K long_atom(int64_t v)
{
    K x = k_atom(-KT_LONG);
    x->j = v;
    return x;
}

/* x as a whole sync message in byte order le (1 little-endian, 0 big-endian); x freed. */
static uint8_t *msg_le(K x, int le, size_t *len)
{
    size_t n = kcodec_size(x);
    uint8_t *m = malloc(8 + n);
    assert_non_null(m);
    m[0] = (uint8_t)le;
    m[1] = KIPC_SYNC;
    m[2] = m[3] = 0;
    kipc_hdr_len_write(m, (uint32_t)(8 + n));
    kcodec_write(x, m + 8, le);
    k_free(x);
    *len = 8 + n;
    return m;
}

/* (name; grp; query[; opts]) (opts NULL: three items); name a symbol (`x) or a string ("x") */
static K form(const char *name, int name_is_sym, K grp, K query, K opts)
{
    K l = k_list(opts ? 4 : 3);
    kK(l)[0] = name_is_sym ? k_sym(name) : k_str(name, strlen(name));
    kK(l)[1] = grp;
    kK(l)[2] = query;
    if (opts)
        kK(l)[3] = opts;
    return l;
}

static uint8_t *route_msg(const char *name, int name_is_sym, K grp, K query, size_t *len)
{
    size_t n;
    uint8_t *m = msg_le(form(name, name_is_sym, grp, query, NULL), 1, &n);
    *len = n;
    return m;
}

static K syms2(const char *a, const char *b)
{
    const char *v[] = {a, b};
    return k_symv(b ? 2 : 1, v);
}

/* (`upd; `trade; ([] sym: n symbols; price: n floats)): what a feed sends, as a query */
static K upd(int64_t rows)
{
    const char *cols[] = {"sym", "price"};
    K price = k_vec(KT_FLOAT, rows);
    const char **names = calloc((size_t)rows + 1, sizeof *names);
    for (int64_t i = 0; i < rows; i++) {
        names[i] = i % 2 ? "ibm" : "msft";
        kF(price)[i] = (double)i / 4;
    }
    K sym = k_symv(rows, names);
    free(names);
    K vals = k_list(2);
    kK(vals)[0] = sym;
    kK(vals)[1] = price;
    K l = k_list(3);
    kK(l)[0] = k_sym("upd");
    kK(l)[1] = k_sym("trade");
    kK(l)[2] = k_table(k_dict(k_symv(2, cols), vals));
    return l;
}

/* m parses as a route of kind to group grp whose query is exactly what q serialises for
 * query alone (in the message's byte order), with the flags given. */
static void expect_route(uint8_t *m, size_t len, int kind, const char *grp, K query, int as_list, int partial)
{
    struct route_form f;
    assert_int_equal(jobs_peek_route(m, len), kind);
    assert_int_equal(jobs_parse_route(m, len, &f), kind);
    assert_int_equal(f.kind, kind);
    assert_int_equal(f.bad, ROUTE_OK);
    assert_int_equal(f.as_list, as_list);
    assert_int_equal(f.partial, partial);
    assert_string_equal((const char *)m + f.grp, grp);
    size_t qn = kcodec_size(query);
    uint8_t *alone = malloc(qn);
    kcodec_write(query, alone, m[0]);
    k_free(query);
    assert_int_equal(len - f.tail - f.qoff, qn);
    assert_memory_equal(m + f.qoff, alone, qn);
    free(alone);
    /* a form read whole is a message q accepts */
    assert_int_equal(kvalidate_check(m + 8, len - 8, m[0], NULL, NULL), QG_OK);
    /* and it is never taken for a command */
    assert_int_equal(jobs_peek_command(m, len), 0);
}

/* Every form a route takes: named by a symbol or a string, little- and big-endian, any query,
 * .qgate.all's `list, `partial, `list`partial. */
static void test_parse_route(void **state)
{
    (void)state;
    size_t len;
    uint8_t *m;
    for (int le = 0; le < 2; le++) {
        for (int sym = 0; sym < 2; sym++) {
            m = msg_le(form(".qgate.on", sym, k_sym("hdb"), k_str("select from t", 13), NULL), le, &len);
            expect_route(m, len, ROUTE_ON, "hdb", k_str("select from t", 13), 0, 0);
            free(m);
            m = msg_le(form(".qgate.on", sym, k_sym("solo"), upd(50), NULL), le, &len);
            expect_route(m, len, ROUTE_ON, "solo", upd(50), 0, 0);
            free(m);
            m = msg_le(form(".qgate.all", sym, k_sym("hdb"), k_str("count t", 7), NULL), le, &len);
            expect_route(m, len, ROUTE_ALL, "hdb", k_str("count t", 7), 0, 0);
            free(m);
            m = msg_le(form(".qgate.all", sym, k_sym("hdb"), k_str("count t", 7), k_sym("list")), le, &len);
            expect_route(m, len, ROUTE_ALL, "hdb", k_str("count t", 7), 1, 0);
            free(m);
            m = msg_le(form(".qgate.all", sym, k_sym("hdb"), k_str("count t", 7), k_sym("partial")), le, &len);
            expect_route(m, len, ROUTE_ALL, "hdb", k_str("count t", 7), 0, 1);
            free(m);
            m = msg_le(form(".qgate.all", sym, k_sym("hdb"), upd(3), syms2("list", "partial")), le, &len);
            expect_route(m, len, ROUTE_ALL, "hdb", upd(3), 1, 1);
            free(m);
            m = msg_le(form(".qgate.all", sym, k_sym("hdb"), k_str("x", 1), syms2("partial", "list")), le, &len);
            expect_route(m, len, ROUTE_ALL, "hdb", k_str("x", 1), 1, 1);
            free(m);
        }
    }
    /* a query of any size: the form says where it ends, nothing else is needed */
    char *big = malloc(40000);
    memset(big, 'q', 40000);
    m = msg_le(form(".qgate.all", 1, k_sym("g"), k_str(big, 40000), k_sym("list")), 1, &len);
    expect_route(m, len, ROUTE_ALL, "g", k_str(big, 40000), 1, 0);
    free(m);
    free(big);
    /* not routes: another name, a plain string, a compressed message, a command */
    struct route_form f;
    m = route_msg(".qgate.one", 1, k_sym("hdb"), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len), 0);
    assert_int_equal(jobs_parse_route(m, len, &f), 0);
    free(m);
    m = route_msg(".qgate.onx", 0, k_sym("hdb"), k_str("x", 1), &len);
    assert_int_equal(jobs_parse_route(m, len, &f), 0);
    free(m);
    m = msg_le(k_str(".qgate.on", 9), 1, &len);
    assert_int_equal(jobs_parse_route(m, len, &f), 0);
    free(m);
    m = route_msg(".qgate.on", 1, k_sym("hdb"), k_str("x", 1), &len);
    m[2] = 1;
    assert_int_equal(jobs_peek_route(m, len), 0);
    assert_int_equal(jobs_parse_route(m, len, &f), 0);
    free(m);
    m = msg_le(call(".qgate.ping", 1, k_prim(KT_UNARY, 0)), 1, &len);
    assert_int_equal(jobs_peek_route(m, len), 0);
    assert_int_equal(jobs_peek_command(m, len), 1);
    free(m);
}

/* m names a route of kind but is not one, for reason bad. */
static void expect_bad(uint8_t *m, size_t len, int kind, int bad)
{
    struct route_form f;
    assert_int_equal(jobs_peek_route(m, len), kind);
    assert_int_equal(jobs_parse_route(m, len, &f), -1);
    assert_int_equal(f.kind, kind);
    assert_int_equal(f.bad, bad);
    assert_int_equal(jobs_peek_command(m, len), 0); /* never taken for a command either */
    assert_non_null(strstr(jobs_route_usage(&f), kind == ROUTE_ON ? "(`.qgate.on; `group; query)" : "`list`partial"));
    assert_string_not_equal(jobs_route_why(&f), "none");
    free(m);
}

/* The same for the message of x (freed) in byte order le. */
static void expect_bad_k(K x, int le, int kind, int bad)
{
    size_t len;
    uint8_t *m = msg_le(x, le, &len);
    expect_bad(m, len, kind, bad);
}

/* A message that names .qgate.on or .qgate.all but is not exactly such a form: each way. */
static void test_parse_route_malformed(void **state)
{
    (void)state;
    size_t len;
    for (int le = 0; le < 2; le++) {
        /* the exploit: a 4th item, a string, that ends in the bytes of `list (f5 "list" 00);
         * cut off there, the rest would reach the workers malformed */
        uint8_t *m = msg_le(form(".qgate.all", 1, k_sym("g"), k_str("echo x", 6), k_str("AB\xf5" "list\0", 8)), le, &len);
        assert_memory_equal(m + len - 6, "\xf5list", 6);
        assert_int_equal(kvalidate_check(m + 8, len - 8, le, NULL, NULL), QG_OK); /* q reads it: a bad route */
        expect_bad(m, len, ROUTE_ALL, ROUTE_BAD_OPTS);
        /* other 4th items: another symbol, a vector with another, the same twice, three, one */
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), k_sym("lost")), le, ROUTE_ALL,
                   ROUTE_BAD_OPTS);
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), k_sym("lis")), le, ROUTE_ALL,
                   ROUTE_BAD_OPTS);
        expect_bad_k(form(".qgate.all", 0, k_sym("g"), k_str("x", 1), syms2("list", "lost")), le,
                   ROUTE_ALL, ROUTE_BAD_OPTS);
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), syms2("list", "list")), le,
                   ROUTE_ALL, ROUTE_BAD_OPTS);
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), syms2("list", NULL)), le, ROUTE_ALL,
                   ROUTE_BAD_OPTS);
        const char *three[] = {"list", "partial", "list"};
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), k_symv(3, three)), le, ROUTE_ALL,
                   ROUTE_BAD_OPTS);
        expect_bad_k(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), k_str("list", 4)), le, ROUTE_ALL,
                   ROUTE_BAD_OPTS);
        /* .qgate.on takes no 4th item */
        expect_bad_k(form(".qgate.on", 1, k_sym("g"), k_str("x", 1), k_sym("list")), le, ROUTE_ON,
                   ROUTE_BAD_COUNT);
        expect_bad_k(form(".qgate.on", 0, k_sym("g"), k_str("x", 1), k_sym("partial")), le, ROUTE_ON,
                   ROUTE_BAD_COUNT);
        /* counts 1, 2 and 5 */
        expect_bad_k(call(".qgate.all", 1, NULL), le, ROUTE_ALL, ROUTE_BAD_COUNT);
        expect_bad_k(call(".qgate.on", 1, k_sym("g")), le, ROUTE_ON, ROUTE_BAD_COUNT);
        expect_bad_k(call(".qgate.all", 0, k_sym("g")), le, ROUTE_ALL, ROUTE_BAD_COUNT);
        K five = k_list(5);
        kK(five)[0] = k_sym(".qgate.all");
        kK(five)[1] = k_sym("g");
        kK(five)[2] = k_str("x", 1);
        kK(five)[3] = k_sym("list");
        kK(five)[4] = k_sym("partial");
        expect_bad_k(five, le, ROUTE_ALL, ROUTE_BAD_COUNT);
        /* the group: a string, a long, the null symbol, a name no group can have */
        expect_bad_k(form(".qgate.on", 1, k_str("hdb", 3), k_str("x", 1), NULL), le, ROUTE_ON,
                   ROUTE_BAD_GROUP);
        expect_bad_k(form(".qgate.all", 1, long_atom(3), k_str("x", 1), NULL), le, ROUTE_ALL,
                   ROUTE_BAD_GROUP);
        expect_bad_k(form(".qgate.on", 1, k_sym(""), k_str("x", 1), NULL), le, ROUTE_ON, ROUTE_BAD_GROUP);
        char longname[CFG_NAME_MAX + 1];
        memset(longname, 'g', CFG_NAME_MAX);
        longname[CFG_NAME_MAX] = 0;
        expect_bad_k(form(".qgate.on", 1, k_sym(longname), k_str("x", 1), NULL), le, ROUTE_ON,
                   ROUTE_BAD_GROUP);
        longname[CFG_NAME_MAX - 1] = 0; /* the longest a group's name may be: read */
        m = msg_le(form(".qgate.on", 1, k_sym(longname), k_str("x", 1), NULL), le, &len);
        expect_route(m, len, ROUTE_ON, longname, k_str("x", 1), 0, 0);
        free(m);
    }
    /* trailing bytes after the last item (the count says 3, a 4th follows) */
    uint8_t *m = route_msg(".qgate.all", 1, k_sym("g"), k_str("x", 1), &len);
    uint8_t *t = malloc(len + 6);
    memcpy(t, m, len);
    memcpy(t + len, "\xf5list", 6);
    kipc_hdr_len_write(t, (uint32_t)(len + 6));
    free(m);
    expect_bad(t, len + 6, ROUTE_ALL, ROUTE_BAD_TRAILING);
    m = msg_le(form(".qgate.all", 1, k_sym("g"), k_str("x", 1), k_sym("list")), 1, &len);
    t = malloc(len + 1);
    memcpy(t, m, len);
    t[len] = 0;
    free(m);
    expect_bad(t, len + 1, ROUTE_ALL, ROUTE_BAD_TRAILING);
    /* the query truncated: its count past the end, or its bytes cut */
    m = route_msg(".qgate.on", 1, k_sym("g"), k_str("select from t", 13), &len);
    kipc_hdr_len_write(m, (uint32_t)(len - 3));
    expect_bad(m, len - 3, ROUTE_ON, ROUTE_BAD_QUERY);
    m = route_msg(".qgate.on", 0, k_sym("g"), upd(10), &len);
    expect_bad(m, len - 1, ROUTE_ON, ROUTE_BAD_QUERY);
    m = route_msg(".qgate.on", 1, k_sym("g"), k_str("x", 1), &len);
    m[len - 6 + 1] = 9; /* an attribute q has not */
    expect_bad(m, len, ROUTE_ON, ROUTE_BAD_QUERY);
    /* a list attribute q has not */
    m = route_msg(".qgate.on", 1, k_sym("g"), k_str("x", 1), &len);
    m[9] = 7;
    expect_bad(m, len, ROUTE_ON, ROUTE_BAD_LIST);
    /* every prefix of a route is no route, or a malformed one: never a read past the end */
    m = msg_le(form(".qgate.all", 0, k_sym("hdb"), upd(4), syms2("list", "partial")), 1, &len);
    for (size_t n = 0; n < len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, m, n);
        struct route_form f;
        assert_true(jobs_parse_route(p, n, &f) <= 0);
        assert_true(jobs_peek_route(p, n) == 0 || n >= 8 + 6 + 12);
        free(p);
    }
    free(m);
}

/* A long route is never taken for a gateway command (refused 'bad command, over 1 KiB). */
static void test_route_is_no_command(void **state)
{
    (void)state;
    char *big = malloc(20000);
    memset(big, 'x', 20000);
    memcpy(big, "echo ", 5);
    for (int sym = 0; sym < 2; sym++) {
        size_t len;
        uint8_t *m = route_msg(sym ? ".qgate.on" : ".qgate.all", sym, k_sym("g"), k_str(big, 20000), &len);
        assert_int_equal(jobs_peek_command(m, len), 0);
        free(m);
    }
    free(big);
}

/* job_validate_msg on j->in (check.max 1 MiB): the job, run, to be freed. */
static struct job *validated(uint8_t *m, size_t len)
{
    struct job *j = job_new(job_validate_msg, 0);
    j->in = m;
    j->in_len = len;
    job_args(j)->check.max = 1 << 20;
    job_validate_msg(j);
    return j;
}

/* m compressed (it must compress), m freed. */
static uint8_t *compressed(uint8_t *m, size_t len, size_t *zlen)
{
    uint8_t *z = malloc(len);
    *zlen = kzip_compress(m, len, z);
    assert_true(*zlen > 0 && *zlen < len / 2);
    free(m);
    return z;
}

/* The reader reads what the loop does not: a large route, plain (handed back as it is, its
 * form with it) or compressed (handed back decompressed, its offsets into that); a bad route
 * that q would read (its form says what is wrong); a route q would not read (a bad message). */
static void test_validate_reads_routes(void **state)
{
    (void)state;
    char text[24000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + (i / 11) % 4);
    size_t len, zlen;
    uint8_t *plain = route_msg(".qgate.on", 1, k_sym("hdb"), k_str(text, sizeof text), &len);
    /* plain, over VALIDATE_ON_LOOP_MAX */
    uint8_t *m = malloc(len);
    memcpy(m, plain, len);
    struct job *j = validated(m, len);
    struct route_form f;
    assert_int_equal(j->result, 0);
    assert_null(j->out);
    f = job_args(j)->check.form;
    assert_int_equal(f.kind, ROUTE_ON);
    assert_int_equal(f.bad, ROUTE_OK);
    assert_string_equal((const char *)j->in + f.grp, "hdb");
    assert_int_equal(len - f.tail - f.qoff, 6 + sizeof text);
    job_free(j);
    /* compressed */
    for (int is_route = 1; is_route >= 0; is_route--) {
        m = malloc(len);
        memcpy(m, plain, len);
        if (!is_route)
            memcpy(m + 8 + 6 + 1, ".qgatx.on", 9); /* (`.qgatx.on; ...): a plain call */
        uint8_t *z = compressed(m, len, &zlen);
        j = validated(z, zlen);
        assert_int_equal(j->result, 0);
        f = job_args(j)->check.form;
        if (is_route) {
            assert_non_null(j->out);
            assert_int_equal(j->out_len, len);
            assert_memory_equal(j->out, plain, len); /* byte 2 = 0, the plain length */
            assert_int_equal(f.kind, ROUTE_ON);
            assert_string_equal((const char *)j->out + f.grp, "hdb");
            assert_memory_equal(j->out + f.qoff + 6, text, sizeof text);
        } else {
            assert_null(j->out);
            assert_int_equal(f.kind, 0);
        }
        job_free(j);
    }
    /* a compressed call of a gateway command's name, (`.qgate.ox; `hdb; text), as it would
     * be plain (a bad command: three items, over 1024 bytes), and a compressed gateway
     * command that is a string (q compresses only over 2000 bytes: a hostile client's): each
     * handed back plain, for the loop to run or refuse as a command */
    m = malloc(len);
    memcpy(m, plain, len);
    memcpy(m + 8 + 6 + 1, ".qgate.ox", 9);
    uint8_t *want = malloc(len);
    memcpy(want, m, len);
    uint8_t *zc = compressed(m, len, &zlen);
    j = validated(zc, zlen);
    assert_int_equal(j->result, 0);
    assert_non_null(j->out);
    assert_int_equal(j->out_len, len);
    assert_memory_equal(j->out, want, len);
    assert_int_equal(jobs_peek_command(j->out, j->out_len), -1);
    job_free(j);
    free(want);
    free(plain);
    const char *ping = ".qgate.ping[]";
    plain = msg_le(k_str(ping, strlen(ping)), 1, &len);
    zc = malloc(12 + (len - 8) + (len - 8 + 7) / 8); /* made by hand, every byte a literal */
    memcpy(zc, plain, 8);
    qg_st32(zc + 8, (uint32_t)len); /* (little-endian, as the header says) */
    zlen = 12;
    for (size_t i = 8; i < len; i++) {
        if ((i - 8) % 8 == 0)
            zc[zlen++] = 0; /* a group's flags: eight literals */
        zc[zlen++] = plain[i];
    }
    kipc_hdr_len_write(zc, (uint32_t)zlen);
    zc[2] = 1; /* (after: the length's write clears it) */
    j = validated(zc, zlen);
    assert_int_equal(j->result, 0);
    assert_non_null(j->out);
    assert_memory_equal(j->out, plain, len);
    assert_int_equal(jobs_peek_command(j->out, j->out_len), 1);
    job_free(j);
    free(plain);
    /* the exploit, large and compressed: a bad route, nothing handed back */
    size_t n = 16000;
    char *q = malloc(n);
    memset(q, 'e', n);
    memcpy(q, "echo ", 5);
    m = msg_le(form(".qgate.all", 1, k_sym("g"), k_str(q, n), k_str("AB\xf5" "list\0", 8)), 1, &len);
    uint8_t *copy = malloc(len);
    memcpy(copy, m, len);
    for (int z = 0; z < 2; z++) {
        uint8_t *in = z ? compressed(m, len, &zlen) : copy;
        j = validated(in, z ? zlen : len);
        assert_int_equal(j->result, 0);
        assert_null(j->out);
        f = job_args(j)->check.form;
        assert_int_equal(f.kind, ROUTE_ALL);
        assert_int_equal(f.bad, ROUTE_BAD_OPTS);
        job_free(j);
    }
    /* a route whose query is cut: not a message q reads */
    m = route_msg(".qgate.on", 1, k_sym("g"), k_str(q, n), &len);
    kipc_hdr_len_write(m, (uint32_t)(len - 1));
    j = validated(m, len - 1);
    assert_int_equal(j->result, 1);
    job_free(j);
    free(q);
    /* a response (a client's answer to a callback): the worker named is the caller's, untouched */
    m = route_msg(".qgate.on", 1, k_sym("g"), k_str(text, sizeof text), &len);
    m[1] = KIPC_RESPONSE;
    j = job_new(job_validate_msg, 0);
    j->in = m;
    j->in_len = len;
    job_args(j)->check = (struct job_check){.max = 1 << 20, .w_id = 12345, .w_gen = 678};
    job_validate_msg(j);
    assert_int_equal(j->result, 0);
    assert_int_equal(job_args(j)->check.w_id, 12345);
    assert_int_equal(job_args(j)->check.w_gen, 678);
    assert_null(j->out);
    job_free(j);
}

static int64_t merge_max = 1 << 24; /* merge_job's */

static struct job *merge_job(K *parts, int n, int compress_first, int cap, int compress)
{
    struct merge_in *in = calloc(1, sizeof *in + (size_t)n * sizeof in->part[0]);
    in->n = n;
    for (int i = 0; i < n; i++) {
        size_t len;
        uint8_t *m = kcodec_encode_msg(parts[i], KIPC_RESPONSE, &len);
        if (i == 0 && compress_first) { /* a remote worker compressed its reply */
            uint8_t *z = malloc(len);
            size_t zl = kzip_compress(m, len, z);
            assert_true(zl > 0);
            free(m);
            m = z;
            len = zl;
        }
        in->part[i].p = m;
        in->part[i].len = len;
        k_free(parts[i]);
    }
    struct job *j = job_new(job_merge, 0);
    j->ctx = in;
    j->ctx_free = jobs_merge_in_free;
    job_args(j)->reply = (struct job_reply){.cap = cap, .max = 1 << 24, .compress = (uint8_t)compress,
                                            .compress_max = 1 << 24, .merge_max = merge_max};
    job_merge(j);
    return j;
}

static K decoded_out(struct job *j)
{
    struct kipc_hdr h = {0};
    const char *why;
    assert_non_null(j->out);
    assert_int_equal(kipc_hdr_parse(j->out, j->out_len, j->out_len, &h, &why), QG_OK);
    assert_int_equal(h.type, KIPC_RESPONSE);
    uint8_t *plain = j->out;
    if (h.compressed) {
        size_t n = kzip_uncompressed_len(j->out, j->out_len);
        plain = malloc(n);
        assert_int_equal(kzip_decompress(j->out, j->out_len, plain, n, &why), QG_OK);
    }
    K x = NULL;
    struct kerr e;
    size_t plen = h.compressed ? kzip_uncompressed_len(j->out, j->out_len) : j->out_len;
    assert_int_equal(kcodec_decode(plain + 8, plen - 8, 1, NULL, &x, &e), QG_OK);
    if (plain != j->out)
        free(plain);
    return x;
}

/* The writer's merge job: replies decoded (a compressed one too), merged in worker order,
 * encoded for the client (compressed for a remote one, checked for an old one). */
static void test_merge_job(void **state)
{
    (void)state;
    char text[3000];
    memset(text, 'q', sizeof text);
    K parts[3] = {k_str(text, sizeof text), k_str("ab", 2), k_str("cd", 2)};
    struct job *j = merge_job(parts, 3, 1, 3, 0);
    K x = decoded_out(j);
    assert_int_equal(x->t, KT_CHAR);
    assert_int_equal(x->n, 3004);
    assert_memory_equal(kC(x) + 3000, "abcd", 4);
    k_free(x);
    job_free(j);
    /* a remote client: the merged reply compressed as q compresses */
    K p2[2] = {k_str(text, sizeof text), k_str(text, sizeof text)};
    j = merge_job(p2, 2, 0, 3, 1);
    assert_int_equal(j->out[2], 1);
    x = decoded_out(j);
    assert_int_equal(x->n, 6000);
    k_free(x);
    job_free(j);
    /* ... at capability 1 and 2 too, checked first (before: never compressed below 3, though
     * q compresses for 1 or more) */
    for (int cap = 1; cap <= 2; cap++) {
        K pc[2] = {k_str(text, sizeof text), k_str(text, sizeof text)};
        j = merge_job(pc, 2, 0, cap, 1);
        assert_int_equal(j->out[2], 1);
        x = decoded_out(j);
        assert_int_equal(x->n, 6000);
        k_free(x);
        job_free(j);
    }
    /* merge_max holds for the replies' own sizes: the first, 3000 bytes compressed to a few, and
     * two of 2 is over 3020 bytes */
    merge_max = 3020;
    K p4[3] = {k_str(text, sizeof text), k_str("ab", 2), k_str("cd", 2)};
    j = merge_job(p4, 3, 1, 3, 0);
    x = decoded_out(j);
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "qgate: merge too large (over merge_max, 3020 bytes)");
    assert_int_equal(j->result, 2);
    k_free(x);
    job_free(j);
    merge_max = 1 << 24;
    /* a merged answer that is a q error is said to be one (counted in errors) */
    K p5[2] = {k_str("ab", 2), k_err("oops")};
    j = merge_job(p5, 2, 0, 3, 0);
    assert_int_equal(j->result, 1);
    assert_string_equal(j->text, "oops");
    job_free(j);
    /* a capability-2 client cannot take a guid: 'type, as q answers it */
    K p3[2] = {k_atom(-KT_GUID), k_atom(-KT_GUID)};
    j = merge_job(p3, 2, 0, 2, 0);
    x = decoded_out(j);
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "type");
    k_free(x);
    job_free(j);
    /* a reply that cannot be read: the client is told */
    struct merge_in *in = calloc(1, sizeof *in + sizeof in->part[0]);
    in->n = 1;
    in->part[0].p = malloc(9);
    memcpy(in->part[0].p, "\x01\x02\x00\x00\x09\x00\x00\x00\x4d", 9); /* type 77 */
    in->part[0].len = 9;
    j = job_new(job_merge, 0);
    j->ctx = in;
    j->ctx_free = jobs_merge_in_free;
    job_args(j)->reply.cap = 3;
    job_args(j)->reply.merge_max = 1 << 24;
    job_merge(j);
    x = decoded_out(j);
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "qgate: a .qgate.all reply could not be merged");
    assert_int_equal(j->result, 2); /* the gateway's error, counted so */
    k_free(x);
    job_free(j);
}

/* job_parse_command on message x: the job, to be freed. */
static struct job *parsed(K x)
{
    struct job *j = job_new(job_parse_command, 0);
    j->in = msg_of(x, &j->in_len);
    job_parse_command(j);
    return j;
}

/* x parses as command cmd with argument kind (and the name or number). */
static void expect_cmd(K x, int cmd, int kind, const char *name, int64_t num)
{
    struct job *j = parsed(x);
    assert_int_equal(j->result, cmd);
    assert_int_equal(job_args(j)->cmd.arg_kind, kind);
    if (kind == GWARG_NAME) {
        assert_non_null(j->out);
        assert_string_equal((const char *)j->out, name);
        assert_int_equal(j->out_len, strlen(name));
    } else {
        assert_null(j->out);
    }
    assert_int_equal(job_args(j)->cmd.num, kind == GWARG_NUM ? num : -1);
    job_free(j);
}

static K text(const char *s) { return k_str(s, strlen(s)); }

/* The peek: text, a call named by a symbol, a call named by a string (node-q); the shape. */
static void test_peek_command(void **state)
{
    (void)state;
    size_t len;
    uint8_t *m = msg_of(text(".qgate.pause[`rdb]"), &len);
    assert_int_equal(jobs_peek_command(m, len), 1);
    free(m);
    m = msg_of(text("  .qgate.ping[]"), &len); /* spaces before it, as q reads them */
    assert_int_equal(jobs_peek_command(m, len), 1);
    free(m);
    struct job *j = parsed(text("  .qgate.ping[]"));
    assert_int_equal(j->result, GWCMD_PING);
    job_free(j);
    /* any whitespace q takes around an expression, however much of it: tabs, newlines, 100
     * spaces (at 1d29e85 a tab, a newline or more than 64 spaces sent it to a worker) */
    char wide[160];
    snprintf(wide, sizeof wide, "%100s.qgate.ping[ ]", "");
    const char *spaced[] = {"\t.qgate.ping[]", "\n.qgate.ping[]\r\n", " \r\n\t.qgate.ping[\t]\n;", wide};
    for (size_t i = 0; i < sizeof spaced / sizeof spaced[0]; i++) {
        m = msg_of(text(spaced[i]), &len);
        assert_int_equal(jobs_peek_command(m, len), 1);
        free(m);
        j = parsed(text(spaced[i]));
        assert_int_equal(j->result, GWCMD_PING);
        job_free(j);
    }
    for (int sym = 0; sym < 2; sym++) {
        m = msg_of(call(".qgate.pause", sym, k_sym("rdb")), &len);
        assert_int_equal(jobs_peek_command(m, len), 1);
        free(m);
        m = msg_of(call(".qgate.shutdown", sym, NULL), &len);
        assert_int_equal(jobs_peek_command(m, len), 1);
        free(m);
        K l3 = k_list(3); /* two arguments: refused unread */
        kK(l3)[0] = sym ? k_sym(".qgate.disable") : k_str(".qgate.disable", 14);
        kK(l3)[1] = k_sym("a");
        kK(l3)[2] = k_sym("b");
        m = msg_of(l3, &len);
        assert_int_equal(jobs_peek_command(m, len), -1);
        free(m);
    }
    /* not commands: another name, a string that names a worker's function */
    m = msg_of(call(".qgatex", 0, k_sym("a")), &len);
    assert_int_equal(jobs_peek_command(m, len), 0);
    free(m);
    m = msg_of(call("f", 1, k_str(".qgate.pause", 12)), &len);
    assert_int_equal(jobs_peek_command(m, len), 0);
    free(m);
    m = msg_of(text("select from t"), &len);
    assert_int_equal(jobs_peek_command(m, len), 0);
    free(m);
}

/* A command's answer holding a timestamp (.qgate.stats[]' started): 'type for a capability-0
 * client, as q would for a value its peer cannot take; as it is from capability 1 up. */
static K stamp_table(const void *snap)
{
    (void)snap;
    K t = k_atom(-KT_TIMESTAMP);
    if (t)
        t->j = 1;
    return t;
}

static void test_command_answer_cap(void **state)
{
    (void)state;
    for (int cap = 0; cap <= 3; cap++) {
        struct job *j = job_new(job_encode_command, JK_REPLY);
        assert_non_null(j);
        job_args(j)->answer = (struct job_answer){.cmd = 1, .encode = stamp_table, .cap = cap};
        job_encode_command(j);
        assert_non_null(j->out);
        K x = NULL;
        struct kerr e;
        assert_int_equal(kcodec_decode(j->out + 8, j->out_len - 8, 1, NULL, &x, &e), QG_OK);
        if (cap == 0) {
            assert_int_equal(x->t, KT_ERROR);
            assert_string_equal(x->s, "type");
        } else {
            assert_int_equal(x->t, -KT_TIMESTAMP);
        }
        k_free(x);
        job_free(j);
    }
}

static K big_text(const void *snap)
{
    (void)snap;
    char t[5000];
    memset(t, 'g', sizeof t);
    return k_str(t, sizeof t);
}

/* A gateway command's answer to a remote client is compressed as q compresses its replies (over
 * 2000 bytes, to under half), at capability 1 or more; not when compress is off for it (before:
 * never) */
static void test_command_answer_compressed(void **state)
{
    (void)state;
    for (int compress = 0; compress <= 1; compress++) {
        for (int cap = 1; cap <= 3; cap++) {
            struct job *j = job_new(job_encode_command, JK_REPLY);
            assert_non_null(j);
            job_args(j)->answer =
                (struct job_answer){.cmd = 1, .encode = big_text, .cap = cap, .compress = (uint8_t)compress};
            job_encode_command(j);
            assert_int_equal(j->out[2], compress);
            assert_true(compress ? j->out_len < 2500 : j->out_len == 5014);
            K x = decoded_out(j);
            assert_int_equal(x->t, KT_CHAR);
            assert_int_equal(x->n, 5000);
            k_free(x);
            job_free(j);
        }
    }
}

/* Every form of every argument a command takes. */
static void test_parse_command_args(void **state)
{
    (void)state;
    /* the text form */
    expect_cmd(text(".qgate.ping[]"), GWCMD_PING, GWARG_NONE, NULL, 0);
    expect_cmd(text(" .qgate.pools[::] ;\n"), GWCMD_POOLS, GWARG_NONE, NULL, 0);
    expect_cmd(text(".qgate.kill[12]"), GWCMD_KILL, GWARG_NUM, NULL, 12);
    expect_cmd(text(".qgate.disconnect[ 7 ]"), GWCMD_DISCONNECT, GWARG_NUM, NULL, 7);
    /* a whole number as q writes it: a type's letter, a sign, a null (as the functional form takes
     * them: before, [99j], [7i], [-5] and [0N] were bad commands, (`.qgate.kill; 99i) was not) */
    expect_cmd(text(".qgate.kill[99j]"), GWCMD_KILL, GWARG_NUM, NULL, 99);
    expect_cmd(text(".qgate.kill[7i]"), GWCMD_KILL, GWARG_NUM, NULL, 7);
    expect_cmd(text(".qgate.kill[3h]"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.kill[-5]"), GWCMD_KILL, GWARG_NUM, NULL, -5);
    expect_cmd(text(".qgate.kill[0N]"), GWCMD_KILL, GWARG_NUM, NULL, GWARG_NULL);
    expect_cmd(text(".qgate.kill[0Ni]"), GWCMD_KILL, GWARG_NUM, NULL, GWARG_NULL);
    /* a whole float or real, as the functional form takes one (at 3929a8f refused) */
    expect_cmd(text(".qgate.kill[3.0]"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.kill[3.]"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.kill[3f]"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.kill[-12.000e]"), GWCMD_KILL, GWARG_NUM, NULL, -12);
    expect_cmd(text(".qgate.kill[0n]"), GWCMD_KILL, GWARG_NUM, NULL, GWARG_NULL);
    expect_cmd(text(".qgate.kill 7.0"), GWCMD_KILL, GWARG_NUM, NULL, 7);
    /* up to a long's (before: past 21474836479 a bad command, while the functional form took it) */
    expect_cmd(text(".qgate.kill[99999999999]"), GWCMD_KILL, GWARG_NUM, NULL, 99999999999);
    expect_cmd(text(".qgate.kill[-9223372036854775807j]"), GWCMD_KILL, GWARG_NUM, NULL, -INT64_MAX);
    expect_cmd(text(".qgate.kill[9223372036854775807]"), GWCMD_KILL, GWARG_NUM, NULL, INT64_MAX);
    expect_cmd(text(".qgate.pause[`rdb]"), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
    expect_cmd(text(".qgate.resume[ `rdb ]"), GWCMD_RESUME, GWARG_NAME, "rdb", 0);
    expect_cmd(text(".qgate.pause[\"hdb\"]"), GWCMD_PAUSE, GWARG_NAME, "hdb", 0);
    expect_cmd(text(".qgate.disable[`localhost:5001]"), GWCMD_DISABLE, GWARG_NAME, "localhost:5001", 0);
    expect_cmd(text(".qgate.enable[`:10.0.0.5:5001]"), GWCMD_ENABLE, GWARG_NAME, ":10.0.0.5:5001", 0);
    expect_cmd(text(".qgate.disable[\"unix://5001\"]"), GWCMD_DISABLE, GWARG_NAME, "unix://5001", 0);
    expect_cmd(text(".qgate.disable[`unix:///run/q/w1.sock]"), GWCMD_DISABLE, GWARG_NAME, "unix:///run/q/w1.sock", 0);
    expect_cmd(text(".qgate.shutdown[]"), GWCMD_SHUTDOWN, GWARG_NONE, NULL, 0);
    expect_cmd(text(".qgate.pause[`]"), GWCMD_PAUSE, GWARG_NAME, "", 0); /* the null symbol: no group '' */
    /* juxtaposed, as q applies a function to an argument (at 3929a8f an unknown command) */
    expect_cmd(text(".qgate.pause `rdb"), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
    expect_cmd(text(" .qgate.pause`rdb;"), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
    expect_cmd(text(".qgate.resume \"hdb\""), GWCMD_RESUME, GWARG_NAME, "hdb", 0);
    expect_cmd(text(".qgate.kill 12"), GWCMD_KILL, GWARG_NUM, NULL, 12);
    expect_cmd(text(".qgate.kill\t-5j"), GWCMD_KILL, GWARG_NUM, NULL, -5);
    /* a comment after a space, as q reads one (at 01bef40 a bad command); a / in a string is none */
    expect_cmd(text(".qgate.kill 3 /kill three"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.kill[3]\t/ three"), GWCMD_KILL, GWARG_NUM, NULL, 3);
    expect_cmd(text(".qgate.pause[\"a /b\"] /c"), GWCMD_PAUSE, GWARG_NAME, "a /b", 0);
    expect_cmd(text(".qgate.kill[9007199254740992f]"), GWCMD_KILL, GWARG_NUM, NULL, 9007199254740992);
    /* the functional form, named by a symbol or (node-q) a string; the name a symbol or a string */
    for (int sym = 0; sym < 2; sym++) {
        expect_cmd(call(".qgate.pause", sym, k_sym("rdb")), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
        expect_cmd(call(".qgate.pause", sym, k_str("rdb", 3)), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
        expect_cmd(call(".qgate.resume", sym, NULL), GWCMD_RESUME, GWARG_NONE, NULL, 0);
        expect_cmd(call(".qgate.resume", sym, k_prim(KT_UNARY, 0)), GWCMD_RESUME, GWARG_NONE, NULL, 0);
        expect_cmd(call(".qgate.kill", sym, long_atom(42)), GWCMD_KILL, GWARG_NUM, NULL, 42);
        expect_cmd(call(".qgate.kill", sym, long_atom(INT64_MIN)), GWCMD_KILL, GWARG_NUM, NULL, GWARG_NULL);
        K nf = k_atom(-KT_FLOAT); /* node-q's null (NaN), and a negative whole one */
        nf->f = NAN;
        expect_cmd(call(".qgate.kill", sym, nf), GWCMD_KILL, GWARG_NUM, NULL, GWARG_NULL);
        K mf = k_atom(-KT_FLOAT);
        mf->f = -1;
        expect_cmd(call(".qgate.kill", sym, mf), GWCMD_KILL, GWARG_NUM, NULL, -1);
        K i = k_atom(-KT_INT);
        i->i = 9;
        expect_cmd(call(".qgate.kill", sym, i), GWCMD_KILL, GWARG_NUM, NULL, 9);
        K f = k_atom(-KT_FLOAT); /* node-q: every JavaScript number is a float */
        f->f = 17;
        expect_cmd(call(".qgate.kill", sym, f), GWCMD_KILL, GWARG_NUM, NULL, 17);
        K big = k_atom(-KT_FLOAT); /* an id past an int's, as a long's (before: a bad command) */
        big->f = 4294967296.0;
        expect_cmd(call(".qgate.kill", sym, big), GWCMD_KILL, GWARG_NUM, NULL, 4294967296);
        K e = k_atom(-KT_REAL);
        e->e = 3;
        expect_cmd(call(".qgate.disconnect", sym, e), GWCMD_DISCONNECT, GWARG_NUM, NULL, 3);
        expect_cmd(call(".qgate.disable", sym, k_sym("h:1")), GWCMD_DISABLE, GWARG_NAME, "h:1", 0);
        expect_cmd(call(".qgate.pools", sym, k_list(0)), GWCMD_POOLS, GWARG_NONE, NULL, 0);
    }
}

/* What is not a command, or not an argument one takes: GWCMD_UNKNOWN, nothing kept. */
static void test_parse_command_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        ".qgate.nosuch[]", ".qgate.pause", ".qgate.pause[`a b]", ".qgate.pause[`a;`b]", ".qgate.pause[\"a]",
        ".qgate.pause[\"a\\\"b\"]", ".qgate.kill[1x]", ".qgate.kill[9223372036854775808]", ".qgate.kill[j]",
        ".qgate.kill[-]", ".qgate.kill[0Nx]", ".qgate.kill[--1]", ".qgate.kill[1jj]",
        ".qgate.pause[rdb]", "qgate.pause[`rdb]", ".qgate.nosuch `rdb", ".qgate.pause `a b", ".qgate.kill 1 2",
        ".qgate.kill - 5", ".qgate.kill-3", ".qgate.kill[3.5]", ".qgate.kill[3.0j]", ".qgate.kill[.0]", ".qgate.kill[-.0]",
        ".qgate.kill[3.0.0]", ".qgate.kill[0nf]", ".qgate.kill[3.0x]", ".qgate.kill[1e3]",
        /* a float past 2^53, as the functional form refuses one (9223372036854775807.0 is 2^63: at
         * 01bef40 it was taken for the largest long) */
        ".qgate.kill[9223372036854775807.0]", ".qgate.kill[9007199254740993f]", ".qgate.kill/c",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct job *j = parsed(text(bad[i]));
        assert_int_equal(j->result, GWCMD_UNKNOWN);
        assert_null(j->out);
        job_free(j);
    }
    char big[GWCMD_ARG_MAX + 40];
    memset(big, 'x', sizeof big);
    memcpy(big, ".qgate.pause[`", 14);
    big[sizeof big - 2] = ']';
    big[sizeof big - 1] = 0;
    struct job *j = parsed(text(big)); /* a name longer than GWCMD_ARG_MAX */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
    static const double not_ids[] = {1.5, 1e17, -1e17, INFINITY}; /* (past 2^53: not every whole one) */
    for (size_t i = 0; i < sizeof not_ids / sizeof not_ids[0]; i++) { /* a float that is no id */
        K f = k_atom(-KT_FLOAT);
        f->f = not_ids[i];
        j = parsed(call(".qgate.kill", 1, f));
        assert_int_equal(j->result, GWCMD_UNKNOWN);
        job_free(j);
    }
    j = parsed(call(".qgate.pause", 1, k_prim(KT_UNARY, 1))); /* -: is no (::) (it was taken for no
                                                             * argument, and paused every group: helper round 16) */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
    j = parsed(call(".qgate.kill", 1, k_atom(-KT_TIMESTAMP))); /* an argument of another type */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    /* a known name: its text says what it takes, not that it is unknown */
    assert_int_equal(job_args(j)->cmd.said, 1);
    assert_string_equal(j->text, "bad command: .qgate.kill: its argument is none, a whole number, a symbol or a "
                                 "string (of at most 400 bytes)");
    job_free(j);
    j = parsed(k_str(".qgate.kill[1\0]", 15)); /* a NUL where a type's letter may be: refused (it
                                               * was read as [1]: helper round 11) */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
    j = parsed(text(".qgate.kill[1x]"));
    assert_int_equal(job_args(j)->cmd.said, 1);
    assert_true(!strncmp(j->text, "bad command: .qgate.kill[1x]: its argument is", 45));
    job_free(j);
    /* a known command's name alone (node-q's k(".qgate.ping")), a bracket unclosed, or a space
     * before the bracket (q applies no name to an expression list after a space): how it runs */
    static const char *const alone[] = {".qgate.ping", " .qgate.ping ;", ".qgate.ping [", ".qgate.ping[1",
                                        ".qgate.ping []", ".qgate.ping\t[::]"};
    for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++) {
        j = parsed(text(alone[i]));
        assert_int_equal(j->result, GWCMD_UNKNOWN);
        assert_int_equal(job_args(j)->cmd.said, 1);
        assert_string_equal(j->text, "bad command: .qgate.ping is run as .qgate.ping[] or (`.qgate.ping; arg)");
        job_free(j);
    }
    j = parsed(text(".qgate.nosuch")); /* an unknown one: unknown */
    assert_int_equal(job_args(j)->cmd.said, 0);
    assert_string_equal(j->text, ".qgate.nosuch");
    job_free(j);
    j = parsed(text(".qgate.nosuch []")); /* (an unknown one with a space before its bracket too) */
    assert_int_equal(job_args(j)->cmd.said, 0);
    job_free(j);
    j = parsed(text(".qgate.nosuch[]")); /* an unknown name: said by the loop as unknown */
    assert_int_equal(job_args(j)->cmd.said, 0);
    assert_string_equal(j->text, ".qgate.nosuch[]");
    job_free(j);
    /* a message that does not decode (bytes after the object): said so, where */
    size_t len;
    uint8_t *m = msg_of(text(".qgate.ping[]"), &len);
    uint8_t *m2 = malloc(len + 2);
    memcpy(m2, m, len);
    m2[len] = m2[len + 1] = 0;
    m2[4] = (uint8_t)(len + 2);
    free(m);
    j = job_new(job_parse_command, 0);
    j->in = m2;
    j->in_len = len + 2;
    job_parse_command(j);
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    assert_int_equal(job_args(j)->cmd.said, 1);
    assert_true(!strncmp(j->text, "bad command: ", 13));
    job_free(j);
    j = parsed(call(".qgate.pause", 1, k_str("a\0b", 3))); /* a name with a NUL in it */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_job),
        cmocka_unit_test(test_parse_route),
        cmocka_unit_test(test_parse_route_malformed),
        cmocka_unit_test(test_route_is_no_command),
        cmocka_unit_test(test_validate_reads_routes),
        cmocka_unit_test(test_peek_command),
        cmocka_unit_test(test_command_answer_cap),
        cmocka_unit_test(test_command_answer_compressed),
        cmocka_unit_test(test_parse_command_args),
        cmocka_unit_test(test_parse_command_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_jobs.c: the peeks the loop makes at a message (routes, commands), the reader's parse
 * of a gateway command and its argument, and the reader's validation job handing back a
 * compressed route decompressed. */
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
    size_t len, qoff = 0, qlen, qend = 0;
    int as_list = 0;
    uint8_t *m;
    for (int sym = 0; sym < 2; sym++) {
        m = route_msg(".qgate.on", sym, k_sym("hdb"), k_str("select from t", 13), &len);
        assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), 1);
        assert_string_equal(grp, "hdb");
        assert_int_equal(qend, len);
        /* the query's bytes are the tail: exactly what q would serialise for the query alone */
        K q = k_str("select from t", 13);
        uint8_t *alone = kcodec_encode_msg(q, KIPC_SYNC, &qlen);
        k_free(q);
        assert_int_equal(len - qoff, qlen - 8);
        assert_memory_equal(m + qoff, alone + 8, qlen - 8);
        free(alone);
        free(m);
    }
    /* (`.qgate.all; `g; query) and (`.qgate.all; `g; query; `list): 2, the query before `list */
    for (int four = 0; four < 2; four++) {
        K l = k_list(3 + four);
        kK(l)[0] = k_sym(".qgate.all");
        kK(l)[1] = k_sym("hdb");
        kK(l)[2] = k_str("count t", 7);
        if (four)
            kK(l)[3] = k_sym("list");
        m = kcodec_encode_msg(l, KIPC_SYNC, &len);
        k_free(l);
        assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), 2);
        assert_int_equal(as_list, four);
        assert_string_equal(grp, "hdb");
        assert_int_equal(qend - qoff, 6 + 7);
        assert_memory_equal(m + qoff + 6, "count t", 7);
        free(m);
    }
    K bad4 = k_list(4); /* a fourth item that is not `list */
    kK(bad4)[0] = k_sym(".qgate.all");
    kK(bad4)[1] = k_sym("hdb");
    kK(bad4)[2] = k_str("x", 1);
    kK(bad4)[3] = k_sym("lost");
    m = kcodec_encode_msg(bad4, KIPC_SYNC, &len);
    k_free(bad4);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), -1);
    free(m);
    /* not routes: another name, a plain string, a compressed message, a command */
    m = route_msg(".qgate.one", 1, k_sym("hdb"), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), 0);
    free(m);
    K s = k_str(".qgate.on", 9);
    m = kcodec_encode_msg(s, KIPC_SYNC, &len);
    k_free(s);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), 0);
    m[2] = 1;
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), 0);
    free(m);
    /* shaped wrong: the group a string, a name too long, two items, four */
    m = route_msg(".qgate.on", 1, k_str("hdb", 3), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), -1);
    free(m);
    char longname[100];
    memset(longname, 'g', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    m = route_msg(".qgate.on", 1, k_sym(longname), k_str("x", 1), &len);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), -1);
    free(m);
    K two = k_list(2);
    kK(two)[0] = k_sym(".qgate.on");
    kK(two)[1] = k_sym("hdb");
    m = kcodec_encode_msg(two, KIPC_SYNC, &len);
    k_free(two);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), -1);
    free(m);
    K four = k_list(4);
    kK(four)[0] = k_sym(".qgate.on");
    kK(four)[1] = k_sym("hdb");
    kK(four)[2] = k_str("x", 1);
    kK(four)[3] = k_str("y", 1);
    m = kcodec_encode_msg(four, KIPC_SYNC, &len);
    k_free(four);
    assert_int_equal(jobs_peek_route(m, len, grp, sizeof grp, &qoff, &qend, &as_list), -1);
    /* every prefix of a route is no route, or a malformed one: never a read past the end */
    for (size_t n = 0; n < len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, m, n);
        assert_true(jobs_peek_route(p, n, grp, sizeof grp, &qoff, &qend, &as_list) <= 0);
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
            size_t qoff, qend;
            int as_list;
            assert_int_equal(jobs_peek_route(j->out, j->out_len, grp, sizeof grp, &qoff, &qend, &as_list), 1);
        } else {
            assert_null(j->out);
        }
        job_free(j);
    }
    free(plain);
}

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
    j->ctx_free = merge_in_free;
    j->arg = cap;
    j->aux[0] = 1 << 24;
    j->aux[1] = compress;
    j->aux[2] = 1 << 24;
    job_merge(j);
    return j;
}

static K decoded_out(struct job *j)
{
    struct kipc_hdr h;
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
    j->ctx_free = merge_in_free;
    j->arg = 3;
    job_merge(j);
    x = decoded_out(j);
    assert_int_equal(x->t, KT_ERROR);
    assert_string_equal(x->s, "qgate: a .qgate.all reply could not be merged");
    k_free(x);
    job_free(j);
}

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
    assert_int_equal(j->aux[1], kind);
    if (kind == GWARG_NAME) {
        assert_non_null(j->out);
        assert_string_equal((const char *)j->out, name);
        assert_int_equal(j->out_len, strlen(name));
    } else {
        assert_null(j->out);
    }
    assert_int_equal(j->aux[0], kind == GWARG_NUM ? num : -1);
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

/* Every form of every argument a command takes. */
static void test_parse_command_args(void **state)
{
    (void)state;
    /* the text form */
    expect_cmd(text(".qgate.ping[]"), GWCMD_PING, GWARG_NONE, NULL, 0);
    expect_cmd(text(" .qgate.pools[::] ;\n"), GWCMD_POOLS, GWARG_NONE, NULL, 0);
    expect_cmd(text(".qgate.kill[12]"), GWCMD_KILL, GWARG_NUM, NULL, 12);
    expect_cmd(text(".qgate.disconnect[ 7 ]"), GWCMD_DISCONNECT, GWARG_NUM, NULL, 7);
    expect_cmd(text(".qgate.pause[`rdb]"), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
    expect_cmd(text(".qgate.resume[ `rdb ]"), GWCMD_RESUME, GWARG_NAME, "rdb", 0);
    expect_cmd(text(".qgate.pause[\"hdb\"]"), GWCMD_PAUSE, GWARG_NAME, "hdb", 0);
    expect_cmd(text(".qgate.disable[`localhost:5001]"), GWCMD_DISABLE, GWARG_NAME, "localhost:5001", 0);
    expect_cmd(text(".qgate.enable[`:10.0.0.5:5001]"), GWCMD_ENABLE, GWARG_NAME, ":10.0.0.5:5001", 0);
    expect_cmd(text(".qgate.disable[\"unix://5001\"]"), GWCMD_DISABLE, GWARG_NAME, "unix://5001", 0);
    expect_cmd(text(".qgate.disable[`unix:///run/q/w1.sock]"), GWCMD_DISABLE, GWARG_NAME, "unix:///run/q/w1.sock", 0);
    expect_cmd(text(".qgate.shutdown[]"), GWCMD_SHUTDOWN, GWARG_NONE, NULL, 0);
    expect_cmd(text(".qgate.pause[`]"), GWCMD_PAUSE, GWARG_NAME, "", 0); /* the null symbol: no group '' */
    /* the functional form, named by a symbol or (node-q) a string; the name a symbol or a string */
    for (int sym = 0; sym < 2; sym++) {
        expect_cmd(call(".qgate.pause", sym, k_sym("rdb")), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
        expect_cmd(call(".qgate.pause", sym, k_str("rdb", 3)), GWCMD_PAUSE, GWARG_NAME, "rdb", 0);
        expect_cmd(call(".qgate.resume", sym, NULL), GWCMD_RESUME, GWARG_NONE, NULL, 0);
        expect_cmd(call(".qgate.resume", sym, k_prim(KT_UNARY, 0)), GWCMD_RESUME, GWARG_NONE, NULL, 0);
        expect_cmd(call(".qgate.kill", sym, long_atom(42)), GWCMD_KILL, GWARG_NUM, NULL, 42);
        K i = k_atom(-KT_INT);
        i->i = 9;
        expect_cmd(call(".qgate.kill", sym, i), GWCMD_KILL, GWARG_NUM, NULL, 9);
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
        ".qgate.pause[\"a\\\"b\"]", ".qgate.kill[-1]", ".qgate.kill[1x]", ".qgate.kill[99999999999]",
        ".qgate.pause[rdb]", "qgate.pause[`rdb]",
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
    K f = k_atom(-KT_FLOAT);
    f->f = 1.5;
    j = parsed(call(".qgate.kill", 1, f)); /* an argument of another type */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
    j = parsed(call(".qgate.pause", 1, k_str("a\0b", 3))); /* a name with a NUL in it */
    assert_int_equal(j->result, GWCMD_UNKNOWN);
    job_free(j);
    /* who may run what: anyone the reading commands, admins the rest */
    assert_false(gwcmd_admin_only(GWCMD_PING));
    assert_false(gwcmd_admin_only(GWCMD_STATS));
    assert_false(gwcmd_admin_only(GWCMD_POOLS));
    static const int admin[] = {GWCMD_CLIENTS, GWCMD_RELOAD, GWCMD_DISCONNECT, GWCMD_KILL, GWCMD_PAUSE,
                                GWCMD_RESUME, GWCMD_DISABLE, GWCMD_ENABLE, GWCMD_SHUTDOWN};
    for (size_t i = 0; i < sizeof admin / sizeof admin[0]; i++)
        assert_true(gwcmd_admin_only(admin[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_job),
        cmocka_unit_test(test_peek_route),
        cmocka_unit_test(test_validate_hands_back_compressed_route),
        cmocka_unit_test(test_peek_command),
        cmocka_unit_test(test_parse_command_args),
        cmocka_unit_test(test_parse_command_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

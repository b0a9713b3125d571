/* test_auth.c: MD5 and SHA-1 vectors, the users file format and password checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "tutil.h"

static void check_md5(const void *p, size_t n, const char *want)
{
    uint8_t d[16];
    char hex[33];
    auth_md5(p, n, d);
    auth_hex(d, 16, hex);
    assert_string_equal(hex, want);
}

static void check_sha1(const void *p, size_t n, const char *want)
{
    uint8_t d[20];
    char hex[41];
    auth_sha1(p, n, d);
    auth_hex(d, 20, hex);
    assert_string_equal(hex, want);
}

/* RFC 1321 A.5, the whole test suite. */
static void test_md5_rfc1321(void **state)
{
    (void)state;
    static const char *const v[][2] = {
        {"", "d41d8cd98f00b204e9800998ecf8427e"},
        {"a", "0cc175b9c0f1b6a831c399e269772661"},
        {"abc", "900150983cd24fb0d6963f7d28e17f72"},
        {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
        {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "d174ab98d277d9f5a5611c2c9f419d9f"},
        {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
         "57edf4a22be3c955ac49da2e2107b67a"},
    };
    for (size_t i = 0; i < QG_ARRAY_LEN(v); i++)
        check_md5(v[i][0], strlen(v[i][0]), v[i][1]);
    check_md5(NULL, 0, "d41d8cd98f00b204e9800998ecf8427e");
}

/* FIPS 180-1 appendices A, B, C (also RFC 3174 section 7.3). */
static void test_sha1_fips(void **state)
{
    (void)state;
    check_sha1("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_int_equal(strlen(m448) * 8, 448);
    check_sha1(m448, strlen(m448), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    size_t n = 1000000;
    char *a = malloc(n);
    assert_non_null(a);
    memset(a, 'a', n);
    check_sha1(a, n, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    free(a);
    check_sha1(NULL, 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

/* Lengths around the padding boundaries (56 and 64 mod 64) of the input byte i = 'a' + i % 26.
 * Expected digests from coreutils: yes abcdefghijklmnopqrstuvwxyz | tr -d '\n' | head -c N | md5sum */
static void test_padding_boundaries(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        const char *md5, *sha1;
    } v[] = {
        {0, "d41d8cd98f00b204e9800998ecf8427e", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
        {1, "0cc175b9c0f1b6a831c399e269772661", "86f7e437faa5a7fce15d1ddcb9eaeaea377667b8"},
        {55, "0d7ae056b2f015cd7dc67494efd658f1", "a617d006d1ca12671785098a19a87fe58443bde9"},
        {56, "31fcfb5165169eb55898e7e4cf34d19a", "4ad5bb7ae3c4024768d364b77c52128ea3cffebe"},
        {57, "fd62afaf3aa1e2a52882cb464f5ccc4d", "e1b3b34da0f7b299090824d9aa81fff6711a79ad"},
        {63, "1b30c0670c15e7da3c2ba7bce77ebe99", "fc8a5ab77259625085ead3ec96515b3b8d933fad"},
        {64, "a2eaf6295c32adc403865fd96a2f182b", "93249d4c2f8903ebf41ac358473148ae6ddd7042"},
        {65, "eba2cce0ca8df47e62414a736b3105a2", "cf2a63cc308225cf07b498d2309a01dd0df52f67"},
        {119, "b05187e08da41fa3ef16bd56afaafd99", "edd0f1133d0e4ca5f3e98bb7e0295f31d20d2cdb"},
        {120, "62af9b597a9f55e16ab2b897387fc052", "23a58eee587aa1f50d19a969ab36a3fe3e88c393"},
        {127, "f41f37f8b5a7782d5cfeafc43e3d3c1c", "4add81c7de2e43d621cdb34132bbb23178f4c500"},
        {128, "3e8c1ccbd71838ef3df4b72e57fb9bf6", "3698f9beb7cdf5b1e1ce786672fb234143d4df89"},
        {129, "a9ca66cd8dd6b0f6d8cbb6a21bbf5206", "1d96f2c973fdd492d08f2a16f950d654912b61ca"},
    };
    for (size_t i = 0; i < QG_ARRAY_LEN(v); i++) {
        /* an exact-size heap buffer, so ASan catches any read past the input */
        char *b = malloc(v[i].n ? v[i].n : 1);
        assert_non_null(b);
        for (size_t j = 0; j < v[i].n; j++)
            b[j] = (char)('a' + j % 26);
        check_md5(b, v[i].n, v[i].md5);
        check_sha1(b, v[i].n, v[i].sha1);
        free(b);
    }
}

static void test_hex(void **state)
{
    (void)state;
    static const uint8_t d[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char out[2 * sizeof d + 1];
    memset(out, 'x', sizeof out);
    auth_hex(d, sizeof d, out);
    assert_string_equal(out, "00017f80abff");
    auth_hex(d, 0, out);
    assert_string_equal(out, "");
}

/* ---- users file -------------------------------------------------------------------------- */

/* Write s to a new temp file; its name goes to path (at least 32 bytes). */
static void write_tmp(const char *s, char *path)
{
    strcpy(path, "/tmp/qg_auth_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(s);
    assert_int_equal(write(fd, s, n), (ssize_t)n);
    close(fd);
}

static struct auth_db *load_str(const char *s, char *err, size_t errlen, char *path)
{
    write_tmp(s, path);
    struct auth_db *db = auth_load(path, err, errlen);
    unlink(path);
    return db;
}

/* Loading s must fail at line `line` with a message containing `why`. */
static void expect_err(const char *s, int line, const char *why)
{
    char path[64], err[512], want[128];
    struct auth_db *db = load_str(s, err, sizeof err, path);
    if (db)
        fail_msg("loaded without error: %s", s);
    snprintf(want, sizeof want, "%s:%d: ", path, line);
    if (strncmp(err, want, strlen(want)) || !strstr(err, why))
        fail_msg("error '%s', wanted '%s...%s'", err, want, why);
}

static const char users_file[] =
    "# qgate users\n"                                           /* 1 */
    "\n"                                                        /* 2 */
    "alice:secret\n"                                            /* 3 */
    "bob:5ebe2294ecd0e0f08eab7690d2a6ee69\n"                    /* 4  md5("secret") */
    "carol:E5E9FA1BA31ECD1AE84F75CAAA474F3A663F05F4\n"          /* 5  sha1("secret"), upper */
    "dave:pa:ss\r\n"                                            /* 6  ':' in the password, CRLF */
    "erin:77FD169859742c5dcbcb6001c2c66ac8\r\n"                 /* 7  md5("pa:ss"), mixed case */
    "\r\n"                                                      /* 8 */
    "frank:\n"                                                  /* 9  empty password */
    "gina:5ebe2294ecd0e0f08eab7690d2a6ee6\n"                    /* 10 31 hex digits: plain */
    "#hank:commented out\n"                                     /* 11 */
    "hank:hunter2\tadmin=1,max_conns=5,max_inflight=2\r\n"      /* 12 */
    "ivy:f3bbbd66a63d4bf1747940578ec3d0103530e21d\tmax_inflight=7\n" /* 13 sha1("hunter2") */
    "jack:x y\tadmin=0,max_conns=0\n"                           /* 14 */
    "kim:tab\t\n"                                               /* 15 a bare tab: no options */
    "zed:last";                                                 /* 16 no final newline */

static const struct auth_user *find(const struct auth_db *db, const char *name)
{
    return auth_find(db, name, strlen(name));
}

static void test_load(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct auth_db *db = load_str(users_file, err, sizeof err, path);
    if (!db)
        fail_msg("%s", err);
    assert_int_equal(db->n, 12);

    const struct auth_user *u = find(db, "alice");
    assert_non_null(u);
    assert_int_equal(u->kind, AUTH_PLAIN);
    assert_string_equal(u->secret, "secret");
    assert_int_equal(u->admin, 0);
    assert_int_equal(u->max_conns, 0);
    assert_int_equal(u->max_inflight, 0);

    u = find(db, "bob");
    assert_int_equal(u->kind, AUTH_MD5);
    assert_string_equal(u->secret, "5ebe2294ecd0e0f08eab7690d2a6ee69");
    u = find(db, "carol");
    assert_int_equal(u->kind, AUTH_SHA1);
    assert_string_equal(u->secret, "e5e9fa1ba31ecd1ae84f75caaa474f3a663f05f4");
    u = find(db, "dave");
    assert_int_equal(u->kind, AUTH_PLAIN);
    assert_string_equal(u->secret, "pa:ss");
    u = find(db, "erin");
    assert_int_equal(u->kind, AUTH_MD5);
    assert_string_equal(u->secret, "77fd169859742c5dcbcb6001c2c66ac8");
    u = find(db, "frank");
    assert_int_equal(u->kind, AUTH_PLAIN);
    assert_string_equal(u->secret, "");
    u = find(db, "gina");
    assert_int_equal(u->kind, AUTH_PLAIN);

    u = find(db, "hank");
    assert_int_equal(u->kind, AUTH_PLAIN);
    assert_string_equal(u->secret, "hunter2");
    assert_int_equal(u->admin, 1);
    assert_int_equal(u->max_conns, 5);
    assert_int_equal(u->max_inflight, 2);
    u = find(db, "ivy");
    assert_int_equal(u->kind, AUTH_SHA1);
    assert_int_equal(u->admin, 0);
    assert_int_equal(u->max_conns, 0);
    assert_int_equal(u->max_inflight, 7);
    u = find(db, "jack");
    assert_string_equal(u->secret, "x y");
    assert_int_equal(u->admin, 0);
    u = find(db, "kim");
    assert_string_equal(u->secret, "tab");
    u = find(db, "zed");
    assert_string_equal(u->secret, "last");

    assert_null(find(db, "#hank"));
    assert_null(find(db, "nobody"));
    assert_null(find(db, ""));
    assert_null(find(db, "Alice"));
    /* the name is not NUL-terminated: only the first ulen bytes count */
    assert_ptr_equal(auth_find(db, "alicex", 5), find(db, "alice"));
    assert_null(auth_find(db, "alice", 4));
    assert_null(auth_find(NULL, "alice", 5));
    auth_free(db);
    auth_free(NULL);

    /* a file with only comments is an empty database, not an error */
    db = load_str("# nobody yet\n\n", err, sizeof err, path);
    assert_non_null(db);
    assert_int_equal(db->n, 0);
    assert_null(find(db, "alice"));
    auth_free(db);
}

static void test_check(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    struct auth_db *db = load_str(users_file, err, sizeof err, path);
    if (!db)
        fail_msg("%s", err);
#define OK(user, pass) assert_int_equal(auth_check(find(db, user), pass, strlen(pass)), 1)
#define NO(user, pass) assert_int_equal(auth_check(find(db, user), pass, strlen(pass)), 0)
    OK("alice", "secret");
    NO("alice", "Secret");
    NO("alice", "secre");
    NO("alice", "secrets");
    NO("alice", "");
    OK("bob", "secret");
    NO("bob", "secreT");
    NO("bob", "5ebe2294ecd0e0f08eab7690d2a6ee69"); /* the client sends the password, not the hash */
    OK("carol", "secret");
    NO("carol", "secret ");
    NO("carol", "e5e9fa1ba31ecd1ae84f75caaa474f3a663f05f4");
    OK("dave", "pa:ss");
    NO("dave", "pa");
    NO("dave", "ss");
    OK("erin", "pa:ss");
    NO("erin", "pa:sS");
    OK("frank", "");
    NO("frank", "x");
    OK("gina", "5ebe2294ecd0e0f08eab7690d2a6ee6");
    NO("gina", "secret");
    OK("hank", "hunter2");
    NO("hank", "hunter2\tadmin=1,max_conns=5,max_inflight=2");
    OK("ivy", "hunter2");
    NO("ivy", "hunter3");
    OK("jack", "x y");
    OK("kim", "tab");
    OK("zed", "last");
    NO("nobody", "secret"); /* unknown user: auth_find gives NULL, auth_check NULL gives 0 */
#undef OK
#undef NO
    /* length counts, not NUL: "secret" followed by more bytes is wrong, a prefix too */
    const struct auth_user *a = find(db, "alice");
    assert_int_equal(auth_check(a, "secretXYZ", 6), 1);
    assert_int_equal(auth_check(a, "secret\0", 7), 0);
    assert_int_equal(auth_check(find(db, "bob"), "secretXYZ", 6), 1);
    assert_int_equal(auth_check(find(db, "carol"), "secretXYZ", 6), 1);
    /* a password longer than any entry can hold */
    char longpw[1000];
    memset(longpw, 's', sizeof longpw);
    memcpy(longpw, "secret", 6);
    assert_int_equal(auth_check(a, longpw, sizeof longpw), 0);
    assert_int_equal(auth_check(find(db, "bob"), longpw, sizeof longpw), 0);
    assert_int_equal(auth_check(find(db, "frank"), NULL, 0), 1);
    assert_int_equal(auth_check(NULL, "secret", 6), 0);
    auth_free(db);
}

static void test_limits(void **state)
{
    (void)state;
    char name[AUTH_NAME_MAX + 2], pass[AUTH_PASS_MAX + 2], text[1024], path[64], err[512];
    memset(name, 'n', sizeof name - 1);
    name[AUTH_NAME_MAX] = 0;
    memset(pass, 'p', sizeof pass - 1);
    pass[AUTH_PASS_MAX] = 0;
    snprintf(text, sizeof text, "%s:%s\n", name, pass);
    struct auth_db *db = load_str(text, err, sizeof err, path);
    if (!db)
        fail_msg("%s", err);
    const struct auth_user *u = find(db, name);
    assert_non_null(u);
    assert_int_equal(strlen(u->secret), AUTH_PASS_MAX);
    assert_int_equal(auth_check(u, pass, strlen(pass)), 1);
    auth_free(db);

    /* one byte more of either is an error, on the line where it happens */
    name[AUTH_NAME_MAX] = 'n';
    name[AUTH_NAME_MAX + 1] = 0;
    snprintf(text, sizeof text, "a:b\n%s:x\n", name);
    expect_err(text, 2, "user name longer than 63 bytes");
    pass[AUTH_PASS_MAX] = 'p';
    pass[AUTH_PASS_MAX + 1] = 0;
    snprintf(text, sizeof text, "a:b\n# c\n\nu:%s\n", pass);
    expect_err(text, 4, "password longer than 255 bytes");
}

/* A big users file: every user found by name (the index grows as it loads), none that is not,
 * a duplicate named at its line however far apart. */
static void test_many_users(void **state)
{
    (void)state;
    enum { N = 5000 };
    size_t cap = (size_t)N * 32 + 64, len = 0;
    char *s = malloc(cap), path[64], err[512];
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(s + len, cap - len, "user%d:pw%d\n", i, i);
    struct auth_db *db = load_str(s, err, sizeof err, path);
    assert_non_null(db);
    assert_int_equal(db->n, N);
    for (int i = 0; i < N; i++) {
        char name[32], pw[32];
        snprintf(name, sizeof name, "user%d", i);
        snprintf(pw, sizeof pw, "pw%d", i);
        const struct auth_user *u = auth_find(db, name, strlen(name));
        assert_non_null(u);
        assert_string_equal(u->name, name);
        assert_true(auth_check(u, pw, strlen(pw)));
    }
    assert_null(auth_find(db, "user5000", 8));
    assert_null(auth_find(db, "user1", 4)); /* a prefix is not a name */
    auth_free(db);
    snprintf(s + len, cap - len, "user17:again\n");
    expect_err(s, N + 1, "duplicate user 'user17'");
    free(s);
}

static void test_errors(void **state)
{
    (void)state;
    expect_err("alice:secret\nbob\n", 2, "no ':'");
    expect_err("# header\r\n\r\nbobsecret\r\n", 3, "no ':'");
    expect_err("bob\tadmin=1:x\n", 1, "no ':'"); /* the tab starts the options */
    expect_err(":secret\n", 1, "empty user name");
    expect_err("alice:a\nalice:b\n", 2, "duplicate user 'alice'");
    expect_err("a:b\tcolour=red\n", 1, "unknown option 'colour'");
    expect_err("a:b\tadmin=1,Admin=1\n", 1, "unknown option 'Admin'");
    expect_err("a:b\tadmin=2\n", 1, "admin: '2' is not 0 or 1");
    expect_err("a:b\tadmin=\n", 1, "admin: '' is not 0 or 1");
    expect_err("a:b\tadmin\n", 1, "option 'admin' is not key=value");
    expect_err("a:b\tmax_conns=-1\n", 1, "max_conns: '-1' is not an integer >= 0");
    expect_err("a:b\tmax_conns=5x\n", 1, "max_conns: '5x' is not an integer >= 0");
    expect_err("a:b\tmax_inflight=99999999999\n", 1, "max_inflight: '99999999999' is not");
    expect_err("a:b\tmax_inflight= 1\n", 1, "max_inflight: ' 1' is not");
    expect_err("a:b\tadmin=1,,max_conns=2\n", 1, "empty option");
    expect_err("a:b\tadmin=1,\n", 1, "empty option");
    expect_err("a:b\n\n\nc:d\te=1\n", 4, "unknown option 'e'");

    char err[256];
    assert_null(auth_load("/nonexistent/qg_users", err, sizeof err));
    assert_string_equal(err, "/nonexistent/qg_users: No such file or directory");
    /* what is not a regular file is refused at once: a device that never ends (read to 5 GB
     * before), a FIFO nobody writes (a reload waited on it for ever), a directory */
    assert_null(auth_load("/dev/zero", err, sizeof err));
    assert_string_equal(err, "/dev/zero: not a regular file or a pipe");
    char fifo[] = "/tmp/qg_users_fifo.XXXXXX";
    assert_int_equal(tutil_mkfifo(fifo), 0);
    assert_null(auth_load(fifo, err, sizeof err));
    assert_non_null(strstr(err, ": a pipe nothing was written to"));
    unlink(fifo);
    assert_null(auth_load("/tmp", err, sizeof err));
    assert_string_equal(err, "/tmp: not a regular file or a pipe");
}

/* A line that does not read exactly as the format says is refused, not taken some other way:
 * a space typed where the TAB belongs made the password "pw admin=1" and the user no admin. */
static void test_strict_lines(void **state)
{
    (void)state;
    static const char tab[] = "options follow a TAB, not a space";
    expect_err("bob:pw admin=1\n", 1, "user 'bob': a space before 'admin=' in the password: options follow a TAB");
    expect_err("a:b\nbob:pw  max_conns=2\n", 2, "a space before 'max_conns='");
    expect_err("bob:pw max_inflight=1,admin=1\n", 1, "a space before 'max_inflight='");
    expect_err("bob:pw Admin=1\n", 1, "a space before 'Admin='");
    expect_err("mon:pw monitor=1\n", 1, "a space before 'monitor='");
    expect_err("bob:pw admin = 1\n", 1, tab);
    expect_err("bob:pw max_conn=2\n", 1, "a space before 'max_conn='"); /* a misspelt option still reads as one */
    expect_err("bob:pw colour=1,size=2\n", 1, "a space before 'colour='"); /* word=N to the end */
    expect_err("bob:pw admin=1\tmax_conns=2\n", 1, tab);                  /* half of them after a space */
    expect_err("# users\n\nbob:5ebe2294ecd0e0f08eab7690d2a6ee69 admin=1\r\n", 3, tab); /* after a hash */
    /* an option given twice: the last one would win */
    expect_err("a:b\tadmin=1,admin=0\n", 1, "option admin given twice");
    expect_err("a:b\tmonitor=1,monitor=1\n", 1, "option monitor given twice");
    expect_err("a:b\tmonitor=1,admin=1\n", 1, "admin and monitor both");
    expect_err("a:b\tmax_conns=1,max_inflight=2,max_conns=3\n", 1, "option max_conns given twice");
    expect_err("a:b\tadmin=1\tmax_conns=2\n", 1, "a second TAB: the options are one comma list after one TAB"); /* (was: admin's value) */
    /* a user name with a space at either end: a stray space, or a comment indented */
    expect_err(" alice:pw\n", 1, "user name ' alice' begins with a space");
    expect_err("alice :pw\n", 1, "user name 'alice ' ends with a space");
    expect_err("a:b\n  # note: old password\n", 2, "begins with a space (a comment's # must be the line's first character)");

    /* what reads exactly as the format still loads as before: spaces in a password that are no
     * options, '=' without a space before it, a space then no '=' */
    char path[64], err[512] = "";
    struct auth_db *db = load_str("jack:x y\tadmin=0,max_conns=0\n"
                                  "kay:my pass=word\n"
                                  "lou:a b=1c\n"
                                  "max:admin=1\n"
                                  "ned:pw admin\n"
                                  "ola:pw =1\n"
                                  "pat:pw x=1y\n"
                                  "quin:two  spaces\tadmin=1\n",
                                  err, sizeof err, path);
    if (!db)
        fail_msg("%s", err);
    assert_int_equal(db->n, 8);
    assert_string_equal(find(db, "jack")->secret, "x y");
    assert_string_equal(find(db, "kay")->secret, "my pass=word");
    assert_string_equal(find(db, "lou")->secret, "a b=1c");
    assert_string_equal(find(db, "max")->secret, "admin=1");
    assert_int_equal(find(db, "max")->admin, 0);
    assert_string_equal(find(db, "ned")->secret, "pw admin");
    assert_string_equal(find(db, "ola")->secret, "pw =1");
    assert_string_equal(find(db, "pat")->secret, "pw x=1y");
    assert_string_equal(find(db, "quin")->secret, "two  spaces");
    assert_int_equal(find(db, "quin")->admin, 1);
    auth_free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_md5_rfc1321),
        cmocka_unit_test(test_sha1_fips),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_many_users),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_strict_lines),
    };
    return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}

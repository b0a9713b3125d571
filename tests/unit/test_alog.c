/* test_alog.c: the access log's records and lines: every field in order, logfmt quoting of
 * awkward values, long values cut, and the writer job writing every record in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alog.h"
#include "pool.h"

static const struct alog_fields base = {
    .wall_us = 1764604800123456LL, /* 2025-12-01T16:00:00.123456Z */
    .client = 7, .user = "alice", .peer = "127.0.0.1:4000", .group = "main", .worker = "w1:5001",
    .sync = 1, .outcome = ALOG_OK, .req_bytes = 21, .reply_bytes = 16, .queued_us = 3, .run_us = 90};

static void line_of(const struct alog_fields *f, char *out)
{
    struct alog_buf b = {0};
    assert_int_equal(alog_append(&b, f), 0);
    size_t rl, n = alog_format(b.p, &rl, out);
    assert_int_equal(rl, b.len);
    assert_true(n < ALOG_LINE_MAX);
    assert_int_equal(out[n - 1], '\n');
    out[n - 1] = 0;
    alog_buf_free(&b);
}

static void test_fields(void **state)
{
    (void)state;
    char line[ALOG_LINE_MAX];
    line_of(&base, line);
    assert_string_equal(line, "time=2025-12-01T16:00:00.123456Z client=7 user=alice peer=127.0.0.1:4000 group=main "
                              "worker=w1:5001 type=sync req_bytes=21 reply_bytes=16 queued_us=3 run_us=90 outcome=ok");
}

static void test_quoting(void **state)
{
    (void)state;
    char line[ALOG_LINE_MAX];
    struct alog_fields f = base;
    f.user = "";
    f.worker = NULL;
    f.sync = 0;
    f.outcome = ALOG_ERROR;
    f.error = "a \"b\"=c\\d\n\x01";
    line_of(&f, line);
    assert_non_null(strstr(line, " user= peer="));
    assert_non_null(strstr(line, " worker= type=async "));
    assert_non_null(strstr(line, " outcome=error error=\"a \\\"b\\\"=c\\\\d\\n\\x01\""));
}

static void test_cut(void **state)
{
    (void)state;
    char line[ALOG_LINE_MAX], big[1000];
    memset(big, '\x02', sizeof big - 1); /* the worst case: every byte escaped, in every string */
    big[sizeof big - 1] = 0;
    struct alog_fields f = base;
    f.user = f.peer = f.group = f.worker = f.error = big;
    f.outcome = ALOG_GWERROR;
    line_of(&f, line);
    int esc = 0;
    for (const char *p = line; (p = strstr(p, "\\x02")); p += 4)
        esc++;
    assert_int_equal(esc, 5 * 255); /* each value cut at 255 bytes, each escaped */
    assert_true(strlen(line) < ALOG_LINE_MAX);
}

static void test_job_writes_in_order(void **state)
{
    (void)state;
    char path[] = "/tmp/test_alog.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    struct alog_buf *b = calloc(1, sizeof *b);
    assert_non_null(b);
    struct alog_fields f = base;
    for (int i = 0; i < 5000; i++) {
        f.client = (uint64_t)i;
        assert_int_equal(alog_append(b, &f), 0);
    }
    struct job j = {.ctx = b, .arg = fd};
    job_alog_write(&j);
    assert_int_equal(j.result, 0);
    assert_int_equal(j.aux[0], 5000);
    alog_buf_ctx_free(b);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char line[ALOG_LINE_MAX];
    int n = 0;
    while (fgets(line, sizeof line, in)) {
        unsigned long long id = 0;
        assert_int_equal(sscanf(strstr(line, " client="), " client=%llu", &id), 1);
        assert_int_equal(id, (unsigned long long)n);
        n++;
    }
    assert_int_equal(n, 5000);
    fclose(in);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_quoting),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_job_writes_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

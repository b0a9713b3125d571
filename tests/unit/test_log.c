/* test_log.c: the log's queue and thread, on a pipe whose reader this test controls: lines come
 * out whole and in order; with the reader stopped (the pipe full), what does not fit in the
 * queue is dropped and counted, and once the reader is back the thread says how many; under
 * systemd (JOURNAL_STREAM) each line starts with its priority, <3> to <7>, and not otherwise;
 * log_sink still gets lines at once; log_stop gives up on a reader that never reads, in bounded
 * time; log_limited writes one line a second and then says how many it did not; the manual
 * mode tests/sim drives queues and drops the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* A line of exactly LINE bytes: time (23), " ", level (5), " ", the message, newline. */
#define LINE 100
#define MSG_LEN (LINE - 31)

static void log_numbered(int level, int i)
{
    char pad[MSG_LEN + 1];
    memset(pad, '.', MSG_LEN);
    pad[MSG_LEN - 10] = 0; /* "line NNNN " is 10 bytes */
    log_write(level, NULL, "line %04d %s", i, pad);
}

static void pipe_open(int p[2])
{
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
}

/* Fill the pipe's write end until a write would block: the next blocking write waits for a
 * reader. The bytes it took. */
static size_t pipe_fill(int w)
{
    int fl = fcntl(w, F_GETFL);
    assert_int_equal(fcntl(w, F_SETFL, fl | O_NONBLOCK), 0);
    static const char junk[4096];
    size_t n = 0;
    for (size_t chunk = sizeof junk; chunk; chunk /= 2) {
        ssize_t k;
        while ((k = write(w, junk, chunk)) > 0)
            n += (size_t)k;
        assert_true(errno == EAGAIN);
    }
    assert_int_equal(fcntl(w, F_SETFL, fl), 0);
    return n;
}

/* Read exactly n bytes (the junk pipe_fill put in). */
static void read_exactly(int r, size_t n)
{
    char buf[4096];
    while (n) {
        ssize_t k = read(r, buf, n < sizeof buf ? n : sizeof buf);
        assert_true(k > 0);
        n -= (size_t)k;
    }
}

/* Read what comes into a malloc'd NUL-terminated buffer until it holds `until` (NULL: until end
 * of file), failing after 20 s (a bound on a test that fails, not a measure). */
static char *read_until(int r, const char *until)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    buf[0] = 0;
    for (;;) {
        if (until && strstr(buf, until))
            return buf;
        struct pollfd pf = {.fd = r, .events = POLLIN};
        int rc = poll(&pf, 1, 20000);
        if (rc == 0)
            fail_msg("nothing more on the pipe; so far: %.300s", buf);
        ssize_t k = read(r, buf + len, cap - len);
        assert_true(k >= 0);
        if (k == 0) {
            if (until)
                fail_msg("end of file before '%s'; got: %.300s", until, buf);
            return buf;
        }
        len += (size_t)k;
        buf[len] = 0;
        assert_true(len < cap);
    }
}

/* Is line i (of log_numbered) at p, whole? */
static int is_numbered(const char *p, int i, const char *level)
{
    char want[32];
    snprintf(want, sizeof want, " %-5s line %04d ", level, i);
    const char *nl = strchr(p, '\n');
    return nl && nl - p == LINE - 1 && !strncmp(p + 23, want, strlen(want));
}

static void test_lines_in_order(void **state)
{
    (void)state;
    int p[2];
    pipe_open(p);
    assert_int_equal(log_start(p[1], 1 << 16), 0);
    for (int i = 0; i < 200; i++)
        log_numbered(LOG_INFO, i);
    assert_int_equal(log_stop(10000), 0); /* 20,000 bytes: the pipe holds them */
    close(p[1]);
    char *out = read_until(p[0], NULL);
    const char *q = out;
    for (int i = 0; i < 200; i++) {
        assert_true(is_numbered(q, i, "info"));
        q = strchr(q, '\n') + 1;
    }
    assert_string_equal(q, ""); /* nothing else: no "dropped" line */
    free(out);
    close(p[0]);
}

/* What one warn line from "c1 peer" comes out as (fmt with one string argument), through the
 * log's thread to a pipe; to be freed. */
static char *logged_warn(const char *fmt, const char *arg)
{
    int p[2];
    pipe_open(p);
    assert_int_equal(log_start(p[1], 1 << 16), 0);
    log_write(LOG_WARN, "c1 peer", fmt, arg);
    assert_int_equal(log_stop(10000), 0);
    close(p[1]);
    char *out = read_until(p[0], NULL);
    close(p[0]);
    return out;
}

/* A message with a newline (a client's text in it) stays one line: no forged line after it. */
static void test_one_line_per_event(void **state)
{
    (void)state;
    char *out = logged_warn("refused %s: not an admin", ".qgate.pause[\"a\n2026-12-03 10:00:00.000 error FORGED\r\"]");
    assert_non_null(strstr(out, "warn  c1 peer: refused .qgate.pause[\"a?2026-12-03 10:00:00.000 error FORGED?\"]: not an admin\n"));
    assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out)); /* one line */
    free(out);
}

/* A client's bytes above 0x7f: well-formed UTF-8 kept, every other byte '?' (a user's name or a
 * command's argument is any bytes), so each line is valid UTF-8 (before: copied raw). */
static void test_utf8_kept_rest_replaced(void **state)
{
    (void)state;
    char *out = logged_warn("user %s refused", "caf\xc3\xa9\xf0\x9f\x98\x80|\xff\xc0\xaf\xed\xa0\x80\xe2\x82");
    assert_non_null(strstr(out, "warn  c1 peer: user caf\xc3\xa9\xf0\x9f\x98\x80|???????? refused\n"));
    free(out);
}

/* The output fails inside a line (a full disk: here a file size limit) and comes back: the cut
 * line is ended before the next, never glued to it. */
static void test_cut_line_ended(void **state)
{
    (void)state;
    char path[] = "/tmp/qgate-test-log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGXFSZ, &ign, &old);
    struct rlimit rl0, rl;
    getrlimit(RLIMIT_FSIZE, &rl0);
    rl = rl0;
    rl.rlim_cur = LINE + LINE / 2; /* the second line is cut halfway */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
    assert_int_equal(log_start(fd, 1 << 16), 0);
    log_numbered(LOG_INFO, 1);
    log_numbered(LOG_INFO, 2);
    assert_int_equal(log_stop(10000), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl0), 0); /* room again */
    assert_int_equal(log_start(fd, 1 << 16), 0);
    log_numbered(LOG_INFO, 3);
    assert_int_equal(log_stop(10000), 0);
    sigaction(SIGXFSZ, &old, NULL);
    lseek(fd, 0, SEEK_SET);
    char *out = read_until(fd, NULL);
    close(fd);
    const char *q = out;
    assert_true(is_numbered(q, 1, "info"));
    q = strchr(q, '\n') + 1;
    assert_int_equal(strchr(q, '\n') - q, LINE / 2); /* the cut line, ended */
    q = strchr(q, '\n') + 1;
    assert_true(is_numbered(q, 3, "info")); /* whole, on a line of its own */
    free(out);
}

static void test_full_queue_drops_and_says_so(void **state)
{
    (void)state;
    int p[2];
    pipe_open(p);
    size_t junk = pipe_fill(p[1]); /* the reader has stopped: the thread's first write waits */
    uint64_t before = log_dropped_total();
    assert_int_equal(log_start(p[1], 40 * LINE + LINE / 2), 0); /* room for 40 lines */
    for (int i = 0; i < 50; i++)
        log_numbered(LOG_WARN, i);
    /* nothing leaves the queue before its write is done, and none can be: 40 queued, 10 not */
    assert_int_equal(log_dropped_total() - before, 10);
    read_exactly(p[0], junk); /* the reader is back */
    char *out = read_until(p[0], "dropped: the log was behind\n");
    const char *q = out;
    for (int i = 0; i < 40; i++) {
        assert_true(is_numbered(q, i, "warn"));
        q = strchr(q, '\n') + 1;
    }
    assert_string_equal(q + 23, " warn  10 log lines dropped: the log was behind\n");
    free(out);
    log_numbered(LOG_INFO, 50); /* and the queue takes lines again */
    assert_int_equal(log_stop(10000), 0);
    close(p[1]);
    out = read_until(p[0], NULL);
    assert_true(is_numbered(out, 50, "info"));
    assert_int_equal(strlen(out), LINE);
    assert_int_equal(log_dropped_total() - before, 10);
    free(out);
    close(p[0]);
}

/* One line of each level through the thread, and one written at once (no thread) to stderr. */
static char *lines_of_each_level(void)
{
    int p[2];
    pipe_open(p);
    assert_int_equal(log_start(p[1], 1 << 16), 0);
    log_write(LOG_ERROR, "c1 peer", "an error");
    log_write(LOG_WARN, NULL, "a warning");
    log_write(LOG_INFO, NULL, "some news");
    log_write(LOG_DEBUG, NULL, "a detail");
    assert_int_equal(log_stop(10000), 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
    log_write(LOG_WARN, NULL, "no thread"); /* after log_stop: at once, to stderr */
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    close(p[1]);
    char *out = read_until(p[0], NULL);
    close(p[0]);
    return out;
}

static void test_journal_priorities(void **state)
{
    (void)state;
    setenv("JOURNAL_STREAM", "8:1234", 1);
    assert_int_equal(log_journal_detect(), 1);
    char *out = lines_of_each_level();
    unsetenv("JOURNAL_STREAM");
    log_journal_detect();
    const char *want[] = {"<3>", " error c1 peer: an error\n", "<4>", " warn  a warning\n", "<6>", " info  some news\n",
                          "<7>", " debug a detail\n", "<4>", " warn  no thread\n"};
    const char *q = out;
    for (int i = 0; i < 10; i += 2) {
        assert_memory_equal(q, want[i], 3);
        assert_true(q[3] >= '0' && q[3] <= '9'); /* then the time, as without the journal */
        const char *nl = strchr(q, '\n');
        assert_non_null(nl);
        assert_int_equal(nl + 1 - (q + 3 + 23), strlen(want[i + 1]));
        assert_memory_equal(q + 3 + 23, want[i + 1], strlen(want[i + 1]));
        q = nl + 1;
    }
    assert_string_equal(q, "");
    free(out);
}

static void test_no_priority_without_journal(void **state)
{
    (void)state;
    unsetenv("JOURNAL_STREAM");
    assert_int_equal(log_journal_detect(), 0);
    char *out = lines_of_each_level();
    int n = 0;
    for (const char *q = out; *q; q = strchr(q, '\n') + 1, n++)
        assert_true(q[0] >= '0' && q[0] <= '9' && q[4] == '-'); /* the year: no <N> */
    assert_int_equal(n, 5);
    assert_non_null(strstr(out, " warn  a warning\n"));
    free(out);
}

static char sunk[4096];
static int nsunk;
static void sink(const char *line, size_t len)
{
    size_t have = strlen(sunk);
    assert_true(have + len < sizeof sunk);
    memcpy(sunk + have, line, len);
    sunk[have + len] = 0;
    nsunk++;
}

static void test_sink_at_once(void **state)
{
    (void)state;
    setenv("JOURNAL_STREAM", "8:1234", 1);
    log_journal_detect();
    int p[2];
    pipe_open(p);
    assert_int_equal(log_start(p[1], 1 << 16), 0); /* even with the thread up */
    sunk[0] = 0;
    nsunk = 0;
    log_sink = sink;
    log_write(LOG_WARN, "w h:1", "to the sink");
    assert_int_equal(nsunk, 1); /* at once, on this thread */
    assert_true(sunk[0] >= '0' && sunk[0] <= '9'); /* never a priority */
    assert_string_equal(sunk + 23, " warn  w h:1: to the sink\n");
    log_sink = NULL;
    assert_int_equal(log_stop(10000), 0);
    close(p[1]);
    char *out = read_until(p[0], NULL);
    assert_string_equal(out, ""); /* none of it to the fd */
    free(out);
    close(p[0]);
    unsetenv("JOURNAL_STREAM");
    log_journal_detect();
}

static void test_limited(void **state)
{
    (void)state;
    struct log_limit l = {0};
    sunk[0] = 0;
    nsunk = 0;
    log_sink = sink;
    assert_int_equal(log_limited(&l, 5000, LOG_WARN, "c1", "unasked %d", 1), 1);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(log_limited(&l, 5000 + i % 1000, LOG_WARN, "c1", "unasked %d", 2), 0);
    assert_int_equal(nsunk, 1);
    assert_int_equal(log_limited(&l, 6000, LOG_WARN, "c1", "unasked %d", 3), 1);
    assert_int_equal(nsunk, 2);
    assert_non_null(strstr(sunk, " warn  c1: unasked 1\n"));
    assert_non_null(strstr(sunk, " warn  c1: unasked 3 (and 1000 more not logged in the last 1000 ms)\n"));
    assert_int_equal(log_limited(&l, 7001, LOG_DEBUG, "c1", "below the level"), 0); /* counted too */
    assert_int_equal(l.quiet, 1);
    log_sink = NULL;
}

/* A reader that never reads: log_stop gives up in bounded time, and log_write still never
 * blocks (the line is queued for the thread, not written at once to the stuck fd). */
static void test_stop_gives_up_on_a_dead_reader(void **state)
{
    (void)state;
    int p[2];
    pipe_open(p);
    pipe_fill(p[1]);
    assert_int_equal(log_start(p[1], 1 << 16), 0);
    log_write(LOG_INFO, NULL, "stuck behind the reader");
    assert_int_equal(log_stop(100), -1);
    log_write(LOG_INFO, NULL, "after the stop gave up"); /* returns: alarm() below bounds it */
    close(p[0]); /* the reader goes: the thread's write fails (EPIPE), it ends */
    assert_int_equal(log_stop(10000), 0);
    close(p[1]);
}

/* The manual mode tests/sim drives: lines wait in the queue (wrapping its end) until pumped,
 * whole; what does not fit is dropped; the counts add up; the dropped line comes once drained. */
static void test_manual_queue(void **state)
{
    (void)state;
    sunk[0] = 0;
    nsunk = 0;
    log_sink = sink; /* not used while the queue is manual */
    assert_int_equal(log_start_manual(3 * LINE + LINE / 2, sink), 0);
    for (int i = 0; i < 5; i++)
        log_numbered(LOG_INFO, i);
    assert_int_equal(nsunk, 0);
    struct log_counts lc;
    log_counts(&lc);
    assert_int_equal(lc.offered, 5);
    assert_int_equal(lc.dropped, 2);
    assert_int_equal(lc.queued, 3);
    assert_int_equal(lc.queued_bytes, 3 * LINE);
    assert_int_equal(log_pump(LINE + 1), 1); /* whole lines only */
    assert_int_equal(nsunk, 1);
    assert_non_null(strstr(sunk, "line 0000 "));
    log_numbered(LOG_INFO, 5); /* wraps the ring's end */
    assert_int_equal(log_pump((size_t)-1), 3);
    assert_int_equal(nsunk, 5); /* and the dropped line */
    assert_non_null(strstr(sunk, "line 0001 "));
    assert_null(strstr(sunk, "line 0003 "));
    assert_non_null(strstr(strstr(sunk, "line 0005 "), " warn  2 log lines dropped: the log was behind\n"));
    log_counts(&lc);
    assert_int_equal(lc.offered, lc.written + lc.dropped + lc.queued);
    assert_int_equal(lc.written, 4);
    log_numbered(LOG_INFO, 6);
    assert_int_equal(log_stop(0), 0); /* gives out what is queued */
    assert_int_equal(nsunk, 6);
    assert_non_null(strstr(sunk, "line 0006 "));
    log_sink = NULL;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    alarm(120); /* a test that blocks fails, rather than hangs */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_in_order),
        cmocka_unit_test(test_one_line_per_event),
        cmocka_unit_test(test_utf8_kept_rest_replaced),
        cmocka_unit_test(test_cut_line_ended),
        cmocka_unit_test(test_full_queue_drops_and_says_so),
        cmocka_unit_test(test_journal_priorities),
        cmocka_unit_test(test_no_priority_without_journal),
        cmocka_unit_test(test_sink_at_once),
        cmocka_unit_test(test_limited),
        cmocka_unit_test(test_stop_gives_up_on_a_dead_reader),
        cmocka_unit_test(test_manual_queue),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}

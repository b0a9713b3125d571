/* test_alog.c: the access log's records and lines: every field in order, logfmt quoting of
 * awkward values, long values cut, and the access log's thread: every record in order, a reopen
 * between two of them, the truth counted (a failed open, /dev/full, a write cut short and its
 * fragment ended, never glued), and a FIFO nobody reads bounding neither the queue nor stop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alog.h"
#include "log.h"

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

/* Well-formed UTF-8 passes as it is; every byte outside it is \xNN, so the line is valid UTF-8
 * whatever bytes a query or a q error holds (before: copied raw). */
static void test_utf8(void **state)
{
    (void)state;
    char line[ALOG_LINE_MAX];
    struct alog_fields f = base;
    f.outcome = ALOG_ERROR;
    f.error = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"; /* 2, 3 and 4 bytes: kept */
    line_of(&f, line);
    assert_non_null(strstr(line, " error=\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""));
    f.error = "\xff" "a\x80" "b\xc0\xaf" "c\xed\xa0\x80" "d\xf4\x90\x80\x80" "e\xe2\x82"; /* none well-formed */
    line_of(&f, line);
    assert_non_null(strstr(line, " error=\"\\xffa\\x80b\\xc0\\xafc\\xed\\xa0\\x80d\\xf4\\x90\\x80\\x80e\\xe2\\x82\""));
    /* characters readers may take for line breaks (NEL, LINE and PARAGRAPH SEPARATOR), and the other
     * C1 controls: escaped, so a line stays one line (a query's text could plant one: round 11) */
    f.error = "a\xc2\x85" "b\xe2\x80\xa8" "c\xe2\x80\xa9" "d\xc2\x9f" "e\xc2\xa0";
    line_of(&f, line);
    assert_non_null(strstr(line, " error=\"a\\xc2\\x85b\\xe2\\x80\\xa8c\\xe2\\x80\\xa9d\\xc2\\x9fe\xc2\xa0\""));
    char cut[300]; /* a 3-byte character cut by the 255-byte limit */
    memset(cut, 'x', 254);
    memcpy(cut + 254, "\xe2\x82\xac", 4);
    f.error = cut;
    line_of(&f, line);
    assert_non_null(strstr(line, "xx\\xe2\""));
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        assert_true(*p < 0x80); /* the cut character's bytes: none raw */
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

/* ---- the writer thread ----------------------------------------------------------------------- */

static char tmp_dir[64];
static void tmp_dir_remove(void) { rmdir(tmp_dir); } /* (each test unlinks its files) */

static char *tmp_path(const char *name)
{
    static char paths[8][128];
    static int n;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_alog.XXXXXX");
        assert_non_null(mkdtemp(tmp_dir));
        atexit(tmp_dir_remove);
    }
    char *dir = tmp_dir;
    char *p = paths[n++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

/* Wait (bounded) until the writer has dealt with n records: written or dropped. */
static void wait_settled(struct alog_writer *w, uint64_t n)
{
    struct alog_counts c;
    for (int i = 0; i < 20000; i++) {
        alog_writer_counts(w, &c);
        if (c.lines + c.dropped >= n)
            return;
        usleep(1000);
    }
    fail_msg("the writer settled %llu of %llu records", (unsigned long long)(c.lines + c.dropped),
             (unsigned long long)n);
}

static void put_range(struct alog_writer *w, int from, int to)
{
    struct alog_fields f = base;
    for (int i = from; i < to; i++) {
        f.client = (uint64_t)i;
        assert_int_equal(alog_writer_put(w, &f), 0);
    }
}

/* The file's lines: each a whole record (its client id in ids[]), or a fragment (-1). */
static int read_lines(const char *path, long *ids, int max, int *frags)
{
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char line[ALOG_LINE_MAX];
    int n = 0;
    *frags = 0;
    while (fgets(line, sizeof line, in)) {
        size_t len = strlen(line);
        assert_true(len && line[len - 1] == '\n'); /* the file ends in a whole line */
        const char *t = strstr(line, "time=");
        assert_true(!t || !strstr(t + 1, "time=")); /* never two records glued */
        unsigned long long id;
        if (t == line && strstr(line, " outcome=ok\n") && sscanf(strstr(line, " client="), " client=%llu", &id) == 1) {
            assert_true(n < max);
            ids[n++] = (long)id;
        } else {
            (*frags)++;
        }
    }
    fclose(in);
    return n;
}

/* A writer with at most max bytes queued, asked to open path; alog_writer_opened(wait_ms) must
 * say want (0 open, 1 still opening). */
static struct alog_writer *writer_on(const char *path, size_t max, int wait_ms, int want)
{
    struct alog_writer *w = alog_writer_start(max);
    assert_non_null(w);
    alog_writer_reopen(w, path, 0);
    char err[1200];
    assert_int_equal(alog_writer_opened(w, wait_ms, err, sizeof err), want);
    return w;
}

static void test_writer_in_order(void **state)
{
    (void)state;
    char *path = tmp_path("order.log");
    struct alog_writer *w = writer_on(path, 16 << 20, 10000, 0);
    put_range(w, 0, 5000);
    struct alog_counts c;
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, 5000);
    assert_int_equal(c.dropped, 0);
    assert_int_equal(c.errors, 0);
    static long ids[6000];
    int frags, n = read_lines(path, ids, 6000, &frags);
    assert_int_equal(n, 5000);
    assert_int_equal(frags, 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], i);
    unlink(path);
}

/* A reopen: the records put before it go to the old file, those after to the new one. */
static void test_writer_reopen(void **state)
{
    (void)state;
    char *p1 = tmp_path("one.log"), *p2 = tmp_path("two.log");
    struct alog_writer *w = alog_writer_start(16 << 20);
    assert_non_null(w);
    alog_writer_reopen(w, p1, 0);
    put_range(w, 0, 300);
    alog_writer_reopen(w, p2, 0);
    put_range(w, 300, 500);
    struct alog_counts c;
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, 500);
    static long ids[600];
    int frags, n = read_lines(p1, ids, 600, &frags);
    assert_int_equal(n, 300);
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], i);
    n = read_lines(p2, ids, 600, &frags);
    assert_int_equal(n, 200);
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], 300 + i);
    unlink(p1);
    unlink(p2);
}

static void test_writer_open_fails(void **state)
{
    (void)state;
    struct alog_writer *w = alog_writer_start(1 << 20);
    assert_non_null(w);
    alog_writer_reopen(w, "/nonexistent/dir/x.log", 0);
    char err[1200];
    assert_int_equal(alog_writer_opened(w, 10000, err, sizeof err), -1);
    assert_string_equal(err, "access_log /nonexistent/dir/x.log: No such file or directory");
    put_range(w, 0, 10);
    struct alog_counts c;
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, 0);
    assert_int_equal(c.dropped, 10); /* no file: dropped, counted */
    assert_int_equal(c.errors, 1);
}

/* /dev/full: every write fails; nothing counts as written. */
static void test_writer_dev_full(void **state)
{
    (void)state;
    struct alog_writer *w = writer_on("/dev/full", 16 << 20, 10000, 0);
    put_range(w, 0, 20000);
    struct alog_counts c;
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, 0);
    assert_int_equal(c.dropped, 20000);
    assert_true(c.errors > 0);
}

/* A write cut short (the file size limit, as a full disk cuts it): the fragment is ended with a
 * newline before the next line, and counted dropped, not written. */
static void test_writer_cut_write(void **state)
{
    (void)state;
    char *path = tmp_path("cut.log");
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    struct alog_writer *w = writer_on(path, 16 << 20, 10000, 0);
    lim = old;
    lim.rlim_cur = 10000; /* about 60 lines, the last of them cut */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    put_range(w, 0, 200);
    wait_settled(w, 200);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    struct alog_counts c;
    alog_writer_counts(w, &c);
    assert_true(c.lines > 0 && c.lines < 200);
    assert_int_equal(c.lines + c.dropped, 200);
    assert_true(c.errors > 0);
    uint64_t first = c.lines;
    put_range(w, 200, 300);
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, first + 100);
    assert_int_equal(c.lines + c.dropped, 300);
    static long ids[400];
    int frags, n = read_lines(path, ids, 400, &frags);
    assert_int_equal(frags, 1); /* the cut line, ended */
    assert_int_equal(n, (int)c.lines);
    for (int i = 0; i < (int)first; i++)
        assert_int_equal(ids[i], i);
    for (int i = 0; i < 100; i++)
        assert_int_equal(ids[first + (uint64_t)i], 200 + i);
    unlink(path);
}

/* A disk with so many bytes of room (the writer with no thread: alog_writer_start_manual). */
static size_t room;
static ssize_t write_room(void *ctx, int fd, const void *p, size_t len)
{
    (void)ctx;
    if (len > room)
        len = room;
    if (!len) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t r = write(fd, p, len);
    room -= r > 0 ? (size_t)r : 0;
    return r;
}

/* The disk full just before a line's newline: that line is neither written nor dropped until its
 * newline is (then a line); a reopen of the same file (SIGUSR1, no rotation) keeps the cut line's
 * newline owed, so nothing is glued to it. */
static void test_writer_cut_before_newline(void **state)
{
    (void)state;
    char *path = tmp_path("nl.log");
    struct alog_writer *w = alog_writer_start_manual(1 << 20, write_room, NULL);
    assert_non_null(w);
    room = (size_t)-1;
    alog_writer_reopen(w, path, 0);
    char err[1200], line[ALOG_LINE_MAX];
    assert_int_equal(alog_writer_opened(w, 0, err, sizeof err), 0);
    struct alog_fields f = base;
    line_of(&f, line);
    size_t len = strlen(line);
    room = 2 * (len + 1) - 1; /* two lines but the second's newline */
    put_range(w, 0, 3);
    alog_writer_pump(w);
    struct alog_counts c;
    alog_writer_counts(w, &c);
    assert_int_equal(c.lines, 1);
    assert_int_equal(c.dropped, 1); /* the third */
    assert_int_equal(c.queued, 1);  /* the second: all there but its newline */
    assert_int_equal(c.held, 1);    /* ...held for it, not waiting for the thread */
    alog_writer_reopen(w, path, 0); /* the same file: nothing can be written yet */
    put_range(w, 3, 4);
    alog_writer_pump(w);
    alog_writer_counts(w, &c);
    assert_int_equal(c.lines + c.dropped + c.queued, 4);
    assert_int_equal(c.queued, 1);
    assert_int_equal(c.held, 1);
    room = (size_t)-1; /* room again: the newline, then the next line */
    put_range(w, 4, 6);
    alog_writer_pump(w);
    alog_writer_counts(w, &c);
    assert_int_equal(c.queued, 0); /* the held line settled by its newline */
    assert_int_equal(c.held, 0);
    alog_writer_stop(w, 1000, &c);
    assert_int_equal(c.lines, 4); /* 0, 1, 4, 5 */
    assert_int_equal(c.dropped, 2);
    static long ids[8];
    int frags, n = read_lines(path, ids, 8, &frags);
    assert_int_equal(frags, 0);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 4);
    assert_int_equal(ids[3], 5);
    unlink(path);
}

/* A FIFO nobody reads: the queue's bound drops what does not fit, and stop ends the stuck
 * write within its bound, counting what was left as dropped. */
static void test_writer_stuck_fifo(void **state)
{
    (void)state;
    char *path = tmp_path("fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    int holder = open(path, O_RDWR | O_NONBLOCK); /* a reader that never reads */
    assert_true(holder >= 0);
    struct alog_writer *w = writer_on(path, 1 << 20, 10000, 0); /* past BATCH_BYTES: the thread writes, and is stuck */
    struct alog_fields f = base;
    uint64_t dropped = 0;
    int i;
    for (i = 0; !dropped && i < 1000000; i++) { /* until the queue is full */
        f.client = (uint64_t)i;
        dropped = alog_writer_put(w, &f);
    }
    assert_int_equal(dropped, 1);
    struct alog_counts c;
    alog_writer_stop(w, 200, &c);
    assert_int_equal(c.lines + c.dropped, (uint64_t)i);
    assert_true(c.lines > 0 && c.lines < (uint64_t)i / 4); /* a pipe's 64 KiB of 1 MiB */
    assert_int_equal(c.errors, 0);                        /* ended by stop: no write error */
    close(holder);
    unlink(path);
}

/* A FIFO with no reader at all: the open blocks; the setup's wait gives up, and stop ends it. */
static void test_writer_stuck_open(void **state)
{
    (void)state;
    char *path = tmp_path("fifo2");
    assert_int_equal(mkfifo(path, 0600), 0);
    struct alog_writer *w = writer_on(path, 1 << 20, 50, 1);
    put_range(w, 0, 10);
    struct alog_counts c;
    alog_writer_stop(w, 100, &c);
    assert_int_equal(c.lines, 0);
    assert_int_equal(c.dropped, 10);
    unlink(path);
}

static int lines_in(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0, ch;
    while (f && (ch = fgetc(f)) != EOF)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

/* A reload's move to path to (before records put so far), after more records put: the open
 * done, then stop; every one of them is in to. */
static void move_and_stop(struct alog_writer *w, int before, const char *to, int after, struct alog_counts *c)
{
    alog_writer_reopen(w, to, 0);
    put_range(w, before, before + after);
    char err[1200];
    assert_int_equal(alog_writer_opened(w, 10000, err, sizeof err), 0);
    alog_writer_stop(w, 10000, c);
    assert_int_equal(lines_in(to), after);
    unlink(to);
}

/* A reload moves the access log off a FIFO that is full and never read (a hung log shipper): the
 * lines left for it are dropped, and the lines after go to the new file, without a stop (before:
 * the thread waited in write() for ever, every line after it dropped once the queue was full). */
static void test_writer_moves_off_stuck_fifo(void **state)
{
    (void)state;
    char *path = tmp_path("fifo3"), *to = tmp_path("moved.log");
    assert_int_equal(mkfifo(path, 0600), 0);
    int holder = open(path, O_RDWR | O_NONBLOCK); /* a reader that never reads */
    assert_true(holder >= 0);
    struct alog_writer *w = writer_on(path, 16 << 20, 10000, 0);
    put_range(w, 0, 20000); /* 4 MB of lines: past BATCH_BYTES, past the pipe's 64 KiB */
    struct alog_counts c;
    move_and_stop(w, 20000, to, 10, &c);
    assert_int_equal(c.lines + c.dropped, 20010);
    assert_int_equal(c.errors, 0);
    close(holder);
    unlink(path);
}

/* ... and off a FIFO with no reader at all, whose open waits: the open is given up. */
static void test_writer_moves_off_stuck_open(void **state)
{
    (void)state;
    char *path = tmp_path("fifo4"), *to = tmp_path("moved2.log");
    assert_int_equal(mkfifo(path, 0600), 0);
    struct alog_writer *w = writer_on(path, 1 << 20, 50, 1);
    put_range(w, 0, 5);
    struct alog_counts c;
    move_and_stop(w, 5, to, 10, &c);
    assert_int_equal(c.lines, 10);
    assert_int_equal(c.dropped, 5);
    unlink(path);
}

/* A reload to a FIFO with no reader, then to a file before it opens: the lines meant for the
 * FIFO are dropped, not written to the file before it (they went there at 561b04b). */
static void test_writer_fifo_given_up_not_to_old_file(void **state)
{
    (void)state;
    char *p0 = tmp_path("reg0.log"), *fifo = tmp_path("fifo5"), *p1 = tmp_path("reg1.log");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct alog_writer *w = writer_on(p0, 1 << 20, 10000, 0);
    put_range(w, 0, 3);
    alog_writer_reopen(w, fifo, 0);
    put_range(w, 3, 5);
    struct alog_counts c;
    move_and_stop(w, 5, p1, 10, &c);
    assert_int_equal(lines_in(p0), 3);
    assert_int_equal(c.lines, 13);
    assert_int_equal(c.dropped, 2);
    assert_int_equal(c.errors, 0);
    unlink(fifo);
    unlink(p0);
}

/* The log says "access log off" when a reload turns it off while an open is still waiting (a FIFO
 * with no reader, given up): it said nothing, as if the log were still on (at 8653d2c). */
static char offlog[4096];
static size_t offlog_n;
static void off_out(const char *line, size_t len)
{
    if (offlog_n + len < sizeof offlog) {
        memcpy(offlog + offlog_n, line, len);
        offlog_n += len;
        offlog[offlog_n] = 0;
    }
}

static void test_writer_off_while_opening(void **state)
{
    (void)state;
    char *fifo = tmp_path("fifo6");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(log_start_manual(1 << 16, off_out), 0);
    struct alog_writer *w = writer_on(fifo, 1 << 20, 50, 1); /* (its open waits for a reader) */
    alog_writer_reopen(w, "", 1);
    char err[1200];
    assert_int_equal(alog_writer_opened(w, 10000, err, sizeof err), 0);
    alog_writer_stop(w, 10000, NULL);
    assert_int_equal(log_stop(10000), 0);
    assert_non_null(strstr(offlog, "access log off"));
    unlink(fifo);
}

/* A file that ends in part of a line when it is opened (a full disk cut it, then the log moved
 * away before its newline could be written, and back): the first line starts with a newline, so
 * it is not glued to that fragment (it was at d861a51). */
static void test_writer_ends_a_fragment_it_finds(void **state)
{
    (void)state;
    char *path = tmp_path("frag.log");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("time=cut sho", f);
    fclose(f);
    struct alog_writer *w = writer_on(path, 1 << 20, 10000, 0);
    put_range(w, 0, 2);
    struct alog_counts c;
    alog_writer_stop(w, 10000, &c);
    assert_int_equal(c.lines, 2);
    static long ids[8];
    int frags, n = read_lines(path, ids, 8, &frags);
    assert_int_equal(n, 2);
    assert_int_equal(frags, 1);
    assert_int_equal(lines_in(path), 3);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_quoting),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_writer_in_order),
        cmocka_unit_test(test_writer_reopen),
        cmocka_unit_test(test_writer_open_fails),
        cmocka_unit_test(test_writer_dev_full),
        cmocka_unit_test(test_writer_cut_write),
        cmocka_unit_test(test_writer_cut_before_newline),
        cmocka_unit_test(test_writer_stuck_fifo),
        cmocka_unit_test(test_writer_stuck_open),
        cmocka_unit_test(test_writer_moves_off_stuck_fifo),
        cmocka_unit_test(test_writer_moves_off_stuck_open),
        cmocka_unit_test(test_writer_fifo_given_up_not_to_old_file),
        cmocka_unit_test(test_writer_off_while_opening),
        cmocka_unit_test(test_writer_ends_a_fragment_it_finds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* log.c: levelled logging. A line is formatted on the caller's thread and, once log_start has
 * run, appended whole to a ring of bytes under a mutex; the log thread writes the ring to the
 * fd (blocking writes are fine there). A line that does not fit is dropped and counted, never
 * cut; once the ring has drained, the thread says how many were dropped. */
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_INFO;
void (*log_sink)(const char *line, size_t len);

#define LOG_NAME(e, s) s,
static const char *const names[] = {LOG_LEVELS(LOG_NAME)};
#undef LOG_NAME

/* syslog priorities of the levels (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG) */
static const char prio[LOG_NLEVELS] = {'3', '4', '6', '7'};

#define LINE_MAX_LEN 1024 /* a line, its newline included; longer ones are cut */
#define PRIO_LEN 3        /* "<N>" */

#define MIN_(a, b) ((a) < (b) ? (a) : (b))

static int journal; /* JOURNAL_STREAM was set: lines start with <N> */

/* log_start_manual: the ring without a thread; log_pump gives its lines to manual_out. Set and
 * read on the one thread that uses it (tests/sim); never in production. */
static int manual;
static void (*manual_out)(const char *line, size_t len);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t more;  /* lines queued, or stop asked: the thread wakes */
    pthread_cond_t ended_cv; /* the thread has ended */
    char *ring;
    size_t cap, head, len; /* bytes [head, head + len) mod cap are queued */
    uint64_t dropped;     /* lines dropped since the last "dropped" line */
    uint64_t dropped_total;
    int fd;
    int running;          /* the thread owns fd (or manual): lines go to the ring */
    int stopping, ended;
    uint64_t lines_in;    /* lines offered to the ring */
    uint64_t written;     /* lines written from it (manual mode: given to out) */
    pthread_t th;
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = STDERR_FILENO};

int log_level_parse(const char *s)
{
    for (int i = 0; i < LOG_NLEVELS; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

const char *log_level_name(int level) { return level >= 0 && level < LOG_NLEVELS ? names[level] : "?"; }

int log_journal_detect(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    journal = v && *v;
    return journal;
}

/* The length of the well-formed UTF-8 sequence of 2 to 4 bytes s starts with (n bytes left), or 0
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); 0 too for the C1 controls
 * (U+0080-U+009F: NEL among them) and U+2028, U+2029, which readers may take for line breaks: a
 * line stays one line. */
size_t log_utf8_seq(const unsigned char *s, size_t n)
{
    if (n >= 2 && s[0] == 0xc2 && s[1] <= 0x9f)
        return 0;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9))
        return 0;
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t len;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

void log_printable(char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x80 && (k = log_utf8_seq((const unsigned char *)s + i, n - i)) > 0)
            i += k - 1;
        else if (ch < 0x20 || ch >= 0x7f)
            s[i] = '?';
    }
}

/* The line of level into out (LINE_MAX_LEN + PRIO_LEN bytes): "<N>" when the journal reads it,
 * then time, level, prefix and the message, and a newline. Its length; *body: where the line
 * starts past the "<N>" (what log_sink gets). */
static size_t format(char *out, const char **body, int level, const char *prefix, const char *fmt, va_list ap)
{
    char *line = out + PRIO_LEN;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, LINE_MAX_LEN, "%04d-%02d-%02d %02d:%02d:%02d.%03ld %-5s %s%s", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec / 1000,
                     log_level_name(level), prefix ? prefix : "", prefix ? ": " : "");
    if (n < 0)
        n = 0;
    if (n < LINE_MAX_LEN) {
        int m = vsnprintf(line + n, LINE_MAX_LEN - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if (n >= LINE_MAX_LEN - 1)
        n = LINE_MAX_LEN - 2;
    log_printable(line, (size_t)n); /* one event, one line: a client's text (a command's argument, a
                                     * user's name) cannot end it and forge the next; and the line
                                     * is UTF-8, whatever bytes that text held */
    line[n++] = '\n';
    *body = line;
    if (!journal || level < 0 || level >= LOG_NLEVELS)
        return (size_t)n;
    out[0] = '<';
    out[1] = prio[level];
    out[2] = '>';
    *body = out;
    return (size_t)n + PRIO_LEN;
}

/* Write all of p to fd, waiting as long as it takes (on the log thread, or where no thread
 * runs). The bytes written, or fewer if the fd failed (the rest is lost). */
static int cut; /* the last write stopped inside a line: the next begins by ending it */

static size_t write_all(int fd, const char *p, size_t n)
{
    size_t done = 0;
    if (cut && n) { /* (a full disk freed again): the fragment ended, so no line is glued to it */
        if (write(fd, "\n", 1) != 1)
            return 0;
        cut = 0;
    }
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { /* someone made it non-blocking */
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, -1) >= 0 || errno == EINTR)
                continue;
        }
        break;
    }
    cut = done < n && done > 0 && p[done - 1] != '\n';
    return done;
}

static size_t count_lines(const char *p, size_t n)
{
    size_t k = 0;
    for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
        k++;
    return k;
}

/* Append one whole line to the ring (Q.mu held): 0, or -1 if it does not fit. */
static int ring_put(const char *p, size_t n)
{
    if (n > Q.cap - Q.len)
        return -1;
    size_t tail = (Q.head + Q.len) % Q.cap, first = MIN_(n, Q.cap - tail);
    memcpy(Q.ring + tail, p, first);
    memcpy(Q.ring, p + first, n - first);
    Q.len += n;
    return 0;
}

void log_write(int level, const char *prefix, const char *fmt, ...)
{
    char buf[LINE_MAX_LEN + PRIO_LEN];
    const char *line;
    va_list ap;
    va_start(ap, fmt);
    size_t n = format(buf, &line, level, prefix, fmt, ap);
    va_end(ap);
    if (journal && (log_sink || manual)) /* the sink gets the line without its priority */
        line += PRIO_LEN, n -= PRIO_LEN;
    if (log_sink && !manual) {
        log_sink(line, n);
        return;
    }
    pthread_mutex_lock(&Q.mu);
    if (Q.running) {
        int was_empty = Q.len == 0;
        Q.lines_in++;
        if (ring_put(line, n)) {
            Q.dropped++;
            Q.dropped_total++;
        } else if (was_empty && !manual) {
            pthread_cond_signal(&Q.more);
        }
        pthread_mutex_unlock(&Q.mu);
        return;
    }
    int fd = Q.fd;
    pthread_mutex_unlock(&Q.mu);
    write_all(fd, line, n); /* no thread: as before log_start */
}

/* format, from arguments */
static size_t format_args(char *out, const char **body, int level, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static size_t format_args(char *out, const char **body, int level, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = format(out, body, level, prefix, fmt, ap);
    va_end(ap);
    return n;
}

/* "N log lines dropped: the log was behind", written by the thread once the ring has drained. */
static void say_dropped(int fd, uint64_t n)
{
    char buf[LINE_MAX_LEN + PRIO_LEN];
    const char *line;
    size_t len = format_args(buf, &line, LOG_WARN, NULL, "%llu log lines dropped: the log was behind",
                             (unsigned long long)n);
    write_all(fd, line, len);
}

static void *log_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&Q.mu);
    for (;;) {
        while (!Q.len && !Q.dropped && !Q.stopping)
            pthread_cond_wait(&Q.more, &Q.mu);
        if (Q.len) { /* the bytes up to the ring's end; nobody else touches them meanwhile */
            size_t h = Q.head, n = MIN_(Q.len, Q.cap - h);
            const char *ring = Q.ring;
            int fd = Q.fd;
            pthread_mutex_unlock(&Q.mu);
            size_t w = write_all(fd, ring + h, n);
            uint64_t lost = w < n ? count_lines(ring + h + w, n - w) : 0, lines = count_lines(ring + h, n);
            pthread_mutex_lock(&Q.mu);
            Q.head = (h + n) % Q.cap;
            Q.len -= n;
            Q.written += lines - lost;
            Q.dropped_total += lost; /* the output failed: not retried, not reported through it */
            continue;
        }
        if (Q.dropped) { /* drained: say how many did not fit */
            uint64_t d = Q.dropped;
            int fd = Q.fd;
            Q.dropped = 0;
            pthread_mutex_unlock(&Q.mu);
            say_dropped(fd, d);
            pthread_mutex_lock(&Q.mu);
            continue;
        }
        break; /* stopping, and nothing left */
    }
    Q.ended = 1;
    pthread_cond_broadcast(&Q.ended_cv);
    pthread_mutex_unlock(&Q.mu);
    return NULL;
}

static int stop_timed_out; /* a log_stop gave up on the thread: exit waits no more for it */

static void stop_at_exit(void)
{
    if (!stop_timed_out)
        log_stop(2000);
}

int log_start(int fd, size_t cap)
{
    pthread_mutex_lock(&Q.mu);
    int up = Q.running;
    pthread_mutex_unlock(&Q.mu);
    char *ring = up || !cap ? NULL : malloc(cap);
    if (!ring)
        return -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&Q.ended_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&Q.more, NULL);
    pthread_mutex_lock(&Q.mu);
    Q.ring = ring;
    Q.cap = cap;
    Q.head = Q.len = 0;
    Q.dropped = 0;
    Q.fd = fd;
    Q.stopping = Q.ended = 0;
    sigset_t all, old; /* no signal for it: the loop takes them from its signalfd */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&Q.th, NULL, log_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        Q.ring = NULL;
        Q.cap = 0;
        Q.fd = STDERR_FILENO;
        pthread_mutex_unlock(&Q.mu);
        pthread_cond_destroy(&Q.more);
        pthread_cond_destroy(&Q.ended_cv);
        free(ring);
        return -1;
    }
    Q.running = 1;
    pthread_mutex_unlock(&Q.mu);
    static int registered;
    if (!registered) /* an exit() elsewhere still writes what is queued (for 2 s at most) */
        registered = !atexit(stop_at_exit);
    return 0;
}

int log_stop(int timeout_ms)
{
    if (manual) { /* what is queued is given out first */
        log_pump((size_t)-1);
        free(Q.ring);
        Q.ring = NULL;
        Q.cap = Q.head = 0;
        Q.running = manual = 0;
        manual_out = NULL;
        return 0;
    }
    pthread_mutex_lock(&Q.mu);
    if (!Q.running) {
        pthread_mutex_unlock(&Q.mu);
        return 0;
    }
    Q.stopping = 1;
    pthread_cond_signal(&Q.more);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (!Q.ended)
        if (pthread_cond_timedwait(&Q.ended_cv, &Q.mu, &dl) == ETIMEDOUT)
            break;
    if (!Q.ended) { /* still writing to a reader that does not read: left to it */
        stop_timed_out = 1;
        pthread_mutex_unlock(&Q.mu);
        return -1;
    }
    /* lines queued after the thread last looked: written here, in order, before any later one */
    if (Q.len) {
        size_t first = MIN_(Q.len, Q.cap - Q.head);
        write_all(Q.fd, Q.ring + Q.head, first);
        write_all(Q.fd, Q.ring, Q.len - first);
        Q.written += count_lines(Q.ring + Q.head, first) + count_lines(Q.ring, Q.len - first);
        Q.len = 0;
    }
    char *ring = Q.ring;
    stop_timed_out = 0;
    Q.running = 0;
    Q.ring = NULL;
    Q.cap = Q.head = 0;
    Q.fd = STDERR_FILENO; /* where lines go at once from now on */
    pthread_mutex_unlock(&Q.mu);
    pthread_join(Q.th, NULL);
    pthread_cond_destroy(&Q.more);
    pthread_cond_destroy(&Q.ended_cv);
    free(ring);
    return 0;
}

int log_start_manual(size_t cap, void (*out)(const char *line, size_t len))
{
    if (Q.running || !cap || !out || !(Q.ring = malloc(cap)))
        return -1;
    Q.cap = cap;
    Q.head = Q.len = 0;
    Q.dropped = Q.dropped_total = Q.lines_in = Q.written = 0;
    Q.running = manual = 1;
    manual_out = out;
    return 0;
}

/* The first queued line, copied out whole (it may wrap the ring's end): its length. */
static size_t ring_line(char *out)
{
    size_t n = 0;
    while (n < Q.len && n < LINE_MAX_LEN) {
        char ch = Q.ring[(Q.head + n) % Q.cap];
        out[n++] = ch;
        if (ch == '\n')
            break;
    }
    return n;
}

size_t log_pump(size_t max)
{
    if (!manual)
        return 0;
    size_t k = 0, done = 0;
    char buf[LINE_MAX_LEN + PRIO_LEN];
    while (Q.len) {
        size_t n = ring_line(buf);
        if (done + n > max)
            return k;
        Q.head = (Q.head + n) % Q.cap;
        Q.len -= n;
        Q.written++;
        done += n;
        k++;
        manual_out(buf, n);
    }
    if (Q.dropped) { /* drained: said as the thread says it */
        const char *line;
        size_t n = format_args(buf, &line, LOG_WARN, NULL, "%llu log lines dropped: the log was behind",
                               (unsigned long long)Q.dropped);
        if (journal)
            line += PRIO_LEN, n -= PRIO_LEN;
        Q.dropped = 0;
        manual_out(line, n);
    }
    return k;
}

void log_counts(struct log_counts *c)
{
    pthread_mutex_lock(&Q.mu);
    c->offered = Q.lines_in;
    c->written = Q.written;
    c->dropped = Q.dropped_total;
    c->queued = Q.len ? count_lines(Q.ring + Q.head, MIN_(Q.len, Q.cap - Q.head)) +
                            count_lines(Q.ring, Q.len - MIN_(Q.len, Q.cap - Q.head))
                      : 0;
    c->queued_bytes = Q.len;
    pthread_mutex_unlock(&Q.mu);
}

uint64_t log_dropped_total(void)
{
    pthread_mutex_lock(&Q.mu);
    uint64_t n = Q.dropped_total;
    pthread_mutex_unlock(&Q.mu);
    return n;
}

int log_vlimited(struct log_limit *l, int64_t now_ms, int lvl, const char *prefix, const char *fmt, va_list ap)
{
    if (lvl > log_level || (l->logged_ms && now_ms - l->logged_ms < 1000)) {
        l->quiet++;
        return 0;
    }
    char text[768];
    vsnprintf(text, sizeof text, fmt, ap);
    if (l->quiet)
        log_write(lvl, prefix, "%s (and %llu more not logged in the last %lld ms)", text, (unsigned long long)l->quiet,
                  (long long)(now_ms - l->logged_ms));
    else
        log_write(lvl, prefix, "%s", text);
    l->quiet = 0;
    l->logged_ms = now_ms ? now_ms : 1;
    return 1;
}

int log_limited(struct log_limit *l, int64_t now_ms, int lvl, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = log_vlimited(l, now_ms, lvl, prefix, fmt, ap);
    va_end(ap);
    return rc;
}

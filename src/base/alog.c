/* alog.c: access-log records, their logfmt lines, and the access log's thread. Pure but for the
 * thread, which touches nothing of the loop's: the loop reaches it through alog_writer_*. */
#include "alog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define NSTR 7 /* user, peer, group, worker, error, reason, query */

struct rec_hdr {
    uint32_t size; /* the record's bytes, strings included */
    uint8_t sync, outcome;
    uint8_t slen[NSTR];
    int64_t wall_us, queued_us, run_us;
    uint64_t client, req_bytes, reply_bytes;
};

static size_t cut(const char *s) { return s ? strnlen(s, 255) : 0; }

int alog_append(struct alog_buf *b, const struct alog_fields *f)
{
    const char *s[NSTR] = {f->user, f->peer, f->group, f->worker, f->error, f->reason, f->query};
    struct rec_hdr h = {.sync = (uint8_t)f->sync, .outcome = (uint8_t)f->outcome, .wall_us = f->wall_us,
                        .queued_us = f->queued_us, .run_us = f->run_us, .client = f->client,
                        .req_bytes = f->req_bytes, .reply_bytes = f->reply_bytes};
    size_t size = sizeof h;
    for (int i = 0; i < NSTR; i++) {
        h.slen[i] = (uint8_t)cut(s[i]);
        size += h.slen[i];
    }
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + size)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    h.size = (uint32_t)size;
    uint8_t *o = b->p + b->len;
    memcpy(o, &h, sizeof h);
    o += sizeof h;
    for (int i = 0; i < NSTR; i++) {
        memcpy(o, s[i] ? s[i] : "", h.slen[i]);
        o += h.slen[i];
    }
    b->len += size;
    b->n++;
    return 0;
}

void alog_buf_free(struct alog_buf *b)
{
    free(b->p);
    *b = (struct alog_buf){0};
}

/* ---- lines ------------------------------------------------------------------------------------ */

static char *put(char *o, const char *s)
{
    size_t n = strlen(s);
    memcpy(o, s, n);
    return o + n;
}

static char *put_u(char *o, uint64_t v)
{
    char t[24];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (n)
        *o++ = t[--n];
    return o;
}

static char *put_i(char *o, int64_t v)
{
    if (v < 0) {
        *o++ = '-';
        return put_u(o, (uint64_t)0 - (uint64_t)v);
    }
    return put_u(o, (uint64_t)v);
}

/* A logfmt value: bare when it is a plain word (or empty: key=), else quoted with \" \\ \n \r
 * \t and \xNN, the last for control bytes and for every byte not in well-formed UTF-8 (a q
 * error's or query's bytes are any bytes, or a multi-byte character cut at 255 bytes): the line
 * stays valid UTF-8 for what reads it. */
static char *put_v(char *o, const char *s, size_t n)
{
    int bare = 1;
    for (size_t i = 0; i < n && bare; i++)
        bare = (unsigned char)s[i] > ' ' && s[i] != '"' && s[i] != '=' && s[i] != '\\' && (unsigned char)s[i] < 0x7f;
    if (bare) {
        memcpy(o, s, n);
        return o + n;
    }
    *o++ = '"';
    for (size_t i = 0, k; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch == '\n' || ch == '\r' || ch == '\t') {
            *o++ = '\\';
            *o++ = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
        } else if (ch >= 0x80 && (k = log_utf8_seq((const unsigned char *)s + i, n - i)) > 0) {
            memcpy(o, s + i, k);
            o += k;
            i += k - 1;
        } else if (ch < ' ' || ch >= 0x7f) {
            static const char hex[] = "0123456789abcdef";
            o = put(o, "\\x");
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    return o;
}

static char *put_time(char *o, int64_t us)
{
    time_t sec = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char t[40];
    int n = snprintf(t, sizeof t, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
    memcpy(o, t, (size_t)n);
    return o + n;
}

#define OUTCOME_NAME(e, s) s,
static const char *const outcome_names[] = {ALOG_OUTCOMES(OUTCOME_NAME)};
#undef OUTCOME_NAME

const char *alog_outcome_name(int outcome) { return outcome >= 0 && outcome < ALOG_NOUTCOMES ? outcome_names[outcome] : "?"; }

size_t alog_format(const uint8_t *p, size_t *rec_len, char *out)
{
    static const char *const keys[NSTR] = {" user=", " peer=", " group=", " worker=", " error=", " reason=", " query="};
    struct rec_hdr h;
    memcpy(&h, p, sizeof h);
    *rec_len = h.size;
    const char *s[NSTR];
    const char *q = (const char *)p + sizeof h;
    for (int i = 0; i < NSTR; i++) {
        s[i] = q;
        q += h.slen[i];
    }
    char *o = put(out, "time=");
    o = put_time(o, h.wall_us);
    o = put_u(put(o, " client="), h.client);
    for (int i = 0; i < 4; i++)
        o = put_v(put(o, keys[i]), s[i], h.slen[i]);
    o = put(o, h.sync ? " type=sync" : " type=async");
    o = put_u(put(o, " req_bytes="), h.req_bytes);
    o = put_u(put(o, " reply_bytes="), h.reply_bytes);
    o = put_i(put(o, " queued_us="), h.queued_us);
    o = put_i(put(o, " run_us="), h.run_us);
    o = put(put(o, " outcome="), alog_outcome_name(h.outcome));
    for (int i = 4; i < NSTR; i++) /* error, reason, query: when there is one */
        if (h.slen[i])
            o = put_v(put(o, keys[i]), s[i], h.slen[i]);
    *o++ = '\n';
    return (size_t)(o - out);
}

/* ---- the file ----------------------------------------------------------------------------------- */

int alog_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0640);
    if (fd < 0)
        snprintf(err, errlen, "access_log %s: %s", path, strerror(errno));
    return fd;
}

/* ---- the writer thread ------------------------------------------------------------------------- */

#define OUT_CAP (1 << 20)          /* lines formatted per write */
#define BATCH_BYTES (256 * 1024)   /* records that make the thread write at once */
#define FLUSH_MS 100               /* else it writes within this long of the first */
#define SHRINK_CAP (4 << 20)       /* an empty queue larger than this is given back */
#define WARN_MS 10000              /* write errors: a line at most this often */
#define NREOPEN 4                  /* reopens waiting for the thread; beyond, the last one's path changes */
#define KICK_SIG (SIGRTMIN + 5)    /* interrupts the thread's stuck open() or write() at stop */
#define POLL_MS 100                /* a FIFO full, or with no reader yet: looked at again this often */

struct reopen {
    size_t mark;                   /* q's bytes when it was asked: those go to the file open before */
    int announce;                  /* log it */
    uint64_t seq;                  /* open_asked then */
    char path[1024];
};

struct alog_writer {
    pthread_mutex_t mu;
    pthread_cond_t wake;           /* the thread: records, a reopen, stop */
    pthread_cond_t done;           /* alog_writer_opened and _stop: an open done, the thread ended */
    pthread_t th;
    size_t max;                    /* bytes of records the queue may hold */
    struct alog_buf q;             /* the loop appends here */
    struct alog_buf cur;           /* the thread's batch, taken whole from q (mu: swapped) */
    int idle;                      /* the thread waits for records */
    int lingering;                 /* ...or for more of them, FLUSH_MS at most */
    int stop, ended;
    atomic_int abandon;            /* stop's time is up: give up an interrupted open() or write() */
    atomic_ullong move_seq;        /* the newest reopen that names another path than the one before */
    char want[1024];               /* (mu) the path the newest reopen names */
    /* the opens asked for (mu) */
    int nreopen;
    struct reopen reopen[NREOPEN], taken_reopen[NREOPEN]; /* the second: the thread's copy */
    int quiet_late;                /* alog_writer_opened gave up waiting: log the outcome */
    uint64_t open_asked, open_done;
    int open_failed;
    char open_err[1200];
    /* counts (mu) */
    uint64_t offered, lines, dropped, errors;
    uint64_t taken, settled;       /* records taken into cur; those of them counted lines or dropped */
    int held;                      /* frag_whole, as the counts see it */
    /* the thread's own */
    int fd;                        /* -1: none; O_NONBLOCK (a FIFO that is full: polled) */
    uint64_t file_seq;             /* the reopen fd answers: one after it moving away ends its writes */
    int frag;                      /* the file ends in part of a line (a write cut short) */
    int frag_whole;                /* ...all of it but its newline: a line once that is written */
    char fpath[1024];              /* the file's path */
    char *out;                     /* OUT_CAP + 1: [0] for the newline that ends a fragment */
    int64_t warned_ms;             /* the last write error logged */
    /* no thread (alog_writer_start_manual): the work done in alog_writer_pump, writes through wr */
    int manual;
    alog_write_fn *wr;
    void *wctx;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timespec abs_ms(int64_t ms)
{
    return (struct timespec){.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
}

/* Write errors: logged at most once per WARN_MS, with the counts so far. */
static void write_failed(struct alog_writer *w, int err)
{
    int64_t now = mono_ms();
    if (w->warned_ms && now - w->warned_ms < WARN_MS)
        return;
    w->warned_ms = now;
    pthread_mutex_lock(&w->mu);
    uint64_t errors = w->errors, dropped = w->dropped;
    pthread_mutex_unlock(&w->mu);
    log_error(NULL, "access log %s: %s: lines dropped (%llu write errors, %llu lines dropped so far)", w->fpath,
              strerror(err), (unsigned long long)errors, (unsigned long long)dropped);
}

/* Settle the counts of a write of n lines: ok of them reached the file whole; err its error;
 * afterwards a line cut before its newline waits for it (held) or not. */
static void settle(struct alog_writer *w, uint64_t n, uint64_t ok, int err, int held)
{
    pthread_mutex_lock(&w->mu);
    w->held = held;
    w->lines += ok;
    w->dropped += n - ok;
    w->settled += n;
    int kicked = atomic_load(&w->abandon); /* stop's time was up: not a write error */
    w->errors += err && !kicked;
    pthread_mutex_unlock(&w->mu);
    if (err && !kicked)
        write_failed(w, err);
}

static ssize_t write_some(struct alog_writer *w, const char *p, size_t len)
{
    return w->wr ? w->wr(w->wctx, w->fd, p, len) : write(w->fd, p, len);
}

/* A reload moved the access log to another path since fd was opened: what is left for fd is
 * written if it takes it at once, dropped rather than waited for if not (a FIFO nobody reads
 * would keep it, and every line after, for ever). */
static int moved(const struct alog_writer *w) { return atomic_load(&w->move_seq) > w->file_seq; }

/* A write found the FIFO full: wait for room (POLL_MS at a time), unless stop or a move ends it.
 * 0 to write again, -1 to give up. */
static int wait_room(struct alog_writer *w)
{
    if (atomic_load(&w->abandon) || moved(w))
        return -1;
    struct pollfd p = {.fd = w->fd, .events = POLLOUT};
    poll(&p, 1, POLL_MS);
    return 0;
}

/* Write the n whole lines at p (len bytes; p[-1] is ours). lines counts those that reached the
 * file whole; a write cut short leaves a fragment, which the next write ends with a newline
 * first. A line cut just before its newline is settled by that newline: a line if it is
 * written, dropped if not (end_fragment). */
static void flush_lines(struct alog_writer *w, char *p, size_t len, uint64_t n)
{
    if (w->fd < 0) {
        settle(w, n, 0, 0, w->frag_whole);
        return;
    }
    uint64_t ok = 0;
    int err = 0;
    char *s = p;
    if (w->frag)
        *--s = '\n';
    size_t total = len + (size_t)(p - s), off = 0;
    while (off < total) {
        ssize_t r = write_some(w, s + off, total - off);
        if (r < 0 && errno == EINTR && !atomic_load(&w->abandon))
            continue;
        if (r < 0 && errno == EAGAIN) { /* a FIFO full */
            if (!wait_room(w))
                continue;
            err = atomic_load(&w->abandon) ? EAGAIN : 0; /* (moved away: the rest dropped, no error) */
            break;
        }
        if (r <= 0) {
            err = r < 0 ? errno : EIO;
            break;
        }
        off += (size_t)r;
    }
    if (off && w->frag_whole) { /* its newline written: the line before is whole */
        w->frag_whole = 0;
        settle(w, 1, 1, 0, 0);
    }
    if (off == total) {
        ok = n;
    } else {
        for (const char *c = p, *end = s + off; c < end && (c = memchr(c, '\n', (size_t)(end - c))); c++)
            ok++;
    }
    if (off)
        w->frag = s[off - 1] != '\n';
    int whole = off && off < total && w->frag && s[off] == '\n'; /* all of a line but its newline */
    w->frag_whole |= whole;
    settle(w, n - (uint64_t)whole, ok, err, w->frag_whole);
}

/* Before the file is closed: a fragment it ends in gets its newline (a line cut just before its
 * newline then counted a line; dropped if even that cannot be written). */
static void end_fragment(struct alog_writer *w)
{
    if (w->fd < 0 || !w->frag)
        return;
    ssize_t r;
    while ((r = write_some(w, "\n", 1)) < 0 && errno == EINTR && !atomic_load(&w->abandon))
        ;
    if (r == 1)
        w->frag = 0;
    if (w->frag_whole) {
        w->frag_whole = 0;
        settle(w, 1, r == 1, 0, 0);
    }
}

/* Format and write the records of b from byte from to byte to. */
static void write_records(struct alog_writer *w, const struct alog_buf *b, size_t from, size_t to)
{
    char *out = w->out + 1;
    size_t len = 0;
    uint64_t n = 0;
    for (size_t off = from; off < to && !atomic_load(&w->abandon);) {
        size_t rl;
        len += alog_format(b->p + off, &rl, out + len);
        off += rl;
        n++;
        if (OUT_CAP - len < ALOG_LINE_MAX || off == to) {
            flush_lines(w, out, len, n);
            len = 0;
            n = 0;
        }
    }
}

/* Does the regular file fd (open for writing, at path) end in part of a line? (A FIFO or a
 * device: no telling, taken as not.) */
static int ends_mid_line(int fd, const char *path)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0)
        return 0;
    int rd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    char last = '\n';
    if (rd >= 0) {
        if (pread(rd, &last, 1, st.st_size - 1) != 1)
            last = '\n';
        close(rd);
    }
    return last != '\n';
}

/* The open asked for (path "": none). Called unlocked; publishes the outcome. */
static void do_open(struct alog_writer *w, const struct reopen *r)
{
    char err[1200] = "";
    int fd = -1;
    int told = 0;
    if (r->path[0]) /* a FIFO with no reader yet: tried again every POLL_MS, until stop or a move to
                     * another path ends it; a hung mount: only stop's KICK_SIG ends it */
        while ((fd = alog_open(r->path, err, sizeof err)) < 0 && (errno == EINTR || errno == ENXIO) &&
               !atomic_load(&w->abandon) && atomic_load(&w->move_seq) <= r->seq)
            if (errno == ENXIO) {
                if (r->announce && !told++) /* (said once: at a reload nothing said so, and the
                                             * lines queued for it read as a slow file's: helper round 20) */
                    log_warn(NULL, "access log %s: a FIFO with no reader: its lines wait for one", r->path);
                poll(NULL, 0, POLL_MS);
            }
    int failed = r->path[0] && fd < 0, was_open = w->fd >= 0;
    int had_path = w->fpath[0] != 0; /* (open, or given up on: "off" is news) */
    /* a FIFO with no reader, left for another path asked since: no error, and nothing of its
     * lines goes to the file before it (they are dropped, as a stuck target's are) */
    int given_up = failed && atomic_load(&w->move_seq) > r->seq;
    char path[sizeof w->fpath];
    snprintf(path, sizeof path, "%s", r->path);
    if (failed && !given_up && was_open && w->fpath[0] && strcmp(w->fpath, r->path)) {
        /* a new path (a reload's) that does not open: the file in use is reopened instead, as a
         * rotation needs (its name may be a new file by now); the next signal tries both again */
        char e2[1200];
        snprintf(path, sizeof path, "%s", w->fpath);
        fd = alog_open(path, e2, sizeof e2);
    }
    if (fd >= 0 || !r->path[0] || given_up) {
        /* the same file again (SIGUSR1 with no rotation), ending in a fragment that could not be
         * ended: the next line still starts with its newline */
        struct stat a, b;
        int same = fd >= 0 && w->fd >= 0 && w->frag && !fstat(w->fd, &a) && !fstat(fd, &b) &&
                   a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        if (!same)
            end_fragment(w);
        if (w->fd >= 0)
            close(w->fd);
        w->fd = fd;
        if (!same) /* a new file: a fragment to end only if it ends in one (left by a full disk, and
                    * a move away from it before the newline could be written, say) */
            w->frag = fd >= 0 && ends_mid_line(fd, path);
        snprintf(w->fpath, sizeof w->fpath, "%s", path);
    }
    w->file_seq = r->seq; /* (failed: the file kept, as that reopen leaves it) */
    pthread_mutex_lock(&w->mu);
    w->open_done = r->seq;
    w->open_failed = failed;
    snprintf(w->open_err, sizeof w->open_err, "%s", err);
    w->errors += failed && !given_up && !atomic_load(&w->abandon);
    int late = w->quiet_late && !r->announce;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
    if (atomic_load(&w->abandon) || given_up)
        return;
    if (failed && (r->announce || late))
        log_error(NULL, "%s (%s%s)", err, was_open ? "still writing to " : "its lines are dropped",
                  was_open ? (fd >= 0 ? path : "the file open before") : "");
    else if (!failed && late)
        log_info(NULL, "access log: %s open at last", r->path);
    else if (!failed && r->announce && (r->path[0] || was_open || had_path))
        log_info(NULL, "access log %s%s", !r->path[0] ? "off" : was_open ? "reopened: " : "opened: ", r->path);
}

/* Take the queue whole into cur (empty): the loop gets cur's buffer back to append to. */
static void take(struct alog_writer *w)
{
    struct alog_buf t = w->cur;
    w->cur = w->q;
    w->q = t;
    w->taken += w->cur.n;
}

/* One pass of the thread's work, mu held (let go while writing): the reopens asked, each after
 * the records put before it, or else the queue whole. 0 if there was nothing to do. */
static int work(struct alog_writer *w)
{
    int n = w->nreopen;
    if (!n && !w->q.len)
        return 0;
    memcpy(w->taken_reopen, w->reopen, (size_t)n * sizeof w->reopen[0]);
    w->nreopen = 0;
    take(w);
    pthread_mutex_unlock(&w->mu);
    size_t from = 0;
    for (int i = 0; i < n && !atomic_load(&w->abandon); i++) {
        write_records(w, &w->cur, from, w->taken_reopen[i].mark);
        do_open(w, &w->taken_reopen[i]);
        from = w->taken_reopen[i].mark;
    }
    write_records(w, &w->cur, from, w->cur.len);
    pthread_mutex_lock(&w->mu);
    w->cur.len = w->cur.n = 0;
    return 1;
}

static void run(struct alog_writer *w)
{
    int64_t linger_until = 0;
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->abandon)) {
        if (w->nreopen) {
            work(w);
            continue;
        }
        if (!w->q.len) {
            if (w->stop)
                break;
            w->idle = 1;
            pthread_cond_wait(&w->wake, &w->mu);
            w->idle = 0;
            linger_until = mono_ms() + FLUSH_MS;
            continue;
        }
        if (!w->stop && w->q.len < BATCH_BYTES && mono_ms() < linger_until) {
            struct timespec ts = abs_ms(linger_until);
            w->lingering = 1;
            pthread_cond_timedwait(&w->wake, &w->mu, &ts);
            w->lingering = 0;
            continue;
        }
        work(w);
    }
    if (!atomic_load(&w->abandon)) {
        pthread_mutex_unlock(&w->mu);
        end_fragment(w);
        pthread_mutex_lock(&w->mu);
    }
    w->ended = 1;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
}

static void on_kick(int sig) { (void)sig; }

static void *writer_main(void *arg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, KICK_SIG);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    run(arg);
    return NULL;
}

static struct alog_writer *new_writer(size_t max_queued)
{
    struct alog_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (!(w->out = malloc(OUT_CAP + 1))) {
        free(w);
        return NULL;
    }
    w->max = max_queued;
    w->fd = -1;
    atomic_init(&w->abandon, 0);
    atomic_init(&w->move_seq, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, &ca);
    pthread_cond_init(&w->done, &ca);
    pthread_condattr_destroy(&ca);
    return w;
}

static void free_writer(struct alog_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    alog_buf_free(&w->q);
    alog_buf_free(&w->cur);
    free(w->out);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

struct alog_writer *alog_writer_start(size_t max_queued)
{
    /* KICK_SIG, without SA_RESTART: a stuck open() or write() of the thread returns EINTR */
    struct sigaction sa = {.sa_handler = on_kick};
    sigemptyset(&sa.sa_mask);
    if (sigaction(KICK_SIG, &sa, NULL))
        return NULL;
    struct alog_writer *w = new_writer(max_queued);
    if (!w)
        return NULL;
    int e = pthread_create(&w->th, NULL, writer_main, w);
    if (e) {
        free_writer(w);
        errno = e;
        return NULL;
    }
    return w;
}

struct alog_writer *alog_writer_start_manual(size_t max_queued, alog_write_fn *wr, void *ctx)
{
    struct alog_writer *w = new_writer(max_queued);
    if (w) {
        w->manual = 1;
        w->wr = wr;
        w->wctx = ctx;
    }
    return w;
}

void alog_writer_pump(struct alog_writer *w)
{
    pthread_mutex_lock(&w->mu);
    while (work(w))
        ;
    pthread_mutex_unlock(&w->mu);
}

void alog_writer_reopen(struct alog_writer *w, const char *path, int announce)
{
    pthread_mutex_lock(&w->mu);
    struct reopen *r = &w->reopen[NREOPEN - 1]; /* all taken: the last one moves to the new path */
    if (w->nreopen < NREOPEN) {
        r = &w->reopen[w->nreopen++];
        r->mark = w->q.len;
        r->announce = 0;
    }
    r->announce |= announce;
    r->seq = ++w->open_asked;
    snprintf(r->path, sizeof r->path, "%s", path);
    if (strcmp(w->want, path)) { /* a move: the file before gets nothing more, however stuck */
        snprintf(w->want, sizeof w->want, "%s", path);
        atomic_store(&w->move_seq, r->seq);
    }
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

int alog_writer_opened(struct alog_writer *w, int ms, char *err, size_t errlen)
{
    if (w->manual)
        alog_writer_pump(w);
    int64_t deadline = mono_ms() + ms;
    struct timespec ts = abs_ms(deadline);
    pthread_mutex_lock(&w->mu);
    while (w->open_done != w->open_asked && !w->ended && mono_ms() < deadline)
        pthread_cond_timedwait(&w->done, &w->mu, &ts);
    int r = w->open_done != w->open_asked ? 1 : w->open_failed ? -1 : 0;
    if (r < 0)
        snprintf(err, errlen, "%s", w->open_err);
    if (r > 0)
        w->quiet_late = 1;
    pthread_mutex_unlock(&w->mu);
    return r;
}

uint64_t alog_writer_put(struct alog_writer *w, const struct alog_fields *f)
{
    uint64_t dropped = 0;
    pthread_mutex_lock(&w->mu);
    w->offered++;
    if (!w->q.len && w->q.cap > SHRINK_CAP)
        alog_buf_free(&w->q); /* a burst is over: give its memory back */
    if (w->q.len >= w->max || alog_append(&w->q, f))
        dropped = ++w->dropped;
    else if (w->idle || (w->lingering && w->q.len >= BATCH_BYTES))
        pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    return dropped;
}

void alog_writer_counts(struct alog_writer *w, struct alog_counts *c)
{
    pthread_mutex_lock(&w->mu);
    *c = (struct alog_counts){.lines = w->lines, .dropped = w->dropped, .errors = w->errors, .offered = w->offered,
                              .queued = w->q.n + w->taken - w->settled, .held = (uint64_t)w->held};
    pthread_mutex_unlock(&w->mu);
}

size_t alog_writer_bytes(struct alog_writer *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->q.cap + w->cur.cap;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void alog_writer_stop(struct alog_writer *w, int ms, struct alog_counts *c)
{
    if (w->manual) { /* what the thread would do in its time: write what is queued */
        alog_writer_pump(w);
        end_fragment(w);
        w->ended = 1;
    }
    int64_t deadline = mono_ms() + ms;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    struct timespec ts = abs_ms(deadline);
    while (!w->ended && mono_ms() < deadline)
        pthread_cond_timedwait(&w->done, &w->mu, &ts);
    if (!w->ended) { /* stuck in a write or an open: interrupt it, again until it ends (or 1 s) */
        atomic_store(&w->abandon, 1);
        pthread_cond_signal(&w->wake);
        deadline = mono_ms() + 1000;
        while (!w->ended && mono_ms() < deadline) {
            pthread_kill(w->th, KICK_SIG);
            ts = abs_ms(mono_ms() + 10);
            pthread_cond_timedwait(&w->done, &w->mu, &ts);
        }
    }
    int ended = w->ended;
    uint64_t left = w->q.n + w->taken - w->settled;
    w->dropped += left;
    if (c)
        *c = (struct alog_counts){.lines = w->lines, .dropped = w->dropped, .errors = w->errors,
                                  .offered = w->offered};
    pthread_mutex_unlock(&w->mu);
    if (!ended) {
        log_error(NULL, "access log: its thread is stuck (in an open or a write: a hung mount?): left behind, "
                  "with %llu lines not written", (unsigned long long)left);
        pthread_detach(w->th);
        return;
    }
    if (!w->manual)
        pthread_join(w->th, NULL);
    if (left)
        log_warn(NULL, "access log: %llu lines not written at exit (dropped)", (unsigned long long)left);
    free_writer(w);
}

/* log.h: levelled logging; lines carry the connection they concern. Once log_start has run, a
 * line is appended to a bounded in-memory queue that a thread of its own writes to stderr: the
 * loop never waits for a slow reader of stderr (a stalled journald, a full pipe), and what does
 * not fit is dropped and counted. */
#ifndef LOG_H
#define LOG_H

#include <stdarg.h>

#define LOG_LEVELS(X) X(ERROR, "error") X(WARN, "warn") X(INFO, "info") X(DEBUG, "debug")
#define LOG_ENUM(e, s) LOG_##e,
enum log_level { LOG_LEVELS(LOG_ENUM) LOG_NLEVELS };
#undef LOG_ENUM

#include <stddef.h>
#include <stdint.h>

extern int log_level;
/* Where lines go instead of stderr when set (tests/sim keeps them in its trace). */
extern void (*log_sink)(const char *line, size_t len);

/* Parse "error", "warn", "info" or "debug"; -1 if unknown. */
int log_level_parse(const char *s);
/* The length of the well-formed UTF-8 sequence of 2 to 4 bytes s starts with (n bytes left), or 0:
 * what the log and the access log keep of a client's bytes above 0x7f. */
size_t log_utf8_seq(const unsigned char *s, size_t n);
/* s's n bytes made printable in place: well-formed UTF-8 kept, every other byte below 0x20 or
 * from 0x7f on made '?' (the log's lines, a client's user name). */
void log_printable(char *s, size_t n);
const char *log_level_name(int level);

/* Write one line: time, level, prefix (may be NULL) and the message. Thread-safe, and never
 * waits on the output while the log thread runs: the line is queued, or dropped and counted if
 * the queue has no room for it. Before log_start and after log_stop it is written at once; with
 * log_sink set it goes to log_sink, at once, on the caller's thread. */
void log_write(int level, const char *prefix, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The queue's size, in bytes, in production. */
#define LOG_QUEUE_BYTES (1u << 20)

/* Start the log thread writing to fd (STDERR_FILENO in production) through a queue of cap
 * bytes. 0, or -1 (no thread: lines are written at once, as before log_start). */
int log_start(int fd, size_t cap);
/* Stop it: what is queued is written first, for at most timeout_ms. 0 once the thread has ended
 * (lines are written at once again), -1 if it is still blocked writing (a reader that never
 * reads): lines still go to the queue, never to the stuck fd, and a later call may finish. */
int log_stop(int timeout_ms);
/* tests/sim: the queue of cap bytes without a thread. Lines queue (or are dropped) as under
 * log_start, and go out only when log_pump gives them to out, one whole line a call, without
 * their <N>; log_sink is not used meanwhile. log_stop gives out what is queued and ends it.
 * 0, or -1. */
int log_start_manual(size_t cap, void (*out)(const char *line, size_t len));
/* Manual mode: give out whole queued lines, up to max bytes of them, then, once the queue is
 * empty, the "N log lines dropped" line if lines were dropped since it was last said. The
 * queued lines given out. */
size_t log_pump(size_t max);
struct log_counts {
    uint64_t offered;    /* lines that came to the queue (dropped ones included) */
    uint64_t written;    /* lines written from it */
    uint64_t dropped;    /* lines that did not fit, or that the output failed */
    uint64_t queued;     /* lines in the queue now */
    uint64_t queued_bytes;
};
void log_counts(struct log_counts *c);
/* Lines dropped so far: the queue had no room, or the output failed. */
uint64_t log_dropped_total(void);
/* Read JOURNAL_STREAM (systemd sets it when stderr is the journal's stream): when set, each line
 * written starts with its syslog priority as <N> (error <3>, warn <4>, info <6>, debug <7>), as
 * sd-daemon(3) describes, so the journal files it at that priority. Lines to log_sink never
 * carry it. Returns whether it is on. */
int log_journal_detect(void);

/* The macros skip formatting entirely when the level is off. */
#define log_at(lvl, prefix, ...)                       \
    do {                                               \
        if ((lvl) <= log_level)                        \
            log_write((lvl), (prefix), __VA_ARGS__);   \
    } while (0)
#define log_error(p, ...) log_at(LOG_ERROR, p, __VA_ARGS__)
#define log_warn(p, ...) log_at(LOG_WARN, p, __VA_ARGS__)
#define log_info(p, ...) log_at(LOG_INFO, p, __VA_ARGS__)
#define log_debug(p, ...) log_at(LOG_DEBUG, p, __VA_ARGS__)

/* A line that input from outside can make often (a refusal, a message nobody asked for): at
 * most one a second per struct log_limit, the next one saying how many were not logged. */
struct log_limit {
    int64_t logged_ms;   /* when one was last written; 0 = never */
    uint64_t quiet;      /* not written since */
};
/* Log at lvl through l (now_ms: the caller's clock): 1 if the line was written, 0 if counted. */
int log_limited(struct log_limit *l, int64_t now_ms, int lvl, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int log_vlimited(struct log_limit *l, int64_t now_ms, int lvl, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

#endif

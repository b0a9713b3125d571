/* log.h: levelled logging; lines carry the connection they concern. */
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
const char *log_level_name(int level);

/* Write one line: time, level, prefix (may be NULL) and the message. Thread-safe. */
void log_write(int level, const char *prefix, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

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

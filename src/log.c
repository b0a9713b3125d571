/* log.c: levelled logging to stderr, one write per line. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_INFO;
void (*log_sink)(const char *line, size_t len);

#define LOG_NAME(e, s) s,
static const char *const names[] = {LOG_LEVELS(LOG_NAME)};
#undef LOG_NAME

int log_level_parse(const char *s)
{
    for (int i = 0; i < LOG_NLEVELS; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

const char *log_level_name(int level) { return level >= 0 && level < LOG_NLEVELS ? names[level] : "?"; }

void log_write(int level, const char *prefix, const char *fmt, ...)
{
    char line[1024];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02d %02d:%02d:%02d.%03ld %-5s %s%s", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec / 1000,
                     log_level_name(level), prefix ? prefix : "", prefix ? ": " : "");
    if (n < 0)
        return;
    if ((size_t)n < sizeof line) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (log_sink) {
        log_sink(line, (size_t)n);
        return;
    }
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
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

/* sdnotify.h: the service manager's readiness protocol (sd_notify(3)), without libsystemd. */
#ifndef SDNOTIFY_H
#define SDNOTIFY_H

/* Send STATE ("READY=1", "STATUS=...", fields separated by '\n') as one datagram to the
 * AF_UNIX socket named by $NOTIFY_SOCKET: a path, or an abstract name when it starts with '@'.
 * Never blocks (MSG_DONTWAIT) and never raises SIGPIPE. 1 if sent, 0 if NOTIFY_SOCKET is unset
 * or empty (nothing to do), -1 with errno set if it could not be sent (the caller may log it;
 * the service runs on either way). */
int sdnotify_send(const char *state);

/* As sdnotify_send, the state formatted; cut at 4 KiB, so put READY=1 and the like first. */
int sdnotify_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "RELOADING=1" with MONOTONIC_USEC, the CLOCK_MONOTONIC time in microseconds, as systemd
 * wants it at the start of a reload; READY=1 ends it. Returns as sdnotify_send. */
int sdnotify_reloading(void);

#endif

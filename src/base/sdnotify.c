/* sdnotify.c: readiness, reload and stop sent to the service manager over $NOTIFY_SOCKET. */
#include "sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int sdnotify_send(const char *state)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (!name || !name[0])
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    if (name[0] != '/' && name[0] != '@') { /* vsock: and others: not ours to speak */
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (n >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (name[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract: the name is the bytes after the NUL, no terminator */
    else
        len++;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT, (struct sockaddr *)&sa, len);
    int e = errno;
    close(fd);
    errno = e;
    return w < 0 ? -1 : 1;
}

int sdnotify_printf(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    return sdnotify_send(buf); /* cut at 4 KiB: the fields before the cut still count */
}

int sdnotify_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return sdnotify_printf("RELOADING=1\nMONOTONIC_USEC=%llu",
                           (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

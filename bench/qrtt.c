/* qrtt: one loopback round trip, the physical floor of one extra hop. Two processes, each
 * waiting in epoll as qload and qgate do: this one writes BYTES and waits for them back; a
 * forked echo process waits, reads them and writes them back. Over TCP on 127.0.0.1 (with
 * TCP_NODELAY, as every q connection here), or a Unix socket pair with --unix.
 *
 *   qrtt [--unix] [--count N] [--bytes B]
 *   stdout: qrtt transport=tcp|unix bytes=B count=N p50_us=X p99_us=Y */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net.h"
#include "util.h"

/* Wait for fd to be readable, then read exactly n bytes (as a loop would: one wake-up, then
 * reads until they are in). 0, or -1 when the peer has gone. */
static int wait_read(int ep, int fd, uint8_t *p, size_t n)
{
    size_t have = 0;
    while (have < n) {
        struct epoll_event ev;
        if (epoll_wait(ep, &ev, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (;;) {
            ssize_t r = read(fd, p + have, n - have);
            if (r > 0) {
                have += (size_t)r;
                if (have == n)
                    break;
            } else if (r < 0 && errno == EAGAIN) {
                break;
            } else if (r < 0 && errno == EINTR) {
                continue;
            } else {
                return -1;
            }
        }
    }
    return 0;
}

static int watch(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
        return -1;
    return ep;
}

static void echo(int fd, size_t bytes)
{
    uint8_t *buf = malloc(bytes);
    int ep = watch(fd);
    while (buf && ep >= 0 && wait_read(ep, fd, buf, bytes) == 0 && net_write_all(fd, buf, bytes) == 0)
        ;
    _exit(0);
}

/* A connected pair: a and b, non-blocking, over TCP loopback or a Unix socket pair. */
static int pair(int use_unix, int fds[2])
{
    if (use_unix)
        return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds);
    int bound, l = net_listen_tcp("127.0.0.1", 0, 1, 0, &bound);
    if (l < 0)
        return -1;
    fds[0] = net_connect_tcp("127.0.0.1", bound, 0);
    fds[1] = fds[0] >= 0 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
    close(l);
    if (fds[1] < 0)
        return -1;
    net_tune(fds[1]);
    for (int i = 0; i < 2; i++)
        if (fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK))
            return -1;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: qrtt [--unix] [--count N] [--bytes B]\n"
                    "  one loopback round trip between two epoll processes: p50 and p99 of N\n"
                    "  (default 20000, after 1000 not counted) round trips of B bytes (default 32).\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long count = 20000, bytes = 32;
    int use_unix = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--unix"))
            use_unix = 1;
        else if (!strcmp(argv[i], "--count") && i + 1 < argc && !arg_long(argv[i + 1], &count) && count > 0)
            i++;
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc && !arg_long(argv[i + 1], &bytes) && bytes > 0 &&
                 bytes <= 1 << 20)
            i++;
        else
            usage();
    }
    int fds[2];
    if (pair(use_unix, fds)) {
        perror("qrtt: a connected pair");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("qrtt: fork");
        return 1;
    }
    if (child == 0) {
        close(fds[0]);
        echo(fds[1], (size_t)bytes);
    }
    close(fds[1]);
    int ep = watch(fds[0]);
    uint8_t *buf = calloc(1, (size_t)bytes);
    int64_t *lat = malloc((size_t)count * sizeof *lat);
    if (ep < 0 || !buf || !lat)
        return 1;
    int rc = 0;
    for (long i = -1000; i < count && rc == 0; i++) {
        int64_t t0 = mono_ns();
        rc = net_write_all(fds[0], buf, (size_t)bytes) || wait_read(ep, fds[0], buf, (size_t)bytes) ? 1 : 0;
        if (i >= 0)
            lat[i] = mono_ns() - t0;
    }
    close(fds[0]);
    close(ep);
    free(buf);
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    if (rc) {
        free(lat);
        fprintf(stderr, "qrtt: the echo process went away\n");
        return 1;
    }
    double p50, p99, mx;
    lat_summary(lat, (size_t)count, 0, &p50, &p99, &mx);
    free(lat);
    printf("qrtt transport=%s bytes=%ld count=%ld p50_us=%.1f p99_us=%.1f\n", use_unix ? "unix" : "tcp", bytes,
           count, p50, p99);
    return 0;
}

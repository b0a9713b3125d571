/* qscrape.c: hostile and hurried scrapers of qgate's metrics page, for tests. One process,
 * blocking sockets, each connection in turn (reset) or all at once (burst, idle). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: qscrape -g host:port --reset N [--seed S]\n"
            "       qscrape -g host:port --burst N\n"
            "       qscrape -g host:port --idle N [--unread] --then-scrape\n"
            "  --reset N: N scrapes one after another, each sending GET /metrics and then resetting\n"
            "    (SO_LINGER 0) at a random point: before, during or after the page (or part of it)\n"
            "    comes; prints \"qscrape reset=N\".\n"
            "  --burst N: N connections opened at once, each sends GET /metrics and reads its\n"
            "    answer to the end; prints \"qscrape burst=N ok=A unavailable=B other=C failed=D\" (ok:\n"
            "    200, unavailable: 503, other: another status, failed: no status line).\n"
            "  --idle N --then-scrape: N connections opened that send nothing, then one scrape:\n"
            "    prints \"qscrape idle=N scrape=STATUS\" (the status line's code, 0 if none).\n"
            "    --unread: each of the N sends GET /metrics and never reads (a receive buffer as\n"
            "    small as the kernel allows), eight from each source address 127.0.0.2, .3, ...\n"
            "    (under the per-address limit); after its request, and before the scrape, it waits\n"
            "    for a line on stdin (a test's go: when the gateway has begun every page); each line\n"
            "    \"read\" before it makes each of the N read 256 KiB of its page once.\n"
            "  Exit 0 unless a connection could not be made, 2 on bad usage.\n");
    exit(2);
}

static struct sockaddr_in target;

/* A connection to the target; from 127.0.0.SRC if src, with the smallest receive buffer if tiny. */
static int open_from(int src, int tiny)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    if (tiny && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof one)) {
        close(fd);
        return -1;
    }
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl((uint32_t)(0x7f000000 | (src & 255)))};
    if (src && bind(fd, (struct sockaddr *)&from, sizeof from)) {
        close(fd);
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&target, sizeof target)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int open_conn(void) { return open_from(0, 0); }

static const char get[] = "GET /metrics HTTP/1.1\r\nHost: qgate\r\n\r\n";

static void reset(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* Read the whole answer (up to EOF, or 10 s); its status code, 0 if none came. */
static int read_status(int fd)
{
    char buf[65536];
    size_t got = 0;
    int code = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t n = read(fd, buf + (got < 64 ? got : 0), got < 64 ? sizeof buf - got : sizeof buf);
        if (n <= 0)
            break;
        if (got < 64) {
            got += (size_t)n;
            if (got >= 12 && !code && !memcmp(buf, "HTTP/1.1 ", 9))
                code = atoi(buf + 9);
        }
    }
    return code;
}

int main(int argc, char **argv)
{
    const char *gw = NULL;
    long reset_n = -1, burst_n = -1, idle_n = -1, seed = 1;
    int then = 0, unread = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-g") && more)
            gw = argv[++i];
        else if (!strcmp(a, "--reset") && more && !arg_long(argv[i + 1], &reset_n))
            i++;
        else if (!strcmp(a, "--burst") && more && !arg_long(argv[i + 1], &burst_n))
            i++;
        else if (!strcmp(a, "--idle") && more && !arg_long(argv[i + 1], &idle_n))
            i++;
        else if (!strcmp(a, "--seed") && more && !arg_long(argv[i + 1], &seed))
            i++;
        else if (!strcmp(a, "--then-scrape"))
            then = 1;
        else if (!strcmp(a, "--unread"))
            unread = 1;
        else
            usage();
    }
    const char *colon = gw ? strrchr(gw, ':') : NULL;
    if (!colon || (reset_n < 0) + (burst_n < 0) + (idle_n < 0) != 2)
        usage();
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - gw), gw);
    target.sin_family = AF_INET;
    target.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &target.sin_addr) != 1)
        usage();
    nofile_raise(RLIM_INFINITY, "qscrape");
    uint64_t rng = (uint64_t)seed * 0x9e3779b97f4a7c15ULL + 1;
    if (reset_n >= 0) {
        for (long i = 0; i < reset_n; i++) {
            int fd = open_conn();
            if (fd < 0) {
                fprintf(stderr, "qscrape: connect %ld: %s\n", i, strerror(errno));
                return 1;
            }
            int how = (int)(xorshift64(&rng) % 5);
            if (how > 0 && send(fd, get, sizeof get - 1, MSG_NOSIGNAL) < 0) {
                reset(fd);
                continue;
            }
            if (how == 2) { /* a moment later: the page is being made, or on its way */
                struct timespec ts = {0, (long)(xorshift64(&rng) % 500) * 1000};
                nanosleep(&ts, NULL);
            } else if (how == 3) { /* part of the page read */
                char b[512];
                ssize_t n = read(fd, b, sizeof b);
                (void)n;
            } else if (how == 4) { /* half a request: reset in the middle of the head */
                reset(fd);
                fd = open_conn();
                if (fd >= 0 && send(fd, get, 10, MSG_NOSIGNAL) < 0) {
                }
            }
            if (fd >= 0)
                reset(fd);
        }
        printf("qscrape reset=%ld\n", reset_n);
        return 0;
    }
    if (burst_n >= 0) {
        int *fds = calloc((size_t)burst_n + 1, sizeof *fds);
        long ok = 0, unavailable = 0, other = 0, failed = 0;
        for (long i = 0; i < burst_n; i++) {
            fds[i] = open_conn();
            if (fds[i] >= 0 && send(fds[i], get, sizeof get - 1, MSG_NOSIGNAL) < 0) {
                close(fds[i]);
                fds[i] = -1;
            }
        }
        for (long i = 0; i < burst_n; i++) {
            int code = fds[i] >= 0 ? read_status(fds[i]) : 0;
            if (fds[i] >= 0)
                close(fds[i]);
            ok += code == 200;
            unavailable += code == 503;
            other += code && code != 200 && code != 503;
            failed += !code;
        }
        printf("qscrape burst=%ld ok=%ld unavailable=%ld other=%ld failed=%ld\n", burst_n, ok, unavailable, other,
               failed);
        free(fds);
        return 0;
    }
    int *fds = calloc((size_t)idle_n + 1, sizeof *fds);
    for (long i = 0; i < idle_n; i++)
        if ((fds[i] = unread ? open_from(2 + (int)(i / 8), 1) : open_conn()) < 0 ||
            (unread && send(fds[i], get, sizeof get - 1, MSG_NOSIGNAL) < 0)) {
            fprintf(stderr, "qscrape: connect %ld: %s\n", i, strerror(errno));
            return 1;
        }
    if (unread) {
        printf("qscrape unread=%ld: asked\n", idle_n);
        fflush(stdout);
        char line[16];
        /* each takes 1 MiB, once, all at the same time: one after another took 3 s for the 32 on
         * a quiet machine (each waits for the gateway's next write), and on a loaded one (CI,
         * 2026-12-07) longer than the gateway keeps a page (10 s), so the last were closed before
         * test_metrics saw them watched again */
        size_t *got = calloc((size_t)idle_n + 1, sizeof *got);
        struct pollfd *p = calloc((size_t)idle_n + 1, sizeof *p);
        while (fgets(line, sizeof line, stdin) && !strncmp(line, "read", 4)) {
            for (long i = 0; i < idle_n; i++)
                got[i] = 0;
            for (int rounds = 0; rounds < 10000; rounds++) {
                nfds_t n = 0;
                for (long i = 0; i < idle_n; i++) {
                    int more = got[i] < 1024 * 1024;
                    p[i] = (struct pollfd){.fd = more ? fds[i] : -1, .events = POLLIN};
                    n += (nfds_t)more;
                }
                if (!n || poll(p, (nfds_t)idle_n, 10000) <= 0)
                    break;
                for (long i = 0; i < idle_n; i++) {
                    char b[16384];
                    if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                    ssize_t r = read(fds[i], b, sizeof b);
                    got[i] = r > 0 ? got[i] + (size_t)r : 1024 * 1024; /* (gone: done with it) */
                }
            }
            printf("qscrape unread=%ld: read\n", idle_n);
            fflush(stdout);
        }
        free(got);
        free(p);
    }
    int code = 0;
    if (then) {
        int fd = open_conn();
        if (fd >= 0 && send(fd, get, sizeof get - 1, MSG_NOSIGNAL) > 0)
            code = read_status(fd);
        if (fd >= 0)
            close(fd);
    }
    printf("qscrape idle=%ld scrape=%d\n", idle_n, code);
    for (long i = 0; i < idle_n; i++)
        close(fds[i]);
    free(fds);
    return 0;
}

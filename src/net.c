/* net.c: sockets: address parsing, TCP and q's abstract Unix socket, both roles. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int net_parse_hostport(const char *s, const char *def_host, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(s, ':');
    const char *ps = colon ? colon + 1 : s;
    size_t hl = colon ? (size_t)(colon - s) : 0;
    if (!*ps)
        return -1;
    char *end;
    long p = strtol(ps, &end, 10);
    if (*end || p < 0 || p > 65535)
        return -1;
    if (hl == 0) {
        if (strlen(def_host) >= hostlen)
            return -1;
        strcpy(host, def_host);
    } else {
        if (hl >= hostlen)
            return -1;
        memcpy(host, s, hl);
        host[hl] = 0;
    }
    *port = (int)p;
    return 0;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int net_resolve(const char *host, int port, int passive, struct addrinfo **out, const char **why)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    const char *h = host && *host && strcmp(host, "*") ? host : NULL;
    if (h && !strcmp(h, "localhost"))
        h = "127.0.0.1";
    int rc = getaddrinfo(h, ps, &hints, out);
    if (rc) {
        if (why)
            *why = gai_strerror(rc);
        errno = EHOSTUNREACH;
        return -1;
    }
    return 0;
}

/* Close fd, keeping the errno that made it useless. */
static void close_keep_errno(int fd)
{
    int e = errno;
    close(fd);
    errno = e;
}

/* A socket for the first of host:port's addresses that use() accepts (0), or -1 with errno
 * from the last attempt. */
static int first_socket(const char *host, int port, int passive, int flags,
                        int (*use)(int fd, const struct addrinfo *a, void *arg), void *arg)
{
    struct addrinfo *ai;
    if (net_resolve(host, port, passive, &ai, NULL))
        return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | flags, 0);
        if (fd < 0)
            continue;
        if (use(fd, a, arg) == 0)
            break;
        close_keep_errno(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static int use_listen(int fd, const struct addrinfo *a, void *arg)
{
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    return bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, *(int *)arg) == 0 ? 0 : -1;
}

int net_listen_tcp(const char *host, int port, int backlog, int nonblock, int *bound)
{
    int fd = first_socket(host, port, 1, 0, use_listen, &backlog);
    if (fd < 0)
        return -1;
    if (nonblock && set_nonblock(fd)) {
        close(fd);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    if (bound)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* The abstract address of q's Unix socket for port; length covers NUL + name only. */
static int uds_addr(int port, struct sockaddr_un *sa, socklen_t *len)
{
    const char *dir = getenv("QUDSPATH");
    if (dir && !*dir)
        return -2;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "%s/kx.%d", dir ? dir : "/tmp", port);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path - 1)
        return -1;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return 0;
}

int net_listen_uds(int port, int backlog, int nonblock)
{
    struct sockaddr_un sa;
    socklen_t len;
    int rc = uds_addr(port, &sa, &len);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, len) || listen(fd, backlog)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int net_connect_uds(int port, int nonblock)
{
    struct sockaddr_un sa;
    socklen_t len;
    int rc = uds_addr(port, &sa, &len);
    if (rc)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, len) && !(nonblock && errno == EINPROGRESS)) {
        close_keep_errno(fd);
        return -1;
    }
    return fd;
}

static int use_connect(int fd, const struct addrinfo *a, void *arg)
{
    int nonblock = *(int *)arg;
    net_tune(fd);
    return connect(fd, a->ai_addr, a->ai_addrlen) == 0 || (nonblock && errno == EINPROGRESS) ? 0 : -1;
}

int net_connect_tcp(const char *host, int port, int nonblock)
{
    return first_socket(host, port, 0, nonblock ? SOCK_NONBLOCK : 0, use_connect, &nonblock);
}

void net_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

int net_peer_is_local(int fd)
{
    struct sockaddr_storage peer, self;
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) || getsockname(fd, (struct sockaddr *)&self, &sl))
        return 1;
    if (peer.ss_family == AF_UNIX)
        return 1;
    if (peer.ss_family == AF_INET) {
        struct sockaddr_in *p = (struct sockaddr_in *)&peer, *s = (struct sockaddr_in *)&self;
        return (ntohl(p->sin_addr.s_addr) >> 24) == 127 || p->sin_addr.s_addr == s->sin_addr.s_addr;
    }
    if (peer.ss_family == AF_INET6) {
        struct sockaddr_in6 *p = (struct sockaddr_in6 *)&peer, *s = (struct sockaddr_in6 *)&self;
        return IN6_IS_ADDR_LOOPBACK(&p->sin6_addr) ||
               !memcmp(&p->sin6_addr, &s->sin6_addr, sizeof p->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&p->sin6_addr) && p->sin6_addr.s6_addr[12] == 127);
    }
    return 0;
}

const char *net_peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (getpeername(fd, (struct sockaddr *)&ss, &sl)) {
        snprintf(buf, len, "?");
    } else if (ss.ss_family == AF_UNIX) {
        snprintf(buf, len, "unix");
    } else if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%d", ip, ntohs(a->sin_port));
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%d", ip, ntohs(a->sin6_port));
    }
    return buf;
}

int net_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w > 0) {
            c += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, -1);
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            return -1;
        }
    }
    return 0;
}

int net_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r > 0) {
            c += r;
            n -= (size_t)r;
        } else if (r == 0) {
            errno = 0;
            return -1;
        } else if (errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            poll(&pf, 1, -1);
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

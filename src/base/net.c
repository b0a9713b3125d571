/* net.c: sockets: address parsing, TCP and q's abstract Unix socket, both roles. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

struct listen_args {
    int backlog, flags;
};

static int use_listen(int fd, const struct addrinfo *a, void *arg)
{
    const struct listen_args *la = arg;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* before bind: the kernel admits a socket to a port's group only if every member set it */
    if ((la->flags & NET_REUSEPORT) && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
        return -1;
    return bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, la->backlog) == 0 ? 0 : -1;
}

int net_listen_tcp(const char *host, int port, int backlog, int flags, int *bound)
{
    struct listen_args la = {.backlog = backlog, .flags = flags};
    int fd = first_socket(host, port, 1, 0, use_listen, &la);
    if (fd < 0)
        return -1;
    if ((flags & NET_NONBLOCK) && set_nonblock(fd)) {
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

static int path_addr(const char *path, struct sockaddr_un *sa, socklen_t *len)
{
    size_t n = strlen(path);
    if (!n || n >= sizeof sa->sun_path)
        return -1;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

int net_uds_addr(const struct net_target *t, struct sockaddr_un *sa, socklen_t *len)
{
    return t->kind == NET_UNIX_PATH ? path_addr(t->host, sa, len) : uds_addr(t->port, sa, len) ? -1 : 0;
}

const char *net_uds_name(const struct sockaddr_un *sa, socklen_t len, char *buf, size_t buflen)
{
    size_t n = len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
    if (n && !sa->sun_path[0]) /* abstract: "@" then the name */
        snprintf(buf, buflen, "@%.*s", (int)(n - 1), sa->sun_path + 1);
    else
        snprintf(buf, buflen, "%.*s", (int)strnlen(sa->sun_path, n), sa->sun_path);
    return buf;
}

int net_parse_target(const char *s, const char *def_host, struct net_target *t)
{
    memset(t, 0, sizeof *t);
    if (strncmp(s, "unix://", 7)) {
        t->kind = NET_TCP;
        return net_parse_hostport(s, def_host, t->host, sizeof t->host, &t->port) || t->port == 0 ? -1 : 0;
    }
    s += 7;
    if (*s == '/') {
        struct sockaddr_un sa;
        socklen_t len;
        t->kind = NET_UNIX_PATH;
        snprintf(t->host, sizeof t->host, "%s", s);
        return strlen(s) < sizeof t->host && path_addr(s, &sa, &len) == 0 ? 0 : -1;
    }
    char *end;
    long p = strtol(s, &end, 10);
    t->kind = NET_UNIX_PORT;
    t->port = (int)p;
    return *s >= '0' && *s <= '9' && !*end && p > 0 && p <= 65535 ? 0 : -1;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
    if (!a || !b || a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return a->sa_family == AF_INET6 && !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                                               &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

int net_addr_is_local(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        if ((a >> 24) == 127 || a == INADDR_ANY)
            return 1;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127))
            return 1;
    } else {
        return 0;
    }
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs))
        return 0;
    int local = 0;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
        local = same_addr(i->ifa_addr, sa);
    freeifaddrs(ifs);
    return local;
}

static int listen_un(const struct sockaddr_un *sa, socklen_t len, int backlog, int nonblock)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (const struct sockaddr *)sa, len) || listen(fd, backlog)) {
        close_keep_errno(fd);
        return -1;
    }
    return fd;
}

int net_listen_uds(int port, int backlog, int nonblock)
{
    struct sockaddr_un sa;
    socklen_t len;
    int rc = uds_addr(port, &sa, &len);
    return rc ? rc : listen_un(&sa, len, backlog, nonblock);
}

int net_listen_uds_path(const char *path, int backlog, int nonblock)
{
    struct sockaddr_un sa;
    socklen_t len;
    if (path_addr(path, &sa, &len))
        return -1;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path); /* a socket left by an earlier run */
    return listen_un(&sa, len, backlog, nonblock);
}

int net_connect_addr(const void *addr, socklen_t len, int nonblock)
{
    const struct sockaddr *sa = addr;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0)
        return -1;
    if (sa->sa_family != AF_UNIX)
        net_tune(fd);
    if (connect(fd, sa, len) && !(nonblock && errno == EINPROGRESS)) {
        close_keep_errno(fd);
        return -1;
    }
    return fd;
}

int net_connect_uds(int port, int nonblock)
{
    struct sockaddr_un sa;
    socklen_t len;
    return uds_addr(port, &sa, &len) ? -1 : net_connect_addr(&sa, len, nonblock);
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

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

const char *net_listen_why(const char *host, int port, int e)
{
    struct addrinfo *ai;
    const char *why = NULL;
    if (net_resolve(host, port, 1, &ai, &why))
        return why;
    freeaddrinfo(ai);
    return strerror(e);
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
        if (a == INADDR_LOOPBACK || a == INADDR_ANY) /* (127.0.0.2 is an address of its own, which */
            return 1;                                /* another process may listen on) */
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        static const uint8_t lo4[4] = {127, 0, 0, 1};
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) ||
            (IN6_IS_ADDR_V4MAPPED(a) && !memcmp(a->s6_addr + 12, lo4, 4)))
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

static int secs_up(int64_t ms) { return ms <= 0 ? 1 : (int)((ms + 999) / 1000); }

int net_keepalive(int fd, const struct net_keepalive *ka)
{
    int dom = 0, on = ka->idle_ms > 0;
    socklen_t dl = sizeof dom;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl))
        return -1;
    if (dom != AF_INET && dom != AF_INET6)
        return 0;
    int idle = secs_up(ka->idle_ms), intvl = secs_up(ka->interval_ms), cnt = ka->count;
    unsigned ut = ka->user_timeout_ms > 0 ? (unsigned)ka->user_timeout_ms : 0;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut))
        return -1;
    if (on && (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) ||
               setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) ||
               setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt)))
        return -1;
    return 0;
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

const char *net_addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_UNIX) {
        snprintf(buf, len, "unix");
    } else if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%d", ip, ntohs(a->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%d", ip, ntohs(a->sin6_port));
    } else {
        snprintf(buf, len, "?");
    }
    return buf;
}

const char *net_peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl)) {
        snprintf(buf, len, "?");
        return buf;
    }
    return net_addr_name((struct sockaddr *)&ss, buf, len);
}

/* ---- address lists ---------------------------------------------------------------------------- */

/* An item of a list parsed: "unix", "loopback", or an address with its prefix length. */
struct net_item {
    int kind; /* 1 unix, 2 loopback, 3 an IPv4 range, 4 an IPv6 range */
    uint8_t a[16];
    int bits;
};

static int item_parse(const char *s, struct net_item *it)
{
    if (!strcmp(s, "unix")) {
        it->kind = 1;
        return 0;
    }
    if (!strcmp(s, "loopback")) {
        it->kind = 2;
        return 0;
    }
    char a[INET6_ADDRSTRLEN + 8];
    if (strlen(s) >= sizeof a)
        return -1;
    snprintf(a, sizeof a, "%s", s);
    char *slash = strchr(a, '/');
    int bits = -1;
    if (slash) {
        char *end;
        *slash = 0;
        long b = strtol(slash + 1, &end, 10);
        if (!slash[1] || *end || b < 0 || b > 128)
            return -1;
        bits = (int)b;
    }
    if (inet_pton(AF_INET, a, it->a) == 1) {
        if (bits > 32)
            return -1;
        it->kind = 3;
        it->bits = bits < 0 ? 32 : bits;
        return 0;
    }
    if (inet_pton(AF_INET6, a, it->a) == 1) {
        it->kind = 4;
        it->bits = bits < 0 ? 128 : bits;
        return 0;
    }
    return -1;
}

/* The next item of list at *p into buf: 1, or 0 at the end. */
static int item_next(const char **p, char *buf, size_t len)
{
    const char *s = *p;
    while (*s == ',' || *s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return 0;
    size_t n = strcspn(s, ", \t");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), s);
    *p = s + n;
    return 1;
}

int net_addr_list_check(const char *list, char *why, size_t whylen)
{
    char buf[96];
    for (const char *p = list; item_next(&p, buf, sizeof buf);) {
        struct net_item it;
        if (item_parse(buf, &it)) {
            snprintf(why, whylen, "'%s' is not unix, loopback, an address or address/prefix", buf);
            return -1;
        }
    }
    return 0;
}

static int prefix_match(const uint8_t *a, const uint8_t *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole))
        return 0;
    return !rest || ((a[whole] ^ b[whole]) & (0xff << (8 - rest))) == 0;
}

int net_addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

int net_addr_listed(const char *list, const struct sockaddr *sa, socklen_t len, int uds)
{
    (void)len;
    char buf[96];
    uint8_t v4[4], v6[16];
    int has4 = 0, has6 = 0;
    if (!uds && sa->sa_family == AF_INET) {
        memcpy(v4, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        has4 = 1;
    } else if (!uds && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(v6, a, 16);
        has6 = 1;
        if (IN6_IS_ADDR_V4MAPPED(a)) { /* ::ffff:a.b.c.d is a.b.c.d */
            memcpy(v4, a->s6_addr + 12, 4);
            has4 = 1;
        }
    }
    for (const char *p = list; item_next(&p, buf, sizeof buf);) {
        struct net_item it;
        if (item_parse(buf, &it))
            continue;
        if ((it.kind == 1 && (uds || sa->sa_family == AF_UNIX)) || (it.kind == 2 && !uds && net_addr_is_loopback(sa)) ||
            (it.kind == 3 && has4 && prefix_match(v4, it.a, it.bits)) ||
            (it.kind == 4 && has6 && prefix_match(v6, it.a, it.bits)))
            return 1;
    }
    return 0;
}

/* ---- the PROXY protocol ----------------------------------------------------------------------- */

static const uint8_t proxy_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

int net_proxy_looks(const uint8_t *p, size_t n)
{
    return !memcmp(p, "PROXY ", n < 6 ? n : 6) || !memcmp(p, proxy_sig, n < 12 ? n : 12);
}

/* v1: "PROXY TCP4|TCP6 src dst sport dport\r\n" or "PROXY UNKNOWN...\r\n", at most 107 bytes. */
static int proxy_v1(const uint8_t *p, size_t n, struct net_proxy *out, const char **why)
{
    const uint8_t *nl = memchr(p, '\n', n < 107 ? n : 107);
    if (!nl) {
        if (n >= 107) {
            *why = "PROXY v1 header longer than 107 bytes";
            return -1;
        }
        return 0;
    }
    size_t len = (size_t)(nl - p) + 1;
    if (len < 8 || nl[-1] != '\r') {
        *why = "PROXY v1 header not ended by CRLF";
        return -1;
    }
    char line[108], proto[8], src[64], dst[64];
    int sport, dport;
    memcpy(line, p, len - 2);
    line[len - 2] = 0;
    *out = (struct net_proxy){0};
    if (!strncmp(line, "PROXY UNKNOWN", 13)) {
        out->local = 1;
        return (int)len;
    }
    char extra;
    if (sscanf(line, "PROXY %7s %63s %63s %d %d%c", proto, src, dst, &sport, &dport, &extra) != 5 || sport < 0 ||
        sport > 65535 || dport < 0 || dport > 65535) {
        *why = "PROXY v1 header malformed";
        return -1;
    }
    if (!strcmp(proto, "TCP4")) {
        struct sockaddr_in *a = (struct sockaddr_in *)&out->src;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)sport);
        if (inet_pton(AF_INET, src, &a->sin_addr) != 1) {
            *why = "PROXY v1 header: a bad IPv4 address";
            return -1;
        }
        out->srclen = sizeof *a;
    } else if (!strcmp(proto, "TCP6")) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->src;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)sport);
        if (inet_pton(AF_INET6, src, &a->sin6_addr) != 1) {
            *why = "PROXY v1 header: a bad IPv6 address";
            return -1;
        }
        out->srclen = sizeof *a;
    } else {
        *why = "PROXY v1 header: not TCP4, TCP6 or UNKNOWN";
        return -1;
    }
    return (int)len;
}

/* v2: the signature, version and command, family, length, then the addresses (and TLVs). */
static int proxy_v2(const uint8_t *p, size_t n, struct net_proxy *out, const char **why)
{
    if (n < 16)
        return 0;
    if ((p[12] >> 4) != 2) {
        *why = "PROXY v2 header: not version 2";
        return -1;
    }
    size_t len = 16 + (size_t)((p[14] << 8) | p[15]);
    if (len > NET_PROXY_MAX) {
        *why = "PROXY v2 header longer than 2048 bytes";
        return -1;
    }
    if (n < len)
        return 0;
    int cmd = p[12] & 0xf, fam = p[13] >> 4;
    *out = (struct net_proxy){0};
    if (cmd == 0) { /* LOCAL: the proxy's own connection */
        out->local = 1;
        return (int)len;
    }
    if (cmd != 1) {
        *why = "PROXY v2 header: neither LOCAL nor PROXY";
        return -1;
    }
    if (fam == 1 && len >= 16 + 12) {
        struct sockaddr_in *a = (struct sockaddr_in *)&out->src;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, p + 16, 4);
        memcpy(&a->sin_port, p + 24, 2);
        out->srclen = sizeof *a;
    } else if (fam == 2 && len >= 16 + 36) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->src;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, p + 16, 16);
        memcpy(&a->sin6_port, p + 48, 2);
        out->srclen = sizeof *a;
    } else if (fam == 0 || fam == 3) { /* unspecified, or a Unix socket behind the proxy: no address to give */
        out->local = 1;
    } else {
        *why = "PROXY v2 header: an address family it does not carry, or too short for it";
        return -1;
    }
    return (int)len;
}

int net_proxy_parse(const uint8_t *p, size_t n, struct net_proxy *out, const char **why)
{
    if (!n)
        return 0;
    if (!net_proxy_looks(p, n)) {
        *why = "not a PROXY header";
        return -1;
    }
    if (p[0] == 'P')
        return n < 6 ? 0 : proxy_v1(p, n, out, why);
    return n < 12 ? 0 : proxy_v2(p, n, out, why);
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

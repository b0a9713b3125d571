/* net.h: sockets: address parsing, TCP and q's abstract Unix socket, both roles. */
#ifndef NET_H
#define NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Parse "host:port", ":port" or "port" (host defaults to def_host). 0 on success, -1 if the
 * port is not a number in 0..65535 or the host does not fit in hostlen. */
int net_parse_hostport(const char *s, const char *def_host, char *host, size_t hostlen, int *port);

struct addrinfo;
/* Resolve host:port for TCP, IPv4 or IPv6 ("localhost" is 127.0.0.1; empty or "*" with passive:
 * any address). May block: the loop never calls it (worker addresses: job_resolve). 0, or -1
 * with errno EHOSTUNREACH and the resolver's reason in *why (if why). */
int net_resolve(const char *host, int port, int passive, struct addrinfo **out, const char **why);

/* Flags of net_listen_tcp. */
enum { NET_NONBLOCK = 1, NET_REUSEPORT = 2 };
/* Listen on TCP host:port (port 0 picks one). Sets SO_REUSEADDR; with NET_NONBLOCK the socket
 * is non-blocking; with NET_REUSEPORT it sets SO_REUSEPORT before bind, so that other sockets
 * of the same user that set it too may listen on the same address and port (the kernel spreads
 * new connections over them). Returns the fd and stores the bound port in *bound (if bound),
 * or -1 with errno set (EADDRINUSE: the port is held, by a socket without SO_REUSEPORT if
 * this one has it, or by another user). */
int net_listen_tcp(const char *host, int port, int backlog, int flags, int *bound);
/* Why net_listen_tcp(host, port, ...) failed with errno e: the resolver's reason when host does
 * not resolve (e is then EHOSTUNREACH, "No route to host", which says nothing of a bad name),
 * else strerror(e). May block, as net_resolve. */
const char *net_listen_why(const char *host, int port, int e);

/* q's Unix socket for a port: on Linux the abstract name "\0$QUDSPATH/kx.PORT" (QUDSPATH
 * defaults to /tmp; set and empty disables it). Returns the fd, -1 on error, -2 if disabled. */
int net_listen_uds(int port, int backlog, int nonblock);
int net_connect_uds(int port, int nonblock);
/* Connect a new socket to addr (a sockaddr of len bytes: TCP, tuned with net_tune, or Unix).
 * With nonblock the connect may still be in progress. The fd, or -1 with errno set. */
int net_connect_addr(const void *addr, socklen_t len, int nonblock);
/* A listening socket at a filesystem path (a stale socket file there is removed first). */
int net_listen_uds_path(const char *path, int backlog, int nonblock);

/* A worker's address: "host:port" (TCP), "unix://PORT" (q's Unix socket for PORT) or
 * "unix:///path" (a filesystem socket). */
enum net_kind { NET_TCP, NET_UNIX_PORT, NET_UNIX_PATH };
struct net_target {
    int kind;
    char host[256]; /* NET_TCP: the host; NET_UNIX_PATH: the path */
    int port;       /* NET_TCP, NET_UNIX_PORT: 1..65535 */
};
/* 0, or -1 if s is none of the three (a TCP port 0 is refused too). */
int net_parse_target(const char *s, const char *def_host, struct net_target *t);

/* Where to connect to a worker: over TCP (tcplen > 0), its Unix socket (udslen > 0), or
 * both (the Unix socket first, TCP when it does not answer). */
struct net_addrs {
    struct sockaddr_storage tcp;
    socklen_t tcplen;
    struct sockaddr_un uds;
    socklen_t udslen;
};
/* The Unix socket of a NET_UNIX_PORT or NET_UNIX_PATH target (or of a TCP target's port, q's
 * abstract one). 0, or -1 (QUDSPATH set and empty, or the path too long). */
int net_uds_addr(const struct net_target *t, struct sockaddr_un *sa, socklen_t *len);
/* "@/tmp/kx.5001" (abstract) or the path, for logs. */
const char *net_uds_name(const struct sockaddr_un *sa, socklen_t len, char *buf, size_t buflen);
/* Is sa this host as a q listening on every interface is reached: 127.0.0.1, ::1, the wildcard,
 * or one of its interfaces' addresses (not 127.0.0.2: another process may listen there)? May
 * call getifaddrs: not on the loop. */
int net_addr_is_local(const struct sockaddr *sa);

/* Connect to host:port over TCP. With nonblock the connect may still be in progress (check
 * for writability, then SO_ERROR). Returns the fd or -1 with errno set. */
int net_connect_tcp(const char *host, int port, int nonblock);

/* TCP_NODELAY and SO_KEEPALIVE on TCP sockets, as c.java does; harmless on Unix sockets. */
void net_tune(int fd);

/* Finding a TCP peer that has gone without a word (a host down, a network cut). With idle_ms
 * > 0 the kernel probes the peer after idle_ms with nothing received, then every interval_ms,
 * and gives the connection up after count probes unanswered; idle_ms 0 turns the probes off.
 * With user_timeout_ms > 0 it also gives it up when bytes sent stay unacknowledged that long
 * (TCP_USER_TIMEOUT); 0 leaves the system's. Probe times go in whole seconds, rounded up.
 * A socket that is not TCP is left alone. 0, or -1 with errno set. */
struct net_keepalive {
    int64_t idle_ms, interval_ms, user_timeout_ms;
    int count;
};
int net_keepalive(int fd, const struct net_keepalive *ka);

/* Is the peer on this host (Unix socket, loopback, or our own address)? q does not compress
 * for such peers. */
int net_peer_is_local(int fd);

/* "ip:port" of the peer (or "unix"), written into buf. */
const char *net_peer_name(int fd, char *buf, size_t len);

/* "ip:port" of sa (or "unix"), written into buf. */
const char *net_addr_name(const struct sockaddr *sa, char *buf, size_t len);

/* ---- address lists (admin_from, proxy_from) ---------------------------------------------- */
/* A list of sources, comma- or space-separated: "unix" (q's Unix socket), "loopback" (127/8,
 * ::1), an address (IPv4 or IPv6), or an address/prefix (10.0.0.0/8, fd00::/8). An IPv4
 * address matches its IPv4-mapped IPv6 form too. */
/* Is list well formed? 0, or -1 with the item that is not in why. */
int net_addr_list_check(const char *list, char *why, size_t whylen);
/* Does list name the source sa (len bytes; uds: it came over a Unix socket)? 0 for an empty list. */
int net_addr_listed(const char *list, const struct sockaddr *sa, socklen_t len, int uds);
/* Is sa a loopback address? */
int net_addr_is_loopback(const struct sockaddr *sa);

/* ---- the PROXY protocol (HAProxy's, v1 text and v2 binary) ------------------------------- */
/* The longest header accepted: v1's 107 bytes, v2's 16 and its addresses and TLVs. */
#define NET_PROXY_MAX 2048
struct net_proxy {
    int local;           /* v2 LOCAL, or v1 UNKNOWN: the proxy's own connection (its health
                          * check): no client address, the connection's own peer stands */
    struct sockaddr_storage src; /* else: the client's address as the proxy saw it */
    socklen_t srclen;
};
/* Do the n bytes at p start as a PROXY header would (v1's "PROXY " or v2's signature, as far
 * as n bytes go)? */
int net_proxy_looks(const uint8_t *p, size_t n);
/* Parse the PROXY header at the front of p: the bytes it takes (> 0), 0 if more must come, or
 * -1 if it is not one (why: a static reason). */
int net_proxy_parse(const uint8_t *p, size_t n, struct net_proxy *out, const char **why);

/* Write all of p, waiting for writability when the socket is non-blocking. 0 or -1. */
int net_write_all(int fd, const void *p, size_t n);
/* Read exactly n bytes; 0, or -1 on error/EOF (errno 0 for EOF). */
int net_read_all(int fd, void *p, size_t n);

#endif

/* net.h: sockets: address parsing, TCP and q's abstract Unix socket, both roles. */
#ifndef NET_H
#define NET_H

#include <stddef.h>

/* Parse "host:port", ":port" or "port" (host defaults to def_host). 0 on success, -1 if the
 * port is not a number in 0..65535 or the host does not fit in hostlen. */
int net_parse_hostport(const char *s, const char *def_host, char *host, size_t hostlen, int *port);

/* Listen on TCP host:port (port 0 picks one). Sets SO_REUSEADDR, O_NONBLOCK when nonblock.
 * Returns the fd and stores the bound port in *bound, or -1 with errno set. */
struct addrinfo;
/* Resolve host:port for TCP, IPv4 or IPv6 ("localhost" is 127.0.0.1; empty or "*" with passive:
 * any address). May block: the loop never calls it (worker addresses: job_resolve). 0, or -1
 * with errno EHOSTUNREACH and the resolver's reason in *why (if why). */
int net_resolve(const char *host, int port, int passive, struct addrinfo **out, const char **why);
int net_listen_tcp(const char *host, int port, int backlog, int nonblock, int *bound);

/* q's Unix socket for a port: on Linux the abstract name "\0$QUDSPATH/kx.PORT" (QUDSPATH
 * defaults to /tmp; set and empty disables it). Returns the fd, -1 on error, -2 if disabled. */
int net_listen_uds(int port, int backlog, int nonblock);
int net_connect_uds(int port, int nonblock);

/* Connect to host:port over TCP. With nonblock the connect may still be in progress (check
 * for writability, then SO_ERROR). Returns the fd or -1 with errno set. */
int net_connect_tcp(const char *host, int port, int nonblock);

/* TCP_NODELAY and SO_KEEPALIVE on TCP sockets, as c.java does; harmless on Unix sockets. */
void net_tune(int fd);

/* Is the peer on this host (Unix socket, loopback, or our own address)? q does not compress
 * for such peers. */
int net_peer_is_local(int fd);

/* "ip:port" of the peer (or "unix"), written into buf. */
const char *net_peer_name(int fd, char *buf, size_t len);

/* Write all of p, waiting for writability when the socket is non-blocking. 0 or -1. */
int net_write_all(int fd, const void *p, size_t n);
/* Read exactly n bytes; 0, or -1 on error/EOF (errno 0 for EOF). */
int net_read_all(int fd, void *p, size_t n);

#endif

/* util.h: what the bench tools share: arguments, clocks, signals, targets, epoll clients, input buffers. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "kcodec.h"
#include "kipc.h"

/* ---- arguments, clocks, numbers ------------------------------------------------------------- */

/* Parse all of s as a decimal long >= 0 into *out: 0, or -1 (out untouched). */
int arg_long(const char *s, long *out);
/* Parse all of s as a finite double into *out, >= 0 if allow_zero else > 0: 0, or -1 (out untouched). */
int arg_double(const char *s, double *out, int allow_zero);

/* The time of clock clk (CLOCK_MONOTONIC, CLOCK_REALTIME, ...) in ns. */
int64_t clock_ns(clockid_t clk);
/* CLOCK_MONOTONIC in ns. */
int64_t mono_ns(void);

/* xorshift64 (13, 7, 17): advances *s (never 0) and returns the new state. */
static inline uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Grow the malloc'd *p of *size bytes to need bytes if it is smaller: 0, or -1 on ENOMEM (*p unchanged). */
int bytes_reserve(uint8_t **p, size_t *size, size_t need);

/* Sort lat[0..n) (ns) and set the median, 99th percentile and maximum in µs; each is none if n is 0. */
void lat_summary(int64_t *lat, size_t n, double none, double *p50_us, double *p99_us, double *max_us);

/* Raise RLIMIT_NOFILE to need (RLIM_INFINITY: to the hard limit): 0, or -1 (said on stderr if prog). */
int nofile_raise(rlim_t need, const char *prog);

/* ---- signals -------------------------------------------------------------------------------- */

/* How many SIGINT/SIGTERM arrived (through stop_signal_count). */
extern volatile sig_atomic_t stop_signals;
/* A signal handler that counts into stop_signals. */
void stop_signal_count(int sig);
/* Ignore SIGPIPE; count SIGINT/SIGTERM, blocked except in *waitmask (for epoll_pwait: no wake-up lost). */
void stop_signals_block(sigset_t *waitmask);

/* ---- kdb+ messages -------------------------------------------------------------------------- */

/* Build the handshake of "user[:pass]" (NULL: none) into hs[cap]: its length, 0 if it does not fit. */
size_t hs_build_userpass(uint8_t *hs, size_t cap, const char *userpass);
/* The capability hs_build_userpass offers (3 unless a tool is told otherwise: an old client). */
extern uint8_t hs_capability;
/* 1 if x is the symbol or the char vector name, else 0. */
int kname_eq(K x, const char *name);
/* Serialise x as a message of type and write all of it to fd: 0, or -1 (no memory, write failed). */
int kmsg_write(int fd, K x, int type);

/* A blocking peer's input: received bytes p[0..len) of size allocated. */
struct msgbuf {
    uint8_t *p;
    size_t len, size;
};
/* Make at least 64 KiB free after len (doubling; 128 KiB at first): 0, or -1 on ENOMEM. */
int msgbuf_room(struct msgbuf *b);
/* The message at p + off: QG_OK whole (*h), QG_AGAIN (room made for it), QG_ERR (*why), QG_ENOMEM. */
qg_status msgbuf_next(struct msgbuf *b, size_t off, uint64_t max, struct kipc_hdr *h, const char **why);
/* read() once from fd into the free space after len: read's result (len grows by what came). */
ssize_t msgbuf_read(struct msgbuf *b, int fd);
/* Drop the first off bytes (handled); free a buffer over 1 MiB once it is empty. */
void msgbuf_consume(struct msgbuf *b, size_t off);

/* ---- targets and non-blocking client connections on epoll ----------------------------------- */

/* A kdb+ endpoint, resolved once. */
struct target {
    int uds;                     /* q's Unix socket for port */
    int port;
    struct sockaddr_storage sa;
    socklen_t salen;
    char name[300];              /* host:port */
};
/* Resolve "host:port" into t ("unix": q's Unix socket if allow_uds): 0, or -1 said on stderr as prog's. */
int target_parse(struct target *t, const char *spec, int allow_uds, const char *prog, const char *what);

/* One thread's epoll set, and whose it is (for messages). */
struct eploop {
    int epfd;
    const char *prog;
    uint64_t bytes_out;          /* bytes written by ep_flush */
};

/* States the opening moves through; the tools number their other states around these. */
enum { EP_CONNECTING = 1, EP_HS_SEND, EP_HS_READ };
/* What ep_open_step says: not yet, open, or failed: connect, handshake write, no capability byte. */
enum { EP_WAIT, EP_OPEN, EP_CONNECT_FAILED, EP_HS_FAILED, EP_ACCESS };

/* A non-blocking client connection on an eploop. */
struct epconn {
    int fd;                      /* -1 when closed */
    uint32_t events;             /* registered epoll mask, 0 = not registered */
    uint8_t state;               /* EP_CONNECTING..EP_HS_READ while opening, else the tool's */
    size_t off;                  /* bytes of the handshake or request written */
    uint64_t id;                 /* epoll data: the tool's index of this connection */
};

/* 1 if c is connecting or shaking hands. */
static inline int ep_opening(const struct epconn *c)
{
    return c->state >= EP_CONNECTING && c->state <= EP_HS_READ;
}
/* Register, change or (ev 0) drop c's epoll mask; exits 1 if epoll_ctl fails. */
void ep_watch(const struct eploop *l, struct epconn *c, uint32_t ev);
/* Close c's fd (it leaves the epoll set) and mark it closed and unregistered. */
void ep_close(struct epconn *c);
/* Write p[c->off..len), watching EPOLLOUT too while the socket is full: 0, or -1 if the peer is gone. */
int ep_flush(struct eploop *l, struct epconn *c, const uint8_t *p, size_t len);
/* read() from c's fd, retrying EINTR: bytes read (> 0), 0 if none are there yet, -1 if closed or failed. */
ssize_t ep_read(struct epconn *c, void *p, size_t n);
/* Start opening c to t (EP_CONNECTING, watching EPOLLOUT): 0, or -1 (not started, c untouched). */
int ep_connect(const struct eploop *l, struct epconn *c, const struct target *t);
/* Advance c's connect and handshake hs on events ev: EP_WAIT, EP_OPEN (next state the caller's), or a failure. */
int ep_open_step(struct eploop *l, struct epconn *c, uint32_t ev, const uint8_t *hs, size_t hs_len);
/* One epoll_pwait until deadline (mono_ns, 0 none; cap_ns at most): the events, 0 on a signal, exit 1 on error. */
int ep_wait(const struct eploop *l, struct epoll_event *evs, int max, int64_t deadline, int64_t cap_ns,
            const sigset_t *waitmask);

#endif

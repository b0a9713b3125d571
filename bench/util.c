/* util.c: what the bench tools share: arguments, clocks, signals, targets, epoll clients, input buffers. */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net.h"

#define MSGBUF_MIN_FREE 65536u        /* room made before each read */
#define MSGBUF_KEEP_MAX (1u << 20)    /* an empty buffer above this is freed */

/* ---- arguments, clocks, numbers ------------------------------------------------------------- */

int arg_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 0)
        return -1;
    *out = v;
    return 0;
}

int arg_double(const char *s, double *out, int allow_zero)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0 || (!allow_zero && v == 0))
        return -1;
    *out = v;
    return 0;
}

int64_t clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

int bytes_reserve(uint8_t **p, size_t *size, size_t need)
{
    if (need <= *size)
        return 0;
    uint8_t *q = realloc(*p, need);
    if (!q)
        return -1;
    *p = q;
    *size = need;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void lat_summary(int64_t *lat, size_t n, double none, double *p50_us, double *p99_us, double *max_us)
{
    if (n)
        qsort(lat, n, sizeof *lat, cmp_i64);
    *p50_us = n ? (double)lat[(n - 1) / 2] / 1e3 : none;
    *p99_us = n ? (double)lat[(size_t)ceil(0.99 * (double)n) - 1] / 1e3 : none;
    *max_us = n ? (double)lat[n - 1] / 1e3 : none;
}

int nofile_raise(rlim_t need, const char *prog)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return -1;
    if (need == RLIM_INFINITY)
        need = rl.rlim_max;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    struct rlimit nr = rl;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        nr.rlim_cur = need;
    } else {
        nr.rlim_cur = nr.rlim_max = need; /* works only with CAP_SYS_RESOURCE */
    }
    if (setrlimit(RLIMIT_NOFILE, &nr)) {
        if (prog)
            fprintf(stderr, "%s: need %llu file descriptors, RLIMIT_NOFILE is %llu (hard %llu): %s\n", prog,
                    (unsigned long long)need, (unsigned long long)rl.rlim_cur,
                    (unsigned long long)rl.rlim_max, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- signals -------------------------------------------------------------------------------- */

volatile sig_atomic_t stop_signals;

void stop_signal_count(int sig)
{
    (void)sig;
    stop_signals++;
}

void stop_signals_block(sigset_t *waitmask)
{
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = stop_signal_count};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, waitmask);
    sigdelset(waitmask, SIGINT);
    sigdelset(waitmask, SIGTERM);
}

/* ---- kdb+ messages -------------------------------------------------------------------------- */

uint8_t hs_capability = KIPC_CAP_MAX;

size_t hs_build_userpass(uint8_t *hs, size_t cap, const char *userpass)
{
    char up[1024];
    snprintf(up, sizeof up, "%s", userpass ? userpass : "");
    char *colon = strchr(up, ':');
    if (colon)
        *colon = 0;
    return kipc_hs_build(hs, cap, up, colon ? colon + 1 : NULL, hs_capability);
}

int kname_eq(K x, const char *name)
{
    size_t l = strlen(name);
    if (x->t == -KT_SYM)
        return !strcmp(x->s, name);
    return x->t == KT_CHAR && (size_t)x->n == l && !memcmp(kC(x), name, l);
}

int kmsg_write(int fd, K x, int type)
{
    size_t len;
    uint8_t *m = kcodec_encode_msg(x, type, &len);
    if (!m)
        return -1;
    int rc = net_write_all(fd, m, len);
    free(m);
    return rc;
}

int msgbuf_room(struct msgbuf *b)
{
    if (b->size - b->len >= MSGBUF_MIN_FREE)
        return 0;
    return bytes_reserve(&b->p, &b->size, b->size ? b->size * 2 : 2 * MSGBUF_MIN_FREE);
}

qg_status msgbuf_next(struct msgbuf *b, size_t off, uint64_t max, struct kipc_hdr *h, const char **why)
{
    size_t need;
    qg_status st = kipc_frame_check(b->p + off, b->len - off, max, h, &need, why);
    if (st == QG_AGAIN && bytes_reserve(&b->p, &b->size, need))
        return QG_ENOMEM;
    return st;
}

ssize_t msgbuf_read(struct msgbuf *b, int fd)
{
    ssize_t r = read(fd, b->p + b->len, b->size - b->len);
    if (r > 0)
        b->len += (size_t)r;
    return r;
}

void msgbuf_consume(struct msgbuf *b, size_t off)
{
    memmove(b->p, b->p + off, b->len - off);
    b->len -= off;
    if (b->len == 0 && b->size > MSGBUF_KEEP_MAX) { /* give big buffers back when idle */
        free(b->p);
        b->p = NULL;
        b->size = 0;
    }
}

/* ---- targets and non-blocking client connections on epoll ----------------------------------- */

int target_parse(struct target *t, const char *spec, int allow_uds, const char *prog, const char *what)
{
    char host[256];
    memset(t, 0, sizeof *t);
    if (net_parse_hostport(spec, "127.0.0.1", host, sizeof host, &t->port) || !t->port) {
        fprintf(stderr, "%s: bad %s %s\n", prog, what, spec);
        return -1;
    }
    snprintf(t->name, sizeof t->name, "%s:%d", host, t->port);
    if (allow_uds && !strcmp(host, "unix")) {
        t->uds = 1;
        return 0;
    }
    char ps[16];
    snprintf(ps, sizeof ps, "%d", t->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int e = getaddrinfo(!strcmp(host, "localhost") ? "127.0.0.1" : host, ps, &hints, &ai);
    if (e) {
        fprintf(stderr, "%s: %s: %s\n", prog, spec, gai_strerror(e));
        return -1;
    }
    memcpy(&t->sa, ai->ai_addr, ai->ai_addrlen);
    t->salen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* Start a non-blocking connect to t (TCP tuned by net_tune): the fd, or -1. */
static int target_connect(const struct target *t)
{
    if (t->uds)
        return net_connect_uds(t->port, 1);
    int fd = socket(t->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    net_tune(fd);
    if (connect(fd, (const struct sockaddr *)&t->sa, t->salen) && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

void ep_watch(const struct eploop *l, struct epconn *c, uint32_t ev)
{
    if (c->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.u64 = c->id};
    int op = !c->events ? EPOLL_CTL_ADD : !ev ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (epoll_ctl(l->epfd, op, c->fd, &e) && op != EPOLL_CTL_DEL) {
        fprintf(stderr, "%s: epoll_ctl: %s\n", l->prog, strerror(errno));
        exit(1);
    }
    c->events = ev;
}

void ep_close(struct epconn *c)
{
    if (c->fd >= 0)
        close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->events = 0;
}

int ep_flush(struct eploop *l, struct epconn *c, const uint8_t *p, size_t len)
{
    while (c->off < len) {
        ssize_t w = send(c->fd, p + c->off, len - c->off, MSG_NOSIGNAL);
        if (w > 0) {
            c->off += (size_t)w;
            l->bytes_out += (uint64_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            ep_watch(l, c, EPOLLIN | EPOLLOUT);
            return 0;
        } else {
            return -1;
        }
    }
    ep_watch(l, c, EPOLLIN);
    return 0;
}

ssize_t ep_read(struct epconn *c, void *p, size_t n)
{
    for (;;) {
        ssize_t r = read(c->fd, p, n);
        if (r > 0)
            return r;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && errno == EAGAIN ? 0 : -1;
    }
}

int ep_connect(const struct eploop *l, struct epconn *c, const struct target *t)
{
    int fd = target_connect(t);
    if (fd < 0)
        return -1;
    c->fd = fd;
    c->state = EP_CONNECTING;
    c->off = 0;
    ep_watch(l, c, EPOLLOUT);
    return 0;
}

int ep_open_step(struct eploop *l, struct epconn *c, uint32_t ev, const uint8_t *hs, size_t hs_len)
{
    switch (c->state) {
    case EP_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) || err || (ev & (EPOLLERR | EPOLLHUP)))
            return EP_CONNECT_FAILED;
        if (!(ev & EPOLLOUT))
            return EP_WAIT;
        c->state = EP_HS_SEND;
        c->off = 0;
    } /* fall through */
    case EP_HS_SEND:
        if (ep_flush(l, c, hs, hs_len))
            return EP_HS_FAILED;
        if (c->off == hs_len)
            c->state = EP_HS_READ;
        return EP_WAIT;
    case EP_HS_READ: {
        uint8_t cap;
        ssize_t r = read(c->fd, &cap, 1);
        if (r == 1)
            return EP_OPEN;
        if (r == 0 || (errno != EAGAIN && errno != EINTR))
            return EP_ACCESS;
        return EP_WAIT;
    }
    default:
        return EP_WAIT;
    }
}

int ep_wait(const struct eploop *l, struct epoll_event *evs, int max, int64_t deadline, int64_t cap_ns,
            const sigset_t *waitmask)
{
    int timeout = -1;
    if (deadline) {
        int64_t left = deadline - mono_ns();
        timeout = left <= 0 ? 0 : (int)((QG_MIN(left, cap_ns) + 999999) / 1000000);
    }
    int n = epoll_pwait(l->epfd, evs, max, timeout, waitmask);
    if (n < 0) {
        if (errno == EINTR)
            return 0;
        fprintf(stderr, "%s: epoll_wait: %s\n", l->prog, strerror(errno));
        exit(1);
    }
    return n;
}

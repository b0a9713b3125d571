/* qconn.c: a blocking kdb+ client connection for the bench tools. */
#include "qconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kcodec.h"
#include "kzip.h"
#include "net.h"
#include "util.h"

#define QCONN_MAX_MESSAGE (4ULL << 30)

static int64_t now_ms(void) { return mono_ns() / 1000000; }

/* Wait for events on fd until deadline (0 = none). 1 ready, 0 timed out. */
static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int t = -1;
        if (deadline) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                return 0;
            t = (int)left;
        }
        struct pollfd pf = {.fd = fd, .events = ev};
        int rc = poll(&pf, 1, t);
        if (rc > 0)
            return 1;
        if (rc == 0)
            return 0;
        if (errno != EINTR)
            return 1; /* let the following I/O report the error */
    }
}

int qconn_open(struct qconn *c, const char *addr, const char *userpass, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    char host[256];
    int port;
    if (net_parse_hostport(addr, "127.0.0.1", host, sizeof host, &port))
        return QCONN_EHOP;
    int fd = !strcmp(host, "unix") ? net_connect_uds(port, 1) : net_connect_tcp(host, port, 1);
    if (fd < 0)
        return QCONN_EHOP;
    if (!wait_fd(fd, POLLOUT, deadline)) {
        close(fd);
        return QCONN_ETIMEOUT;
    }
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
        close(fd);
        return QCONN_EHOP;
    }
    uint8_t hs[1100];
    size_t n = hs_build_userpass(hs, sizeof hs, userpass);
    if (!n || net_write_all(fd, hs, n)) {
        close(fd);
        return QCONN_EHOP;
    }
    uint8_t capb;
    if (!wait_fd(fd, POLLIN, deadline)) {
        close(fd);
        return QCONN_ETIMEOUT;
    }
    ssize_t r = read(fd, &capb, 1);
    if (r != 1) {
        close(fd);
        return QCONN_EACCESS;
    }
    c->fd = fd;
    c->cap = capb;
    return QCONN_OK;
}

int qconn_send(struct qconn *c, const uint8_t *msg, size_t len)
{
    return net_write_all(c->fd, msg, len) ? QCONN_ECLOSE : QCONN_OK;
}

static int read_deadline(int fd, uint8_t *p, size_t n, int64_t deadline)
{
    while (n) {
        if (!wait_fd(fd, POLLIN, deadline))
            return QCONN_ETIMEOUT;
        ssize_t r = read(fd, p, n);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            return QCONN_ECLOSE;
        }
    }
    return QCONN_OK;
}

static int grow(struct qconn *c, size_t need) { return bytes_reserve(&c->buf, &c->cap_buf, need); }

int qconn_recv(struct qconn *c, int timeout_ms)
{
    int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    uint8_t h[8];
    int rc = read_deadline(c->fd, h, 8, deadline);
    if (rc)
        return rc;
    const char *why;
    if (kipc_hdr_parse(h, 8, QCONN_MAX_MESSAGE, &c->hdr, &why) != QG_OK)
        return QCONN_EBADMSG;
    size_t len = (size_t)c->hdr.len;
    c->wire_len = len;
    c->wire_compressed = c->hdr.compressed;
    if (!c->hdr.compressed) {
        if (grow(c, len))
            return QCONN_EBADMSG;
        memcpy(c->buf, h, 8);
        if ((rc = read_deadline(c->fd, c->buf + 8, len - 8, deadline)))
            return rc;
        c->len = len;
        return QCONN_OK;
    }
    uint8_t *z = malloc(len);
    if (!z)
        return QCONN_EBADMSG;
    memcpy(z, h, 8);
    if ((rc = read_deadline(c->fd, z + 8, len - 8, deadline))) {
        free(z);
        return rc;
    }
    size_t n = kzip_uncompressed_len(z, len);
    if (n < 9 || n > QCONN_MAX_MESSAGE || grow(c, n) ||
        kzip_decompress(z, len, c->buf, n, &why) != QG_OK) {
        free(z);
        return QCONN_EBADMSG;
    }
    free(z);
    c->len = n;
    c->hdr.compressed = 0;
    c->hdr.len = n;
    return QCONN_OK;
}

int qconn_call(struct qconn *c, const uint8_t *msg, size_t len, int timeout_ms)
{
    int rc = qconn_send(c, msg, len);
    while (!rc) {
        rc = qconn_recv(c, timeout_ms);
        if (!rc && c->hdr.type == KIPC_RESPONSE)
            return QCONN_OK;
    }
    return rc;
}

void qconn_close(struct qconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->cap_buf = c->len = 0;
}

const char *qconn_strerror(int rc)
{
    switch (rc) {
    case QCONN_OK: return "ok";
    case QCONN_EHOP: return "hop";
    case QCONN_EACCESS: return "access";
    case QCONN_ECLOSE: return "close";
    case QCONN_EBADMSG: return "badmsg";
    case QCONN_ETIMEOUT: return "timeout";
    default: return "?";
    }
}

/* Skip one object of a validated body; returns the offset after it. */
static size_t skip_obj(const uint8_t *p, size_t n, size_t o, int le);

static size_t skip_syms(const uint8_t *p, size_t n, size_t o, int64_t cnt)
{
    for (int64_t i = 0; i < cnt && o < n; i++)
        o += strnlen((const char *)p + o, n - o) + 1;
    return o;
}

static size_t skip_obj(const uint8_t *p, size_t n, size_t o, int le)
{
    int t = (int8_t)p[o];
    if (t == KT_SYM)
        return skip_syms(p, n, o + 6, (int32_t)qg_ld32o(p + o + 2, le));
    if (t > 0 && t < 20)
        return o + 6 + (size_t)(int32_t)qg_ld32o(p + o + 2, le) * (size_t)ktype_size(t);
    return n; /* not needed by qmsg_count */
}

int64_t qmsg_count(const uint8_t *p, size_t n, int le)
{
    if (n < 1)
        return -1;
    int t = (int8_t)p[0];
    if (t == KT_ERROR)
        return -1;
    if (t < 0 || (t >= KT_LAMBDA && t != KT_SORTED_DICT))
        return 1;
    if (t <= 19)
        return n >= 6 ? (int32_t)qg_ld32o(p + 2, le) : -1;
    if (t == KT_DICT || t == KT_SORTED_DICT)
        return qmsg_count(p + 1, n - 1, le);
    /* table: 62 attr 63 <symbol names> 00 attr count <first column> */
    if (n < 9)
        return -1;
    size_t o = skip_obj(p, n, 3, le);
    if (o + 6 + 6 > n || p[o] != KT_LIST)
        return -1;
    return qmsg_count(p + o + 6, n - o - 6, le);
}

/* qconn.h: a blocking kdb+ client connection, as q's hopen and h x, for the bench tools. */
#ifndef QCONN_H
#define QCONN_H

#include <stddef.h>
#include <stdint.h>

#include "kipc.h"

struct qconn {
    int fd;
    uint8_t cap;    /* negotiated capability */
    uint8_t *buf;   /* last received message, uncompressed, header included */
    size_t cap_buf;
    size_t len;
    struct kipc_hdr hdr;
    size_t wire_len;      /* the last message's bytes as they came (compressed or not) */
    uint8_t wire_compressed;
};

enum { QCONN_OK = 0, QCONN_EHOP = -1, QCONN_EACCESS = -2, QCONN_ECLOSE = -3, QCONN_EBADMSG = -4,
       QCONN_ETIMEOUT = -5 };

/* hopen: connect to "host:port" (or "unix:port" for q's Unix socket), send user:pass and
 * capability 3, read the capability reply. timeout_ms bounds the connect and handshake
 * (0 = none). QCONN_OK, QCONN_EHOP (cannot connect), QCONN_EACCESS (closed without a byte). */
int qconn_open(struct qconn *c, const char *addr, const char *userpass, int timeout_ms);

/* Send a whole message. QCONN_OK or QCONN_ECLOSE. */
int qconn_send(struct qconn *c, const uint8_t *msg, size_t len);

/* Receive the next whole message into c->buf/c->len (decompressed; c->hdr describes it).
 * timeout_ms 0 waits forever. QCONN_OK, QCONN_ECLOSE, QCONN_EBADMSG, QCONN_ETIMEOUT. */
int qconn_recv(struct qconn *c, int timeout_ms);

/* Send a sync request and wait for its response, skipping async messages the peer sends. */
int qconn_call(struct qconn *c, const uint8_t *msg, size_t len, int timeout_ms);

void qconn_close(struct qconn *c);

/* Text of an error code, for messages. */
const char *qconn_strerror(int rc);

/* The q count of a reply body: rows of a table, items of a vector or list, keys of a
 * dictionary, 1 for an atom; -1 for an error or an unreadable body. */
int64_t qmsg_count(const uint8_t *body, size_t n, int le);

#endif

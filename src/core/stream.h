/* stream.h: the framed stream, both sides: every socket read and write of a client, a worker
 * or a metrics connection goes through here (PgBouncer's sbuf and twemproxy's conn_recv and
 * conn_sendv in one). It holds the input buffer, the kdb+ header of the message being read and
 * the read budget, moves bytes through an IO ops table (plain sockets now; TLS to workers would
 * be a second table), and hands what arrives to the connection kind's handlers (struct connops,
 * conn.h):
 *
 *   raw       (a handshake, an HTTP request): on_bytes sees everything read so far, in c->in
 *   framed    each kdb+ message, as its header arrives: on_header says where it goes, with
 *             stream_route(), or every message is taken whole when the kind has no on_header
 *               WHOLE   read whole, then on_message (the bytes are the kind's)
 *               STREAM  its bytes go to another connection's output as they arrive (cut-
 *                       through; spliced inside the kernel when big), then on_end
 *               DROP    read and dropped, then on_end
 *
 * Handlers return a status: SS_OK, SS_STOP (read no more now), SS_CLOSE (stream_close() said
 * why): the stream closes the connection, in one place; or, from on_header, SS_WAIT: the
 * message is not taken now (its header stays in the input buffer, framed again later, and the
 * kind has stopped the reading: conn_room_wait_loop); from on_message, SS_WAIT (returned by
 * stream_job_wait_loop): the message is taken, and a pool job works on it; nothing after it is
 * read or framed until stream_job_done_loop, so that what follows keeps its order. What a connection puts into a
 * client's output counts against client_high_water: past it the reader waits for that output
 * to drain below client_low_water (stream_pause_loop, stream_woken_loop). */
#ifndef STREAM_H
#define STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "conn.h"

/* How bytes move on a connection's socket. */
struct stream_io {
    ssize_t (*read)(int fd, void *p, size_t n);
    ssize_t (*writev)(int fd, const struct iovec *iov, int n);
    /* Move up to n bytes from one descriptor to another inside the kernel (socket to pipe, pipe
     * to socket); NULL when the transport cannot (its bytes must pass through user space). */
    ssize_t (*splice)(int from, int to, size_t n);
    int (*shutdown_write)(int fd);
};
extern const struct stream_io stream_plain;

/* What a handler tells the stream. */
enum { SS_OK = 0, SS_STOP = 1, SS_CLOSE = 2, SS_WAIT = 3 };

/* Set c's reason to close and return SS_CLOSE: `return stream_close(c, "why");` */
int stream_close(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* From on_header: the message whose header has arrived goes whole (the default), to to's
 * output (to != NULL), or nowhere. */
static inline void stream_route(struct conn *c, int route, struct conn *to)
{
    c->rd.route = (uint8_t)route;
    c->rd.to = to;
}
/* The message being read is no longer anyone's: the rest of it is read and dropped (what was
 * gathered of a whole one too). */
void stream_drop_rest_loop(struct conn *c);
/* Is c's message being streamed into `to` past its header (a loss now cuts to's stream)? */
static inline int stream_into(const struct conn *c, const struct conn *to)
{
    return c->rd.phase == RD_BODY && c->rd.route == SR_STREAM && c->rd.to == to;
}

/* Read what c's socket holds, within the read budget, and hand it to c's kind (raw or
 * framed). Stops at SS_STOP, a pause, or when the socket is empty. */
void stream_read_loop(struct gw *g, struct conn *c);
/* Frame what c's input buffer already holds, without reading (messages a budget left, or what
 * a client sent before it left). */
void stream_frame_loop(struct gw *g, struct conn *c);
/* Take c's messages left over by the frames budget (the backlog phase of the iteration). */
void stream_backlog_loop(struct gw *g);
/* Read everything c's socket still holds into its input buffer, up to max bytes, unframed (a
 * client that has left: what it sent before still runs). */
void stream_read_rest_loop(struct gw *g, struct conn *c, size_t max);
/* Where c's output stands, in bytes since it began (from out and the pipe alike): sent, what its
 * socket took; queued, of that, what the peer has not acknowledged (a TCP socket's SIOCOUTQ: what
 * waits in our send buffer; 0 for other sockets, whose count includes the kernel's overhead);
 * acked, the rest (what the peer's kernel has: it may not have been read yet); end, sent and what
 * is still queued (the pipe, out, held): where the next message queued will begin. */
struct stream_sent {
    uint64_t sent, queued, acked, end;
};
void stream_sent_loop(const struct conn *c, struct stream_sent *s);
/* Drop what c's input buffer holds, and the message it was gathering (it reads no more). */
void stream_input_drop_loop(struct conn *c);
/* A staged close, once all c owes is out: our side shut (FIN), reading on, and what the peer
 * still sends read and dropped (stream_lingered_loop, from the kind's event handler) until it
 * closes, or until STREAM_LINGER_MS from now, when fn (timer `timer`) closes it. Closing at
 * once with bytes unread would reset the connection, and the peer lose what it had not read. */
#define STREAM_LINGER_MS 2000
void stream_linger_loop(struct gw *g, struct conn *c, int timer, conn_timer_fn fn);
/* An event on a lingering c: what came read and dropped; 1 when the peer has closed or failed
 * (the caller closes c, saying why). */
int stream_lingered_loop(struct gw *g, struct conn *c, uint32_t ev);
/* A socket a connection has left behind (its owner holds it: fd -1 when none). */
struct remnant {
    struct evsrc ev;
    int fd;
    const struct stream_io *io;
    void (*done)(struct gw *g, void *ctx);
    void *ctx;
    int err;             /* when done: 0, the peer closed it; else why it failed (errno) */
};
/* Leave c's socket behind in r, from its kind's teardown (on_close): shut for writing, what the
 * peer still sends read and dropped, closed once the peer closes it (or fails), then done(g,
 * ctx). The connection's teardown goes on without it. Its owner waits for done before it opens
 * another, so that the peer has acted on all that was sent on this one first (q runs what it
 * has read, then closes). 0, or -1 (the socket closed with the connection) when c has no
 * socket or it cannot be watched. */
int stream_leave_socket_loop(struct gw *g, struct conn *c, struct remnant *r, void (*done)(struct gw *g, void *ctx),
                             void *ctx);
/* Close r's socket now, without its done (its owner goes: a reload removed it, or exit). r
 * stays valid memory until its owner is freed (an event for it in this iteration is ignored). */
void stream_remnant_close_loop(struct remnant *r);
/* Best effort, outside the output queue: len bytes straight to a socket that is about to be
 * closed (a 503 to a connection that gives way). */
void stream_send_now_loop(int fd, const void *p, size_t len);

/* ---- output ---------------------------------------------------------------------------------- */
/* Write what is pending within the write budget (the pipe first). -1 if the connection failed. */
int stream_flush_loop(struct gw *g, struct conn *c);
/* Write what connections have pending (the flush phase of the iteration). */
void stream_flush_dirty_loop(struct gw *g);

/* ---- bounds ---------------------------------------------------------------------------------- */
/* Bytes of to's output that bound what c may put into it: those ahead of the message c streams
 * into it (what is held behind goes once it ends), else everything waiting (c puts whole
 * messages behind what is there). */
static inline size_t stream_unsent_for(const struct conn *c, const struct conn *to)
{
    return c->rd.route == SR_STREAM && c->rd.to == to ? to->out.bytes + to->piped : conn_pending(to);
}
/* c put bytes into to's output: past client_high_water, c stops reading until it drains. */
void stream_check_bound_loop(struct gw *g, struct conn *c, struct conn *to);
/* Stop reading c until to's output drains (below client_low_water, or to gone). */
void stream_pause_loop(struct gw *g, struct conn *c, struct conn *to);
/* From on_header (then return SS_WAIT): c stops reading until to wakes its waiters
 * (conn_wake_loop: the kind has something to see again), or goes; its header is framed again. */
void stream_wait_wake_loop(struct gw *g, struct conn *c, struct conn *to);
/* c reads again (its kind's on_resume runs). */
void stream_resume_loop(struct gw *g, struct conn *c);
/* From on_message: a pool job has the message; c reads and frames nothing more until
 * stream_job_done_loop. Returns SS_WAIT, for the handler to return. */
int stream_job_wait_loop(struct gw *g, struct conn *c);
/* The job is done: c reads again, and what it read after that message is framed in the backlog
 * phase; if what the job made paused it (its receiver over client_high_water), both wait for
 * stream_resume_loop. */
void stream_job_done_loop(struct gw *g, struct conn *c);
/* The connection c waits on drained some output, or went: c reads again, or waits on. */
void stream_woken_loop(struct gw *g, struct conn *c);

#endif

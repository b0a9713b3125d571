/* stream.c: every socket read and write of a client, worker or metrics connection: reading
 * within the budget, framing kdb+ messages and routing each (whole to the kind, streamed into
 * another connection's output, or dropped), the splice pipe, writing within the budget, and
 * the bound on what one connection puts into another's output. The kinds' handlers say what a
 * message is for and return a status; a connection whose handler says SS_CLOSE is closed here.
 *
 * Reads between messages land in g->rbuf first and are taken from there (a small message then
 * costs a block its size, not one the size of a read); what is left of a message that has not
 * all come (a header cut short, a whole message still arriving) waits in the connection's input
 * buffer, and the next reads go there, as large as the message needs. A body that streams is
 * read into chunks handed to the other connection's output as they are, or spliced through its
 * pipe inside the kernel when it is big. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stream.h"
#include "gw.h"
#include "kipc.h"
#include "log.h"
#include "qg.h"

#define PIPE_SIZE (1 << 20)
#define SPLICE_MIN 65536 /* bodies shorter than this are read, not spliced */
#define DISCARD_READS 64 /* reads of what a lingering peer still sends, per event */

/* ---- the plain transport ------------------------------------------------------------------- */

static ssize_t plain_read(int fd, void *p, size_t n) { return read(fd, p, n); }
static ssize_t plain_writev(int fd, const struct iovec *iov, int n) { return writev(fd, iov, n); }
static ssize_t plain_splice(int from, int to, size_t n)
{
    return splice(from, NULL, to, NULL, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
}
static int plain_shutdown_write(int fd) { return shutdown(fd, SHUT_WR); }

const struct stream_io stream_plain = {
    .read = plain_read,
    .writev = plain_writev,
    .splice = plain_splice,
    .shutdown_write = plain_shutdown_write,
};

/* Every connection is plain today; a per-connection table goes here with TLS. */
static const struct stream_io *io_of(const struct conn *c)
{
    (void)c;
    return &stream_plain;
}

int stream_close(struct conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return SS_CLOSE;
}

/* What a handler's status means for the connection: SS_CLOSE closes it here. Returns nonzero
 * when reading must stop (stopped, closed, or closed meanwhile by the handler itself). */
static int act(struct gw *g, struct conn *c, int st)
{
    if (st == SS_CLOSE && !c->closing)
        conn_close_loop(g, c, c->why[0] ? c->why : "closed");
    return st != SS_OK || c->closing || c->fd < 0;
}

/* The input ended (n == 0) or failed: the kind decides, by default the connection closes. */
static int input_ended(struct gw *g, struct conn *c, ssize_t n, const char *eof_why)
{
    const char *why = n == 0 ? eof_why : strerror(errno);
    if (conn_ops(c)->on_eof)
        return act(g, c, conn_ops(c)->on_eof(g, c, n == 0, why)), 1;
    act(g, c, stream_close(c, "%s", why));
    return 1;
}

static const char *eof_text(const struct conn *c)
{
    return c->kind == CONN_WORKER ? "worker closed the connection"
           : c->kind == CONN_CLIENT ? "client closed the connection"
                                    : "closed before its request";
}

/* ---- the splice pipe ----------------------------------------------------------------------- */

/* Room in c's pipe (made on first use); 0 if splicing is not possible. */
static size_t pipe_room(struct conn *c)
{
    if (!c->has_pipe) {
        int p[2];
        if (pipe2(p, O_NONBLOCK | O_CLOEXEC))
            return 0;
        int cap = fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE);
        if (cap <= 0)
            cap = fcntl(p[1], F_GETPIPE_SZ);
        c->pipe_rd = p[0];
        c->pipe_wr = p[1];
        c->pipe_cap = cap > 0 ? (size_t)cap : 65536;
        c->has_pipe = 1;
    }
    return c->pipe_cap - c->piped;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* The peer is gone (a write failed): the kind decides, by default the connection closes. */
static void write_failed(struct gw *g, struct conn *c, const char *why)
{
    if (conn_ops(c)->on_gone)
        conn_ops(c)->on_gone(g, c, why);
    else
        conn_close_loop(g, c, why);
}

/* Send what c's pipe holds; -1 if the connection failed. */
static int pipe_flush(struct gw *g, struct conn *c)
{
    size_t budget = (size_t)g->cfg.write_budget;
    while (c->piped && budget && c->fd >= 0) {
        ssize_t n = io_of(c)->splice(c->pipe_rd, c->fd, QG_MIN(c->piped, budget));
        if (n > 0) {
            c->piped -= (size_t)n;
            c->spliced += (uint64_t)n;
            budget -= (size_t)n;
            c->last_write_ms = g->loop.now_ms;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        write_failed(g, c, n == 0 ? "peer closed" : strerror(errno));
        return -1;
    }
    if (c->piped && !budget) {
        conn_mark_dirty_loop(g, c);
        g->loop.work_pending = 1;
    }
    return 0;
}

/* The first unwritten bytes of q, up to budget, as at most max iovecs: how many; *bytes their sum;
 * then, once written, n bytes dropped (the chunks written whole freed). */
static int outq_iov(const struct outq *q, struct iovec *iov, int max, size_t budget, size_t *bytes)
{
    int n = 0;
    size_t want = 0;
    for (struct chunk *c = q->head; c && n < max && want < budget; c = c->next) {
        size_t l = c->len - c->off;
        if (l > budget - want)
            l = budget - want;
        iov[n++] = (struct iovec){c->p + c->off, l};
        want += l;
    }
    *bytes = want;
    return n;
}

static void outq_consume(struct outq *q, size_t n)
{
    q->bytes -= n;
    q->written += n;
    while (n && q->head) {
        struct chunk *c = q->head;
        size_t l = c->len - c->off;
        if (n < l) {
            c->off += n;
            break;
        }
        n -= l;
        q->head = c->next;
        if (!q->head)
            q->tail = NULL;
        chunk_free(c);
    }
}

/* writev c's queued output, up to budget bytes. Returns bytes written (0: the socket is full),
 * or -1 on error (errno set). */
static ssize_t queue_flush(struct conn *c, size_t budget)
{
    struct outq *q = &c->out;
    size_t done = 0;
    while (q->head && done < budget) {
        struct iovec iov[IOV_MAX > 64 ? 64 : IOV_MAX];
        size_t want = 0;
        int n = outq_iov(q, iov, (int)(sizeof iov / sizeof iov[0]), budget - done, &want);
        ssize_t w = io_of(c)->writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return (ssize_t)done;
            return -1;
        }
        done += (size_t)w;
        outq_consume(q, (size_t)w);
        if ((size_t)w < want)
            break; /* the socket is full */
    }
    return (ssize_t)done;
}

/* EPOLLOUT while output waits and the flush list will not take it on. */
static void want_out(struct gw *g, struct conn *c)
{
    int want = (c->out.bytes > 0 || c->piped > 0) && !c->dirty;
    if (want != c->want_out) {
        c->want_out = (uint8_t)want;
        conn_set_events_loop(g, c, want ? c->events | EPOLLOUT : c->events & ~(uint32_t)EPOLLOUT);
    }
}

int stream_flush_loop(struct gw *g, struct conn *c)
{
    if (c->fd < 0 || c->closing)
        return -1;
    size_t before = QG_MAX(conn_pending(c), c->flush_high); /* (what a splice sent meanwhile: below the
                                    * low-water mark it may have woken a client paused for its output,
                                    * told of none: at 19229d1 one inside a callback stayed paused for
                                    * good, its answer unread; the long simulation, seed 1254847) */
    c->flush_high = 0;
    if (c->piped && pipe_flush(g, c)) /* spliced bytes are older than anything in out */
        return -1;
    if (!c->piped && c->out.bytes) {
        size_t counted = buf_pending_bytes;
        ssize_t w = queue_flush(c, (size_t)g->cfg.write_budget);
        conn_room_given_loop(g, counted); /* (requests written to their worker) */
        if (w < 0) {
            write_failed(g, c, errno == EPIPE || errno == ECONNRESET ? "peer closed" : strerror(errno));
            return -1;
        }
        if (w > 0)
            c->last_write_ms = g->loop.now_ms;
        if (c->out.bytes && (size_t)w >= (size_t)g->cfg.write_budget) {
            conn_mark_dirty_loop(g, c); /* budget used up: more next iteration */
            g->loop.work_pending = 1;
        }
    }
    want_out(g, c);
    if (conn_ops(c)->on_flushed)
        conn_ops(c)->on_flushed(g, c, before, before - conn_pending(c));
    return 0;
}

/* The first n of list l: one that stays dirty (budget used up) goes to the tail for the next
 * iteration; a connection closed meanwhile has left the list. */
static void flush_list(struct gw *g, struct connlist *l, int n)
{
    for (; n > 0 && !TAILQ_EMPTY(l); n--) {
        struct conn *c = TAILQ_FIRST(l);
        conn_unmark_dirty_loop(g, c);
        stream_flush_loop(g, c);
    }
}

void stream_flush_dirty_loop(struct gw *g)
{
    /* only those dirty now, the workers first: with their requests on the way they work while
     * the replies go out (bench/cpu at 64 clients, beside replies first in the same rounds:
     * more requests/s in 6 rounds of 7) */
    int others = g->ndirty - g->nwdirty;
    flush_list(g, &g->wdirty, g->nwdirty);
    flush_list(g, &g->dirty, others);
}

void stream_linger_loop(struct gw *g, struct conn *c, int timer, conn_timer_fn fn)
{
    if (c->fd >= 0)
        io_of(c)->shutdown_write(c->fd);
    c->paused = 0;
    conn_set_reading_loop(g, c, 1);
    conn_timer_arm_loop(g, c, timer, g->loop.now_ms + STREAM_LINGER_MS, fn);
}

/* Read and drop what fd's peer sends, DISCARD_READS reads at most: SS_CLOSE once it has closed
 * (*err 0, when err is not NULL) or failed (*err its errno: a reset, a keepalive or user
 * timeout), SS_OK otherwise. */
static int discard(const struct stream_io *io, int fd, int *err)
{
    uint8_t buf[4096];
    for (int i = 0; i < DISCARD_READS; i++) {
        ssize_t n = io->read(fd, buf, sizeof buf);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return SS_OK;
        if (err)
            *err = n < 0 ? errno : 0;
        return SS_CLOSE;
    }
    return SS_OK;
}

int stream_lingered_loop(struct gw *g, struct conn *c, uint32_t ev)
{
    (void)g;
    return (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) && c->fd >= 0 &&
           discard(io_of(c), c->fd, NULL) == SS_CLOSE;
}

void stream_remnant_close_loop(struct remnant *r)
{
    if (r->fd >= 0)
        close(r->fd); /* (epoll forgets a descriptor once it is closed) */
    r->fd = -1;
}

static void on_remnant(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)ev;
    struct remnant *r = (struct remnant *)s;
    if (r->fd < 0 || discard(r->io, r->fd, &r->err) != SS_CLOSE)
        return;
    stream_remnant_close_loop(r); /* the peer has closed it, or it failed */
    r->done(g, r->ctx);
}
static const struct evops remnant_ops = {.on_event = on_remnant};

int stream_leave_socket_loop(struct gw *g, struct conn *c, struct remnant *r, void (*done)(struct gw *g, void *ctx),
                             void *ctx)
{
    if (c->fd < 0)
        return -1;
    const struct stream_io *io = io_of(c);
    *r = (struct remnant){.ev = {.ops = &remnant_ops}, .fd = conn_take_socket_loop(g, c), .io = io, .done = done,
                          .ctx = ctx}; /* the teardown goes on without it */
    r->io->shutdown_write(r->fd);
    if (loop_watch(g, r->fd, &r->ev, EPOLLIN | EPOLLRDHUP, 0)) {
        stream_remnant_close_loop(r);
        return -1;
    }
    return 0;
}

void stream_send_now_loop(int fd, const void *p, size_t len)
{
    ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
}

/* ---- bounds ---------------------------------------------------------------------------------- */

static int takes_output(const struct conn *to)
{
    return !to->closing && to->fd >= 0 && (!conn_ops(to)->takes_output || conn_ops(to)->takes_output(to));
}

void stream_pause_loop(struct gw *g, struct conn *c, struct conn *to)
{
    if (c->paused)
        return;
    c->paused = 1;
    c->waits_on = to;
    conn_set_reading_loop(g, c, 0);
    if (conn_ops(c)->on_pause)
        conn_ops(c)->on_pause(g, c);
    conn_wait_on_loop(c, to); /* woken when to drains, or goes */
}

void stream_wait_wake_loop(struct gw *g, struct conn *c, struct conn *to)
{
    stream_pause_loop(g, c, to);
    c->paused_any = 1;
}

void stream_check_bound_loop(struct gw *g, struct conn *c, struct conn *to)
{
    if (!c->paused && stream_unsent_for(c, to) > (size_t)g->cfg.client_high_water) {
        stream_pause_loop(g, c, to);
        log_debug(c->name, "paused: %s has %zu bytes unsent", to->name, conn_pending(to));
    }
}

void stream_resume_loop(struct gw *g, struct conn *c)
{
    if (!c->paused)
        return;
    struct conn *to = c->waits_on;
    c->paused = c->paused_any = 0;
    c->waits_on = NULL;
    if (to && c->q == &to->waiters)
        conn_queue_out_loop(c); /* off the waiters of the connection it waited on */
    if (c->fd < 0)
        return;
    conn_set_reading_loop(g, c, 1);
    if (inbuf_avail(&c->in) && !c->in_job)
        conn_backlog_add_loop(g, c); /* what it read before a job's message paused it */
    else if (!c->in_job && c->rd.phase != RD_WHOLE)
        inbuf_release_idle(&c->in); /* (nothing of it left: the buffer goes, as after a frame) */
    if (conn_ops(c)->on_resume)
        conn_ops(c)->on_resume(g, c);
}

int stream_job_wait_loop(struct gw *g, struct conn *c)
{
    c->in_job = 1;
    conn_set_reading_loop(g, c, 0);
    return SS_WAIT;
}

void stream_job_done_loop(struct gw *g, struct conn *c)
{
    if (!c->in_job)
        return;
    c->in_job = 0;
    c->last_read_ms = g->loop.now_ms; /* (a peer's silence counts from when it is read again) */
    if (c->closing)
        return;
    if (c->fd < 0) { /* its input ended meanwhile (a reset): what it read before still runs, and a
                      * message the close cut is dropped, when framed (before: left unframed, the
                      * connection kept for ever, and a drain waiting on it) */
        conn_backlog_add_loop(g, c);
        return;
    }
    if (c->paused) /* (paused by what the job made: what it read is framed when it resumes, not now,
                    * past the bound) */
        return;
    conn_set_reading_loop(g, c, 1);
    conn_backlog_add_loop(g, c);
}

void stream_woken_loop(struct gw *g, struct conn *c)
{
    struct conn *to = c->waits_on;
    if (c->paused && !c->paused_any && to && takes_output(to) &&
        stream_unsent_for(c, to) > (size_t)g->cfg.client_low_water) {
        conn_wait_on_loop(c, to); /* not yet under client_low_water for it */
        return;
    }
    stream_resume_loop(g, c);
}

/* ---- reading: delivering the bytes of a message ------------------------------------------------ */

static void peek_add(struct rdstate *rd, const uint8_t *p, size_t n)
{
    size_t k = QG_MIN(n, (size_t)(STREAM_PEEK - rd->npeek));
    memcpy(rd->peek + rd->npeek, p, k);
    rd->npeek = (uint8_t)(rd->npeek + k);
}

/* n bytes at p of a streamed message into its receiver's output (copied: the read's buffer is
 * not theirs); dropped unless it streams. */
static void deliver(struct gw *g, struct conn *c, const uint8_t *p, size_t n)
{
    struct conn *to = c->rd.to;
    if (c->rd.route != SR_STREAM || !to)
        return;
    if (outq_copy(&to->out, p, n)) {
        conn_close_loop(g, to, "out of memory");
        return;
    }
    conn_mark_dirty_loop(g, to);
    stream_check_bound_loop(g, c, to);
}

/* A chunk read whole for a streamed body: handed to the receiver as it is, no copy. */
static void deliver_chunk(struct gw *g, struct conn *c, struct chunk *ch)
{
    struct conn *to = c->rd.to;
    if (c->rd.route != SR_STREAM || !to) {
        chunk_free(ch);
        return;
    }
    outq_push(&to->out, ch);
    conn_mark_dirty_loop(g, to);
    stream_check_bound_loop(g, c, to);
}

/* The message being read has ended. */
static int message_end(struct gw *g, struct conn *c)
{
    struct rdstate *rd = &c->rd;
    if (rd->route == SR_STREAM && rd->to)
        conn_stream_end_loop(g, rd->to);
    rd->phase = RD_BOUNDARY;
    int st = conn_ops(c)->on_end ? conn_ops(c)->on_end(g, c) : SS_OK;
    rd->route = SR_WHOLE;
    rd->to = NULL;
    return st;
}

/* A header has arrived (8 bytes at hdr): check it, and ask the kind where the message goes. */
static int header(struct gw *g, struct conn *c, const uint8_t *hdr, struct kipc_hdr *h)
{
    const char *why;
    if (kipc_hdr_parse(hdr, KIPC_HDR_LEN, conn_ops(c)->own_max ? UINT64_MAX : (uint64_t)g->cfg.max_message, h, &why) !=
        QG_OK)
        return conn_ops(c)->on_bad ? conn_ops(c)->on_bad(g, c, why)
                                   : stream_close(c, "bad message header: %s", why);
    struct rdstate *rd = &c->rd;
    rd->type = h->type;
    rd->npeek = 0;
    rd->route = SR_WHOLE;
    rd->to = NULL;
    int st = conn_ops(c)->on_header ? conn_ops(c)->on_header(g, c, h) : SS_OK;
    if (st != SS_OK)
        return st;
    if (rd->route == SR_STREAM && rd->to)
        rd->to->streaming = 1; /* nothing else goes into its stream until this message ends */
    return SS_OK;
}

/* Body bytes of a streamed or dropped message: delivered, and the message ended when they were
 * the last of it. */
static int body(struct gw *g, struct conn *c, const uint8_t *p, size_t n)
{
    struct rdstate *rd = &c->rd;
    if (rd->npeek < STREAM_PEEK)
        peek_add(rd, p, n);
    deliver(g, c, p, n);
    rd->left -= n;
    if (c->closing || c->fd < 0)
        return SS_STOP;
    return rd->left ? SS_OK : message_end(g, c);
}

/* A header routed not whole: its body follows (the header goes first if it streams). */
static void body_begins(struct gw *g, struct conn *c, const uint8_t *hdr, const struct kipc_hdr *h)
{
    c->rd.phase = RD_BODY;
    c->rd.left = h->len - KIPC_HDR_LEN;
    deliver(g, c, hdr, KIPC_HDR_LEN);
}

/* A whole message: to the kind. */
static int whole(struct gw *g, struct conn *c, const struct kipc_hdr *h, uint8_t *msg, int *frames)
{
    c->rd.phase = RD_BOUNDARY;
    peek_add(&c->rd, msg + KIPC_HDR_LEN, (size_t)h->len - KIPC_HDR_LEN);
    (*frames)++;
    return conn_ops(c)->on_message(g, c, h, msg);
}

static int over_budget(const struct gw *g, const struct conn *c, int frames)
{
    return conn_ops(c)->budget_frames && frames >= g->cfg.frames_budget;
}

/* ---- reading: framing ---------------------------------------------------------------------- */

/* Frame n bytes at p, read between messages into g->rbuf (nothing of c's waits in its input
 * buffer). Whole messages go to the kind, streamed and dropped ones where their route says;
 * what remains of a message not all come, or what a budget leaves, waits in c->in. */
static int frame_span(struct gw *g, struct conn *c, const uint8_t *p, size_t n, int *frames)
{
    struct rdstate *rd = &c->rd;
    size_t off = 0;
    int st = SS_OK;
    uint32_t epoch = c->epoch;
    while (off < n && st == SS_OK && !c->closing && c->fd >= 0) { /* (a kind may close c itself) */
        if (rd->phase == RD_BODY) {
            size_t k = (size_t)QG_MIN((uint64_t)(n - off), rd->left);
            st = body(g, c, p + off, k);
            off += k;
            continue;
        }
        if (n - off < KIPC_HDR_LEN)
            break; /* a header cut short */
        if (over_budget(g, c, *frames)) {
            conn_backlog_add_loop(g, c);
            break;
        }
        struct kipc_hdr h;
        if ((st = header(g, c, p + off, &h)) == SS_WAIT)
            break; /* its header and what follows wait in c->in */
        if (st != SS_OK)
            return st;
        if (rd->route == SR_STREAM && n - off >= h.len) { /* all of it in this read: on in one piece */
            rd->phase = RD_BODY;
            rd->left = 0;
            peek_add(rd, p + off + KIPC_HDR_LEN, (size_t)h.len - KIPC_HDR_LEN);
            deliver(g, c, p + off, (size_t)h.len);
            off += (size_t)h.len;
            st = c->closing || c->fd < 0 ? SS_STOP : message_end(g, c);
            continue;
        }
        if (rd->route != SR_WHOLE) {
            body_begins(g, c, p + off, &h);
            off += KIPC_HDR_LEN;
            continue;
        }
        if (n - off < h.len) { /* not all come: gathered in c->in, which grows with what comes (its
                                * declared length is not reserved: a header alone holds nothing) */
            rd->phase = RD_WHOLE;
            rd->len = h.len;
            break;
        }
        uint8_t *msg = malloc((size_t)h.len);
        if (!msg)
            return stream_close(c, "out of memory");
        memcpy(msg, p + off, (size_t)h.len);
        off += (size_t)h.len;
        st = whole(g, c, &h, msg, frames);
    }
    if (c->epoch != epoch) /* closed by a handler (a worker: its struct reconnects): the rest was the */
        return SS_STOP;    /* old socket's, never the next one's */
    if ((st != SS_OK && st != SS_WAIT) || c->closing)
        return st; /* the rest is dropped: the kind reads nothing more */
    if (off < n) {
        if (inbuf_reserve(&c->in, n - off))
            return stream_close(c, "out of memory");
        memcpy(c->in.p + c->in.len, p + off, n - off);
        c->in.len += n - off;
    }
    return st;
}

/* Frame what c's input buffer holds (a header cut short, a whole message gathered, messages a
 * budget left). */
static int frame_buffered(struct gw *g, struct conn *c, int *frames)
{
    struct rdstate *rd = &c->rd;
    struct inbuf *in = &c->in;
    int st = SS_OK;
    uint32_t epoch = c->epoch;
    while (inbuf_avail(in) && st == SS_OK && !c->closing) { /* (a client that has left: its socket too) */
        if (rd->phase == RD_BODY) { /* left over from a read that ended in a budget's stop */
            size_t k = (size_t)QG_MIN((uint64_t)inbuf_avail(in), rd->left);
            st = body(g, c, inbuf_data(in), k);
            if (c->epoch != epoch) /* closed by its handler: its input went with the socket */
                return SS_STOP;
            if (!c->closing)
                inbuf_consume(in, k);
            continue;
        }
        struct kipc_hdr h;
        if (rd->phase == RD_WHOLE) { /* its header was routed: the rest is awaited */
            if (inbuf_avail(in) < rd->len)
                break;
            h.le = inbuf_data(in)[0];
            h.type = inbuf_data(in)[1];
            h.compressed = inbuf_data(in)[2];
            h.len = rd->len;
        } else {
            if (inbuf_avail(in) < KIPC_HDR_LEN)
                break;
            if (over_budget(g, c, *frames)) {
                conn_backlog_add_loop(g, c);
                break;
            }
            if ((st = header(g, c, inbuf_data(in), &h)) != SS_OK)
                break;
            if (rd->route != SR_WHOLE) {
                uint8_t hdr[KIPC_HDR_LEN];
                memcpy(hdr, inbuf_data(in), KIPC_HDR_LEN);
                inbuf_consume(in, KIPC_HDR_LEN);
                body_begins(g, c, hdr, &h);
                continue;
            }
            if (inbuf_avail(in) < h.len) { /* (grows with what comes, as above) */
                rd->phase = RD_WHOLE;
                rd->len = h.len;
                break;
            }
        }
        uint8_t *msg = inbuf_take(in, (size_t)h.len);
        if (!msg)
            return stream_close(c, "out of memory");
        st = whole(g, c, &h, msg, frames);
    }
    if (c->epoch != epoch)
        return SS_STOP;
    if (st == SS_STOP && !c->closing)
        inbuf_free(in); /* the rest is dropped, as frame_span drops it: the kind reads nothing more */
    if (st == SS_OK && !c->closing && rd->phase != RD_WHOLE)
        inbuf_release_idle(in);
    return st;
}

/* What a read (or the backlog) brought has been framed: the kind goes on (with what came
 * before a message that waits, too). */
static int framed(struct gw *g, struct conn *c, int st)
{
    if ((st != SS_OK && st != SS_WAIT) || c->closing || !conn_ops(c)->on_framed)
        return st;
    int k = conn_ops(c)->on_framed(g, c);
    return k == SS_OK ? st : k;
}

/* Raw input has come: to the kind, then (when that made the connection framed) what followed
 * it is framed. */
static int raw(struct gw *g, struct conn *c, int *frames)
{
    int st = conn_ops(c)->on_bytes(g, c);
    if (st == SS_OK && c->framed && !c->closing && !c->in_backlog)
        st = framed(g, c, frame_buffered(g, c, frames));
    return st;
}

void stream_frame_loop(struct gw *g, struct conn *c)
{
    int frames = 0;
    if (c->closing || c->in_job)
        return;
    if (!c->framed) {
        if (inbuf_avail(&c->in))
            act(g, c, raw(g, c, &frames));
        return;
    }
    act(g, c, framed(g, c, frame_buffered(g, c, &frames)));
}

void stream_backlog_loop(struct gw *g)
{
    struct conn *x;
    for (int n = g->nclients + 1; n > 0 && (x = conn_backlog_pop_loop(g)); n--)
        stream_frame_loop(g, x); /* may put it back, at the tail */
    if (!TAILQ_EMPTY(&g->backlog)) /* (what is left, workers that had a job too: the next iteration) */
        loop_due_loop(g, LOOP_DUE_BACKLOG);
}

void stream_drop_rest_loop(struct conn *c)
{
    struct rdstate *rd = &c->rd;
    if (rd->phase == RD_WHOLE) { /* what was gathered of it goes; the rest is read and dropped */
        rd->left = rd->len - inbuf_avail(&c->in);
        inbuf_free(&c->in);
        rd->phase = RD_BODY;
    }
    rd->route = SR_DROP;
    rd->to = NULL;
}

/* ---- reading: the socket ------------------------------------------------------------------- */

/* Splice a streamed body from c's socket into its receiver's pipe, inside the kernel: only for
 * a big response whose first bytes were read (its peek), and only when nothing is queued in
 * the receiver's out (the pipe goes ahead of it). Returns bytes moved, 0 when splicing does
 * not apply or nothing came, -1 when reading must stop. */
static ssize_t splice_body(struct gw *g, struct conn *c, size_t budget)
{
    struct rdstate *rd = &c->rd;
    struct conn *to = rd->to;
    if (!g->cfg.splice || rd->phase != RD_BODY || rd->route != SR_STREAM || rd->type != KIPC_RESPONSE ||
        rd->npeek < STREAM_PEEK || rd->left < SPLICE_MIN || !to || to->out.bytes || to->fd < 0 ||
        !io_of(c)->splice || inbuf_avail(&c->in))
        return 0;
    size_t room = pipe_room(to);
    if (!room) {
        if (to->has_pipe) /* full: wait for the receiver to take some */
            stream_pause_loop(g, c, to);
        return 0;
    }
    ssize_t n = io_of(c)->splice(c->fd, to->pipe_wr, (size_t)QG_MIN((uint64_t)QG_MIN(room, budget), rd->left));
    if (n == 0)
        return input_ended(g, c, 0, eof_text(c)), -1;
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        return input_ended(g, c, -1, NULL), -1;
    }
    c->last_read_ms = g->loop.now_ms;
    to->piped += (size_t)n;
    rd->left -= (uint64_t)n;
    size_t high = conn_pending(to);
    if (pipe_flush(g, to) == 0 && to->piped == to->pipe_cap)
        stream_pause_loop(g, c, to); /* the receiver is not keeping up: stop reading until it does */
    if (to->piped || conn_pending(to) < high) { /* its flush, on the list, tells its kind of this one */
        to->flush_high = QG_MAX(to->flush_high, high);
        conn_mark_dirty_loop(g, to);
    }
    if (rd->left == 0 && act(g, c, message_end(g, c)))
        return -1;
    return n;
}

/* read() into p: bytes read; 0 when the socket is empty for now; -1 when the input ended
 * (the kind was told). */
static ssize_t read_into(struct gw *g, struct conn *c, void *p, size_t want, size_t *budget)
{
    ssize_t r = io_of(c)->read(c->fd, p, want);
    if (r > 0) {
        *budget -= (size_t)r;
        c->last_read_ms = g->loop.now_ms;
        return r;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    input_ended(g, c, r, eof_text(c));
    return -1;
}

/* One read, where the message being read wants it: a big streamed body into a chunk handed on
 * whole; a message being gathered, or raw input, into c->in; anything else into g->rbuf. 1: the
 * socket may have more; 0: it is empty for now, or reading stops. */
static int read_once(struct gw *g, struct conn *c, size_t *budget, int *frames)
{
    struct rdstate *rd = &c->rd;
    struct inbuf *in = &c->in;
    size_t want;
    ssize_t r;
    if (c->framed && rd->phase == RD_BODY && !inbuf_avail(in) && rd->route == SR_STREAM &&
        QG_MIN(rd->left, (uint64_t)g->cfg.chunk_size) > sizeof g->rbuf) { /* a big body: into its own chunk */
        want = QG_MIN((size_t)QG_MIN(rd->left, (uint64_t)g->cfg.chunk_size), *budget);
        struct chunk *ch = chunk_new(want);
        if (!ch)
            return act(g, c, stream_close(c, "out of memory")), 0;
        if ((r = read_into(g, c, ch->p, want, budget)) <= 0) {
            chunk_free(ch);
            return 0;
        }
        ch->len = (size_t)r;
        if (rd->npeek < STREAM_PEEK)
            peek_add(rd, ch->p, (size_t)r);
        rd->left -= (uint64_t)r;
        deliver_chunk(g, c, ch);
        if (!rd->left && act(g, c, message_end(g, c)))
            return 0;
        return !c->closing && (size_t)r == want;
    }
    if (!c->framed || inbuf_avail(in) || rd->phase == RD_WHOLE) { /* into c->in */
        size_t avail = inbuf_avail(in);
        if (!c->framed) {
            if (avail >= conn_ops(c)->raw_max)
                return act(g, c, raw(g, c, frames)), 0; /* at its limit: the kind refuses it */
            want = conn_ops(c)->raw_max - avail;
        } else {
            want = conn_ops(c)->read_size;
            if (rd->phase == RD_WHOLE && rd->len - avail > want) /* grows with what arrives: at most */
                want = (size_t)QG_MIN(rd->len - avail, (uint64_t)QG_MAX(want, avail)); /* doubling what it holds */
        }
        want = QG_MIN(want, *budget);
        if (inbuf_reserve_upto(in, avail + want, c->framed && rd->phase == RD_WHOLE ? (size_t)rd->len : SIZE_MAX))
            return act(g, c, stream_close(c, "out of memory")), 0;
        if ((r = read_into(g, c, in->p + in->len, want, budget)) <= 0)
            return 0;
        in->len += (size_t)r;
        int st = !c->framed ? raw(g, c, frames) : c->in_backlog ? SS_OK : framed(g, c, frame_buffered(g, c, frames));
        if (act(g, c, st))
            return 0;
        return (size_t)r == want;
    }
    want = QG_MIN(QG_MIN(conn_ops(c)->read_size, sizeof g->rbuf), *budget); /* between messages, or a small body */
    if (rd->phase == RD_BODY)
        want = (size_t)QG_MIN((uint64_t)want, rd->left);
    if ((r = read_into(g, c, g->rbuf, want, budget)) <= 0)
        return 0;
    if (act(g, c, framed(g, c, frame_span(g, c, g->rbuf, (size_t)r, frames))))
        return 0;
    return (size_t)r == want;
}

void stream_read_loop(struct gw *g, struct conn *c)
{
    size_t budget = (size_t)g->cfg.read_budget;
    int frames = 0;
    /* On the backlog, a connection reads nothing until what it holds is framed: its input
     * stays within what one read budget brought (the kernel's buffer holds the rest). */
    while (budget && c->fd >= 0 && !c->closing && !c->paused && !c->in_backlog && !c->waits_room && !c->in_job) {
        ssize_t n = c->framed ? splice_body(g, c, budget) : 0;
        if (n < 0)
            return;
        if (n > 0) {
            budget -= QG_MIN((size_t)n, budget);
            continue;
        }
        if (c->paused || c->in_backlog || c->waits_room || c->in_job || !read_once(g, c, &budget, &frames))
            break;
    }
    if (budget == 0)
        g->loop.work_pending = 1;
}

void stream_read_rest_loop(struct gw *g, struct conn *c, size_t max)
{
    (void)g;
    size_t got = 0;
    while (c->fd >= 0 && got < max) {
        size_t avail = inbuf_avail(&c->in);
        if (inbuf_reserve(&c->in, avail + 65536))
            break;
        ssize_t n = io_of(c)->read(c->fd, c->in.p + c->in.len, 65536);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            break;
        if (n > 0) {
            c->in.len += (size_t)n;
            got += (size_t)n;
        }
    }
}

void stream_sent_loop(const struct conn *c, struct stream_sent *s)
{
    int queued = 0, dom = 0;
    socklen_t len = sizeof dom;
    if (c->fd < 0 || getsockopt(c->fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) < 0 || (dom != AF_INET && dom != AF_INET6) ||
        ioctl(c->fd, SIOCOUTQ, &queued) < 0 || queued < 0)
        queued = 0;
    uint64_t sent = c->out.written + c->spliced;
    s->queued = (uint64_t)queued < sent ? (uint64_t)queued : sent;
    s->acked = sent - s->queued;
    s->sent = sent;
    s->end = sent + conn_pending(c);
}

void stream_input_drop_loop(struct conn *c)
{
    inbuf_free(&c->in);
    c->rd.phase = RD_BOUNDARY;
    c->rd.route = SR_WHOLE;
    c->rd.to = NULL;
}

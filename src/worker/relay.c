/* relay.c: what runs on a worker, and where what it sends goes. A run is a client's request
 * (with the async messages right behind it and a chaser), or the broadcasts the worker owes;
 * replies stream to the client as they arrive (cut-through, through a splice pipe when they
 * are big) with backpressure, or are collected whole when a pool job must change them.
 *
 * A connection carries one request at a time (DESIGN.md, Dispatch): its reply is that
 * request's, whatever order the worker answers its connections in.
 *
 * Where a worker's message goes (struct wmsg, route):
 *   response to the running request  -> STREAM to its client (COLLECT for a pool job; DROP if
 *                                       the client has gone or was answered already)
 *   response to a chaser             -> SWALLOW
 *   async, while running a client's broadcasts -> FORWARD to that broadcast's sender
 *   async, while serving a request   -> STREAM to that request's client
 *   async, pool = session, between its client's requests -> STREAM to that client
 *   async, otherwise (pool = request, no client's request running: a timer, a subscription)
 *                                    -> DROP: it belongs to nobody; counted (w->dropped), logged
 *   sync (a callback, with .z.w)     -> STREAM to the running request's client, which answers;
 *                                       with no such client the worker gets an error
 * FORWARD collects the message whole and puts it into the client's output at a message
 * boundary (conn_push_whole_loop): another worker may be streaming to that client meanwhile.
 * Every byte put into a client's output counts against its bound: past client_high_water the
 * worker feeding it stops reading until it drains (relay_pause_for_loop). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "worker.h"
#include "alog.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "log.h"

#define BOUNDARY_READ 65536
#define ASYNC_BATCH_MAX 4096
#define SPLICE_MIN 65536

/* ---- starting a run --------------------------------------------------------------------------- */

/* The request's bytes go to the worker as they are: no copy, no decoding. */
void relay_send_request_loop(struct gw *g, struct worker *w, struct client *c, struct req *x)
{
    req_set_state_loop(g, c, x, RS_RUNNING);
    c->pending -= req_cost(x);
    x->t_run_us = g->loop.now_us;
    x->wname = w->iname;
    if (g->hooks.dispatched)
        g->hooks.dispatched(g->hooks.ctx, &w->c, c->c.id, c->c.gen, x->seq);
    struct chunk *ch = chunk_wrap(x->msg, x->off + x->len);
    x->msg = NULL;
    if (ch) {
        ch->off = x->off; /* a routed request's wrapper is not sent */
        outq_push(&w->c.out, ch);
    }
}

/* c's head, and the async messages right behind it (one chaser after them). */
static int send_head(struct gw *g, struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    if (r->type == KIPC_SYNC) {
        w->run_key = pipeline_key(g, w->grp, r);
        relay_send_request_loop(g, w, c, r);
        w->run = RUN_REQUEST;
        return 0;
    }
    int n = 0;
    for (struct req *x = r; x && x->type == KIPC_ASYNC && n < ASYNC_BATCH_MAX; x = STAILQ_NEXT(x, link), n++) {
        if (x != r && (x->state != RS_WAITING || x->unchecked || x->route || x->grp != r->grp))
            break; /* only what is ready to run here, as it is */
        relay_send_request_loop(g, w, c, x);
    }
    outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
    w->run = RUN_ASYNC;
    return 1;
}

void relay_start_loop(struct gw *g, struct worker *w, struct client *c)
{
    if (!c && fanout_run_owed_loop(g, w)) /* a .qgate.all's part, its broadcasts sent */
        return;
    w->cl = NULL;
    worker_set_state_loop(g, w, WS_BUSY); /* before the broadcasts: releasing one must not start here */
    int swallow = broadcast_send_loop(g, w, c ? 1 : 0); /* a client waits: one owed message before it, a
                                                      * round's worth (a flood drains between requests) */
    w->run = RUN_BROADCASTS;
    w->cl = c;
    if (c) {
        struct req *r = client_head(c);
        session_begin_loop(g, w, c);
        swallow += send_head(g, w, c);
        w->req_seq = r->seq;
        client_set_worker_loop(c, w);
        log_debug(w->c.name, "running %s request %llu of %s", r->type == KIPC_SYNC ? "sync" : "async",
                  (unsigned long long)r->seq, c->c.name);
    }
    w->swallow = swallow;
    w->t_start_us = g->loop.now_us;
    worker_arm_query_timer_loop(g, w);
    conn_mark_dirty_loop(g, &w->c);
}

/* ---- finishing a run ------------------------------------------------------------------------- */

/* Hand a collected reply to the pool job that transforms it for c. */
static void submit_collected(struct gw *g, struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    int plain = c->local && w->coll.len > 2 && w->coll.p[2]; /* compressed, for this host */
    int old = c->cap < 3 || plain;
    struct job *j = job_new(old ? job_check_reply : job_compress_reply, JK_REPLY);
    client_set_worker_loop(c, NULL);
    if (!j || !r) {
        job_free(j);
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    req_set_state_loop(g, c, r, RS_LOCAL);
    j->arg = c->cap;
    j->aux[0] = g->cfg.max_message;
    j->aux[1] = plain;
    j->in = w->coll.p;
    j->in_len = w->coll.len;
    w->coll = (struct inbuf){0};
    conn_submit_loop(old ? g->readers : g->writers, j, &c->c, r->seq);
}

/* What the access log says of the request c's reply answers. */
static void note_reply(struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    if (!r || r->state != RS_RUNNING)
        return;
    r->reply_len = w->reply_len;
    if (w->is_error) {
        r->outcome = ALOG_ERROR;
        free(r->etext);
        r->etext = strdup(w->etext);
    }
}

/* The run is finished on the worker: its client goes on, the worker takes the next one. */
static void request_done(struct gw *g, struct worker *w)
{
    struct client *c = w->cl;
    int64_t ran = g->loop.now_us - worker_run_began_us(w); /* not its wait behind another connection's */
    worker_run_ended_loop(g, w);
    if (w->run == RUN_REQUEST) {
        hist_add(&w->lat, (uint64_t)ran);
        pipeline_learn_loop(w->grp, w->run_key, ran);
        w->served++;
        w->errors += w->is_error;
        if (c)
            note_reply(w, c);
    }
    while (!STAILQ_EMPTY(&w->bsent)) /* their chasers came back before this reply */
        broadcast_forget_sent_loop(g, w, 0);
    w->cl = NULL;
    relay_resume_loop(g, w); /* paused for its client's output, which has its whole reply now */
    conn_timer_cancel_loop(g, &w->c, WORKER_TM);
    if (c) {
        if (w->busy == WB_COLLECTING && !c->eof)
            submit_collected(g, w, c);
        else
            client_head_done_loop(g, c);
    }
    if (w->run == RUN_FANOUT)
        fanout_part_done_loop(g, w); /* its reply, collected, goes to its fan-out */
    inbuf_free(&w->coll);
    session_run_ended_loop(g, w); /* its session goes on, or the reset query, or free */
}


/* ---- backpressure ---------------------------------------------------------------------------- */

void relay_pause_for_loop(struct gw *g, struct worker *w, struct client *c)
{
    if (w->paused)
        return;
    w->paused = 1;
    w->waits_on = c;
    conn_set_reading_loop(g, &w->c, 0);
    conn_timer_cancel_loop(g, &w->c, WORKER_TM); /* a slow client is not a slow query: client_stall_timeout watches it */
    conn_wait_on_loop(&w->c, &c->c); /* woken when c drains, or goes */
}

/* What of c's output bounds w: the bytes ahead of the message w streams into it (those held
 * behind it go once it ends: they must not stop it), or everything waiting (w puts whole
 * messages behind what is there). */
static size_t unsent_for(const struct worker *w, const struct client *c)
{
    int streams = w->msg.route == ROUTE_STREAM && w->msg.to == c;
    return streams ? c->c.out.bytes + c->c.piped : conn_pending(&c->c);
}

/* What went into c's output from w: past client_high_water, w waits for c to drain. */
static void pause_if_full(struct gw *g, struct worker *w, struct client *c)
{
    if (!w->paused && unsent_for(w, c) > (size_t)g->cfg.client_high_water) {
        relay_pause_for_loop(g, w, c);
        log_debug(w->c.name, "paused: %s has %zu bytes unsent", c->c.name, conn_pending(&c->c));
    }
}

void relay_woken_loop(struct gw *g, struct worker *w)
{
    struct client *c = w->waits_on;
    if (w->paused && c && client_takes_output(c) && unsent_for(w, c) > (size_t)g->cfg.client_low_water) {
        conn_wait_on_loop(&w->c, &c->c); /* not yet under client_low_water for it */
        return;
    }
    relay_resume_loop(g, w);
}

void relay_resume_loop(struct gw *g, struct worker *w)
{
    if (!w->paused)
        return;
    w->paused = 0;
    w->waits_on = NULL;
    if (w->c.q && w->c.q != &w->grp->idle && w->c.q != &w->grp->spare)
        conn_queue_out_loop(&w->c); /* off the waiters of the client it waited on */
    if (w->c.fd < 0)
        return;
    conn_set_reading_loop(g, &w->c, 1);
    worker_arm_query_timer_loop(g, w);
}

/* ---- routing what the worker sends ----------------------------------------------------------- */

static int collect_bytes(struct gw *g, struct worker *w, const uint8_t *p, size_t n)
{
    if (inbuf_reserve(&w->coll, w->coll.len + n)) {
        conn_close_loop(g, &w->c, "out of memory collecting a message");
        return -1;
    }
    memcpy(w->coll.p + w->coll.len, p, n);
    w->coll.len += n;
    return 0;
}

/* Bytes of the message being read, where its route says. A whole chunk streams without a copy. */
static void deliver(struct gw *g, struct worker *w, struct chunk *ch, const uint8_t *p, size_t n)
{
    struct client *c = w->msg.to;
    switch (w->msg.route) {
    case ROUTE_COLLECT:
    case ROUTE_FORWARD:
        collect_bytes(g, w, p, n);
        break;
    case ROUTE_STREAM:
        if (ch) {
            outq_push(&c->c.out, ch);
            ch = NULL;
        } else if (outq_copy(&c->c.out, p, n)) {
            conn_close_loop(g, &c->c, "out of memory");
            break;
        }
        conn_mark_dirty_loop(g, &c->c);
        pause_if_full(g, w, c);
        break;
    default: /* dropped, swallowed */
        break;
    }
    chunk_free(ch);
}

/* A live client that can be sent a message, or NULL. */
static struct client *reachable(struct gw *g, uint32_t id, uint32_t gen)
{
    struct conn *x = gen ? conn_lookup_loop(g, id, gen) : NULL;
    struct client *c = x && x->kind == CONN_CLIENT ? client_of(x) : NULL;
    return c && client_takes_output(c) ? c : NULL;
}

/* A whole message for a client other than the running request's (an idle worker's publish, a
 * broadcast's sender): into its stream at a message boundary, or dropped if it has gone. */
static void deliver_whole(struct gw *g, struct worker *w)
{
    struct client *c = reachable(g, w->msg.to_id, w->msg.to_gen);
    if (!c) {
        w->dropped++;
        inbuf_free(&w->coll);
        return;
    }
    struct chunk *ch = chunk_wrap(w->coll.p, w->coll.len);
    w->coll = (struct inbuf){0};
    if (!ch) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    conn_push_whole_loop(g, &c->c, ch);
    pause_if_full(g, w, c);
}

/* Replies that must be collected for c: to check them for an old client, to compress them for
 * a remote one, or to decompress a worker's compressed reply for a local one (q never sends
 * compressed bytes on this host; one over compress_max goes as it is). An old client's reply
 * over compress_max is refused instead (-1). */
static int needs_collect(struct gw *g, const struct client *c, const struct kipc_hdr *h)
{
    if (c->cap < 3)
        return h->len <= (uint64_t)g->cfg.compress_max ? 1 : -1;
    if (c->local && h->compressed)
        return h->len <= (uint64_t)g->cfg.compress_max;
    return g->cfg.compress && !c->local && c->cap >= 1 && !h->compressed && h->len >= KZIP_MIN_LEN &&
           h->len <= (uint64_t)g->cfg.compress_max;
}

/* The route of the running request's reply. */
static int route_reply(struct gw *g, struct worker *w, const struct kipc_hdr *h)
{
    struct client *c = w->cl;
    w->msg.first_byte = 1;
    w->is_error = 0;
    w->reply_len = h->len;
    if (w->run == RUN_FANOUT)
        return fanout_route_loop(g, w, h->len);
    if (!c || c->eof) {
        worker_set_busy_loop(g, w, WB_DRAINING);
        return ROUTE_DROP;
    }
    int nc = needs_collect(g, c, h);
    if (nc < 0) { /* too big to check for an old client: it is told, the reply drained */
        client_error_loop(g, c, client_head(c),
                          "qgate: reply too large for capability %d (%llu bytes, over compress_max)", c->cap,
                          (unsigned long long)h->len);
        w->cl = NULL; /* its reply is made: a loss now touches nothing */
        client_set_worker_loop(c, NULL);
        worker_set_busy_loop(g, w, WB_DRAINING);
        return ROUTE_DROP;
    }
    worker_set_busy_loop(g, w, nc ? WB_COLLECTING : WB_RELAYING); /* collected: grown as bytes arrive */
    w->msg.to = c;
    return nc ? ROUTE_COLLECT : ROUTE_STREAM;
}

/* An async message nobody is owed: dropped, counted, said (at most once a second). */
static int drop_async(struct gw *g, struct worker *w, const char *why)
{
    w->dropped++;
    log_limited(&w->grp->dropped_log, g->loop.now_ms, LOG_WARN, w->c.name,
                "async message %s: dropped (a worker that publishes to its subscribers belongs in a "
                "pool = session group)", why);
    return ROUTE_DROP;
}

/* An async message: to the sender of the broadcasts running, else the running request's
 * client, else a session's client; else it belongs to nobody. */
static int route_async(struct gw *g, struct worker *w)
{
    if (!STAILQ_EMPTY(&w->bsent)) {
        const struct bnode *b = STAILQ_FIRST(&w->bsent);
        if (!reachable(g, b->cl_id, b->cl_gen))
            return drop_async(g, w, "for the sender of a broadcast that has gone");
        w->msg.to_id = b->cl_id;
        w->msg.to_gen = b->cl_gen;
        return ROUTE_FORWARD;
    }
    struct client *c = w->st == WS_BUSY ? w->cl : w->st == WS_PINNED ? w->sess : NULL;
    if (c && client_takes_output(c) && (c == w->cl || c->st == CS_READY)) { /* a session's client
                                     * that sent a bad message gets what it is owed, nothing new */
        w->msg.to = c;
        return ROUTE_STREAM;
    }
    if (c || (w->st == WS_BUSY && (w->run == RUN_REQUEST || w->run == RUN_ASYNC)))
        return drop_async(g, w, "for a client that has gone");
    if (w->st == WS_BUSY && w->run == RUN_FANOUT) /* a .qgate.all's client gets the merged replies, nothing else */
        return drop_async(g, w, "while it ran its part of a .qgate.all");
    return drop_async(g, w, w->grp->cfg.pool_mode == CFG_POOL_SESSION ? "while given to no client's session"
                                                                      : "while it ran no client's request (pool = request)");
}

/* A callback (a sync request with .z.w): the running request's client answers it, if it reads;
 * otherwise (none, or a broadcast's sender, which waits for nothing) the worker is told so. */
static int route_callback(struct gw *g, struct worker *w)
{
    struct client *c = w->cl;
    if (w->st == WS_BUSY && w->run == RUN_REQUEST)
        pipeline_calls_back_loop(w->grp, w->run_key); /* nothing goes to its worker while it runs again */
    if (c && w->st == WS_BUSY && c->st == CS_READY && STAILQ_EMPTY(&w->bsent) &&
        client_callback_loop(g, c, &w->c) == 0) {
        w->in_call = 1; /* until it sends again, having had the answer */
        w->msg.to = c;
        return ROUTE_STREAM;
    }
    outq_copy(&w->c.out, g->no_client_err, g->no_client_err_len);
    conn_mark_dirty_loop(g, &w->c);
    return ROUTE_DROP;
}

/* A whole header has arrived: decide where the message goes. -1 if the worker is broken. */
static int on_header(struct gw *g, struct worker *w)
{
    struct kipc_hdr h;
    const char *why;
    if (kipc_hdr_parse(w->msg.hdr, 8, (uint64_t)g->cfg.max_message, &h, &why) != QG_OK) {
        char text[96];
        snprintf(text, sizeof text, "bad message header from the worker: %s", why);
        conn_close_loop(g, &w->c, text);
        return -1;
    }
    w->msg.type = h.type;
    w->msg.left = h.len - 8;
    w->in_call = 0; /* it sends: whatever it waited for has come */
    w->msg.first_byte = 0;
    int route = ROUTE_DROP;
    if (h.type == KIPC_RESPONSE && w->st == WS_BUSY)
        route = w->swallow > 0 ? ROUTE_SWALLOW : route_reply(g, w, &h);
    else if (h.type == KIPC_ASYNC)
        route = route_async(g, w);
    else if (h.type == KIPC_SYNC)
        route = route_callback(g, w);
    if (w->c.fd < 0) /* closed while routing */
        return -1;
    w->msg.route = (uint8_t)route;
    if (route == ROUTE_STREAM)
        w->msg.to->c.streaming = 1; /* nothing else goes into its stream until this message ends */
    else
        w->msg.to = NULL;
    return 0;
}

static void on_message_end(struct gw *g, struct worker *w)
{
    w->msg.hdr_have = 0;
    if (w->msg.route == ROUTE_FORWARD)
        deliver_whole(g, w);
    else if (w->msg.route == ROUTE_STREAM) {
        conn_stream_end_loop(g, &w->msg.to->c);
        if (w->msg.to->st == CS_FLUSHING)
            conn_mark_dirty_loop(g, &w->msg.to->c); /* its flush sees whether it may linger now */
    }
    int route = w->msg.route;
    w->msg.route = ROUTE_DROP;
    w->msg.to = NULL;
    if (w->msg.type != KIPC_RESPONSE || w->st != WS_BUSY)
        return;
    if (route == ROUTE_SWALLOW) {
        broadcast_forget_sent_loop(g, w, 0); /* a chaser came back: one client's broadcasts before it ran */
        if (--w->swallow == 0 && w->run != RUN_REQUEST)
            request_done(g, w);
        return;
    }
    request_done(g, w);
}

/* Route the bytes of one read: headers, then message bodies, message by message. */
static void route_read(struct gw *g, struct worker *w, struct chunk *ch)
{
    struct wmsg *m = &w->msg;
    const uint8_t *p = ch->p;
    size_t n = ch->len, off = 0;
    while (off < n && w->c.fd >= 0) {
        if (m->hdr_have < 8) {
            size_t k = QG_MIN(8u - m->hdr_have, n - off);
            memcpy(m->hdr + m->hdr_have, p + off, k);
            m->hdr_have = (uint8_t)(m->hdr_have + k);
            off += k;
            if (m->hdr_have < 8 || on_header(g, w))
                break;
            deliver(g, w, NULL, m->hdr, 8); /* a body follows: a header claims at least one byte */
            continue;
        }
        size_t k = (size_t)QG_MIN((uint64_t)(n - off), m->left);
        if (m->first_byte && k) {
            w->is_error = p[off] == (uint8_t)KT_ERROR;
            m->first_byte = 0;
            if (w->is_error) /* its text, as far as this read has it */
                snprintf(w->etext, sizeof w->etext, "%.*s", (int)QG_MIN(k - 1, sizeof w->etext - 1),
                         (const char *)p + off + 1);
        }
        if (off == 0 && k == n) {
            deliver(g, w, ch, p, k);
            ch = NULL;
        } else {
            deliver(g, w, NULL, p + off, k);
        }
        off += k;
        m->left -= k;
        if (m->left == 0)
            on_message_end(g, w);
    }
    chunk_free(ch);
}

/* Move reply bytes from the worker's socket to the client's inside the kernel, through the
 * client's pipe: only for the body of a streamed reply whose first byte was seen, and only when
 * nothing is queued in the client's out (the pipe goes ahead of it). Returns bytes moved, 0
 * when splicing does not apply or nothing came, -1 if the worker connection was closed. */
static ssize_t splice_body(struct gw *g, struct worker *w, size_t budget)
{
    struct client *c = w->msg.to;
    const struct wmsg *m = &w->msg;
    if (!g->cfg.splice || m->route != ROUTE_STREAM || m->type != KIPC_RESPONSE || m->first_byte ||
        m->hdr_have < 8 || m->left < SPLICE_MIN || c->c.out.bytes || c->c.fd < 0)
        return 0;
    size_t room = conn_pipe_room_loop(&c->c);
    if (!room) {
        if (c->c.has_pipe) /* full: wait for the client to take some */
            relay_pause_for_loop(g, w, c);
        return 0;
    }
    ssize_t n = splice(w->c.fd, NULL, c->c.pipe_wr, NULL, (size_t)QG_MIN((uint64_t)QG_MIN(room, budget), m->left),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == 0) {
        conn_close_loop(g, &w->c, "worker closed the connection");
        return -1;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        conn_close_loop(g, &w->c, strerror(errno));
        return -1;
    }
    c->c.piped += (size_t)n;
    w->msg.left -= (uint64_t)n;
    if (conn_pipe_flush_loop(g, &c->c) == 0 && c->c.piped == c->c.pipe_cap)
        relay_pause_for_loop(g, w, c); /* the client is not keeping up: stop reading until it does */
    if (c->c.piped)
        conn_mark_dirty_loop(g, &c->c);
    if (w->msg.left == 0)
        on_message_end(g, w);
    return n;
}

/* One read into a chunk the size the message being read wants, routed. 1: the socket may have
 * more; 0: it is empty for now; -1: the connection was closed. */
static int read_chunk(struct gw *g, struct worker *w, size_t *budget)
{
    const struct wmsg *m = &w->msg;
    size_t want = m->hdr_have == 8 && m->left ? (size_t)QG_MIN(m->left, (uint64_t)g->cfg.chunk_size)
                                              : (size_t)QG_MIN(BOUNDARY_READ, g->cfg.chunk_size);
    want = QG_MIN(want, *budget);
    /* a read that may end a small message goes to rbuf, then into a chunk of what came: no
     * 64 KiB block taken and given back (and the heap's top moved) per small reply */
    int small = want <= sizeof g->rbuf;
    struct chunk *ch = small ? NULL : chunk_new(want);
    if (!small && !ch) {
        conn_close_loop(g, &w->c, "out of memory");
        return -1;
    }
    ssize_t r = read(w->c.fd, small ? g->rbuf : ch->p, want);
    if (r <= 0) {
        chunk_free(ch);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        conn_close_loop(g, &w->c, r == 0 ? "worker closed the connection" : strerror(errno));
        return -1;
    }
    if (small && !(ch = chunk_new((size_t)r))) {
        conn_close_loop(g, &w->c, "out of memory");
        return -1;
    }
    if (small)
        memcpy(ch->p, g->rbuf, (size_t)r);
    ch->len = (size_t)r;
    *budget -= (size_t)r;
    if (w->st == WS_BUSY)
        worker_arm_query_timer_loop(g, w);
    route_read(g, w, ch);
    return (size_t)r == want;
}

void relay_read_loop(struct gw *g, struct worker *w)
{
    size_t budget = (size_t)g->cfg.read_budget;
    while (budget && w->c.fd >= 0 && !w->paused) {
        ssize_t n = splice_body(g, w, budget);
        if (n < 0)
            return;
        if (n > 0) {
            budget -= QG_MIN((size_t)n, budget);
            if (w->st == WS_BUSY)
                worker_arm_query_timer_loop(g, w);
            continue;
        }
        if (w->paused)
            break;
        int more = read_chunk(g, w, &budget);
        if (more < 0)
            return;
        if (!more)
            break;
    }
    if (budget == 0)
        g->loop.work_pending = 1;
}

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
#include "stream.h"
#include "alog.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "log.h"

#define ASYNC_BATCH_MAX 4096

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
    stream_resume_loop(g, &w->c); /* paused for its client's output, which has its whole reply now */
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


/* ---- routing what the worker sends ----------------------------------------------------------- */

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
    stream_check_bound_loop(g, &w->c, &c->c);
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
    w->msg.reply = 1; /* its first bytes tell whether it is a q error */
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

/* ---- what the stream hands it ------------------------------------------------------------------ */

/* A message's header has arrived: where it goes. */
int relay_header_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h)
{
    struct worker *w = worker_of(x);
    w->msg.reply = 0;
    w->in_call = 0; /* it sends: whatever it waited for has come */
    int route = ROUTE_DROP;
    if (h->type == KIPC_RESPONSE && w->st == WS_BUSY)
        route = w->swallow > 0 ? ROUTE_SWALLOW : route_reply(g, w, h);
    else if (h->type == KIPC_ASYNC)
        route = route_async(g, w);
    else if (h->type == KIPC_SYNC)
        route = route_callback(g, w);
    if (w->c.fd < 0 || w->c.closing) /* closed while routing */
        return SS_STOP;
    w->msg.route = (uint8_t)route;
    if (route == ROUTE_STREAM) {
        stream_route(x, SR_STREAM, &w->msg.to->c);
    } else {
        w->msg.to = NULL;
        stream_route(x, route == ROUTE_COLLECT || route == ROUTE_FORWARD ? SR_WHOLE : SR_DROP, NULL);
    }
    return SS_OK;
}

int relay_bad_header_loop(struct gw *g, struct conn *x, const char *why)
{
    (void)g;
    return stream_close(x, "bad message header from the worker: %s", why);
}

/* The message has ended (streamed, dropped, or whole in w->coll). */
static int message_done(struct gw *g, struct worker *w)
{
    const struct rdstate *rd = &w->c.rd;
    if (w->msg.reply && rd->npeek) { /* a q error: its text, for the access log */
        w->is_error = rd->peek[0] == (uint8_t)KT_ERROR;
        if (w->is_error)
            snprintf(w->etext, sizeof w->etext, "%.*s", (int)QG_MIN(rd->npeek - 1u, sizeof w->etext - 1),
                     (const char *)rd->peek + 1);
    }
    if (w->msg.route == ROUTE_FORWARD)
        deliver_whole(g, w);
    else if (w->msg.route == ROUTE_STREAM && w->msg.to->st == CS_FLUSHING)
        conn_mark_dirty_loop(g, &w->msg.to->c); /* its flush sees whether it may linger now */
    int route = w->msg.route;
    w->msg.route = ROUTE_DROP;
    w->msg.to = NULL;
    w->msg.reply = 0;
    if (rd->type != KIPC_RESPONSE || w->st != WS_BUSY)
        return SS_OK;
    if (route == ROUTE_SWALLOW) {
        broadcast_forget_sent_loop(g, w, 0); /* a chaser came back: one client's broadcasts before it ran */
        if (--w->swallow == 0 && w->run != RUN_REQUEST)
            request_done(g, w);
        return SS_OK;
    }
    request_done(g, w);
    return SS_OK;
}

int relay_end_loop(struct gw *g, struct conn *x) { return message_done(g, worker_of(x)); }

/* A message gathered whole: a reply to transform, or a message for a client at a boundary. */
int relay_message_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h, uint8_t *msg)
{
    struct worker *w = worker_of(x);
    inbuf_free(&w->coll);
    w->coll = (struct inbuf){.p = msg, .len = (size_t)h->len, .cap = (size_t)h->len};
    if (w->msg.route != ROUTE_COLLECT && w->msg.route != ROUTE_FORWARD) /* dropped meanwhile */
        inbuf_free(&w->coll);
    return message_done(g, w);
}

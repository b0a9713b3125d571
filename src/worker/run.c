/* run.c: what runs on a worker connection, and where what the worker sends goes. A run
 * (struct run) is a client's request (with the async messages right behind it and a chaser),
 * the broadcasts the worker owes, or a part of a .qgate.all; it begins when its bytes are queued
 * for the worker (run_begin_loop) and ends when the worker has answered the last of them
 * (run_end), and the group's mode (struct group_mode: plain, session.c, pipeline.c) says what
 * the worker does next. A plain request's run enters no other file of the worker side:
 * broadcasts, fan-out parts, sessions and pipelining are entered only when a worker owes them
 * or its group's mode is theirs.
 *
 * A connection carries one request at a time (docs/design.md, Dispatch): its reply is that
 * request's, whatever order the worker answers its connections in.
 *
 * Where a worker's message goes (struct wmsg, route; the stream moves its bytes):
 *   response to the running request  -> STREAM to its client (COLLECT for a pool job; DROP if
 *                                       the client has gone or was answered already)
 *   response to a chaser             -> SWALLOW (one the worker answered from inside a callback of
 *                                       the run proves nothing: another goes once the callbacks
 *                                       are answered and nothing sent nested is owed, and its
 *                                       reply ends the run)
 *   async, while running a client's broadcasts -> FORWARD to that broadcast's sender
 *   async, while serving a request   -> STREAM to that request's client
 *   async, pool = session, between its client's requests -> STREAM to that client
 *   async, otherwise (pool = request, no client's request running: a timer, a subscription)
 *                                    -> DROP: it belongs to nobody; counted (w->dropped), logged
 *   sync (a callback, with .z.w)     -> STREAM to the running request's client, which answers;
 *                                       with no such client the worker gets an error
 *   response to what that client sent nested meanwhile (q runs it in h x: run.nested counts
 *   them)                            -> STREAM to that client, made fit as a publish is; the
 *                                       run goes on (the innermost's first, the run's own last)
 * FORWARD collects the message whole and puts it into the client's output at a message
 * boundary (conn_push_whole_loop): another worker may be streaming to that client meanwhile.
 * A publish or callback for a client that cannot take it as it is (capability below 3: checked
 * for what it cannot carry; compressed, to a client on this host or of capability 0:
 * decompressed), as its replies are made fit, goes CHANGE instead: collected whole, made fit by
 * a reader (job_check_reply), then put into the client's output as FORWARD does; the worker
 * reads nothing more until then, so its messages keep their order. What cannot be made fit
 * (a guid for capability 2, say, where q would signal 'type at the sender) is dropped, or for
 * a callback answered to the worker with that error.
 * Every byte put into a client's output counts against its bound: past client_high_water the
 * worker feeding it stops reading until it drains (stream_check_bound_loop).
 *
 * And the other side going: a run's client (its reply drained, a callback's caller told), or
 * its worker (every client whose request it ran told, as if its q had died, or closed if a
 * message to it was cut). */
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
#include "stats.h"
#include "log.h"

#define ASYNC_BATCH_MAX 4096

/* ---- starting a run --------------------------------------------------------------------------- */

/* The request's bytes go to the worker as they are: no copy, no decoding. They count against
 * pending_max until written to its socket (a worker that reads nothing holds them). */
void run_send_request_loop(struct gw *g, struct worker *w, struct client *c, struct req *x)
{
    request_set_state_loop(g, c, x, RS_RUNNING);
    c->pending -= req_cost(x);
    x->t_run_us = loop_stamp_us_loop(g);
    x->wname = w->iname;
    if (g->hooks.dispatched)
        g->hooks.dispatched(g->hooks.ctx, &w->c, c->c.id, c->c.gen, x->seq);
    struct chunk *ch = chunk_wrap(x->msg, x->off + x->len);
    x->msg = NULL;
    if (ch) {
        ch->off = x->off; /* a routed request's wrapper is not sent */
        ch->held = x->held; /* a compressed route's, inflated: counted until written */
        ch->pending = req_count_take(x);
        outq_push(&w->c.out, ch);
    } else {
        buf_held_sub(x->held);
        request_sent_loop(g, x);
    }
    x->held = 0;
}

/* ---- callbacks in a run a chaser ends ---------------------------------------------------------- */

/* w, in a run a chaser ends (async messages, broadcasts), calls back (a sync message): the chasers
 * out now run inside that callback, and their replies say nothing of the run's end. */
static void callback_sent(struct gw *g, struct worker *w);

static void called_back(struct gw *g, struct worker *w)
{
    if (w->st != WS_BUSY || w->run.kind == RUN_REQUEST || w->run.kind == RUN_FANOUT)
        return;
    w->run.cb_open++;
    callback_sent(g, w);
    if (w->run.swallow > 0)
        w->run.chase_dirty = 1;
}

static void chase_again(struct gw *g, struct worker *w)
{
    w->run.chase_owed = w->run.chase_dirty = 0;
    w->run.rechased = 1;
    w->run.swallow++;
    outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
    conn_mark_dirty_loop(g, &w->c);
    log_debug(w->c.name, "its callbacks answered: a chaser again (the last came back from inside one)");
}

/* A chaser owed goes once every callback is answered and nothing sent nested is unanswered: a
 * chaser's reply and one to a message sent nested cannot be told apart, so one goes only where
 * the order of the worker's replies says which is which (its reply before those of what is
 * sent nested after it: swallow_first). */
static void chase_when_clear(struct gw *g, struct worker *w)
{
    if (w->st == WS_BUSY && (w->run.kind == RUN_ASYNC || w->run.kind == RUN_BROADCASTS) && w->run.chase_owed &&
        w->run.cb_open == 0 && w->run.nested == 0)
        chase_again(g, w);
}

/* An answer to one of w's callbacks is queued for it (the client's, or an error in its place). */
static void call_answered(struct gw *g, struct worker *w)
{
    if (w->st != WS_BUSY || w->run.cb_open <= 0)
        return;
    w->run.cb_open--;
    chase_when_clear(g, w);
}

/* c's head, and the async messages right behind it (one chaser after them). */
static int send_head(struct gw *g, struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    if (r->type == KIPC_SYNC) {
        r->key = query_run_loop(g, r->grp->queries, r->msg + r->off, r->len); /* .qgate.queries[], pipelining */
        if (g->cfg.access_log_query == CFG_AQ_TEXT && g->alogw && !r->qtext && (r->qtext = malloc(QUERY_TEXT)))
            query_text(r->qtext, r->msg + r->off, r->len); /* (no memory: the line goes without it) */
        w->run.key = group_learn_key(r->grp, r->key, r->len);
        run_send_request_loop(g, w, c, r);
        w->run.kind = RUN_REQUEST;
        return 0;
    }
    int n = 0;
    for (struct req *x = r; x && n < ASYNC_BATCH_MAX; x = TAILQ_NEXT(x, link), n++) {
        if (x != r && !request_runs_as_is_loop(x, r->grp))
            break; /* only what is ready to run here, as it is: start_head takes the rest */
        run_send_request_loop(g, w, c, x);
    }
    outq_copy(&w->c.out, g->chaser, sizeof g->chaser);
    w->run.kind = RUN_ASYNC;
    return 1;
}

/* ---- the run's phase: what its reply has come to ------------------------------------------------ */

#define ST_NAME(e) #e,
static const char *const phase_names[] = {BUSY_STATES(ST_NAME)};
#undef ST_NAME
#define TO(s) (1u << WB_##s)
static const unsigned phase_allowed[] = {
    [WB_SENT] = TO(CALLED) | TO(RELAYING) | TO(COLLECTING) | TO(DRAINING) | TO(TIMEDOUT),
    [WB_CALLED] = TO(SENT) | TO(DRAINING) | TO(TIMEDOUT),
    [WB_RELAYING] = TO(DRAINING) | TO(TIMEDOUT),
    [WB_COLLECTING] = TO(DRAINING) | TO(TIMEDOUT),
    [WB_DRAINING] = TO(TIMEDOUT),
    [WB_TIMEDOUT] = 0,
};
#undef TO

static void fanout_call_back(struct gw *g, const struct worker *w);
static struct worker *lead_of(const struct worker *w);

/* The one setter of a run's phase; a change the table does not allow counts in
 * g->bad_transitions (tests/sim requires it to stay 0). */
void run_set_phase_loop(struct gw *g, struct worker *w, enum worker_busy b)
{
    if (w->run.phase == b)
        return;
    if (w->run.phase == WB_CALLED && w->run.kind == RUN_FANOUT)
        fanout_call_back(g, w);
    int ok = w->st == WS_BUSY && ((phase_allowed[w->run.phase] >> b) & 1);
    if (ok) {
        log_debug(w->c.name, "busy %s -> %s", phase_names[w->run.phase], phase_names[b]);
        if (b == WB_CALLED)
            callback_sent(g, w);
    } else {
        g->bad_transitions++;
        log_error(w->c.name, "busy %s -> %s is not in run.c's table", phase_names[w->run.phase], phase_names[b]);
    }
    if (w->run.phase == WB_SENT && !w->run.begun_at) { /* its reply, or its callback, has come: a count,
                                                      * no clock read on every run's way */
        const struct worker *lead = lead_of(w);
        w->run.begun_at = 1 + (lead ? lead->ends : 0);
    }
    w->run.phase = (uint8_t)b;
}

/* ---- the query timer ------------------------------------------------------------------------- */

/* The first of the group's connections to w's q (slot 0; w itself when it is). */
static struct worker *lead_of(const struct worker *w)
{
    struct worker *x = (struct worker *)w; /* (the group's list holds them as its own) */
    while (x && x->slot) {
        struct worker *p = TAILQ_PREV(x, workerlist, glink);
        x = p && !strcmp(p->addr, w->addr) ? p : NULL;
    }
    return x;
}

/* pipeline: is w's run, not begun, kept from beginning by a run on another connection of its q
 * that the q has begun (its reply, or its callback, has come), and since which no run of the q
 * has ended? q runs one at a time: that time is the other's (a q writing a reply its client
 * reads slowly, or waiting in a callback). Not once another run has ended after it began: the
 * q has moved on, and what it keeps is its own (helper round 17: a reply streamed to a slow
 * reader kept a held request's clock still for the 40 s of the stream). A run that has not
 * begun keeps no other still, whichever was sent first: q runs its connections in an order of
 * its own, and of two that have not begun, each would keep the other's clock still, so a q stuck
 * on either would time neither out (helper round 15). */
static int held_behind(const struct worker *w)
{
    if (w->run.begun_at || w->run.ahead <= 0) /* (begun: back in SENT after a callback, q runs it: helper
                                               * round 18, from the code) */
        return 0;
    const struct worker *lead = lead_of(w);
    for (const struct worker *x = lead; x; x = worker_sibling(x))
        if (x != w && x->st == WS_BUSY && x->run.begun_at && x->run.begun_at == 1 + lead->ends)
            return 1;
    return 0;
}

/* pipeline: the runs of w's q's other connections that may go before a run sent to w now: q
 * runs one at a time, each connection's next in an order of its own, so the one it runs now and
 * one more of each (sent before w's or after) */
static int beside(const struct worker *w)
{
    int n = 0;
    for (const struct worker *x = lead_of(w); x; x = worker_sibling(x))
        n += x == w ? 0 : 1 + (x->st == WS_BUSY);
    return n;
}

/* x's run, not begun, does not count the time from from_ms (or its send, or the last time so
 * counted, if later) to now: its q ran another of ours. Its clock moves on by that much. */
static void move_on(struct gw *g, struct worker *x, int64_t from_ms)
{
    int64_t from = QG_MAX(QG_MAX(from_ms, x->run.sent_ms), x->run.covered_ms);
    if (g->loop.now_ms > from) {
        x->run.began_ms += g->loop.now_ms - from;
        x->run.covered_ms = g->loop.now_ms;
    }
}

/* w's run has ended with its reply (run_end: not a timeout, not a loss, which prove nothing of
 * what the q ran): q ran it from when it was sent, or when it last ended another of ours if
 * later, to now, and none of that time is the silence of a run of ours it has not begun, if
 * w's went first. So each one's clock moves on by the part of it since that run was sent (or
 * since the last such time counted), for as many runs as may go first (beside): a q that
 * answers others while it keeps one (-30!, a hold) moves that one's clock on by little, then
 * not at all, and it times out. (CI: q ran the two requests sent after one first, each 1.2 s,
 * and the first, counting none ahead as none ran when it was sent, timed out at 2 s. Helper
 * round 17: a timeout counted as an end too, and a stuck q's eight requests timed out one
 * query_timeout apart, each moving the others' clocks on.) */
static void run_ended_beside(struct gw *g, struct worker *w)
{
    for (struct worker *x = lead_of(w); x; x = worker_sibling(x)) {
        if (x == w || x->st != WS_BUSY || x->run.begun_at || x->run.ahead <= 0)
            continue;
        x->run.ahead--;
        move_on(g, x, w->run.sent_ms);
    }
}

/* Has c left (its input ended) with no reply to get? Then nothing it sent waits for an answer,
 * and its async messages timing out at their worker close it (fail_request). One that shut its
 * sending side and waits for replies reads on: its next waits, as at q (the simulation, seed 953). */
static int left_unowed(const struct client *c) { return c->eof && !request_owes_reply_loop(c); }

static struct client *reachable(struct gw *g, uint32_t id, uint32_t gen);
static int fanout_client(const struct worker *w, uint32_t *id, uint32_t *gen);

/* The client w's callback goes to: its run's, its .qgate.all's (helper round 38c: at e404dc8 a
 * part's callback was never held), or its session's. */
static struct client *callback_client(struct gw *g, const struct worker *w)
{
    uint32_t id, gen;
    if (w->run.cl)
        return w->run.cl;
    if (fanout_client(w, &id, &gen))
        return reachable(g, id, gen);
    return w->sess;
}

/* w sends its client a callback: where it begins in that client's output, and what the client
 * has received so far, the marks its way to the client is judged by (callback_hold). */
static void callback_sent(struct gw *g, struct worker *w)
{
    struct client *cb = callback_client(g, w);
    struct stream_sent s = {0};
    if (cb)
        stream_sent_loop(&cb->c, &s);
    w->cb_at = s.end;
    w->cb_acked = s.acked;
    w->cb_held = s.end > s.acked; /* bytes ahead of it: not there at once */
}

/* w's query timer is due while it waits on its callback's answer from cb. 1: the callback is still
 * on its way (the client's kernel has not acknowledged its first byte: in our output, or in the
 * socket's send buffer, *s), and cb takes bytes meanwhile (written from our output ahead of it in
 * the last query_timeout, or acknowledged since the last look): the client has not seen it; 2: it
 * has reached cb since a look that held it, or since it was sent behind other bytes (the client's
 * clock starts now: helper round 38b, at 3f24ada it counted from that look, and an answer 0.7 s
 * after arrival timed out); 0: neither (the client has had it since the last look, or took nothing
 * for query_timeout: it does not hold its worker so, 37b: with no client_stall_timeout, it held it
 * for good). Where the callback is, is judged by its own place in the output, not by what is owed
 * (38c: at e404dc8 publishes pushed whole behind it, to a client reading them, kept it "on its way"
 * for good); over a Unix socket only by what qgate has written. (36e: at e80cc18 a routed worker
 * timed out while its callback waited behind a session's messages; 37d: at f63ad4d, once in the
 * socket's buffers, a few MB behind what was ahead of it, at 1 MB/s.) What the client's kernel
 * holds unread is beyond sight, and a TCP peer acknowledges in steps of its receive window: a
 * client reading less than one step per query_timeout looks stalled. */
static int callback_hold(struct gw *g, struct worker *w, struct client *cb, struct stream_sent *s)
{
    stream_sent_loop(&cb->c, s);
    int held = w->cb_held, on_way = s->acked <= w->cb_at;
    int moved = (s->sent <= w->cb_at && g->loop.now_ms - cb->c.last_write_ms < g->cfg.query_timeout) ||
                s->acked > w->cb_acked;
    w->cb_acked = s->acked;
    w->cb_held = (uint8_t)(on_way && moved);
    return w->cb_held ? 1 : !on_way && held ? 2 : 0;
}

static void on_query_timeout(struct gw *g, struct conn *c)
{
    struct worker *w = worker_of(c);
    if (g->cfg.query_timeout <= 0) /* (a reload lifts it: run_timeouts_reloaded_loop) */
        return;
    struct client *cb;
    struct stream_sent sent;
    int hold = 0;
    int64_t due = QG_MAX(QG_MAX(w->tm_armed_ms, w->run.began_ms), c->last_read_ms) + g->cfg.query_timeout; /* a
                                     * byte came since, or it began later than it was sent */
    if (c->in_job || c->paused_any) /* not its silence: a reader has what it sent, or it waits for
                                     * its client (run_header_loop), and nothing after is read meanwhile */
        due = g->loop.now_ms + g->cfg.query_timeout;
    else if (w->run.kind == RUN_ASYNC && w->run.cb_open == 0 && w->run.cl && !left_unowed(w->run.cl)) /* a
                                     * connected client's async messages, no callback of theirs waiting
                                     * for its answer: q runs them, and the rest of them it has read, for
                                     * as long as they take; dropped, the client's next would run on
                                     * another q first (helper round 18: A3 and B before A1, A2), so its
                                     * next waits, as at q. (A client that has left with no reply to get
                                     * is closed at the timeout instead, what it sent after them
                                     * dropped: left_unowed, fail_request.
                                     * A callback's: the phase is back in SENT once the chaser behind
                                     * it is answered inside it, so its count, not the phase: 19a) */
        due = g->loop.now_ms + g->cfg.query_timeout;
    else if ((w->run.phase == WB_CALLED || w->run.cb_open > 0) && (cb = callback_client(g, w)) &&
             (hold = callback_hold(g, w, cb, &sent))) { /* its callback on its way to its client, or just
                                                         * there: callback_hold */
        if (hold == 1)
            log_debug(w->c.name, "its callback waits in %s's output (%llu bytes in its socket's send buffer): its "
                      "query_timeout waits too", cb->c.name, (unsigned long long)sent.queued);
        else
            log_debug(w->c.name, "its callback has reached %s: its query_timeout runs from now", cb->c.name);
        w->tm_armed_ms = g->loop.now_ms;
        due = g->loop.now_ms + g->cfg.query_timeout;
    } else if (held_behind(w)) { /* or it has not begun: its q runs another of ours (pipeline; that one
                                * has a clock of its own), whose time this is */
        log_debug(w->c.name, "its q runs a request of another of its connections first: its query_timeout waits "
                  "until that has ended");
        move_on(g, w, w->run.sent_ms);
        due = g->loop.now_ms + g->cfg.query_timeout;
    }
    if (due > g->loop.now_ms) {
        conn_timer_arm_loop(g, c, WORKER_TM, due, on_query_timeout);
        return;
    }
    g->query_timeouts++;
    log_warn(w->c.name, "no reply byte for %lld ms: dropping the connection", (long long)g->cfg.query_timeout);
    run_set_phase_loop(g, w, WB_TIMEDOUT); /* the loss answers 'qgate: timeout, unless a message to the client was cut */
    w->backoff = g->cfg.reconnect_min;
    conn_close_loop(g, &w->c, "query timeout");
}

void run_timeouts_reloaded_loop(struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink) {
            if (w->st != WS_BUSY || w->c.paused || w->c.fd < 0)
                continue; /* (paused: its timer waits for its client's output; resumed, armed anew) */
            if (g->cfg.query_timeout <= 0) {
                conn_timer_cancel_loop(g, &w->c, WORKER_TM);
                n++;
                continue;
            }
            if (!conn_timer_armed(&w->c, WORKER_TM)) /* (no limit until now: its clock starts now) */
                w->tm_armed_ms = g->loop.now_ms;
            conn_timer_arm_loop(g, &w->c, WORKER_TM, QG_MAX(w->tm_armed_ms, w->c.last_read_ms) + g->cfg.query_timeout,
                                on_query_timeout);
            n++;
        }
    }
    log_info(NULL, "reload: query_timeout %lld ms%s for the %d runs under way too", (long long)g->cfg.query_timeout,
             g->cfg.query_timeout > 0 ? "" : " (none)", n);
}

void run_arm_timer_loop(struct gw *g, struct worker *w)
{
    if (g->cfg.query_timeout > 0 && w->st == WS_BUSY && !w->c.paused) {
        w->tm_armed_ms = g->loop.now_ms;
        conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms + g->cfg.query_timeout, on_query_timeout);
    }
}

/* When w's run began at the worker, as far as the gateway can tell: when it was sent, or when
 * the worker last ended a run on another connection after that (q runs one at a time). */
int64_t run_began_us(const struct worker *w)
{
    if (!w->slot)
        return w->last_end_us > w->run.started_us ? w->last_end_us : w->run.started_us;
    const struct worker *lead = lead_of(w);
    return lead && lead->last_end_us > w->run.started_us ? lead->last_end_us : w->run.started_us;
}

/* ---- beginning a run --------------------------------------------------------------------------- */

void run_begin_loop(struct gw *g, struct worker *w, struct client *c)
{
    int was_asked = c != NULL;
    if (!c && !STAILQ_EMPTY(&w->fq) && fanout_run_owed_loop(g, w)) /* a .qgate.all's part, its broadcasts sent */
        return;
    /* A worker owing broadcasts while clients wait takes turns: one owed broadcast (the client
     * stays queued), then a request. Never both on the connection at once: a worker may answer
     * its sync messages in any order (-30!), and the chaser's reply could be taken for the
     * request's, or the request's for the chaser's. */
    if (c && !STAILQ_EMPTY(&w->bq)) {
        w->client_turn = !w->client_turn;
        if (w->client_turn)
            c = NULL;
    }
    w->run = (struct run){.kind = RUN_BROADCASTS};
    worker_set_state_loop(g, w, WS_BUSY); /* before the broadcasts: releasing one must not start here */
    int swallow = STAILQ_EMPTY(&w->bq) || c ? 0 : broadcast_send_loop(g, w, was_asked ? 1 : 0); /* a client
                                                      * waits: one owed message, else a round's worth (a
                                                      * flood drains between requests) */
    w->run.cl = c;
    if (c) {
        struct req *r = client_head(c);
        if (w->grp->mode->begin)
            w->grp->mode->begin(g, w, c); /* a session's worker given to its client */
        swallow += send_head(g, w, c);
        w->run.seq = r->seq;
        client_set_worker_loop(c, w);
        log_debug(w->c.name, "running %s request %llu of %s", r->type == KIPC_SYNC ? "sync" : "async",
                  (unsigned long long)r->seq, c->c.name);
    }
    w->run.swallow = swallow;
    run_sent_loop(g, w);
    conn_mark_dirty_loop(g, &w->c);
}

void run_sent_loop(struct gw *g, struct worker *w)
{
    w->run.started_us = loop_stamp_us_loop(g);
    w->run.sent_ms = w->run.began_ms = w->run.covered_ms = g->loop.now_ms; /* (pipeline: moved on by
                                     * what its q runs on its other connections meanwhile) */
    w->run.ahead = beside(w);
    run_arm_timer_loop(g, w);
}

void run_start_loop(struct gw *g, struct conn *w, struct conn *c)
{
    run_begin_loop(g, worker_of(w), c ? client_of(c) : NULL);
}

/* ---- finishing a run ------------------------------------------------------------------------- */

/* May a message of n bytes for a client be held whole to change it? Under hold_max, or small: one
 * of HOLD_SMALL bytes or fewer always is (a worker connection holds one message at a time, so
 * these are bounded by the connections), so that a tiny reply to an old client, its query run,
 * is never refused for the big ones others hold. */
#define HOLD_SMALL 65536
static int hold_room(const struct gw *g, uint64_t n) { return n <= HOLD_SMALL || gw_hold_room(g, n); }

/* hold_max reached by c's reply r, n bytes once changed: an old client's, which must be checked,
 * is refused (0); any other goes as the worker sent it, neither decompressed nor compressed (1). */
static int hold_over(struct gw *g, struct client *c, struct req *r, uint64_t n)
{
    char why[96], text[160];
    if (c->cap < 3) {
        conn_refused_loop(g, REFUSED_HOLD_MAX, c->c.name, "%s: a reply of %llu bytes refused to capability %d",
                          gw_hold_why(g, n, why, sizeof why), (unsigned long long)n, c->cap);
        request_error_loop(g, c, r, "%s", gw_hold_error(g, n, text, sizeof text));
        return 0;
    }
    g->held_passed++;
    log_limited(&g->lim.hold, g->loop.now_ms, LOG_WARN, c->c.name, "%s: a reply of %llu bytes goes as the worker sent it",
                gw_hold_why(g, n, why, sizeof why), (unsigned long long)n);
    return 1;
}

/* j's input: the message w collected, taken from it. */
static void job_take_coll(struct job *j, struct worker *w)
{
    struct inbuf m = worker_coll_take(w);
    j->in = m.p;
    j->in_len = m.len;
    j->heavy = (uint8_t)job_heavy_msg(j->in, j->in_len);
}

/* Hand a collected reply to the pool job that transforms it for c. */
static void submit_collected(struct gw *g, struct worker *w, struct client *c)
{
    struct req *r = client_head(c);
    int zipped = w->coll.len > 2 && w->coll.p[2], plain = c->local && zipped; /* compressed, for this host */
    int old = c->cap < 3 || plain;
    client_set_worker_loop(c, NULL);
    if (!r) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    /* what the job makes: at most what came, unless it decompresses */
    size_t out = zipped && old ? kzip_uncompressed_len(w->coll.p, w->coll.len) : w->coll.len;
    if (out > w->coll.len && !hold_room(g, out)) { /* hold_max: as it came, or refused */
        if (hold_over(g, c, r, out)) {
            request_set_state_loop(g, c, r, RS_LOCAL);
            request_reply_loop(g, c, r->seq, w->coll.p, w->coll.len);
            w->coll = (struct inbuf){0};
        }
        inbuf_free(&w->coll);
        return;
    }
    struct job *j = job_new(old ? job_check_reply : job_compress_reply, JK_WREPLY);
    if (!j) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    request_set_state_loop(g, c, r, RS_LOCAL);
    r->held = w->coll.len + out; /* (its in, and its out, as the job holds them) */
    buf_held_add(r->held);
    job_args(j)->reply = (struct job_reply){.cap = c->cap, .max = g->cfg.max_message, .plain = (uint8_t)plain,
                                            .compress_max = g->cfg.compress_max};
    job_take_coll(j, w);
    conn_submit_loop(old ? g->readers : g->writers, j, &c->c, r->seq);
}

/* What the access log says of the request c's reply answers. */
static void note_reply(struct worker *w, struct client *c, int64_t began_us)
{
    struct req *r = client_head(c);
    if (!r || r->state != RS_RUNNING)
        return;
    r->t_began_us = began_us;
    r->reply_len = w->run.reply_len;
    if (w->run.is_error) {
        r->outcome = ALOG_ERROR;
        free(r->etext);
        r->etext = strdup(w->run.etext);
    }
}

/* The run has ended on the worker: its client goes on, the worker does what its group's mode
 * says (the next request, its session's, the reset query, or it goes). */
static void run_end(struct gw *g, struct worker *w)
{
    struct client *c = w->run.cl;
    int64_t end = loop_stamp_us_loop(g), began = run_began_us(w), ran = end - began; /* not its wait behind another connection's */
    struct worker *lead = lead_of(w);
    run_ended_beside(g, w); /* (before ends: the runs it kept still were kept till now) */
    if (lead) {
        lead->last_end_us = end;
        lead->ends++;
    }
    w->answered = 1; /* (a q that serves: its back-off is reset when this connection goes) */
    if (w->run.kind == RUN_REQUEST || w->run.kind == RUN_FANOUT) { /* (a .qgate.all's part counts as
                                                                   * its worker's request) */
        hist_add(&w->lat, (uint64_t)ran);
        if (w->run.kind == RUN_REQUEST && w->run.key) /* pipelining: how long its query runs, learned */
            query_learn_loop(w->grp->queries, w->run.key, ran);
        w->served++;
        w->errors += w->run.is_error;
        w->grp->served++; /* the group's, kept when a reload removes the worker */
        w->grp->errors += w->run.is_error;
        if (c)
            note_reply(w, c, began);
    }
    while (!STAILQ_EMPTY(&w->bsent)) /* their chasers came back before this reply */
        broadcast_forget_sent_loop(g, w, 0);
    w->run.cl = NULL;
    if (w->c.paused)
        stream_resume_loop(g, &w->c); /* paused for its client's output, which has its whole reply now */
    conn_timer_cancel_loop(g, &w->c, WORKER_TM);
    if (c) {
        if (w->run.phase == WB_COLLECTING && !client_output_gone(c))
            submit_collected(g, w, c);
        else
            request_head_done_loop(g, c);
    }
    if (w->run.kind == RUN_FANOUT) {
        fanout_call_back(g, w);
        fanout_part_done_loop(g, w); /* its reply, collected, goes to its fan-out */
    }
    if (w->coll.p)
        inbuf_free(&w->coll);
    if (w->run.reset) { /* its reset query has run: what its sessions left is gone */
        w->dirty = 0;
        free(w->reset_q);
        w->reset_q = NULL;
    }
    if (!w->sess && !w->run.reset)
        w->foreign = 1;
    /* what its group's mode does next; a worker given to a session (or owing its reset) keeps to
     * the session's way even if a reload has changed its group's pool since */
    (w->sess || w->reset_owed || w->renew ? &session_mode : w->grp->mode)->end(g, w);
}

/* The plain mode's end of a run: the worker takes the next request, or goes if a reload
 * removed it, once it has run what it was given before (a .qgate.all's part, broadcasts: idle,
 * dispatch runs them and no request). */
static void plain_end(struct gw *g, struct worker *w)
{
    if (w->removed && !w->c.owes)
        conn_close_loop(g, &w->c, "removed from the configuration");
    else
        worker_set_state_loop(g, w, WS_IDLE);
}

/* The idle connection of grp that takes its next request: the first (idle longest) in rotation. */
struct conn *run_idle_first_loop(struct gw *g, struct group *grp)
{
    (void)g;
    for (struct conn *x = connq_first(&grp->idle); x; x = connq_next(x)) /* (one idle out of rotation
                                                                        * runs only what it owes) */
        if (worker_takes_work(worker_of(x)))
            return x;
    return NULL;
}

const struct group_mode run_plain_mode = {
    .name = "request",
    .idle_first = run_idle_first_loop,
    .end = plain_end,
};

const struct group_mode *run_mode_of(const struct group *grp)
{
    if (grp->cfg.pool_mode == CFG_POOL_SESSION)
        return &session_mode;
    return group_pipelines(grp) ? &pipeline_mode : &run_plain_mode;
}

void run_plain_end_loop(struct gw *g, struct worker *w) { plain_end(g, w); }

/* ---- routing what the worker sends ----------------------------------------------------------- */

/* A live client that can be sent a message, or NULL. */
static struct client *reachable(struct gw *g, uint32_t id, uint32_t gen)
{
    struct conn *x = gen ? conn_lookup_loop(g, id, gen) : NULL;
    struct client *c = x && x->kind == CONN_CLIENT ? client_of(x) : NULL;
    return c && client_takes_output(c) ? c : NULL;
}

/* An error for w's callback, which waits for an answer. */
static void tell_worker(struct gw *g, struct worker *w, const uint8_t *err, size_t len)
{
    outq_copy(&w->c.out, err, len);
    conn_mark_dirty_loop(g, &w->c);
    call_answered(g, w); /* (every use answers a callback of its) */
}

/* A callback of w that no client will answer: w is told so. */
static void tell_no_client(struct gw *g, struct worker *w) { tell_worker(g, w, g->no_client_err, g->no_client_err_len); }

/* Running a .qgate.all's part that is still awaited: the client of that .qgate.all (1), which
 * gets what the worker sends meanwhile as a client of that worker would. */
static int fanout_client(const struct worker *w, uint32_t *id, uint32_t *gen)
{
    const struct fanout *fo = w->st == WS_BUSY && w->run.kind == RUN_FANOUT && w->run.fp ? w->run.fp->fo : NULL;
    if (!fo)
        return 0;
    *id = fo->cl_id;
    *gen = fo->cl_gen;
    return 1;
}

/* The client of w's .qgate.all, if it owes a callback's answer, or another part's worker has a
 * callback out to it (CALLED): w's callback waits until that one is answered, so that the client
 * has one at a time. (A q
 * client in a callback that calls the gateway runs a callback it reads meanwhile nested, and
 * answers it first; answers are matched to calls in order.) */
static struct client *fanout_call_out(struct gw *g, const struct worker *w)
{
    const struct fanout *fo = w->st == WS_BUSY && w->run.kind == RUN_FANOUT && w->run.fp ? w->run.fp->fo : NULL;
    struct client *c = fo ? reachable(g, fo->cl_id, fo->cl_gen) : NULL;
    /* it owes an answer yet, and reads: one whose worker was lost or timed out meanwhile too (its
     * answer, when it comes, is matched to that call and dropped; given w's callback first, it
     * would answer that first, and w would get the other's answer) */
    if (c && c->ncalls && callback_answer_may_come_loop(g, c) && !c->gave_up)
        return c;
    for (int i = 0; fo && i < fo->n; i++) {
        const struct fpart *p = fo->part[i];
        if (p->st == FP_RUNNING && p->w != w && p->w->st == WS_BUSY && p->w->run.fp == p &&
            p->w->run.phase == WB_CALLED)
            return reachable(g, fo->cl_id, fo->cl_gen);
    }
    return NULL;
}

/* w, a .qgate.all's part, no longer has a callback out (answered, done, lost): the parts whose
 * callbacks wait for that go on. */
static void fanout_call_back(struct gw *g, const struct worker *w)
{
    uint32_t id, gen;
    struct client *c = fanout_client(w, &id, &gen) ? reachable(g, id, gen) : NULL;
    if (c)
        conn_wake_loop(g, &c->c);
}

/* The depth of the call that makes w's callback to c now (struct call): the calls c owes replies
 * to from w, up to that one, are as many as those it sent w nested and w has not answered, less
 * those sent after the one that calls back (unread yet: each runs inside the innermost callback
 * still open, so the one calling back is one deeper than that one at most). */
static int call_depth(struct gw *g, const struct worker *w, const struct client *c)
{
    int in = callback_depth_loop(g, c, &w->c, 0);
    return in >= 0 ? QG_MIN(w->run.nested, in + 1) : w->run.nested;
}

/* Does c take w's callback (to answer it: the calls are matched in the order they reach the
 * client, so taken as it goes into its output)? That of the run's client, or of the .qgate.all
 * running a part here, while it is ready. */
static int takes_call(struct gw *g, struct worker *w, struct client *c)
{
    uint32_t id, gen;
    int fan = fanout_client(w, &id, &gen);
    int mine = fan ? id == c->c.id : w->st == WS_BUSY && w->run.cl == c && STAILQ_EMPTY(&w->bsent);
    /* (a .qgate.all's parts call back one at a time, each once the last was answered: after a bad
     * message, one told no answer comes was not, and no other is passed on; at 204a891 not the
     * first either, its answer sent ahead dropped: helper round 30b) */
    return mine && callback_may_call_loop(c) && !(fan && c->st == CS_FLUSHING && c->cut) &&
           callback_add_loop(g, c, &w->c, call_depth(g, w, c), 0) == 0;
}

/* What a message of the worker's other than the run's reply is to its client. */
enum push_kind { PK_PUBLISH, PK_CALL, PK_NESTED /* the reply to a message it sent nested */ };

/* Whole message m (len bytes, owned) for client c (NULL: gone), other than the running
 * request's reply (an idle worker's publish, a broadcast's sender's, a .qgate.all's call, one
 * made fit for its client): into its stream at a message boundary, or dropped (a callback's
 * worker told no client answers it). */
static void push_whole(struct gw *g, struct worker *w, struct client *c, int kind, uint8_t *m, size_t len, int held)
{
    if (kind == PK_CALL && c && !takes_call(g, w, c))
        c = NULL; /* (the .qgate.all given up meanwhile: its client was answered) */
    if (!c) {
        free(m);
        if (kind == PK_PUBLISH)
            w->dropped++;
        else if (kind == PK_CALL)
            tell_no_client(g, w);
        return;
    }
    struct chunk *ch = held ? chunk_wrap_held(m, len) : chunk_wrap(m, len); /* (made for it: held until written) */
    if (!ch) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    conn_push_whole_loop(g, &c->c, ch);
    stream_check_bound_loop(g, &w->c, &c->c);
}

static void deliver_whole(struct gw *g, struct worker *w)
{
    struct inbuf m = worker_coll_take(w);
    push_whole(g, w, reachable(g, w->msg.to_id, w->msg.to_gen), w->c.rd.type == KIPC_SYNC ? PK_CALL : PK_PUBLISH, m.p,
               m.len, 0);
}

/* Messages c cannot take as the worker sent them, any type: an old client's, to be checked for
 * what its capability cannot carry, or compressed ones for a client on this host (q never sends
 * compressed bytes on this host; one over compress_max goes as it is) or of capability 0 (1).
 * An old client's over compress_max is refused instead (-1). */
static int needs_change(struct gw *g, const struct client *c, const struct kipc_hdr *h)
{
    if (c->cap < 3)
        return h->len <= (uint64_t)g->cfg.compress_max ? 1 : -1;
    return c->local && h->compressed && h->len <= (uint64_t)g->cfg.compress_max;
}

/* Replies that must be collected for c: those it cannot take as they are, and those to
 * compress for a remote client. */
static int needs_collect(struct gw *g, const struct client *c, const struct kipc_hdr *h)
{
    if (c->cap < 3 || (c->local && h->compressed))
        return needs_change(g, c, h);
    return client_compressed_for(g, c) && !h->compressed && h->len >= KZIP_MIN_LEN &&
           h->len <= (uint64_t)g->cfg.compress_max;
}

/* An error for w's callback that cannot go to its client (text: the q error). */
static void tell_worker_error(struct gw *g, struct worker *w, const char *text)
{
    size_t len;
    uint8_t *m = kcodec_error_msg(text, &len); /* (a few bytes: on the loop) */
    if (!m) {
        tell_no_client(g, w);
        return;
    }
    tell_worker(g, w, m, len);
    free(m);
}

static int drop_async(struct gw *g, struct worker *w, const char *why, int fix);

enum { PUSH_TOO_LARGE = -1, PUSH_HOLD_MAX = -2 };

/* A message of w (kind: PK_*) of len bytes (compressed: zipped) that an old client cannot be given (why: PUSH_*):
 * a publish is dropped, a callback's worker told, as its h x would have failed, the client
 * told for the reply to a message it sent nested. ROUTE_DROP. */
static int refuse_push(struct gw *g, struct worker *w, struct client *c, int kind, int why, uint64_t len, int zipped)
{
    static const char *const what[] = {"publish", "callback", "reply"};
    char held[96];
    if (why == PUSH_HOLD_MAX) { /* counted and said as a reply refused for it is */
        conn_refused_loop(g, REFUSED_HOLD_MAX, c->c.name, "%s: a %s of %llu bytes refused to capability %d",
                          gw_hold_why(g, len, held, sizeof held), what[kind], (unsigned long long)len, c->cap);
        if (kind == PK_PUBLISH) {
            w->dropped++;
            return ROUTE_DROP;
        }
    } else if (kind == PK_PUBLISH) {
        return drop_async(g, w, "too large to check for a client of capability below 3 (over compress_max)", 0);
    }
    char text[160];
    if (why == PUSH_TOO_LARGE)
        snprintf(text, sizeof text, JOB_TOO_LARGE_CAP, kind == PK_NESTED ? "reply" : "message", c->cap,
                 (unsigned long long)len, zipped ? " compressed" : "");
    else
        gw_hold_error(g, len, text, sizeof text);
    if (kind == PK_NESTED)
        callback_nested_error_loop(g, c, text);
    else {
        tell_worker_error(g, w, text);
        callback_refused_loop(c);
    }
    return ROUTE_DROP;
}

/* A publish or callback of w (header h) for client c, routed STREAM or FORWARD (route): as it
 * is, or CHANGE when c cannot take it as it is (to_id, to_gen set), or refused (DROP; a
 * callback's worker told why) when it is too large to be made fit. */
static int to_client(struct gw *g, struct worker *w, const struct kipc_hdr *h, struct client *c, int route)
{
    int nc = needs_change(g, c, h);
    if (nc > 0 && !hold_room(g, h->len)) /* hold_max: as it came, unless it must be checked */
        nc = c->cap < 3 ? PUSH_HOLD_MAX : 0;
    if (nc == 0 && route == ROUTE_FORWARD && !hold_room(g, h->len)) /* held whole (another worker may
                                   * be streaming to c), so within hold_max, or refused */
        nc = PUSH_HOLD_MAX;
    if (nc == 0)
        return route;
    if (nc < 0)
        return refuse_push(g, w, c, w->msg.nested ? PK_NESTED : h->type == KIPC_SYNC ? PK_CALL : PK_PUBLISH, nc,
                           h->len, h->compressed);
    w->msg.to_id = c->c.id;
    w->msg.to_gen = c->c.gen;
    return ROUTE_CHANGE;
}

/* A reply to what its client sent nested has gone to it (or was dropped): the worker waits in
 * the callback around it again, unless its client has answered that. */
static void chase_when_clear(struct gw *g, struct worker *w);

static void nested_done(struct gw *g, struct worker *w)
{
    w->run.nested--;
    if (w->run.cl && w->run.phase == WB_SENT && callback_owes_loop(g, w->run.cl, &w->c))
        run_set_phase_loop(g, w, WB_CALLED);
    chase_when_clear(g, w); /* (the last reply to what was sent nested: a chaser owed may go) */
    if (w->run.cl) {
        request_nested_flush_loop(g, w->run.cl); /* a bad message's error waited for these replies
                                   * (request.c; for those down to the calls whose callbacks it came
                                   * inside, whose replies wait for it) */
        callback_nested_replied_loop(g, w->run.cl); /* the worker waits in a callback again: an
                                                     * answer sent ahead may be read there */
    }
}

/* The reply to a message its client sent nested (while the worker waited on that client's
 * callback: q ran it there): to that client, ahead of the run's own, made fit for it as a
 * publish is; the run goes on. */
static int route_nested(struct gw *g, struct worker *w, const struct kipc_hdr *h)
{
    struct client *c = w->run.cl;
    w->msg.nested = 1;
    if (!c || !client_takes_output(c))
        return ROUTE_DROP;
    int route = ROUTE_DROP;
    if (h->len > (uint64_t)g->cfg.max_message) { /* drained; the client told */
        char text[160];
        snprintf(text, sizeof text, JOB_TOO_LARGE, (unsigned long long)h->len);
        callback_nested_error_loop(g, c, text);
    } else {
        w->msg.to = c;
        route = to_client(g, w, h, c, ROUTE_STREAM);
    }
    if (route == ROUTE_DROP) { /* refused, its client told already: done (a loss while it drains
                                * tells it nothing more) */
        nested_done(g, w);
        w->msg.nested = 3;
    }
    return route;
}

/* The route of the running request's reply. */
static int route_reply(struct gw *g, struct worker *w, const struct kipc_hdr *h)
{
    struct client *c = w->run.cl;
    w->msg.reply = 1; /* its first bytes tell whether it is a q error */
    w->run.is_error = 0;
    w->run.reply_len = h->len;
    if (w->run.kind == RUN_FANOUT)
        return fanout_route_loop(g, w, h->len);
    if (!c || client_output_gone(c)) {
        run_set_phase_loop(g, w, WB_DRAINING);
        return ROUTE_DROP;
    }
    int over = h->len > (uint64_t)g->cfg.max_message, nc = over ? -1 : needs_collect(g, c, h);
    if (nc > 0 && !hold_room(g, h->len)) /* hold_max: as it came, or refused */
        nc = hold_over(g, c, client_head(c), h->len) ? 0 : -2;
    if (nc < 0) { /* over max_message, or too big to check for an old client: it is told, the
                   * reply drained (never held), the connection kept */
        if (over)
            request_error_loop(g, c, client_head(c), JOB_TOO_LARGE, (unsigned long long)h->len);
        else if (nc == -1)
            request_error_loop(g, c, client_head(c), JOB_TOO_LARGE_CAP, "reply", c->cap,
                              (unsigned long long)h->len, h->compressed ? " compressed" : "");
        w->run.cl = NULL; /* its reply is made: a loss now touches nothing */
        client_set_worker_loop(c, NULL);
        run_set_phase_loop(g, w, WB_DRAINING);
        return ROUTE_DROP;
    }
    run_set_phase_loop(g, w, nc ? WB_COLLECTING : WB_RELAYING); /* collected: grown as bytes arrive */
    w->msg.to = c;
    return nc ? ROUTE_COLLECT : ROUTE_STREAM;
}

/* An async message dropped: counted, said (at most once a second); with fix, in a request pool,
 * the fix for one nobody is owed (not for one dropped for its size). */
static int drop_async(struct gw *g, struct worker *w, const char *why, int fix)
{
    w->dropped++;
    int owner = fix && w->grp->cfg.pool_mode != CFG_POOL_SESSION;
    log_limited(&w->grp->dropped_log, g->loop.now_ms, LOG_WARN, w->c.name, "async message %s: dropped%s", why,
                owner ? " (a worker that publishes to its subscribers belongs in a pool = session group)" : "");
    return ROUTE_DROP;
}

/* An async message: to the sender of the broadcasts running, else the running request's (or
 * .qgate.all's) client, else a session's client; else it belongs to nobody. */
static int route_async(struct gw *g, struct worker *w, const struct kipc_hdr *h)
{
    struct client *to;
    if (!STAILQ_EMPTY(&w->bsent)) {
        const struct bnode *b = STAILQ_FIRST(&w->bsent);
        if (!(to = reachable(g, b->cl_id, b->cl_gen)))
            return drop_async(g, w, "for the sender of a broadcast that has gone", 1);
        w->msg.to_id = b->cl_id;
        w->msg.to_gen = b->cl_gen;
        return to_client(g, w, h, to, ROUTE_FORWARD);
    }
    struct client *c = w->st == WS_BUSY ? w->run.cl : w->st == WS_PINNED ? w->sess : NULL;
    if (c && client_takes_output(c) && (c == w->run.cl || c->st == CS_READY)) { /* a session's client
                                     * that sent a bad message gets what it is owed, nothing new */
        w->msg.to = c;
        return to_client(g, w, h, c, ROUTE_STREAM);
    }
    if (c || (w->st == WS_BUSY && (w->run.kind == RUN_REQUEST || w->run.kind == RUN_ASYNC)))
        return drop_async(g, w, c && c->st == CS_FLUSHING ? "for a client that is leaving (it reads nothing more)"
                                                          : "for a client that has gone", 1);
    if (fanout_client(w, &w->msg.to_id, &w->msg.to_gen)) /* (whole: the other parts' workers send it too) */
        return (to = reachable(g, w->msg.to_id, w->msg.to_gen))
                   ? to_client(g, w, h, to, ROUTE_FORWARD)
                   : drop_async(g, w, "for the client of a .qgate.all that has gone", 1);
    if (w->st == WS_BUSY && w->run.kind == RUN_FANOUT)
        return drop_async(g, w, "for a .qgate.all given up (its client was answered)", 1);
    return drop_async(g, w,
                      w->grp->cfg.pool_mode == CFG_POOL_SESSION ? "while given to no client's session"
                                                                : "while it ran no client's request (pool = request)",
                      1);
}

/* A callback (a sync request with .z.w): the running request's (or .qgate.all's) client answers
 * it, if it reads; otherwise (none, or a broadcast's sender, which waits for nothing) the worker
 * is told so. */
static int route_callback(struct gw *g, struct worker *w, const struct kipc_hdr *h)
{
    struct client *c = w->run.cl, *to;
    if (w->st == WS_BUSY && w->run.kind == RUN_REQUEST)
        query_calls_back_loop(w->grp->queries, w->run.key); /* nothing goes to its worker while it runs again */
    if (STAILQ_EMPTY(&w->bsent) && fanout_client(w, &w->msg.to_id, &w->msg.to_gen)) {
        to = reachable(g, w->msg.to_id, w->msg.to_gen);
        if (to && to->gave_up) { /* its answers are not read for: this one would not be either */
            tell_worker(g, w, g->unanswered_err, g->unanswered_err_len);
            return ROUTE_DROP;
        }
        if (!to) { /* (the .qgate.all's client has gone: nobody answers) */
            tell_no_client(g, w);
            return ROUTE_DROP;
        }
        run_set_phase_loop(g, w, WB_CALLED); /* whole, matched as it reaches the client (push_whole):
                                              * the other parts' workers may call it back too */
        return to_client(g, w, h, to, ROUTE_FORWARD);
    }
    if (c && w->st == WS_BUSY && callback_may_call_loop(c) && STAILQ_EMPTY(&w->bsent)) {
        int route = to_client(g, w, h, c, ROUTE_STREAM); /* (CHANGE: matched as it reaches the client) */
        if (route == ROUTE_DROP)
            return ROUTE_DROP; /* too large to make fit: the worker was told */
        if (route == ROUTE_CHANGE || callback_add_loop(g, c, &w->c, call_depth(g, w, c), 1) == 0) {
            run_set_phase_loop(g, w, WB_CALLED); /* until it sends again, having had the answer */
            w->msg.to = c;
            if (route != ROUTE_CHANGE) /* (a changed one: when it reaches the client, as it is added) */
                callback_added_loop(g, c);
            return route;
        }
    }
    if (w->st == WS_BUSY && !STAILQ_EMPTY(&w->bsent)) /* (its sender waits for nothing, and is not asked) */
        tell_worker_error(g, w, "qgate: no client answers a callback from a broadcast (every worker runs it; its "
                                "sender waits for no answer)");
    else if (w->st == WS_BUSY && w->run.reset) /* (the gateway's own query, between two sessions) */
        tell_worker_error(g, w, "qgate: no client answers a callback from the reset query (it runs between two "
                                "sessions, for none)");
    else
        tell_no_client(g, w);
    return ROUTE_DROP;
}

/* ---- what the stream hands it ------------------------------------------------------------------ */

/* The client w's next message may stream into (its run's, or its session's while it runs
 * nothing), when another worker's message is half written there, or the worker running that
 * client's request waits to stream into it: w waits, its header framed again once woken (by
 * that client's output draining, or going). One message at a time into a client: a session's
 * worker publishing while its client's request routed to another group (.qgate.on) replies, each
 * streaming, had their bytes interleaved (helper round 36c); and the run's worker goes first, so
 * that a publishing session's worker cannot keep it waiting for ever. */
static struct client *stream_taken(const struct worker *w)
{
    struct client *c = w->st == WS_BUSY && w->run.kind != RUN_FANOUT ? w->run.cl
                       : w->st == WS_PINNED                        ? w->sess
                                                                   : NULL;
    if (!c || !client_takes_output(c))
        return NULL;
    const struct worker *r = c->w; /* running its request */
    return c->c.streaming || (r && r != w && r->c.paused_any && r->c.waits_on == &c->c) ? c : NULL;
}

/* A message's header has arrived: where it goes. */
int run_header_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h)
{
    struct worker *w = worker_of(x);
    struct client *cl = w->st == WS_BUSY ? w->run.cl : NULL;
    struct client *sc = stream_taken(w);
    if (sc) {
        stream_wait_wake_loop(g, x, &sc->c);
        log_debug(x->name, "its message waits: another worker's is on its way to %s", sc->c.name);
        return SS_WAIT;
    }
    if (h->type == KIPC_RESPONSE && cl && !w->run.nested && !w->run.swallow && client_nested_owed(cl) &&
        client_takes_output(cl)) { /* the run's reply goes after what the gateway answers nested within
                                    * it (request.c): it waits, its header framed again then */
        stream_wait_wake_loop(g, x, &cl->c);
        log_debug(x->name, "its reply waits for what %s called the gateway for, nested", cl->c.name);
        return SS_WAIT;
    }
    if (h->type == KIPC_RESPONSE && cl && w->run.nested > 0 && w->run.swallow_first == 0 &&
        client_takes_output(cl) && request_nested_encloses_loop(cl, &w->c, w->run.nested)) { /* so does
                                    * the reply of a call the client sent nested, after what it called
                                    * the gateway for inside that call's callback (at 83c161f it went
                                    * ahead of them: helper round 28a) */
        stream_wait_wake_loop(g, x, &cl->c);
        log_debug(x->name, "the reply to %s's call nested %d deep waits for what it called the gateway for "
                           "inside that call's callback", cl->c.name, w->run.nested);
        return SS_WAIT;
    }
    struct client *fc = h->type == KIPC_SYNC ? fanout_call_out(g, w) : NULL;
    if (fc) {
        stream_wait_wake_loop(g, x, &fc->c);
        log_debug(x->name, "its callback waits: %s answers another part's first", fc->c.name);
        return SS_WAIT;
    }
    w->msg.reply = w->msg.nested = 0;
    w->msg.zipped = h->compressed;
    if (w->st == WS_BUSY && w->run.phase == WB_CALLED &&
        !(h->type == KIPC_ASYNC && w->run.cl && callback_owes_loop(g, w->run.cl, &w->c)))
        run_set_phase_loop(g, w, WB_SENT); /* it sends: whatever it waited for has come (not a publish
                                            * made while its client still owes the answer: it waits in
                                            * the callback yet, running what it is sent nested; at
                                            * 01bef40 what came next was refused: helper round 27a) */
    int route = ROUTE_DROP, over = h->len > (uint64_t)g->cfg.max_message;
    if (h->type == KIPC_SYNC)
        called_back(g, w); /* (counted before it is answered, below or by its client) */
    if (h->type == KIPC_RESPONSE && w->st == WS_BUSY && w->run.swallow_first > 0) {
        w->run.swallow_first--; /* a chaser sent before the messages nested now: its reply first */
        route = ROUTE_SWALLOW;
    } else if (h->type == KIPC_RESPONSE && w->st == WS_BUSY && w->run.nested > 0)
        route = route_nested(g, w, h); /* (the innermost first: the run's own comes last) */
    else if (h->type == KIPC_RESPONSE && w->st == WS_BUSY)
        route = w->run.swallow > 0 ? ROUTE_SWALLOW : route_reply(g, w, h); /* (over: refused there) */
    else if (over && h->type == KIPC_ASYNC)
        route = drop_async(g, w, "over max_message", 0);
    else if (over && h->type == KIPC_SYNC)
        tell_worker(g, w, g->too_large_err, g->too_large_err_len); /* as if its call had failed */
    else if (h->type == KIPC_ASYNC)
        route = route_async(g, w, h);
    else if (h->type == KIPC_SYNC)
        route = route_callback(g, w, h);
    else { /* a response when it was asked nothing: its q broke the protocol (a reply sent twice,
            * say); a q message names no request, so its next one would be taken for the next
            * request's reply, another client's: the connection is remade */
        w->dropped++;
        return stream_close(x, "a response when it was asked nothing (a reply sent twice?): dropped; the "
                               "connection is remade, as what it sends next would be taken for the next request's");
    }
    if (w->c.fd < 0 || w->c.closing) /* closed while routing */
        return SS_STOP;
    w->msg.route = (uint8_t)route;
    if (route == ROUTE_COLLECT || route == ROUTE_CHANGE || route == ROUTE_FORWARD) { /* held whole (to
                                   * change it, or to go in at a message boundary): counted from now */
        worker_coll_release(w); /* (nothing, as each message's end gave it back) */
        w->coll_held = (size_t)h->len;
        buf_held_add(w->coll_held);
    }
    if (route == ROUTE_STREAM) {
        stream_route(x, SR_STREAM, &w->msg.to->c);
    } else {
        w->msg.to = NULL;
        stream_route(x, route == ROUTE_COLLECT || route == ROUTE_FORWARD || route == ROUTE_CHANGE ? SR_WHOLE : SR_DROP,
                     NULL);
    }
    return SS_OK;
}

int run_bad_header_loop(struct gw *g, struct conn *x, const char *why)
{
    (void)g;
    return stream_close(x, "bad message header from the worker: %s", why);
}

/* Whether the message just read (its first bytes peeked) is a q error: 1, its text in w->run.etext. */
static int peek_error(struct worker *w)
{
    const struct rdstate *rd = &w->c.rd;
    uint8_t plain[STREAM_PEEK];
    const uint8_t *p = rd->peek;
    size_t n = rd->npeek;
    if (w->msg.zipped) { /* (its first bytes are the plain length and a flag byte) */
        n = kzip_peek(rd->peek, rd->npeek, plain, sizeof plain);
        p = plain;
    }
    if (!n || p[0] != (uint8_t)KT_ERROR)
        return 0;
    snprintf(w->run.etext, sizeof w->run.etext, "%.*s", (int)QG_MIN(n - 1u, sizeof w->run.etext - 1),
             (const char *)p + 1);
    return 1;
}

/* The message has ended (streamed, dropped, or whole in w->coll). */
static void message_end(struct gw *g, struct worker *w)
{
    const struct rdstate *rd = &w->c.rd;
    if (w->msg.reply && rd->npeek) /* a q error: its text, for the access log */
        w->run.is_error = peek_error(w);
    else if (w->msg.route == ROUTE_SWALLOW && w->st == WS_BUSY && w->run.reset && rd->type == KIPC_RESPONSE &&
             peek_error(w)) /* said: the next session may find what the last one left (helper round 36c: at
                             * 9a0f2e2 a reset query failing each time went unsaid) */
        log_limited(&w->grp->reset_log, g->loop.now_ms, LOG_WARN, w->c.name,
                    "the reset query failed ('%s): what ran in its q before may still be there for the next session", w->run.etext);
    if (w->msg.route == ROUTE_FORWARD)
        deliver_whole(g, w);
    else if (w->msg.route == ROUTE_STREAM && w->msg.to->st == CS_FLUSHING)
        conn_mark_dirty_loop(g, &w->msg.to->c); /* its flush sees whether it may linger now */
    if (w->msg.route == ROUTE_STREAM && (w->msg.reply || w->msg.nested || rd->type == KIPC_SYNC))
        conn_mark_owed(&w->msg.to->c); /* a reply or a callback streamed: a drain waits for it (not
                                        * for a publish) */
    int route = w->msg.route, nested = w->msg.nested;
    w->msg.route = ROUTE_DROP;
    w->msg.to = NULL;
    w->msg.reply = w->msg.nested = 0;
    if (w->end_due) /* the message that held back the end of its session (a reload's) */
        session_end_due_loop(g, w);
    if (rd->type != KIPC_RESPONSE || w->st != WS_BUSY)
        return;
    if (nested == 1) /* (2: a reader makes it fit first, done when it is; 3: done, refused) */
        nested_done(g, w);
    if (nested)
        return;
    if (route == ROUTE_SWALLOW) {
        if (w->run.chase_dirty && w->run.kind != RUN_REQUEST) { /* it ran inside a callback of the
                                   * run: the run goes on; its broadcasts' segment is kept till then */
            w->run.unforgot += !w->run.rechased;
            w->run.rechased = 0;
            if (--w->run.swallow == 0) {
                w->run.chase_owed = 1;
                chase_when_clear(g, w); /* (its callbacks answered already: behind those answers) */
            }
            return;
        }
        for (int n = w->run.rechased ? w->run.unforgot : 1 + w->run.unforgot; n > 0; n--)
            broadcast_forget_sent_loop(g, w, 0); /* a chaser came back: one client's broadcasts before it ran */
        w->run.unforgot = w->run.rechased = 0;
        if (--w->run.swallow == 0 && w->run.kind != RUN_REQUEST)
            run_end(g, w);
        return;
    }
    run_end(g, w);
}

static int message_done(struct gw *g, struct worker *w)
{
    message_end(g, w);
    worker_coll_release(w); /* what it collected is freed, or held (and counted) elsewhere now */
    return SS_OK;
}

int run_message_end_loop(struct gw *g, struct conn *x) { return message_done(g, worker_of(x)); }

/* A publish or callback collected whole for client c (w->coll) goes to a reader to be made fit
 * for it; w reads nothing more until it comes back (run_push_done_loop). */
static int submit_change(struct gw *g, struct worker *w)
{
    struct client *c = reachable(g, w->msg.to_id, w->msg.to_gen);
    int kind = w->msg.nested ? PK_NESTED : w->c.rd.type == KIPC_SYNC ? PK_CALL : PK_PUBLISH;
    int zipped = w->coll.len > 2 && w->coll.p[2];
    /* what the job would hold: what came, and what it makes of it if it decompresses (at most
     * compress_max: over it, it does not) */
    size_t out = c && zipped ? kzip_uncompressed_len(w->coll.p, w->coll.len) : 0;
    out = out <= (uint64_t)g->cfg.compress_max ? out : 0;
    if (c && out && !hold_room(g, out)) { /* hold_max, at its size decompressed: refused to an old
                                              * client, as it came to one on this host (as replies are) */
        struct inbuf m = worker_coll_take(w);
        if (c->cap < 3) {
            free(m.p);
            refuse_push(g, w, c, kind, PUSH_HOLD_MAX, out, 0);
            return SS_OK;
        }
        g->held_passed++;
        char why[96];
        log_limited(&g->lim.hold, g->loop.now_ms, LOG_WARN, c->c.name, "%s: a message of %zu bytes goes as the worker sent it",
                    gw_hold_why(g, out, why, sizeof why), out);
        push_whole(g, w, c, kind, m.p, m.len, 0);
        return SS_OK;
    }
    struct job *j = c ? job_new(job_check_reply, JK_PUSH) : NULL;
    if (!j) { /* (gone meanwhile; or out of memory) */
        struct inbuf m = worker_coll_take(w);
        push_whole(g, w, NULL, kind, m.p, m.len, 0);
        return SS_OK;
    }
    job_args(j)->push = (struct job_push){
        .reply = {.cap = c->cap, .max = g->cfg.max_message, .plain = (uint8_t)c->local,
                  .compress_max = g->cfg.compress_max, .push = kind != PK_NESTED},
        .to_id = w->msg.to_id, .to_gen = w->msg.to_gen, .held = w->coll.len + out, .kind = (uint8_t)kind};
    buf_held_add(job_args(j)->push.held);
    job_take_coll(j, w);
    conn_submit_loop(g->readers, j, &w->c, 0);
    if (kind == PK_NESTED)
        w->msg.nested = 2; /* done when the reader is (run_push_done_loop) */
    return stream_job_wait_loop(g, &w->c);
}

/* A message gathered whole: a reply to transform, a message for a client at a boundary, or one
 * to make fit for its client first. */
int run_message_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h, uint8_t *msg)
{
    struct worker *w = worker_of(x);
    inbuf_free(&w->coll);
    w->coll = (struct inbuf){.p = msg, .len = (size_t)h->len, .cap = (size_t)h->len};
    if (w->msg.route == ROUTE_CHANGE) {
        int st = submit_change(g, w);
        w->msg.route = ROUTE_DROP; /* (taken: its end drops nothing more) */
        int done = message_done(g, w);
        return st == SS_OK ? done : st;
    }
    if (w->msg.route != ROUTE_COLLECT && w->msg.route != ROUTE_FORWARD) /* dropped meanwhile */
        inbuf_free(&w->coll);
    return message_done(g, w);
}

void run_push_done_loop(struct gw *g, struct job *j)
{
    const struct job_push *p = &job_args(j)->push;
    buf_held_sub(p->held);
    struct conn *x = conn_lookup_loop(g, j->conn_id, j->conn_gen);
    if (!x || x->kind != CONN_WORKER)
        return; /* the worker went: what it sent went with it (a nested reply: its loss said so) */
    struct worker *w = worker_of(x);
    struct client *c = reachable(g, p->to_id, p->to_gen);
    if (p->kind == PK_NESTED) { /* made fit, or the error in its place */
        if (c && (!j->result || j->out)) {
            push_whole(g, w, c, PK_NESTED, j->out, j->out_len, !j->result);
            j->out = NULL;
        } else if (c) {
            callback_nested_error_loop(g, c, j->text);
        }
        nested_done(g, w);
    } else if (!j->result) {
        push_whole(g, w, c, p->kind, j->out, j->out_len, 1);
        j->out = NULL;
    } else if (p->kind == PK_CALL) { /* q would have signalled it to the worker's call */
        if (j->out)
            tell_worker(g, w, j->out, j->out_len);
        else
            tell_no_client(g, w);
        if (c)
            callback_refused_loop(c);
    } else {
        char why[sizeof j->text + 64];
        snprintf(why, sizeof why, "for a client of capability %d, which cannot take it (%s)", p->reply.cap,
                 j->text);
        drop_async(g, w, why, 0);
    }
    stream_job_done_loop(g, x);
}

/* ---- the other side going ------------------------------------------------------------------- */

void run_client_gone_loop(struct gw *g, struct worker *w, struct client *c)
{
    if (w->msg.route == ROUTE_STREAM && w->msg.to == c) { /* a message to it: the rest is drained */
        w->msg.route = ROUTE_DROP;
        w->msg.to = NULL;
        stream_drop_rest_loop(&w->c);
        if (c == w->run.cl && w->run.phase != WB_SENT)
            run_set_phase_loop(g, w, WB_DRAINING);
    }
    if (c != w->run.cl) /* a session's client between its requests */
        return;
    callback_cancel_loop(g, c, &w->c); /* a callback it waits on gets its error */
    if (w->msg.route == ROUTE_COLLECT) { /* drained, dropped */
        w->msg.route = ROUTE_DROP;
        stream_drop_rest_loop(&w->c);
        inbuf_free(&w->coll);
        if (w->run.phase != WB_SENT)
            run_set_phase_loop(g, w, WB_DRAINING);
    }
    if (c->c.closing)
        w->run.cl = NULL; /* closed for good; one whose input ended still has its FIFO advanced */
    stream_resume_loop(g, &w->c);
}

/* The requests of c running on a worker that went down: given up on (the sim's hook). */
static void note_lost(struct gw *g, struct client *c)
{
    for (struct req *r = client_head(c); g->hooks.lost && r && r->state == RS_RUNNING; r = TAILQ_NEXT(r, link))
        g->hooks.lost(g->hooks.ctx, c->c.id, c->c.gen, r->seq);
}

/* c, which left owed no reply, closed as its async messages (h) timed out at their worker: at once,
 * or, after a FIN, once what is written to it already is sent (the errors of the calls it made
 * inside their callback: the long simulation, seed 1258376, closed it with three owed), what it
 * sent after them dropped meanwhile. */
static void close_unowed(struct gw *g, struct client *c, struct req *h)
{
    static const char why[] = "its async messages timed out at the worker after it had left, owed no "
                              "reply: what it sent after them is dropped, not run before them";
    if (!c->half || (!conn_pending(&c->c) && !c->c.streaming)) {
        conn_close_loop(g, &c->c, why);
        return;
    }
    c->close_why = why;
    c->drop_why = "its async messages timed out at the worker after it had left";
    for (struct req *x = h; x; x = client_head(c))
        request_remove_loop(g, c, x, 0);
    c->drop_why = NULL;
}

/* The client of a request that went down with the worker: closed if a message to it was cut,
 * else answered with text (or, for async runs and clients gone, just moved on). */
static void fail_request(struct gw *g, struct client *c, int cut, int run, int timed_out, const char *text)
{
    client_set_worker_loop(c, NULL);
    struct req *h = client_head(c);
    note_lost(g, c);
    if (cut) /* what was queued for it ahead of the cut still goes (tail.h) */
        client_cut_loop(g, c, "worker lost in the middle of the reply");
    else if (run == RUN_ASYNC && timed_out && left_unowed(c)) /* gone: what it sent after them would run
                                     * elsewhere before the rest of them, which q may still run (19a:
                                     * waiting for them, it kept its max_clients place for as long as
                                     * a stuck q stayed stuck) */
        close_unowed(g, c, h);
    else if (run != RUN_REQUEST || client_output_gone(c))
        request_head_done_loop(g, c);
    else {
        request_error_loop(g, c, h, "%s", text); /* (wait_answer set above if c owes an answer) */
        request_hold_for_answer_loop(g, c);
    }
}

void run_lost_loop(struct gw *g, struct worker *w)
{
    struct client *c = w->run.cl, *s = w->sess;
    int busy = w->st == WS_BUSY, run = w->run.kind, timed_out = busy && w->run.phase == WB_TIMEDOUT;
    if (busy && run == RUN_REQUEST && w->run.key) /* it timed out, or its worker went down under it: */
        query_learn_loop(w->grp->queries, w->run.key, INT64_MAX); /* learned slow, until a hundred fast runs or so */
    if (s) { /* as if its q had died: the client is told, then closed */
        s->sess = NULL;
        w->sess = NULL;
    }
    session_end_forget_loop(w); /* (a session's end held back by a message to it: the message is cut) */
    w->reset_owed = w->renew = 0; /* a new connection comes anyway */
    /* a message cut in the middle of its stream leaves that client's stream broken */
    struct client *to = w->msg.route == ROUTE_STREAM && w->c.rd.phase == RD_BODY ? w->msg.to : NULL;
    int cut = to && to == c && !client_output_gone(c), cut_sess = to && to == s;
    if (busy && c && !cut && !cut_sess && !client_output_gone(c)) { /* what its client sent nested fails,
                                            * as in q the innermost call's error first */
        const char *why = timed_out ? "qgate: timeout (the worker that called back sent nothing for query_timeout)"
                                    : "qgate: the worker that called back was lost";
        callback_nested_lost_loop(g, c, why); /* (one a reader still checks) */
        /* its request (fail_request's) held for the client's answer, and these with it */
        int hold = !s && run == RUN_REQUEST && c->ncalls && client_head(c);
        if (hold)
            client_head(c)->wait_answer = 1;
        callback_nested_lost_calls_loop(g, c, w->run.nested, why, hold); /* (each once c has left
                                                                           * the callbacks inside it) */
    }
    if (busy && run == RUN_FANOUT)
        fanout_call_back(g, w);
    w->run.cl = NULL;
    worker_coll_free(w);
    w->msg = (struct wmsg){0};
    w->run.swallow = w->run.nested = 0;
    if (c && busy) /* a bad message's error that waited for its nested replies: after their errors */
        request_nested_flush_loop(g, c);
    stream_resume_loop(g, &w->c); /* off the waiters of the client it waited on */
    /* down first: what follows may start a client's next request, never on this worker */
    worker_set_state_loop(g, w, WS_DOWN);
    char text[400];
    if (timed_out)
        snprintf(text, sizeof text, "qgate: timeout (%s sent nothing for %lld ms)", w->addr,
                 (long long)g->cfg.query_timeout);
    else
        snprintf(text, sizeof text, "qgate: worker %s lost", w->addr);
    fanout_worker_lost_loop(g, w, text, timed_out); /* a .qgate.all it ran, or owed, fails */
    if (s) {
        if (c == s && busy)
            note_lost(g, s);
        if (s->w == w)
            client_set_worker_loop(s, NULL);
        request_session_lost_loop(g, s, cut_sess, text);
    } else if (c && busy) {
        fail_request(g, c, cut, run, timed_out, text);
    }
    broadcast_drop_loop(g, w);
}

void run_answer_loop(struct gw *g, struct conn *wc, uint8_t *msg, size_t len)
{
    struct worker *w = worker_of(wc);
    int sync = msg[1] == KIPC_SYNC;
    struct chunk *ch = chunk_wrap(msg, len);
    if (!ch) {
        conn_close_loop(g, wc, "out of memory"); /* (its run is lost: its client told) */
        return;
    }
    outq_push(&wc->out, ch);
    conn_mark_dirty_loop(g, wc);
    if (sync) { /* nested: it runs now, and its reply comes next */
        if (!w->run.nested) /* the chasers out now were sent before it: their replies come first,
                             * but for one whose reply is being read now (counted at its end: at
                             * 809db56 it was counted twice, the nested reply taken for a chaser's,
                             * and the run never ended; the long simulation, seed 882417) */
            w->run.swallow_first = w->run.swallow - (w->msg.route == ROUTE_SWALLOW);
        w->run.nested++;
        run_set_phase_loop(g, w, WB_SENT);
    } else if (msg[1] == KIPC_RESPONSE) {
        call_answered(g, w);
    }
}

void run_flushed_loop(struct gw *g, struct conn *wc, size_t before, size_t wrote)
{
    struct worker *w = worker_of(wc);
    (void)before;
    if (wrote && w->st == WS_BUSY && w->run.cl && w->run.cl->paused && w->run.cl->ncalls)
        request_check_pending_loop(g, w->run.cl);
}

int run_nested_owed_loop(const struct conn *wc, const struct client *c)
{
    const struct worker *w = (const struct worker *)wc;
    return w->st == WS_BUSY && w->run.cl == c ? w->run.nested : 0;
}

int run_nests_loop(const struct conn *wc, const struct client *c)
{
    const struct worker *w = (const struct worker *)wc;
    return w->st == WS_BUSY && w->run.cl == c && (w->run.kind == RUN_REQUEST || w->run.kind == RUN_ASYNC) &&
           STAILQ_EMPTY(&w->bsent) &&
           (w->run.phase == WB_CALLED || (w->run.phase == WB_SENT && w->run.nested) ||
            (w->run.kind == RUN_ASYNC && w->run.cb_open > 0)); /* (a chaser's reply from inside the callback
                                                                 * leaves it SENT) */
}

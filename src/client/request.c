/* request.c: a client's requests, answered in order: framing and validation of what it sends,
 * the FIFO (only the head is started, and the FIFO is walked by one loop, never by
 * recursion), replies made by the pools; what stops a client's reading early (bad messages,
 * refusals, its session's worker lost) and a reader's verdict on a body it validated. The
 * client side's ops for dispatch are here too. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "stream.h"
#include "access.h"
#include "alog.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"

/* The transitions client.h's diagram allows. Any state goes back to WAITING: a request leaving
 * the FIFO (answered, or dropped) passes it, to leave its group's queue or held list. */
#define TO(s) (1u << RS_##s)
static const unsigned allowed[] = {
    [RS_WAITING] = TO(CHECKING) | TO(QUEUED) | TO(RUNNING) | TO(LOCAL) | TO(READY) | TO(HELD),
    [RS_CHECKING] = TO(WAITING) | TO(LOCAL),
    [RS_QUEUED] = TO(WAITING) | TO(RUNNING) | TO(LOCAL),
    [RS_RUNNING] = TO(WAITING) | TO(QUEUED) | TO(LOCAL),
    [RS_LOCAL] = TO(WAITING) | TO(READY),
    [RS_READY] = TO(WAITING),
    [RS_HELD] = TO(WAITING) | TO(LOCAL) | TO(RUNNING),
};
#undef TO
#define ST_NAME(e) #e,
static const char *const state_names[] = {REQ_STATES(ST_NAME)};
#undef ST_NAME

const char *request_state_name(int st) { return st >= 0 && st <= RS_HELD ? state_names[st] : "?"; }

void request_set_state_loop(struct gw *g, struct client *c, struct req *r, enum req_state st)
{
    if (r->state == st)
        return;
    if (!((allowed[r->state] >> st) & 1)) {
        g->bad_transitions++;
        log_error(c->c.name, "request %llu: %s -> %s is not in request.c's table", (unsigned long long)r->seq,
                  request_state_name(r->state), request_state_name(st));
    }
    if (r->state == RS_QUEUED || r->state == RS_HELD)
        conn_queue_out_loop(&c->c);
    if (st == RS_QUEUED)
        dispatch_queue_loop(g, r->grp, &c->c, r->seq);
    else if (st == RS_HELD)
        dispatch_hold_loop(g, r->grp, &c->c, r->seq);
    r->state = (uint8_t)st;
}

static void nested_flush(struct gw *g, struct client *c);

static void stop_reading(struct gw *g, struct client *c);
static void stop_for_bad_message(struct gw *g, struct client *c, const char *why);
/* Is c inside a callback, as q sees it (its .z.pg runs; what it sends now is nested)? While it
 * owes an answer to a live worker's call; in a .qgate.all, to any part's call, its worker lost
 * too (another part's callback waits for that answer: fanout_call_out). */
static int inside_callback(struct gw *g, const struct client *c)
{
    return c->ncalls && (c->fo || callback_owed_loop(g, c));
}

/* Does c owe the answer to a callback whose worker is gone (lost, or timed out), having sent
 * no more than the bound since (it gave up on none)? Then it is inside that callback as q sees it
 * (its .z.pg runs yet): what it sends sync is nested, and answered at once with an error, never
 * run as a new request (at 3929a8f it ran on another worker, and a client carrying on inside its
 * .z.pg took each reply for the call before: values for the wrong call, helper round 21). */
static int owes_lost_call(const struct client *c) { return c->ncalls && !c->gave_up && !c->fo; }

/* Is r's error (its worker lost while it called c back) held until c has answered that callback?
 * While c may answer it yet: as q sees it, c's .z.pg still runs, and a reply now would be taken for
 * that of the next call c makes there (at 3929a8f it was sent at once: helper round 21). */
static int held_for_answer(const struct client *c, const struct req *r)
{
    return r->wait_answer && ((owes_lost_call(c) && c->st == CS_READY && !c->eof) || c->lost_nested);
}

/* c's nested list has emptied, perhaps: a worker whose reply waited for it goes on (run.c). */
static void nested_wake(struct gw *g, struct client *c)
{
    if (!client_nested_owed(c))
        conn_wake_loop(g, &c->c);
}

/* ---- room under pending_max ----------------------------------------------------------------- */

/* A message this small never waits for room (counted all the same): a gateway command, such
 * as the .qgate.resume[] that lets held requests go, is always read. Per client, such messages
 * are bounded by client_max_pending. */
#define ROOM_SMALL BUF_PENDING_SMALL

/* Room for a message of n bytes now: under pending_max, or no other message that may wait
 * counted (so that one larger than the bound is read alone, and small ones, which never wait,
 * cannot keep the first in line waiting for ever). */
static int room_for(const struct gw *g, uint64_t n)
{
    return !g->cfg.pending_max || !buf_pending_big || buf_pending_bytes + n <= (uint64_t)g->cfg.pending_max;
}

/* Does its reading go on whatever pending_max says (bounded by client_max_pending alone)? When
 * others' requests may wait on it: it owes a worker a callback's answer, or it holds a worker
 * (pool = session) that requests queued for its group might otherwise never get. */
static int room_exempt(struct gw *g, struct client *c) { return c->sess || inside_callback(g, c); }

/* Bytes counted against pending_max go back (*n zeroed). */
static void uncount(struct gw *g, size_t *n)
{
    if (!*n)
        return;
    buf_pending_sub(*n);
    *n = 0;
    if (!TAILQ_EMPTY(&g->room_waiters))
        g->loop.dispatch_pending = 1; /* room, perhaps: the dispatch phase's end sees to them */
}

/* Its reading goes on, if nothing else holds it. */
static void read_on(struct gw *g, struct client *c)
{
    if (c->st == CS_READY && !c->eof && !c->paused && !c->c.paused && !g->draining)
        conn_set_reading_loop(g, &c->c, 1);
}

/* While clients wait for room, one that keeps room for a message it has stopped sending (no
 * byte for client_stall_timeout while qgate reads it), or sends less than ROOM_SMALL of it in a
 * client_stall_timeout (a byte now and then: helper round 40b, a header declaring 2 GB then a
 * trickle held every other large request for good), is closed: room kept is not taken from the
 * others for ever. */
static void room_stalls(struct gw *g, struct timer *t)
{
    (void)t;
    int64_t stall = g->cfg.client_stall_timeout;
    if (TAILQ_EMPTY(&g->room_waiters))
        return; /* (armed again by the next to wait) */
    for (uint32_t id = 0; stall && id < g->tab_cap; id++) { /* (0 = no limit, until a reload sets one) */
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT || x->closing)
            continue;
        struct client *c = client_of(x);
        if (!c->gathering || x->rd.phase != RD_WHOLE)
            continue;
        if (c->eof || c->paused || x->paused) { /* not read now: not its doing */
            c->room_mark_ms = 0;
            continue;
        }
        size_t got = inbuf_avail(&x->in);
        char what[200], why[210];
        if (g->loop.now_ms - x->last_read_ms >= stall) {
            snprintf(what, sizeof what, "sent %zu bytes of a %zu-byte message, then none for %lld ms, while others "
                     "waited for room under pending_max", got, c->gathering, (long long)(g->loop.now_ms - x->last_read_ms));
        } else if (!c->room_mark_ms || got < c->room_mark) {
            c->room_mark = got; /* its pace judged from now */
            c->room_mark_ms = g->loop.now_ms;
            continue;
        } else if (g->loop.now_ms - c->room_mark_ms < stall) {
            continue;
        } else if (got - c->room_mark >= ROOM_SMALL) {
            c->room_mark = got; /* its pace is fair: judged again from now */
            c->room_mark_ms = g->loop.now_ms;
            continue;
        } else {
            snprintf(what, sizeof what, "sent %zu bytes of a %zu-byte message, %zu of them in the last %lld ms (under "
                     "%d bytes), while others waited for room under pending_max", got, c->gathering, got - c->room_mark,
                     (long long)(g->loop.now_ms - c->room_mark_ms), ROOM_SMALL);
        }
        snprintf(why, sizeof why, "stalled: %s", what);
        conn_refused_loop(g, REFUSED_STALLED, x->name, "%s", what); /* (as the output's stall is) */
        conn_close_loop(g, x, why);
    }
    loop_timer_arm_loop(g, &g->room_tm, g->loop.now_ms + 1000, room_stalls);
}

int request_header_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h)
{
    struct client *c = client_of(x);
    if (c->room_granted) { /* its turn came (request_room_loop): the room was kept for it */
        c->room_granted = 0;
        return SS_OK;
    }
    uncount(g, &c->gathering); /* a message dropped before it was whole */
    if (c->bad_ahead) { /* behind a malformed answer it sent ahead: q reads nothing after that */
        stream_route(x, SR_DROP, NULL);
        return SS_OK;
    }
    if (h->type == KIPC_RESPONSE && c->ncalls)
        return SS_OK; /* an answer a worker waits for: never held back, not counted */
    struct conn *first = TAILQ_FIRST(&g->room_waiters);
    if (h->len > ROOM_SMALL && !room_exempt(g, c) && ((first && first != x) || !room_for(g, h->len))) {
        if (!x->waits_room) {
            g->pending_waits++;
            log_limited(&g->lim.room, g->loop.now_ms, LOG_INFO, x->name,
                        "pending_max reached (%zu bytes of requests held): a message of %llu bytes waits its turn",
                        buf_pending_bytes, (unsigned long long)h->len);
            if (!g->room_tm.pos) /* (every second while anyone waits) */
                loop_timer_arm_loop(g, &g->room_tm, g->loop.now_ms + 1000, room_stalls);
        }
        conn_room_wait_loop(g, x, h->len);
        conn_set_reading_loop(g, x, 0);
        return SS_WAIT;
    }
    conn_room_leave_loop(g, x);
    c->gathering = (size_t)h->len;
    c->room_mark_ms = 0; /* (a new message: its pace not yet looked at) */
    buf_pending_add(c->gathering);
    return SS_OK;
}

/* Its turn for room has come: the room is kept for the message it waited with, which is framed
 * again in the backlog phase. */
static void room_grant(struct gw *g, struct client *c)
{
    struct conn *x = &c->c;
    conn_room_leave_loop(g, x);
    c->gathering = (size_t)x->room_need; /* kept for it: nobody takes it meanwhile */
    c->room_mark_ms = 0;
    buf_pending_add(c->gathering);
    c->room_granted = 1;
    conn_backlog_add_loop(g, x);
    read_on(g, c);
}

void request_room_loop(struct gw *g)
{
    struct conn *x;
    while ((x = TAILQ_FIRST(&g->room_waiters)) && room_for(g, x->room_need))
        room_grant(g, client_of(x));
}

void request_room_check_loop(struct gw *g, struct client *c)
{
    if (c->c.waits_room && room_exempt(g, c))
        room_grant(g, c);
}

void request_uncount_loop(struct gw *g, size_t *n) { uncount(g, n); }

void request_sent_loop(struct gw *g, struct req *r)
{
    size_t n = r->counted ? r->in_len : 0;
    r->counted = 0;
    uncount(g, &n);
}

void request_room_drop_loop(struct gw *g, struct client *c)
{
    conn_room_leave_loop(g, &c->c);
    uncount(g, &c->gathering);
    c->room_granted = 0;
}

void request_free(struct gw *g, struct req *r)
{
    request_sent_loop(g, r); /* (given back, if it was not yet) */
    free(r->msg);
    free(r->etext);
    free(r->qtext);
    chunk_free(r->reply);
    buf_held_sub(r->held); /* a pool job's bytes, freed with the job whatever it made */
    free(r);
}

/* Drop the request bytes (sent, or answered without a worker). */
static void req_drop_msg(struct gw *g, struct client *c, struct req *r)
{
    request_sent_loop(g, r);
    if (r->msg) {
        c->pending -= req_cost(r);
        free(r->msg);
        r->msg = NULL;
        buf_held_sub(r->held); /* a compressed route's, inflated */
        r->held = 0;
    }
}

static void pop_head(struct gw *g, struct client *c) { request_remove_loop(g, c, client_head(c), 1); }

void request_remove_loop(struct gw *g, struct client *c, struct req *x, int answered)
{
    access_req_loop(g, c, x, answered);
    request_set_state_loop(g, c, x, RS_WAITING); /* off the group's queue, if it was on it */
    conn_mark_owed(&c->c); /* its reply, if any, is queued by now */
    TAILQ_REMOVE(&c->reqs, x, link);
    if (x->nested) {
        TAILQ_REMOVE(&c->nested, x, nlink);
        nested_wake(g, c);
    }
    req_drop_msg(g, c, x);
    request_free(g, x);
}

void request_drop_behind_loop(struct gw *g, struct client *c, uint64_t seq)
{
    struct req *x, *next;
    c->drop_why = "behind a message that could not be taken";
    for (x = client_head(c); x; x = next) {
        next = TAILQ_NEXT(x, link);
        /* (and the error of a bad header behind it, found as it came: at 4f50da8 a second badmsg:
         * helper round 30a) */
        if (x->seq > seq && ((!x->nested && x->state == RS_WAITING) || x->close_after))
            request_remove_loop(g, c, x, 0);
    }
    c->drop_why = NULL;
    callback_unasked_forget_loop(c, seq);
}

/* Drop every request behind r (nothing after it is answered). */
void request_drop_after_loop(struct gw *g, struct client *c, struct req *r)
{
    struct req *x;
    c->drop_why = "behind a message that could not be taken";
    while ((x = TAILQ_NEXT(r, link)))
        request_remove_loop(g, c, x, 0);
    c->drop_why = NULL;
    callback_unasked_forget_loop(c, r->seq); /* (answers it sent ahead behind it too) */
}

void request_free_all_loop(struct gw *g, struct client *c)
{
    callback_cancel_loop(g, c, NULL);
    struct call *k;
    while ((k = STAILQ_FIRST(&c->calls))) {
        STAILQ_REMOVE_HEAD(&c->calls, link);
        free(k);
    }
    c->ncalls = 0;
    while (client_head(c)) {
        struct req *r = client_head(c);
        TAILQ_REMOVE(&c->reqs, r, link);
        access_req_loop(g, c, r, 0);
        request_free(g, r);
    }
    callback_unasked_drop_loop(g, c); /* (all, no request left) */
    c->pending = 0;
    TAILQ_INIT(&c->nested);
    uncount(g, &c->gathering);
    c->room_granted = 0;
}

void request_error_loop(struct gw *g, struct client *c, struct req *r, const char *fmt, ...)
{
    char text[sizeof ((struct job *)0)->text];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    req_drop_msg(g, c, r);
    if (r == client_head(c))
        conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE); /* its queue timeout */
    r->outcome = ALOG_GWERROR; /* (the access log's, async or not) */
    free(r->etext);
    r->etext = strdup(text);
    request_set_state_loop(g, c, r, RS_LOCAL);
    if (r->type == KIPC_ASYNC) { /* nobody to tell: q prints an async message's error where it runs */
        log_limited(&g->lim.async_err, g->loop.now_ms, LOG_INFO, c->c.name, "async request %llu: error '%s (dropped: async)",
                    (unsigned long long)r->seq, text);
        request_set_state_loop(g, c, r, RS_READY); /* done with; from start_head (advancing), on to the
                                                    * next there, without recursion; else from here */
        if (r->nested)
            nested_flush(g, c);
        else if (!c->advancing)
            request_advance_loop(g, c);
        return;
    }
    struct job *j = job_new(job_encode_error, JK_REPLY);
    if (!j) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    snprintf(j->text, sizeof j->text, "%s", text);
    log_debug(c->c.name, "request %llu: error '%s", (unsigned long long)r->seq, text);
    conn_submit_loop(g->writers, j, &c->c, r->seq);
}

static void on_queue_timeout(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    struct req *r = client_head(c);
    if (!r || (r->state != RS_QUEUED && r->state != RS_HELD))
        return;
    if (g->cfg.queue_timeout <= 0) /* (a reload lifts it: request_queue_timeout_reloaded_loop) */
        return;
    r->grp->refused_timeout++;
    conn_refused_loop(g, REFUSED_QUEUE_TIMEOUT, c->c.name, "request waited %lld ms for a worker (queue_timeout)",
                      (long long)(g->loop.now_ms - r->t_arrive));
    request_error_loop(g, c, r, "qgate: timeout (queued %lld ms)", (long long)(g->loop.now_ms - r->t_arrive));
    request_check_pending_loop(g, c);
}

/* Its head's error, held for its answer to the callback of a worker lost, has waited
 * query_timeout: it goes now, as the run's would have had the worker lived (a client that never
 * answers, or has stopped, kept its queue, and its requests' room under pending_max, for good:
 * the simulation, seed 1197906). */
static void on_answer_timeout(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    struct req *h = client_head(c);
    if (!h || !h->wait_answer || !held_for_answer(c, h))
        return;
    log_warn(c->c.name, "no answer for query_timeout to the callback of a worker lost: the request's error goes now");
    c->gave_up = 1; /* (its answers are waited for no more; a late one is dropped) */
    request_advance_loop(g, c);
}

void request_hold_for_answer_loop(struct gw *g, struct client *c)
{
    struct req *h;
    while ((h = client_head(c)) && h->wait_answer && c->ncalls && !c->c.closing) {
        /* an answer it sent ahead, held while the worker ran what it sent nested before it: read now
         * (the worker went with it; at d6aa6f4 the error waited for an answer already sent) */
        struct req *n = TAILQ_NEXT(h, link);
        if (callback_unasked_answer_loop(g, c, n ? n->seq : UINT64_MAX) != 1)
            break;
    }
    if (h && h->wait_answer && g->cfg.query_timeout > 0)
        conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, g->loop.now_ms + g->cfg.query_timeout, on_answer_timeout);
}

int request_queue_timeout_reloaded_loop(struct gw *g, struct client *c)
{
    struct req *r = client_head(c);
    if (!r || (r->state != RS_QUEUED && r->state != RS_HELD) || r->type != KIPC_SYNC)
        return 0;
    if (g->cfg.queue_timeout > 0) /* (from its arrival: at once if it has waited that long) */
        conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, r->t_arrive + g->cfg.queue_timeout, on_queue_timeout);
    else
        conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    return 1;
}

/* r's group grp has no worker up: refused, counted. An async one too: dropped, as a q that
 * cannot be reached runs nothing (before, it waited for a worker, and held its client's sync
 * requests behind it from being told, and a client that had gone in its place in max_clients:
 * helper round 16) */
static void refuse_no_worker(struct gw *g, struct client *c, struct req *r, struct group *grp)
{
    grp->refused_no_worker++;
    conn_refused_loop(g, REFUSED_NO_WORKER, c->c.name, "no worker of group %s is up: refused a%s request",
                      grp->cfg.name, r->type == KIPC_SYNC ? "" : "n async");
    if (r->type != KIPC_SYNC && g->hooks.dropped)
        g->hooks.dropped(g->hooks.ctx, c->c.id, c->c.gen, r->seq, grp);
    request_error_loop(g, c, r, "qgate: no worker of group %s is up", grp->cfg.name);
}

/* Hand request r's bytes to a reader job (it owns them now): validation or a command. */
static void to_reader(struct gw *g, struct client *c, struct req *r, job_fn fn, int kind, int state)
{
    struct job *j = job_new(fn, kind);
    if (!j) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    j->in = r->msg;
    j->in_len = r->len;
    j->heavy = (uint8_t)job_heavy_msg(r->msg, r->len); /* (a zip bomb's decompression leaves a
                                                        * reader for the logins and commands) */
    job_args(j)->check.max = g->cfg.max_message;
    r->msg = NULL;
    c->pending -= req_cost(r);
    request_set_state_loop(g, c, r, (enum req_state)state);
    conn_submit_loop(g->readers, j, &c->c, r->seq);
}

/* (`.qgate.on; `group; query), (`.qgate.all; `group; query[; opts]), as read (r->form, on
 * arrival or by the reader that validated it): query's bytes become the request, to run on
 * group (on every worker of it, for .qgate.all). 1 if routed, -1 if answered instead (not
 * exactly such a form, no such group, not admitted). */
static int route(struct gw *g, struct client *c, struct req *r)
{
    const struct route_form *f = &r->form;
    int ok = f->kind && !f->bad;
    char name[CFG_NAME_MAX] = ""; /* out of the wrapper, which the query's header overwrites */
    if (ok)
        snprintf(name, sizeof name, "%s", (const char *)r->msg + f->grp); /* NUL-terminated: read so */
    struct group *to = ok ? dispatch_group_find_loop(g, name) : NULL;
    const char *user = c->us ? c->us->name : c->user;
    int session_all = to && f->kind == ROUTE_ALL && to->cfg.pool_mode == CFG_POOL_SESSION;
    if (!ok || !to || !dispatch_admits_loop(g, to, user) || session_all) {
        r->grp = to; /* the group it named, if there is one (the access log's and its totals) */
        if (!ok) /* (async: nobody to tell, the access log says why) */
            request_error_loop(g, c, r, "qgate: bad route: %s; it is %s", jobs_route_why(f), jobs_route_usage(f));
        else if (!to)
            request_error_loop(g, c, r, "qgate: no group %s", name);
        else if (session_all)
            request_error_loop(g, c, r, "qgate: .qgate.all does not apply to group %s (pool = session)", name);
        else
            request_error_loop(g, c, r, "qgate: access: group %s does not admit user '%s'", name, user);
        log_limited(&g->lim.not_routed, g->loop.now_ms, LOG_INFO, c->c.name, "request %llu not routed%s%s%s",
                    (unsigned long long)r->seq, r->type == KIPC_ASYNC ? " (async: dropped)" : "",
                    ok ? "" : ": bad route: ", ok ? "" : jobs_route_why(f));
        return -1;
    }
    /* no copy: a header for query's bytes goes over the end of the wrapper, and the message
     * starts there (r->off) */
    size_t qoff = f->qoff, qend = r->len - f->tail, nl = 8 + qend - qoff;
    uint8_t *h = r->msg + qoff - 8;
    uint8_t type = r->msg[1], order = r->msg[0];
    h[0] = order;
    h[1] = type;
    kipc_hdr_len_write(h, (uint32_t)nl);
    c->pending -= req_cost(r);
    r->off = (uint32_t)(qoff - 8);
    r->len = nl;
    c->pending += req_cost(r);
    r->grp = to;
    r->route = 0;
    r->routed = 1;
    r->fan = (uint8_t)(f->kind == ROUTE_ALL ? 1 + f->as_list : 0);
    r->partial = f->partial;
    log_debug(c->c.name, "request %llu: %s group %s", (unsigned long long)r->seq,
              f->kind == ROUTE_ALL ? "to every worker of" : "routed to", to->cfg.name);
    return 1;
}

/* Start head r where it does not wait in its group's queue: a .qgate.all on every worker up,
 * a session's request on its worker, a broadcast to every worker; held instead while its group
 * is paused. 1 if started (or answered, or held), 0 if it is to be queued. */
static int start_unqueued(struct gw *g, struct client *c, struct req *r)
{
    struct group *grp = r->grp;
    int fan = r->fan && r->type == KIPC_SYNC, own = c->sess && grp == c->grp && !r->fan;
    if (grp->paused && (fan || own)) { /* held, queue_timeout applying; the others wait in the queue */
        request_set_state_loop(g, c, r, RS_HELD);
        if (g->cfg.queue_timeout > 0 && r->type == KIPC_SYNC)
            conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, r->t_arrive + g->cfg.queue_timeout, on_queue_timeout);
        return 1;
    }
    if (fan) { /* .qgate.all: every worker up runs it, the replies merged */
        if (!grp->nup) {
            refuse_no_worker(g, c, r, grp);
            return 1;
        }
        conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE); /* its queue timeout, if it was held */
        request_set_state_loop(g, c, r, RS_RUNNING);
        if (g->back->fanout(g, grp, c, r))
            conn_close_loop(g, &c->c, "out of memory");
        return 1;
    }
    if (own) { /* pool = session: on its own worker, now or when that is free */
        g->back->session_start(g, c->sess, c);
        return 1;
    }
    if (r->type == KIPC_ASYNC && (grp->cfg.async_mode == CFG_ASYNC_BROADCAST || r->fan) && grp->nup &&
        !grp->paused) {
        request_set_state_loop(g, c, r, RS_RUNNING);
        if (g->back->broadcast(g, grp, c, r))
            return 1;
        request_set_state_loop(g, c, r, RS_WAITING); /* none could take it: it waits in the queue */
    }
    return 0;
}

/* Is r a gateway command (or what starts like one), not a route? Sync or async: an async one
 * runs as q runs neg[h] of a function, its reply dropped (request_reply_loop). */
static int command_of(const struct req *r)
{
    return r->route || r->routed ? 0 : r->cmd_known ? r->cmd : jobs_peek_command(r->msg, r->len);
}

int request_owes_reply_loop(const struct client *c)
{
    if (client_output_gone(c))
        return 0; /* (nothing reaches it) */
    const struct req *r;
    TAILQ_FOREACH(r, &c->reqs, link)
        if (r->type == KIPC_SYNC)
            return 1;
    return inbuf_avail(&c->c.in) > 0; /* (unread: it may be one) */
}

int request_runs_as_is_loop(const struct req *r, const struct group *grp)
{
    return r->type == KIPC_ASYNC && r->state == RS_WAITING && !r->unchecked && !r->route && !r->monitor &&
           r->grp == grp && !command_of(r);
}

/* Start the head request: a body to validate goes to a reader first, a gateway command to a
 * reader, a route to its group, a broadcast to every worker up, anything else to its group's
 * queue (or its session's worker). It never finishes here, so the FIFO is walked by
 * request_advance_loop alone, without recursion. */
static void start_head(struct gw *g, struct client *c, struct req *r)
{
    if (r->unchecked) {
        to_reader(g, c, r, job_validate_msg, JK_CHECK, RS_CHECKING);
        return;
    }
    if (r->monitor && !command_of(r)) { /* a monitor when it came: gateway commands only */
        conn_refused_loop(g, REFUSED_ACCESS, c->c.name, "user %s is a monitor: a request for a worker refused", c->user);
        request_error_loop(g, c, r, "qgate: access: user %s is a monitor (gateway commands only)", c->user);
        return;
    }
    if (r->route && route(g, c, r) < 0)
        return;
    int cmd = command_of(r);
    if (cmd < 0) {
        request_error_loop(g, c, r, "qgate: bad command: a command is .qgate.name[] or (`.qgate.name; arg), "
                                   "under %d bytes", GWCMD_MAX_LEN);
        return;
    }
    if (cmd) {
        to_reader(g, c, r, job_parse_command, JK_COMMAND, RS_LOCAL);
        return;
    }
    if (start_unqueued(g, c, r))
        return;
    struct group *grp = r->grp;
    if (grp->unavailable && !grp->nup && !grp->paused) {
        refuse_no_worker(g, c, r, grp);
        return;
    }
    if (r->type == KIPC_SYNC && dispatch_full_loop(g, grp)) { /* an async message always waits */
        grp->refused_busy++;
        conn_refused_loop(g, REFUSED_BUSY, c->c.name, "group %s: max_queue (%d) clients wait: 'qgate: busy",
                          grp->cfg.name, g->cfg.max_queue);
        request_error_loop(g, c, r, "qgate: busy");
        return;
    }
    request_set_state_loop(g, c, r, RS_QUEUED);
    if (g->cfg.queue_timeout > 0 && r->type == KIPC_SYNC)
        conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, r->t_arrive + g->cfg.queue_timeout, on_queue_timeout);
}

/* Whole messages still unread in the input buffer? */
static int has_whole_message(const struct gw *g, const struct client *c)
{
    struct kipc_hdr h;
    size_t need;
    const char *why;
    return kipc_frame_check(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), (uint64_t)g->cfg.max_message, &h, &need,
                            &why) == QG_OK;
}

void request_finish_if_gone_loop(struct gw *g, struct client *c)
{
    if (c->eof && !c->c.closing && c->st != CS_AUTH && !client_head(c) && !c->c.in_backlog &&
        !has_whole_message(g, c) && (!c->half || (!conn_pending(&c->c) && !c->c.streaming)))
        conn_close_loop(g, &c->c, c->close_why ? c->close_why : "client closed the connection"); /* (after
                                                                  * a FIN: its replies written) */
}

void request_unhold_loop(struct gw *g, struct client *c)
{
    struct req *h = client_head(c);
    if (!h || h->state != RS_HELD || c->c.closing) /* (closing: its requests are freed as they are) */
        return;
    request_set_state_loop(g, c, h, RS_WAITING); /* off the held list */
    request_advance_loop(g, c);
}

void request_session_ended_loop(struct gw *g, struct client *c)
{
    struct req *h = client_head(c);
    if (c->c.closing)
        return;
    if (h && h->state == RS_HELD)
        request_unhold_loop(g, c);
    else
        request_advance_loop(g, c); /* (a head given to its session's worker while that ran another's
                                     * run waits for nothing now) */
}

void request_advance_loop(struct gw *g, struct client *c)
{
    struct req *r;
    if (c->lost_nested) /* (its lost calls' errors now due go ahead of its head's) */
        callback_lost_release_loop(g, c);
    c->advancing++;
    while (!c->c.closing && (r = client_head(c))) {
        if (r->state == RS_READY && !client_nested_owed(c) && !held_for_answer(c, r)) { /* (after what was
                                                   * called nested within it, and the callback left) */
            TAILQ_REMOVE(&c->reqs, r, link);
            access_req_loop(g, c, r, 1);
            log_debug(c->c.name, "request %llu: reply of %zu bytes%s", (unsigned long long)r->seq,
                      r->reply ? r->reply->len : 0, c->c.fd >= 0 ? "" : " dropped (the client has gone)");
            if (r->type == KIPC_SYNC && c->c.fd >= 0) {
                conn_push_whole_loop(g, &c->c, r->reply); /* after a publish being streamed to it */
                r->reply = NULL;
            }
            request_free(g, r);
            continue;
        }
        /* a client that reads nothing gets nothing more: its output bounds what it costs */
        if (r->state == RS_WAITING && !client_output_full_loop(g, c)) {
            start_head(g, c, r);
            if (!c->c.closing && client_head(c) == r && r->state == RS_READY)
                continue; /* done with at once (an async message refused): on to the next */
        }
        break;
    }
    c->advancing--;
    if (c->c.closing)
        return;
    callback_unasked_drop_loop(g, c); /* (those sent behind the requests done, unread by a callback) */
    if (c->st == CS_FLUSHING && !client_head(c)) /* nothing owed now (its last request an async one, its
                                                  * bad message's error answered nested before): the
                                                  * close once its output is written, on a flush */
        conn_mark_dirty_loop(g, &c->c);
    request_check_pending_loop(g, c);
    request_finish_if_gone_loop(g, c);
}

struct req *request_of_seq_loop(const struct client *c, uint64_t seq)
{
    struct req *r = client_head(c);
    if (r && r->seq == seq)
        return r;
    TAILQ_FOREACH(r, &c->nested, nlink) /* (a few) */
        if (r->seq == seq)
            return r;
    TAILQ_FOREACH_REVERSE(r, &c->reqs, reqlist, link) /* a bad message's error: at the tail */
        if (r->seq == seq)
            return r;
    return NULL;
}

void request_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len)
{
    /* the head's, usually; a bad message's error is made as soon as it is seen, behind the
     * requests still owed, and waits there for its turn */
    struct req *r = request_of_seq_loop(c, seq);
    if (!r || r->state != RS_LOCAL) {
        free(msg);
        return;
    }
    buf_held_sub(r->held); /* its job's bytes: freed, or the reply counted now */
    r->held = 0;
    if (r->type != KIPC_SYNC) { /* nobody waits for an async message's reply (an async gateway
                                 * command's): done with, nothing sent */
        free(msg);
    } else if (!(r->reply = chunk_wrap_held(msg, len))) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    request_set_state_loop(g, c, r, RS_READY);
    if (r->nested) {
        nested_flush(g, c);
        return;
    }
    if (r->close_after && r == client_head(c)) /* the bad message's error: nothing after it */
        request_drop_after_loop(g, c, client_head(c));
    request_advance_loop(g, c);
}

void request_reply_done_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    if (!c)
        return;
    if (!j->out) {
        conn_close_loop(g, &c->c, "out of memory making a reply");
        return;
    }
    request_reply_loop(g, c, j->seq, j->out, j->out_len);
    j->out = NULL;
}

void request_wreply_done_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    struct req *r = c && j->result ? request_of_seq_loop(c, j->seq) : NULL;
    if (r && r->state == RS_LOCAL && (r->outcome == ALOG_OK || r->outcome == ALOG_ERROR)) { /* the gateway's
                                               * error in its place (a reply that cannot be decompressed,
                                               * or that its client cannot take), a q error's included:
                                               * the client gets the gateway's */
        r->outcome = ALOG_GWERROR;
        free(r->etext);
        r->etext = strdup(j->text);
    }
    request_reply_done_loop(g, j);
}

void request_head_done_loop(struct gw *g, struct client *c)
{
    client_set_worker_loop(c, NULL);
    if (c->c.has_pipe && !c->c.piped)
        conn_pipe_close_loop(&c->c);
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    while (client_head(c) && client_head(c)->state == RS_RUNNING)
        pop_head(g, c);
    request_advance_loop(g, c);
}

/* ---- the pause for client_max_pending ------------------------------------------------------ */

/* Paused c reads again (what it had read is framed already: a pause stops the reads after). */
static void read_again(struct gw *g, struct client *c)
{
    c->paused = 0;
    conn_set_reading_loop(g, &c->c, 1);
}

void request_check_pending_loop(struct gw *g, struct client *c)
{
    /* (its answer to a callback whose worker is gone, that its head's error waits for, too) */
    int owes = !callback_ahead_waits_loop(g, c) && /* (its answer came: held, it is owed nothing; at
                                     * 83f6b20 what it sent behind it gave its callback up: round 31c) */
               (inside_callback(g, c) || (client_head(c) && held_for_answer(c, client_head(c))));
    size_t asked = c->pending - c->unasked_bytes; /* (answers it sent ahead are no requests instead of its
                                                   * answer: at 4f99181 200 KB of them gave it up, helper
                                                   * round 29b) */
    if (owes && asked > 2 * (size_t)g->cfg.client_max_pending && !c->giving_up) { /* read on for the
                                                                       * answer, but not without bound */
        log_warn(c->c.name, "%zu bytes of requests and no answer to its worker's callback: the worker is told so",
                 asked);
        callback_give_up_loop(g, c);
        owes = 0;
        if (!c->advancing && client_head(c) && client_head(c)->wait_answer) { /* (an error held for its
                              * answer: it goes now; not given up again from inside that advance, where
                              * a head held for a lost worker's nested errors still owes: at 01bef40, for
                              * ever, a stack overflow: the long simulation, seed 1250477) */
            c->giving_up = 1;
            request_advance_loop(g, c);
            c->giving_up = 0;
        }
    }
    if (owes) /* its answer may be behind a message that waits for room */
        request_room_check_loop(g, c);
    /* what it sent nested, unsent to its worker, is bounded as its requests are; what the gateway
     * answers nested (its commands) by its output */
    size_t nest = owes ? callback_nest_unsent_loop(g, c) : 0, max = (size_t)g->cfg.client_max_pending;
    int full = nest > (c->paused ? max / 2 : max) || (owes && client_output_full_loop(g, c));
    int may_read = c->st == CS_READY && !c->eof && (!g->draining || owes); /* (a drain reads an answer
                                       * a request received needs, nothing else: received is run) */
    if (c->paused && owes && may_read && !full) { /* its answer may be behind what it sent since */
        read_again(g, c);
    } else if (!c->paused && (full || (!owes && (g->draining || c->pending > max)))) {
        c->paused = 1;
        conn_set_reading_loop(g, &c->c, 0);
        log_debug(c->c.name, "paused: %zu bytes of requests waiting, %zu sent nested unsent", c->pending, nest);
    } else if (c->paused && c->pending <= max / 2 && may_read && !full) {
        read_again(g, c);
    }
}

/* ---- framing ----------------------------------------------------------------------------------- */

/* Message msg (owned; header h, a as it arrived) of c, number seq, goes on its queue of requests
 * (counts: its bytes count against pending_max until it is sent). NULL if out of memory (msg
 * freed). */
static struct req *queue_req(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, const struct kipc_hdr *h,
                             const struct jobs_arrival *a, int counts)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        if (counts)
            buf_pending_sub((size_t)h->len);
        free(msg);
        return NULL;
    }
    *r = (struct req){.seq = seq, .type = h->type, .msg = msg, .len = (size_t)h->len, .unchecked = a->unchecked,
                      .route = a->route, .form = a->form, .grp = c->grp, .cmd = a->cmd, .cmd_known = !h->compressed,
                      .admin = (uint8_t)(c->us && c->us->admin), .monitor = (uint8_t)(c->us && c->us->monitor),
                      .t_arrive = g->loop.now_ms, .t_in_us = loop_stamp_us_loop(g), .in_len = (size_t)h->len,
                      .counted = (uint8_t)counts};
    c->pending += req_cost(r);
    TAILQ_INSERT_TAIL(&c->reqs, r, link);
    log_debug(c->c.name, "request %llu: %s, %zu bytes%s", (unsigned long long)r->seq, kipc_type_name(r->type), r->len,
              a->unchecked ? ", validated on a reader" : "");
    return r;
}

/* ---- what a client sends from inside a callback, for the gateway ------------------------------ */

/* Does nested r (a bad message's error) wait for the replies its worker owes c for what c sent
 * it nested before? (At 52a7b1c it went at once, ahead of them, and the close after it: the
 * simulation, seed 2310.) */
static int waits_worker_nested(struct gw *g, const struct client *c, const struct req *r)
{
    const struct conn *w = r->wn_wait ? conn_lookup_loop(g, r->wn_id, r->wn_gen) : NULL;
    return w && w->kind == CONN_WORKER && g->back->nested_owed(w, c) > QG_MAX(r->encl, 0); /* (not
                                    * for the calls whose callbacks it came inside: theirs come after
                                    * it; at 63c4f19 it waited for them, two deep: helper round 28b) */
}

/* c's requests answered nested by the gateway go, in the order they came, as their replies are
 * made, ahead of the request they were sent within (which waits for them); then the FIFO goes on. */
static void nested_flush(struct gw *g, struct client *c)
{
    struct req *r;
    int flushed = 0;
    while ((r = TAILQ_FIRST(&c->nested)) && r->state == RS_READY && !waits_worker_nested(g, c, r)) {
        flushed = 1;
        TAILQ_REMOVE(&c->nested, r, nlink);
        TAILQ_REMOVE(&c->reqs, r, link);
        access_req_loop(g, c, r, 1);
        log_debug(c->c.name, "request %llu (nested): reply of %zu bytes%s", (unsigned long long)r->seq,
                  r->reply ? r->reply->len : 0, c->c.fd >= 0 ? "" : " dropped (the client has gone)");
        if (r->reply && c->c.fd >= 0) {
            conn_push_whole_loop(g, &c->c, r->reply);
            r->reply = NULL;
        }
        request_free(g, r);
    }
    nested_wake(g, c);
    if (flushed && client_nested_owed(c)) /* a reply of its worker's that waited for these (not */
        conn_wake_loop(g, &c->c);          /* for those left: request_nested_encloses_loop) */
    if (c->lost_nested) /* (a lost call's error waited for them) */
        callback_lost_release_loop(g, c);
    if (!c->advancing) /* a reply at the head may have waited for them */
        request_advance_loop(g, c);
}

int request_nested_encloses_loop(const struct client *c, const struct conn *w, int depth)
{
    const struct req *r;
    TAILQ_FOREACH(r, &c->nested, nlink) /* (a few) */
        if (r->wn_id == w->id && r->wn_gen == w->gen &&
            (r->wn_wait ? r->encl >= depth : r->answers_at < c->answers))
            return 1;
    return 0;
}

void request_nested_flush_loop(struct gw *g, struct client *c)
{
    if (!c->c.closing && client_nested_owed(c))
        nested_flush(g, c);
}

/* r (c's, sync, or an async gateway command), sent from inside a callback and not for the worker
 * that called back, is answered now, ahead of the request that called back, as q answers a call
 * that comes on the handle it waits on: a gateway command runs here; a route, or a request while
 * the callbacks owed are a .qgate.all's, cannot run (their workers wait on c), and gets an error
 * at once instead of waiting for ever behind the request that called back. */
static void nest(struct gw *g, struct client *c, struct req *r) /* (on the nested list, in order) */
{
    const struct req *h = client_head(c);
    const struct conn *wc = r->wn_wait ? conn_lookup_loop(g, r->wn_id, r->wn_gen) : callback_nest_worker_loop(g, c);
    r->encl = wc ? callback_depth_loop(g, c, wc, r->wn_wait) : -1; /* (the calls whose callbacks it is
                                                 * inside; a bad message's, cancelled as it came) */
    if (wc) {
        r->wn_id = wc->id;
        r->wn_gen = wc->gen;
    }
    r->answers_at = c->answers;
    r->nested = 1;
    TAILQ_INSERT_TAIL(&c->nested, r, nlink);
    g->nested++;
    if (g->hooks.nested)
        g->hooks.nested(g->hooks.ctx, c->c.id, c->c.gen, r->seq, h ? h->seq : r->seq, 1);
}

static void answer_nested(struct gw *g, struct client *c, struct req *r)
{
    int cmd = command_of(r);
    log_debug(c->c.name, "request %llu nested: %s", (unsigned long long)r->seq,
              cmd > 0 ? "a gateway command, run now" : "answered now with an error");
    if (r->route || r->routed)
        request_error_loop(g, c, r, "qgate: a route cannot run inside a callback (the request that called back "
                                    "holds its place); send it after the callback's answer");
    else if (cmd < 0)
        request_error_loop(g, c, r, "qgate: bad command: a command is .qgate.name[] or (`.qgate.name; arg), "
                                    "under %d bytes", GWCMD_MAX_LEN);
    else if (cmd)
        to_reader(g, c, r, job_parse_command, JK_COMMAND, RS_LOCAL);
    else if (c->fo)
        request_error_loop(g, c, r, "qgate: a request cannot run inside a .qgate.all's callback (its workers wait "
                                    "on this client); send it after the callback's answer");
    else /* (its worker waits on no callback now: timed out, say) */
        request_error_loop(g, c, r, "qgate: a request cannot run inside this callback now; send it after the "
                                    "callback's answer");
}

static void start_nested(struct gw *g, struct client *c, struct req *r)
{
    nest(g, c, r);
    if (r->unchecked) /* its body validated on a reader first: a malformed one is a bad message, as
                       * anywhere; its place among the nested kept meanwhile */
        to_reader(g, c, r, job_validate_msg, JK_CHECK, RS_CHECKING);
    else
        answer_nested(g, c, r);
}

/* Queued r of c is malformed (why): it is answered 'qgate: badmsg in its place, what came after
 * it dropped, and nothing more is read. */
static void bad_in_place(struct gw *g, struct client *c, struct req *r, const char *why)
{
    request_drop_after_loop(g, c, r);
    stop_for_bad_message(g, c, why);
    if (client_output_gone(c)) { /* (a client that shut its side is told) */
        request_remove_loop(g, c, r, 1);
        request_finish_if_gone_loop(g, c);
        return;
    }
    r->type = KIPC_SYNC;
    r->close_after = 1;
    r->unchecked = 0;
    /* (nested: at once, as the answer its client waits for inside the callback; the close comes
     * once the request that called back is answered too) */
    request_error_loop(g, c, r, "qgate: badmsg %s", why);
}

/* Inside a callback where what c queued cannot go nested (a .qgate.all's), from r on, up to the
 * first answer c sent ahead: what is not yet checked is checked now, in its place, before that
 * answer is read, as q reads what waits on the handle: one known malformed (under 16 KiB, queued
 * unchecked as it came) is a bad message there; one over 16 KiB or compressed goes to a reader
 * first (at 204a891 the answer behind it was read first, and without one the worker waited in its
 * callback for ever: helper rounds 30b, 30c). 1: the walk waits (a bad message, or a check). */
static int check_queued(struct gw *g, struct client *c, struct req *r)
{
    uint64_t upto = callback_unasked_after_loop(c);
    for (; r && r->seq <= upto; r = TAILQ_NEXT(r, link)) {
        if (r->state == RS_CHECKING)
            return 1;
        if (!r->unchecked || r->nested || r->local || r->state != RS_WAITING || !r->msg)
            continue;
        if (r->msg[2] || r->len > VALIDATE_ON_LOOP_MAX) {
            to_reader(g, c, r, job_validate_msg, JK_CHECK, RS_CHECKING); /* (then the walk again) */
            return 1;
        }
        struct kerr e;
        if (kvalidate_check(r->msg + 8, r->len - 8, r->msg[0], NULL, &e) == QG_OK)
            continue;
        char why[96];
        kcodec_err_text(&e, why, sizeof why);
        bad_in_place(g, c, r, why);
        return 1;
    }
    return 0;
}

void request_nest_queued_loop(struct gw *g, struct client *c)
{
    /* (at 797271b they waited behind the request that called back, so what c sent from inside the
     * callback, run nested at once, was answered before them, out of the order sent: helper
     * round 23b; at fbf8731 those behind one that could not go nested still did: round 25a) */
    struct req *h = client_head(c), *r, *next; /* (the head runs on the worker that called back) */
    while (h && h->state == RS_RUNNING && (r = TAILQ_NEXT(h, link)) && r->state == RS_RUNNING)
        h = r; /* the async messages sent in its run: what is queued behind them (at 335b660 it waited
                * for the run's end, so a sync request ran after the callbacks, not inside them, and
                * took another answer: helper round 27a) */
    if (!h || h->state != RS_RUNNING || c->c.in_job) /* (one on a reader first: it goes on from there) */
        return;
    for (r = TAILQ_NEXT(h, link);; r = next) {
        int nests = r && !c->c.closing && callback_nest_worker_loop(g, c);
        if (r && !nests && !c->c.closing && c->ncalls && check_queued(g, c, r))
            return;
        /* an answer c sent before r, before any callback asked: read in its place, as on q; any
         * held, when what is queued cannot go nested (a .qgate.all's callback): that waits its
         * turn, behind the request, and takes no callback (at 4f99181 the answer waited behind
         * it: the .qgate.all hung, helper round 29a) */
        int a = callback_unasked_answer_loop(g, c, nests ? r->seq : UINT64_MAX);
        if (a == 1)
            request_nest_queued_loop(g, c); /* (what is left: nested if another callback is owed) */
        if (a || !nests)
            return;
        next = TAILQ_NEXT(r, link);
        if (r->nested) /* (gone nested already: the gateway's, answered in its place) */
            continue;
        if (r->state != RS_WAITING || !r->msg)
            break;
        int bc = r->type == KIPC_ASYNC && c->grp && c->grp->cfg.async_mode == CFG_ASYNC_BROADCAST;
        if (bc || ((r->route || r->local) && r->type == KIPC_ASYNC))
            continue; /* (no reply: it waits its turn, as one sent inside the callback does; a
                       * compressed async route, seen inflated, too: at 19229d1 it was sent to a
                       * reader again and again, and the client read no more: helper round 26a) */
        if ((r->cmd && r->cmd_known) || r->route) {
            start_nested(g, c, r); /* the gateway's: a command runs now, a route cannot run there,
                                    * as when sent inside the callback (validated first in its place) */
            continue;
        }
        TAILQ_REMOVE(&c->reqs, r, link);
        request_sent_loop(g, r); /* (its room under pending_max given back, as a nested message's is) */
        c->pending -= req_cost(r);
        uint8_t *m = r->msg;
        size_t len = r->len;
        uint64_t seq = r->seq;
        int checked = !r->unchecked;
        r->msg = NULL;
        request_free(g, r);
        log_debug(c->c.name, "request %llu, queued behind the one that called back, goes nested", (unsigned long long)seq);
        if (callback_nest_queued_loop(g, c, m, len, seq, checked) != SS_OK)
            break; /* (SS_WAIT: on a reader first, c read no more meanwhile; the rest once it is back) */
    }
}

/* A whole message of h->len bytes (msg, owned): a request, or an answer to a callback. */
int request_message_loop(struct gw *g, struct conn *x, const struct kipc_hdr *h, uint8_t *msg)
{
    struct client *c = client_of(x);
    if (c->st != CS_READY && c->st != CS_GONE) { /* it reads nothing more */
        uncount(g, &c->gathering);
        free(msg);
        return SS_STOP;
    }
    size_t counted = c->gathering; /* (room kept for it since its header) */
    c->gathering = 0;
    if (h->type == KIPC_RESPONSE) {
        uncount(g, &counted);
        return callback_answer_loop(g, c, msg, (size_t)h->len);
    }
    if (c->refuse) { /* over max_clients: its first sync request gets the error, then the close */
        uncount(g, &counted);
        free(msg);
        if (h->type != KIPC_SYNC) /* dropped, unrun: the error goes to the first that waits for it (or */
            return SS_OK;         /* the close at handshake_timeout after the handshake, as before) */
        conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
        request_refuse_loop(g, c, "qgate: too many connections", (size_t)h->len);
        return SS_STOP;
    }
    struct jobs_arrival a;
    struct kerr e;
    int bad = jobs_arrival(msg, h, VALIDATE_ON_LOOP_MAX, &a, &e);
    int behind = callback_ahead_waits_loop(g, c); /* (behind an answer sent ahead, held: in its turn) */
    if (bad && (!c->ncalls || behind) && client_head(c)) {
        /* behind a request that may yet call back: a reader finds it bad in its place, as one over
         * 16 KiB is, nested in that callback if one comes (at 9116339 it was answered at once, the
         * callbacks told no answer comes before they came: the callback was never shown, and what
         * was sent between ran after that request, not inside it: helper round 29d) */
        a = (struct jobs_arrival){.unchecked = 1};
        bad = 0;
    }
    if (bad) {
        uncount(g, &counted);
        free(msg);
        char why[96];
        kcodec_err_text(&e, why, sizeof why);
        request_bad_message_loop(g, c, why, h->type, NEW_SEQ);
        return SS_STOP;
    }
    int bc = h->type == KIPC_ASYNC && c->grp && c->grp->cfg.async_mode == CFG_ASYNC_BROADCAST; /* (every worker
                                   * of the group runs it, in order: never the one worker nested) */
    int st = c->ncalls && !behind && !a.route && (h->compressed || !a.cmd) && !bc /* (the gateway's own run here) */
                 ? callback_nest_loop(g, c, msg, (size_t)h->len, !a.unchecked)
                 : -1;
    if (st >= 0) { /* owed, it runs nested */
        uncount(g, &counted);
        return st;
    }
    int counts = counted == h->len;
    if (!counts) /* (never: the room kept is the message's) */
        uncount(g, &counted);
    /* from inside a callback, not run nested on its worker: a gateway command, or a sync message
     * that cannot run there (an async one waits its turn) */
    int here = !behind && ((a.cmd && !h->compressed) || h->type == KIPC_SYNC) ? inside_callback(g, c) || owes_lost_call(c) : 0;
    struct req *r = queue_req(g, c, c->next_seq++, msg, h, &a, counts);
    if (!r)
        return stream_close(&c->c, "out of memory");
    if (here)
        start_nested(g, c, r);
    return c->st == CS_READY || c->st == CS_GONE ? SS_OK : SS_STOP;
}

void request_nested_local_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, uint64_t seq, int cmd)
{
    struct kipc_hdr h = {.type = msg[1], .compressed = msg[2] != 0, .len = len};
    /* a route: checked again, as a request (its route read then); a command: plain, read here */
    struct jobs_arrival a = {.unchecked = !cmd, .cmd = (int8_t)cmd};
    struct req *r = queue_req(g, c, seq, msg, &h, &a, 0);
    if (r)
        r->local = 1;
    if (!r) {
        conn_close_loop(g, &c->c, "out of memory");
    } else if (cmd ? inside_callback(g, c) : h.type == KIPC_SYNC) { /* a command runs now, a route is
                                                                      * told at once it cannot */
        r->route = !cmd;
        nest(g, c, r); /* (read on a reader already) */
        answer_nested(g, c, r);
    } else {
        request_advance_loop(g, c);
    }
}

/* What arrived has been framed: its requests go on. */
int request_framed_loop(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    if (c->eof && !c->c.in_backlog && !c->c.waits_room) { /* a message cut by the close never arrives */
        stream_input_drop_loop(&c->c);
        uncount(g, &c->gathering);
    }
    request_advance_loop(g, c);
    if (c->eof && !c->c.closing) /* (what it sent before the close is framed: no answer among it) */
        callback_gone_calls_loop(g, c);
    return c->st == CS_READY && !c->paused && !c->c.closing ? SS_OK : SS_STOP;
}

/* ---- bad messages ---------------------------------------------------------------------------- */

/* Nothing more is read: what is owed is sent, then the client is closed (FLUSHING). */
static void stop_reading(struct gw *g, struct client *c)
{
    if (g->hooks.unread)
        g->hooks.unread(g->hooks.ctx, c->c.id, c->c.gen, c->next_seq);
    if (!callback_ahead_waits_loop(g, c)) /* q reads nothing more: no answer comes (but for one sent */
        callback_cancel_loop(g, c, NULL); /* before, held: read in its turn, the rest told then) */
    if (c->st == CS_READY) /* (gone, flushing or lingering: it reads no requests already) */
        client_set_state_loop(g, c, CS_FLUSHING);
    request_room_drop_loop(g, c); /* (a message waiting for room, or being read: dropped) */
    conn_set_reading_loop(g, &c->c, 0);
    stream_input_drop_loop(&c->c);
    conn_backlog_remove_loop(g, &c->c);
}

/* Stop reading after a bad message: 'qgate: badmsg comes after the replies owed, then close. */
static void stop_for_bad_message(struct gw *g, struct client *c, const char *why)
{
    conn_refused_loop(g, REFUSED_BADMSG, c->c.name, "bad message: %s", why);
    stop_reading(g, c);
}

/* Reading has stopped: error text goes after the replies owed (as the answer to a request of
 * seq next, of len bytes if known; nested: among the answers to what c sent from inside the
 * callback it is in, in its place, before the reply of the request that called back), then the
 * close. */
static void close_with_error(struct gw *g, struct client *c, const char *text, size_t len, int nested,
                             const struct conn *wn, uint64_t seq)
{
    if (client_output_gone(c)) { /* nobody to tell: what came before still runs (framed from the */
        request_advance_loop(g, c); /* backlog, nothing after this advances it) */
        return;
    }
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    r->seq = seq == NEW_SEQ ? c->next_seq++ : seq;
    r->type = KIPC_SYNC;
    r->grp = c->grp;
    r->close_after = 1;
    r->t_arrive = g->loop.now_ms;
    r->t_in_us = loop_stamp_us_loop(g);
    r->in_len = len;
    TAILQ_INSERT_TAIL(&c->reqs, r, link);
    if (wn) { /* (after the replies it owes c for what c sent it nested before) */
        r->wn_wait = 1;
        r->wn_id = wn->id;
        r->wn_gen = wn->gen;
    }
    if (nested)
        nest(g, c, r);
    request_error_loop(g, c, r, "%s", text);
}

/* A header, or a small body, that the gateway cannot accept: its request (number seq, or the next) answers
 * 'qgate: badmsg after the replies owed. */
void request_bad_message_loop(struct gw *g, struct client *c, const char *why, int type, uint64_t seq)
{
    /* sent from inside a callback, and waited for there (sync, or of a type not known): answered
     * as a nested call is, in its place among them, before the reply of the request that called
     * back; then the close once that is answered (at 3929a8f it went after that reply, and each
     * was read as the other's: helper round 20) */
    int nested = type != KIPC_ASYNC && type != KIPC_RESPONSE && (inside_callback(g, c) || owes_lost_call(c)) &&
                 !callback_ahead_waits_loop(g, c); /* (after an answer to that callback, held: read after it) */
    const struct conn *wn = nested ? callback_nest_worker_loop(g, c) : NULL; /* (before the cancel) */
    stop_for_bad_message(g, c, why); /* (the callbacks cancelled: their workers told no answer comes) */
    char text[160];
    snprintf(text, sizeof text, "qgate: badmsg %s", why);
    close_with_error(g, c, text, 0, nested, wn, seq);
}

/* One request's answer at exit: its reply made, or the error for what has none. 0, or -1 when
 * nothing more may go (the output in the middle of a message, or memory gone). */
static int exit_answer(struct gw *g, struct client *c, struct req *r, const char *why)
{
    if (c->c.streaming) /* (a reply or publish half written: nothing can go after it) */
        return -1;
    if (r->state == RS_READY) {
        if (r->type == KIPC_SYNC && r->reply) {
            conn_push_whole_loop(g, &c->c, r->reply);
            r->reply = NULL;
        }
        return 0;
    }
    if (r->type != KIPC_SYNC)
        return 0;
    char text[200];
    if (r->state == RS_RUNNING) /* (sent to a worker: it may have run) */
        snprintf(text, sizeof text, "qgate: exiting (%s): no reply came from the worker running it", why);
    else
        snprintf(text, sizeof text, "qgate: exiting (%s): it was not run", why);
    free(r->etext);
    r->etext = strdup(text);
    r->outcome = ALOG_GWERROR;
    size_t len;
    uint8_t *m = kcodec_error_msg(text, &len);
    struct chunk *ch = m ? chunk_wrap(m, len) : NULL;
    if (!ch) {
        free(m);
        return -1;
    }
    conn_push_whole_loop(g, &c->c, ch);
    return 0;
}

void request_exit_answers_loop(struct gw *g, struct client *c, const char *why)
{
    if (c->c.fd < 0 || c->c.closing || (c->st != CS_READY && c->st != CS_FLUSHING && c->st != CS_GONE))
        return;
    struct req *r;
    int stop = 0;
    TAILQ_FOREACH(r, &c->nested, nlink) /* what it sent from inside a callback goes first */
        if (!stop)
            stop = exit_answer(g, c, r, why);
    TAILQ_FOREACH(r, &c->reqs, link)
        if (!stop && !r->nested)
            stop = exit_answer(g, c, r, why);
    stream_flush_loop(g, &c->c); /* what the kernel takes now: nothing runs after this */
    conn_close_loop(g, &c->c, "the gateway is exiting");
}

void request_stop_reading_loop(struct gw *g, struct client *c) { stop_reading(g, c); }

void request_refuse_loop(struct gw *g, struct client *c, const char *text, size_t len)
{
    stop_reading(g, c);
    close_with_error(g, c, text, len, 0, NULL, NEW_SEQ);
}

/* Request x will not run: its session's worker is gone (named to tests/sim's lost hook). */
static void give_up(struct gw *g, struct client *c, struct req *x)
{
    if (g->hooks.lost)
        g->hooks.lost(g->hooks.ctx, c->c.id, c->c.gen, x->seq);
    c->drop_why = "its session's worker was lost";
    request_remove_loop(g, c, x, 0);
    c->drop_why = NULL;
}

void request_session_lost_loop(struct gw *g, struct client *c, int cut, const char *text)
{
    if (c->c.closing)
        return;
    log_info(c->c.name, "session: %s", text + strlen("qgate: "));
    c->sess_lost = 1; /* (why it lingers, then closes) */
    if (cut || client_output_gone(c)) { /* its stream is broken (what was queued for it ahead of
                                          * the cut still goes: tail.h), or nobody is left to tell */
        if (cut)
            client_cut_loop(g, c, "its session's worker was lost");
        else
            conn_close_loop(g, &c->c, "its session's worker was lost");
        return;
    }
    while (client_head(c) && client_head(c)->state == RS_RUNNING && client_head(c)->type == KIPC_ASYNC)
        request_remove_loop(g, c, client_head(c), 1); /* ran, or went down with the worker */
    stop_reading(g, c);
    struct req *r;
    TAILQ_FOREACH(r, &c->reqs, link)
        if (r->type == KIPC_SYNC && r->state != RS_LOCAL && r->state != RS_READY)
            break;
    if (r)
        while (TAILQ_NEXT(r, link))
            give_up(g, c, TAILQ_NEXT(r, link)); /* nothing after it */
    /* before it, what has not run never will; replies made (commands, errors) still go */
    for (struct req *x = client_head(c), *n; x && x != r; x = n) {
        n = TAILQ_NEXT(x, link);
        if (x->state != RS_LOCAL && x->state != RS_READY)
            give_up(g, c, x);
    }
    if (r) {
        r->close_after = 1;
        request_error_loop(g, c, r, "%s", text);
        return;
    }
    if (!client_head(c) && !conn_pending(&c->c))
        conn_close_loop(g, &c->c, "its session's worker was lost");
    else
        request_advance_loop(g, c); /* replies made before go, then the close (FLUSHING) */
}

void request_checked_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    struct req *r = c ? request_of_seq_loop(c, j->seq) : NULL; /* the head, or one nested */
    if (!r || r->state != RS_CHECKING)
        return;
    if (!j->result && j->out && !gw_hold_room(g, j->out_len)) { /* inflated past hold_max */
        char why[96], text[160];
        conn_refused_loop(g, REFUSED_HOLD_MAX, c->c.name, "%s: a compressed message of %zu bytes inflated refused",
                          gw_hold_why(g, j->out_len, why, sizeof why), j->out_len);
        request_error_loop(g, c, r, "%s", gw_hold_error(g, j->out_len, text, sizeof text));
        return;
    }
    if (!j->result) {
        r->msg = j->out ? j->out : j->in; /* a compressed route comes back decompressed */
        r->len = j->out ? j->out_len : r->len;
        /* the reader read what the arrival's peek saw, and what no peek sees in a compressed
         * message: the route as a whole, its offsets into r->msg */
        r->form = job_args(j)->check.form;
        r->route = r->form.kind != 0;
        if (j->out) { /* held inflated (as its client sent it, its bytes counted in client_max_pending) */
            r->held = j->out_len;
            buf_held_add(r->held);
            j->out = NULL;
        } else {
            j->in = NULL;
        }
        c->pending += req_cost(r);
        r->unchecked = 0;
        request_set_state_loop(g, c, r, RS_WAITING);
        if (r->nested) { /* sent from inside a callback: answered now, in its place among them */
            answer_nested(g, c, r);
        } else {
            request_advance_loop(g, c);
            if (!c->c.closing) /* (checked in its place inside a callback: what is behind it goes on) */
                request_nest_queued_loop(g, c);
        }
        return;
    }
    bad_in_place(g, c, r, j->text);
}

/* ---- the client side, as dispatch sees it ---------------------------------------------------------- */

static int front_ready(struct gw *g, struct conn *x)
{
    (void)g;
    struct client *c = client_of(x);
    struct req *r = client_head(c);
    if (r->type == KIPC_ASYNC && (r->grp->cfg.async_mode == CFG_ASYNC_BROADCAST || r->fan))
        return WAIT_BROADCAST; /* an async .qgate.all goes to every worker, as a broadcast */
    if (c->us && c->us->max_inflight > 0 && c->us->inflight >= c->us->max_inflight)
        return WAIT_NOT_NOW;
    return WAIT_WORKER;
}

static void front_broadcast(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    struct req *r = client_head(c);
    request_set_state_loop(g, c, r, RS_RUNNING);
    if (!g->back->broadcast(g, r->grp, c, r)) /* out of memory: it waits again */
        request_set_state_loop(g, c, r, RS_QUEUED);
}

static void front_no_worker(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    struct req *r = client_head(c);
    if (r && r->state == RS_QUEUED)
        refuse_no_worker(g, c, r, r->grp);
}

static void front_pause_done(struct gw *g, uint32_t id, uint32_t gen, uint64_t seq, int done, const char *what)
{
    struct client *c = client_lookup_loop(g, id, gen);
    struct req *r = c ? request_of_seq_loop(c, seq) : NULL; /* (the head, or one sent nested) */
    if (!r || r->state != RS_LOCAL) /* gone meanwhile */
        return;
    if (!done) {
        request_error_loop(g, c, r, "%s", what);
        return;
    }
    log_info(c->c.name, "%s", what);
    struct job *j = job_new(job_encode_command, JK_REPLY); /* 1b */
    if (!j) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    job_args(j)->answer = (struct job_answer){.cmd = GWCMD_PAUSE}; /* no table: 1b */
    conn_submit_loop(g->writers, j, &c->c, seq);
}

const struct frontend_ops client_frontend = {
    .ready = front_ready,
    .broadcast = front_broadcast,
    .no_worker = front_no_worker,
    .pause_done = front_pause_done,
};

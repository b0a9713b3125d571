/* callback.c: a worker's callbacks (a sync request it sends with .z.w while it runs a client's
 * request) relayed to that client, and the client's answers, matched to them in order and sent
 * back to the worker that asked, if it is still there and still waiting (answers to callbacks
 * a client runs nested, one inside another, all go to the one worker waiting in them, which
 * pairs them as q does). A worker that will get no answer (its client has gone, or stopped
 * reading) is told so. What the client sends while it owes the answer goes to that worker,
 * nested, as q runs what comes on the handle it waits on in h x (the worker side takes the
 * replies: run.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"
#include "stream.h"

int callback_add_loop(struct gw *g, struct client *c, const struct conn *w, int depth, int later)
{
    struct call *k = calloc(1, sizeof *k);
    if (!k)
        return -1;
    k->w_id = w->id;
    k->w_gen = w->gen;
    k->depth = depth;
    STAILQ_INSERT_TAIL(&c->calls, k, link);
    c->ncalls++;
    if (!later)
        callback_added_loop(g, c);
    return 0;
}

/* Does c read nothing more (its input ended, or it stopped at a bad message): a callback of a
 * request it sent before is still shown (q sends it before it reads on), and reads the answers it
 * sent before, held; the rest are told no answer comes. */
static int stopped(const struct client *c) { return c->st == CS_GONE || c->st == CS_FLUSHING; }

/* c reads nothing more and holds no answer it sent before: the calls it owes are told none comes,
 * once what it sent before its input ended has gone nested (none on a reader: at f90bf34 the
 * error went ahead of a message over 16 KiB a reader checked, so the worker left the callback
 * and ran that message as no request's, its publishes dropped: helper round 29c). */
void callback_gone_calls_loop(struct gw *g, struct client *c)
{
    if (stopped(c) && STAILQ_EMPTY(&c->unasked) && !c->c.closing && !c->c.in_job && (!c->eof || !inbuf_avail(&c->c.in)))
        callback_cancel_loop(g, c, NULL); /* (what it sent before its close is framed first: an answer
                                           * among it; request_framed_loop comes back here) */
}

void callback_added_loop(struct gw *g, struct client *c)
{
    request_nest_queued_loop(g, c); /* what c sent before it, queued, is on the handle before the answer */
    /* (after the answers it sent before: the worker pairs each with its innermost callback, so this
     * error answers the outermost; at 4f99181 the callback was not passed on, and the client was
     * not shown the one its answer went to: helper round 29b) */
    callback_gone_calls_loop(g, c);
    request_check_pending_loop(g, c); /* (after: those are no requests sent instead of the answer; at
                                       * 52a7b1c counted so, 22 KB of tiny ones gave the callback up:
                                       * helper round 24a) */
}

int callback_owes_loop(struct gw *g, const struct client *c, const struct conn *w)
{
    const struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!k->cancelled && (!w || (k->w_id == w->id && k->w_gen == w->gen)) &&
            conn_lookup_loop(g, k->w_id, k->w_gen))
            return 1;
    return 0;
}

int callback_owed_loop(struct gw *g, const struct client *c) { return callback_owes_loop(g, c, NULL); }

/* The worker of call k gets err as its answer (it waits for no other); a later answer is dropped. */
static void tell_worker(struct gw *g, struct call *k, const uint8_t *err, size_t len)
{
    struct conn *wc = k->cancelled ? NULL : conn_lookup_loop(g, k->w_id, k->w_gen);
    k->cancelled = 1;
    uint8_t *m = wc && wc->kind == CONN_WORKER ? malloc(len) : NULL;
    if (m) { /* as an answer (the worker side counts its callbacks answered) */
        memcpy(m, err, len);
        g->back->answer(g, wc, m, len);
    } else if (wc && wc->kind == CONN_WORKER) {
        conn_close_loop(g, wc, "out of memory"); /* (its run is lost: its client told) */
    }
}

static void tell_no_answer(struct gw *g, struct call *k) { tell_worker(g, k, g->no_client_err, g->no_client_err_len); }

void callback_give_up_loop(struct gw *g, struct client *c)
{
    struct call *k;
    c->gave_up = 1;
    STAILQ_FOREACH(k, &c->calls, link)
        tell_worker(g, k, g->unanswered_err, g->unanswered_err_len);
    conn_wake_loop(g, &c->c); /* (a .qgate.all's part whose callback waited: told so too) */
}

void callback_cancel_loop(struct gw *g, struct client *c, const struct conn *w)
{
    struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!w || (k->w_id == w->id && k->w_gen == w->gen)) {
            tell_no_answer(g, k);
            c->cut |= !w; /* (all: it answers no more) */
        }
}


/* Checked message msg of c (len bytes, owned) goes to worker wc: an answer, or (seq: its
 * request number) one c sent nested. */
static void forward(struct gw *g, struct client *c, struct conn *wc, uint8_t *msg, size_t len, uint64_t seq)
{
    if (msg[1] != KIPC_RESPONSE) {
        g->nested++;
        const struct req *h = client_head(c);
        if (g->hooks.nested)
            g->hooks.nested(g->hooks.ctx, c->c.id, c->c.gen, seq, h ? h->seq : seq, 0);
    }
    g->back->answer(g, wc, msg, len);
}

static int hold_unasked(struct gw *g, struct client *c, uint8_t *msg, size_t len, const char *bad);

/* A message of c (type, request number seq) found malformed (why): the worker of call k, if
 * any, is told its answer is not coming; what c queued behind it runs no more (one queued before
 * the callback came, found bad in its place: at 9116339 what was behind it ran after the badmsg,
 * and a second bad one got a second: helper round 29e); c gets 'qgate: badmsg after the replies
 * owed (told: its worker was lost meanwhile, the call it waits in has had its answer: the badmsg
 * goes after the replies owed, as an async one's does). SS_STOP. */
static int found_bad(struct gw *g, struct client *c, struct call *k, int type, const char *why, uint64_t seq, int told)
{
    if (k) {
        tell_no_answer(g, k);
        c->cut = 1;
    } else if (type != KIPC_RESPONSE) {
        request_drop_behind_loop(g, c, seq); /* (answers it sent ahead behind it too) */
    }
    request_bad_message_loop(g, c, why, told ? KIPC_ASYNC : type, type == KIPC_RESPONSE ? NEW_SEQ : seq);
    return SS_STOP;
}

/* Message msg (len bytes, owned) of c goes to worker wc: the answer to its call k, or (k NULL)
 * one c sent nested (seq: its number); wc NULL: an answer no worker waits for, dropped, or
 * (unasked) one no callback asked for yet, held. Checked first (unless checked), by a reader when
 * it is compressed or large; c reads nothing more meanwhile, so that what it sends its worker
 * keeps its order. SS_OK, SS_WAIT or SS_STOP. */
static int to_worker(struct gw *g, struct client *c, struct conn *wc, struct call *k, uint8_t *msg, size_t len,
                     int checked, uint64_t seq, int unasked)
{
    if (!checked && (msg[2] || len > VALIDATE_ON_LOOP_MAX)) {
        struct job *j = job_new(job_validate_msg, JK_NESTED);
        if (!j) {
            free(msg);
            conn_close_loop(g, &c->c, "out of memory");
            return SS_STOP;
        }
        j->in = msg;
        j->in_len = len;
        job_args(j)->check = (struct job_check){.max = g->cfg.max_message, .w_id = wc ? wc->id : UINT32_MAX,
                                                .w_gen = wc ? wc->gen : 0, /* (none: found by no lookup) */
                                                .unasked = (uint8_t)unasked};
        conn_submit_loop(g->readers, j, &c->c, seq);
        c->nest_job = !k && msg[1] == KIPC_SYNC;
        return stream_job_wait_loop(g, &c->c);
    }
    struct kerr e;
    if (!checked && kvalidate_check(msg + 8, len - 8, msg[0], NULL, &e) != QG_OK) {
        char why[96];
        kcodec_err_text(&e, why, sizeof why);
        if (unasked) /* a callback may yet read it in its place */
            return hold_unasked(g, c, msg, len, why);
        int msg_type = msg[1];
        free(msg);
        return found_bad(g, c, k, msg_type, why, seq, 0);
    }
    if (wc)
        forward(g, c, wc, msg, len, seq);
    else if (unasked)
        return hold_unasked(g, c, msg, len, NULL);
    else
        free(msg); /* an answer no worker waits for: checked, dropped */
    return c->st == CS_READY || stopped(c) ? SS_OK : SS_STOP; /* (stopped: what c queued before goes on
                                   * nested, at 4f50da8 only the first: helper round 30a) */
}

/* The answer msg (owned; checked already if checked; bad: found malformed so, when it was held
 * until a callback read it) of c. */
static int answer(struct gw *g, struct client *c, uint8_t *msg, size_t len, int checked, const char *bad)
{
    struct call *k = STAILQ_FIRST(&c->calls), kept = {0};
    c->answers++;
    if (k) {
        struct call *x, *in = k; /* its worker pairs it with the innermost of its calls: that depth goes */
        STAILQ_FOREACH(x, &c->calls, link)
            if (x->w_id == k->w_id && x->w_gen == k->w_gen && x->depth > in->depth)
                in = x;
        int d = in->depth;
        in->depth = k->depth;
        k->depth = d;
        STAILQ_REMOVE_HEAD(&c->calls, link);
        c->ncalls--;
        kept = *k;
        free(k);
    }
    if (!c->ncalls)
        c->gave_up = 0;
    struct conn *wc = k && !kept.cancelled ? conn_lookup_loop(g, kept.w_id, kept.w_gen) : NULL;
    if (k) /* a .qgate.all's part whose callback waited for this answer goes on: another part's,
            * or the same worker's next, sent before this one was answered (at 52e6d45 that one
            * was woken only by its worker sending again, which it could not: the .qgate.all hung,
            * helper round 23a) */
        conn_wake_loop(g, &c->c);
    request_check_pending_loop(g, c); /* the pause for client_max_pending may apply again */
    if (client_head(c) && client_head(c)->wait_answer) /* held for this answer: a lost call's error */
        request_advance_loop(g, c);                        /* due now, then, the last, its own */
    if (bad) { /* as if it came now: the callback's worker told no answer comes, c stopped */
        free(msg);
        return found_bad(g, c, wc && wc->kind == CONN_WORKER ? &kept : NULL, KIPC_RESPONSE, bad, 0, 0);
    }
    if (!wc || wc->kind != CONN_WORKER) {
        if (k) /* a client may send these as fast as it likes: one line a second */
            log_limited(&g->lim.orphan, g->loop.now_ms, LOG_WARN, c->c.name,
                        "answer to a callback whose worker has gone: dropped");
        return to_worker(g, c, NULL, NULL, msg, len, checked, 0, !k); /* checked all the same: a malformed
                                                                       * one is a bad message, as any other */
    }
    return to_worker(g, c, wc, &kept, msg, len, checked, 0, 0);
}

int callback_answer_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len)
{
    if (callback_ahead_waits_loop(g, c)) /* behind one it sent before: held too, read in its turn */
        return to_worker(g, c, NULL, NULL, msg, len, 0, 0, 1);
    return answer(g, c, msg, len, 0, NULL);
}

/* Held answer u of c, off its list and out of the counts (its message the caller's). */
static void unhold(struct client *c, struct unasked *u)
{
    STAILQ_REMOVE(&c->unasked, u, unasked, link);
    c->pending -= u->len + sizeof *u;
    c->unasked_bytes -= u->len + sizeof *u;
    buf_pending_sub(u->len);
}

/* The first of c's held answers, off its list and out of the counts. */
static struct unasked *take_unasked(struct client *c)
{
    struct unasked *u = STAILQ_FIRST(&c->unasked);
    unhold(c, u);
    return u;
}

/* The first of c's held answers: no callback read it, its requests before it are done. A
 * malformed one is read by q's main loop then: a bad message there (at fdf37cf it was one at
 * once, when it came: the callback it was meant for never shown, a request sent between run on
 * its own; helper rounds 29a, 29b, 29f). */
static void drop_unasked(struct gw *g, struct client *c)
{
    struct unasked *u = take_unasked(c);
    char *bad = u->bad;
    free(u->msg);
    free(u);
    if (bad && !c->c.closing && (c->st == CS_READY || c->st == CS_GONE))
        found_bad(g, c, NULL, KIPC_RESPONSE, bad, 0, 0);
    else
        log_limited(&g->lim.unasked, g->loop.now_ms, LOG_WARN, c->c.name, "response message nobody asked for: dropped");
    free(bad);
}

/* Answer msg (owned, checked: malformed if bad says why) came when c owed no callback: a
 * callback of a request c sent before it may still read it, as q reads what waits on the handle
 * (at 591b525 it was dropped, and the callback it was meant for waited for ever: helper round
 * 28c); else it is dropped, or (bad) is a bad message now. After a malformed one c's input is
 * dropped unread. SS_OK or SS_STOP. */
static int hold_unasked(struct gw *g, struct client *c, uint8_t *msg, size_t len, const char *bad)
{
    struct unasked *u = client_head(c) ? malloc(sizeof *u) : NULL; /* (bounded as requests are: below) */
    char *why = u && bad ? strdup(bad) : NULL;
    if (!u || (bad && !why)) {
        free(msg);
        free(u);
        if (bad) /* (no request before it: q's main loop reads it now) */
            return found_bad(g, c, NULL, KIPC_RESPONSE, bad, 0, 0);
        log_limited(&g->lim.unasked, g->loop.now_ms, LOG_WARN, c->c.name, "response message nobody asked for: dropped");
        return SS_OK;
    }
    *u = (struct unasked){.msg = msg, .len = len, .after = c->next_seq - 1, .bad = why};
    c->bad_ahead |= bad != NULL;
    STAILQ_INSERT_TAIL(&c->unasked, u, link);
    c->pending += len + sizeof *u; /* (held as a request is: bounded by client_max_pending and pending_max) */
    c->unasked_bytes += len + sizeof *u;
    buf_pending_add(len);
    log_debug(c->c.name, "a%s answer no callback asked for yet: held for a callback of request %llu or before",
              bad ? " malformed" : "n", (unsigned long long)u->after);
    request_check_pending_loop(g, c);
    return c->st == CS_READY || stopped(c) ? SS_OK : SS_STOP;
}

void callback_refused_loop(struct client *c)
{
    struct unasked *u = STAILQ_FIRST(&c->unasked);
    if (!u || u->bad || !STAILQ_EMPTY(&c->calls))
        return;
    /* the answer it sent before any callback asked was for the first it would have been shown:
     * this one, which qgate answered for it. It goes with it; kept, the next callback took it and
     * c's own answer to that one stayed for the one after, each answer a callback late from then
     * on, another worker's maybe (the simulation, seed 66487) */
    take_unasked(c);
    free(u->msg);
    free(u);
    log_debug(c->c.name, "the answer it sent before a callback asked: that callback's, which qgate answered, so dropped");
}

void callback_unasked_forget_loop(struct client *c, uint64_t seq)
{
    struct unasked *u, *next;
    for (u = STAILQ_FIRST(&c->unasked); u; u = next) {
        next = STAILQ_NEXT(u, link);
        if (u->after >= seq) { /* (the list is in the order sent: the rest too) */
            unhold(c, u);
            free(u->msg);
            free(u->bad);
            free(u);
        }
    }
}

void callback_unasked_drop_loop(struct gw *g, struct client *c)
{
    struct unasked *u;
    while ((u = STAILQ_FIRST(&c->unasked)) && (!client_head(c) || u->after < client_head(c)->seq))
        drop_unasked(g, c);
}

int callback_may_call_loop(const struct client *c)
{
    return c->st == CS_READY || (stopped(c) && client_takes_output(c)); /* (after a bad message too: at
                                   * fdf37cf a callback that came then was never shown, where q shows
                                   * it before it reads the bad message) */
}

int callback_answer_may_come_loop(struct gw *g, struct client *c)
{
    if (c->st == CS_READY)
        return 1;
    callback_unasked_drop_loop(g, c);
    return stopped(c) && !STAILQ_EMPTY(&c->unasked) && !c->cut; /* (cut: they go to the calls told
                                   * so, nothing waits for them; at 38fdc95 a .qgate.all's next part
                                   * did, for ever: helper round 30c) */
}

/* Does the worker of c's oldest call run, innermost, a sync message c sent it nested, not a callback
 * waiting for an answer? Its frames alternate from the run's first callback: a call, a message run
 * inside it, a call that one makes, ...; the innermost is a message while those messages unanswered
 * are as many as its calls still waiting (those told no answer comes wait no more). */
static int runs_nested(struct gw *g, const struct client *c)
{
    const struct call *k = STAILQ_FIRST(&c->calls), *x;
    struct conn *wc = k && !k->cancelled ? conn_lookup_loop(g, k->w_id, k->w_gen) : NULL;
    if (!wc || wc->kind != CONN_WORKER)
        return 0;
    int waiting = 0;
    STAILQ_FOREACH(x, &c->calls, link)
        waiting += !x->cancelled && x->w_id == k->w_id && x->w_gen == k->w_gen;
    return g->back->nested_owed(wc, c) >= waiting;
}

int callback_unasked_answer_loop(struct gw *g, struct client *c, uint64_t before)
{
    callback_unasked_drop_loop(g, c);
    struct unasked *u = STAILQ_FIRST(&c->unasked);
    if (!u || u->after >= before || STAILQ_EMPTY(&c->calls) || c->c.closing)
        return 0;
    if (runs_nested(g, c)) /* what c sent before it runs there, and may call back: the worker pairs
                            * the answer with that callback, q reads it there; sent now, qgate paired
                            * it with the older one (at 490dbb3 a bad message behind it was then taken
                            * for one sent inside the newer, its badmsg before that callback's reply:
                            * helper round 30c). It waits for that reply or callback. */
        return 2;
    take_unasked(c);
    uint8_t *msg = u->msg;
    size_t len = u->len;
    char *bad = u->bad;
    free(u);
    log_debug(c->c.name, "the answer it sent before the callback asked: this callback's");
    int st = answer(g, c, msg, len, 1, bad);
    free(bad);
    return st == SS_OK ? 1 : -1;
}

int callback_ahead_waits_loop(struct gw *g, const struct client *c)
{
    return c->ncalls && !STAILQ_EMPTY(&c->unasked) && runs_nested(g, c);
}

void callback_nested_replied_loop(struct gw *g, struct client *c)
{
    if (c->ncalls && !STAILQ_EMPTY(&c->unasked)) /* (an answer it sent ahead may have waited for it) */
        callback_added_loop(g, c);
}

uint64_t callback_unasked_after_loop(const struct client *c)
{
    const struct unasked *u = STAILQ_FIRST(&c->unasked);
    return u ? u->after : UINT64_MAX;
}

/* The worker c owes answers to, if it is one (a .qgate.all's parts are several) and what c
 * sends now may run nested there; else NULL. */
static struct conn *nest_target(struct gw *g, const struct client *c)
{
    struct conn *w = NULL;
    const struct call *k;
    STAILQ_FOREACH(k, &c->calls, link) {
        struct conn *x = k->cancelled ? NULL : conn_lookup_loop(g, k->w_id, k->w_gen);
        if (x && w && x != w)
            return NULL;
        w = x ? x : w;
    }
    return w && w->kind == CONN_WORKER && g->back->nests(w, c) ? w : NULL;
}

void callback_nested_error_loop(struct gw *g, struct client *c, const char *text)
{
    if (!client_takes_output(c))
        return;
    size_t len;
    uint8_t *m = kcodec_error_msg(text, &len); /* (a few bytes: on the loop) */
    struct chunk *ch = m ? chunk_wrap(m, len) : NULL;
    if (!ch) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    conn_push_whole_loop(g, &c->c, ch);
}

void callback_nested_lost_loop(struct gw *g, struct client *c, const char *text)
{
    if (c->nest_job != 1)
        return;
    callback_nested_error_loop(g, c, text);
    c->nest_job = 2;
}

void callback_nested_lost_calls_loop(struct gw *g, struct client *c, int n, const char *text, int hold)
{
    if (!hold) { /* (the run an async message's: what the client sent after it goes on, so these first) */
        while (n-- > 0 && !c->c.closing)
            callback_nested_error_loop(g, c, text);
        return;
    }
    c->lost_nested += n;
    c->lost_why = text;
    callback_lost_release_loop(g, c);
}

void callback_lost_release_loop(struct gw *g, struct client *c)
{
    /* (else no answer comes, or no request of it waits for one: all go now) */
    int answers = c->st == CS_READY && !c->eof && !c->gave_up && client_head(c) && client_head(c)->wait_answer;
    /* after what the gateway answers nested, made before (their place is ahead; a bad message's
     * error, which waits for the worker's nested replies, is made after them) */
    const struct req *first = TAILQ_FIRST(&c->nested);
    while (c->lost_nested > 0 && (!first || first->wn_wait) && (!answers || c->ncalls <= c->lost_nested)) {
        c->lost_nested--;
        callback_nested_error_loop(g, c, c->lost_why);
        if (c->c.closing)
            return;
    }
}

size_t callback_nest_unsent_loop(struct gw *g, const struct client *c)
{
    const struct conn *wc = nest_target(g, c);
    return wc ? conn_pending(wc) : 0;
}

/* callback_nest_loop's, for a message numbered seq (or, NEW_SEQ, numbered now). */
static int nest_to(struct gw *g, struct client *c, uint8_t *msg, size_t len, int checked, uint64_t seq)
{
    struct conn *wc = c->ncalls ? nest_target(g, c) : NULL;
    if (!wc)
        return -1;
    int queued = seq != NEW_SEQ; /* (one of those queued before the callback: its caller sees to the
                                  * reading once all have gone, as the rest still count until then) */
    if (!queued)
        seq = c->next_seq++; /* (numbered as requests are) */
    log_debug(c->c.name, "%s message %llu of %zu bytes nested: to %s, which waits on its callback",
              kipc_type_name(msg[1]), (unsigned long long)seq, len, wc->name);
    int st = to_worker(g, c, wc, NULL, msg, len, checked, seq, 0);
    if (st == SS_OK && !queued) /* past client_max_pending unsent to its worker, it reads no more
                                 * until that drains (what it has read is framed: request_framed_loop) */
        request_check_pending_loop(g, c);
    return st;
}

int callback_nest_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, int checked)
{
    return nest_to(g, c, msg, len, checked, NEW_SEQ);
}

struct conn *callback_nest_worker_loop(struct gw *g, const struct client *c)
{
    return c->ncalls ? nest_target(g, c) : NULL;
}

int callback_depth_loop(struct gw *g, const struct client *c, const struct conn *w, int cancelled)
{
    int depth = -1;
    const struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if ((cancelled || !k->cancelled) && k->w_id == w->id && k->w_gen == w->gen && k->depth > depth)
            depth = k->depth;
    (void)g;
    return depth;
}

int callback_nest_queued_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, uint64_t seq, int checked)
{
    return nest_to(g, c, msg, len, checked, seq);
}

static void checked(struct gw *g, struct client *c, struct job *j);

void callback_checked_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    if (!c)
        return;
    stream_job_done_loop(g, &c->c); /* it reads on (what it sent since is framed later, by the loop) */
    checked(g, c, j);
    if (!c->c.closing) /* what it had queued behind the request that called back, after this one */
        request_nest_queued_loop(g, c);
    callback_gone_calls_loop(g, c);
}

static void checked(struct gw *g, struct client *c, struct job *j)
{
    struct call k = {.w_id = job_args(j)->check.w_id, .w_gen = job_args(j)->check.w_gen};
    struct conn *wc = conn_lookup_loop(g, k.w_id, k.w_gen);
    int type = j->in[1], told = c->nest_job == 2;
    c->nest_job = 0;
    if (type == KIPC_RESPONSE && job_args(j)->check.unasked) { /* a callback may yet read it, malformed or not */
        hold_unasked(g, c, j->in, j->in_len, j->result ? j->text : NULL);
        j->in = NULL;
        return;
    }
    if (j->result) {
        found_bad(g, c, type == KIPC_RESPONSE ? &k : NULL, type, j->text, j->seq, told);
        return;
    }
    if (told) /* its worker was lost meanwhile: its error came, in its place */
        return;
    if (type != KIPC_RESPONSE && job_args(j)->check.form.kind) { /* a route, seen inflated: no nested run */
        request_nested_local_loop(g, c, j->in, j->in_len, j->seq, 0);
        j->in = NULL;
        return;
    }
    int cmd = type != KIPC_RESPONSE && j->out ? jobs_peek_command(j->out, j->out_len) : 0;
    if (cmd) { /* a gateway command, seen inflated: the gateway's, run here as a plain one is */
        request_nested_local_loop(g, c, j->out, j->out_len, j->seq, cmd);
        j->out = NULL;
        return;
    }
    if (wc && wc->kind == CONN_WORKER && (type == KIPC_RESPONSE || g->back->nests(wc, c))) {
        forward(g, c, wc, j->in, j->in_len, j->seq);
        j->in = NULL;
        request_check_pending_loop(g, c); /* (what it sent nested is bounded) */
    } else if (type == KIPC_SYNC) { /* its worker went meanwhile: it waits for a reply all the same */
        callback_nested_error_loop(g, c, "qgate: the worker that called back was lost");
    }
}

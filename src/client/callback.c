/* callback.c: a worker's callbacks (a sync request it sends with .z.w while it runs a client's
 * request) relayed to that client, and the client's answers, matched to them in order as q
 * matches them and sent back to the worker that asked, if it is still there and still waiting.
 * A worker that will get no answer (its client has gone, or stopped reading) is told so. */
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"

int callback_add_loop(struct gw *g, struct client *c, const struct conn *w)
{
    struct call *k = calloc(1, sizeof *k);
    if (!k)
        return -1;
    k->w_id = w->id;
    k->w_gen = w->gen;
    STAILQ_INSERT_TAIL(&c->calls, k, link);
    c->ncalls++;
    request_check_pending_loop(g, c);
    return 0;
}

int callback_owed_loop(struct gw *g, const struct client *c)
{
    const struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!k->cancelled && conn_lookup_loop(g, k->w_id, k->w_gen))
            return 1;
    return 0;
}

/* The worker of call k gets err as its answer (it waits for no other); a later answer is dropped. */
static void tell_worker(struct gw *g, struct call *k, const uint8_t *err, size_t len)
{
    struct conn *wc = k->cancelled ? NULL : conn_lookup_loop(g, k->w_id, k->w_gen);
    k->cancelled = 1;
    if (wc && wc->kind == CONN_WORKER) {
        outq_copy(&wc->out, err, len);
        conn_mark_dirty_loop(g, wc);
    }
}

static void tell_no_answer(struct gw *g, struct call *k) { tell_worker(g, k, g->no_client_err, g->no_client_err_len); }

void callback_give_up_loop(struct gw *g, struct client *c)
{
    struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        tell_worker(g, k, g->unanswered_err, g->unanswered_err_len);
}

void callback_cancel_loop(struct gw *g, struct client *c, const struct conn *w)
{
    struct call *k;
    STAILQ_FOREACH(k, &c->calls, link)
        if (!w || (k->w_id == w->id && k->w_gen == w->gen))
            tell_no_answer(g, k);
}

void callback_answer_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len)
{
    struct call *k = STAILQ_FIRST(&c->calls), kept = {0};
    if (k) {
        STAILQ_REMOVE_HEAD(&c->calls, link);
        c->ncalls--;
        kept = *k;
        free(k);
    }
    struct conn *wc = k && !kept.cancelled ? conn_lookup_loop(g, kept.w_id, kept.w_gen) : NULL;
    request_check_pending_loop(g, c); /* the pause for client_max_pending may apply again */
    if (!wc || wc->kind != CONN_WORKER) {
        if (k) /* a client may send these as fast as it likes: one line a second */
            log_limited(&g->lim.orphan, g->loop.now_ms, LOG_WARN, c->c.name,
                        "answer to a callback whose worker has gone: dropped");
        else
            log_limited(&g->lim.unasked, g->loop.now_ms, LOG_WARN, c->c.name,
                        "response message nobody asked for: dropped");
        free(msg);
        return;
    }
    if (msg[2] || len > VALIDATE_ON_LOOP_MAX) { /* a reader validates it before it goes on */
        struct job *j = job_new(job_validate_msg, JK_NESTED);
        if (!j) {
            free(msg);
            conn_close_loop(g, &c->c, "out of memory");
            return;
        }
        j->in = msg;
        j->in_len = len;
        job_args(j)->check = (struct job_check){.max = g->cfg.max_message, .w_id = kept.w_id, .w_gen = kept.w_gen};
        conn_submit_loop(g->readers, j, &c->c, 0);
        return;
    }
    struct kerr e;
    if (kvalidate_check(msg + 8, len - 8, msg[0], NULL, &e) != QG_OK) {
        free(msg);
        tell_no_answer(g, &kept); /* the worker is told its answer is not coming */
        char why[96];
        snprintf(why, sizeof why, "%s at byte %zu", e.why, e.off + 8);
        request_bad_message_loop(g, c, why);
        return;
    }
    g->back->answer(g, wc, msg, len);
}

void callback_checked_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    if (!c)
        return;
    struct call k = {.w_id = job_args(j)->check.w_id, .w_gen = job_args(j)->check.w_gen};
    struct conn *wc = conn_lookup_loop(g, k.w_id, k.w_gen);
    if (j->result) {
        tell_no_answer(g, &k);
        request_bad_message_loop(g, c, j->text);
        return;
    }
    if (wc && wc->kind == CONN_WORKER) {
        g->back->answer(g, wc, j->in, j->in_len);
        j->in = NULL;
    }
}

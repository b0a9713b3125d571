/* lost.c: a run's other side going: its client (the reply drained, a callback's caller told),
 * or its worker (every client whose request it ran or held told, as if its q had died, or
 * closed if a message to it was cut); and a client's answer to a callback sent on. */
#include <stdio.h>
#include <string.h>

#include "worker.h"
#include "stream.h"
#include "gw.h"
#include "jobs.h"

/* ---- the other side going ------------------------------------------------------------------- */

void relay_client_gone_loop(struct gw *g, struct worker *w, struct client *c)
{
    if (w->msg.route == ROUTE_STREAM && w->msg.to == c) { /* a message to it: the rest is drained */
        w->msg.route = ROUTE_DROP;
        w->msg.to = NULL;
        stream_drop_rest_loop(&w->c);
        if (c == w->cl && w->busy != WB_SENT)
            worker_set_busy_loop(g, w, WB_DRAINING);
    }
    if (c != w->cl) /* a session's client between its requests */
        return;
    client_cancel_calls_loop(g, c, &w->c); /* a callback it waits on gets its error */
    if (w->msg.route == ROUTE_COLLECT) { /* drained, dropped */
        w->msg.route = ROUTE_DROP;
        stream_drop_rest_loop(&w->c);
        inbuf_free(&w->coll);
        if (w->busy != WB_SENT)
            worker_set_busy_loop(g, w, WB_DRAINING);
    }
    if (c->c.closing)
        w->cl = NULL; /* closed for good; one whose input ended still has its FIFO advanced */
    stream_resume_loop(g, &w->c);
}

/* The requests of c running on a worker that went down: given up on (the sim's hook). */
static void note_lost(struct gw *g, struct client *c)
{
    for (struct req *r = client_head(c); g->hooks.lost && r && r->state == RS_RUNNING; r = STAILQ_NEXT(r, link))
        g->hooks.lost(g->hooks.ctx, c->c.id, c->c.gen, r->seq);
}

/* The client of a request that went down with the worker: closed if a message to it was cut,
 * else answered with text (or, for async runs and clients gone, just moved on). */
static void fail_request(struct gw *g, struct client *c, int cut, int run, const char *text)
{
    client_set_worker_loop(c, NULL);
    struct req *h = client_head(c);
    note_lost(g, c);
    if (cut)
        conn_close_loop(g, &c->c, "worker lost in the middle of the reply");
    else if (run != RUN_REQUEST || c->eof)
        client_head_done_loop(g, c);
    else
        client_error_loop(g, c, h, "%s", text);
}

void relay_lost_loop(struct gw *g, struct worker *w)
{
    struct client *c = w->cl, *s = w->sess;
    int busy = w->st == WS_BUSY, run = w->run;
    if (busy && run == RUN_REQUEST) /* it timed out, or its worker went down under it: learned */
        pipeline_learn_loop(w->grp, w->run_key, INT64_MAX); /* slow, until a hundred fast runs or so */
    if (s) { /* as if its q had died: the client is told, then closed */
        s->sess = NULL;
        w->sess = NULL;
    }
    w->reset_owed = 0;
    /* a message cut in the middle of its stream leaves that client's stream broken */
    struct client *to = w->msg.route == ROUTE_STREAM && w->c.rd.phase == RD_BODY ? w->msg.to : NULL;
    int cut = to && to == c && !c->eof, cut_sess = to && to == s;
    w->cl = NULL;
    inbuf_free(&w->coll);
    w->msg = (struct wmsg){0};
    w->swallow = 0;
    w->in_call = 0;
    stream_resume_loop(g, &w->c); /* off the waiters of the client it waited on */
    /* down first: what follows may start a client's next request, never on this worker */
    worker_set_state_loop(g, w, WS_DOWN);
    char text[400];
    if (w->timed_out)
        snprintf(text, sizeof text, "qgate: timeout (%s sent nothing for %lld ms)", w->addr,
                 (long long)g->cfg.query_timeout);
    else
        snprintf(text, sizeof text, "qgate: worker %s lost", w->addr);
    fanout_worker_lost_loop(g, w, text); /* a .qgate.all it ran, or owed, fails */
    if (s) {
        if (c == s && busy)
            note_lost(g, s);
        if (s->w == w)
            client_set_worker_loop(s, NULL);
        client_session_lost_loop(g, s, cut_sess, text);
    } else if (c && busy) {
        fail_request(g, c, cut, run, text);
    }
    w->timed_out = 0;
    broadcast_drop_loop(g, w);
}

void relay_answer_loop(struct gw *g, struct conn *wc, uint8_t *msg, size_t len)
{
    struct chunk *ch = chunk_wrap(msg, len);
    if (!ch)
        return;
    outq_push(&wc->out, ch);
    conn_mark_dirty_loop(g, wc);
}

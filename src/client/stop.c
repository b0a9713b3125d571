/* stop.c: what stops a client's reading before it closes: a bad message (its error after the
 * replies owed, then the close), a refusal ('qgate: too many connections), its session's worker
 * lost; and the verdict of a reader on a body it validated. */
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "stream.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"

/* ---- bad messages ---------------------------------------------------------------------------- */

/* Nothing more is read: what is owed is sent, then the client is closed (FLUSHING). */
static void stop_reading(struct gw *g, struct client *c)
{
    if (g->hooks.unread)
        g->hooks.unread(g->hooks.ctx, c->c.id, c->c.gen, c->next_seq);
    client_cancel_calls_loop(g, c, NULL); /* q reads nothing more: no answer comes */
    if (c->st != CS_GONE && c->st != CS_FLUSHING)
        client_set_state_loop(c, CS_FLUSHING);
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
 * seq next, of len bytes if known), then the close. */
static void close_with_error(struct gw *g, struct client *c, const char *text, size_t len)
{
    if (c->eof) /* nobody to tell: what came before still runs */
        return;
    struct req *r = calloc(1, sizeof *r);
    if (!r) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    r->seq = c->next_seq++;
    r->type = KIPC_SYNC;
    r->grp = c->grp;
    r->close_after = 1;
    r->t_arrive = g->loop.now_ms;
    r->t_in_us = g->loop.now_us;
    r->in_len = len;
    STAILQ_INSERT_TAIL(&c->reqs, r, link);
    client_error_loop(g, c, r, "%s", text);
}

/* A header, or a small body, that the gateway cannot accept: its request (seq next) answers
 * 'qgate: badmsg after the replies owed. */
void client_bad_message_loop(struct gw *g, struct client *c, const char *why)
{
    stop_for_bad_message(g, c, why);
    char text[160];
    snprintf(text, sizeof text, "qgate: badmsg %s", why);
    close_with_error(g, c, text, 0);
}

void client_refuse_loop(struct gw *g, struct client *c, const char *text, size_t len)
{
    stop_reading(g, c);
    close_with_error(g, c, text, len);
}

/* Request x will not run: its session's worker is gone (named to tests/sim's lost hook). */
static void give_up(struct gw *g, struct client *c, struct req *x)
{
    if (g->hooks.lost)
        g->hooks.lost(g->hooks.ctx, c->c.id, c->c.gen, x->seq);
    req_remove_loop(g, c, x, 0);
}

void client_session_lost_loop(struct gw *g, struct client *c, int cut, const char *text)
{
    if (c->c.closing)
        return;
    log_info(c->c.name, "session: %s", text + strlen("qgate: "));
    if (cut || c->eof) { /* its stream is broken, or nobody is left to tell */
        conn_close_loop(g, &c->c, "its session's worker was lost");
        return;
    }
    while (client_head(c) && client_head(c)->state == RS_RUNNING && client_head(c)->type == KIPC_ASYNC)
        req_remove_loop(g, c, client_head(c), 1); /* ran, or went down with the worker */
    stop_reading(g, c);
    struct req *r;
    STAILQ_FOREACH(r, &c->reqs, link)
        if (r->type == KIPC_SYNC && r->state != RS_LOCAL && r->state != RS_READY)
            break;
    if (r)
        while (STAILQ_NEXT(r, link))
            give_up(g, c, STAILQ_NEXT(r, link)); /* nothing after it */
    /* before it, what has not run never will; replies made (commands, errors) still go */
    for (struct req *x = client_head(c), *n; x && x != r; x = n) {
        n = STAILQ_NEXT(x, link);
        if (x->state != RS_LOCAL && x->state != RS_READY)
            give_up(g, c, x);
    }
    if (r) {
        r->close_after = 1;
        client_error_loop(g, c, r, "%s", text);
        return;
    }
    if (!client_head(c) && !conn_pending(&c->c))
        conn_close_loop(g, &c->c, "its session's worker was lost");
    else
        client_advance_loop(g, c); /* replies made before go, then the close (FLUSHING) */
}

void client_checked_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    struct req *r = c ? client_head(c) : NULL;
    if (!r || r->seq != j->seq || r->state != RS_CHECKING)
        return;
    if (!j->result) {
        r->msg = j->out ? j->out : j->in; /* a compressed route comes back decompressed */
        r->len = j->out ? j->out_len : r->len;
        /* the reader read what the arrival's peek saw, and what no peek sees in a compressed
         * message: the route as a whole, its offsets into r->msg */
        jobs_route_form_of(j, &r->form);
        r->route = r->form.kind != 0;
        if (j->out)
            j->out = NULL;
        else
            j->in = NULL;
        c->pending += req_cost(r);
        r->unchecked = 0;
        req_set_state_loop(g, c, r, RS_WAITING);
        client_advance_loop(g, c);
        return;
    }
    /* its body failed: it is answered 'qgate: badmsg in its place, what came after dropped */
    req_drop_after_loop(g, c, client_head(c));
    stop_for_bad_message(g, c, j->text);
    if (c->eof) {
        req_remove_loop(g, c, client_head(c), 1);
        client_finish_if_gone_loop(g, c);
        return;
    }
    r->type = KIPC_SYNC;
    r->close_after = 1;
    r->unchecked = 0;
    client_error_loop(g, c, r, "qgate: badmsg %s", j->text);
}


/* fanout.c: (`.qgate.all; `group; query[; `list | `partial | `list`partial]): the query runs on
 * every worker of the group, each counting as busy while it does, and the client gets their
 * replies merged (kmerge.c, q's raze, on the writer pool) or, with `list, their list. All or an
 * error: with a worker of the group not up (down, disabled) it is 'qgate: group g: N of M
 * workers up and nothing is sent; one lost midway fails it. With `partial the workers up
 * answer, one lost midway is left out, and the answer is `workers`result!(addresses; merged).
 *
 * Each worker gets a part (struct fpart): run at once if the worker is idle, else owed (its
 * fq) and run when it is free, before any request (dispatch asks backend_ops.owes). A part's
 * reply is collected whole (bounded, with the others, by merge_max). The first failure
 * answers the client at once: a worker lost ('qgate: worker host:port lost), a timeout, merge
 * too large; the parts not begun are dropped, the running ones drained (their fo is NULL).
 * The client going for good gives the fan-out up the same way, silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "kzip.h"
#include "log.h"

static struct client *client_of_fanout(struct gw *g, const struct fanout *fo)
{
    return client_lookup_loop(g, fo->cl_id, fo->cl_gen);
}

/* Does w take a part of a fan-out starting now? (Not one given to a session, leaving the
 * configuration, or disabled.) */
static int takes_part(const struct worker *w)
{
    return worker_is_lead(w) && (w->st == WS_IDLE || w->st == WS_BUSY) && worker_takes_work(w);
}

static void start_part(struct gw *g, struct worker *w, struct fpart *p)
{
    w->run = (struct run){.kind = RUN_FANOUT, .fp = p}; /* (nothing of the run before it: a lost one
                                   * left its callbacks and chasers counted, and one went here) */
    worker_set_state_loop(g, w, WS_BUSY);
    p->st = FP_RUNNING;
    if (p->fo->unsent == p->fo->n) { /* the first part sent: the request runs from here (access log
                                      * run_us; before, its queued_us held the whole run: round 17) */
        struct client *c = client_of_fanout(g, p->fo);
        struct req *r = c ? request_of_seq_loop(c, p->fo->seq) : NULL;
        if (r && !r->t_run_us)
            r->t_run_us = loop_stamp_us_loop(g);
    }
    if (--p->fo->unsent == 0)
        request_uncount_loop(g, &p->fo->counted); /* every worker has the query now */
    if (outq_share(&w->c.out, p->fo->msg)) {
        conn_close_loop(g, &w->c, "out of memory");
        return;
    }
    run_sent_loop(g, w);
    conn_mark_dirty_loop(g, &w->c);
    log_debug(w->c.name, "running its part of a .qgate.all");
}

/* Let fo go: parts owed leave their workers, running ones are drained, done ones freed. */
static void fanout_free(struct gw *g, struct fanout *fo)
{
    struct client *c = client_of_fanout(g, fo);
    if (c) /* parts whose callbacks waited for another's go on (run.c) */
        conn_wake_loop(g, &c->c);
    for (int i = 0; i < fo->n; i++) {
        struct fpart *p = fo->part[i];
        if (p->st == FP_RUNNING) {
            p->fo = NULL; /* its worker drains the reply and frees it */
            continue;
        }
        if (p->st == FP_OWED) {
            STAILQ_REMOVE(&p->w->fq, p, fpart, link);
            worker_owes_update(p->w);
            if (p->w->disabled) /* idle for what it owed: now it owes nothing, DISABLED */
                worker_disable_loop(g, p->w, 1);
        }
        inbuf_free(&p->reply);
        free(p->name);
        free(p);
    }
    buf_shared_unref(fo->msg);
    buf_held_sub(fo->held);
    request_uncount_loop(g, &fo->counted);
    free(fo);
}

static void complete(struct gw *g, struct fanout *fo);

/* r's answer, given while c may still be inside a part's callback (its worker lost, or another
 * part failing the whole): held until c has answered, as a request's is (run.c), else c takes it
 * for the reply to what it calls inside the callback (at 52e6d45 it was sent at once, and each
 * call made there got the reply of the one before). 1 if held. */
static int hold_for_answer(struct client *c, struct req *r)
{
    if (c->ncalls && !c->gave_up)
        r->wait_answer = 1;
    return r->wait_answer;
}

/* The fan-out failed (why): its client is told, if it still waits. */
static void fail(struct gw *g, struct fanout *fo, const char *why)
{
    struct client *c = client_of_fanout(g, fo);
    struct req *r = c ? client_head(c) : NULL;
    uint64_t seq = fo->seq;
    if (c)
        c->fo = NULL;
    if (g->hooks.lost) /* given up on: its running parts may still run, late (tests/sim) */
        g->hooks.lost(g->hooks.ctx, fo->cl_id, fo->cl_gen, seq);
    fanout_free(g, fo);
    if (!r || r->seq != seq || r->state != RS_RUNNING)
        return;
    log_limited(&g->lim.fanout, g->loop.now_ms, LOG_INFO, c->c.name, "request %llu: .qgate.all failed: %s",
                (unsigned long long)r->seq, why);
    int held = hold_for_answer(c, r);
    request_error_loop(g, c, r, "%s", why);
    if (held)
        request_hold_for_answer_loop(g, c);
}

/* Every part has its reply: the writer pool merges them for the client. */
static void complete(struct gw *g, struct fanout *fo)
{
    struct client *c = client_of_fanout(g, fo);
    struct req *r = c ? client_head(c) : NULL;
    if (c)
        c->fo = NULL;
    if (!r || r->seq != fo->seq || r->state != RS_RUNNING) {
        fanout_free(g, fo);
        return;
    }
    struct merge_in *in = calloc(1, sizeof *in + (size_t)fo->n * sizeof in->part[0]);
    struct job *j = in ? job_new(job_merge, JK_MERGE) : NULL;
    if (!j) {
        free(in);
        fanout_free(g, fo);
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    in->as_list = fo->as_list;
    in->partial = fo->partial;
    if (fo->partial && !(in->names = calloc((size_t)fo->n, sizeof *in->names))) {
        free(in);
        job_free(j);
        fanout_free(g, fo);
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    for (int i = 0; i < fo->n; i++) { /* the replies go to the job, in worker order */
        struct fpart *p = fo->part[i];
        if (p->st != FP_DONE)
            continue; /* `partial: its worker was lost */
        if (fo->partial && !(in->names[in->n] = p->name)) {
            jobs_merge_in_free(in);
            job_free(j);
            fanout_free(g, fo);
            conn_close_loop(g, &c->c, "out of memory");
            return;
        }
        p->name = NULL; /* (the job's) */
        in->part[in->n].p = p->reply.p;
        in->part[in->n].len = p->reply.len;
        in->n++;
        p->reply = (struct inbuf){0};
    }
    size_t held = fo->held, out = 0; /* the parts, now the job's, and what they merge to */
    for (int i = 0; i < in->n; i++) {
        const uint8_t *m = in->part[i].p;
        size_t len = in->part[i].len;
        out += len > 8 && m[2] ? kzip_uncompressed_len(m, len) : len;
    }
    fo->held = 0; /* (still counted: the job's now) */
    fanout_free(g, fo);
    char why[96], text[160];
    if (out > (uint64_t)g->cfg.merge_max) /* (compressed parts, at their size decompressed: the merge's
                                           * own error, not hold_max's, which may be below it) */
        snprintf(text, sizeof text, "qgate: merge too large (over merge_max, %lld bytes)", (long long)g->cfg.merge_max);
    else if (!gw_hold_room(g, out)) { /* hold_max: refused, as a part over it is (by itself: with
                                       * the parts it is made from, held until it is made) */
        conn_refused_loop(g, REFUSED_HOLD_MAX, c->c.name, "%s: a .qgate.all's merge of %zu bytes refused",
                          gw_hold_why(g, out + held, why, sizeof why), out);
        gw_hold_error(g, out + held, text, sizeof text);
    } else
        text[0] = 0;
    if (text[0]) {
        buf_held_sub(held);
        jobs_merge_in_free(in);
        job_free(j);
        request_error_loop(g, c, r, "%s", text);
        return;
    }
    r->held = held + out;
    buf_held_add(out);
    j->ctx = in;
    j->ctx_free = jobs_merge_in_free;
    job_args(j)->reply = (struct job_reply){.cap = c->cap, .max = g->cfg.max_message,
                                            .compress = (uint8_t)client_compressed_for(g, c),
                                            .compress_max = g->cfg.compress_max, .merge_max = g->cfg.merge_max};
    request_set_state_loop(g, c, r, RS_LOCAL);
    if (hold_for_answer(c, r)) /* (`partial: a part's worker lost inside its callback) */
        request_hold_for_answer_loop(g, c);
    conn_submit_loop(g->writers, j, &c->c, r->seq);
}

int fanout_start_loop(struct gw *g, struct group *grp, struct client *c, struct req *r)
{
    int n = 0, m = 0;
    struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink) {
        n += takes_part(w);
        m += worker_is_lead(w) && !w->removed;
    }
    struct fanout *fo = calloc(1, sizeof *fo + (size_t)n * sizeof fo->part[0]);
    if (!fo)
        return -1;
    if (r->off) /* a routed request's message starts past its wrapper */
        memmove(r->msg, r->msg + r->off, r->len);
    if (!r->qtext && (r->qtext = malloc(QUERY_TEXT))) /* what its workers run, for .qgate.clients[] (a
                                                        * .qgate.all has no slot in .qgate.queries[]) */
        query_text(r->qtext, r->msg, r->len);
    struct shared *msg = buf_shared_wrap(r->msg, r->len);
    r->msg = NULL;
    c->pending -= req_cost(r);
    if (!msg) {
        free(fo);
        return -1;
    }
    *fo = (struct fanout){.cl_id = c->c.id, .cl_gen = c->c.gen, .seq = r->seq, .as_list = r->fan == 2,
                          .partial = r->partial, .nworkers = m, .msg = msg};
    snprintf(fo->gname, sizeof fo->gname, "%s", grp->cfg.name);
    fo->held = r->held; /* a compressed route's query, inflated: counted with the fan-out's now */
    r->held = 0;
    fo->counted = r->counted ? r->in_len : 0; /* the query's bytes, against pending_max until every */
    r->counted = 0;                             /* part has gone */
    TAILQ_FOREACH(w, &grp->workers, glink) {
        if (!takes_part(w))
            continue;
        struct fpart *p = calloc(1, sizeof *p);
        if (!p) {
            fanout_free(g, fo);
            return -1;
        }
        *p = (struct fpart){.fo = fo, .w = w, .st = FP_OWED};
        fo->part[fo->n++] = p;
        STAILQ_INSERT_TAIL(&w->fq, p, link);
        worker_owes_update(w);
        if (g->hooks.dispatched)
            g->hooks.dispatched(g->hooks.ctx, &w->c, c->c.id, c->c.gen, r->seq);
    }
    fo->left = fo->unsent = fo->n;
    c->fo = fo;
    g->loop.dispatch_pending = 1; /* dispatched this iteration (never here: this may run inside a start) */
    if (!fo->n || (fo->n < m && !fo->partial)) { /* a partial answer is never silent */
        char why[CFG_NAME_MAX + 96];
        snprintf(why, sizeof why, "qgate: group %s: %d of %d workers up", grp->cfg.name, fo->n, m);
        fail(g, fo, why);
        return 0;
    }
    log_debug(c->c.name, "request %llu: on the %d workers of group %s up", (unsigned long long)r->seq, fo->n,
              grp->cfg.name);
    return 0; /* dispatch starts the parts: at once on idle workers, on the others when free */
}

void fanout_cancel_loop(struct gw *g, struct fanout *fo)
{
    struct client *c = client_of_fanout(g, fo);
    if (c)
        c->fo = NULL;
    if (g->hooks.lost) /* given up on: its running parts may still run, late (tests/sim) */
        g->hooks.lost(g->hooks.ctx, fo->cl_id, fo->cl_gen, fo->seq);
    fanout_free(g, fo);
}

int fanout_run_owed_loop(struct gw *g, struct worker *w)
{
    struct fpart *p = STAILQ_FIRST(&w->fq);
    if (!p || w->st != WS_IDLE || !STAILQ_EMPTY(&w->bq)) /* broadcasts first: a client's order */
        return 0;
    STAILQ_REMOVE_HEAD(&w->fq, link);
    worker_owes_update(w);
    start_part(g, w, p);
    return 1;
}

int fanout_route_loop(struct gw *g, struct worker *w, uint64_t len)
{
    struct fanout *fo = w->run.fp ? w->run.fp->fo : NULL;
    char why[160];
    if (fo && len > (uint64_t)g->cfg.max_message)
        snprintf(why, sizeof why, JOB_TOO_LARGE, (unsigned long long)len);
    else if (fo && fo->total + len > (uint64_t)g->cfg.merge_max)
        snprintf(why, sizeof why, "qgate: merge too large (over merge_max, %lld bytes)", (long long)g->cfg.merge_max);
    else if (fo && !gw_hold_room(g, len)) {
        struct client *c = client_of_fanout(g, fo);
        char held[96];
        uint64_t self = fo->total + len; /* (with its parts held before it: by itself, it never fits
                                          * if that is over hold_max; at 0e4e1a9 'busy': helper round 24a) */
        conn_refused_loop(g, REFUSED_HOLD_MAX, c ? c->c.name : w->c.name,
                          "%s: a .qgate.all's part of %llu bytes (%llu with the parts before it) refused",
                          gw_hold_why(g, self, held, sizeof held), (unsigned long long)len, (unsigned long long)self);
        gw_hold_error(g, self, why, sizeof why);
    } else
        why[0] = 0;
    if (why[0]) {
        fail(g, fo, why); /* w->run.fp->fo is NULL now */
        fo = NULL;
    }
    if (!fo) {
        run_set_phase_loop(g, w, WB_DRAINING);
        return ROUTE_DROP;
    }
    fo->total += len;
    run_set_phase_loop(g, w, WB_COLLECTING);
    return ROUTE_COLLECT;
}

void fanout_part_done_loop(struct gw *g, struct worker *w)
{
    struct fpart *p = w->run.fp;
    w->run.fp = NULL;
    if (!p)
        return;
    struct fanout *fo = p->fo;
    if (!fo) { /* given up meanwhile */
        inbuf_free(&w->coll);
        free(p);
        return;
    }
    p->reply = w->coll;
    w->coll = (struct inbuf){0};
    fo->held += w->coll_held; /* counted with the fan-out's now */
    w->coll_held = 0;
    p->st = FP_DONE;
    if (fo->partial) /* (named now: removed by a reload before the last part ends, w is freed; at
                      * 5b2c56c the answer read its address from freed memory: helper round 33d) */
        p->name = strdup(w->addr);
    p->w = NULL;
    if (--fo->left == 0)
        complete(g, fo);
}

/* `partial: part p's worker went; the fan-out goes on without it, failing once none is left. */
static void part_lost(struct gw *g, struct fanout *fo, struct fpart *p)
{
    p->st = FP_LOST;
    inbuf_free(&p->reply);
    int done = 0;
    for (int i = 0; i < fo->n; i++)
        done += fo->part[i]->st == FP_DONE;
    if (--fo->left > 0)
        return;
    if (done) {
        complete(g, fo);
        return;
    }
    char why[CFG_NAME_MAX + 96];
    snprintf(why, sizeof why, "qgate: group %s: 0 of %d workers answered", fo->gname, fo->nworkers);
    fail(g, fo, why);
}

void fanout_worker_lost_loop(struct gw *g, struct worker *w, const char *why, int timed_out)
{
    struct fpart *p = w->run.fp;
    w->run.fp = NULL;
    if (p) {
        struct fanout *fo = p->fo;
        p->st = FP_DONE; /* freed with its fan-out, or here if that is gone */
        p->w = NULL;     /* (as every part done: w may be freed before its fan-out ends) */
        if (fo && fo->partial)
            part_lost(g, fo, p);
        else if (fo)
            fail(g, fo, why);
        else
            free(p);
    }
    if (STAILQ_EMPTY(&w->fq))
        return;
    char lost[600]; /* a part owed, not begun: the worker went, whatever the run before it did
                     * (another client's query timing out is not this .qgate.all's timeout), and
                     * the client is told it did not run there (nor anywhere, but those begun) */
    if (timed_out)
        snprintf(lost, sizeof lost, "qgate: worker %s: its connection was dropped (the request it ran sent nothing "
                 "for query_timeout) before this .qgate.all's part was sent: not run there", w->addr);
    else
        snprintf(lost, sizeof lost, "qgate: worker %s lost before this .qgate.all's part was sent: not run there",
                 w->addr);
    while ((p = STAILQ_FIRST(&w->fq))) { /* fail removes each from fq */
        if (p->fo->partial) {
            STAILQ_REMOVE_HEAD(&w->fq, link);
            worker_owes_update(w);
            part_lost(g, p->fo, p);
        } else {
            fail(g, p->fo, lost);
        }
    }
}

void fanout_merged_loop(struct gw *g, struct job *j)
{
    struct client *c = client_of_job_loop(g, j);
    struct req *r = c ? client_head(c) : NULL;
    if (r && r->seq == j->seq && r->state == RS_LOCAL && j->result) { /* its outcome, as a request's */
        r->outcome = j->result == 1 ? ALOG_ERROR : ALOG_GWERROR;
        free(r->etext);
        r->etext = strdup(j->text);
    }
    request_reply_done_loop(g, j);
}

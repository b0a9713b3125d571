/* session.c: pool = session, the worker side. A client of a session group is given the worker
 * that runs its first request, and keeps it until it goes: every request it sends runs there
 * (request.c starts them through backend_ops.session_start), and what the worker publishes
 * goes to it (run.c routes to the client served last). Between its requests the worker is
 * PINNED: up, off the idle list. When the client has gone for good (client.c's close calls
 * backend_ops.release) the worker runs the group's reset_query, if any; then its connection is
 * closed and a new one opened, so that its q runs .z.pc for the session's handle as it would for
 * a client of its own that left (subscriptions by .z.w go with it), and nothing the worker sent,
 * or still sends, on that handle reaches anyone; then it is IDLE again.
 * When the worker is lost, run.c tells the client (request_session_lost_loop). */
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "gw.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"

static void begin(struct gw *g, struct worker *w, struct client *c)
{
    if (w->grp != c->grp || c->grp->cfg.pool_mode != CFG_POOL_SESSION || c->sess)
        return; /* a request routed to another group runs there once, unpinned */
    c->sess = w; /* w is this client's alone until it goes */
    w->sess = c;
    w->dirty = 1;
    log_info(w->c.name, "session: given to %s", c->c.name);
    request_room_check_loop(g, c); /* (its next message need not wait for room now) */
}

/* The group's reset_query, sent as a sync message: its reply is swallowed, and the worker is
 * free when it comes; what the worker sends meanwhile reaches nobody. 0, or -1 (no memory). */
static int start_reset(struct gw *g, struct worker *w)
{
    const char *q = session_reset_query(w);
    K x = k_str(q, strlen(q));
    size_t len = 0;
    uint8_t *m = x ? kcodec_encode_msg(x, KIPC_SYNC, &len) : NULL;
    k_free(x);
    struct chunk *ch = m ? chunk_wrap(m, len) : NULL; /* chunk_wrap frees m if it fails */
    if (!ch)
        return -1;
    outq_push(&w->c.out, ch);
    if (w->st != WS_BUSY) /* PINNED, or connected (HANDSHAKE); or BUSY still, its session's last run just ended */
        worker_set_state_loop(g, w, WS_BUSY);
    w->run = (struct run){.kind = RUN_BROADCASTS, .swallow = 1, /* no client's: nothing it sends reaches anyone */
                          .reset = 1};
    run_sent_loop(g, w);
    conn_mark_dirty_loop(g, &w->c);
    log_debug(w->c.name, "session ended: running the reset query");
    return 0;
}

void session_end_forget_loop(struct worker *w)
{
    w->end_due = 0;
    free(w->end_reset);
    w->end_reset = NULL;
}

/* Free of its last run and of any session: the reset query it owes, then the new connection
 * its session's end owes, or the next client. */
static void let_go(struct gw *g, struct worker *w)
{
    if (w->reset_owed) {
        w->reset_owed = 0;
        if (start_reset(g, w) == 0)
            return;
        log_error(w->c.name, "out of memory for the reset query: a new connection without it");
        w->renew = 1;
    }
    if (w->renew && !w->removed) {
        w->renew = 0;
        worker_renew_loop(g, w, "its session ended: a new connection for the next (its q runs .z.pc for this one)");
        return;
    }
    w->renew = 0;
    run_plain_end_loop(g, w); /* IDLE, or gone if removed */
}

static void run_ended(struct gw *g, struct worker *w)
{
    if (w->sess) { /* its session goes on: the client's next request may start now */
        worker_set_state_loop(g, w, WS_PINNED);
        request_advance_loop(g, w->sess);
        return;
    }
    if (w->grp->cfg.pool_mode == CFG_POOL_SESSION && !w->run.reset && !w->dirty) /* a request routed
            * here from outside any session ran on it, or a .qgate.all's part or broadcasts sent
            * while a reload had not yet made the group a session pool (at 5a51eb2 those left their
            * q's state to the next session, the reset query not run); kept with no reset query
            * too: a reload may set one */
        w->dirty = 1;
    if (w->dirty && !w->reset_owed && session_reset_query(w)[0]) {
        w->reset_owed = 1; /* what it left behind is reset before a session is given the worker */
        log_debug(w->c.name, "its q may hold what ran outside its sessions: the reset query runs next");
    }
    let_go(g, w);
}

int session_start_loop(struct gw *g, struct worker *w, struct client *c)
{
    if (w->st != WS_PINNED)
        return 0;
    run_begin_loop(g, w, c);
    return 1;
}

void session_end_loop(struct gw *g, struct worker *w, const char *reset_query, const char *why)
{
    struct client *c = w->sess;
    if (!c)
        return;
    if (w->st == WS_PINNED && w->msg.route == ROUTE_STREAM && w->msg.to == c) {
        /* a message to c half streamed (a publish): what is left of it is c's, so c stays linked to
         * w (its close drains the rest, w's loss cuts c's stream) until it ends (run.c's message
         * end, session_end_due_loop); ended now, a close of c would leave w streaming into freed
         * memory, and the new connection would cut c's stream in the middle of a message */
        if (!w->end_due) {
            w->end_due = 1;
            w->end_reset = reset_query[0] ? strdup(reset_query) : NULL;
            if (reset_query[0] && !w->end_reset)
                log_error(w->c.name, "out of memory: the reset query will not run when %s's session ends", c->c.name);
            log_info(w->c.name, "session: %s %s once the message being streamed to it has ended", c->c.name, why);
        }
        return;
    }
    session_end_forget_loop(w);
    c->sess = NULL;
    w->sess = NULL;
    log_info(w->c.name, "session: %s %s, the worker is free", c->c.name, why);
    free(w->reset_q);
    w->reset_q = reset_query[0] ? strdup(reset_query) : NULL; /* (no memory: the group's, if it has one) */
    w->reset_owed = reset_query[0] != 0;
    w->renew = 1; /* a handle of its own for each session: nothing sent for c reaches the next */
    if (w->st == WS_PINNED)
        let_go(g, w);
    /* BUSY: its run ends first (the client's reply drained), then session_run_ended_loop */
    request_session_ended_loop(g, c); /* its next request, held for this worker by a pause (the
                                       * simulation, 2026-12-07: left on the held list) or given
                                       * to it while it ran another's run, takes any worker now */
}

void session_end_due_loop(struct gw *g, struct worker *w)
{
    char *reset = w->end_reset;
    w->end_reset = NULL;
    session_end_forget_loop(w);
    struct client *c = w->sess;
    if (w->grp->cfg.pool_mode != CFG_POOL_SESSION) {
        session_end_loop(g, w, reset ? reset : "", SESSION_END_RELOAD);
        if (c && !c->sess) /* to the group the file sends its user to now, as the reload moved the
                            * others (helper round 35a: at 7ebf571 it stayed on this one) */
            client_regroup_loop(g, c);
    } else
        log_info(w->c.name, "session: %s goes on: a reload has made its group a session pool again",
                 w->sess ? w->sess->c.name : "?");
    free(reset);
}

void session_release_loop(struct gw *g, struct worker *w)
{
    int due = w->end_due; /* a reload's end held back: the reset query the session lived under, not
                           * the request pool's none (helper round 34c: at 811dec9 its q kept what
                           * the session left, for the next client) */
    char *reset = w->end_reset;
    w->end_reset = NULL;
    session_end_loop(g, w, due ? (reset ? reset : "") : w->grp->cfg.reset_query, "has gone");
    free(reset);
}

const char *session_reset_query(const struct worker *w)
{
    return w->reset_q                                   ? w->reset_q /* its session's */
           : w->grp->cfg.pool_mode == CFG_POOL_SESSION ? w->grp->cfg.reset_query
                                                       : "";
}

int session_connected_loop(struct gw *g, struct worker *w)
{
    if (!w->dirty || !session_reset_query(w)[0]) /* (none: a request pool, or none configured now:
                                                  * still dirty, for a reload that sets one) */
        return 0;
    if (w->grp->paused) { /* a paused group starts nothing new: dirty, it runs the reset query when
                           * a session is next given it, after the resume (idle_first) (helper round
                           * 36c: at e80cc18 it ran it at once, the pause complete) */
        log_info(w->c.name, "its group is paused: the reset query runs before a session is given it, after the resume");
        return 0;
    }
    if (worker_q_shared_loop(g, w)) /* its q is another's still (a live session's, on a connection a
                                     * reload removed): idle and dirty, passed over until that has
                                     * gone, then reset (idle_first) */
        return 0;
    log_at(w->dirty == 1 ? LOG_INFO : LOG_DEBUG, w->c.name, "%s: the reset query runs first",
           w->dirty == 1 ? "qgate dropped its last connection before the reset query ran"
                         : "what ran in its q outside qgate's sessions is not known");
    return start_reset(g, w) == 0 ? 1 : -1;
}

/* The idle worker a client waiting for a session is given: the one idle longest that is clean.
 * One that may hold what ran outside a session, idle since a reload set the reset query, made
 * its group a session pool, or left its q another's on connecting, runs the reset query first (BUSY: given once it has run). One
 * whose q another connection still reaches, left by a reload (a pipelined request pool's, one
 * removed and put back, one moved from another group), is passed over until that has gone:
 * what runs there (a request, its reset query) would run in the session's q. */
static struct conn *idle_first(struct gw *g, struct group *grp)
{
    for (struct conn *x = connq_first(&grp->idle), *n; x; x = n) {
        n = connq_next(x);
        struct worker *w = worker_of(x);
        if (!worker_takes_work(w) || worker_sibling(w) || worker_q_shared_loop(g, w))
            continue;
        if (w->dirty && session_reset_query(w)[0]) {
            log_info(w->c.name, "its q may hold what ran outside a session, or what the last one left: the reset "
                                "query runs before a session is given it");
            if (start_reset(g, w) < 0)
                conn_close_loop(g, &w->c, "out of memory for the reset query");
            continue;
        }
        if (w->foreign && !w->removed) { /* then a handle of the session's own: what q may still send
                                          * on this one (a request pool's publish) is no session's */
            if (w->c.owes) /* (what it owes from before, broadcasts, a .qgate.all's part, runs on this
                            * one first: run_owed) */
                continue;
            log_info(w->c.name, "its connection has carried requests outside a session: a new one before "
                                "a session is given it");
            worker_renew_loop(g, w, "it carried requests outside a session: a new connection for the next "
                                    "(its q runs .z.pc for this one)");
            continue;
        }
        return x;
    }
    return NULL;
}

void session_pool_reloaded_loop(struct gw *g, struct group *grp, int was_session)
{
    (void)g;
    if (was_session || grp->cfg.pool_mode != CFG_POOL_SESSION)
        return;
    struct worker *w; /* a request pool until now: what its clients ran is in its q */
    TAILQ_FOREACH(w, &grp->workers, glink)
        if (!w->dirty)
            w->dirty = worker_is_connected(w) ? 1 : 2;
}

const struct group_mode session_mode = {
    .name = "session",
    .idle_first = idle_first,
    .begin = begin,
    .end = run_ended,
};

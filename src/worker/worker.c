/* worker.c: a back-end q connection: resolve (on the reader pool), connect and q's handshake,
 * reconnect with back-off, loss, removal by a reload. What runs on it, where what it sends
 * goes, and its query timeout are run.c's.
 *
 * States, and the transitions the tables below allow (worker_set_state_loop is the one setter:
 * it keeps the group's idle list and its count of workers up in step, and counts a transition
 * the table does not allow in g->bad_transitions, which tests/sim requires to stay 0):
 *   DOWN --back-off timer, address known--> CONNECTING
 *   DOWN --back-off timer, address unknown--> RESOLVING (a reader resolves) --> DOWN -->
 *     CONNECTING, or DOWN again if connecting fails at once
 *   CONNECTING --writable--> HANDSHAKE --capability byte--> IDLE (on the idle list)
 *   IDLE --dispatch: a request, or broadcasts owed--> BUSY --its run has ended--> IDLE
 *   pool = session: BUSY --the run of a session's request has ended--> PINNED (given to that
 *     client alone, off the idle list) --its next request--> BUSY; PINNED --the client has
 *     gone--> BUSY (the reset query) or IDLE
 *   .qgate.disable[] (w->disabled): IDLE, or a run or session ending, owing nothing --> DISABLED
 *     (connected, off the idle list, given nothing) --.qgate.enable[]--> IDLE. One that owes
 *     broadcasts or fan-out parts given to it before stays IDLE until dispatch has run them
 *     (dispatch runs what idle workers owe before it hands out any client).
 *   removed by a reload: IDLE owing nothing, or a run or session ending, owing nothing --> closed
 *     and freed; like a disabled one, it runs what it was given before it goes, and nothing new.
 *   CONNECTING, HANDSHAKE, IDLE, BUSY, PINNED, DISABLED --error, EOF, timeout--> DOWN (reconnect with back-off,
 *     or freed when a reload removed it; closed with broadcasts sent and not known to have run,
 *     either not before q has closed that connection too: w->remnant)
 *
 * A BUSY worker's run has a phase (run.c's table, run_set_phase_loop), what it has come to:
 *   SENT --a callback, its client to answer--> CALLED --the worker sends again--> SENT
 *   SENT --its reply's header, to stream--> RELAYING (a loss now cuts the client's stream: the
 *     client is closed)
 *   SENT --its header, to transform--> COLLECTING (held whole for a pool job)
 *   SENT or CALLED --its header, client gone or answered already (too large for it)--> DRAINING
 *   RELAYING or COLLECTING --the client gone--> DRAINING (read and dropped)
 *   any --query_timeout--> TIMEDOUT (its connection is dropped: the loss answers 'qgate: timeout)
 *   any --the reply ends--> (IDLE, or what the group's mode says)
 * Chaser replies (the sync "" after async batches and broadcast runs) are swallowed while
 * swallow > 0, whatever the phase; every message is routed by struct wmsg (run.c). */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "worker.h"
#include "stream.h"
#include "access.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "net.h"

#define ST_NAME(e) #e,
static const char *const state_names[] = {WORKER_STATES(ST_NAME)};
#undef ST_NAME

#define TO(s) (1u << WS_##s)
static const unsigned allowed[] = {
    [WS_DOWN] = TO(DOWN) | TO(RESOLVING) | TO(CONNECTING),
    [WS_RESOLVING] = TO(DOWN),
    [WS_CONNECTING] = TO(HANDSHAKE) | TO(DOWN),
    [WS_HANDSHAKE] = TO(IDLE) | TO(DOWN) | TO(DISABLED) | TO(BUSY), /* BUSY: the reset query first (session.c) */
    [WS_IDLE] = TO(BUSY) | TO(DOWN) | TO(DISABLED),
    [WS_BUSY] = TO(IDLE) | TO(DOWN) | TO(PINNED) | TO(DISABLED),
    [WS_PINNED] = TO(BUSY) | TO(IDLE) | TO(DOWN) | TO(DISABLED),
    [WS_DISABLED] = TO(IDLE) | TO(DOWN),
};
#undef TO

const char *worker_via_name(int via) { return via == VIA_UNIX ? "unix" : via == VIA_TCP ? "tcp" : ""; }

const char *worker_state_name(int st) { return st >= 0 && st <= WS_DISABLED ? state_names[st] : "?"; }

static void transition(struct gw *g, struct worker *w, const char *what, const char *from, const char *to, int ok)
{
    if (ok) {
        log_debug(w->c.name, "%s %s -> %s", what, from, to);
        return;
    }
    g->bad_transitions++;
    log_error(w->c.name, "%s %s -> %s is not in worker.c's table", what, from, to);
}

static int owes(const struct worker *w) { return !STAILQ_EMPTY(&w->bq) || !STAILQ_EMPTY(&w->fq); }

void worker_set_state_loop(struct gw *g, struct worker *w, enum worker_state st)
{
    if (st == WS_IDLE && w->disabled && !owes(w))
        st = WS_DISABLED; /* free, and out of rotation: given nothing */
    transition(g, w, "state", worker_state_name(w->st), worker_state_name(st), (allowed[w->st] >> st) & 1);
    int was = worker_is_up(w);
    if (w->st == WS_BUSY && st != WS_BUSY && w->grp->paused)
        g->loop.dispatch_pending = 1; /* a pause waits for its group's last run to end */
    w->st = (uint8_t)st;
    if ((st == WS_IDLE || st == WS_DISABLED) && w->c.paused)
        stream_resume_loop(g, &w->c); /* free: nothing it sends waits for a client's output now */
    if (worker_is_lead(w)) /* a worker is up while its lead is */
        w->grp->nup += worker_is_up(w) - was;
    if (w->grp->nup)
        w->grp->unavailable = 0; /* (one enabled is up, as one connected is) */
    if (st == WS_DISABLED)
        log_info(w->c.name, "disabled: idle, out of rotation");
    if (st == WS_IDLE) {
        conn_queue_in_loop(worker_is_lead(w) ? &w->grp->idle : &w->grp->spare, &w->c);
        g->loop.dispatch_pending = 1; /* something may be waiting for it */
    } else if (w->c.q == &w->grp->idle || w->c.q == &w->grp->spare) {
        conn_queue_out_loop(&w->c); /* (one paused stays on its client's waiters) */
    }
    if (st == WS_BUSY)
        w->run.phase = WB_SENT;
}

void worker_disable_loop(struct gw *g, struct worker *w, int on)
{
    w->disabled = (uint8_t)(on != 0);
    if (on && w->st == WS_IDLE && !owes(w))
        worker_set_state_loop(g, w, WS_DISABLED);
    else if (!on && w->st == WS_DISABLED)
        worker_set_state_loop(g, w, WS_IDLE);
    /* busy or pinned: when its run or session ends; down: when it is back */
}

static void on_reconnect_timer(struct gw *g, struct conn *c);
static void inherit_disabled(struct gw *g, struct worker *w);

static void schedule_reconnect(struct gw *g, struct worker *w)
{
    conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms + w->backoff, on_reconnect_timer);
    log_debug(w->c.name, "reconnecting in %lld ms", (long long)w->backoff);
    w->backoff = QG_MIN(w->backoff * 2, g->cfg.reconnect_max);
}

/* How loud the nth connection attempt in a row to fail is: the first a warning, then one at 8,
 * 16, 32, ... (a worker down for long floods no log), the rest at debug. */
static int failed_attempt_level(uint32_t n)
{
    if (n <= 1)
        return LOG_WARN;
    return n >= 8 && !(n & (n - 1)) ? LOG_INFO : LOG_DEBUG;
}

/* Is another worker of w's group still on its first attempt to connect (added at the start, or
 * by a reload)? Then the group is not known to be down yet: that one says so if it fails too. */
static int another_first_try(const struct worker *w)
{
    const struct worker *x;
    TAILQ_FOREACH(x, &w->grp->workers, glink)
        if (x != w && worker_is_lead(x) && !x->tried && !x->disabled && !x->removed &&
            (x->st == WS_RESOLVING || x->st == WS_CONNECTING || x->st == WS_HANDSHAKE))
            return 1;
    return 0;
}

/* A connection attempt failed (the worker was not up), or the connection closed as soon as it
 * was up (a flap): retry later; if no worker of the group is up, the waiting requests are
 * answered rather than left to wait. */
static void connect_failed(struct gw *g, struct worker *w)
{
    w->renewing = 0; /* a new connection for the next session that failed: down, as any */
    w->tried = 1;
    if (worker_is_lead(w) && w->grp->nup == 0 && !w->grp->unavailable &&
        !another_first_try(w)) { /* (helper round 36d: at e80cc18 a start with one worker down said no
                                  * worker was up while the other still connected) */
        w->grp->unavailable = 1; /* (said once for a run of failed attempts, thinned out for flaps) */
        log_at(w->flaps > 1 ? failed_attempt_level(w->flaps) : LOG_WARN, w->c.name, "no worker of group %s is up",
               w->grp->cfg.name);
        dispatch_fail_group_loop(g, w->grp);
    }
    schedule_reconnect(g, w);
}

/* Connection slot of the worker at addr, after `after` on grp's list (NULL: at its end). */
static struct worker *new_conn(struct gw *g, struct group *grp, const char *addr, int slot, struct worker *after)
{
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->slot = (uint8_t)slot;
    w->c.kind = CONN_WORKER;
    w->c.fd = -1;
    w->remnant.fd = -1;
    w->c.ev.ops = &worker_connops.ev;
    w->grp = grp;
    w->dirty = 2; /* what ran in its q before qgate had it is not known (a session group: reset first) */
    w->serial = ++g->next_worker_serial;
    STAILQ_INIT(&w->bq);
    STAILQ_INIT(&w->bsent);
    STAILQ_INIT(&w->fq);
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    w->iname = access_name_loop(g, w->addr);
    if (slot)
        snprintf(w->c.name, sizeof w->c.name, "w %s#%d", addr, slot);
    else
        snprintf(w->c.name, sizeof w->c.name, "w %s", addr);
    w->backoff = g->cfg.reconnect_min;
    if (after)
        TAILQ_INSERT_AFTER(&grp->workers, after, w, glink);
    else
        TAILQ_INSERT_TAIL(&grp->workers, w, glink);
    grp->nworkers += !slot;
    g->loop.nbackends++;
    conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms, on_reconnect_timer);
    return w;
}


void worker_add_loop(struct gw *g, struct group *grp, const char *addr)
{
    struct worker *lead = new_conn(g, grp, addr, 0, NULL);
    if (lead)
        worker_fit_loop(g, grp, lead);
}

void worker_fit_loop(struct gw *g, struct group *grp, struct worker *lead)
{
    int n = group_conns(grp), have = 1, top = 0;
    struct worker *last = lead;
    for (struct worker *x = worker_sibling(lead), *nx; x; x = nx) {
        nx = worker_sibling(x); /* before a removal may take x off the list */
        last = x;
        top = x->slot;
        if (x->removed)
            continue;
        if (have < n) {
            have++;
            continue;
        }
        log_info(x->c.name, "reload: group %s keeps %d connections to each worker: this one goes", grp->cfg.name, n);
        worker_remove_loop(g, x);
    }
    for (; have < n && top < 255; have++)
        if (!(last = new_conn(g, grp, lead->addr, ++top, last)))
            break;
}

void worker_free_loop(struct conn *c)
{
    struct worker *w = worker_of(c);
    broadcast_free_loop(w);
    worker_coll_free(w);
    stream_remnant_close_loop(&w->remnant);
    free(w->reset_q);
    session_end_forget_loop(w);
    free(w);
}

static void on_connect_timeout(struct gw *g, struct conn *c)
{
    struct worker *w = worker_of(c);
    g->connect_timeouts++;
    conn_close_loop(g, &w->c, w->st == WS_CONNECTING ? "connect timed out" : "handshake timed out");
}

/* Its Unix socket did not answer (why): this attempt, or the next, goes over TCP. */
static void uds_passed_over(struct worker *w, const char *why)
{
    char name[110];
    snprintf(w->uds_why, sizeof w->uds_why, "%s: %s", net_uds_name(&w->na.uds, w->na.udslen, name, sizeof name), why);
    log_debug(w->c.name, "Unix socket %s: trying TCP", w->uds_why);
}

/* Which ways it can be reached: the resolved addresses, or under the test's connect hook
 * every worker is local, with a Unix socket when local_workers = unix. */
static int has_uds(const struct gw *g, const struct worker *w)
{
    return g->hooks.connect ? g->cfg.local_workers == CFG_LOCAL_UNIX : w->na.udslen > 0;
}
static int has_tcp(const struct gw *g, const struct worker *w) { return g->hooks.connect || w->na.tcplen > 0; }

static int open_via(struct gw *g, struct worker *w, int via)
{
    w->via = (uint8_t)via;
    if (g->hooks.connect)
        return g->hooks.connect(g->hooks.ctx, w->addr, via == VIA_UNIX);
    return via == VIA_UNIX ? net_connect_addr(&w->na.uds, w->na.udslen, 1) : net_connect_addr(&w->na.tcp, w->na.tcplen, 1);
}

/* Start connecting: over its Unix socket when it has one that did not just fail to answer,
 * else over TCP. */
static void connect_now(struct gw *g, struct worker *w)
{
    int fd = -1;
    if (has_uds(g, w) && !w->skip_uds && (fd = open_via(g, w, VIA_UNIX)) < 0 && has_tcp(g, w))
        uds_passed_over(w, strerror(errno));
    w->skip_uds = 0;
    if (fd < 0 && has_tcp(g, w))
        fd = open_via(g, w, VIA_TCP);
    if (fd >= 0 && w->via == VIA_TCP)
        conn_keepalive_loop(g, fd, w->c.name);
    if (fd < 0) {
        int e = errno; /* out of descriptors is the gateway's trouble, not the worker's: said */
        log_at(e == EMFILE || e == ENFILE ? LOG_WARN : LOG_DEBUG, w->c.name, "connect: %s", strerror(e));
        errno = e;
        memset(&w->na, 0, sizeof w->na); /* resolve again next time: the address may have moved */
    }
    if (fd < 0 || conn_register_loop(g, &w->c, &worker_connops, CONN_WORKER, fd, EPOLLOUT)) {
        if (fd >= 0)
            close(fd);
        worker_set_state_loop(g, w, WS_DOWN);
        connect_failed(g, w);
        return;
    }
    w->c.want_out = 1;
    worker_set_state_loop(g, w, WS_CONNECTING);
    conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms + g->cfg.worker_connect_timeout, on_connect_timeout);
}

static void worker_connect_loop(struct gw *g, struct worker *w)
{
    if (w->c.fd >= 0 || w->st != WS_DOWN || w->remnant.fd >= 0) /* (a remnant: once it has closed) */
        return;
    if (w->na.tcplen || w->na.udslen || g->hooks.connect) { /* its addresses are known */
        connect_now(g, w);
        return;
    }
    /* name resolution may block: a reader does it */
    struct job *j = job_new(job_resolve, JK_RESOLVE);
    if (!j || !(j->ctx = strdup(w->addr))) {
        job_free(j);
        connect_failed(g, w);
        return;
    }
    j->ctx_free = free;
    job_args(j)->resolve = (struct job_resolve){.serial = w->serial, .local_workers = g->cfg.local_workers};
    worker_set_state_loop(g, w, WS_RESOLVING);
    pool_submit(g->readers, j);
}

static void on_reconnect_timer(struct gw *g, struct conn *c) { worker_connect_loop(g, worker_of(c)); }

static struct worker *worker_by_serial(struct gw *g, uint64_t serial)
{
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            if (w->serial == serial)
                return w;
    }
    return NULL;
}

static void unlink_removed(struct gw *g, struct worker *w);

void worker_resolved_loop(struct gw *g, struct job *j)
{
    struct worker *w = worker_by_serial(g, job_args(j)->resolve.serial);
    if (!w || w->st != WS_RESOLVING) /* removed meanwhile */
        return;
    worker_set_state_loop(g, w, WS_DOWN);
    if (w->removed) {
        unlink_removed(g, w);
        return;
    }
    if (j->result || j->out_len != sizeof w->na) {
        log_warn(w->c.name, "cannot resolve %s: %s; will retry", w->addr, j->text);
        connect_failed(g, w);
        return;
    }
    memcpy(&w->na, j->out, sizeof w->na);
    connect_now(g, w);
}

static void send_handshake(struct gw *g, struct worker *w)
{
    uint8_t hs[600];
    size_t n = kipc_hs_build(hs, sizeof hs, w->grp->cfg.user, w->grp->cfg.password, KIPC_CAP_MAX);
    if (!n || outq_copy(&w->c.out, hs, n)) {
        conn_close_loop(g, &w->c, "cannot build the handshake");
        return;
    }
    worker_set_state_loop(g, w, WS_HANDSHAKE);
    w->c.want_out = 0;
    conn_set_events_loop(g, &w->c, EPOLLIN);
    conn_mark_dirty_loop(g, &w->c);
}

static void finish_connect(struct gw *g, struct worker *w)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(w->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
        conn_close_loop(g, &w->c, err ? strerror(err) : "connect failed");
        return;
    }
    send_handshake(g, w);
}

/* Raw input: the capability byte that ends q's handshake. */
static int on_bytes(struct gw *g, struct conn *x)
{
    struct worker *w = worker_of(x);
    if (w->st != WS_HANDSHAKE || !inbuf_avail(&x->in))
        return SS_OK;
    uint8_t cap = inbuf_data(&x->in)[0];
    inbuf_consume(&x->in, 1);
    inbuf_release_idle(&x->in);
    x->framed = 1; /* kdb+ messages from now on */
    w->cap = cap;
    w->up_ms = g->loop.now_ms; /* (closed before it has answered, or stayed up: a flap, on_close) */
    w->answered = 0;
    w->backoff = g->cfg.reconnect_min;
    if (!w->disabled && worker_is_lead(w))
        w->grp->unavailable = 0;
    conn_timer_cancel_loop(g, &w->c, WORKER_TM);
    char name[110] = "";
    if (w->via == VIA_UNIX)
        net_uds_name(&w->na.uds, w->na.udslen, name, sizeof name);
    else if (w->c.fd >= 0)
        net_peer_name(w->c.fd, name, sizeof name);
    /* after connections in a row closed before a reply (a flapping q), said as their closes are:
     * the first, then at 8, 16, 32, ... (helper round 36d: at e80cc18 each reconnect at info) */
    int lvl = w->renewing == 2 ? LOG_DEBUG : w->flaps > 1 && failed_attempt_level(w->flaps) == LOG_DEBUG ? LOG_DEBUG : LOG_INFO;
    log_at(lvl, w->c.name, "connected (capability %d) over %s %s%s%s%s", cap, worker_via_name(w->via), name,
           w->uds_why[0] && w->via == VIA_TCP ? "; its Unix socket " : "", w->via == VIA_TCP ? w->uds_why : "",
           w->renewing == 2 ? " (a new connection for the next session)" : "");
    w->renewing = 0;
    w->foreign = 0;
    w->uds_why[0] = 0;
    w->fails = 0;
    w->tried = 1;
    inherit_disabled(g, w);
    int reset = session_connected_loop(g, w); /* (BUSY with it: never idle before it has run) */
    if (reset < 0)
        return stream_close(x, "out of memory for the reset query its last connection owed");
    if (!reset)
        worker_set_state_loop(g, w, WS_IDLE);
    return SS_OK;
}

static int on_eof(struct gw *g, struct conn *x, int fin, const char *why)
{
    (void)g;
    (void)fin;
    if (worker_of(x)->st == WS_HANDSHAKE)
        return stream_close(x, "closed during the handshake ('access: check the group's user and password)");
    return stream_close(x, "%s", why);
}

static void on_event(struct gw *g, struct evsrc *s, uint32_t ev)
{
    struct worker *w = worker_of((struct conn *)s);
    if (w->c.fd < 0)
        return;
    if (w->st == WS_CONNECTING) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            finish_connect(g, w);
        return;
    }
    if (ev & EPOLLOUT)
        stream_flush_loop(g, &w->c);
    if (w->c.fd < 0 || !(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        return;
    stream_read_loop(g, &w->c); /* the capability byte, then messages */
}

/* A worker leaving the configuration, down now: off its group, freed after this iteration. One
 * whose connection closed with broadcasts not known to have run (w->remnant) stays, removed and
 * given nothing, until q has closed that connection too: a reload that puts the address back
 * finds it (reload.c) and it waits for that close, so that what the group broadcasts on its new
 * connection runs after what q still had to run from the old one. */
static void unlink_removed(struct gw *g, struct worker *w)
{
    if (w->remnant.fd >= 0) {
        log_info(w->c.name, "removed from the configuration: gone once the worker has closed its end of the old connection");
        return;
    }
    if (!worker_is_lead(w)) { /* a connection of a worker that stays (pipeline lowered): what it
                               * served stays its worker's (at 01bef40 .qgate.stats[] and the metrics
                               * page lost it: a counter going down) */
        struct worker *lead = w;
        while ((lead = TAILQ_PREV(lead, workerlist, glink)) && !(worker_is_lead(lead) && !strcmp(lead->addr, w->addr)))
            ;
        if (lead) {
            lead->served += w->served;
            lead->errors += w->errors;
            hist_merge(&lead->lat, &w->lat);
        }
    }
    TAILQ_REMOVE(&w->grp->workers, w, glink);
    g->loop.nremoved -= w->removed != 0;
    w->grp->nworkers -= worker_is_lead(w);
    g->loop.dispatch_pending = 1; /* (a session pool's worker passed over while this connection was its own) */
    g->loop.nbackends--;
    conn_free_later_loop(g, &w->c);
}

/* The connection closed with broadcasts unconfirmed has been closed by q too (it has run all it
 * read from it), or has failed (a reset; keepalive or tcp_user_timeout finding q's host gone):
 * the worker may connect again, if its back-off has passed. */
static void on_remnant_closed(struct gw *g, void *ctx)
{
    struct worker *w = ctx;
    const char *next = w->removed ? "gone (removed from the configuration)" : "connecting again";
    if (w->remnant.err)
        log_warn(w->c.name, "the old connection, left for the worker to close, failed (%s): %s",
                 strerror(w->remnant.err), next);
    else
        log_info(w->c.name, "the worker has closed its end of the old connection: %s", next);
    if (w->removed)
        unlink_removed(g, w);
    else if (!conn_timer_armed(&w->c, WORKER_TM))
        worker_connect_loop(g, w);
}

/* The socket is gone: fail or finish the request, then reconnect (or go, if removed). */
static void on_close(struct gw *g, struct conn *c, const char *why)
{
    struct worker *w = worker_of(c);
    int renew = w->renewing == 1; /* closed for its session's end (a renewed one that failed: as any) */
    w->renewing = renew ? 2 : 0;
    int was_up = worker_is_connected(w);
    uint32_t fails = was_up || renew ? 0 : ++w->fails; /* an attempt that failed: the first said, then a few */
    /* up, and closed before it answered anything or lived reconnect_max: a q that closes what it
     * has just accepted (a .z.po refusing qgate, a crash on connect) is not retried every
     * reconnect_min for ever; one that answered, or stayed up, is a worker lost: back at once */
    int flapped = was_up && !renew && !w->answered && g->loop.now_ms - w->up_ms < g->cfg.reconnect_max &&
                  !(w->st == WS_BUSY && w->run.phase == WB_TIMEDOUT); /* (not its query timeout) */
    int busy = w->st == WS_BUSY && w->run.kind != RUN_BROADCASTS; /* (lost with a client's run: a worker lost,
                                    * whose group's queue waits for it; not with its reset query or broadcasts,
                                    * which a flapping q is sent on each connection) */
    w->flaps = flapped ? w->flaps + 1 : 0;
    if (flapped) /* doubling with each flap in a row (not with the failed attempts before it came up) */
        w->backoff = QG_MIN(g->cfg.reconnect_min << QG_MIN(w->flaps - 1, 20u), g->cfg.reconnect_max);
    int lvl = renew ? LOG_DEBUG : w->removed || g->freeing ? LOG_INFO : failed_attempt_level(fails ? fails : w->flaps);
    if (fails > 1)
        log_at(lvl, c->name, "connection closed: %s (%u attempts failed in a row)", why, fails);
    else if (w->flaps > 1)
        log_at(lvl, c->name, "connection closed: %s (%u connections in a row closed before a reply, %lld ms or less after the handshake)",
               why, w->flaps, (long long)g->cfg.reconnect_max);
    else
        log_at(lvl, c->name, "connection closed: %s", why);
    /* Closed with broadcasts sent on it and not known to have run (a query timeout, a bad
     * message): q may still be there, and runs what it has read, maybe long after. The
     * broadcasts that follow, on a new connection, could run before them (q serves its
     * connections in its own order), and each worker must run one client's broadcasts in the
     * order sent. So the socket is read to its end, and the worker connects again only once q
     * has closed it (at once if q has closed it already). A timed-out request alone is not
     * waited for: its client was told, and it may run late, as a direct client's would. */
    /* ... and so may a session's messages, after the reset query a new connection would run
     * first: a worker that owes it connects again once q has run what it read here. In a
     * session pool with no reset query too: a reload may set one before the new connection's
     * handshake, which then runs it first (session_connected_loop), before what q still has
     * to run from this one (seed 1266694) */
    const char *rq = session_reset_query(w);
    int bcast = !STAILQ_EMPTY(&w->bsent),
        sess = was_up && !renew && w->dirty == 1 && (rq[0] || w->grp->cfg.pool_mode == CFG_POOL_SESSION);
    if ((bcast || sess) && !g->freeing && /* (at exit: nothing connects again; at 7a04224 the line
                                            * below came after each clean stop's, helper round 36c) */
        !stream_leave_socket_loop(g, c, &w->remnant, on_remnant_closed, w))
        log_info(c->name, "%s may still run at the worker: connecting again%s once it has closed its end",
                 bcast ? "broadcasts sent on this connection" : "what a session sent on this connection",
                 bcast || !rq[0] ? "" : ", its reset query first,");
    int fall_back = !was_up && w->via == VIA_UNIX && has_tcp(g, w) && !w->removed;
    run_lost_loop(g, w); /* the request, its client, the broadcasts: down first, then told */
    if (g->freeing) /* (at exit: not "no worker of group g is up", a warning after every clean stop,
                     * helper round 24b; nor a reconnect) */
        return;
    if (w->removed) {
        unlink_removed(g, w);
        return;
    }
    if (renew) { /* its session ended: the next connection now */
        conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms, on_reconnect_timer);
    } else if (fall_back) { /* its Unix socket did not answer the handshake: TCP, now */
        uds_passed_over(w, why);
        w->skip_uds = 1;
        conn_timer_arm_loop(g, &w->c, WORKER_TM, g->loop.now_ms, on_reconnect_timer);
    } else if (was_up && (!flapped || busy)) {
        schedule_reconnect(g, w);
    } else { /* (a flap with nothing running is a failed attempt: its group's clients are told when none is up) */
        connect_failed(g, w);
    }
}

void worker_renew_loop(struct gw *g, struct worker *w, const char *why)
{
    w->run = (struct run){.kind = RUN_BROADCASTS}; /* no run, no client: closing fails nobody's request */
    w->renewing = 1;
    conn_close_loop(g, &w->c, why);
}

void worker_set_removed_loop(struct gw *g, struct worker *w, int on)
{
    g->loop.nremoved += (on != 0) - (w->removed != 0);
    w->removed = on != 0;
}

/* The same TCP endpoint: family, address and port (not the padding). */
static int same_tcp(const struct net_addrs *a, const struct net_addrs *b)
{
    if (!a->tcplen || !b->tcplen || a->tcp.ss_family != b->tcp.ss_family)
        return 0;
    if (a->tcp.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a->tcp, *y = (const void *)&b->tcp;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->tcp.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a->tcp, *y = (const void *)&b->tcp;
        return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr);
    }
    return 0;
}

/* Do a and b reach the same q? The same address as written, or as resolved: its TCP endpoint,
 * or the Unix socket both reached it over (a local q's, whichever name reached it: 127.0.0.1,
 * localhost, unix://; only one process listens on a socket name, while the name qgate would
 * try is the same for every local address with that port). */
static int same_q_at(const char *aa, const struct net_addrs *an, int av, const char *ba, const struct net_addrs *bn,
                     int bv)
{
    return !strcmp(aa, ba) || same_tcp(an, bn) ||
           (av == VIA_UNIX && bv == VIA_UNIX && an->udslen && an->udslen == bn->udslen &&
            !memcmp(&an->uds, &bn->uds, an->udslen));
}
int worker_same_q(const struct worker *a, const struct worker *b)
{
    return same_q_at(a->addr, &a->na, a->via, b->addr, &b->na, b->via);
}
int worker_marked(const struct q_mark *m, const struct worker *w)
{
    return same_q_at(m->addr, &m->na, m->via, w->addr, &w->na, w->via);
}
void worker_mark_of(const struct worker *w, struct q_mark *m)
{
    snprintf(m->addr, sizeof m->addr, "%s", w->addr);
    m->na = w->na;
    m->via = w->via;
}
void worker_marks_drop_loop(struct gw *g, const struct worker *w)
{
    for (int k = 0; k < g->ndis_marks;)
        if (worker_marked(&g->dis_marks[k], w))
            g->dis_marks[k] = g->dis_marks[--g->ndis_marks];
        else
            k++;
}

/* w, connected, reaches a q disabled on another of its connections (the same address spelled
 * another way, in this group or another, connected after the disable or added by a reload that
 * kept the q disabled): disabled too, as .qgate.disable[] takes every worker of one q (helper
 * round 40c: at 1bf1093 127.0.0.1:P disabled left localhost:P in rotation). */
static void inherit_disabled(struct gw *g, struct worker *w)
{
    if (w->disabled)
        return;
    const struct worker *from = NULL;
    for (int i = 0; i < g->ngroups && !from; i++) {
        const struct worker *x;
        TAILQ_FOREACH(x, &g->groups[i].workers, glink)
            if (x != w && x->disabled && !x->removed && worker_same_q(x, w)) {
                from = x;
                break;
            }
    }
    int marked = 0;
    for (int k = 0; k < g->ndis_marks && !from && !marked; k++)
        marked = worker_marked(&g->dis_marks[k], w);
    if (!from && !marked)
        return;
    log_info(w->c.name, "group %s: disabled, as the other connections to this q are (%s%s)", w->grp->cfg.name,
             from ? from->addr : "disabled when the reload came that added this one",
             from ? (from->grp == w->grp ? ", this group" : ", another group") : "");
    worker_disable_loop(g, w, 1);
}

int worker_q_shared_loop(const struct gw *g, const struct worker *w)
{
    if (!g->loop.nremoved)
        return 0;
    for (int i = 0; i < g->ngroups; i++) {
        const struct worker *x;
        TAILQ_FOREACH(x, &g->groups[i].workers, glink)
            if (x != w && x->removed && worker_same_q(x, w))
                return 1;
    }
    return 0;
}

void worker_remove_loop(struct gw *g, struct worker *w)
{
    worker_set_removed_loop(g, w, 1);
    if (w->st == WS_BUSY || w->st == WS_PINNED || (w->st == WS_IDLE && w->c.owes)) {
        const char *after = w->sess ? "its session" : w->st == WS_BUSY ? "the current request" : "";
        log_info(w->c.name, "removed from the configuration: closing after %s%s%s", after,
                 *after && w->c.owes ? " and " : "",
                 w->c.owes ? "what it was given before (a .qgate.all's part, broadcasts)" : "");
        g->loop.dispatch_pending = 1; /* idle, what it owes runs (dispatch), and then it goes */
        return;
    }
    if (w->st == WS_RESOLVING) /* the resolution's completion finishes it */
        return;
    if (w->c.fd >= 0) {
        conn_close_loop(g, &w->c, "removed from the configuration");
        return;
    }
    conn_timer_cancel_loop(g, &w->c, WORKER_TM); /* down: no socket, nothing running */
    unlink_removed(g, w);
}

int worker_busy_count_loop(const struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++) {
        const struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            n += w->st == WS_BUSY;
    }
    return n;
}

/* Waiting for a client's output is not a slow query: client_stall_timeout watches that. */
static void on_pause(struct gw *g, struct conn *c) { conn_timer_cancel_loop(g, c, WORKER_TM); }
static void on_resume(struct gw *g, struct conn *c) { run_arm_timer_loop(g, worker_of(c)); }

const struct connops worker_connops = {
    .ev = {.on_event = on_event},
    .on_bytes = on_bytes,
    .on_header = run_header_loop,
    .on_message = run_message_loop,
    .on_end = run_message_end_loop,
    .on_bad = run_bad_header_loop,
    .on_eof = on_eof,
    .on_pause = on_pause,
    .on_resume = on_resume,
    .on_flushed = run_flushed_loop,
    .read_size = 65536,
    .raw_max = 1,
    .own_max = 1,
    .on_close = on_close,
    .free = worker_free_loop,
    .on_wake = stream_woken_loop,
};

static int back_owes(const struct conn *x, int what)
{
    const struct worker *w = (const struct worker *)x;
    if (what == OWES_FIRST) /* a disabled or removed worker takes no request: it runs what it owes now */
        return !STAILQ_EMPTY(&w->fq) || (!worker_takes_work(w) && owes(w));
    return owes(w); /* broadcasts, fan-out parts */
}

/* Does a worker of grp run anything, or owe what it was given (which dispatch starts)? */
static int back_busy(const struct group *grp)
{
    const struct worker *w;
    TAILQ_FOREACH(w, &grp->workers, glink)
        if (w->st == WS_BUSY || owes(w))
            return 1;
    return 0;
}

const struct backend_ops worker_backend = {
    .busy = back_busy,
    .start = run_start_loop,
    .session_start = session_start_loop,
    .release = session_release_loop,
    .owes = back_owes,
    .client_gone = run_client_gone_loop,
    .answer = run_answer_loop,
    .nests = run_nests_loop,
    .nested_owed = run_nested_owed_loop,
    .broadcast = broadcast_queue_loop,
    .fanout = fanout_start_loop,
    .fanout_cancel = fanout_cancel_loop,
};

/* control.c: the operator's commands from q, as PgBouncer's console has them: .qgate.pools[]
 * (a row per group), and for admins .qgate.pause[`group] and .qgate.resume[`group] (every
 * group without an argument), .qgate.disable[`host:port] and .qgate.enable[`host:port],
 * .qgate.kill[id] (.qgate.disconnect[id] is the same command) and .qgate.shutdown[].
 *
 * A paused group (struct group paused) lets its workers finish the runs they have and run
 * what they were given before (broadcasts, fan-out parts: dispatch.c), and starts nothing new:
 * requests wait in its queue, or, if they never enter it (a session's, a .qgate.all), on its
 * held list (request.c). The pause is answered 1b once no worker of its groups runs anything
 * (dispatch.c checks after each dispatch phase while one waits), so that a script may restart the
 * workers when it returns. A disabled worker (worker.c) finishes what it runs and owes, then is
 * DISABLED: connected, given nothing, until enabled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "client.h"
#include "config.h"
#include "dispatch.h"
#include "jobs.h"
#include "log.h"
#include "tail.h"
#include "worker.h"

/* ---- pause and resume ------------------------------------------------------------------------ */

/* The held requests of a resumed group go on, oldest first. */
static void release_held(struct gw *g, struct group *grp)
{
    struct conn *x;
    while ((x = connq_first(&grp->held))) {
        struct client *c = client_of(x);
        struct req *h = client_head(c);
        if (!h || h->state != RS_HELD) { /* not so (a bug): off the list, not for ever in this loop */
            conn_queue_out_loop(x);
            continue;
        }
        request_unhold_loop(g, c);
    }
}

void control_pause_loop(struct gw *g, struct group *grp, int on, const char *by)
{
    if (!on == !grp->paused)
        return;
    grp->paused = (uint8_t)(on != 0);
    g->loop.work_pending = 1;
    if (on) {
        log_info(NULL, "group %s paused by %s: its workers finish what they run, new requests wait", grp->cfg.name,
                 by);
        return;
    }
    log_info(NULL, "group %s resumed by %s: %d requests queued, %d held", grp->cfg.name, by, grp->queue.n,
             grp->held.n);
    dispatch_resumed_loop(g, grp); /* a pause still waiting for it is told it did not complete */
    release_held(g, grp);
    if (grp->unavailable && !grp->nup) /* what the pause held from failing fails now */
        dispatch_fail_group_loop(g, grp);
}

/* .qgate.pause[`g] and .qgate.resume[`g] (every group without an argument). */
int control_pause_command_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    int on = j->result == GWCMD_PAUSE;
    const char *cmd = on ? ".qgate.pause" : ".qgate.resume";
    struct group *grp = NULL;
    if (job_args_c(j)->cmd.arg_kind == GWARG_NUM) {
        request_error_loop(g, cl, r, "qgate: %s takes a group's name (%s[`group]), or nothing for every group", cmd, cmd);
        return 1;
    }
    if (job_args_c(j)->cmd.arg_kind == GWARG_NAME && !(grp = dispatch_group_find_loop(g, (const char *)j->out))) {
        request_error_loop(g, cl, r, "qgate: no group %s", (const char *)j->out);
        return 1;
    }
    char by[96];
    snprintf(by, sizeof by, "admin %s", cl->user);
    for (int i = 0; i < g->ngroups; i++)
        if (!grp || grp == &g->groups[i])
            control_pause_loop(g, &g->groups[i], on, by);
    /* (sent from inside a callback, it cannot wait: the request that called back runs still) */
    int done = on && !r->nested ? dispatch_pause_wait_loop(g, &cl->c, r->seq, grp ? grp->index : -1) : 1;
    if (done > 0)
        return 0; /* 1b now */
    if (done < 0) {
        conn_close_loop(g, &cl->c, "out of memory");
        return 1;
    }
    log_info(cl->c.name, "%s: answered when no worker of %s runs anything", j->text, grp ? grp->cfg.name : "any group");
    return 1;
}

/* ---- disable and enable ---------------------------------------------------------------------- */

/* Does w reach the q at addr (as a worker of some group writes it): that worker, or the same q
 * spelled another way (127.0.0.1:P and localhost:P, say)? */
static int reaches(const struct gw *g, const char *addr, const struct worker *w)
{
    if (!strcmp(w->addr, addr))
        return 1;
    for (int i = 0; i < g->ngroups; i++) {
        const struct worker *x;
        TAILQ_FOREACH(x, &g->groups[i].workers, glink)
            if (!x->removed && !strcmp(x->addr, addr) && worker_same_q(x, w))
                return 1;
    }
    return 0;
}

int control_disable_loop(struct gw *g, const char *addr, int on, const char *by)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink) {
            if (w->removed || !reaches(g, addr, w))
                continue;
            n++;
            if (!on)
                worker_marks_drop_loop(g, w);
            if (!w->disabled == !on)
                continue;
            log_info(w->c.name, "%s by %s (group %s, %s%s%s)", on ? "disabled" : "enabled", by, g->groups[i].cfg.name,
                     on && w->st != WS_IDLE ? "out of rotation once what it runs is done" : worker_state_name(w->st),
                     strcmp(w->addr, addr) ? "; the same q as " : "", strcmp(w->addr, addr) ? addr : "");
            worker_disable_loop(g, w, on);
            g->loop.work_pending = 1;
        }
    }
    return n;
}

/* .qgate.disable[`host:port] and .qgate.enable[`host:port]: every worker of that address. */
int control_disable_command_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    int on = j->result == GWCMD_DISABLE;
    const char *cmd = on ? ".qgate.disable" : ".qgate.enable";
    if (job_args_c(j)->cmd.arg_kind != GWARG_NAME) {
        request_error_loop(g, cl, r, "qgate: %s takes a worker's address as .qgate.stats[] shows it (%s[`host:port])",
                          cmd, cmd);
        return 1;
    }
    const char *addr = (const char *)j->out;
    addr += addr[0] == ':'; /* `:host:port, as q writes a handle */
    char by[96];
    snprintf(by, sizeof by, "admin %s", cl->user);
    if (!control_disable_loop(g, addr, on, by)) {
        request_error_loop(g, cl, r, "qgate: no worker %s", addr);
        return 1;
    }
    return 0;
}

/* ---- kill, shutdown ---------------------------------------------------------------------------- */

/* .qgate.kill[id] (or .qgate.disconnect[id]): the id .qgate.clients[] shows (a serial number,
 * never reused). Its worker, if it runs its request, drains the reply and is reused. */
int control_kill_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    if (job_args_c(j)->cmd.arg_kind != GWARG_NUM) {
        request_error_loop(g, cl, r, "qgate: %.*s takes a client's id as .qgate.clients[] shows it",
                          (int)strcspn(j->text, "["), j->text);
        return 1;
    }
    int64_t id = job_args_c(j)->cmd.num;
    struct client *x = id > 0 ? client_by_serial_loop(g, (uint64_t)id) : NULL;
    struct conn *t = !x && id > 0 ? tail_by_serial_loop(g, (uint64_t)id) : NULL;
    if (t) { /* cut, its last output still written (tail.h): that stops now */
        log_info(cl->c.name, "disconnecting client %lld (%s, %zu bytes of its last output unwritten) as admin %s asked",
                 (long long)id, t->name, conn_pending(t), cl->user);
        char why[128];
        snprintf(why, sizeof why, "disconnected by admin %s", cl->user);
        conn_close_loop(g, t, why);
        return 0;
    }
    if (!x) {
        if (id == GWARG_NULL)
            request_error_loop(g, cl, r, "qgate: no client 0N");
        else
            request_error_loop(g, cl, r, "qgate: no client %lld", (long long)id);
        return 1;
    }
    log_info(cl->c.name, "disconnecting client %lld (%s) as admin %s asked", (long long)id, x->c.name, cl->user);
    char why[128];
    snprintf(why, sizeof why, "disconnected by admin %s", cl->user);
    conn_close_loop(g, &x->c, why);
    return x == cl; /* it closed itself: nobody to answer */
}

int control_shutdown_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j)
{
    (void)r;
    (void)j;
    /* as SIGTERM: its 1b is among the replies the drain waits for */
    log_info(cl->c.name, ".qgate.shutdown[] by admin %s: draining (up to %lld ms)", cl->user,
             (long long)g->cfg.drain_timeout);
    control_drain_loop(g);
    return 0;
}

/* ---- .qgate.pools[] -------------------------------------------------------------------------- */

/* Waiting clients of a queue or held list: how many, and the longest wait (ms) into *maxwait. */
static int64_t waiting(const struct gw *g, const struct connq *q, int64_t *maxwait)
{
    for (struct conn *x = connq_first(q); x; x = connq_next(x)) {
        const struct req *h = client_head(client_of(x));
        if (h && g->loop.now_ms - h->t_arrive > *maxwait)
            *maxwait = g->loop.now_ms - h->t_arrive;
    }
    return q->n;
}

void *control_pools_snapshot_loop(struct gw *g)
{
    struct pools_snapshot *s = calloc(1, sizeof *s + (size_t)g->ngroups * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < g->ngroups; i++) {
        const struct group *grp = &g->groups[i];
        struct pools_row *r = &s->rows[s->n++];
        snprintf(r->group, sizeof r->group, "%s", grp->cfg.name);
        r->paused = grp->paused;
        r->waiting = waiting(g, &grp->queue, &r->maxwait_ms) + waiting(g, &grp->held, &r->maxwait_ms);
        r->served = (int64_t)grp->served; /* the group's: a worker removed takes nothing away */
        r->errors = (int64_t)grp->errors;
        const struct worker *w;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            if (!worker_is_lead(w))
                continue;
            int busy = 0; /* a worker is active while any of its connections runs something */
            for (const struct worker *x = w; x; x = worker_sibling(x))
                busy |= x->st == WS_BUSY;
            r->active += busy || w->st == WS_PINNED;
            r->idle += w->st == WS_IDLE && !busy;
            r->disabled += w->st == WS_DISABLED && !busy;
            r->down += !worker_is_connected(w);
        }
    }
    return s;
}

/* ---- draining (SIGTERM, .qgate.shutdown[]) ------------------------------------------------------- */

static int work_in_flight(struct gw *g);

static void on_drain_timeout(struct gw *g, struct timer *t)
{
    (void)t;
    if (work_in_flight(g))
        log_warn(NULL, "drain_timeout reached with work in flight: exiting");
    else if (!g->nclients) /* (only cut clients, all their last output written, lingering) */
        log_warn(NULL, "drain_timeout reached with %d cut clients yet to close (their last output written): exiting",
                 g->ntails);
    else /* (only publishes on their way to subscribers that read slowly or not at all) */
        log_warn(NULL, "drain_timeout reached with publishes still on their way to %d clients: exiting, "
                       "their streams cut", g->nclients);
    client_exit_answers_loop(g, "drain_timeout reached");
    g->loop.stop = 1;
}

void control_drain_loop(struct gw *g)
{
    if (g->draining)
        return;
    g->draining = 1;
    config_read_stop(); /* (a reload waiting on a pipe's writer does not hold the exit) */
    conn_listener_close_loop(g, &g->listen_tcp);
    conn_listener_close_loop(g, &g->listen_uds);
    loop_timer_cancel_loop(g, &g->uds_retry_tm); /* another qgate of the port may take it now */
    client_pause_all_loop(g);
    loop_timer_arm_loop(g, &g->drain_tm, g->loop.now_ms + g->cfg.drain_timeout, on_drain_timeout);
    g->loop.phases.finished = control_drained_loop; /* asked after each iteration from now on */
    g->loop.work_pending = 1;
}

/* Is anything received still to be answered: a worker busy, a client with requests held,
 * whole messages read and not yet framed (left by a budget) or reply bytes unsent? (SIGTERM
 * waits for this to be false. A message waiting for room under pending_max is not read: the
 * drain reads nothing new, so it would wait for ever, as would one only partly read.) */
static int work_in_flight(struct gw *g)
{
    if (worker_busy_count_loop(g))
        return 1;
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *c = g->tab[id];
        if (c && c->kind == CONN_CLIENT && /* (what a worker published after its last reply: not waited for) */
            (client_head(client_of(c)) || c->in_backlog || conn_owed_unsent(c)))
            return 1;
        if (c && c->kind == CONN_TAIL && conn_owed_unsent(c)) /* a closed client's last replies (tail.h) */
            return 1;
    }
    return 0;
}


int control_drained_loop(struct gw *g)
{
    if (!g->draining)
        return 0;
    if (work_in_flight(g)) {
        client_drain_close_loop(g, 0);
        return 0;
    }
    if (!g->drain_closing) { /* everything owed is with the kernel: the clients are shut, not reset */
        g->drain_closing = 1;
        log_info(NULL, "drained: closing %d clients%s", g->nclients,
                 g->ntails ? " (and waiting for the cut ones' last output to be read)" : "");
        client_drain_close_loop(g, 1);
    }
    if (g->nclients || g->ntails) /* (a tail is closed once its peer has read all and closed, or its
                                   * linger ends: closed before, the unread input it holds would
                                   * reset the connection, the kernel's buffers lost with it (helper
                                   * round 38b: at 3f24ada a whole reply cut so)) */
        return 0;
    if (!g->loop.stop) /* (drain_timeout said why it exits) */
        log_info(NULL, "drained: exiting");
    return 1;
}

/* sim.c: the deterministic simulation of qgate's loop (see sim.h): the world and the driver.
 * One run: a random configuration, then `steps` events chosen by the PRNG among what fake
 * clients, fake workers, the pools, the clock and the operator can do, a gateway iteration
 * being one of them; then a quiescence in which everyone finishes; then everyone leaves.
 * Invariants are checked as bytes arrive (each side parses what it gets: fclient.c,
 * fworker.c), after every gateway iteration (the gateway's lists and counts: check.c), at
 * quiescence (nothing waits forever, nothing sent before a close was lost) and at the end
 * (memory and fds back to their baseline). The side channels are in sinks.c, the operator and
 * the configuration in operator.c, what they all share in base.c and sim_int.h. */
#include "sim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "access.h"
#include "client.h"
#include "conn.h"
#include "gateway.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "tail.h"
#include "worker.h"
#include "sim_int.h"

/* Sanitizer hooks, present when built with ASan (weak: absent otherwise). */
size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

struct sim *S; /* for the hooks and the death callback */

/* ---- the clock ---------------------------------------------------------------------------- */

/* The gateway's clock is the simulation's (advance_clock moves it). */
static int64_t hook_now(void *ctx)
{
    (void)ctx;
    return S->now_us;
}

/* ---- the driver --------------------------------------------------------------------------- */

static void gw_step(void)
{
    S->in_gw = 1;
    loop_step_loop(&S->g, 0);
    S->in_gw = 0;
    check_gateway();
}

static int run_pool(struct pool *p, int all)
{
    int ran = 0;
    size_t n;
    while ((n = pool_queued(p)) > 0) {
        pool_run_one(p, (size_t)rnd((int)n));
        ran++;
        S->moved++;
        if (!all)
            break;
    }
    return ran;
}

static void advance_clock(int64_t ms)
{
    S->now_us += ms * 1000;
    tr("clock +%lld ms", (long long)ms);
}

static void clock_event(void)
{
    int64_t next = loop_timers_next(&S->g.loop.timers);
    if (next >= 0 && chance(40)) {
        int64_t d = next - S->now_us / 1000;
        advance_clock(d > 0 ? d : 0);
    } else {
        advance_clock(1 + rnd(chance(80) ? 20 : 400));
    }
}

/* A client's event (k of one_event's 100: 0..39): one connects, queues requests, writes, reads,
 * closes, stops or resumes reading. */
static void client_event(int k)
{
    struct fclient *c;
    if (k < 4) {
        if (enabled(SIM_EV_CONNECT) && nopen_clients() < MAXC)
            client_connect();
    } else if (k < 14) {
        if (enabled(SIM_EV_SEND) && (c = pick_client(1)))
            client_send(c, enabled(SIM_EV_PIPELINE) && chance(15) ? 2 + rnd(30) : 1);
    } else if (k < 26) {
        if (enabled(SIM_EV_WRITE) && (c = pick_client(0)))
            client_write(c, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(70000)));
    } else if (k < 38) {
        if (enabled(SIM_EV_READ) && (c = pick_client(0)) && !c->stalled)
            client_read(c, chance(20) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 39) {
        if (enabled(SIM_EV_CLOSE) && (c = pick_client(0)) && chance(50)) {
            if (chance(30) && c->out_off == c->out.len && c->st == FC_READY && !c->half)
                client_shut(c); /* a half-close */
            else
                client_close(c);
        }
    } else {
        if (enabled(SIM_EV_STALL) && (c = pick_client(1))) {
            c->stalled = !c->stalled;
            tr("C%d %s reading", c->cid, c->stalled ? "stops" : "resumes");
        }
    }
}

/* Worker w's event (k: 40..65): it reads, runs what it got, writes, dies (or comes back up),
 * publishes on its timer. */
static void worker_event(int k, struct fworker *w)
{
    if (k < 48) {
        if (enabled(SIM_EV_WREAD) && w)
            worker_read(w, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 56) {
        if (enabled(SIM_EV_WPROCESS) && w)
            worker_process(w, 1 + rnd(4));
    } else if (k < 64) {
        if (enabled(SIM_EV_WWRITE) && w)
            worker_write(w, chance(30) ? 1 + (size_t)rnd(16) : (size_t)(1 + rnd(100000)));
    } else if (k < 65) {
        if (enabled(SIM_EV_WDIE) && w && chance(30)) {
            if (fw_live(w))
                worker_die(w);
            else if (w->refuse) {
                w->refuse = 0;
                tr("W%d is back up", w->wid);
            }
        }
    } else {
        if (enabled(SIM_EV_WPUSH) && w)
            worker_timer_push(w);
    }
}

/* The rest of the world's events (k: 66..99): a pool job runs, time passes, the operator reloads,
 * pauses or disables (w), a scraper, the log's reader or the access log's file does something,
 * or the gateway runs an iteration. */
static void world_event(int k, struct fworker *w)
{
    if (k < 74) {
        if (enabled(SIM_EV_POOL))
            run_pool(chance(50) ? S->g.readers : S->g.writers, chance(20));
    } else if (k < 79) {
        if (enabled(SIM_EV_CLOCK))
            clock_event();
    } else if (k < 80) {
        if (enabled(SIM_EV_RELOAD) && chance(reload_waiting_worker() < 0 ? 20 : 60))
            reload();
    } else if (k < 81) {
        if (enabled(SIM_EV_PAUSE) && chance(40))
            operator_pause(rnd(S->ngroups));
    } else if (k < 82) {
        if (enabled(SIM_EV_DISABLE) && w && chance(40))
            operator_disable(w);
    } else if (k < 84) {
        if (enabled(SIM_EV_SCRAPE))
            scrape_event();
    } else if (k < 86) {
        if (enabled(SIM_EV_LOGSINK))
            log_event();
    } else if (k < 88) {
        if (enabled(SIM_EV_ALOGSINK))
            alog_event();
    } else {
        if (enabled(SIM_EV_STEP))
            gw_step();
    }
}

/* ---- peers acting in the middle of an iteration (MIDWRITE) --------------------------------- */

/* What a peer may do while the gateway's iteration is under way, as one on another core would:
 * a client reads, writes, queues requests or closes; a worker reads, runs, writes, publishes
 * or dies; a pool job completes. Nothing that calls into the gateway (a connect, the operator,
 * a scrape, an iteration). */
static void mid_event(void)
{
    struct fworker *w = S->nw ? &S->w[rnd(S->nw)] : NULL;
    struct fclient *c;
    int k = rnd(10);
    if (k == 0 && (c = pick_client(0)) && !c->stalled)
        client_read(c, 1 + (size_t)rnd(100000));
    else if (k == 1 && (c = pick_client(0)))
        client_write(c, 1 + (size_t)rnd(70000));
    else if (k == 2 && (c = pick_client(1)))
        client_send(c, 1);
    else if (k == 3 && enabled(SIM_EV_CLOSE) && (c = pick_client(0)) && chance(30))
        client_close(c);
    else if (k == 4 && w)
        worker_read(w, 1 + (size_t)rnd(100000));
    else if (k == 5 && w)
        worker_process(w, 1 + rnd(4));
    else if (k == 6 && w)
        worker_write(w, 1 + (size_t)rnd(100000));
    else if (k == 7 && w && enabled(SIM_EV_WDIE) && fw_live(w) && chance(20))
        worker_die(w);
    else if (k == 8 && w && enabled(SIM_EV_WPUSH))
        worker_timer_push(w);
    else if (k == 9 && enabled(SIM_EV_POOL))
        run_pool(chance(50) ? S->g.readers : S->g.writers, 0);
}

/* The gateway's writes to its sockets (stream.c's plain writev: nothing else in this program
 * calls writev) pass through here: after one, now and then a peer acts at once (mid_event), so
 * that what the gateway does next in the same iteration meets a peer that has read, answered,
 * closed or died meanwhile. The choices come from a second PRNG: the main one's sequence is
 * the same with MIDWRITE disabled. */
ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t n = syscall(SYS_writev, fd, iov, iovcnt);
    int err = errno;
    if (S && S->in_gw && S->mid_ok && !S->o->data && enabled(SIM_EV_MIDWRITE)) {
        uint64_t main_rng = S->rng;
        S->rng = S->rng_mid;
        if (chance(30)) {
            S->mid_ok = 0; /* one at a time */
            S->in_gw = 0;
            tr("(in the middle of an iteration, after a write to fd %d)", fd);
            mid_event();
            S->mid_events++;
            S->in_gw = 1;
            S->mid_ok = 1;
        }
        S->rng_mid = S->rng;
        S->rng = main_rng;
    }
    errno = err;
    return n;
}

/* One event, picked by the PRNG: what kind (k), and the worker it would be (whatever the kind). */
static void one_event(void)
{
    int k = rnd(100);
    struct fworker *w = S->nw ? &S->w[rnd(S->nw)] : NULL;
    if (k < 40)
        client_event(k);
    else if (k < 66)
        worker_event(k, w);
    else
        world_event(k, w);
}

/* Work the gateway itself still holds: requests of clients (gone ones too), workers busy,
 * bytes to send. */
static char busy_why[256];

static const char *gateway_busy(void)
{
    struct gw *g = &S->g;
    if (worker_busy_count_loop(g))
        return "a worker is busy";
    if (!TAILQ_EMPTY(&g->dirty) || !TAILQ_EMPTY(&g->wdirty))
        return "a connection has output to flush";
    if (!TAILQ_EMPTY(&g->backlog))
        return "a client has messages in its backlog";
    if (!TAILQ_EMPTY(&g->room_waiters))
        return "a client waits for room under pending_max";
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_TAIL && conn_pending(x)) { /* a closed client's last output */
            uint32_t cid, cgen;
            tail_origin(x, &cid, &cgen);
            struct fclient *f = fclient_of(cid, cgen);
            if (f && f->stalled && f->st != FC_DONE)
                continue;
            snprintf(busy_why, sizeof busy_why, "%.200s has output to write", x->name);
            return busy_why;
        }
        if (!x || x->kind != CONN_CLIENT)
            continue;
        struct client *c = (struct client *)x;
        if ((x->events & EPOLLIN) && x->fd >= 0 && unread(x->fd)) { /* (its peer may have closed) */
            snprintf(busy_why, sizeof busy_why, "%.200s has bytes to read", x->name);
            return busy_why;
        }
        struct fclient *f = fclient_of(x->id, x->gen);
        if (f && f->stalled && f->st != FC_DONE)
            continue; /* its replies wait for it to read (once it has closed, nothing waits for it) */
        if (client_head(c) || (c->st == CS_GONE)) {
            snprintf(busy_why, sizeof busy_why, "%.200s holds requests", x->name);
            return busy_why;
        }
    }
    return NULL;
}

/* Something left to do: a request unanswered, bytes unsent, a job unrun, a worker to bring
 * back. NULL when the world is quiet, else what is left. */
static const char *busy(int include_stalled)
{
    const char *why = gateway_busy();
    if (why)
        return why;
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->st != FC_HS && c->st != FC_READY)
            continue;
        if (c->stalled && !include_stalled)
            continue;
        if (c->out_off < c->out.len || c->pend_off < c->pend.n || c->st == FC_HS || unread(c->fd)) {
            snprintf(busy_why, sizeof busy_why, "C%d has bytes to send or read, or replies to wait for", c->cid);
            return busy_why;
        }
    }
    for (int k = 0; k < S->nw; k++) {
        struct fworker *w = &S->w[k];
        int work = w->deferred.n > 0;
        for (int i = 0; i < FW_CONNS; i++) {
            const struct fwconn *x = &w->k[i];
            work |= x->fd >= 0 && (x->in.len || x->out_off < x->out.len || x->st == FW_HS || unread(x->fd));
        }
        if (work || (!fw_live(w) && w->in_config && !w->refuse)) {
            snprintf(busy_why, sizeof busy_why, "W%d has work, or is to be connected", k);
            return busy_why;
        }
    }
    return pool_queued(S->g.readers) || pool_queued(S->g.writers) ? "pool jobs are queued" : NULL;
}

/* A worker blocked in a callback to a client that stopped reading: as with q itself, it
 * waits for that client (or query_timeout), so others may wait too. */
static int callback_to_stalled(void)
{
    for (int k = 0; k < S->nw; k++) {
        struct fworker *w = &S->w[k];
        if (w->waiting_cb && w->k[w->cb_conn].fd >= 0 && w->cb_cid < S->by_cid.n) {
            struct fclient *c = S->by_cid.v[w->cb_cid];
            if (c && c->stalled)
                return 1;
        }
    }
    return 0;
}

/* pool = session: clients wait for a worker while every worker is given to a session whose
 * client has nothing more to ask. Such a user goes home (closes), as users do: 1 if one did. */
static int end_idle_session(void)
{
    struct gw *g = &S->g;
    int waiting = 0;
    for (int i = 0; i < g->ngroups; i++)
        waiting |= connq_first(&g->groups[i].queue) && !connq_first(&g->groups[i].idle);
    for (int i = 0; waiting && i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        struct conn *x = c->st == FC_READY ? conn_lookup_loop(g, c->gid, c->ggen) : NULL;
        struct client *gc = x && x->kind == CONN_CLIENT ? (struct client *)x : NULL;
        if (!gc || !gc->sess || gc->sess->st != WS_PINNED || client_head(gc) || conn_pending(x))
            continue;
        if (c->stalled) { /* its replies wait in its socket: it reads them first */
            tr("C%d, idle in its session, reads again", c->cid);
            c->stalled = 0;
            return 1;
        }
        if (c->pend_off == c->pend.n && c->out_off == c->out.len) {
            tr("C%d, idle in its session, goes home", c->cid);
            client_close(c);
            return 1;
        }
    }
    return 0;
}

/* A round of quiescence: every client writes and reads (those that stopped reading too, with
 * include_stalled), every worker is up and does all it can at once, the scrapers read, every
 * pool job runs, the gateway runs an iteration. */
static void everyone_moves(int include_stalled)
{
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->st == FC_HS || c->st == FC_READY) {
            client_write(c, 1 << 20);
            if (!c->stalled || include_stalled) {
                c->stalled = 0;
                client_read(c, 1 << 20);
            }
        }
    }
    for (int k = 0; k < S->nw; k++) {
        struct fworker *w = &S->w[k];
        w->refuse = 0;
        w->busy_until = 0;
        for (int i = 0; i < FW_CONNS; i++)
            w->k[i].hold_until = 0;
        fw_release_deferred(w, 1);
        worker_read(w, 1 << 20);
        worker_process(w, 1 << 20);
        worker_write(w, 1 << 20);
    }
    for (int i = 0; i < 4; i++) { /* scrapers take what comes */
        char buf[65536];
        ssize_t n;
        while (S->scraper[i] >= 0 && (n = read(S->scraper[i], buf, sizeof buf)) > 0)
            S->moved += (size_t)n;
    }
    run_pool(S->g.readers, 1);
    run_pool(S->g.writers, 1);
    gw_step();
}

/* Everyone does everything they can until nothing is left; time passes when only timers can
 * make progress. A client still waiting after ten minutes of simulated time waits forever.
 * include_stalled: clients that stopped reading read again. */
static void quiesce(int include_stalled, const char *phase)
{
    S->quiescing = 1;
    int64_t t_still = S->now_us / 1000; /* nothing has moved since */
    for (int round = 0; round < 2000000; round++) {
        uint64_t moved = S->moved;
        everyone_moves(include_stalled);
        if (!busy(include_stalled))
            return;
        if (S->moved != moved) {
            t_still = S->now_us / 1000;
            continue;
        }
        /* the gateway has work now, or events ready: no time passes (a peek at a level-triggered
         * epoll set takes nothing from it) */
        struct epoll_event ev;
        if ((loop_wait_ms_loop(&S->g) == 0 || epoll_wait(S->g.loop.epfd, &ev, 1, 0) > 0) && round % 64)
            continue;
        if (S->ever_session && end_idle_session())
            continue;
        if (operator_release_all()) /* a pause or a disable (an admin's, perhaps) holds what is left */
            continue;
        /* nothing moved: only time can help (timers, back-offs, reconnects) */
        int64_t next = loop_timers_next(&S->g.loop.timers);
        int64_t d = next >= 0 ? next - S->now_us / 1000 : 1000;
        advance_clock(QG_MAX(1, QG_MIN(d, 60000)));
        if (S->now_us / 1000 - t_still > 600000)
            break; /* ten simulated minutes and nothing moved: it waits forever */
    }
    if (!include_stalled && callback_to_stalled())
        return;
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if ((c->st == FC_READY || c->st == FC_HS) && (!c->stalled || include_stalled) &&
            (c->pend_off < c->pend.n || c->st == FC_HS)) {
            const char *op = c->pend_off < c->pend.n ? op_names[c->sent.v[c->pend.v[c->pend_off]].op] : "handshake";
            fail("%s: C%d waits forever for its %s", phase, c->cid, op);
        }
    }
    fail("%s: the world never went quiet: %s", phase, busy(include_stalled));
}

/* Everything client c sent before it closed ran (order is checked as it runs). final: at
 * the very end, when broadcasts had every chance to arrive. Returns 0 if some message may
 * still be on its way (not final). */
static int check_client_lost(struct fclient *c, int final)
{
    if (c->why[0] && strcmp(c->why, "closed after a bad message") && strcmp(c->why, "client closed the connection") &&
        strcmp(c->why, "peer closed"))
        return 1; /* closed by the gateway (with a reason it may have: checked): the rest was discarded */
    size_t written = c->out_base + c->out_off;
    for (int i = 0; i < c->sent.n; i++) {
        struct sent *s = &c->sent.v[i];
        if (s->type != KIPC_ASYNC || s->end > written || s->seen || s->lost || (c->bad && s->seq > c->bad_seq) ||
            (c->unread_from >= 0 && s->seq >= c->unread_from))
            continue;
        if (!final && c->group == S->bc_group)
            return 0; /* a broadcast is let go of when sent, before it runs */
        fail("C%d's async message %d (%s) was received by the gateway and never ran", c->cid, s->seq,
             op_names[s->op]);
    }
    return 1;
}

static void check_nothing_lost(void)
{
    for (int cid = 0; cid < S->by_cid.n; cid++)
        if (S->by_cid.v[cid])
            check_client_lost(S->by_cid.v[cid], 1);
}

static size_t gw_heap(void)
{
    return __sanitizer_get_current_allocated_bytes ? __sanitizer_get_current_allocated_bytes() - sim_bytes : 0;
}

/* Heap the gateway may keep for good: tables that grew, workers, users. */
static size_t gw_kept(void)
{
    struct gw *g = &S->g;
    size_t n = (size_t)g->tab_cap * (sizeof(struct conn *) + 2 * sizeof(uint32_t));
    n += (size_t)g->loop.timers.cap * sizeof(struct timer *);
    n += g->names_bytes; /* worker names, kept for the access log's records */
    n += access_bytes_loop(g); /* the access log's record buffers */
    n += (size_t)g->dis_marks_cap * sizeof(struct q_mark); /* the q's disabled when the last reload came */
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink) {
            n += sizeof *w;
            n += w->reset_q ? strlen(w->reset_q) + 1 : 0; /* a reset query still to run (a paused group's,
                                                            * before a session is given the worker) */
        }
    }
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link)
        n += sizeof *u;
    return n;
}

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int workers_connected(void)
{
    int n = 0;
    for (int k = 0; k < S->nw; k++)
        n += fw_live(&S->w[k]);
    return n;
}

/* The gateway's worker connections holding a descriptor whose other end no fake worker holds
 * (one being connected to a Unix socket that closed it at once: one fd, not two). */
static int gw_unpaired(void)
{
    int n = 0;
    for (int i = 0; i < S->g.ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &S->g.groups[i].workers, glink) {
            if (w->c.fd < 0)
                continue;
            const struct fworker *fw = worker_of_addr(w->addr);
            int paired = 0;
            for (int j = 0; fw && j < FW_CONNS; j++)
                paired |= fw->k[j].fd >= 0 && fw->k[j].gw_fd == w->c.fd;
            n += !paired;
        }
    }
    return n;
}

static void free_world(void)
{
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->fd >= 0 && c->st != FC_FREE)
            close(c->fd);
        sb_free(&c->out);
        sb_free(&c->in);
        VEC_FREE(c->sent);
        VEC_FREE(c->pend);
    }
    for (int k = 0; k < S->nw; k++) {
        fw_reset(&S->w[k]);
        for (int i = 0; i < FW_CONNS; i++) {
            sb_free(&S->w[k].k[i].in);
            sb_free(&S->w[k].k[i].out);
        }
        VEC_FREE(S->w[k].deferred);
        VEC_FREE(S->w[k].seen_async_last);
    }
    VEC_FREE(S->tpubs);
    VEC_FREE(S->last_seq);
    VEC_FREE(S->cid_group);
    VEC_FREE(S->sess_wid);
    VEC_FREE(S->sess_wera);
    VEC_FREE(S->fan_given_up);
    VEC_FREE(S->gone_abandoned);
    VEC_FREE(S->by_cid);
}

/* A slot whose client is done takes a new one once the gateway has let go of the old one
 * (whatever it sent has run by then, and is checked first). */
static void recycle_clients(void)
{
    for (int i = 0; i < MAXC; i++) {
        struct fclient *c = &S->cl[i];
        if (c->st != FC_DONE || conn_lookup_loop(&S->g, c->gid, c->ggen))
            continue;
        if (!check_client_lost(c, 0))
            continue;
        S->by_cid.v[c->cid] = NULL;
        for (int k = 0; k < c->sent.n; k++) /* what a worker may still run after the client is forgotten */
            if (c->sent.v[k].abandoned && c->sent.v[k].seq >= 0)
                VEC_PUSH(S->gone_abandoned, (int64_t)c->cid << 32 | (uint32_t)c->sent.v[k].seq);
        sb_free(&c->out);
        sb_free(&c->in);
        VEC_FREE(c->sent);
        VEC_FREE(c->pend);
        c->st = FC_FREE;
    }
}

static struct sim sim; /* the world of the run (one at a time: the hooks find it through S) */

/* A new world: nothing in it yet, the PRNG seeded, the clock at its start, the files named
 * after this process, the gateway's log lines going to the trace. */
static void world_reset(const struct sim_opts *o, struct sim_result *res)
{
    memset(&sim, 0, sizeof sim);
    memset(res, 0, sizeof *res);
    res->failed_step = -1;
    S = &sim;
    S->o = o;
    S->res = res;
    S->rng = o->seed * 0x9E3779B97F4A7C15ULL + 0x1234567;
    if (!S->rng)
        S->rng = 1;
    S->rng_mid = (o->seed + 1) * 0xD1B54A32D192ED03ULL ^ 0x5DEECE66DULL;
    if (!S->rng_mid)
        S->rng_mid = 1;
    trace_reset();
    S->now_us = 1000000000LL;
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(on_death);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < MAXC; i++)
        S->cl[i].fd = -1;
    snprintf(S->conf_path, sizeof S->conf_path, "/tmp/qgate-sim-%d.conf", (int)getpid());
    snprintf(S->users_path, sizeof S->users_path, "/tmp/qgate-sim-%d.users", (int)getpid());
    snprintf(S->alog_path, sizeof S->alog_path, "/tmp/qgate-sim-%d.access", (int)getpid());
    unlink(S->alog_path);
    log_sink_start();
}

/* The run's configuration, users file and access log go. */
static void remove_files(void)
{
    unlink(S->conf_path);
    unlink(S->users_path);
    unlink(S->alog_path);
}

/* An invariant failed, and fail() jumped back to sim_run: the report (unless quiet). What
 * sim_run returns: 1. */
static int run_failed(void)
{
    log_sink_failed();
    if (!S->o->quiet) {
        fprintf(stderr, "sim: seed %llu failed at step %ld: %s\n", (unsigned long long)S->o->seed, S->res->failed_step,
                S->res->what);
        print_trace();
    }
    log_sink = NULL;
    remove_files();
    return 1; /* the gateway's state is abandoned: the caller exits */
}

/* The world's shape, chosen after the gateway's configuration: its groups, the users file, the
 * access log and its sink, the main group's pool, pipeline, the workers, the share of replies
 * deferred, the log's queue. */
static void choose_world(struct config *cfg)
{
    S->ngroups = chance(60) ? 2 : 1;
    S->bc_group = S->ngroups > 1 ? 1 : -1;
    S->users_file = chance(40);
    S->carol_max = 1;
    S->alog = chance(40);
    S->alog_manual = S->alog && enabled(SIM_EV_ALOGSINK) && chance(60);
    S->alog_cap = 256 + (size_t)rnd(8192);
    S->alog_room = SIZE_MAX;
    S->session = chance(30);
    S->reset_q = S->session && chance(60);
    /* (from the seed, and only where a queue_timeout is set already: the world's stream as it
     * was, till the first reload that changes the pool) */
    S->pool_flips = enabled(SIM_EV_RELOAD) && (S->session || cfg->queue_timeout) && pool_flip_world();
    S->ever_session = S->session || S->pool_flips;
    S->pipeline = chance(40) ? 2 + rnd(3) : 1;
    S->pipeline_wait = chance(40) ? 0 : chance(50) ? 1 + rnd(30) : 100 + rnd(3000);
    S->keepalive_idle = (int)cfg->keepalive_idle;
    if (S->ever_session && !cfg->queue_timeout) /* a client waiting for a session's worker may wait for ever */
        cfg->queue_timeout = 50 + rnd(2000);
    S->nw = S->ngroups + rnd(4); /* every group has one at least */
    S->defer_pct = chance(40) ? 1 + rnd(30) : 0;
    S->log_queued = enabled(SIM_EV_LOGSINK) && chance(50);
    S->log_cap = 1024 + (size_t)rnd(16384);
    S->wzip = chance(30);
}

/* The gateway, set up from a random configuration and the fake workers it is to connect to. */
static void start_world(void)
{
    struct config *cfg = calloc(1, sizeof *cfg);
    random_config(cfg);
    choose_world(cfg);
    log_queue_start();
    for (int i = 0; i < 4; i++)
        S->scraper[i] = -1;
    for (int k = 0; k < S->nw; k++)
        fw_init(&S->w[k], k, k < S->ngroups ? k : rnd(S->ngroups));
    /* the configuration goes through the file, as a reload reads it */
    S->g.cfg = *cfg;
    S->want_qt = cfg->query_timeout;
    S->want_qu = cfg->queue_timeout;
    S->had_qu = cfg->queue_timeout > 0;
    write_config();
    if (S->users_file)
        write_users();
    char err[512];
    if (config_build(cfg, S->conf_path, NULL, err, sizeof err))
        fail("the simulation's configuration was refused: %s", err);
    struct gw_hooks hooks = {.now_us = hook_now, .connect = hook_connect, .lost = hook_lost, .dropped = hook_dropped, .closed = hook_closed, .unread = hook_unread,
                             .dispatched = hook_dispatched, .query_key = hook_query_key, .manual_pools = 1,
                             .nested = hook_nested};
    if (S->alog_manual)
        hooks.alog_start = hook_alog_start;
    if (gw_init(&S->g, cfg, S->conf_path, NULL, &hooks))
        fail("gw_init failed");
    free(cfg);
    tr("seed %llu: %d groups (main pool %s), %d workers, users file %d, max_queue %d, queue_timeout %lld, query_timeout %lld, "
       "frames_budget %d, splice %d, compress %d", (unsigned long long)S->o->seed, S->ngroups,
       S->session ? "session" : "request", S->nw, S->users_file,
       S->g.cfg.max_queue, (long long)S->g.cfg.queue_timeout, (long long)S->g.cfg.query_timeout,
       S->g.cfg.frames_budget, S->g.cfg.splice, S->g.cfg.compress);
}

/* What the run starts with once the workers are up, and must end with: the fds open (with the
 * workers connected, and the gateway's connections that a worker's Unix socket closed at once),
 * the gateway's heap (with what it may keep for good). */
struct baseline {
    int fds, wup, half;
    size_t heap, kept;
};

static void take_baseline(struct baseline *b)
{
    b->fds = count_fds();
    b->wup = workers_connected();
    b->half = gw_unpaired();
    b->heap = gw_heap();
    b->kept = gw_kept();
}

/* At the end: as many fds as at the start, but two for each worker connection more (one for a
 * connection a Unix socket closed at once); as much heap, but what the gateway keeps for good. */
static void check_baseline(const struct baseline *b0)
{
    struct baseline b1;
    b1.fds = count_fds();
    b1.wup = workers_connected();
    b1.half = gw_unpaired();
    if (b1.fds - b0->fds != 2 * (b1.wup - b0->wup) + (b1.half - b0->half))
        fail("the end: %d fds open, %d at the start (workers connected %d, then %d; the gateway's "
             "connections to a worker that closed them at once %d, then %d)", b1.fds, b0->fds, b0->wup, b1.wup,
             b0->half, b1.half);
    b1.heap = gw_heap();
    b1.kept = gw_kept();
    if (b0->heap && b1.heap - b0->heap != b1.kept - b0->kept)
        fail("the end: the gateway holds %zd bytes more than at the start (%zd accounted for)",
             (ssize_t)(b1.heap - b0->heap), (ssize_t)(b1.kept - b0->kept));
    if (buf_held_bytes) /* everything held whole for a client has gone with it */
        fail("the end: %zu bytes still counted held whole (hold_max) with no client left", buf_held_bytes);
    if (buf_pending_bytes || buf_pending_big) /* every request read has been sent or answered, or went with its client */
        fail("the end: %zu bytes of requests still counted (pending_max; %zu of big ones) with no client left",
             buf_pending_bytes, buf_pending_big);
    if (!TAILQ_EMPTY(&S->g.room_waiters))
        fail("the end: a connection still waits for room under pending_max with no client left");
}

/* Everyone leaves: the scrapers and the clients close, the workers stay up and take what comes,
 * the gateway sees the closes. Then everything any client sent has run, and no client is left. */
static void everyone_leaves(void)
{
    for (int i = 0; i < 4; i++)
        if (S->scraper[i] >= 0) {
            close(S->scraper[i]);
            S->scraper[i] = -1;
        }
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_HS || S->cl[i].st == FC_READY)
            client_close(&S->cl[i]);
    for (int k = 0; k < S->nw; k++)
        S->w[k].refuse = 0;
    quiesce(1, "the end");
    for (int i = 0; i < 50; i++) { /* the gateway sees the closes (the workers take what comes) */
        gw_step();
        for (int k = 0; k < S->nw; k++) {
            worker_read(&S->w[k], 1 << 20);
            worker_process(&S->w[k], 1 << 20);
            worker_write(&S->w[k], 1 << 20);
        }
        advance_clock(100);
    }
    quiesce(1, "the end");
    check_nothing_lost();
    if (S->g.nclients)
        fail("the end: %d clients still in the gateway", S->g.nclients);
}

int sim_run(const struct sim_opts *o, struct sim_result *res)
{
    world_reset(o, res);
    if (setjmp(S->fail))
        return run_failed();
    start_world();

    /* workers up: the baseline for memory and fds */
    quiesce(1, "start");
    S->quiescing = 0;
    struct baseline b0;
    take_baseline(&b0);

    long steps = o->steps > 0 ? o->steps : 3000;
    S->mid_ok = 1;
    for (S->step = 0; S->step < steps; S->step++) {
        one_event();
        res->steps++;
        if (S->step % 64 == 0)
            recycle_clients();
    }
    S->mid_ok = 0;
    res->mid_events = S->mid_events;
    res->http_501 = S->http_501;
    res->half_closes = S->half_closes;
    res->answered_ahead = S->answered_ahead;
    res->ahead_read = S->ahead_read;
    res->bad_ahead = S->bad_ahead;
    res->ahead_between = S->ahead_between;
    res->ahead_async = S->ahead_async;
    res->half_answered = S->half_answered;
    res->hold_passed = (long)S->g.held_passed;
    res->tails = (long)S->g.tails;
    res->nested = (long)S->g.nested - res->nested_here;
    res->hold_refused = (long)S->g.refused[REFUSED_HOLD_MAX].n;
    res->pending_waits = (long)S->g.pending_waits;
    for (int k = 0; k < S->nw; k++)
        res->resets += S->w[k].resets;
    res->reset_flips = S->reset_flips;
    res->pool_flips = S->pool_flips ? S->pool_flips - 1 : 0;
    res->pool_taken = S->pool_flips ? S->sess_era : 0;
    tr("quiescence");
    quiesce(0, "quiescence (clients that stopped reading still stopped)");
    quiesce(1, "quiescence");
    check_nothing_lost();

    everyone_leaves();
    check_baseline(&b0);
    tr("end: %ld steps, %ld checks", res->steps, res->checks);

    uint64_t ended = alog_sink_finish();
    gw_free(&S->g); /* writes the access log's last lines */
    if (buf_held_bytes)
        fail("after gw_free: %zu bytes still counted held whole (hold_max)", buf_held_bytes);
    if (buf_pending_bytes || buf_pending_big)
        fail("after gw_free: %zu bytes of requests still counted (pending_max)", buf_pending_bytes);
    check_alog_end(ended);
    free_world();
    check_log_end();
    log_sink = NULL;
    remove_files();
    S = NULL;
    return 0;
}

#define SIM_EV_NAME(e) #e,
static const char *const event_names[] = {SIM_EVENTS(SIM_EV_NAME)};
#undef SIM_EV_NAME

const char *sim_event_name(int k) { return k >= 0 && k < SIM_EV_N ? event_names[k] : "?"; }

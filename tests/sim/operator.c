/* operator.c: the operator's side: the random configuration, written to the file a reload
 * reads, the users file, reloads that add and remove workers and change pipeline, and the
 * pausing and disabling of groups and workers at any moment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "control.h"
#include "gateway.h"
#include "reload.h"
#include "gw.h"
#include "log.h"
#include "worker.h"
#include "sim_int.h"

/* ---- configuration ------------------------------------------------------------------------ */

void write_config(void)
{
    FILE *f = fopen(S->conf_path, "w");
    if (!f)
        fail("cannot write %s", S->conf_path);
    const struct config *c = &S->g.cfg;
    fprintf(f, "[gateway]\nport = 0\nbind = 127.0.0.1\nunix_socket = 0\nloglevel = %s\n", log_level_name(c->loglevel));
    fprintf(f, "max_queue = %d\nqueue_timeout = %lld\nquery_timeout = %lld\nhandshake_timeout = %lld\n", c->max_queue,
            (long long)S->want_qu, (long long)S->want_qt, (long long)c->handshake_timeout);
    fprintf(f, "frames_budget = %d\nread_budget = %lld\nwrite_budget = %lld\nchunk_size = %lld\n", c->frames_budget,
            (long long)c->read_budget, (long long)c->write_budget, (long long)c->chunk_size);
    fprintf(f, "client_high_water = %lld\nclient_low_water = %lld\nclient_max_pending = %lld\n",
            (long long)c->client_high_water, (long long)c->client_low_water, (long long)c->client_max_pending);
    fprintf(f, "reconnect_min = %lld\nreconnect_max = %lld\nworker_connect_timeout = %lld\n",
            (long long)c->reconnect_min, (long long)c->reconnect_max, (long long)c->worker_connect_timeout);
    fprintf(f, "compress = %d\ncompress_max = %lld\nsplice = %d\nmax_message = %lld\nhold_max = %lld\n", c->compress,
            (long long)c->compress_max, c->splice, (long long)c->max_message, (long long)c->hold_max);
    fprintf(f, "pending_max = %lld\n", (long long)c->pending_max);
    fprintf(f, "local_workers = %s\n", c->local_workers == CFG_LOCAL_UNIX ? "unix" : "tcp");
    fprintf(f, "keepalive_idle = %d\ntcp_user_timeout = %d\n", S->keepalive_idle, S->keepalive_idle ? 30000 : 0);
    if (S->users_file)
        fprintf(f, "users_file = %s\n", S->users_path);
    if (S->alog)
        fprintf(f, "access_log = %s\n", S->alog_path);
    for (int gi = 0; gi < S->ngroups; gi++) {
        fprintf(f, "[group %s]\nasync = %s\n", gi == S->bc_group ? "bc" : "main", gi == S->bc_group ? "broadcast" : "one");
        if (S->session && gi != S->bc_group)
            fprintf(f, "pool = session\n%s", S->reset_q ? "reset_query = reset\n" : "");
        else
            fprintf(f, "pipeline = %d\npipeline_wait = %d\n", S->pipeline, S->pipeline_wait);
        if (gi == S->bc_group)
            fprintf(f, "users = bob,bea\n");
        fprintf(f, "workers = ");
        int first = 1;
        for (int k = 0; k < S->nw; k++)
            if (S->w[k].in_config && S->w[k].group == gi) {
                fprintf(f, "%s127.0.0.1:%d", first ? "" : ",", WPORT0 + k);
                first = 0;
            }
        fprintf(f, "\n");
    }
    fclose(f);
}

void random_config(struct config *c)
{
    config_defaults(c);
    c->port = 0;
    strcpy(c->bind, "127.0.0.1");
    c->unix_socket = 0;
    c->loglevel = chance(50) ? LOG_DEBUG : LOG_INFO;
    if (getenv("SIM_DEBUG")) /* the gateway's debug lines in the trace, whatever the seed says */
        c->loglevel = LOG_DEBUG;
    c->max_queue = chance(30) ? 1 + rnd(4) : 1000;
    c->queue_timeout = chance(30) ? 50 + rnd(500) : 0;
    c->query_timeout = chance(30) ? 200 + rnd(3000) : 0;
    c->handshake_timeout = 200 + rnd(5000);
    c->frames_budget = chance(50) ? 1 + rnd(4) : 64;
    c->read_budget = 4096 << rnd(5);
    c->write_budget = 4096 << rnd(5);
    c->chunk_size = 4096 << rnd(3);
    c->client_high_water = 65536 << rnd(2);
    c->client_low_water = c->client_high_water / (2 + rnd(4));
    c->client_max_pending = 65536 << rnd(3);
    c->reconnect_min = 10 + rnd(100);
    c->reconnect_max = c->reconnect_min * (1 + rnd(20));
    c->worker_connect_timeout = 100 + rnd(3000);
    c->compress = chance(80);
    c->compress_max = chance(20) ? 4096 : 64 << 20;
    c->splice = chance(50);
    c->local_workers = chance(50) ? CFG_LOCAL_UNIX : CFG_LOCAL_TCP;
    c->max_message = chance(10) ? ((int64_t)1 << 33) : 2147483647;
    c->hold_max = chance(30) ? 2048 << rnd(6) : (int64_t)1 << 30;
    /* (from the seed itself, not the world's stream: every other draw stays as it was, so the
     * seeds in regress.txt still make the worlds they failed in) */
    uint64_t h = (S->o->seed + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    c->pending_max = h % 100 < 30 ? 1024 << (h / 100 % 7) : (int64_t)1 << 30;
}

void write_users(void)
{
    FILE *f = fopen(S->users_path, "w");
    if (!f)
        fail("cannot write %s", S->users_path);
    fprintf(f, "alice:wonder\tadmin=1\nbob:builder\ncarol:s3cret\tmax_inflight=%d\ndave:d\tmax_conns=2\nbea:b\n",
            S->carol_max);
    fclose(f);
}

/* The fake worker whose gateway worker waits for q to close an old connection (it was closed
 * with broadcasts not known to have run), in the configuration or removed from it; or -1. */
int reload_waiting_worker(void)
{
    for (int i = 0; i < S->g.ngroups; i++) {
        struct worker *x;
        TAILQ_FOREACH(x, &S->g.groups[i].workers, glink) {
            const char *port = strrchr(x->addr, ':');
            int k = port ? atoi(port + 1) - WPORT0 : -1;
            if (x->remnant.fd >= 0 && k >= 0 && k < S->nw)
                return k;
        }
    }
    return -1;
}

/* A number for reload n of this world, from the seed itself, not the world's stream: every other
 * draw stays as it was, so the seeds in regress.txt still make the worlds they failed in. */
static uint64_t reload_draw(int n)
{
    uint64_t h = (S->o->seed ^ ((uint64_t)n << 40)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

/* Is this a world whose reloads make group main a session pool or a request pool? One in five,
 * from the seed (as reload_draw: every other draw as it was). */
int pool_flip_world(void)
{
    return reload_draw(-1) % 100 < 20;
}

void reload(void)
{
    S->outages++; /* a worker added is not up until it has connected; one removed goes */
    /* add a worker, or remove one (a group keeps at least one); most often the one waiting for
     * q's close, if one is: removed, or put back, while it waits */
    int k = reload_waiting_worker();
    if (k < 0 || chance(25))
        k = rnd(MAXW);
    if (k >= S->nw) {
        if (S->nw == MAXW)
            return;
        k = S->nw++;
        struct fworker *w = &S->w[k];
        fw_init(w, k, rnd(S->ngroups));
        tr("reload: add W%d to group %d", k, w->group);
    } else {
        struct fworker *w = &S->w[k];
        int others = 0;
        for (int i = 0; i < S->nw; i++)
            others += i != k && S->w[i].in_config && S->w[i].group == w->group;
        if (!others && w->in_config)
            return;
        w->in_config = !w->in_config;
        tr("reload: %s W%d", w->in_config ? "put back" : "remove", k);
        if (!w->in_config)
            S->wdeaths++;
    }
    if (S->users_file && chance(30)) { /* a user's limits change: logins checked meanwhile get the new */
        S->carol_max = S->carol_max == 1 ? 2 : 1;
        write_users();
        tr("reload: carol's max_inflight %d", S->carol_max);
    }
    if (chance(25)) { /* each worker's connections opened or closed to match */
        S->pipeline = chance(50) ? 1 : 2 + rnd(3);
        tr("reload: pipeline %d", S->pipeline);
    }
    /* a session group's reset_query off (sessions that end meanwhile go without; the workers
     * they leave are reset once it is back) or on again, the more often on, for long */
    int n = ++S->nreloads;
    if (S->session && reload_draw(n) % 100 < (S->reset_q ? 8 : 30)) {
        S->reset_q = !S->reset_q;
        S->reset_flips++;
        tr("reload: reset_query %s", S->reset_q ? "reset" : "none");
    }
    if (S->pool_flips && reload_draw(n + 2000000) % 100 < 30) { /* group main a session pool, or a
                                                                  * request pool (its sessions end) */
        S->session = !S->session;
        S->pool_flips++;
        if (S->session)
            S->reset_q = reload_draw(n + 3000000) % 100 < 60;
        tr("reload: group main pool = %s", S->session ? "session" : "request");
    }
    uint64_t d = reload_draw(n + 1000000);
    if (d % 100 < 15) { /* the timeouts: what runs and waits now keeps to the new ones (a session
                         * world keeps a queue_timeout: a client may wait for a session's worker) */
        S->want_qt = d / 100 % 3 == 0 ? 0 : 200 + (int64_t)(d / 300 % 3000);
        S->want_qu = d / 1000000 % 3 == 0 && !S->ever_session ? 0 : 50 + (int64_t)(d / 3000000 % 2000);
        S->had_qu |= S->want_qu > 0;
        tr("reload: query_timeout %lld, queue_timeout %lld", (long long)S->want_qt, (long long)S->want_qu);
    }
    if (chance(25)) { /* the sockets open now set again (Unix sockets here: left alone) */
        S->keepalive_idle = S->keepalive_idle ? 0 : 1000 * (1 + rnd(60));
        tr("reload: keepalive_idle %d", S->keepalive_idle);
    }
    write_config();
    S->in_gw = 1;
    if (reload_start_loop(&S->g, NULL, 0))
        fail("reload refused");
    S->in_gw = 0;
}

/* ---- the operator, as .qgate.pause[] and .qgate.disable[] do it -------------------------- */

/* Pause group gi, or resume it if it is paused. */
void operator_pause(int gi)
{
    struct group *grp = &S->g.groups[gi];
    tr("operator: %s group %s (%d queued, %d held)", grp->paused ? "resume" : "pause", grp->cfg.name, grp->queue.n,
       grp->held.n);
    S->in_gw = 1;
    control_pause_loop(&S->g, grp, !grp->paused, "the simulation");
    S->in_gw = 0;
}

/* Disable w, or enable it if it is disabled. */
void operator_disable(struct fworker *w)
{
    struct worker *gw = gw_worker_of(w);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", WPORT0 + w->wid);
    int on = !(gw && gw->disabled);
    tr("operator: %s W%d (%s)", on ? "disable" : "enable", w->wid, gw ? worker_state_name(gw->st) : "not in the gateway");
    S->in_gw = 1;
    control_disable_loop(&S->g, addr, on, "the simulation");
    S->in_gw = 0;
}

/* Every group resumed, every worker enabled: what waits for them can finish. 1 if any was not. */
int operator_release_all(void)
{
    int n = 0;
    for (int i = 0; i < S->g.ngroups; i++)
        if (S->g.groups[i].paused) {
            operator_pause(i);
            n++;
        }
    for (int k = 0; k < S->nw; k++) {
        struct worker *gw = gw_worker_of(&S->w[k]);
        if (gw && gw->disabled) {
            operator_disable(&S->w[k]);
            n++;
        }
    }
    return n;
}


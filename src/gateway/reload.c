/* reload.c: SIGHUP and .qgate.reload[]: the configuration and users file are read on the reader
 * pool (files are never read on the loop), then applied on the loop: workers added and removed
 * group by group (a busy one goes after its request), the users file swapped (checks under way
 * keep theirs), the live keys taken. Keys that need a restart are kept, with a warning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reload.h"
#include "access.h"
#include "report.h"
#include "auth.h"
#include "tail.h"
#include "client.h"
#include "jobs.h"
#include "log.h"
#include "sdnotify.h"
#include "worker.h"

static int has_addr(const char *list, const char *addr)
{
    char a[300];
    for (const char *p = list; config_list_next(&p, a, sizeof a);)
        if (!strcmp(a, addr))
            return 1;
    return 0;
}

/* Keys that need a restart (CFG_RESTART in config.c's cfg_keys): warn when a reload changes
 * them; config_take_live keeps their running values. */
static void warn_restart(const struct config *old, const struct config *nw)
{
    char changed[512];
    if (config_restart_changed(old, nw, changed, sizeof changed)) {
        log_warn(NULL, RELOAD_RESTART_WARNING "; kept as running until a restart: %s", changed);
    }
}

/* A .qgate.reload[] request waiting for its answer. */
struct reload_wait {
    STAILQ_ENTRY(reload_wait) link;
    uint32_t id, gen; /* its client's connection */
    uint64_t seq;     /* its request */
};

static int start_reload(struct gw *g)
{
    struct job *j = job_new(job_load_config, JK_RELOAD);
    struct reload_job *r = calloc(1, sizeof *r);
    if (!j || !r) {
        job_free(j);
        free(r);
        return -1;
    }
    snprintf(r->path, sizeof r->path, "%s", g->config_path);
    r->ov = g->overrides;
    j->ctx = r;
    j->ctx_free = jobs_reload_free;
    g->reloading = 1;
    j->heavy = 1; /* (it may wait on a pipe for seconds: a reader is left for the logins and commands) */
    pool_submit(g->readers, j);
    return 0;
}

struct group *reload_add_group_loop(struct gw *g, const struct group_cfg *gc)
{
    struct group *grp = dispatch_group_add_loop(g, gc);
    if (!grp)
        return NULL;
    grp->mode = run_mode_of(grp); /* plain, session or pipelining */
    char addr[300];
    for (const char *p = gc->workers; config_list_next(&p, addr, sizeof addr);)
        worker_add_loop(g, grp, addr);
    char pl[96] = "";
    if (group_pipelines(grp) && gc->pipeline_wait)
        snprintf(pl, sizeof pl, ", pipeline %d (connections to each worker; to a busy one behind runs learned under %lld ms)",
                 gc->pipeline, (long long)gc->pipeline_wait);
    else if (group_pipelines(grp))
        snprintf(pl, sizeof pl, ", pipeline %d (connections to each worker; to a busy one behind any run)", gc->pipeline);
    log_info(NULL, "group %s: %d worker%s (%s), async %s, pool %s%s", gc->name, grp->nworkers,
             grp->nworkers == 1 ? "" : "s", gc->workers,
             gc->async_mode == CFG_ASYNC_BROADCAST ? "broadcast" : "one",
             gc->pool_mode == CFG_POOL_SESSION ? "session" : "request", pl);
    return grp;
}

void reload_init(struct gw *g)
{
    STAILQ_INIT(&g->reload_now);
    STAILQ_INIT(&g->reload_next);
}

int reload_start_loop(struct gw *g, struct conn *requester, uint64_t seq)
{
    struct reload_wait *w = NULL;
    if (requester) {
        if (!(w = calloc(1, sizeof *w)))
            return -1;
        *w = (struct reload_wait){.id = requester->id, .gen = requester->gen, .seq = seq};
    }
    if (g->reloading) { /* the file may have changed since it was read: another reads the newest next,
                         * and each who asks meanwhile is answered when that one is done */
        g->reload_again = 1;
        if (w)
            STAILQ_INSERT_TAIL(&g->reload_next, w, link);
        return 0;
    }
    if (w)
        STAILQ_INSERT_TAIL(&g->reload_now, w, link);
    if (!start_reload(g))
        return 0;
    if (w) {
        STAILQ_REMOVE(&g->reload_now, w, reload_wait, link);
        free(w);
    }
    return -1;
}

/* Answer the clients that asked for a reload (those still there), and forget them. */
static void reload_answer(struct gw *g, struct reload_waits *q, const char *err)
{
    struct reload_wait *w;
    while ((w = STAILQ_FIRST(q))) {
        STAILQ_REMOVE_HEAD(q, link);
        struct conn *x = conn_lookup_loop(g, w->id, w->gen);
        uint64_t seq = w->seq;
        free(w);
        if (!x || x->kind != CONN_CLIENT)
            continue;
        struct client *c = client_of(x);
        struct req *r = request_of_seq_loop(c, seq);
        if (!r || r->state != RS_LOCAL)
            continue;
        if (err) {
            request_error_loop(g, c, r, "qgate: reload failed: %s", err);
            continue;
        }
        struct job *j = job_new(job_encode_command, JK_REPLY);
        if (!j) {
            conn_close_loop(g, x, "out of memory");
            continue;
        }
        job_args(j)->answer = (struct job_answer){.cmd = GWCMD_RELOAD}; /* no table: 1b */
        conn_submit_loop(g->writers, j, x, seq);
    }
}

void reload_free(struct gw *g)
{
    reload_answer(g, &g->reload_now, "the gateway stops");
    reload_answer(g, &g->reload_next, "the gateway stops");
}

/* What a reload changes in a group's keys, said (its workers' changes are said one by one; at
 * 1bf1093 a pool, pipeline or reset_query changed showed only as "reload: done": helper round
 * 40c). The credentials and the reset query are not written out. */
static void say_group_changes(const struct group_cfg *o, const struct group_cfg *n)
{
    char s[400] = "";
    size_t k = 0;
#define SAY(...) (k += k < sizeof s ? (size_t)snprintf(s + k, sizeof s - k, __VA_ARGS__) : 0)
    static const char *const pools[] = {"request", "session"}, *const asyncs[] = {"one", "broadcast"};
    if (o->pool_mode != n->pool_mode)
        SAY(", pool %s -> %s", pools[o->pool_mode & 1], pools[n->pool_mode & 1]);
    if (o->async_mode != n->async_mode)
        SAY(", async %s -> %s", asyncs[o->async_mode & 1], asyncs[n->async_mode & 1]);
    if (o->pipeline != n->pipeline)
        SAY(", pipeline %d -> %d", o->pipeline, n->pipeline);
    if (o->pipeline_wait != n->pipeline_wait)
        SAY(", pipeline_wait %lld -> %lld ms", (long long)o->pipeline_wait, (long long)n->pipeline_wait);
    if (strcmp(o->reset_query, n->reset_query))
        SAY(", reset_query %s", !n->reset_query[0] ? "removed" : o->reset_query[0] ? "changed" : "set");
    if (strcmp(o->users, n->users))
        SAY(", users %s", n->users[0] ? n->users : "(none: the default route)");
    if (strcmp(o->user, n->user) || strcmp(o->password, n->password))
        SAY(", the user and password it presents to its workers changed (for connections made from now on)");
#undef SAY
    if (s[0])
        log_info(NULL, "reload: group %s: %s", n->name, s + 2);
}

/* One group's new worker list: the addresses it did not have join, those it lost leave. */
static void reload_group(struct gw *g, struct group *grp, const struct group_cfg *gc)
{
    say_group_changes(&grp->cfg, gc);
    int was_session = grp->cfg.pool_mode == CFG_POOL_SESSION;
    int unpin = was_session && gc->pool_mode != CFG_POOL_SESSION;
    char reset[sizeof grp->cfg.reset_query]; /* (the one its sessions lived under) */
    memcpy(reset, grp->cfg.reset_query, sizeof reset);
    grp->cfg = *gc; /* its pipeline: how many connections each worker gets */
    grp->mode = run_mode_of(grp);
    session_pool_reloaded_loop(g, grp, was_session);
    if (unpin) { /* a request pool now: its sessions end, as if their clients had left (the worker's q
                  * sees the handle close: .z.pc), and their clients' next requests take any worker */
        for (struct worker *w = TAILQ_FIRST(&grp->workers), *n; w; w = n) {
            n = TAILQ_NEXT(w, glink);
            if (w->sess)
                session_end_loop(g, w, reset, SESSION_END_RELOAD);
        }
    }
    char addr[300];
    for (const char *p = gc->workers; config_list_next(&p, addr, sizeof addr);) {
        struct worker *w, *found = NULL, *leaving = NULL;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            struct worker **slot = w->removed ? &leaving : &found;
            if (!*slot && worker_is_lead(w) && !strcmp(w->addr, addr))
                *slot = w;
        }
        if (!found && leaving) { /* removed by an earlier reload, still finishing its run: kept, not a
                                  * second connection to the same q beside it (what each was sent
                                  * would race at that q: broadcasts out of order) */
            TAILQ_FOREACH(w, &grp->workers, glink)
                if (w->removed && !strcmp(w->addr, addr))
                    worker_set_removed_loop(g, w, 0);
            log_info(NULL, "reload: group %s: worker %s kept (it was still leaving)", grp->cfg.name, addr);
            found = leaving;
        }
        if (found) {
            worker_fit_loop(g, grp, found);
        } else {
            log_info(NULL, "reload: group %s: adding worker %s", grp->cfg.name, addr);
            worker_add_loop(g, grp, addr);
        }
    }
    for (struct worker *w = TAILQ_FIRST(&grp->workers), *n; w; w = n) {
        n = TAILQ_NEXT(w, glink);
        if (!w->removed && !has_addr(gc->workers, w->addr)) {
            if (worker_is_lead(w))
                log_info(NULL, "reload: group %s: removing worker %s", grp->cfg.name, w->addr);
            worker_remove_loop(g, w);
        }
    }
}

static void reload_groups(struct gw *g, const struct config *nc)
{
    /* the q processes disabled now stay so wherever the file puts them (another group, one more
     * connection for pipeline, its address spelled another way: worker.c's inherit_disabled, as
     * it connects), whatever its groups' order (one group may drop an address, and so free its
     * worker, before another takes it); marks of the last reload's go (a q it removed and this
     * one adds back is a new worker: enabled) */
    int nd = 0;
    struct q_mark *dis = NULL;
    for (int i = 0; i < g->ngroups; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            nd += w->disabled && worker_is_lead(w);
    }
    if (nd && !(dis = calloc((size_t)nd, sizeof *dis)))
        nd = 0; /* (out of memory: a connection this reload adds to a disabled q is not disabled) */
    int k0 = 0;
    for (int i = 0; i < g->ngroups && k0 < nd; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            if (w->disabled && worker_is_lead(w) && k0 < nd)
                worker_mark_of(w, &dis[k0++]);
    }
    free(g->dis_marks);
    g->dis_marks = dis;
    g->ndis_marks = g->dis_marks_cap = nd;
    for (int i = 0; i < nc->ngroups; i++) {
        struct group *grp = dispatch_group_find_loop(g, nc->groups[i].name);
        if (grp)
            reload_group(g, grp, &nc->groups[i]);
        else if (!reload_add_group_loop(g, &nc->groups[i])) /* (out of memory: the bound is checked
                                                              * before, in reload_done_loop) */
            log_error(NULL, "reload: group %s not added (out of memory)", nc->groups[i].name);
    }
    for (int i = 0; i < g->ngroups; i++) {
        int kept = 0;
        for (int k = 0; k < nc->ngroups; k++)
            kept |= !strcmp(nc->groups[k].name, g->groups[i].cfg.name);
        if (!kept && !g->groups[i].stale)
            log_warn(NULL, "reload: group %s is no longer configured; it stays until restart (reached by name; users "
                     "go to the groups the file has)", g->groups[i].cfg.name);
        g->groups[i].stale = (uint8_t)!kept;
    }
    for (int i = 0; i < g->ngroups && nd; i++) {
        struct worker *w;
        TAILQ_FOREACH(w, &g->groups[i].workers, glink)
            for (int k = 0; k < nd && !w->disabled && !w->removed; k++)
                if (worker_marked(&dis[k], w)) {
                    log_info(w->c.name, "group %s: disabled, as the other connections to this q are", g->groups[i].cfg.name);
                    worker_disable_loop(g, w, 1);
                }
    }
}

/* Apply a configuration read by a reload job: the worker sets and the live keys. */
static void reload_apply(struct gw *g, struct config *nc, struct auth_shared *auth)
{
    warn_restart(&g->cfg, nc);
    if (auth)
        log_info(NULL, "reload: users file %s: %d users", nc->users_file, auth_db_of(auth)->n);
    auth_unref(g->auth); /* checks under way keep their own reference */
    g->auth = auth;
    client_users_reloaded_loop(g); /* admin flags and limits as the file says now */
    reload_groups(g, nc);
    client_groups_reloaded_loop(g); /* connected users to their groups as the file says now */
    /* live keys (CFG_LIVE): limits, timeouts, budgets, compression, log level; the others kept */
    int reopen = strcmp(g->cfg.access_log, nc->access_log) != 0;
    int retune = g->cfg.keepalive_idle != nc->keepalive_idle || g->cfg.keepalive_interval != nc->keepalive_interval ||
                 g->cfg.keepalive_count != nc->keepalive_count || g->cfg.tcp_user_timeout != nc->tcp_user_timeout;
    int64_t qt = g->cfg.query_timeout, qu = g->cfg.queue_timeout, st = g->cfg.client_stall_timeout;
    config_take_live(&g->cfg, nc);
    if (g->cfg.query_timeout != qt) /* what waits now keeps to the new timeouts, not only what comes */
        run_timeouts_reloaded_loop(g);
    if (g->cfg.queue_timeout != qu || g->cfg.client_stall_timeout != st)
        client_timeouts_reloaded_loop(g);
    if (g->cfg.client_stall_timeout != st)
        tail_timeouts_reloaded_loop(g);
    if (retune) { /* the connections open now too, not only those to come */
        conn_keepalive_all_loop(g);
        for (int i = 0; i < g->ngroups; i++) { /* and those left for q to close */
            struct worker *w;
            TAILQ_FOREACH(w, &g->groups[i].workers, glink)
                if (w->remnant.fd >= 0)
                    conn_keepalive_loop(g, w->remnant.fd, w->c.name);
        }
    }
    if (reopen || g->reopen_on_reload)
        access_reopen_loop(g); /* a new file, or none; or the same one again (SIGHUP: rotation) */
    g->reopen_on_reload = 0;
    log_level = g->cfg.loglevel;
    report_reloaded_loop(g);
    g->loop.work_pending = 1;
}

/* The file's configuration checked again as it would run: with the keys a restart takes (port,
 * bind, metrics_port, ...) as they run, the port the gateway listens on. -1 (err says why) if it
 * would not do (a worker on the running port: at 3929a8f a file that moved port and named the
 * running one as a worker was taken, and the gateway sent its clients' queries to itself, for
 * ever: helper round 21). */
static int check_as_run(const struct gw *g, const struct config *nc, char *err, size_t errlen)
{
    struct config *eff = malloc(sizeof *eff);
    if (!eff)
        return 0; /* (checked as the file says only) */
    *eff = g->cfg;
    config_take_live(eff, nc);
    if (g->port)
        eff->port = g->port; /* (port = 0: the one the kernel gave) */
    char why[1200];
    int bad = config_validate(eff, why, sizeof why) != 0;
    free(eff);
    if (bad)
        snprintf(err, errlen, "%s (as it would run: the keys a restart takes, such as port, kept as they run)", why);
    return bad ? -1 : 0;
}

void reload_done_loop(struct gw *g, struct job *j)
{
    struct reload_job *r = j->ctx;
    struct reload_waits asked = STAILQ_HEAD_INITIALIZER(asked); /* (this one's) */
    STAILQ_CONCAT(&asked, &g->reload_now);
    g->reloading = 0;
    if (g->reload_again) { /* asked for again meanwhile: the newest file is read next */
        g->reload_again = 0;
        STAILQ_CONCAT(&g->reload_now, &g->reload_next);
        if (start_reload(g)) {
            log_error(NULL, "reload: out of memory starting the next one");
            reload_answer(g, &g->reload_now, "out of memory starting it");
        }
    }
    const char *err = NULL;
    char many[200];
    int fresh = 0; /* its groups the gateway has not: added, beside those it keeps till a restart */
    for (int i = 0; r->cfg && i < r->cfg->ngroups; i++)
        fresh += !dispatch_group_find_loop(g, r->cfg->groups[i].name);
    if (!r->cfg) {
        err = r->err;
    } else if (g->auth && !r->cfg->users_file[0]) {
        err = "the new configuration has no users_file: a reload does not turn authentication off "
              "(restart to do that)";
    } else if (g->ngroups + fresh > CFG_MAX_GROUPS) { /* (refused whole, as at a start: not in part) */
        snprintf(many, sizeof many,
                 "too many groups: %d new beside the %d the gateway has (those no longer configured stay until "
                 "a restart), at most %d",
                 fresh, g->ngroups, CFG_MAX_GROUPS);
        err = many;
    }
    char as_run[1300];
    if (!err && check_as_run(g, r->cfg, as_run, sizeof as_run))
        err = as_run;
    if (err) {
        log_error(NULL, "reload failed, keeping the running configuration: %s", err);
        if (g->reopen_on_reload) { /* SIGHUP still rotates the access log */
            g->reopen_on_reload = 0;
            access_reopen_loop(g);
        }
        reload_answer(g, &asked, err);
        sdnotify_printf("READY=1\nSTATUS=listening on %s:%d; reload failed: %s", g->cfg.bind, g->port, err);
        return;
    }
    reload_apply(g, r->cfg, r->auth);
    r->auth = NULL; /* the gateway holds it now */
    log_info(NULL, "reload: done");
    reload_answer(g, &asked, NULL);
    sdnotify_printf("READY=1\nSTATUS=listening on %s:%d; reloaded", g->cfg.bind, g->port);
}

/* gateway.c: setting the gateway up from its configuration, reloading it (SIGHUP), draining it
 * (SIGTERM), and the pieces of state the pools are given. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "auth.h"
#include "gw.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"
#include "net.h"

static int watch(struct gw *g, int fd, struct evsrc *src, uint8_t kind)
{
    src->kind = kind;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = src};
    return epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void add_group(struct gw *g, const struct group_cfg *gc)
{
    struct group *grp = &g->groups[g->ngroups];
    memset(grp, 0, sizeof *grp);
    TAILQ_INIT(&grp->workers);
    TAILQ_INIT(&grp->idle);
    TAILQ_INIT(&grp->queue);
    grp->cfg = *gc;
    grp->index = g->ngroups++;
    char addr[300];
    for (const char *p = gc->workers; config_list_next(&p, addr, sizeof addr);)
        worker_new(g, grp, addr);
    log_info(NULL, "group %s: %d workers (%s), async %s", gc->name, grp->nworkers, gc->workers,
             gc->async_mode == CFG_ASYNC_BROADCAST ? "broadcast" : "one");
}

int gw_init(struct gw *g, const struct config *cfg, const char *config_path, const struct cfg_overrides *ov,
            const struct gw_hooks *hooks)
{
    memset(g, 0, sizeof *g);
    if (hooks)
        g->hooks = *hooks;
    if (ov)
        g->overrides = *ov;
    g->cfg = *cfg;
    g->lfd_tcp = g->lfd_uds = g->sigfd = g->wepfd = -1;
    TAILQ_INIT(&g->dirty);
    STAILQ_INIT(&g->closed);
    TAILQ_INIT(&g->backlog);
    g->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* given up when accept meets EMFILE */
    snprintf(g->config_path, sizeof g->config_path, "%s", config_path ? config_path : "");
    log_level = cfg->loglevel;
    gw_clock_loop(g);
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    g->wepfd = epoll_create1(EPOLL_CLOEXEC);
    if (g->epfd < 0 || g->wepfd < 0 || watch(g, g->wepfd, &g->ev_workers, EV_WORKERS))
        return -1;
    /* room for max_clients sockets, their splice pipes while streaming, and the workers */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)cfg->max_clients + 1024;
        if (rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max ? want : rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &rl))
                log_warn(NULL, "cannot raise the open file limit: %s", strerror(errno));
        }
        if (rl.rlim_cur < (rlim_t)cfg->max_clients + 64)
            log_warn(NULL, "open file limit %llu is below max_clients %d", (unsigned long long)rl.rlim_cur,
                     cfg->max_clients);
    }

    g->lfd_tcp = net_listen_tcp(cfg->bind, cfg->port, 1024, 1, &g->port);
    if (g->lfd_tcp < 0) {
        log_error(NULL, "cannot listen on %s:%d: %s", cfg->bind, cfg->port, strerror(errno));
        return -1;
    }
    watch(g, g->lfd_tcp, &g->ev_listen_tcp, EV_LISTENER);
    if (cfg->unix_socket) {
        g->lfd_uds = net_listen_uds(g->port, 1024, 1);
        if (g->lfd_uds >= 0)
            watch(g, g->lfd_uds, &g->ev_listen_uds, EV_LISTENER);
        else if (g->lfd_uds == -1)
            log_warn(NULL, "no Unix socket for port %d: %s", g->port, strerror(errno));
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    g->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (g->sigfd < 0 || watch(g, g->sigfd, &g->ev_signal, EV_SIGNAL))
        return -1;

    g->readers = pool_create("reader", g->hooks.manual_pools ? 0 : cfg->reader_threads);
    g->writers = pool_create("writer", g->hooks.manual_pools ? 0 : cfg->writer_threads);
    if (!g->readers || !g->writers)
        return -1;
    watch(g, pool_fd(g->readers), &g->ev_readers, EV_POOL);
    watch(g, pool_fd(g->writers), &g->ev_writers, EV_POOL);

    /* sync "": a worker answers it only after running everything sent before it */
    kipc_hdr_write(g->chaser, KIPC_SYNC, 0, sizeof g->chaser);
    memcpy(g->chaser + 8, "\x0a\x00\x00\x00\x00\x00", 6);
    K e = k_err("qgate: the client of this request is gone");
    g->no_client_err = e ? kcodec_encode_msg(e, KIPC_RESPONSE, &g->no_client_err_len) : NULL;
    k_free(e);
    if (!g->no_client_err)
        return -1;

    if (cfg->users_file[0]) {
        char err[512];
        struct auth_db *db = auth_load(cfg->users_file, err, sizeof err);
        if (!db || !(g->auth = auth_share(db))) {
            log_error(NULL, "users file: %s", db ? "out of memory" : err);
            return -1;
        }
        log_info(NULL, "users file %s: %d users", cfg->users_file, auth_db_of(g->auth)->n);
    }
    for (int i = 0; i < cfg->ngroups; i++)
        add_group(g, &cfg->groups[i]);
    log_info(NULL, "listening on %s:%d%s", cfg->bind, g->port, g->lfd_uds >= 0 ? " and q's Unix socket" : "");
    return 0;
}

void gw_submit(struct gw *g, struct pool *p, struct job *j, struct conn *c, uint64_t seq)
{
    (void)g;
    j->conn_id = c->id;
    j->conn_gen = c->gen;
    j->seq = seq;
    pool_submit(p, j);
}

struct stats_snapshot *gw_stats_snapshot(struct gw *g)
{
    int n = 0;
    for (int i = 0; i < g->ngroups; i++)
        n += g->groups[i].nworkers;
    struct stats_snapshot *s = calloc(1, sizeof *s + (size_t)n * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        struct worker *w;
        TAILQ_FOREACH(w, &grp->workers, glink) {
            struct stats_row *r = &s->rows[s->n++];
            snprintf(r->addr, sizeof r->addr, "%s", w->addr);
            snprintf(r->group, sizeof r->group, "%s", grp->cfg.name);
            snprintf(r->state, sizeof r->state, "%s", worker_state_name(w->st));
            for (char *p = r->state; *p; p++)
                *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            r->served = (int64_t)w->served;
            r->errors = (int64_t)w->errors;
            r->dropped = (int64_t)w->dropped;
            r->inflight = w->st == WS_BUSY;
            r->queued = grp->qlen;
            r->lat = w->lat;
        }
    }
    return s;
}

static struct group *find_group(struct gw *g, const char *name)
{
    for (int i = 0; i < g->ngroups; i++)
        if (!strcmp(g->groups[i].cfg.name, name))
            return &g->groups[i];
    return NULL;
}

static int has_addr(const char *list, const char *addr)
{
    char a[300];
    for (const char *p = list; config_list_next(&p, a, sizeof a);)
        if (!strcmp(a, addr))
            return 1;
    return 0;
}

/* Keys that need a restart: warn when a reload changes them. */
static void warn_restart(const struct config *old, const struct config *nw)
{
    if (old->port != nw->port || strcmp(old->bind, nw->bind) || old->unix_socket != nw->unix_socket ||
        old->reader_threads != nw->reader_threads || old->writer_threads != nw->writer_threads)
        log_warn(NULL, "reload: port, bind, unix_socket and thread counts change only on restart");
}

static int start_reload(struct gw *g, uint32_t req_id, uint32_t req_gen, uint64_t seq)
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
    j->ctx_free = reload_job_free;
    if (req_gen) {
        j->conn_id = req_id;
        j->conn_gen = req_gen;
        j->seq = seq;
        j->arg = 1;
    }
    g->reloading = 1;
    pool_submit(g->readers, j); /* files are read off the loop */
    return 0;
}

int gw_reload_loop(struct gw *g, struct conn *requester, uint64_t seq)
{
    if (!g->reloading)
        return start_reload(g, requester ? requester->id : 0, requester ? requester->gen : 0, seq);
    if (requester && g->reload_req_gen)
        return -1; /* another client already waits for the next one */
    g->reload_again = 1;
    if (requester) {
        g->reload_req_id = requester->id;
        g->reload_req_gen = requester->gen;
        g->reload_req_seq = seq;
    }
    return 0;
}

/* Answer the client that asked for the reload (if it is still there). */
static void reload_answer(struct gw *g, struct job *j, const char *err)
{
    struct conn *c = j->arg ? conn_lookup(g, j->conn_id, j->conn_gen) : NULL;
    if (!c || c->kind != EV_CLIENT)
        return;
    struct client *cl = (struct client *)c;
    struct req *r = client_head(cl);
    if (!r || r->seq != j->seq || r->state != RS_LOCAL)
        return;
    if (err) {
        client_error_loop(g, cl, r, "qgate: reload failed: %s", err);
        return;
    }
    struct job *w = job_new(job_encode_command, JK_REPLY);
    if (!w) {
        conn_close(g, c, "out of memory");
        return;
    }
    w->arg = GWCMD_RELOAD;
    gw_submit(g, g->writers, w, c, j->seq);
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
    for (int i = 0; i < nc->ngroups; i++) {
        struct group *grp = find_group(g, nc->groups[i].name);
        if (!grp) {
            if (g->ngroups == CFG_MAX_GROUPS) {
                log_error(NULL, "reload: too many groups, %s not added", nc->groups[i].name);
                continue;
            }
            add_group(g, &nc->groups[i]);
            continue;
        }
        char addr[300];
        for (const char *p = nc->groups[i].workers; config_list_next(&p, addr, sizeof addr);) {
            int found = 0;
            struct worker *w;
            TAILQ_FOREACH(w, &grp->workers, glink)
                if (!strcmp(w->addr, addr) && !w->removed)
                    found = 1;
            if (!found) {
                log_info(NULL, "reload: group %s: adding worker %s", grp->cfg.name, addr);
                worker_new(g, grp, addr);
            }
        }
        for (struct worker *w = TAILQ_FIRST(&grp->workers), *n; w; w = n) {
            n = TAILQ_NEXT(w, glink);
            if (!w->removed && !has_addr(nc->groups[i].workers, w->addr)) {
                log_info(NULL, "reload: group %s: removing worker %s", grp->cfg.name, w->addr);
                worker_remove_loop(g, w);
            }
        }
        grp->cfg = nc->groups[i];
    }
    for (int i = 0; i < g->ngroups; i++) {
        int kept = 0;
        for (int k = 0; k < nc->ngroups; k++)
            kept |= !strcmp(nc->groups[k].name, g->groups[i].cfg.name);
        if (!kept)
            log_warn(NULL, "reload: group %s is no longer configured; it stays until restart", g->groups[i].cfg.name);
    }
    /* live keys: limits, timeouts, budgets, compression, log level */
    struct config keep = g->cfg;
    g->cfg = *nc;
    g->cfg.port = keep.port;
    strcpy(g->cfg.bind, keep.bind);
    g->cfg.unix_socket = keep.unix_socket;
    g->cfg.reader_threads = keep.reader_threads;
    g->cfg.writer_threads = keep.writer_threads;
    log_level = g->cfg.loglevel;
    g->work_pending = 1;
}

void gw_reload_done_loop(struct gw *g, struct job *j)
{
    struct reload_job *r = j->ctx;
    g->reloading = 0;
    if (g->reload_again) { /* asked for again meanwhile: the newest file is read next */
        g->reload_again = 0;
        uint32_t id = g->reload_req_id, gen = g->reload_req_gen;
        g->reload_req_id = g->reload_req_gen = 0;
        if (start_reload(g, id, gen, g->reload_req_seq))
            log_error(NULL, "reload: out of memory starting the next one");
    }
    const char *err = NULL;
    if (!r->cfg)
        err = r->err;
    else if (g->auth && !r->cfg->users_file[0])
        err = "the new configuration has no users_file: a reload does not turn authentication off "
              "(restart to do that)";
    if (err) {
        log_error(NULL, "reload failed, keeping the running configuration: %s", err);
        reload_answer(g, j, err);
        return;
    }
    reload_apply(g, r->cfg, r->auth);
    r->auth = NULL; /* the gateway holds it now */
    log_info(NULL, "reload: done");
    reload_answer(g, j, NULL);
}

static void on_drain_timeout(struct gw *g, struct timer *t)
{
    (void)t;
    log_warn(NULL, "drain_timeout reached with work in flight: exiting");
    g->stop = 1;
}

void gw_drain_loop(struct gw *g)
{
    if (g->draining)
        return;
    g->draining = 1;
    if (g->lfd_tcp >= 0) {
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->lfd_tcp, NULL);
        close(g->lfd_tcp);
        g->lfd_tcp = -1;
    }
    if (g->lfd_uds >= 0) {
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->lfd_uds, NULL);
        close(g->lfd_uds);
        g->lfd_uds = -1;
    }
    client_pause_all_loop(g);
    timer_arm(g, &g->drain_tm, g->now_ms + g->cfg.drain_timeout, on_drain_timeout);
    g->work_pending = 1;
}

void gw_free(struct gw *g)
{
    for (uint32_t id = 0; id < g->next_id; id++)
        if (g->tab && g->tab[id])
            conn_close(g, g->tab[id], "gateway exiting");
    for (int i = 0; i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        while (!TAILQ_EMPTY(&grp->workers)) {
            struct worker *w = TAILQ_FIRST(&grp->workers);
            TAILQ_REMOVE(&grp->workers, w, glink);
            worker_free(w);
        }
    }
    conn_reap_loop(g);
    pool_destroy(g->readers);
    pool_destroy(g->writers);
    if (g->lfd_tcp >= 0)
        close(g->lfd_tcp);
    if (g->lfd_uds >= 0)
        close(g->lfd_uds);
    if (g->sigfd >= 0)
        close(g->sigfd);
    if (g->reserve_fd >= 0)
        close(g->reserve_fd);
    if (g->epfd >= 0)
        close(g->epfd);
    if (g->wepfd >= 0)
        close(g->wepfd);
    free(g->no_client_err);
    auth_unref(g->auth);
    while (g->users) {
        struct ustate *u = g->users;
        g->users = u->next;
        free(u);
    }
    timers_free(&g->timers);
    free(g->tab);
    free(g->gens);
    free(g->free_ids);
}

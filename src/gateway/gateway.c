/* gateway.c: the gateway made from its configuration: the listeners, the reader and writer
 * pools, the worker groups; the wiring of the layers (the loop's phases and completion
 * handlers, the client side's and the worker side's ops for dispatch); the gateway's own
 * commands (.qgate.*); signals; draining on SIGTERM; teardown. Reloading is reload.c's. */
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

#include "gateway.h"
#include "stream.h"
#include "reload.h"
#include "access.h"
#include "metrics.h"
#include "mhttp.h"
#include "report.h"
#include "auth.h"
#include "client.h"
#include "command.h"
#include "control.h"
#include "dispatch.h"
#include "jobs.h"
#include "kcodec.h"
#include "kipc.h"
#include "log.h"
#include "net.h"
#include "sdnotify.h"
#include "worker.h"

/* ---- signals, draining ------------------------------------------------------------------------- */

static void on_signal(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)s;
    (void)ev;
    struct signalfd_siginfo si;
    while (read(g->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            sdnotify_reloading(); /* READY=1 when it is done: reload_done_loop */
            log_info(NULL, "SIGHUP: reloading %s", g->config_path[0] ? g->config_path : "(no config file)");
            g->reopen_on_reload = 1; /* (rotation: when the reload is done, at the path it names) */
            if (reload_start_loop(g, NULL, 0)) {
                log_error(NULL, "SIGHUP: out of memory starting the reload");
                g->reopen_on_reload = 0;
                access_reopen_loop(g);
            }
        } else if (si.ssi_signo == SIGUSR1) {
            access_reopen_loop(g);
        } else if (si.ssi_signo == SIGUSR2) { /* (its default action ended the gateway) */
            log_warn(NULL, "SIGUSR2: ignored (SIGHUP reloads, SIGUSR1 reopens the access log)");
        } else if ((si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) && g->draining) {
            log_warn(NULL, "%s again while draining: exiting now (%d clients still connected are closed)",
                     si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", g->nclients + g->ntails);
            client_exit_answers_loop(g, si.ssi_signo == SIGTERM ? "SIGTERM again" : "SIGINT again");
            g->loop.stop = 1; /* (as drain_timeout does) */
        } else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            log_info(NULL, "%s: draining (up to %lld ms; again to exit now)",
                     si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", (long long)g->cfg.drain_timeout);
            sdnotify_send("STOPPING=1");
            control_drain_loop(g);
        }
    }
}

static const struct evops signal_ops = {.on_event = on_signal};

/* ---- setting up ------------------------------------------------------------------------------- */

/* Requests to the workers free, the pauses that are complete, then the clients whose turn for
 * room under pending_max has come. */
static void dispatch_phase(struct gw *g)
{
    dispatch_all_loop(g);
    if (!TAILQ_EMPTY(&g->room_waiters))
        request_room_loop(g);
}

static const struct loop_phases phases = {
    .backlog = stream_backlog_loop,
    .dispatch = dispatch_phase,
    .flush = stream_flush_dirty_loop,
    .reap = conn_reap_loop,
    .finished = NULL, /* control_drained_loop, once a drain has begun (control_drain_loop) */
};

/* The completion handlers, and the two sides' ops for dispatch. */
static void wire(struct gw *g)
{
    loop_on_job(g, JK_COMMAND, command_done_loop);
    loop_on_job(g, JK_REPLY, request_reply_done_loop);
    loop_on_job(g, JK_WREPLY, request_wreply_done_loop);
    loop_on_job(g, JK_AUTH, client_auth_done_loop);
    loop_on_job(g, JK_CHECK, request_checked_loop);
    loop_on_job(g, JK_NESTED, callback_checked_loop);
    loop_on_job(g, JK_RESOLVE, worker_resolved_loop);
    loop_on_job(g, JK_RELOAD, reload_done_loop);
    loop_on_job(g, JK_METRICS, mhttp_page_done_loop);
    loop_on_job(g, JK_MERGE, fanout_merged_loop);
    loop_on_job(g, JK_PUSH, run_push_done_loop);
    g->front = &client_frontend;
    g->back = &worker_backend;
}

/* Room for max_clients sockets, their splice pipes while streaming, and the workers. */
static void raise_fd_limit(const struct config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
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

static int watch_listener(struct gw *g, struct listener *l, int fd, int is_uds)
{
    l->ev.ops = &client_listener_ops;
    l->fd = fd;
    l->is_uds = is_uds;
    return loop_watch(g, fd, &l->ev, EPOLLIN, 0);
}

#define UDS_RETRY_MS 1000

/* "@/tmp/kx.PORT", the name of q's Unix socket for the port, for logs. */
static const char *uds_name(int port, char *buf, size_t len)
{
    struct net_target t = {.kind = NET_UNIX_PORT, .port = port};
    struct sockaddr_un sa;
    socklen_t sl;
    if (net_uds_addr(&t, &sa, &sl))
        snprintf(buf, len, "(none)");
    else
        net_uds_name(&sa, sl, buf, len);
    return buf;
}

static void on_uds_retry(struct gw *g, struct timer *t);

/* Listen on q's Unix socket for the port. An abstract name has one owner, SO_REUSEPORT or
 * not: with reuseport another qgate of the port may hold it. This one then serves TCP only,
 * says so once, and tries again every UDS_RETRY_MS, so that when the holder stops (a restart,
 * a drain) one of the others takes the name over. -1 only if the socket cannot be watched. */
static int listen_uds_loop(struct gw *g, int retry)
{
    char name[128];
    int fd = net_listen_uds(g->port, 1024, 1);
    if (fd >= 0) {
        if (watch_listener(g, &g->listen_uds, fd, 1)) {
            log_error(NULL, "cannot watch q's Unix socket %s", uds_name(g->port, name, sizeof name));
            conn_listener_close_loop(g, &g->listen_uds);
            return -1;
        }
        if (retry)
            log_info(NULL, "listening on q's Unix socket %s: its holder released it",
                     uds_name(g->port, name, sizeof name));
        return 0;
    }
    if (fd == -1 && errno == EADDRINUSE && g->cfg.reuseport) {
        if (!retry)
            log_warn(NULL, "q's Unix socket %s is held by another process (reuseport = 1: another qgate of port %d?): "
                     "this one serves TCP clients only, and takes the socket over when it is free",
                     uds_name(g->port, name, sizeof name), g->port);
        loop_timer_arm_loop(g, &g->uds_retry_tm, g->loop.now_ms + UDS_RETRY_MS, on_uds_retry);
    } else if (fd == -1) {
        log_warn(NULL, "no Unix socket for port %d: %s", g->port, strerror(errno));
    }
    return 0;
}

static void on_uds_retry(struct gw *g, struct timer *t)
{
    (void)t;
    if (!g->draining && g->listen_uds.fd < 0 && listen_uds_loop(g, 1))
        loop_timer_arm_loop(g, &g->uds_retry_tm, g->loop.now_ms + UDS_RETRY_MS, on_uds_retry);
}

static int listen_all(struct gw *g, const struct config *cfg)
{
    int flags = NET_NONBLOCK | (cfg->reuseport ? NET_REUSEPORT : 0);
    int fd = net_listen_tcp(cfg->bind, cfg->port, 1024, flags, &g->port);
    if (fd < 0) {
        int e = errno;
        log_error(NULL, "cannot listen on %s:%d: %s%s", cfg->bind, cfg->port, net_listen_why(cfg->bind, cfg->port, e),
                  e == EADDRINUSE && cfg->reuseport
                      ? " (every process sharing a port must set reuseport = 1 and run as the same user)"
                      : "");
        return -1;
    }
    if (watch_listener(g, &g->listen_tcp, fd, 0))
        return -1;
    return cfg->unix_socket ? listen_uds_loop(g, 0) : 0;
}

static int watch_signals(struct gw *g)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file at its size limit (ulimit -f, systemd's LimitFSIZE=) fails
                               * the write with EFBIG, as a full disk does: the access log counts
                               * its lines dropped; the default action killed the gateway (helper round 15) */
    g->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    g->ev_signal.ops = &signal_ops;
    return g->sigfd < 0 ? -1 : loop_watch(g, g->sigfd, &g->ev_signal, EPOLLIN, 0);
}

static int start_pools(struct gw *g, const struct config *cfg)
{
    g->readers = pool_create("reader", g->hooks.manual_pools ? 0 : cfg->reader_threads);
    g->writers = pool_create("writer", g->hooks.manual_pools ? 0 : cfg->writer_threads);
    if (!g->readers || !g->writers)
        return -1;
    if (loop_watch_pool(g, g->readers, &g->readers_src.ev) || loop_watch_pool(g, g->writers, &g->writers_src.ev))
        return -1;
    return 0;
}

/* The messages the gateway sends workers itself. */
static int make_messages(struct gw *g)
{
    /* sync "": a worker answers it only after running everything sent before it */
    kipc_hdr_write(g->chaser, KIPC_SYNC, 0, sizeof g->chaser);
    memcpy(g->chaser + 8, "\x0a\x00\x00\x00\x00\x00", 6);
    g->no_client_err = kcodec_error_msg("qgate: no answer comes: the client of this request has gone, or sent a "
                                        "bad message", &g->no_client_err_len);
    g->unanswered_err = kcodec_error_msg("qgate: the client sent twice client_max_pending of requests and no answer",
                                         &g->unanswered_err_len);
    g->too_large_err = kcodec_error_msg("qgate: message too large (over max_message)", &g->too_large_err_len);
    return g->no_client_err && g->unanswered_err && g->too_large_err ? 0 : -1;
}

static int load_users(struct gw *g, const struct config *cfg)
{
    if (!cfg->users_file[0])
        return 0;
    char err[512];
    struct auth_db *db = auth_load(cfg->users_file, err, sizeof err);
    if (!db || !(g->auth = auth_share(db))) {
        log_error(NULL, "users file: %s", db ? "out of memory" : err);
        return -1;
    }
    log_info(NULL, "users file %s: %d users", cfg->users_file, auth_db_of(g->auth)->n);
    return 0;
}

static int open_access_log(struct gw *g)
{
    char err[1200];
    if (access_init(g, err, sizeof err)) {
        log_error(NULL, "%s", err);
        return -1;
    }
    if (g->cfg.access_log[0])
        log_info(NULL, "access log: %s", g->cfg.access_log);
    return 0;
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
    g->listen_tcp.fd = g->listen_uds.fd = g->listen_metrics.fd = g->metrics_reserve_fd = g->sigfd = g->loop.epfd = g->loop.wepfd = -1;
    TAILQ_INIT(&g->wdirty);
    TAILQ_INIT(&g->dirty);
    TAILQ_INIT(&g->backlog);
    TAILQ_INIT(&g->room_waiters);
    STAILQ_INIT(&g->closed);
    SLIST_INIT(&g->users);
    reload_init(g);
    g->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* given up when accept meets EMFILE */
    snprintf(g->config_path, sizeof g->config_path, "%s", config_path ? config_path : "");
    log_level = cfg->loglevel;
    wire(g);
    if (!(g->groups = calloc(CFG_MAX_GROUPS, sizeof *g->groups)) || loop_init(g, &phases, g->hooks.now_us, g->hooks.ctx))
        return -1;
    raise_fd_limit(cfg);
    if (listen_all(g, cfg) || watch_signals(g) || start_pools(g, cfg) || make_messages(g) || load_users(g, cfg) ||
        open_access_log(g) || report_init(g, cfg) || mhttp_init(g, cfg))
        return -1;
    for (int i = 0; i < cfg->ngroups; i++)
        reload_add_group_loop(g, &cfg->groups[i]);
    log_info(NULL, "listening on %s:%d%s", cfg->bind, g->port, g->listen_uds.fd >= 0 ? " and q's Unix socket" : "");
    return 0;
}

void gw_free(struct gw *g)
{
    g->freeing = 1;
    for (uint32_t id = 0; id < g->next_id; id++)
        if (g->tab && g->tab[id])
            conn_close_loop(g, g->tab[id], "gateway exiting");
    reload_free(g);
    for (int i = 0; g->groups && i < g->ngroups; i++) {
        struct group *grp = &g->groups[i];
        while (!TAILQ_EMPTY(&grp->workers)) {
            struct worker *w = TAILQ_FIRST(&grp->workers);
            TAILQ_REMOVE(&grp->workers, w, glink);
            worker_free_loop(&w->c); /* one that left the configuration is on the closed list */
        }
    }
    conn_reap_loop(g);
    access_close(g); /* after the closes above: their requests' records are queued too */
    mhttp_free(g);
    pool_destroy(g->readers);
    pool_destroy(g->writers);
    conn_listener_close_loop(g, &g->listen_tcp);
    conn_listener_close_loop(g, &g->listen_uds);
    if (g->sigfd >= 0)
        close(g->sigfd);
    if (g->reserve_fd >= 0)
        close(g->reserve_fd);
    loop_free(g);
    dispatch_free(g);
    free(g->no_client_err);
    free(g->too_large_err);
    free(g->unanswered_err);
    auth_unref(g->auth);
    client_users_free(g);
    free(g->groups);
    free(g->dis_marks);
    free(g->tab);
    free(g->gens);
    free(g->free_ids);
}

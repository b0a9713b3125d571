/* main.c: qgate's entry point: options, configuration, run. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "gateway.h"
#include "log.h"
#include "net.h"
#include "sdnotify.h"
#include "version.h"

static struct cfg_overrides qgate_overrides;

/* The usage text: on stdout and exit 0 when asked for (--help), else on stderr and exit 2. */
static void usage(int asked)
{
    fprintf(asked ? stdout : stderr,
            "usage: qgate [-c FILE] [--port N | -p N] [--bind ADDR] [--workers host:port,...]\n"
            "             [--loglevel L] [--check] [--print-config] [--version] [--help]\n"
            "  -c FILE          configuration (see gateway.conf.example)\n"
            "  --port N, -p N   port for q clients (q's -p); 0 picks a free port\n"
            "  --bind ADDR      address to listen on (default 0.0.0.0, as q)\n"
            "  --workers LIST   workers of the default group (the first group)\n"
            "  --loglevel L     error, warn, info or debug\n"
            "  --check          validate the configuration, the users file, the access log's\n"
            "                   directory and every worker's address (resolved), and exit\n"
            "  --print-config   print every key with its default and exit (=markdown: as a table,\n"
            "                   =man: as roff, for qgate.1); with -c FILE or overrides, every key\n"
            "                   as it would run: the defaults, then FILE, then the command line\n"
            "  --version        print the version and exit\n"
            "signals: SIGHUP re-reads the configuration file and the users file; SIGUSR1 reopens the access log; SIGTERM drains and exits 0 (a second exits at once)\n");
    exit(asked ? 0 : 2);
}

/* --check: may qgate listen on key's address (bind, metrics_bind)? It resolves, and a socket
 * binds there (on a port of the kernel's choosing: the configured one may be a running qgate's).
 * 0, or -1 with the reason on stderr (helper round 17: 999.1.1.1 passed, and starting failed). */
static int check_listen(const struct config *cfg, const char *key, const char *host)
{
    char at[300];
    int fd = net_listen_tcp(host, 0, 1, 0, NULL);
    if (fd < 0) {
        fprintf(stderr, "qgate: %s%s '%s': cannot listen there: %s\n", config_key_where(cfg, key, at, sizeof at), key,
                host, net_listen_why(host, 0, errno));
        return -1;
    }
    close(fd);
    return 0;
}

/* --check beyond the file's syntax: the users file loads, the access log can be written (as the
 * user running the check), bind and metrics_bind are addresses of this host, and every worker's
 * host resolves, as starting would need. 0, or -1 with the reason on stderr. */
static int check_deep(const struct config *cfg, int *nworkers, int *nusers)
{
    char err[512];
    *nworkers = *nusers = 0;
    if (check_listen(cfg, "bind", cfg->bind) ||
        (cfg->metrics_port && cfg->metrics_bind[0] && check_listen(cfg, "metrics_bind", cfg->metrics_bind)))
        return -1;
    if (cfg->users_file[0]) {
        struct auth_db *db = auth_load(cfg->users_file, err, sizeof err);
        if (!db) {
            char at[300]; /* (the key's line too: a file that is no users file says no line of its own) */
            fprintf(stderr, "qgate: %susers_file %s\n", config_key_where(cfg, "users_file", at, sizeof at), err);
            return -1;
        }
        *nusers = db->n;
        auth_free(db);
    }
    if (config_check_files(cfg, err, sizeof err)) {
        fprintf(stderr, "qgate: %s\n", err); /* names the key, the file and why */
        return -1;
    }
    for (int i = 0; i < cfg->ngroups; i++) {
        const struct group_cfg *g = &cfg->groups[i];
        char a[300], at[300];
        for (const char *p = g->workers; config_list_next(&p, a, sizeof a); (*nworkers)++) {
            struct net_target t;
            struct addrinfo *ai;
            const char *why = "cannot resolve";
            if (net_parse_target(a, "localhost", &t) || t.kind != NET_TCP)
                continue; /* checked by config_validate; a Unix socket may come later */
            if (net_resolve(t.host, t.port, 0, &ai, &why)) {
                fprintf(stderr, "qgate: %sgroup %s: worker '%s' does not resolve: %s\n",
                        config_where(cfg, g, g->workers_line, at, sizeof at), g->name, a, why);
                return -1;
            }
            freeaddrinfo(ai);
        }
    }
    return 0;
}

/* --check: 0 and a summary on stdout, or 1 with the reason on stderr. */
static int check_report(const struct config *cfg)
{
    int workers, users;
    if (check_deep(cfg, &workers, &users))
        return 1;
#define PLURAL(n) (n), (n) == 1 ? "" : "s"
    if (cfg->users_file[0])
        printf("qgate: configuration ok: port %d, %d group%s, %d worker%s, %d user%s%s\n", cfg->port, PLURAL(cfg->ngroups),
               PLURAL(workers), PLURAL(users), users ? "" : " (every login refused: an empty users file, as q -U's)");
    else
        printf("qgate: configuration ok: port %d, %d group%s, %d worker%s, any credentials and no admin (no users_file)\n",
               cfg->port, PLURAL(cfg->ngroups), PLURAL(workers));
    for (int i = 0; i < cfg->ngroups; i++) {
        const struct group_cfg *g = &cfg->groups[i];
        if (g->pipeline < 2 || g->pool_mode == CFG_POOL_SESSION)
            continue;
        printf("qgate: note: group %s: pipeline = %d opens %d connections to each worker. While every worker is "
               "busy, a sync request may go to a busy worker's free connection, behind ",
               g->name, g->pipeline, g->pipeline);
        if (g->pipeline_wait)
            printf("queries learned to end within %lld ms (pipeline_wait)", (long long)g->pipeline_wait);
        else
            printf("whatever it runs (pipeline_wait = 0)");
        printf(": more requests a second for small queries, but a query that turns slow holds the requests sent "
               "to its worker meanwhile. Safe for workers whose queries take a steady time; pipeline = 1 never holds "
               "one user behind another's query.\n");
    }
    return 0;
}

/* Record a command-line override; one the table cannot hold is refused, not dropped. */
static void override(int default_group, const char *key, const char *option, const char *value)
{
    if (config_override(&qgate_overrides, default_group, key, value)) {
        fprintf(stderr, "qgate: %s: value too long, or too many options\n", option);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    const char *path = "";
    int check = 0, print = 0;
    log_journal_detect(); /* under systemd, lines carry their priority for the journal */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-c") && more)
            path = argv[++i];
        else if ((!strcmp(a, "--port") || !strcmp(a, "-p")) && more)
            override(0, "port", a, argv[++i]);
        else if (!strcmp(a, "--workers") && more)
            override(1, "workers", a, argv[++i]);
        else if (!strcmp(a, "--bind") && more)
            override(0, "bind", a, argv[++i]);
        else if (!strcmp(a, "--loglevel") && more)
            override(0, "loglevel", a, argv[++i]);
        else if (!strcmp(a, "--check"))
            check = 1;
        else if (!strcmp(a, "--print-config"))
            print = 1; /* after the other options: -c FILE and overrides change what it prints */
        else if (!strcmp(a, "--print-config=markdown")) {
            config_print_markdown(stdout);
            return 0;
        } else if (!strcmp(a, "--print-config=man")) {
            config_print_man(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("qgate %s\n", QG_VERSION);
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(1);
        } else { /* said first, then the usage (at a797b26 the usage alone: helper round 24b) */
            static const char *const takes[] = {"-c", "--port", "-p", "--workers", "--bind", "--loglevel"};
            int needs = 0;
            for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++)
                needs |= !strcmp(a, takes[k]);
            if (needs)
                fprintf(stderr, "qgate: %s needs a value\n", a);
            else if (!strncmp(a, "--print-config=", 15))
                fprintf(stderr, "qgate: --print-config takes =markdown or =man, not '%s'\n", a + 15);
            else
                fprintf(stderr, "qgate: unknown option '%s'\n", a);
            usage(0);
        }
    }
    struct config *cfg = malloc(sizeof *cfg);
    char err[512];
    if (!cfg)
        return 1;
    if (print && !path[0] && !qgate_overrides.n) { /* alone: the reference, every key's default */
        free(cfg);
        config_print_reference(stdout);
        return 0;
    }
    if (print) { /* what would run, valid or not (--check says) */
        int rc = config_assemble(cfg, path, &qgate_overrides, err, sizeof err);
        if (rc)
            fprintf(stderr, "qgate: %s\n", err);
        else
            config_print_effective(cfg, stdout);
        free(cfg);
        return rc ? 1 : 0;
    }
    if (config_build(cfg, path, &qgate_overrides, err, sizeof err)) {
        fprintf(stderr, "qgate: %s\n", err);
        free(cfg);
        return 1;
    }
    if (check) {
        int rc = check_report(cfg);
        free(cfg);
        return rc;
    }
    static struct gw g;
    /* from here on, log lines go through the log thread's queue: the loop never waits on
     * stderr; at the end what is queued is written, for 2 s at most (a reader that never
     * reads does not hold the exit) */
    if (log_start(STDERR_FILENO, LOG_QUEUE_BYTES))
        fprintf(stderr, "qgate: no log thread (out of memory or threads): lines are written as they come\n");
    if (gw_init(&g, cfg, path, &qgate_overrides, NULL)) {
        gw_free(&g);
        free(cfg);
        log_stop(2000);
        fprintf(stderr, "qgate: cannot start (see the log above)\n");
        return 1;
    }
    printf("qgate listening on %s:%d\n", cfg->bind, g.port);
    fflush(stdout);
    if (sdnotify_printf("READY=1\nSTATUS=listening on %s:%d\nMAINPID=%ld", cfg->bind, g.port, (long)getpid()) < 0)
        log_warn(NULL, "NOTIFY_SOCKET: cannot tell the service manager qgate is ready: %s", strerror(errno));
    free(cfg);
    int rc = loop_run_loop(&g);
    gw_free(&g);
    log_stop(2000);
    return rc;
}

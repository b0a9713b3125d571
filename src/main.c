/* main.c: qgate's entry point: options, configuration, run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gateway.h"
#include "log.h"

static struct cfg_overrides qgate_overrides;

static void usage(void)
{
    fprintf(stderr,
            "usage: qgate [-c FILE] [--port N | -p N] [--bind ADDR] [--workers host:port,...]\n"
            "             [--loglevel L] [--check] [--print-config]\n"
            "  -c FILE          configuration (see gateway.conf.example)\n"
            "  --port N, -p N   port for q clients (q's -p); 0 picks a free port\n"
            "  --bind ADDR      address to listen on (default 0.0.0.0, as q)\n"
            "  --workers LIST   workers of the default group (the first group)\n"
            "  --loglevel L     error, warn, info or debug\n"
            "  --check          validate the configuration and exit\n"
            "  --print-config   print every key with its default and exit\n"
            "signals: SIGHUP reloads the worker set; SIGTERM drains and exits 0\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *path = "";
    int check = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-c") && more)
            path = argv[++i];
        else if ((!strcmp(a, "--port") || !strcmp(a, "-p")) && more)
            config_override(&qgate_overrides, 0, "port", argv[++i]);
        else if (!strcmp(a, "--workers") && more)
            config_override(&qgate_overrides, 1, "workers", argv[++i]);
        else if (!strcmp(a, "--bind") && more)
            config_override(&qgate_overrides, 0, "bind", argv[++i]);
        else if (!strcmp(a, "--loglevel") && more)
            config_override(&qgate_overrides, 0, "loglevel", argv[++i]);
        else if (!strcmp(a, "--check"))
            check = 1;
        else if (!strcmp(a, "--print-config")) {
            config_print_reference(stdout);
            return 0;
        } else
            usage();
    }
    struct config *cfg = malloc(sizeof *cfg);
    char err[512];
    if (!cfg)
        return 1;
    if (config_build(cfg, path, &qgate_overrides, err, sizeof err)) {
        fprintf(stderr, "qgate: %s\n", err);
        free(cfg);
        return 1;
    }
    if (check) {
        int workers = 0;
        for (int i = 0; i < cfg->ngroups; i++)
            for (const char *p = cfg->groups[i].workers; *p; p++)
                workers += *p == ',';
        printf("qgate: configuration ok: port %d, %d groups, %d workers\n", cfg->port, cfg->ngroups,
               workers + cfg->ngroups);
        free(cfg);
        return 0;
    }
    static struct gw g;
    if (gw_init(&g, cfg, path, &qgate_overrides, NULL)) {
        fprintf(stderr, "qgate: cannot start (see the log above)\n");
        gw_free(&g);
        free(cfg);
        return 1;
    }
    printf("qgate listening on %s:%d\n", cfg->bind, g.port);
    fflush(stdout);
    free(cfg);
    int rc = gw_run_loop(&g);
    gw_free(&g);
    return rc;
}

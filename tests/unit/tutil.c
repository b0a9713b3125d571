/* tutil.c: helpers shared by the unit tests. */
#include "tutil.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

const char *tutil_testdata_dir(void)
{
    const char *d = getenv("QG_TESTDATA");
    return d && *d ? d : "tests/data";
}

uint8_t *tutil_unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

static void chomp(char *s)
{
    size_t l = strlen(s);
    while (l && (s[l - 1] == '\n' || s[l - 1] == '\r'))
        s[--l] = 0;
}

int tutil_load_vectors(const char *name, struct qvec **out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/qpython/%s", tutil_testdata_dir(), name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0, cap = 0;
    struct qvec *v = NULL;
    char *expr = NULL, *hex = NULL;
    size_t ecap = 0, hcap = 0;
    while (getline(&expr, &ecap, f) > 0 && getline(&hex, &hcap, f) > 0) {
        chomp(expr);
        chomp(hex);
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            v = realloc(v, (size_t)cap * sizeof *v);
        }
        v[n].expr = strdup(expr);
        v[n].body = tutil_unhex(hex, &v[n].len);
        n++;
    }
    free(expr);
    free(hex);
    fclose(f);
    *out = v;
    return n;
}

void tutil_free_vectors(struct qvec *v, int n)
{
    for (int i = 0; i < n; i++) {
        free(v[i].expr);
        free(v[i].body);
    }
    free(v);
}

uint64_t tutil_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void tutil_gw_config(struct config *cfg)
{
    config_defaults(cfg);
    cfg->port = 0;
    strcpy(cfg->bind, "127.0.0.1");
    cfg->unix_socket = 0;
    cfg->loglevel = LOG_ERROR;
    config_group(cfg, "main"); /* no workers: the tests add their own on socketpairs */
}

int tutil_mkfifo(char *tmpl)
{
    int fd = mkstemp(tmpl); /* (a name nobody has: taken, then given back for the FIFO) */
    if (fd < 0)
        return -1;
    close(fd);
    unlink(tmpl);
    return mkfifo(tmpl, 0600);
}

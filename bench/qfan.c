/* qfan.c: the fan-out benchmark's client. One connection per address; COUNT times, one after
 * another (or for --seconds S), the query QUERY fanned out to every worker, and the elapsed
 * time of each until the merged value is in hand (decoded), one CSV line each, as qclient
 * writes them (t_us,mode,status,rows,latency_us; mode "fanout").
 *   --via qgate  -g GW      (`.qgate.all; `GROUP; QUERY) to qgate, merged by it
 *   --via gw30   -g GW      (.gateway.all; QUERY) to the -30! model, razed on its one thread
 *   --via direct -g W1,W2.. QUERY to each worker at once, razed here (kmerge.c, as qgate does)
 * Times are of the whole round trip, decoding of the answer included, as a q client pays it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "kmerge.h"
#include "qconn.h"
#include "util.h"

#define MAXW 16

static void usage(void)
{
    fprintf(stderr, "usage: qfan --via qgate|gw30|direct -g ADDR[,ADDR...] [--group G] [--count N | --seconds S]\n"
                    "            [--csv FILE] QUERY\n");
    exit(2);
}

static K decode_msg(const struct qconn *c)
{
    K x = NULL;
    struct kerr e;
    if (kcodec_decode(c->buf + 8, c->len - 8, c->hdr.le, NULL, &x, &e) != QG_OK)
        return NULL;
    return x;
}

static int64_t rows_of(const K x)
{
    if (!x)
        return -1;
    if (x->t == KT_TABLE)
        return kK(kK(kK(x)[0])[1])[0]->n;
    return x->t >= 0 && x->t < 20 ? x->n : 1;
}

int main(int argc, char **argv)
{
    const char *via = NULL, *addrs = NULL, *group = "main", *csv = NULL, *query = NULL;
    long count = 10;
    double seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--via") && i + 1 < argc)
            via = argv[++i];
        else if (!strcmp(argv[i], "-g") && i + 1 < argc)
            addrs = argv[++i];
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            if (arg_double(argv[++i], &seconds, 0))
                usage();
            count = 1L << 40;
        } else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
            if (arg_long(argv[++i], &count) || count < 1)
                usage();
        } else if (argv[i][0] == '-')
            usage();
        else
            query = argv[i];
    }
    if (!via || !addrs || !query || (strcmp(via, "qgate") && strcmp(via, "gw30") && strcmp(via, "direct")))
        usage();
    struct qconn c[MAXW];
    int n = 0;
    char *list = strdup(addrs);
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a && n < MAXW; a = strtok_r(NULL, ",", &save)) {
        int rc = qconn_open(&c[n], a, "qfan:x", 10000);
        if (rc) {
            fprintf(stderr, "qfan: %s: %s\n", a, qconn_strerror(rc));
            return 1;
        }
        n++;
    }
    free(list);
    int direct = !strcmp(via, "direct");
    K q;
    if (direct) {
        q = k_str(query, strlen(query));
    } else if (!strcmp(via, "qgate")) {
        q = k_list(3);
        kK(q)[0] = k_sym(".qgate.all");
        kK(q)[1] = k_sym(group);
        kK(q)[2] = k_str(query, strlen(query));
    } else {
        q = k_list(2);
        kK(q)[0] = k_sym(".gateway.all");
        kK(q)[1] = k_str(query, strlen(query));
    }
    size_t len;
    uint8_t *m = kcodec_encode_msg(q, KIPC_SYNC, &len);
    k_free(q);
    FILE *out = csv ? fopen(csv, "w") : stdout;
    if (!m || !out)
        return 1;
    fprintf(out, "t_us,mode,status,rows,latency_us\n");
    int64_t t0 = mono_ns();
    for (long k = 0; k < count && (seconds <= 0 || mono_ns() - t0 < (int64_t)(seconds * 1e9)); k++) {
        int64_t t = mono_ns();
        K x = NULL, parts[MAXW] = {0};
        int bad = 0;
        for (int i = 0; i < (direct ? n : 1); i++) /* every worker at once */
            bad |= qconn_send(&c[i], m, len) != 0;
        for (int i = 0; !bad && i < (direct ? n : 1); i++)
            bad |= qconn_recv(&c[i], 0) != 0 || !(parts[i] = decode_msg(&c[i]));
        if (!bad)
            x = direct ? kmerge(parts, n, 0) : parts[0];
        else
            for (int i = 0; i < n; i++)
                k_free(parts[i]);
        int64_t e = mono_ns() - t;
        fprintf(out, "%lld,fanout,%s,%lld,%lld\n", (long long)((t - t0) / 1000),
                !x ? "failed" : x->t == KT_ERROR ? "error" : "ok", (long long)rows_of(x), (long long)(e / 1000));
        fflush(out);
        k_free(x);
    }
    free(m);
    for (int i = 0; i < n; i++)
        qconn_close(&c[i]);
    if (out != stdout)
        fclose(out);
    return 0;
}

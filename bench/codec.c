/* codec.c: throughput of validate, deserialise, serialise, compress and decompress, each
 * beside memcpy of the same bytes in the same run (the machines are shared and noisy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"
#include "tbl2.h"
#include "util.h"

static int reps = 3;

static double now_s(void) { return (double)mono_ns() / 1e9; }

/* The 4-column numeric table: ([] id:til n; price:...; size:...; ts:...), trade-like data. */
static K numeric_table(int64_t n)
{
    const char *names[] = {"id", "price", "size", "ts"};
    K id = k_vec(KT_LONG, n), px = k_vec(KT_FLOAT, n), sz = k_vec(KT_INT, n), ts = k_vec(KT_TIMESTAMP, n);
    uint64_t s = 12345;
    double p = 100.0;
    int64_t t = 820454400000000000LL; /* 2026.01.01D00:00 */
    for (int64_t i = 0; i < n; i++) {
        xorshift64(&s);
        kJ(id)[i] = i;
        p += ((int)(s % 3) - 1) * 0.01;
        kF(px)[i] = (double)(int64_t)(p * 100 + 0.5) / 100;
        kI(sz)[i] = 100 * (int32_t)(1 + (s >> 8) % 10);
        t += (int64_t)((s >> 16) % 1000) * 1000;
        kJ(ts)[i] = t;
    }
    K cols = k_list(4);
    kK(cols)[0] = id;
    kK(cols)[1] = px;
    kK(cols)[2] = sz;
    kK(cols)[3] = ts;
    return k_table(k_dict(k_symv(4, names), cols));
}

struct result {
    const char *what;
    double secs;
    const char *note;
};

static void report(const char *name, size_t bytes, struct result *r, int n)
{
    double base = r[0].secs;
    printf("\n%s: %.1f MB message\n", name, (double)bytes / 1e6);
    printf("  %-12s %10s %10s  %s\n", "operation", "MB/s", "x memcpy", "");
    for (int i = 0; i < n; i++) {
        if (r[i].secs <= 0) {
            printf("  %-12s %10s %10s  %s\n", r[i].what, "-", "-", r[i].note ? r[i].note : "");
            continue;
        }
        printf("  %-12s %10.0f %10.2f  %s\n", r[i].what, (double)bytes / 1e6 / r[i].secs,
               base / r[i].secs, r[i].note ? r[i].note : "");
    }
}

#define BEST(var, body)                              \
    do {                                             \
        var = 1e9;                                   \
        for (int rep_ = 0; rep_ < reps; rep_++) {    \
            double t0_ = now_s();                    \
            body;                                    \
            double d_ = now_s() - t0_;               \
            if (d_ < var)                            \
                var = d_;                            \
        }                                            \
    } while (0)

static void bench_message(const char *name, const uint8_t *msg, size_t len)
{
    struct result r[6] = {{"memcpy", 0, NULL}, {"validate", 0, NULL}, {"deserialise", 0, "validate + build K objects (free not timed)"},
                          {"serialise", 0, "size + write"}, {"compress", 0, NULL}, {"decompress", 0, NULL}};
    uint8_t *dst = malloc(len);
    memset(dst, 1, len);
    BEST(r[0].secs, memcpy(dst, msg, len));
    volatile int sink = dst[len / 2];
    (void)sink;

    struct kerr e;
    BEST(r[1].secs, if (kvalidate_check(msg + 8, len - 8, 1, NULL, &e) != QG_OK) {
        fprintf(stderr, "validate failed: %s at %zu\n", e.why, e.off);
        exit(1);
    });

    K x = NULL;
    r[2].secs = 1e9;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        if (kcodec_decode(msg + 8, len - 8, 1, NULL, &x, &e) != QG_OK)
            exit(1);
        double d = now_s() - t0;
        if (d < r[2].secs)
            r[2].secs = d;
        if (i + 1 < reps)
            k_free(x);
    }

    BEST(r[3].secs, {
        size_t n = kcodec_size(x);
        kcodec_write(x, dst + 8, 1);
        if (n != len - 8)
            exit(1);
    });
    if (memcmp(dst + 8, msg + 8, len - 8)) {
        fprintf(stderr, "serialise differs from the original\n");
        exit(1);
    }
    k_free(x);

    uint8_t *z = malloc(len / 2);
    size_t zl = 0;
    BEST(r[4].secs, zl = kzip_compress(msg, len, z));
    static char note[96];
    if (zl) {
        snprintf(note, sizeof note, "%.1f MB -> %.1f MB (%.0f%%)", (double)len / 1e6, (double)zl / 1e6,
                 100.0 * (double)zl / (double)len);
        r[4].note = note;
        const char *why;
        BEST(r[5].secs, if (kzip_decompress(z, zl, dst, len, &why) != QG_OK) exit(1));
        if (memcmp(dst, msg, len)) {
            fprintf(stderr, "decompress differs\n");
            exit(1);
        }
        r[5].note = "MB/s of uncompressed output";
    } else {
        r[4].note = "not under half: q sends it plain";
        r[5].note = "nothing to decompress";
    }
    report(name, len, r, 6);
    free(z);
    free(dst);
}

int main(int argc, char **argv)
{
    int64_t rows = 10000000, nrows = 5000000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--numeric-rows") && i + 1 < argc)
            nrows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-codec [--rows N] [--numeric-rows N] [--reps R]\n");
            return 2;
        }
    }
    printf("bench-codec: best of %d runs each; ratios are against memcpy of the same bytes in this run\n", reps);
    struct tbl2 t;
    if (tbl2_build(&t, rows, 42))
        return 1;
    size_t len;
    uint8_t *m = tbl2_message(&t, rows, &len);
    tbl2_free(&t);
    char name[64];
    snprintf(name, sizeof name, "tbl2 (%lld rows of 8-10 letter strings)", (long long)rows);
    bench_message(name, m, len);
    free(m);

    K nt = numeric_table(nrows);
    m = kcodec_encode_msg(nt, KIPC_RESPONSE, &len);
    k_free(nt);
    snprintf(name, sizeof name, "numeric table (%lld rows: long, float, int, timestamp)", (long long)nrows);
    bench_message(name, m, len);
    free(m);
    return 0;
}

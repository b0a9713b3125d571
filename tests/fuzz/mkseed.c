/* mkseed.c: writes the seed corpora of the fuzz targets (run by tests/fuzz/seed.sh).
 *   mkseed TESTDATA_DIR OUT_DIR
 * Reads the real-q vectors TESTDATA_DIR/qpython/{QExpressions3,QCompressedExpressions3}.out
 * (pairs of lines: q expression, hex of the serialised body without its 8-byte header) and
 * writes OUT_DIR/{codec,frame,kzip,handshake}/seed-*. Without the vectors it builds a few
 * objects itself and says so. Not a fuzzer: built without -fsanitize=fuzzer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kcodec.h"
#include "kipc.h"
#include "kzip.h"

struct blob {
    uint8_t *p;
    size_t n;
};

struct blobs {
    struct blob *v;
    int n, cap;
};

static const char *outdir;
static int nwritten;

static void die(const char *what)
{
    fprintf(stderr, "mkseed: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void push(struct blobs *b, uint8_t *p, size_t n)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = realloc(b->v, (size_t)b->cap * sizeof *b->v);
        if (!b->v)
            die("realloc");
    }
    b->v[b->n].p = p;
    b->v[b->n].n = n;
    b->n++;
}

/* Write OUT/kind/seed-name-N with the concatenation of up to three pieces. */
static void emit3(const char *kind, const char *name, int i, const void *a, size_t an, const void *b,
                  size_t bn, const void *c, size_t cn)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", outdir, kind);
    if (mkdir(path, 0777) && errno != EEXIST)
        die(path);
    snprintf(path, sizeof path, "%s/%s/seed-%s-%03d", outdir, kind, name, i);
    FILE *f = fopen(path, "wb");
    if (!f)
        die(path);
    if ((an && fwrite(a, 1, an, f) != an) || (bn && fwrite(b, 1, bn, f) != bn) ||
        (cn && fwrite(c, 1, cn, f) != cn) || fclose(f))
        die(path);
    nwritten++;
}

static void emit(const char *kind, const char *name, int i, const void *a, size_t an)
{
    emit3(kind, name, i, a, an, NULL, 0, NULL, 0);
}

static int unhex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Load the bodies of a vectors file; -1 if it cannot be opened. */
static int load(const char *dir, const char *name, struct blobs *out)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qpython/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t l;
    int lineno = 0;
    while ((l = getline(&line, &cap, f)) > 0) {
        if (lineno++ % 2 == 0)
            continue; /* the q expression */
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = 0;
        size_t n = (size_t)l / 2;
        uint8_t *b = malloc(n ? n : 1);
        if (!b)
            die("malloc");
        for (size_t i = 0; i < n; i++) {
            int hi = unhex_digit(line[2 * i]), lo = unhex_digit(line[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "mkseed: %s:%d: not hex\n", path, lineno);
                exit(1);
            }
            b[i] = (uint8_t)(hi << 4 | lo);
        }
        push(out, b, n);
    }
    free(line);
    fclose(f);
    return 0;
}

static void push_obj(struct blobs *b, K x)
{
    if (!x)
        die("k object");
    size_t n = kcodec_size(x);
    uint8_t *p = malloc(n);
    if (!p)
        die("malloc");
    kcodec_write(x, p, 1);
    k_free(x);
    push(b, p, n);
}

/* Objects built here when the real-q vectors are absent. */
static void builtin_objects(struct blobs *b)
{
    K j = k_atom(-KT_LONG);
    j->j = 42;
    push_obj(b, j);
    push_obj(b, k_sym("quick"));
    push_obj(b, k_str("quick brown fox", 15));
    push_obj(b, k_err("type"));
    push_obj(b, k_lambda("", "{x+y}"));
    push_obj(b, k_prim(KT_UNARY, 0));
    const char *syms[] = {"the", "quick", "brown", "fox"};
    push_obj(b, k_symv(4, syms));
    K v = k_vec(KT_LONG, 3);
    for (int i = 0; i < 3; i++)
        kJ(v)[i] = i + 1;
    push_obj(b, v);
    K l = k_list(3);
    kK(l)[0] = k_sym("one");
    kK(l)[1] = k_str("456", 3);
    kK(l)[2] = k_vec(KT_FLOAT, 2);
    push_obj(b, l);
    push_obj(b, k_dict(k_symv(2, syms), k_symv(2, syms + 2)));
    const char *names[] = {"name", "iq"};
    K cols = k_list(2);
    kK(cols)[0] = k_symv(3, syms + 1);
    kK(cols)[1] = k_vec(KT_INT, 3);
    push_obj(b, k_table(k_dict(k_symv(2, names), cols)));
}

static void frame_of(uint8_t hdr[8], int type, int compressed, size_t total)
{
    kipc_hdr_write(hdr, (enum kipc_msgtype)type, compressed, total);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mkseed TESTDATA_DIR OUT_DIR\n");
        return 2;
    }
    const char *testdata = argv[1];
    outdir = argv[2];
    if (mkdir(outdir, 0777) && errno != EEXIST)
        die(outdir);

    struct blobs plain = {0}, zipped = {0};
    int have_plain = load(testdata, "QExpressions3.out", &plain) == 0;
    int have_zipped = load(testdata, "QCompressedExpressions3.out", &zipped) == 0;
    if (!have_plain || !have_zipped)
        printf("seed: %s/qpython absent or incomplete: seeding from objects built in mkseed.c instead%s\n",
               testdata, have_zipped ? "" : " (no real-q compressed vectors)");
    if (!have_plain)
        builtin_objects(&plain);

    /* kzip: q's compressed vectors behind their header; their plain bodies join the others */
    for (int i = 0; i < zipped.n; i++) {
        size_t total = KIPC_HDR_LEN + zipped.v[i].n;
        uint8_t hdr[8];
        frame_of(hdr, KIPC_RESPONSE, 1, total);
        emit3("kzip", "q", i, hdr, 8, zipped.v[i].p, zipped.v[i].n, NULL, 0);
        emit3("frame", "qzip", i, hdr, 8, zipped.v[i].p, zipped.v[i].n, NULL, 0);
        uint8_t *c = malloc(total);
        if (!c)
            die("malloc");
        memcpy(c, hdr, 8);
        memcpy(c + 8, zipped.v[i].p, zipped.v[i].n);
        size_t n = kzip_uncompressed_len(c, total);
        uint8_t *m = n >= 9 ? malloc(n) : NULL;
        const char *why;
        if (m && kzip_decompress(c, total, m, n, &why) == QG_OK) {
            uint8_t *body = malloc(n - 8);
            if (!body)
                die("malloc");
            memcpy(body, m + 8, n - 8);
            push(&plain, body, n - 8);
        } else {
            fprintf(stderr, "mkseed: compressed vector %d does not decompress\n", i);
        }
        free(m);
        free(c);
    }

    uint8_t le = 1;
    for (int i = 0; i < plain.n; i++) {
        const struct blob *b = &plain.v[i];
        /* codec: byte-order byte, then the body; and the big-endian re-encoding */
        emit3("codec", "le", i, &le, 1, b->p, b->n, NULL, 0);
        K x;
        struct kerr e;
        if (kcodec_decode(b->p, b->n, 1, NULL, &x, &e) == QG_OK) {
            uint8_t *be = malloc(b->n ? b->n : 1);
            if (!be)
                die("malloc");
            kcodec_write(x, be, 0);
            uint8_t zero = 0, intern = 2;
            emit3("codec", "be", i, &zero, 1, be, b->n, NULL, 0);
            if (i % 8 == 0)
                emit3("codec", "intern-be", i, &intern, 1, be, b->n, NULL, 0);
            free(be);
            k_free(x);
        } else {
            fprintf(stderr, "mkseed: vector %d does not decode: %s at %zu\n", i, e.why, e.off);
        }

        /* frame: each body as a message, types in turn */
        uint8_t hdr[8];
        frame_of(hdr, i % 3, 0, 8 + b->n);
        emit3("frame", "one", i, hdr, 8, b->p, b->n, NULL, 0);
        /* four messages in a row, the last one cut short */
        if (i % 4 == 0 && i + 3 < plain.n) {
            size_t tot = 0;
            for (int k = 0; k < 4; k++)
                tot += 8 + plain.v[i + k].n;
            uint8_t *s = malloc(tot), *w = s;
            if (!s)
                die("malloc");
            for (int k = 0; k < 4; k++) {
                frame_of(w, KIPC_SYNC, 0, 8 + plain.v[i + k].n);
                memcpy(w + 8, plain.v[i + k].p, plain.v[i + k].n);
                w += 8 + plain.v[i + k].n;
            }
            emit("frame", "four", i, s, tot);
            emit("frame", "cut", i, s, tot - 1 - (size_t)(i % 5));
            free(s);
        }

        /* kzip: the body as a list of copies, over 2000 bytes, compressed as q would */
        size_t copies = 2001 / (b->n ? b->n : 1) + 1;
        size_t t = 8 + 6 + copies * b->n;
        uint8_t *m = malloc(t), *z = malloc(t / 2);
        if (!m || !z)
            die("malloc");
        frame_of(m, KIPC_RESPONSE, 0, t);
        m[8] = KT_LIST;
        m[9] = 0;
        m[10] = (uint8_t)copies;
        m[11] = (uint8_t)(copies >> 8);
        m[12] = (uint8_t)(copies >> 16);
        m[13] = (uint8_t)(copies >> 24);
        for (size_t k = 0; k < copies; k++)
            memcpy(m + 14 + k * b->n, b->p, b->n);
        size_t zl = kzip_compress(m, t, z);
        if (zl)
            emit("kzip", "made", i, z, zl);
        if (i % 10 == 0) /* a few plain ones for the compressor round trip */
            emit("kzip", "plain", i, m + 8, t - 8);
        free(m);
        free(z);
    }

    /* handshake: what clients send, and the near misses */
    static const struct {
        const char *s;
        size_t n;
    } hs[] = {
#define HS(lit) {lit, sizeof lit - 1}
        HS("user:pass\x03\0"),
        HS("user:pass\x06\0"),
        HS("user:pass\0"),
        HS("user\x03\0"),
        HS("user\0"),
        HS(":pass\x03\0"),
        HS("\x03\0"),
        HS("\0"),
        HS("a:b:c\x01\0"),
        HS("kdb:p\x1f\0"),
        HS("user:pass \0"),
        HS("user:pass\x03"),
        HS("user:pass\x03\0\x01\x01\0\0\x0e\0\0\0\x0a\0\x01\0\0\0" "1"),
#undef HS
    };
    for (int i = 0; i < (int)(sizeof hs / sizeof hs[0]); i++)
        emit("handshake", "hs", i, hs[i].s, hs[i].n);
    char longhs[1100];
    memset(longhs, 'u', sizeof longhs);
    longhs[600] = ':';
    longhs[1021] = 3;
    longhs[1022] = 0;
    emit("handshake", "long", 0, longhs, 1023); /* NUL at the last byte allowed */
    longhs[1023] = 3;
    longhs[1022] = 'u';
    longhs[1024] = 0;
    emit("handshake", "long", 1, longhs, 1025); /* NUL one past the cap */
    emit("handshake", "long", 2, longhs, 1024); /* no NUL yet, at the cap */

    printf("seed: %d seed inputs written to %s\n", nwritten, outdir);
    for (int i = 0; i < plain.n; i++)
        free(plain.v[i].p);
    for (int i = 0; i < zipped.n; i++)
        free(zipped.v[i].p);
    free(plain.v);
    free(zipped.v);
    return 0;
}

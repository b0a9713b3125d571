/* fuzz_codec.c: libFuzzer target for the validator, the deserialiser and the serialiser.
 * Input: byte 0 chooses the options, the rest is a message body (no header).
 *   bit 0: byte order (1 = little-endian, 0 = big-endian)
 *   bit 1: decode with an interning hook (symbols point at interned text, as in q)
 * Checks: kvalidate_check accepts exactly when kcodec_decode succeeds; on failure the reason
 * is set and its offset lies inside the body; on success kcodec_size of the tree is the body
 * length and kcodec_write in the same byte order reproduces the body byte for byte (into a
 * buffer of exactly that size, so a write past it is caught); kcodec_is_error agrees. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "check.h"

/* A per-input intern table (open addressing, FNV-1a): every distinct symbol is copied once
 * and freed after the input. */
struct interns {
    char **slot;
    size_t n, cap; /* cap: a power of two, 0 before the first symbol */
};

static size_t hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return (size_t)h;
}

static int grow(struct interns *t)
{
    size_t nc = t->cap ? t->cap * 2 : 64;
    char **ns = calloc(nc, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i]) {
            size_t j = hash(t->slot[i], strlen(t->slot[i])) & (nc - 1);
            while (ns[j])
                j = (j + 1) & (nc - 1);
            ns[j] = t->slot[i];
        }
    free(t->slot);
    t->slot = ns;
    t->cap = nc;
    return 0;
}

static const char *intern(void *ctx, const char *s, size_t len)
{
    struct interns *t = ctx;
    if (2 * (t->n + 1) > t->cap && grow(t))
        return NULL;
    size_t j = hash(s, len) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (!strncmp(t->slot[j], s, len) && t->slot[j][len] == 0)
            return t->slot[j];
    char *d = malloc(len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = 0;
    t->n++;
    return t->slot[j] = d;
}

static void interns_free(struct interns *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slot[i]);
    free(t->slot);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int le = data[0] & 1, use_intern = (data[0] >> 1) & 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;

    struct interns tab = {0};
    struct kcodec_opts opts = {.max_depth = 0, .intern = use_intern ? intern : NULL, .intern_ctx = &tab};

    struct kerr e = {0};
    qg_status v = kvalidate_check(p, n, le, &opts, &e);
    K x = (K)(uintptr_t)1;
    struct kerr e2 = {0};
    qg_status d = kcodec_decode(p, n, le, &opts, &x, &e2);

    if (v != QG_OK) {
        CHECK(v == QG_ERR);
        CHECK(e.why && *e.why && e.off <= n);
        CHECK(d == QG_ERR && x == NULL);
        CHECK(e2.why == e.why && e2.off == e.off);
        interns_free(&tab);
        return 0;
    }
    CHECK(d == QG_OK && x != NULL);

    size_t sz = kcodec_size(x);
    CHECK(sz == n);
    uint8_t *out = malloc(sz ? sz : 1);
    CHECK(out);
    uint8_t *end = kcodec_write(x, out, le);
    CHECK(end == out + sz);
    if (memcmp(out, p, n)) {
        size_t i = 0;
        while (out[i] == p[i])
            i++;
        fprintf(stderr, "fuzz_codec: re-encoding differs at body offset %zu: 0x%02x, input 0x%02x\n", i,
                out[i], p[i]);
        abort();
    }
    /* the other byte order must validate too, and decode to the same bytes once swapped back */
    uint8_t *other = malloc(sz ? sz : 1);
    CHECK(other);
    CHECK(kcodec_write(x, other, !le) == other + sz);
    K y = NULL;
    CHECK(kcodec_decode(other, sz, !le, NULL, &y, NULL) == QG_OK);
    CHECK(kcodec_size(y) == sz);
    CHECK(kcodec_write(y, out, le) == out + sz);
    CHECK(!memcmp(out, p, n));
    k_free(y);
    free(other);

    const char *text;
    size_t tlen;
    if (kcodec_is_error(p, n, &text, &tlen)) {
        CHECK(x->t == KT_ERROR);
        CHECK(tlen == strlen(x->s) && !memcmp(text, x->s, tlen));
        CHECK((const uint8_t *)text == p + 1 && tlen + 2 == n);
    } else {
        CHECK(x->t != KT_ERROR);
    }

    free(out);
    k_free(x);
    interns_free(&tab);
    return 0;
}

/* kfmt.c: a short q-like text of a K object, for the bench tools and tests. */
#include "kfmt.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct out {
    char *p;
    size_t left;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    if (o->left <= 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p, o->left, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t w = (size_t)n < o->left ? (size_t)n : o->left - 1;
    o->p += w;
    o->left -= w;
}

static void item(struct out *o, int t, const uint8_t *d)
{
    int64_t j;
    int32_t i;
    int16_t h;
    double f;
    float e;
    switch (t) {
    case KT_BOOL: put(o, "%d", d[0]); break;
    case KT_BYTE: put(o, "%02x", d[0]); break;
    case KT_SHORT: memcpy(&h, d, 2); h == INT16_MIN ? put(o, "0N") : put(o, "%d", h); break;
    case KT_INT: case KT_MONTH: case KT_DATE: case KT_MINUTE: case KT_SECOND: case KT_TIME:
        memcpy(&i, d, 4);
        i == INT32_MIN ? put(o, "0N") : put(o, "%d", i);
        break;
    case KT_LONG: case KT_TIMESTAMP: case KT_TIMESPAN:
        memcpy(&j, d, 8);
        j == INT64_MIN ? put(o, "0N") : put(o, "%" PRId64, j);
        break;
    case KT_REAL: memcpy(&e, d, 4); isnan(e) ? put(o, "0N") : put(o, "%g", (double)e); break;
    case KT_FLOAT: case KT_DATETIME:
        memcpy(&f, d, 8);
        isnan(f) ? put(o, "0n") : put(o, "%g", f);
        break;
    case KT_GUID:
        for (int k = 0; k < 16; k++)
            put(o, "%02x%s", d[k], k == 3 || k == 5 || k == 7 || k == 9 ? "-" : "");
        break;
    default: put(o, "?"); break;
    }
}

#define KFMT_ITEMS 64 /* the items of a vector or list shown, then ".." (.qgate.totals[] has over 30 keys) */

static const char suffix[20] = {[KT_BOOL] = 'b', [KT_SHORT] = 'h', [KT_INT] = 'i', [KT_REAL] = 'e'};

static void fmt(struct out *o, const K x)
{
    int t = x->t;
    if (t == KT_ERROR) {
        put(o, "'%s", x->s);
    } else if (t == -KT_SYM) {
        put(o, "`%s", x->s);
    } else if (t == -KT_CHAR) {
        put(o, "\"%c\"", x->g);
    } else if (t < 0) {
        item(o, -t, x->u);
        if (suffix[-t])
            put(o, "%c", suffix[-t]);
    } else if (t == KT_CHAR) {
        put(o, "\"%.*s\"", (int)x->n, kC(x));
    } else if (t == KT_SYM) {
        if (x->n == 0)
            put(o, "`symbol$()");
        if (x->n == 1)
            put(o, ",");
        for (int64_t k = 0; k < x->n && k < KFMT_ITEMS; k++)
            put(o, "`%s", kS(x)[k]);
        if (x->n > KFMT_ITEMS)
            put(o, "..");
    } else if (t > 0 && t < 20) {
        if (x->n == 1)
            put(o, ",");
        if (x->n == 0)
            put(o, "()");
        int sz = ktype_size(t);
        for (int64_t k = 0; k < x->n && k < KFMT_ITEMS; k++) {
            if (k && t != KT_BOOL) /* (q prints 01b, helper round 36a) */
                put(o, " ");
            item(o, t, kG(x) + k * sz);
        }
        if (x->n > KFMT_ITEMS)
            put(o, " ..");
        if (x->n && suffix[t])
            put(o, "%c", suffix[t]);
    } else if (t == KT_LIST && x->n == 1) {
        put(o, ",");
        fmt(o, kK(x)[0]);
    } else if (t == KT_LIST) {
        put(o, "(");
        for (int64_t k = 0; k < x->n && k < KFMT_ITEMS; k++) {
            if (k)
                put(o, ";");
            fmt(o, kK(x)[k]);
        }
        if (x->n > KFMT_ITEMS)
            put(o, ";..");
        put(o, ")");
    } else if (t == KT_TABLE) {
        K d = kK(x)[0], names = kK(d)[0], cols = kK(d)[1];
        int64_t rows = cols->n ? kK(cols)[0]->n : 0;
        put(o, "table[%lld]", (long long)rows);
        for (int64_t k = 0; k < names->n; k++)
            put(o, " `%s", kS(names)[k]);
        for (int64_t k = 0; k < cols->n; k++) { /* (each elided past KFMT_ITEMS; up to 5 rows
                                                  * before helper round 36b read a 14-row
                                                  * .qgate.clients[] as empty) */
            put(o, " | ");
            fmt(o, kK(cols)[k]);
        }
    } else if (t == KT_DICT || t == KT_SORTED_DICT) {
        fmt(o, kK(x)[0]);
        put(o, "!");
        fmt(o, kK(x)[1]);
    } else if (t == KT_LAMBDA) {
        put(o, "%.*s", (int)kK(x)[0]->n, kC(kK(x)[0]));
    } else if (t == KT_UNARY && x->g == 0) {
        put(o, "::");
    } else {
        put(o, "<type %d>", t);
    }
}

void kfmt(const K x, char *buf, size_t len)
{
    struct out o = {buf, len};
    if (len)
        buf[0] = 0;
    fmt(&o, x);
}

/* kcodec.c: K objects: construction, decoding either byte order (of input kvalidate.c
 * accepted), encoding. */
#include "kcodec.h"
#include "kipc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kcodec assumes a little-endian host");

const int8_t ktype_sizes[20] = {
    [KT_BOOL] = 1, [KT_GUID] = 16, [KT_BYTE] = 1, [KT_SHORT] = 2, [KT_INT] = 4, [KT_LONG] = 8,
    [KT_REAL] = 4, [KT_FLOAT] = 8, [KT_CHAR] = 1, [KT_SYM] = 0, [KT_TIMESTAMP] = 8,
    [KT_MONTH] = 4, [KT_DATE] = 4, [KT_DATETIME] = 8, [KT_TIMESPAN] = 8, [KT_MINUTE] = 4,
    [KT_SECOND] = 4, [KT_TIME] = 4,
};

int ktype_basic(int t) { return t >= 1 && t <= 19 && t != 3; }
static int is_basic(int t) { return ktype_basic(t); }
static int has_kids(int t)
{
    return t == KT_LIST || t == KT_TABLE || t == KT_DICT || t == KT_SORTED_DICT ||
           t == KT_LAMBDA || (t >= KT_PROJECTION && t <= KT_EACHLEFT);
}

int ktype_valid(int t)
{
    return t == KT_LIST || is_basic(t) || is_basic(-t) || t == KT_ERROR ||
           (t >= KT_TABLE && t <= KT_EACHLEFT) || t == KT_SORTED_DICT;
}

/* ---- construction ---------------------------------------------------------------------- */

static K k_alloc(int8_t t, int64_t n, size_t data)
{
    K x = calloc(1, sizeof(struct k0) + data);
    if (!x)
        return NULL;
    x->t = t;
    x->n = n;
    return x;
}

K k_atom(int8_t t) { return k_alloc(t, 1, 0); }

K k_vec(int8_t t, int64_t n)
{
    QG_ASSERT(is_basic(t) && t != KT_SYM && n >= 0);
    return k_alloc(t, n, (size_t)n * (size_t)ktype_size(t));
}

K k_compound(int8_t t, int64_t n) { return k_alloc(t, n, (size_t)n * sizeof(K)); }
K k_list(int64_t n) { return k_compound(KT_LIST, n); }

static K k_text(int8_t t, const char *s, size_t extra_kids)
{
    size_t len = strlen(s);
    K x = k_alloc(t, (int64_t)extra_kids, extra_kids * sizeof(K) + len + 1);
    if (!x)
        return NULL;
    char *d = (char *)x->data + extra_kids * sizeof(K);
    memcpy(d, s, len + 1);
    x->s = d;
    return x;
}

K k_sym(const char *s) { return k_text(-KT_SYM, s, 0); }
K k_err(const char *msg) { return k_text(KT_ERROR, msg, 0); }

K k_symv(int64_t n, const char *const *syms)
{
    size_t text = 0;
    for (int64_t i = 0; i < n; i++)
        text += strlen(syms[i]) + 1;
    K x = k_alloc(KT_SYM, n, (size_t)n * sizeof(char *) + text);
    if (!x)
        return NULL;
    char *d = (char *)x->data + (size_t)n * sizeof(char *);
    for (int64_t i = 0; i < n; i++) {
        size_t l = strlen(syms[i]) + 1;
        memcpy(d, syms[i], l);
        kS(x)[i] = d;
        d += l;
    }
    return x;
}

K k_str(const char *s, size_t len)
{
    K x = k_alloc(KT_CHAR, (int64_t)len, len);
    if (x && len)
        memcpy(x->data, s, len);
    return x;
}

K k_lambda(const char *ctx, const char *src)
{
    K x = k_text(KT_LAMBDA, ctx, 1);
    if (!x)
        return NULL;
    kK(x)[0] = k_str(src, strlen(src));
    if (!kK(x)[0]) {
        free(x);
        return NULL;
    }
    return x;
}

K k_prim(int8_t t, uint8_t idx)
{
    K x = k_alloc(t, 1, 0);
    if (x)
        x->g = idx;
    return x;
}

K k_dict(K keys, K vals)
{
    K x = keys && vals ? k_compound(KT_DICT, 2) : NULL;
    if (!x) {
        k_free(keys);
        k_free(vals);
        return NULL;
    }
    kK(x)[0] = keys;
    kK(x)[1] = vals;
    return x;
}

K k_table(K dict)
{
    K x = dict ? k_compound(KT_TABLE, 1) : NULL;
    if (!x) {
        k_free(dict);
        return NULL;
    }
    kK(x)[0] = dict;
    return x;
}

void k_free(K x)
{
    if (!x)
        return;
    if (has_kids(x->t))
        for (int64_t i = 0; i < x->n; i++)
            k_free(kK(x)[i]);
    free(x);
}

/* ---- decoding (input already validated) ------------------------------------------------- */

struct dctx {
    const uint8_t *p;
    int le;
    const struct kcodec_opts *o;
};

static uint32_t d32(const struct dctx *c, size_t o) { return qg_ld32o(c->p + o, c->le); }

static void swap_items(uint8_t *d, int64_t n, int sz)
{
    for (int64_t i = 0; i < n; i++, d += sz)
        for (int a = 0, b = sz - 1; a < b; a++, b--) {
            uint8_t tmp = d[a];
            d[a] = d[b];
            d[b] = tmp;
        }
}

/* A NUL-terminated string at o: interned, or copied to dst (which has room). */
static const char *d_text(struct dctx *c, size_t o, size_t len, char *dst)
{
    const char *s = (const char *)c->p + o;
    if (c->o && c->o->intern)
        return c->o->intern(c->o->intern_ctx, s, len);
    memcpy(dst, s, len + 1);
    return dst;
}

static K d_textobj(struct dctx *c, int8_t t, size_t *o, size_t kids)
{
    size_t len = strlen((const char *)c->p + *o);
    int interned = c->o && c->o->intern;
    K x = k_alloc(t, (int64_t)kids, kids * sizeof(K) + (interned ? 0 : len + 1));
    if (!x)
        return NULL;
    x->s = d_text(c, *o, len, (char *)x->data + kids * sizeof(K));
    *o += len + 1;
    if (!x->s) {
        free(x);
        return NULL;
    }
    return x;
}

static K d_obj(struct dctx *c, size_t *o);

static K d_kids(struct dctx *c, K x, size_t *o)
{
    for (int64_t i = 0; i < x->n; i++)
        if (!(kK(x)[i] = d_obj(c, o))) {
            k_free(x);
            return NULL;
        }
    return x;
}

static K d_symv(struct dctx *c, size_t *o, int64_t n, uint8_t attr)
{
    const uint8_t *s0 = c->p + *o, *e = s0;
    for (int64_t i = 0; i < n; i++)
        e += strlen((const char *)e) + 1;
    size_t text = (size_t)(e - s0);
    int interned = c->o && c->o->intern;
    K x = k_alloc(KT_SYM, n, (size_t)n * sizeof(char *) + (interned ? 0 : text));
    if (!x)
        return NULL;
    x->attr = attr;
    char *d = (char *)x->data + (size_t)n * sizeof(char *);
    if (!interned)
        memcpy(d, s0, text);
    const char *s = interned ? (const char *)s0 : d;
    for (int64_t i = 0; i < n; i++) {
        size_t l = strlen(s);
        if (interned) {
            if (!(kS(x)[i] = c->o->intern(c->o->intern_ctx, s, l))) {
                free(x);
                return NULL;
            }
        } else {
            kS(x)[i] = s;
        }
        s += l + 1;
    }
    *o += text;
    return x;
}

static K d_obj(struct dctx *c, size_t *o)
{
    int8_t t = (int8_t)c->p[*o];
    (*o)++;
    K x;
    if (t < 0) {
        if (t == KT_ERROR || t == -KT_SYM)
            return d_textobj(c, t, o, 0);
        if (!(x = k_atom(t)))
            return NULL;
        int sz = ktype_sizes[-t];
        memcpy(x->u, c->p + *o, (size_t)sz);
        if (!c->le && t != -KT_GUID)
            swap_items(x->u, 1, sz);
        *o += (size_t)sz;
        return x;
    }
    if (t == KT_LIST || is_basic(t)) {
        uint8_t attr = c->p[*o];
        int64_t n = (int32_t)d32(c, *o + 1);
        *o += 5;
        if (t == KT_SYM)
            return d_symv(c, o, n, attr);
        if (t == KT_LIST) {
            if (!(x = k_list(n)))
                return NULL;
            x->attr = attr;
            return d_kids(c, x, o);
        }
        int sz = ktype_sizes[t];
        if (!(x = k_vec(t, n)))
            return NULL;
        x->attr = attr;
        memcpy(x->data, c->p + *o, (size_t)n * (size_t)sz);
        if (!c->le && sz > 1 && t != KT_GUID)
            swap_items(x->data, n, sz);
        *o += (size_t)n * (size_t)sz;
        return x;
    }
    switch (t) {
    case KT_TABLE:
        if (!(x = k_compound(t, 1)))
            return NULL;
        x->attr = c->p[(*o)++];
        return d_kids(c, x, o);
    case KT_DICT:
    case KT_SORTED_DICT:
        return (x = k_compound(t, 2)) ? d_kids(c, x, o) : NULL;
    case KT_LAMBDA:
        return (x = d_textobj(c, t, o, 1)) ? d_kids(c, x, o) : NULL;
    case KT_UNARY:
    case KT_BINARY:
    case KT_TERNARY:
        return k_prim(t, c->p[(*o)++]);
    case KT_PROJECTION:
    case KT_COMPOSITION: {
        int64_t n = (int32_t)d32(c, *o);
        *o += 4;
        return (x = k_compound(t, n)) ? d_kids(c, x, o) : NULL;
    }
    default: /* iterators 106..111, the only types validation leaves */
        return (x = k_compound(t, 1)) ? d_kids(c, x, o) : NULL;
    }
}

qg_status kcodec_decode(const uint8_t *p, size_t n, int le, const struct kcodec_opts *o, K *out,
                        struct kerr *err)
{
    *out = NULL;
    if (kvalidate_check(p, n, le, o, err) != QG_OK)
        return QG_ERR;
    struct dctx c = {.p = p, .le = le, .o = o};
    size_t off = 0;
    K x = d_obj(&c, &off);
    if (!x) {
        if (err) {
            err->why = "out of memory";
            err->off = off;
        }
        return QG_ENOMEM;
    }
    *out = x;
    return QG_OK;
}

/* ---- encoding -------------------------------------------------------------------------- */

size_t kcodec_size(const K x)
{
    int t = x->t;
    size_t s = 0;
    if (t < 0) {
        if (t == KT_ERROR || t == -KT_SYM)
            return 1 + strlen(x->s) + 1;
        return 1 + (size_t)ktype_sizes[-t];
    }
    if (is_basic(t)) {
        if (t != KT_SYM)
            return 6 + (size_t)x->n * (size_t)ktype_sizes[t];
        for (int64_t i = 0; i < x->n; i++)
            s += strlen(kS(x)[i]) + 1;
        return 6 + s;
    }
    switch (t) {
    case KT_LIST: s = 6; break;
    case KT_TABLE: s = 2; break;
    case KT_DICT:
    case KT_SORTED_DICT: s = 1; break;
    case KT_LAMBDA: s = 1 + strlen(x->s) + 1; break;
    case KT_UNARY:
    case KT_BINARY:
    case KT_TERNARY: return 2;
    case KT_PROJECTION:
    case KT_COMPOSITION: s = 5; break;
    default: s = 1; break;
    }
    for (int64_t i = 0; i < x->n; i++)
        s += kcodec_size(kK(x)[i]);
    return s;
}

static uint8_t *w32(uint8_t *o, uint32_t v, int le)
{
    if (le)
        qg_st32(o, v);
    else {
        o[0] = (uint8_t)(v >> 24); o[1] = (uint8_t)(v >> 16); o[2] = (uint8_t)(v >> 8); o[3] = (uint8_t)v;
    }
    return o + 4;
}

static uint8_t *wtext(uint8_t *o, const char *s)
{
    size_t l = strlen(s) + 1;
    memcpy(o, s, l);
    return o + l;
}

uint8_t *kcodec_write(const K x, uint8_t *o, int le)
{
    int t = x->t;
    *o++ = (uint8_t)x->t;
    if (t < 0) {
        if (t == KT_ERROR || t == -KT_SYM)
            return wtext(o, x->s);
        int sz = ktype_sizes[-t];
        memcpy(o, x->u, (size_t)sz);
        if (!le && t != -KT_GUID)
            swap_items(o, 1, sz);
        return o + sz;
    }
    if (is_basic(t) || t == KT_LIST) {
        *o++ = x->attr;
        o = w32(o, (uint32_t)x->n, le);
        if (t == KT_SYM) {
            for (int64_t i = 0; i < x->n; i++)
                o = wtext(o, kS(x)[i]);
            return o;
        }
        if (t != KT_LIST) {
            size_t len = (size_t)x->n * (size_t)ktype_sizes[t];
            memcpy(o, x->data, len);
            if (!le && ktype_sizes[t] > 1 && t != KT_GUID)
                swap_items(o, x->n, ktype_sizes[t]);
            return o + len;
        }
    } else {
        switch (t) {
        case KT_TABLE: *o++ = x->attr; break;
        case KT_LAMBDA: o = wtext(o, x->s); break;
        case KT_UNARY:
        case KT_BINARY:
        case KT_TERNARY: *o++ = x->g; return o;
        case KT_PROJECTION:
        case KT_COMPOSITION: o = w32(o, (uint32_t)x->n, le); break;
        default: break;
        }
    }
    for (int64_t i = 0; i < x->n; i++)
        o = kcodec_write(kK(x)[i], o, le);
    return o;
}

uint8_t *kcodec_encode_msg(const K x, int msgtype, size_t *len)
{
    size_t n = 8 + kcodec_size(x);
    uint8_t *m = malloc(n);
    if (!m)
        return NULL;
    kipc_hdr_write(m, (enum kipc_msgtype)msgtype, 0, n);
    kcodec_write(x, m + 8, 1);
    *len = n;
    return m;
}

uint8_t *kcodec_error_msg(const char *text, size_t *len)
{
    K e = k_err(text);
    uint8_t *m = e ? kcodec_encode_msg(e, KIPC_RESPONSE, len) : NULL;
    k_free(e);
    return m;
}

int kcodec_is_error(const uint8_t *p, size_t n, const char **text, size_t *len)
{
    if (n < 2 || (int8_t)p[0] != KT_ERROR)
        return 0;
    const uint8_t *z = memchr(p + 1, 0, n - 1);
    if (!z)
        return 0;
    *text = (const char *)p + 1;
    *len = (size_t)(z - p - 1);
    return 1;
}

void kcodec_err_text(const struct kerr *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s at byte %zu", e->why, e->off + 8);
}

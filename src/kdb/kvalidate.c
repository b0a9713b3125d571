/* kvalidate.c: is a message body one q would accept? A walk over the bytes that builds
 * nothing and allocates nothing: types, attributes, counts against the bytes left, NULs,
 * nesting depth, tables' column lengths. The loop runs it on small bodies, the reader pool on
 * the rest (jobs.c); kcodec_decode relies on it. */
#include "kcodec.h"
#include "kipc.h"

#include <string.h>

static inline int is_basic(int t) { return t >= 1 && t <= 19 && t != 3; } /* = ktype_basic, inlined */

struct vctx {
    const uint8_t *p;
    size_t n;
    int le;
    int maxd;
    struct kerr *err;
    uint32_t *seen;
};

#define VBAD ((size_t)-1)

static size_t vfail(struct vctx *v, size_t off, const char *why)
{
    v->err->why = why;
    v->err->off = off;
    return VBAD;
}

static int32_t rd32(const struct vctx *v, size_t o) { return (int32_t)qg_ld32o(v->p + o, v->le); }

/* Skip a NUL-terminated string at o; VBAD if there is no NUL before the end. */
static size_t v_cstr(struct vctx *v, size_t o, const char *why)
{
    const uint8_t *z = o < v->n ? memchr(v->p + o, 0, v->n - o) : NULL;
    return z ? (size_t)(z - v->p) + 1 : vfail(v, o, why);
}

static size_t v_obj(struct vctx *v, size_t o, int d, int64_t *count);

/* A count field at o: non-negative and, given each item takes at least min_item bytes, not
 * past the end of the message. */
static size_t v_count(struct vctx *v, size_t o, size_t min_item, int32_t *cnt)
{
    if (v->n - o < 4)
        return vfail(v, o, "truncated count");
    *cnt = rd32(v, o);
    if (*cnt < 0)
        return vfail(v, o, "negative count");
    if ((uint64_t)*cnt * min_item > v->n - o - 4)
        return vfail(v, o, "count past end of message");
    return o + 4;
}

static size_t v_table(struct vctx *v, size_t o, int d, int64_t *count)
{
    if (v->n - o < 2)
        return vfail(v, o, "truncated table");
    if (v->p[o + 1] > KATTR_MAX)
        return vfail(v, o + 1, "bad attribute");
    o += 2;
    if (o >= v->n || v->p[o] != KT_DICT)
        return vfail(v, o, "table without column dictionary");
    o++;
    if (o >= v->n || v->p[o] != KT_SYM)
        return vfail(v, o, "table column names not symbols");
    int64_t ncol, nval;
    if ((o = v_obj(v, o, d + 2, &ncol)) == VBAD)
        return VBAD;
    if (o >= v->n || v->p[o] != KT_LIST)
        return vfail(v, o, "table columns not a general list");
    if (d + 2 > v->maxd)
        return vfail(v, o, "nesting too deep");
    if (v->n - o < 2)
        return vfail(v, o, "truncated vector header");
    if (v->p[o + 1] > KATTR_MAX)
        return vfail(v, o + 1, "bad attribute");
    int32_t cnt;
    size_t cnt_off = o + 2;
    if ((o = v_count(v, cnt_off, 1, &cnt)) == VBAD)
        return VBAD;
    nval = cnt;
    if (nval != ncol)
        return vfail(v, cnt_off, "table names and columns differ in count");
    int64_t rows = -1;
    for (int32_t i = 0; i < cnt; i++) {
        size_t c0 = o;
        int64_t len;
        if (o >= v->n)
            return vfail(v, o, "truncated column");
        int ct = (int8_t)v->p[o];
        if (ct != KT_LIST && !is_basic(ct))
            return vfail(v, o, "table column not a list");
        if ((o = v_obj(v, o, d + 3, &len)) == VBAD)
            return VBAD;
        if (rows >= 0 && len != rows)
            return vfail(v, c0, "table columns differ in length");
        rows = len;
    }
    *count = rows < 0 ? 0 : rows;
    return o;
}

/* An atom of type -t at o. */
static size_t v_atom(struct vctx *v, size_t o, int t)
{
    if (t == KT_ERROR)
        return v_cstr(v, o + 1, "error text without NUL");
    if (!is_basic(-t))
        return vfail(v, o, "unknown type");
    if (t == -KT_SYM)
        return v_cstr(v, o + 1, "symbol without NUL");
    size_t sz = (size_t)ktype_size(t);
    if (v->n - o - 1 < sz)
        return vfail(v, o, "truncated atom");
    return o + 1 + sz;
}

/* A vector of type t (or a general list) at o: attribute, count, items. */
static size_t v_vector(struct vctx *v, size_t o, int t, int d, int64_t *count)
{
    int64_t sub;
    int32_t cnt;
    if (v->n - o < 2)
        return vfail(v, o, "truncated vector header");
    if (v->p[o + 1] > KATTR_MAX)
        return vfail(v, o + 1, "bad attribute");
    size_t item = t == KT_LIST || t == KT_SYM ? 1 : (size_t)ktype_size(t);
    if ((o = v_count(v, o + 2, item, &cnt)) == VBAD)
        return VBAD;
    *count = cnt;
    if (t == KT_SYM) {
        for (int32_t i = 0; i < cnt; i++)
            if ((o = v_cstr(v, o, "symbol without NUL")) == VBAD)
                return VBAD;
        return o;
    }
    if (t != KT_LIST)
        return o + (size_t)cnt * item;
    for (int32_t i = 0; i < cnt; i++)
        if ((o = v_obj(v, o, d + 1, &sub)) == VBAD)
            return VBAD;
    return o;
}

/* Dictionaries, functions, projections and adverbs at o. */
static size_t v_other(struct vctx *v, size_t o, int t, int d)
{
    int64_t sub;
    int32_t cnt;
    switch (t) {
    case KT_DICT:
    case KT_SORTED_DICT:
        if ((o = v_obj(v, o + 1, d + 1, &sub)) == VBAD)
            return VBAD;
        return v_obj(v, o, d + 1, &sub);
    case KT_LAMBDA:
        if ((o = v_cstr(v, o + 1, "lambda context without NUL")) == VBAD)
            return VBAD;
        if (o >= v->n || v->p[o] != KT_CHAR)
            return vfail(v, o, "lambda source not a char vector");
        return v_obj(v, o, d + 1, &sub);
    case KT_UNARY:
    case KT_BINARY:
    case KT_TERNARY:
        if (v->n - o < 2)
            return vfail(v, o, "truncated primitive");
        return o + 2;
    case KT_PROJECTION:
    case KT_COMPOSITION:
        if ((o = v_count(v, o + 1, 1, &cnt)) == VBAD)
            return VBAD;
        if (cnt == 0)
            return vfail(v, o - 4, "empty projection or composition");
        for (int32_t i = 0; i < cnt; i++)
            if ((o = v_obj(v, o, d + 1, &sub)) == VBAD)
                return VBAD;
        return o;
    default:
        if (t >= KT_EACH && t <= KT_EACHLEFT)
            return v_obj(v, o + 1, d + 1, &sub);
        return vfail(v, o, "unknown type");
    }
}

/* Validate the object at o at nesting depth d; return the offset after it, or VBAD.
 * *count receives the item count of vectors and lists (rows for tables), else -1. */
static size_t v_obj(struct vctx *v, size_t o, int d, int64_t *count)
{
    *count = -1;
    if (d > v->maxd)
        return vfail(v, o, "nesting too deep");
    if (o >= v->n)
        return vfail(v, o, "truncated: object expected");
    int t = (int8_t)v->p[o];
    if (v->seen && t != KT_ERROR && is_basic(t < 0 ? -t : t))
        *v->seen |= 1u << (t < 0 ? -t : t);
    if (t < 0)
        return v_atom(v, o, t);
    if (t == KT_LIST || is_basic(t))
        return v_vector(v, o, t, d, count);
    if (t == KT_TABLE)
        return v_table(v, o, d, count);
    return v_other(v, o, t, d);
}

qg_status kvalidate_check(const uint8_t *p, size_t n, int le, const struct kcodec_opts *o,
                          struct kerr *err)
{
    struct kerr dummy;
    struct vctx v = {
        .p = p, .n = n, .le = le,
        .maxd = o && o->max_depth > 0 ? o->max_depth : KCODEC_DEPTH_DEFAULT,
        .err = err ? err : &dummy,
        .seen = o ? o->seen : NULL,
    };
    int64_t cnt;
    size_t end = v_obj(&v, 0, 0, &cnt);
    if (end == VBAD)
        return QG_ERR;
    if (end != n) {
        vfail(&v, end, "bytes after object");
        return QG_ERR;
    }
    return QG_OK;
}

size_t kvalidate_extent(const uint8_t *p, size_t n, size_t off, int le)
{
    struct kerr e;
    struct vctx v = {.p = p, .n = n, .le = le, .maxd = KCODEC_DEPTH_DEFAULT, .err = &e};
    int64_t cnt;
    size_t end = off < n ? v_obj(&v, off, 0, &cnt) : VBAD;
    return end == VBAD ? 0 : end;
}

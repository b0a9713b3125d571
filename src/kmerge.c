/* kmerge.c: the merge of a fan-out's replies, one per worker in worker order, into one value,
 * as the KX -30! gateway example razes them (runs on the writer pool; pure).
 *   any q error               -> the first one, in worker order
 *   tables, the same columns  -> one table, rows in worker order (q's raze)
 *   keyed tables, the same key and value columns -> likewise, by rows (no upsert)
 *   lists of one type (a general list, or a vector of one type) -> concatenated
 *   anything else, or as_list -> the general list of the replies
 * A column whose type differs between replies becomes a general list of its items, as q's
 * join makes it. Attributes are dropped: q keeps them only where it can prove they hold. */
#include "kmerge.h"

#include <stdlib.h>
#include <string.h>

#include "kipc.h"

/* Items of vector v (type 0..19) appended to list out (type 0) from *pos, as atoms or the
 * list's own children (moved: v keeps none). -1 on ENOMEM. */
static int explode(K out, int64_t *pos, K v)
{
    for (int64_t i = 0; i < v->n; i++) {
        K a;
        if (v->t == KT_LIST) {
            a = kK(v)[i];
            kK(v)[i] = NULL;
        } else if (v->t == KT_SYM) {
            a = k_sym(kS(v)[i]);
        } else {
            int sz = ktype_size(v->t);
            a = k_atom((int8_t)-v->t);
            if (a)
                memcpy(a->u, kG(v) + (size_t)i * (size_t)sz, (size_t)sz);
        }
        if (!a)
            return -1;
        kK(out)[(*pos)++] = a;
    }
    return 0;
}

/* The vectors v[0..n) (types 0..19) joined: of their one type, or a general list of their
 * items if the types differ. Children of general lists are moved out. NULL on ENOMEM. */
static K join(K *v, int n)
{
    int64_t total = 0;
    int same = 1;
    for (int i = 0; i < n; i++) {
        total += v[i]->n;
        same &= v[i]->t == v[0]->t;
    }
    int t = same ? v[0]->t : KT_LIST;
    if (t == KT_SYM) {
        const char **s = malloc((size_t)(total ? total : 1) * sizeof *s);
        if (!s)
            return NULL;
        int64_t k = 0;
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < v[i]->n; j++)
                s[k++] = kS(v[i])[j];
        K x = k_symv(total, s);
        free(s);
        return x;
    }
    K x = t == KT_LIST ? k_list(total) : k_vec((int8_t)t, total);
    if (!x)
        return NULL;
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (t != KT_LIST) {
            size_t sz = (size_t)ktype_size(t), bytes = (size_t)v[i]->n * sz;
            memcpy(kG(x) + (size_t)pos * sz, kG(v[i]), bytes);
            pos += v[i]->n;
        } else if (explode(x, &pos, v[i])) {
            x->n = pos; /* free what was made, not the NULLs after it */
            k_free(x);
            return NULL;
        }
    }
    return x;
}

/* A general list, or a vector of one basic type: what joins item by item. */
static int is_list_type(int t) { return t == KT_LIST || ktype_basic(t); }
static int is_vector(const K x) { return is_list_type(x->t); }

static int same_names(const K a, const K b)
{
    if (a->t != KT_SYM || b->t != KT_SYM || a->n != b->n)
        return 0;
    for (int64_t i = 0; i < a->n; i++)
        if (strcmp(kS(a)[i], kS(b)[i]))
            return 0;
    return 1;
}

/* The dict of a table, with its names (symbols) and columns (a general list of vectors). */
static int table_shape(const K t, K *names, K *cols)
{
    if (t->t != KT_TABLE)
        return 0;
    K d = kK(t)[0];
    *names = kK(d)[0];
    *cols = kK(d)[1];
    if ((*names)->t != KT_SYM || (*cols)->t != KT_LIST || (*cols)->n != (*names)->n)
        return 0;
    for (int64_t c = 0; c < (*cols)->n; c++)
        if (!is_vector(kK(*cols)[c]))
            return 0;
    return 1;
}

/* Tables p[0..n) with the same columns (checked by the caller): one table. */
static K join_tables(K *p, int n)
{
    K names0, cols0;
    table_shape(p[0], &names0, &cols0);
    K *col = malloc((size_t)n * sizeof *col);
    K names = k_symv(names0->n, kS(names0)), cols = k_list(cols0->n);
    if (!col || !names || !cols) {
        free(col);
        k_free(names);
        k_free(cols);
        return NULL;
    }
    for (int64_t c = 0; c < cols0->n; c++) {
        for (int i = 0; i < n; i++) {
            K nm, cl;
            table_shape(p[i], &nm, &cl);
            col[i] = kK(cl)[c];
        }
        if (!(kK(cols)[c] = join(col, n))) {
            cols->n = c;
            free(col);
            k_free(names);
            k_free(cols);
            return NULL;
        }
    }
    free(col);
    return k_table(k_dict(names, cols));
}

static int tables_match(K *p, int n)
{
    K n0, c0, ni, ci;
    if (!table_shape(p[0], &n0, &c0))
        return 0;
    for (int i = 1; i < n; i++)
        if (!table_shape(p[i], &ni, &ci) || !same_names(n0, ni))
            return 0;
    return 1;
}

static int is_keyed(const K x) { return x->t == KT_DICT && kK(x)[0]->t == KT_TABLE && kK(x)[1]->t == KT_TABLE; }

/* The general list of p[0..n), moved. */
static K as_general(K *p, int n)
{
    K x = k_list(n);
    if (!x)
        return NULL;
    for (int i = 0; i < n; i++) {
        kK(x)[i] = p[i];
        p[i] = NULL;
    }
    return x;
}

K kmerge(K *p, int n, int as_list)
{
    K x = NULL;
    if (n <= 0)
        return k_list(0);
    for (int i = 0; i < n && !as_list; i++)
        if (p[i]->t == KT_ERROR) { /* the first error wins */
            x = p[i];
            p[i] = NULL;
            goto done;
        }
    int keyed = !as_list, vecs = !as_list, same_t = 1;
    for (int i = 0; i < n; i++) {
        keyed &= is_keyed(p[i]);
        vecs &= is_vector(p[i]);
        same_t &= p[i]->t == p[0]->t;
    }
    if (as_list) {
        x = as_general(p, n);
    } else if (tables_match(p, n)) {
        x = join_tables(p, n);
    } else if (keyed) {
        K *k = malloc(2 * (size_t)n * sizeof *k), *v = k ? k + n : NULL;
        if (k) {
            for (int i = 0; i < n; i++) {
                k[i] = kK(p[i])[0];
                v[i] = kK(p[i])[1];
            }
            if (tables_match(k, n) && tables_match(v, n)) {
                K keys = join_tables(k, n), vals = keys ? join_tables(v, n) : NULL;
                x = vals ? k_dict(keys, vals) : NULL;
                if (!vals)
                    k_free(keys);
            } else {
                x = as_general(p, n);
            }
            free(k);
        }
    } else if (vecs && same_t) {
        x = join(p, n);
    } else {
        x = as_general(p, n);
    }
done:
    for (int i = 0; i < n; i++) {
        k_free(p[i]);
        p[i] = NULL;
    }
    return x;
}

/* ---- on the bytes: what can be merged without building a K object ------------------------- */

/* Bytes appended to a growing buffer; err set on ENOMEM. */
struct obuf {
    uint8_t *p;
    size_t len, cap;
    int err;
};

static uint8_t *ob_room(struct obuf *o, size_t n)
{
    if (o->err)
        return NULL;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) {
            o->err = 1;
            return NULL;
        }
        o->p = p;
        o->cap = cap;
    }
    uint8_t *at = o->p + o->len;
    o->len += n;
    return at;
}

static void ob_add(struct obuf *o, const void *p, size_t n)
{
    uint8_t *at = ob_room(o, n);
    if (at)
        memcpy(at, p, n);
}

/* One part's body as the merge walks it. */
struct bpart {
    const uint8_t *b;
    size_t n;
};

/* The vectors at b[i] + off[i] (each ends at end[i]), all of type t: one vector, their items in
 * order, attribute dropped. */
static void splice_vectors(struct obuf *o, const struct bpart *p, const size_t *off, const size_t *end, int n)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += qg_ld32(p[i].b + off[i] + 2);
    uint8_t h[6] = {p[0].b[off[0]], 0};
    qg_st32(h + 2, (uint32_t)total);
    ob_add(o, h, sizeof h);
    for (int i = 0; i < n; i++)
        ob_add(o, p[i].b + off[i] + 6, end[i] - off[i] - 6);
}

/* Tables at b[i] + at[i]: the same column names and, column by column, one type: spliced
 * (1), or 0 if they are not such tables (nothing written then). *next[i]: the end of each. */
static int splice_tables(struct obuf *o, const struct bpart *p, const size_t *at, size_t *next, int n)
{
    size_t *off = malloc(2 * (size_t)n * sizeof *off), *end = off ? off + n : NULL;
    size_t names = at[0] + 3, names_end = 0, ncols = 0;
    int ok = off != NULL;
    for (int i = 0; ok && i < n; i++) {
        const uint8_t *b = p[i].b + at[i];
        size_t ne = at[i] + 3 < p[i].n ? kcodec_extent(p[i].b, p[i].n, at[i] + 3, 1) : 0;
        ok = at[i] + 3 < p[i].n && b[0] == KT_TABLE && b[2] == KT_DICT && b[3] == KT_SYM && ne &&
             ne + 6 <= p[i].n && p[i].b[ne] == KT_LIST;
        if (!ok)
            break;
        if (i == 0) {
            names_end = ne;
            ncols = qg_ld32(p[0].b + ne + 2);
        }
        ok = ne - (at[i] + 3) == names_end - names && !memcmp(b + 3 + 6, p[0].b + names + 6, names_end - names - 6) &&
             qg_ld32(p[i].b + ne + 2) == ncols;
        off[i] = ne + 6; /* the first column */
    }
    /* every column of one splicable type in every part */
    size_t *cur = ok ? malloc((size_t)n * sizeof *cur) : NULL;
    ok = ok && cur;
    for (int i = 0; ok && i < n; i++)
        cur[i] = off[i];
    for (size_t c = 0; ok && c < ncols; c++) {
        int t0 = cur[0] < p[0].n ? (int8_t)p[0].b[cur[0]] : -1;
        for (int i = 0; ok && i < n; i++) {
            size_t e = kcodec_extent(p[i].b, p[i].n, cur[i], 1);
            ok = e && (int8_t)p[i].b[cur[i]] == t0 && is_list_type(t0);
            cur[i] = e;
        }
    }
    if (ok) {
        uint8_t h[3] = {KT_TABLE, 0, KT_DICT};
        ob_add(o, h, 3);
        uint8_t nh[2] = {KT_SYM, 0};
        ob_add(o, nh, 2);
        ob_add(o, p[0].b + names + 2, names_end - names - 2);
        uint8_t lh[6] = {KT_LIST, 0};
        qg_st32(lh + 2, (uint32_t)ncols);
        ob_add(o, lh, 6);
        for (size_t c = 0; c < ncols; c++) {
            for (int i = 0; i < n; i++)
                end[i] = kcodec_extent(p[i].b, p[i].n, off[i], 1);
            splice_vectors(o, p, off, end, n);
            for (int i = 0; i < n; i++)
                off[i] = end[i];
        }
        for (int i = 0; i < n; i++)
            next[i] = off[i];
    }
    free(cur);
    free(off);
    return ok;
}

uint8_t *kmerge_bytes(const uint8_t *const *m, const size_t *len, int n, int as_list, size_t *out_len)
{
    if (n <= 0)
        return NULL;
    struct bpart *p = malloc((size_t)n * sizeof *p);
    size_t *at = p ? calloc(2 * (size_t)n, sizeof *at) : NULL, *next = at ? at + n : NULL;
    struct obuf o = {0};
    int ok = at != NULL;
    for (int i = 0; ok && i < n; i++) {
        ok = len[i] > 8 && m[i][0] == 1 && !m[i][2]; /* little-endian, plain: else K objects */
        p[i] = (struct bpart){m[i] + 8, len[i] - 8};
    }
    int first_error = -1;
    for (int i = 0; ok && i < n && first_error < 0; i++)
        if ((int8_t)p[i].b[0] == KT_ERROR)
            first_error = i;
    int t = ok ? (int8_t)p[0].b[0] : 0, same = 1;
    for (int i = 1; ok && i < n; i++)
        same &= (int8_t)p[i].b[0] == t;
    ob_room(&o, 8); /* the header, written last */
    if (!ok) {
    } else if (as_list) { /* (`.qgate.all; g; q; `list): the replies as they are */
        uint8_t h[6] = {KT_LIST, 0};
        qg_st32(h + 2, (uint32_t)n);
        ob_add(&o, h, 6);
        for (int i = 0; i < n; i++)
            ob_add(&o, p[i].b, p[i].n);
    } else if (first_error >= 0) {
        ob_add(&o, p[first_error].b, p[first_error].n);
    } else if (same && is_list_type(t)) {
        for (int i = 0; i < n; i++)
            next[i] = p[i].n;
        splice_vectors(&o, p, at, next, n);
    } else if (same && t == KT_TABLE) {
        ok = splice_tables(&o, p, at, next, n) && next[0] == p[0].n;
    } else if (same && t == KT_DICT) { /* keyed tables: the keys, then the values */
        for (int i = 0; i < n; i++)
            at[i] = 1;
        ob_add(&o, p[0].b, 1);
        ok = splice_tables(&o, p, at, next, n);
        for (int i = 0; ok && i < n; i++)
            at[i] = next[i];
        ok = ok && splice_tables(&o, p, at, next, n);
        for (int i = 0; ok && i < n; i++)
            ok = next[i] == p[i].n;
    } else {
        ok = 0;
    }
    free(p);
    free(at);
    if (!ok || o.err) {
        free(o.p);
        return NULL;
    }
    kipc_hdr_write(o.p, KIPC_RESPONSE, 0, o.len);
    *out_len = o.len;
    return o.p;
}

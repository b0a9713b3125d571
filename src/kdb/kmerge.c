/* kmerge.c: the merge of a fan-out's replies, one per worker in worker order, into one value:
 * q's raze of their list, i.e. ,/ (Join Over) folding them left to right (runs on the writer
 * pool; pure). The gateway's own rules around it:
 *   any q error among the replies -> the first one, in worker order (not raze: the gateway's),
 *                                    `list too (a q error is no value a list can hold)
 *   `list (as_list)               -> the general list of the replies as they are
 * and raze itself, per the KX reference (code.kx.com ref/raze, ref/join, basics/joins,
 * ref/upsert):
 *   one reply x       raze enlist x: an atom of a basic type becomes its one-item vector (raze
 *                     of an atom "returns it as a list"); anything else is x itself
 *   lists and atoms   ref/join: "a vector if both arguments are vectors or atoms of the same
 *                     type; otherwise a mixed list": items concatenated, typed when every
 *                     reply is a vector or atom of one type, else a general list of the items
 *                     (vector items become atoms; a general list's items are moved, not
 *                     opened: raze collapses one level). () is the list that joins as
 *                     nothing: (),x is x as a list, so (),1 2 is 1 2.
 *   tables            ref/join: "joined row-wise"; each column joined as above, so a column
 *                     whose type differs becomes a general list; other columns: 'mismatch
 *                     (ref/uj: "tables do not conform for ,")
 *   dictionaries      ref/join: "upsert semantics": a right key found on the left replaces
 *                     that value, new keys are appended in order
 *   keyed tables      basics/joins: x,y is x upsert y; ref/join: "strict; both the key and data
 *                     columns must match in names and datatypes". Rows of the right whose key
 *                     is on the left replace those rows; new keys are appended in order.
 *   atom and dictionary: 'type (ref/raze: "cannot join integer and dictionary",
 *                     raze (10;d) is 'type); table and atom or list: 'type (the brief's case)
 *   table and dictionary (a row): the row appended (or, dictionary first, prepended)
 * Where the reference is silent, the gateway decided (tests/unit/test_kmerge.c marks them):
 *   - tables join by column name, in the left's column order: names as a set must agree, else
 *     'mismatch (upsert takes the right's columns by name; the reference shows no reordering)
 *   - unkeyed tables are not strict: a column whose type differs joins as lists do (the
 *     reference says "strict" of keyed tables only)
 *   - keyed tables: key and value names must agree in order ('mismatch), and each column's
 *     type code must be the same ('type; the reference names no error), () columns included:
 *     an untyped empty keyed table with a typed one is 'type. Keys match by value: bytes for
 *     numbers (so -0.0 and 0.0 differ), text for symbols, match (~) for items of general
 *     lists; the first row of the left with a key is the one replaced, and a key repeated on
 *     the right replaces what its first appearance appended
 *   - dictionaries: keys and values are typed where every reply's are of one type, else
 *     general lists (join promotes where amend would refuse: ref/join's Append says ,: has
 *     "major differences"); a dictionary whose values are a table joins those rows likewise,
 *     their columns named alike in order ('mismatch)
 *   - (),x and x,() are x for a table or a dictionary too
 *   - a dictionary as a row of a table: its keys must be symbols, the table's column names in
 *     any order ('mismatch); dictionary and list, either way round: 'type
 *   - a typed empty list joins as a list of its type: (`long$()),`a`b is (`a;`b), by the rule
 *     of ref/join; only the untyped () joins as nothing
 *   - attributes are dropped from what the merge builds (q keeps them only where it can prove
 *     they still hold); a single reply keeps its own; a sorted dictionary (127) joins as 99
 *   - shapes whose join q defines in ways the reference does not (a dictionary with a keyed
 *     table, a keyed table with a table, a table with a dictionary of rows, dictionaries
 *     whose keys are atoms) are answered 'qgate: .qgate.all cannot raze these replies; use
 *     `list', so that no one is handed a guess
 *   - the fold stops at raze's first error, as q's does */
#include "kmerge.h"

#include <stdlib.h>
#include <string.h>

#include "kipc.h"

static const char E_SHAPE[] = "qgate: .qgate.all cannot raze these replies; use `list";

static int is_list(const K x) { return x->t == KT_LIST || ktype_basic(x->t); }
static int is_nil(const K x) { return x->t == KT_LIST && x->n == 0; } /* (): joins as nothing */
static int basic_atom(const K x) { return x->t < 0 && x->t != KT_ERROR && ktype_basic(-x->t); }
/* The list type x makes in a join: a vector's or a basic atom's type; 0 for the rest. */
static int ltype(const K x) { return is_list(x) ? x->t : basic_atom(x) ? -x->t : 0; }
/* How many items x brings to a join: a list its items, anything else itself. */
static int64_t litems(const K x) { return is_list(x) ? x->n : 1; }

static void free_all(K *v, int n)
{
    for (int i = 0; i < n; i++) {
        k_free(v[i]);
        v[i] = NULL;
    }
}

/* Item i of vector v (1..19) as an atom. */
static K atom_of(const K v, int64_t i)
{
    if (v->t == KT_SYM)
        return k_sym(kS(v)[i]);
    size_t sz = (size_t)ktype_size(v->t);
    K a = k_atom((int8_t)-v->t);
    if (a)
        memcpy(a->u, kG(v) + (size_t)i * sz, sz);
    return a;
}

/* Item i of list v as an object of its own: a general list's child moved out (v keeps NULL
 * there), a vector's item made an atom. */
static K take(K v, int64_t i)
{
    if (v->t != KT_LIST)
        return atom_of(v, i);
    K a = kK(v)[i];
    kK(v)[i] = NULL;
    return a;
}

/* v[0..n) joined as lists and atoms join (consumed): see the top. NULL on ENOMEM. */
static K join_lists(K *v, int n)
{
    int live = 0, last = -1, t = -1;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (is_nil(v[i]))
            continue;
        int lt = ltype(v[i]);
        t = t < 0 ? lt : t == lt ? t : 0;
        total += litems(v[i]);
        live++;
        last = i;
    }
    K x = NULL;
    if (live == 0) {
        x = k_list(0);
    } else if (live == 1 && is_list(v[last])) { /* (),x and x,() are x */
        x = v[last];
        v[last] = NULL;
    } else if (t == KT_SYM) {
        const char **s = malloc((size_t)(total ? total : 1) * sizeof *s);
        int64_t k = 0;
        for (int i = 0; s && i < n; i++) {
            if (v[i]->t == -KT_SYM)
                s[k++] = v[i]->s;
            else
                for (int64_t j = 0; j < v[i]->n; j++)
                    s[k++] = kS(v[i])[j];
        }
        x = s ? k_symv(total, s) : NULL;
        free(s);
    } else if (t > 0) {
        size_t sz = (size_t)ktype_size(t), pos = 0;
        if ((x = k_vec((int8_t)t, total)))
            for (int i = 0; i < n; i++) {
                size_t items = (size_t)litems(v[i]);
                memcpy(kG(x) + pos * sz, v[i]->t < 0 ? v[i]->u : kG(v[i]), items * sz);
                pos += items;
            }
    } else if ((x = k_list(total))) {
        int64_t pos = 0;
        for (int i = 0; x && i < n; i++) {
            if (!is_list(v[i])) { /* an atom or a function: itself an item */
                kK(x)[pos++] = v[i];
                v[i] = NULL;
                continue;
            }
            for (int64_t j = 0; j < v[i]->n; j++)
                if (!(kK(x)[pos++] = take(v[i], j))) {
                    x->n = pos - 1; /* free what was made, not the NULLs after it */
                    k_free(x);
                    x = NULL;
                    break;
                }
        }
    }
    free_all(v, n);
    return x;
}

/* enlist x (consumed): a basic atom's one-item vector, else the general list (x). */
static K enlist(K x)
{
    if (basic_atom(x))
        return join_lists(&x, 1);
    K l = k_list(1);
    if (!l) {
        k_free(x);
        return NULL;
    }
    kK(l)[0] = x;
    return l;
}

static int same_names(const K a, const K b)
{
    if (a->n != b->n)
        return 0;
    for (int64_t i = 0; i < a->n; i++)
        if (strcmp(kS(a)[i], kS(b)[i]))
            return 0;
    return 1;
}

static int64_t find_name(const K names, const char *s)
{
    for (int64_t i = 0; i < names->n; i++)
        if (!strcmp(kS(names)[i], s))
            return i;
    return -1;
}

/* ---- rows: a list (one column) or a table (named columns), as joins walk them ------------- */

struct rows {
    K names; /* a table's column names; NULL for a list */
    K cols;  /* a table's columns (a general list) */
    K list;  /* the list */
    int64_t ncol, n;
};

static K rcol(const struct rows *r, int64_t c) { return r->names ? kK(r->cols)[c] : r->list; }

/* x seen as rows: 1 if it is a list or a well-formed table (symbol names, list columns of one
 * count), else 0. */
static int rows_of(K x, struct rows *r)
{
    memset(r, 0, sizeof *r);
    if (is_list(x)) {
        r->list = x;
        r->ncol = 1;
        r->n = x->n;
        return 1;
    }
    if (x->t != KT_TABLE || kK(x)[0]->t != KT_DICT)
        return 0;
    K d = kK(x)[0];
    r->names = kK(d)[0];
    r->cols = kK(d)[1];
    if (r->names->t != KT_SYM || r->cols->t != KT_LIST || r->cols->n != r->names->n)
        return 0;
    r->ncol = r->names->n;
    for (int64_t c = 0; c < r->ncol; c++)
        if (!is_list(kK(r->cols)[c]) || kK(r->cols)[c]->n != kK(r->cols)[0]->n)
            return 0;
    r->n = r->ncol ? kK(r->cols)[0]->n : 0;
    return 1;
}

/* Column c of the result gathered from rows r[part[d]], item row[d], d < cnt: of the one type
 * of every reply's column c (() aside), else a general list. NULL on ENOMEM. */
static K gather(struct rows *r, int n, int64_t c, const int *part, const int64_t *row, int64_t cnt)
{
    int t = -1;
    for (int i = 0; i < n; i++) {
        K ci = rcol(&r[i], c);
        if (!is_nil(ci))
            t = t < 0 ? ci->t : t == ci->t ? t : 0;
    }
    if (t < 0)
        t = 0;
    K x;
    if (t == KT_SYM) {
        const char **s = malloc((size_t)(cnt ? cnt : 1) * sizeof *s);
        if (!s)
            return NULL;
        for (int64_t d = 0; d < cnt; d++)
            s[d] = kS(rcol(&r[part[d]], c))[row[d]];
        x = k_symv(cnt, s);
        free(s);
    } else if (t > 0) {
        size_t sz = (size_t)ktype_size(t);
        if ((x = k_vec((int8_t)t, cnt)))
            for (int64_t d = 0; d < cnt; d++)
                memcpy(kG(x) + (size_t)d * sz, kG(rcol(&r[part[d]], c)) + (size_t)row[d] * sz, sz);
    } else if ((x = k_list(cnt))) {
        for (int64_t d = 0; d < cnt; d++)
            if (!(kK(x)[d] = take(rcol(&r[part[d]], c), row[d]))) {
                x->n = d;
                k_free(x);
                return NULL;
            }
    }
    return x;
}

/* The rows gathered into a list or a table named as r[0]. NULL on ENOMEM. */
static K rows_build(struct rows *r, int n, const int *part, const int64_t *row, int64_t cnt)
{
    if (!r[0].names)
        return gather(r, n, 0, part, row, cnt);
    K cols = k_list(r[0].ncol);
    for (int64_t c = 0; cols && c < r[0].ncol; c++)
        if (!(kK(cols)[c] = gather(r, n, c, part, row, cnt))) {
            cols->n = c;
            k_free(cols);
            cols = NULL;
        }
    return cols ? k_table(k_dict(k_symv(r[0].names->n, kS(r[0].names)), cols)) : NULL;
}

/* ---- matching keys ------------------------------------------------------------------------ */

#define FNV0 0xcbf29ce484222325ULL

static uint64_t h_mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t h_type(uint64_t h, int t)
{
    uint8_t b = (uint8_t)t;
    return h_mix(h, &b, 1);
}

/* A hash of x that is the same for objects that match (~), attributes aside. */
static uint64_t k_hash(uint64_t h, const K x)
{
    h = h_type(h, x->t);
    if (x->t < 0)
        return x->t == KT_ERROR || x->t == -KT_SYM ? h_mix(h, x->s, strlen(x->s))
                                                    : h_mix(h, x->u, (size_t)ktype_size(x->t));
    if (x->t == KT_UNARY || x->t == KT_BINARY || x->t == KT_TERNARY)
        return h_mix(h, &x->g, 1);
    h = h_mix(h, &x->n, sizeof x->n);
    if (ktype_basic(x->t)) {
        if (x->t != KT_SYM)
            return h_mix(h, kG(x), (size_t)x->n * (size_t)ktype_size(x->t));
        for (int64_t i = 0; i < x->n; i++)
            h = h_mix(h, kS(x)[i], strlen(kS(x)[i]) + 1);
        return h;
    }
    if (x->t == KT_LAMBDA)
        h = h_mix(h, x->s, strlen(x->s));
    for (int64_t i = 0; i < x->n; i++)
        h = k_hash(h, kK(x)[i]);
    return h;
}

/* Do a and b match (q's ~), attributes aside? */
static int k_eq(const K a, const K b)
{
    if (a->t != b->t)
        return 0;
    if (a->t < 0)
        return a->t == KT_ERROR || a->t == -KT_SYM ? !strcmp(a->s, b->s)
                                                    : !memcmp(a->u, b->u, (size_t)ktype_size(a->t));
    if (a->t == KT_UNARY || a->t == KT_BINARY || a->t == KT_TERNARY)
        return a->g == b->g;
    if (a->n != b->n || (a->t == KT_LAMBDA && strcmp(a->s, b->s)))
        return 0;
    if (ktype_basic(a->t)) {
        if (a->t != KT_SYM)
            return !memcmp(kG(a), kG(b), (size_t)a->n * (size_t)ktype_size(a->t));
        for (int64_t i = 0; i < a->n; i++)
            if (strcmp(kS(a)[i], kS(b)[i]))
                return 0;
        return 1;
    }
    for (int64_t i = 0; i < a->n; i++)
        if (!k_eq(kK(a)[i], kK(b)[i]))
            return 0;
    return 1;
}

/* The hash of item i of list v: k_hash of it as an object. */
static uint64_t item_hash(const K v, int64_t i)
{
    if (v->t == KT_LIST)
        return k_hash(FNV0, kK(v)[i]);
    uint64_t h = h_type(FNV0, -v->t);
    if (v->t == KT_SYM)
        return h_mix(h, kS(v)[i], strlen(kS(v)[i]));
    size_t sz = (size_t)ktype_size(v->t);
    return h_mix(h, kG(v) + (size_t)i * sz, sz);
}

/* Does item i of list a match item j of list b? */
static int item_eq(const K a, int64_t i, const K b, int64_t j)
{
    if (a->t == KT_LIST && b->t == KT_LIST)
        return k_eq(kK(a)[i], kK(b)[j]);
    if (a->t == KT_LIST) /* the typed one second */
        return item_eq(b, j, a, i);
    if (b->t == KT_LIST) {
        const K c = kK(b)[j];
        if (c->t != -a->t)
            return 0;
        return a->t == KT_SYM ? !strcmp(kS(a)[i], c->s)
                              : !memcmp(kG(a) + (size_t)i * (size_t)ktype_size(a->t), c->u, (size_t)ktype_size(a->t));
    }
    if (a->t != b->t)
        return 0;
    if (a->t == KT_SYM)
        return !strcmp(kS(a)[i], kS(b)[j]);
    size_t sz = (size_t)ktype_size(a->t);
    return !memcmp(kG(a) + (size_t)i * sz, kG(b) + (size_t)j * sz, sz);
}

static uint64_t row_hash(const struct rows *r, int64_t i)
{
    uint64_t h = FNV0;
    for (int64_t c = 0; c < r->ncol; c++)
        h = h * 31 + item_hash(rcol(r, c), i);
    return h;
}

static int row_eq(const struct rows *a, int64_t i, const struct rows *b, int64_t j)
{
    for (int64_t c = 0; c < a->ncol; c++)
        if (!item_eq(rcol(a, c), i, rcol(b, c), j))
            return 0;
    return 1;
}

/* ---- the joins -------------------------------------------------------------------------- */

static int same_types(const struct rows *a, const struct rows *b)
{
    for (int64_t c = 0; c < a->ncol; c++)
        if (rcol(a, c)->t != rcol(b, c)->t)
            return 0;
    return 1;
}

/* Dictionaries and keyed tables p[0..n) (consumed) upserted in order: see the top. */
static K upsert(K *p, int n)
{
    struct rows *kr = calloc(2 * (size_t)n, sizeof *kr), *vr = kr ? kr + n : NULL;
    const char *err = kr ? NULL : "";
    int64_t total = 0;
    for (int i = 0; !err && i < n; i++) {
        if (!rows_of(kK(p[i])[0], &kr[i]) || !rows_of(kK(p[i])[1], &vr[i]) || kr[i].n != vr[i].n ||
            !kr[i].names != !kr[0].names || !vr[i].names != !vr[0].names)
            err = E_SHAPE;
        total += kr[i].n;
    }
    int strict = !err && kr[0].names && vr[0].names; /* keyed tables */
    for (int i = 1; !err && i < n; i++) {
        if ((kr[0].names && !same_names(kr[0].names, kr[i].names)) ||
            (vr[0].names && !same_names(vr[0].names, vr[i].names)))
            err = "mismatch";
        else if (strict && (!same_types(&kr[0], &kr[i]) || !same_types(&vr[0], &vr[i])))
            err = "type";
    }
    if (err) {
        free(kr);
        free_all(p, n);
        return *err ? k_err(err) : NULL;
    }
    /* each result row d: where its key and its (last written) value come from */
    size_t cap = 16;
    while (cap < 2 * (size_t)total)
        cap *= 2;
    int64_t *slot = malloc(cap * sizeof *slot), *krow = malloc((size_t)(total ? total : 1) * 2 * sizeof *krow);
    int *kp = malloc((size_t)(total ? total : 1) * 2 * sizeof *kp);
    int64_t *vrow = krow ? krow + total : NULL, cnt = 0;
    int *vp = kp ? kp + total : NULL;
    K x = NULL;
    if (slot && krow && kp) {
        memset(slot, 0xff, cap * sizeof *slot);
        for (int i = 0; i < n; i++)
            for (int64_t r = 0; r < kr[i].n; r++) {
                size_t s = (size_t)row_hash(&kr[i], r) & (cap - 1);
                while (slot[s] >= 0 && !row_eq(&kr[i], r, &kr[kp[slot[s]]], krow[slot[s]]))
                    s = (s + 1) & (cap - 1);
                if (slot[s] >= 0 && i > 0) { /* found: the value replaced */
                    vp[slot[s]] = i;
                    vrow[slot[s]] = r;
                    continue;
                }
                if (slot[s] < 0) /* the left's first row with a key is the one found */
                    slot[s] = cnt;
                kp[cnt] = vp[cnt] = i;
                krow[cnt] = vrow[cnt] = r;
                cnt++;
            }
        K keys = rows_build(kr, n, kp, krow, cnt), vals = keys ? rows_build(vr, n, vp, vrow, cnt) : NULL;
        x = vals ? k_dict(keys, vals) : NULL;
        if (!vals)
            k_free(keys);
    }
    free(slot);
    free(krow);
    free(kp);
    free(kr);
    free_all(p, n);
    return x;
}

/* Tables p[0..n) (consumed) joined by rows: see the top. */
static K join_tables(K *p, int n)
{
    struct rows *r = calloc((size_t)n, sizeof *r);
    const char *err = r ? NULL : "";
    for (int i = 0; !err && i < n; i++)
        if (!rows_of(p[i], &r[i]))
            err = E_SHAPE;
    int64_t ncol = err ? 0 : r[0].ncol;
    int64_t *perm = err ? NULL : malloc((size_t)n * (size_t)(ncol ? ncol : 1) * sizeof *perm);
    if (!err && !perm)
        err = "";
    for (int i = 0; !err && i < n; i++) {
        int same = same_names(r[0].names, r[i].names);
        if (r[i].ncol != ncol)
            err = "mismatch";
        for (int64_t c = 0; !err && c < ncol; c++)
            if ((perm[i * ncol + c] = same ? c : find_name(r[i].names, kS(r[0].names)[c])) < 0)
                err = "mismatch";
    }
    K cols = err ? NULL : k_list(ncol), *v = cols ? malloc((size_t)n * sizeof *v) : NULL;
    for (int64_t c = 0; v && cols && c < ncol; c++) {
        for (int i = 0; i < n; i++) {
            v[i] = kK(r[i].cols)[perm[i * ncol + c]];
            kK(r[i].cols)[perm[i * ncol + c]] = NULL;
        }
        if (!(kK(cols)[c] = join_lists(v, n))) {
            cols->n = c;
            k_free(cols);
            cols = NULL;
        }
    }
    K x = v && cols ? k_table(k_dict(k_symv(ncol, kS(r[0].names)), cols)) : NULL;
    if (!v)
        k_free(cols);
    free(v);
    free(perm);
    free(r);
    free_all(p, n);
    return err && *err ? k_err(err) : x;
}

/* Table t and dictionary d (consumed) joined: d a row after t's rows, or before them
 * (prepend: d,t, the columns in d's order). */
static K join_row(K t, K d, int prepend)
{
    K two[2] = {t, d}, keys = kK(d)[0], vals = kK(d)[1];
    struct rows r;
    const char *err = NULL;
    if (!rows_of(t, &r) || keys->t == KT_TABLE || vals->t == KT_TABLE || !is_list(keys))
        err = E_SHAPE;
    else if (keys->t != KT_SYM || !is_list(vals) || vals->n != keys->n || keys->n != r.ncol)
        err = "mismatch";
    K order = err ? NULL : prepend ? keys : r.names, other = prepend ? r.names : keys;
    int64_t *perm = err ? NULL : malloc((size_t)(r.ncol ? r.ncol : 1) * sizeof *perm);
    for (int64_t c = 0; perm && !err && c < r.ncol; c++)
        if ((perm[c] = find_name(other, kS(order)[c])) < 0)
            err = "mismatch";
    K cols = perm && !err ? k_list(r.ncol) : NULL;
    for (int64_t c = 0; cols && c < r.ncol; c++) {
        int64_t tc = prepend ? perm[c] : c, dc = prepend ? c : perm[c];
        K item = take(vals, dc), e = item ? enlist(item) : NULL, col = kK(r.cols)[tc];
        kK(r.cols)[tc] = NULL;
        K pair[2] = {prepend ? e : col, prepend ? col : e};
        if (!e || !(kK(cols)[c] = join_lists(pair, 2))) {
            free_all(pair, 2);
            cols->n = c;
            k_free(cols);
            cols = NULL;
        }
    }
    K x = cols ? k_table(k_dict(k_symv(r.ncol, kS(order)), cols)) : NULL;
    free(perm);
    free_all(two, 2);
    return err ? k_err(err) : x;
}

enum cat { C_LIST, C_TABLE, C_DICT };

static enum cat cat(const K x) { return x->t == KT_TABLE ? C_TABLE : x->t == KT_DICT || x->t == KT_SORTED_DICT ? C_DICT : C_LIST; }

/* v[0..n) (consumed, all of category c) joined. */
static K join_same(K *v, int n, enum cat c)
{
    return c == C_LIST ? join_lists(v, n) : c == C_TABLE ? join_tables(v, n) : upsert(v, n);
}

/* a,b (consumed) for a and b of any category. */
static K join2(K a, K b)
{
    K two[2] = {a, b};
    enum cat ca = cat(a), cb = cat(b);
    if (ca == cb)
        return join_same(two, 2, ca);
    if (ca == C_TABLE && cb == C_DICT)
        return join_row(a, b, 0);
    if (ca == C_DICT && cb == C_TABLE)
        return join_row(b, a, 1);
    free_all(two, 2); /* a list with a table or a dictionary */
    return k_err("type");
}

/* The general list of p[0..n), moved. */
static K as_general(K *p, int n)
{
    K x = k_list(n);
    for (int i = 0; x && i < n; i++) {
        kK(x)[i] = p[i];
        p[i] = NULL;
    }
    return x;
}

K kmerge(K *p, int n, int as_list)
{
    K x = NULL;
    int first_error = -1, lists = 1, m = 0;
    if (n <= 0)
        return k_list(0);
    for (int i = 0; i < n && first_error < 0; i++)
        if (p[i]->t == KT_ERROR)
            first_error = i;
    for (int i = 0; i < n; i++)
        lists &= cat(p[i]) == C_LIST;
    if (first_error >= 0) { /* the first error wins */
        x = p[first_error];
        p[first_error] = NULL;
    } else if (as_list) {
        x = as_general(p, n);
    } else if (n == 1) { /* raze enlist x */
        x = basic_atom(p[0]) ? enlist(p[0]) : p[0];
        p[0] = NULL;
    } else if (lists) {
        x = join_lists(p, n);
    } else {
        for (int i = 0; i < n; i++) { /* () joins as nothing with tables and dictionaries */
            K y = p[i];
            p[i] = NULL;
            if (is_nil(y))
                k_free(y);
            else
                p[m++] = y;
        }
        int same = 1;
        for (int i = 1; i < m; i++)
            same &= cat(p[i]) == cat(p[0]);
        if (m == 1) {
            x = p[0];
            p[0] = NULL;
        } else if (same) {
            x = join_same(p, m, cat(p[0]));
        } else { /* ,/ left to right; the first error stops it */
            x = p[0];
            p[0] = NULL;
            for (int i = 1; x && x->t != KT_ERROR && i < m; i++) {
                K y = p[i];
                p[i] = NULL;
                x = join2(x, y);
            }
        }
    }
    free_all(p, n);
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

/* The type of list the object at b[0..end) makes in a join (as ltype), or -1 if it is not a
 * vector or a basic atom. */
static int bltype(const uint8_t *b)
{
    int t = (int8_t)b[0];
    return t == KT_LIST || ktype_basic(t) ? t : t < 0 && t != KT_ERROR && ktype_basic(-t) ? -t : -1;
}

/* The lists or basic atoms at b[i] + off[i] (each ends at end[i]), all making type t (0..19):
 * one list of their items in order, attribute dropped. 0 if the count would not fit. */
static int splice_items(struct obuf *o, const struct bpart *p, const size_t *off, const size_t *end, int n, int t)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += (int8_t)p[i].b[off[i]] < 0 ? 1 : qg_ld32(p[i].b + off[i] + 2);
    if (total > INT32_MAX)
        return 0;
    uint8_t h[6] = {(uint8_t)t, 0};
    qg_st32(h + 2, (uint32_t)total);
    ob_add(o, h, sizeof h);
    for (int i = 0; i < n; i++) {
        size_t at = off[i] + ((int8_t)p[i].b[off[i]] < 0 ? 1 : 6);
        ob_add(o, p[i].b + at, end[i] - at);
    }
    return 1;
}

/* Tables at b[i] + at[i]: the same column names in the same order and, column by column, one
 * type (a general list column with no attribute): spliced (1), or 0 if they are not such
 * tables (nothing written then). */
static int splice_tables(struct obuf *o, const struct bpart *p, const size_t *at, int n)
{
    size_t *off = malloc(2 * (size_t)n * sizeof *off), *end = off ? off + n : NULL;
    size_t names = at[0] + 3, names_end = 0, ncols = 0;
    int ok = off != NULL;
    for (int i = 0; ok && i < n; i++) {
        const uint8_t *b = p[i].b + at[i];
        size_t ne = at[i] + 3 < p[i].n ? kvalidate_extent(p[i].b, p[i].n, at[i] + 3, 1) : 0;
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
    /* every column of one splicable type in every part, each part's columns its whole body */
    size_t *cur = ok ? malloc((size_t)n * sizeof *cur) : NULL;
    ok = ok && cur;
    for (int i = 0; ok && i < n; i++)
        cur[i] = off[i];
    for (size_t c = 0; ok && c < ncols; c++) {
        int t0 = cur[0] < p[0].n ? (int8_t)p[0].b[cur[0]] : -1;
        for (int i = 0; ok && i < n; i++) {
            size_t e = kvalidate_extent(p[i].b, p[i].n, cur[i], 1);
            ok = e && (int8_t)p[i].b[cur[i]] == t0 && (ktype_basic(t0) || (t0 == KT_LIST && !p[i].b[cur[i] + 1]));
            cur[i] = e;
        }
    }
    for (int i = 0; ok && i < n; i++)
        ok = cur[i] == p[i].n;
    if (ok) {
        uint8_t h[3] = {KT_TABLE, 0, KT_DICT};
        ob_add(o, h, 3);
        uint8_t nh[2] = {KT_SYM, 0};
        ob_add(o, nh, 2);
        ob_add(o, p[0].b + names + 2, names_end - names - 2);
        uint8_t lh[6] = {KT_LIST, 0};
        qg_st32(lh + 2, (uint32_t)ncols);
        ob_add(o, lh, 6);
        for (size_t c = 0; ok && c < ncols; c++) {
            for (int i = 0; i < n; i++)
                end[i] = kvalidate_extent(p[i].b, p[i].n, off[i], 1);
            ok = splice_items(o, p, off, end, n, (int8_t)p[0].b[off[0]]);
            for (int i = 0; i < n; i++)
                off[i] = end[i];
        }
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
    size_t *at = p ? calloc(2 * (size_t)n, sizeof *at) : NULL, *end = at ? at + n : NULL;
    struct obuf o = {0};
    int ok = at != NULL;
    for (int i = 0; ok && i < n; i++) { /* little-endian, plain, one whole object: else K objects */
        ok = len[i] > 8 && m[i][0] == 1 && !m[i][2];
        p[i] = (struct bpart){m[i] + 8, len[i] - 8};
        ok = ok && kvalidate_extent(p[i].b, p[i].n, 0, 1) == p[i].n;
    }
    int first_error = -1, t = ok ? bltype(p[0].b) : -1, lt = t, live = 0, last = -1;
    for (int i = 0; ok && i < n; i++) {
        if ((int8_t)p[i].b[0] == KT_ERROR && first_error < 0)
            first_error = i;
        lt = lt == bltype(p[i].b) ? lt : -1; /* one list type throughout, or -1 */
        if (!((int8_t)p[i].b[0] == KT_LIST && !qg_ld32(p[i].b + 2))) {
            live++; /* not () */
            last = i;
        }
        end[i] = p[i].n;
    }
    ob_room(&o, 8); /* the header, written last */
    if (!ok) {
    } else if (first_error >= 0) {
        ob_add(&o, p[first_error].b, p[first_error].n);
    } else if (as_list) { /* (`.qgate.all; g; q; `list): the replies as they are */
        uint8_t h[6] = {KT_LIST, 0};
        qg_st32(h + 2, (uint32_t)n);
        ob_add(&o, h, 6);
        for (int i = 0; i < n; i++)
            ob_add(&o, p[i].b, p[i].n);
    } else if (n == 1) { /* raze enlist x: a basic atom made a vector, else x */
        if (t > 0 && (int8_t)p[0].b[0] < 0)
            ok = splice_items(&o, p, at, end, 1, t);
        else
            ob_add(&o, p[0].b, p[0].n);
    } else if (lt > 0) { /* vectors and atoms of one type */
        ok = splice_items(&o, p, at, end, n, lt);
    } else if (lt == 0) { /* general lists: () joins as nothing */
        if (live == 1)
            ob_add(&o, p[last].b, p[last].n);
        else
            ok = splice_items(&o, p, at, end, n, 0);
    } else if ((int8_t)p[0].b[0] == KT_TABLE) {
        ok = splice_tables(&o, p, at, n);
    } else { /* dictionaries and keyed tables (upsert), mixed shapes: K objects */
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

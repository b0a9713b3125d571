/* kcodec.h: K objects and their kdb+ serialised form: validate, deserialise, serialise. */
#ifndef KCODEC_H
#define KCODEC_H

#include "qg.h"

/* K type codes (docs/kdb-ipc.md section 3). Atoms are the negated vector codes. */
enum ktype {
    KT_LIST = 0, KT_BOOL = 1, KT_GUID = 2, KT_BYTE = 4, KT_SHORT = 5, KT_INT = 6, KT_LONG = 7,
    KT_REAL = 8, KT_FLOAT = 9, KT_CHAR = 10, KT_SYM = 11, KT_TIMESTAMP = 12, KT_MONTH = 13,
    KT_DATE = 14, KT_DATETIME = 15, KT_TIMESPAN = 16, KT_MINUTE = 17, KT_SECOND = 18,
    KT_TIME = 19,
    KT_TABLE = 98, KT_DICT = 99, KT_LAMBDA = 100, KT_UNARY = 101, KT_BINARY = 102,
    KT_TERNARY = 103, KT_PROJECTION = 104, KT_COMPOSITION = 105, KT_EACH = 106, KT_OVER = 107,
    KT_SCAN = 108, KT_EACHPRIOR = 109, KT_EACHRIGHT = 110, KT_EACHLEFT = 111,
    KT_SORTED_DICT = 127, KT_ERROR = -128,
};

#define KATTR_MAX 4          /* 0 none, 1 s#, 2 u#, 3 p#, 4 g# */
#define KCODEC_DEPTH_DEFAULT 128

/* A K object. One allocation holds the header and, for vectors and compounds, the items
 * (data[]): numbers, symbol pointers (and the symbol text unless interned), or child
 * pointers. A tree owns its children; k_free releases the whole tree.
 *   atoms (t < 0):         value in the union (s for symbol atoms)
 *   vectors (1..19):       n items in data; symbols are const char * to NUL-terminated text
 *   list 0, proj 104, comp 105: n children; table 98: 1 child (a dict);
 *   dict 99/127: 2 children (keys, values); iterators 106..111: 1 child
 *   lambda 100: s = context name, 1 child (the source, a char vector)
 *   primitives 101..103: g = the primitive's index; error -128: s = the text */
typedef struct k0 *K;
struct k0 {
    int8_t t;
    uint8_t attr;
    uint8_t pad[6];
    int64_t n;
    union {
        uint8_t g;
        int16_t h;
        int32_t i;
        int64_t j;
        float e;
        double f;
        uint8_t u[16];
        const char *s;
    };
    uint8_t data[];
};
_Static_assert(sizeof(struct k0) == 32, "K header is 32 bytes; data[] is 16-aligned");

#define kG(x) ((x)->data)
#define kC(x) ((char *)(x)->data)
#define kH(x) ((int16_t *)(void *)(x)->data)
#define kI(x) ((int32_t *)(void *)(x)->data)
#define kJ(x) ((int64_t *)(void *)(x)->data)
#define kE(x) ((float *)(void *)(x)->data)
#define kF(x) ((double *)(void *)(x)->data)
#define kS(x) ((const char **)(void *)(x)->data)
#define kK(x) ((K *)(void *)(x)->data)

/* Bytes per item of vector type t (0 for symbols and unknown types); guid is 16. Inline: the
 * validator asks it for every vector. */
extern const int8_t ktype_sizes[20];
static inline int ktype_size(int t)
{
    if (t < 0)
        t = -t;
    return t < 20 ? ktype_sizes[t] : 0;
}
/* Is t a type code that may appear on the wire? */
int ktype_valid(int t);
/* Is t (positive) a basic vector type: boolean to time, 1..19 but 3? */
int ktype_basic(int t);

/* Constructors. All return NULL only on allocation failure. */
K k_atom(int8_t t);                     /* value zeroed; set it through the union */
K k_vec(int8_t t, int64_t n);           /* items zeroed; not for symbols (use k_symv) */
K k_list(int64_t n);                    /* n NULL children, to be filled */
K k_compound(int8_t t, int64_t n);      /* list-like compound: 0, 98, 99, 104..111, 127 */
K k_sym(const char *s);
K k_symv(int64_t n, const char *const *syms);
K k_str(const char *s, size_t len);     /* char vector */
K k_err(const char *msg);
K k_lambda(const char *ctx, const char *src);
K k_prim(int8_t t, uint8_t idx);
K k_dict(K keys, K vals);               /* takes ownership of both */
K k_table(K dict);                      /* takes ownership */
void k_free(K x);

/* Where validation or decoding stopped, and why. */
struct kerr {
    const char *why; /* static text */
    size_t off;      /* byte offset in the body */
};

/* "why at byte N" (N counted from the message's first byte, its 8-byte header included) into
 * buf (n bytes): how a bad message is named to its client. */
void kcodec_err_text(const struct kerr *e, char *buf, size_t n);

/* Interning hook: return a stable NUL-terminated copy of s[0..len), or NULL on failure. */
typedef const char *(*kintern_fn)(void *ctx, const char *s, size_t len);

struct kcodec_opts {
    int max_depth;          /* nesting limit; 0 means KCODEC_DEPTH_DEFAULT */
    uint32_t *seen;         /* if set, validation ORs in 1 << t for every atom or vector of
                             * basic type t (1..19) it walks */
    kintern_fn intern;      /* if set, symbols point at interned text, as in q */
    void *intern_ctx;
};

/* Walk one serialised object (a message body, no header) without allocating. le is the
 * message's byte order. QG_OK if p[0..n) is exactly one well-formed object; else QG_ERR with
 * the reason and byte offset in *err: truncation, counts past the end, unknown types, bad
 * attributes, symbols without a NUL, malformed tables, nesting deeper than max_depth,
 * trailing bytes. */
qg_status kvalidate_check(const uint8_t *p, size_t n, int le, const struct kcodec_opts *o,
                          struct kerr *err) QG_MUSTCHECK;

/* The offset just after the well-formed object that starts at p[off] (within p[0..n)), or 0
 * if there is none there: a walk, nothing built. */
size_t kvalidate_extent(const uint8_t *p, size_t n, size_t off, int le);

/* Validate, then build the K tree of p[0..n). QG_ENOMEM if an allocation fails. */
qg_status kcodec_decode(const uint8_t *p, size_t n, int le, const struct kcodec_opts *o, K *out,
                        struct kerr *err) QG_MUSTCHECK;

/* Serialised size of x in bytes, without header. */
size_t kcodec_size(const K x);
/* Serialise x to out (kcodec_size(x) bytes) in the given byte order; returns the end. */
uint8_t *kcodec_write(const K x, uint8_t *out, int le);
/* A whole little-endian message: header of type msgtype, then x. malloc'd; NULL on ENOMEM. */
uint8_t *kcodec_encode_msg(const K x, int msgtype, size_t *len);
/* The response message q sends for an error 'text (a few bytes). malloc'd; NULL on ENOMEM. */
uint8_t *kcodec_error_msg(const char *text, size_t *len);

/* Text of a q error body (type -128) for messages: returns 1 and sets *text and *len if p[0..n)
 * is an error object. */
int kcodec_is_error(const uint8_t *p, size_t n, const char **text, size_t *len);

#endif

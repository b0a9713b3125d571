/* auth.c: MD5, SHA-1, the q -U users file and constant-time password checks. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

/* ---- hashes ------------------------------------------------------------------------------ */

static inline uint32_t rotl32(uint32_t x, unsigned s) { return (x << s) | (x >> (32 - s)); }


static inline void st32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* RFC 1321 3.4: T[i] = floor(2^32 * abs(sin(i + 1))). */
static const uint32_t md5_t[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};

/* Per-round rotation amounts, four per round. */
static const uint8_t md5_s[16] = {7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21};

/* One 64-byte block of MD5 into st[0..4) (words little-endian). */
static void md5_block(uint32_t *st, const uint8_t *b)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = qg_ld32(b + 4 * i);
    uint32_t a = st[0], bb = st[1], c = st[2], d = st[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g, r = i >> 4;
        if (r == 0) f = (bb & c) | (~bb & d), g = i;
        else if (r == 1) f = (bb & d) | (c & ~d), g = (5 * i + 1) & 15;
        else if (r == 2) f = bb ^ c ^ d, g = (3 * i + 5) & 15;
        else f = c ^ (bb | ~d), g = (7 * i) & 15;
        f += a + md5_t[i] + m[g];
        a = d;
        d = c;
        c = bb;
        bb += rotl32(f, md5_s[4 * r + (i & 3)]);
    }
    st[0] += a, st[1] += bb, st[2] += c, st[3] += d;
}

/* One 64-byte block of SHA-1 into st[0..5) (words big-endian). */
static void sha1_block(uint32_t *st, const uint8_t *b)
{
    uint32_t w[80];
    for (int t = 0; t < 16; t++)
        w[t] = qg_ld32be(b + 4 * t);
    for (int t = 16; t < 80; t++)
        w[t] = rotl32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = st[0], bb = st[1], c = st[2], d = st[3], e = st[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) f = (bb & c) | (~bb & d), k = 0x5a827999;
        else if (t < 40) f = bb ^ c ^ d, k = 0x6ed9eba1;
        else if (t < 60) f = (bb & c) | (bb & d) | (c & d), k = 0x8f1bbcdc;
        else f = bb ^ c ^ d, k = 0xca62c1d6;
        uint32_t tmp = rotl32(a, 5) + f + e + k + w[t];
        e = d;
        d = c;
        c = rotl32(bb, 30);
        bb = a;
        a = tmp;
    }
    st[0] += a, st[1] += bb, st[2] += c, st[3] += d, st[4] += e;
}

/* The Merkle-Damgard walk both hashes share: whole blocks straight from the input, then the
 * tail padded with 0x80, zeros and the bit length (64 bits, big- or little-endian) to 1 or 2
 * blocks. */
static void hash_run(void (*block)(uint32_t *, const uint8_t *), uint32_t *st, const uint8_t *p,
                     size_t n, int be)
{
    size_t full = n / 64, r = n % 64;
    for (size_t i = 0; i < full; i++)
        block(st, p + 64 * i);
    uint8_t tail[128] = {0};
    if (r)
        memcpy(tail, p + 64 * full, r);
    tail[r] = 0x80;
    size_t tl = r < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)n << 3;
    for (int i = 0; i < 8; i++)
        tail[be ? tl - 1 - i : tl - 8 + i] = (uint8_t)(bits >> (8 * i));
    block(st, tail);
    if (tl == 128)
        block(st, tail + 64);
}

void auth_md5(const void *p, size_t n, uint8_t out[16])
{
    uint32_t st[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    hash_run(md5_block, st, p, n, 0);
    for (int i = 0; i < 4; i++)
        qg_st32(out + 4 * i, st[i]);
}

void auth_sha1(const void *p, size_t n, uint8_t out[20])
{
    uint32_t st[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    hash_run(sha1_block, st, p, n, 1);
    for (int i = 0; i < 5; i++)
        st32be(out + 4 * i, st[i]);
}

void auth_hex(const uint8_t *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = 0;
}

/* ---- users file -------------------------------------------------------------------------- */

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

/* A decimal integer 0..INT_MAX, digits only; -1 if malformed or too large. */
static int parse_count(const char *v)
{
    if (!*v)
        return -1;
    long n = 0;
    for (; *v; v++) {
        if (*v < '0' || *v > '9')
            return -1;
        n = n * 10 + (*v - '0');
        if (n > INT_MAX)
            return -1;
    }
    return (int)n;
}

/* The options a line may give after its TAB. */
static const char *const option_names[] = {"admin", "monitor", "max_conns", "max_inflight"};
#define NOPTIONS (int)(sizeof option_names / sizeof option_names[0])

/* Apply the comma-separated key=value list opts (modified in place) to u. */
static int parse_options(char *opts, struct auth_user *u, char *why, size_t whylen)
{
    char *save = NULL;
    int given[NOPTIONS] = {0};
    if (!*opts)
        return 0; /* a bare trailing tab: no options */
    for (char *o = opts; o; o = save) {
        save = strchr(o, ',');
        if (save)
            *save++ = 0;
        if (!*o) {
            snprintf(why, whylen, "empty option");
            return -1;
        }
        char *eq = strchr(o, '=');
        if (!eq) {
            snprintf(why, whylen, "option '%.64s' is not key=value", o);
            return -1;
        }
        *eq = 0;
        const char *v = eq + 1;
        int n = parse_count(v), which = -1;
        for (int i = 0; i < NOPTIONS; i++)
            if (!strcmp(o, option_names[i]))
                which = i;
        if (which < 0) {
            snprintf(why, whylen, "unknown option '%.64s'", o);
            return -1;
        }
        if (given[which]++) { /* the last one would win, silently */
            snprintf(why, whylen, "option %s given twice", o);
            return -1;
        }
        if (which <= 1) { /* admin, monitor */
            if (n != 0 && n != 1) {
                snprintf(why, whylen, "%s: '%.64s' is not 0 or 1", o, v);
                return -1;
            }
            if (!strcmp(o, "admin"))
                u->admin = (uint8_t)n;
            else
                u->monitor = (uint8_t)n;
            if (u->admin && u->monitor) {
                snprintf(why, whylen, "admin and monitor both: a monitor runs gateway commands only, an admin all");
                return -1;
            }
        } else {
            if (n < 0) {
                snprintf(why, whylen, "%s: '%.64s' is not an integer >= 0", o, v);
                return -1;
            }
            if (which == 2)
                u->max_conns = n;
            else
                u->max_inflight = n;
        }
    }
    return 0;
}

static int word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Does a space in the password pass come before what reads as options: one of the option
 * names or max_... (any case) then '=', or word=digits[,word=digits...] to the end? That is a
 * space typed where the TAB belongs ("bob:pw admin=1" would make the password "pw admin=1").
 * The word that reads as an option's name goes to name. */
static int options_after_space(const char *pass, char *name, size_t namelen)
{
    for (const char *sp = strchr(pass, ' '); sp; sp = strchr(sp + 1, ' ')) {
        const char *w = sp;
        while (*w == ' ')
            w++;
        const char *e = w;
        while (word_char(*e))
            e++;
        const char *q = e;
        while (*q == ' ')
            q++;
        if (e == w || *q != '=')
            continue;
        size_t n = (size_t)(e - w);
        int looks = n > 4 && !strncasecmp(w, "max_", 4);
        for (int i = 0; i < NOPTIONS && !looks; i++)
            looks = strlen(option_names[i]) == n && !strncasecmp(w, option_names[i], n);
        if (!looks) { /* word=digits, each of a comma list, to the end */
            const char *p = w;
            for (looks = 1; looks && *p;) {
                const char *k = p;
                while (word_char(*p))
                    p++;
                looks = p > k && *p++ == '=' && isdigit((unsigned char)*p);
                while (looks && isdigit((unsigned char)*p))
                    p++;
                if (looks && *p == ',')
                    p++;
                else if (looks && *p)
                    looks = 0;
            }
        }
        if (looks) {
            snprintf(name, namelen, "%.*s", (int)(n < 64 ? n : 64), w);
            return 1;
        }
    }
    return 0;
}

/* Parse one non-comment line s[0..len) (no newline, no '\r') into u. */
static int parse_line(char *s, size_t len, struct auth_user *u, char *why, size_t whylen)
{
    memset(u, 0, sizeof *u);
    if (memchr(s, 0, len)) {
        snprintf(why, whylen, "NUL byte in line");
        return -1;
    }
    char *tab = strchr(s, '\t');
    if (tab && strchr(tab + 1, '\t')) { /* (at a797b26 said as a bad value of the option before it) */
        snprintf(why, whylen, "a second TAB: the options are one comma list after one TAB (admin=1,max_conns=2)");
        return -1;
    }
    if (tab)
        *tab = 0;
    char *colon = strchr(s, ':');
    if (!colon) {
        snprintf(why, whylen, "expected user:password (no ':')");
        return -1;
    }
    *colon = 0;
    const char *pass = colon + 1;
    size_t ulen = (size_t)(colon - s), plen = strlen(pass);
    if (ulen == 0) {
        snprintf(why, whylen, "empty user name");
        return -1;
    }
    if (ulen > AUTH_NAME_MAX) {
        snprintf(why, whylen, "user name longer than %d bytes", AUTH_NAME_MAX);
        return -1;
    }
    if (plen > AUTH_PASS_MAX) {
        snprintf(why, whylen, "password longer than %d bytes", AUTH_PASS_MAX);
        return -1;
    }
    if (s[0] == ' ' || s[ulen - 1] == ' ') { /* no q client sends such a name: a stray space */
        snprintf(why, whylen, "user name '%.*s' %s with a space%s", (int)ulen, s, s[0] == ' ' ? "begins" : "ends",
                 s[strspn(s, " ")] == '#' ? " (a comment's # must be the line's first character)" : "");
        return -1;
    }
    char opt[72];
    if (options_after_space(pass, opt, sizeof opt)) {
        snprintf(why, whylen, "user '%s': a space before '%s=' in the password: options follow a TAB, not a space "
                 "(a password that holds such text: give its MD5 or SHA-1 hex)", s, opt);
        return -1;
    }
    memcpy(u->name, s, ulen);
    memcpy(u->secret, pass, plen);
    if ((plen == 32 || plen == 40) && is_hex(pass, plen)) {
        u->kind = plen == 32 ? AUTH_MD5 : AUTH_SHA1;
        for (size_t i = 0; i < plen; i++)
            if (u->secret[i] >= 'A' && u->secret[i] <= 'F')
                u->secret[i] = (char)(u->secret[i] - 'A' + 'a');
    } else {
        u->kind = AUTH_PLAIN;
    }
    return tab ? parse_options(tab + 1, u, why, whylen) : 0;
}

static unsigned name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The slot of name s[0..n): its own, or the empty one it would take. */
static int *slot_of(const struct auth_db *db, const char *s, size_t n)
{
    for (unsigned i = name_hash(s, n) & db->mask;; i = (i + 1) & db->mask) {
        int *x = &db->slot[i];
        if (!*x)
            return x;
        const char *name = db->users[*x - 1].name;
        if (strlen(name) == n && !memcmp(name, s, n))
            return x;
    }
}

/* Room in the index for one more user (twice as many slots as users): 0, or -1 (ENOMEM). */
static int index_room(struct auth_db *db)
{
    if (db->slot && 2 * ((unsigned)db->n + 1) <= db->mask + 1)
        return 0;
    unsigned ns = db->slot ? 2 * (db->mask + 1) : 64;
    int *old = db->slot;
    if (!(db->slot = calloc(ns, sizeof *db->slot))) {
        db->slot = old;
        return -1;
    }
    db->mask = ns - 1;
    free(old);
    for (int i = 0; i < db->n; i++)
        *slot_of(db, db->users[i].name, strlen(db->users[i].name)) = i + 1;
    return 0;
}

struct auth_db *auth_load(const char *path, char *err, size_t errlen)
{
    size_t n;
    char *text = config_read_file(path, &n, err, errlen); /* (a regular file, bounded) */
    if (!text)
        return NULL;
    struct auth_db *db = calloc(1, sizeof *db);
    char why[256];
    int lineno = 0, ucap = 0, ok = db != NULL;
    if (!ok)
        snprintf(err, errlen, "%s: out of memory", path);
    for (char *line = text, *end = text + n, *next; ok && line < end; line = next) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
        next = nl ? nl + 1 : end;
        line[len] = 0;
        lineno++;
        if (len && line[len - 1] == '\r')
            line[--len] = 0;
        if (len == 0 || line[0] == '#')
            continue;
        if (db->n == ucap) {
            int ncap = ucap ? 2 * ucap : 16;
            struct auth_user *nu = realloc(db->users, (size_t)ncap * sizeof *nu);
            if (!nu) {
                snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
                ok = 0;
                break;
            }
            db->users = nu;
            ucap = ncap;
        }
        struct auth_user *u = &db->users[db->n];
        if (parse_line(line, len, u, why, sizeof why)) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            ok = 0;
            break;
        }
        if (index_room(db)) {
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
            ok = 0;
            break;
        }
        int *x = slot_of(db, u->name, strlen(u->name));
        if (*x) {
            snprintf(err, errlen, "%s:%d: duplicate user '%s'", path, lineno, u->name);
            ok = 0;
            break;
        }
        *x = ++db->n;
    }
    free(text);
    if (!ok) {
        auth_free(db);
        return NULL;
    }
    return db;
}

void auth_free(struct auth_db *db)
{
    if (!db)
        return;
    free(db->users);
    free(db->slot);
    free(db);
}

const struct auth_user *auth_find(const struct auth_db *db, const char *user, size_t ulen)
{
    if (!db || !db->slot || ulen > AUTH_NAME_MAX)
        return NULL;
    int i = *slot_of(db, user, ulen);
    return i ? &db->users[i - 1] : NULL;
}

/* ---- checking ---------------------------------------------------------------------------- */

/* 1 if a[0..alen) equals b[0..blen), alen <= AUTH_PASS_MAX; the time taken depends on neither
 * content nor on where they differ (always AUTH_PASS_MAX + 1 steps). */
static int ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    volatile unsigned diff = alen != blen;
    for (size_t i = 0; i <= AUTH_PASS_MAX; i++) {
        unsigned x = i < alen ? (uint8_t)a[i] : 0;
        unsigned y = i < blen ? (uint8_t)b[i] : 0;
        diff |= x ^ y;
    }
    return diff == 0;
}

int auth_check(const struct auth_user *u, const char *pass, size_t plen)
{
    if (!u || (!pass && plen))
        return 0;
    uint8_t dig[20];
    char hex[41];
    switch (u->kind) {
    case AUTH_PLAIN:
        return ct_equal(u->secret, strlen(u->secret), pass, plen);
    case AUTH_MD5:
        auth_md5(pass, plen, dig);
        auth_hex(dig, 16, hex);
        return ct_equal(u->secret, strlen(u->secret), hex, 32);
    case AUTH_SHA1:
        auth_sha1(pass, plen, dig);
        auth_hex(dig, 20, hex);
        return ct_equal(u->secret, strlen(u->secret), hex, 40);
    }
    return 0;
}

struct auth_shared {
    atomic_int refs;
    struct auth_db *db;
};

struct auth_shared *auth_share(struct auth_db *db)
{
    struct auth_shared *s = malloc(sizeof *s);
    if (!s) {
        auth_free(db);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->db = db;
    return s;
}

struct auth_shared *auth_ref(struct auth_shared *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void auth_unref(void *p)
{
    struct auth_shared *s = p;
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
        auth_free(s->db);
        free(s);
    }
}

const struct auth_db *auth_db_of(const struct auth_shared *s) { return s->db; }

/* jobs.c: pool jobs: pure functions from bytes (and an immutable context) to bytes. */
#include "jobs.h"
#include <ctype.h>

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "auth.h"
#include "kcodec.h"
#include "kipc.h"
#include "kmerge.h"
#include "kzip.h"
#include "net.h"

#define PREFIX ".qgate."
#define PREFIX_LEN 7

#define GWCMD_NAME(e, s) s,
static const char *const cmd_names[] = {GWCMDS(GWCMD_NAME)};
#undef GWCMD_NAME

/* Whitespace, as q's parser takes it around an expression. */
static int q_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int jobs_peek_command(const uint8_t *m, size_t len)
{
    if (len < 8 || m[2] || jobs_peek_route(m, len))
        return 0;
    const uint8_t *b = m + 8;
    size_t n = len - 8;
    /* "..." : 0a attr count text (whitespace before it, as q reads it: parse_text skips it; a
     * command is at most GWCMD_MAX_LEN bytes, so the look is bounded) */
    if (n > 6 && b[0] == KT_CHAR) {
        size_t t = 6;
        while (t < n && t < 6 + GWCMD_MAX_LEN && q_space(b[t]))
            t++;
        if (n >= t + PREFIX_LEN && !memcmp(b + t, PREFIX, PREFIX_LEN))
            return len <= GWCMD_MAX_LEN ? 1 : -1;
    }
    /* (`.qgate.x; ...) : 00 attr count f5 name; (".qgate.x"; ...) : 00 attr count 0a attr count text */
    int sym = n >= 7 + PREFIX_LEN && b[0] == KT_LIST && (int8_t)b[6] == -KT_SYM && !memcmp(b + 7, PREFIX, PREFIX_LEN);
    int str = n >= 12 + PREFIX_LEN && b[0] == KT_LIST && b[6] == KT_CHAR && !memcmp(b + 12, PREFIX, PREFIX_LEN);
    if (sym || str) {
        uint32_t count = qg_ld32o(b + 2, m[0]);
        return len <= GWCMD_MAX_LEN && count >= 1 && count <= 2 ? 1 : -1;
    }
    return 0;
}

/* Does body b[0..n) of a message of byte order le start a general list of at least one item
 * whose first is the name .qgate.on or .qgate.all, `.qgate.on or ".qgate.on" (q's value
 * takes either; node-q sends a name as a string)? The kind, and *o the offset after that
 * item; 0 if not. */
static int route_name(const uint8_t *b, size_t n, int le, size_t *o)
{
    static const char *const names[] = {NULL, ".qgate.on", ".qgate.all"};
    if (n < 6 + 1 + 9 + 1 || b[0] != KT_LIST || (int32_t)qg_ld32o(b + 2, le) < 1)
        return 0;
    for (int k = ROUTE_ON; k <= ROUTE_ALL; k++) {
        size_t nl = strlen(names[k]);
        if ((int8_t)b[6] == -KT_SYM && n >= 7 + nl + 1 && !memcmp(b + 7, names[k], nl + 1)) {
            *o = 7 + nl + 1;
            return k;
        }
        if (b[6] == KT_CHAR && n >= 12 + nl && qg_ld32o(b + 8, le) == nl && !memcmp(b + 12, names[k], nl)) {
            *o = 12 + nl;
            return k;
        }
    }
    return 0;
}

int jobs_peek_route(const uint8_t *m, size_t len)
{
    size_t o;
    return len >= 8 && !m[2] && m[0] <= 1 ? route_name(m + 8, len - 8, m[0], &o) : 0;
}

/* Is the NUL-terminated symbol at b[o] (within n) `list (1) or `partial (2)? 0 if neither, or
 * no NUL; *end past it. */
static int route_opt(const uint8_t *b, size_t n, size_t o, size_t *end)
{
    const uint8_t *z = o < n ? memchr(b + o, 0, n - o) : NULL;
    if (!z)
        return 0;
    *end = (size_t)(z - b) + 1;
    size_t l = (size_t)(z - b) - o;
    if (l == 4 && !memcmp(b + o, "list", 4))
        return 1;
    return l == 7 && !memcmp(b + o, "partial", 7) ? 2 : 0;
}

/* .qgate.all's 4th item at b[o]: `list, `partial, or a symbol vector of the two (either order,
 * each once). The offset after it, with f's flags set; 0 if it is anything else. */
static size_t route_opts(const uint8_t *b, size_t n, size_t o, int le, struct route_form *f)
{
    size_t end;
    int seen = 0;
    if (o >= n)
        return 0;
    if ((int8_t)b[o] == -KT_SYM) {
        if (!(seen = route_opt(b, n, o + 1, &end)))
            return 0;
    } else if (b[o] == KT_SYM) {
        if (n - o < 6 || b[o + 1] > KATTR_MAX || qg_ld32o(b + o + 2, le) != 2)
            return 0;
        end = o + 6;
        for (int i = 0; i < 2; i++) {
            int opt = route_opt(b, n, end, &end);
            if (!opt || (seen & opt))
                return 0;
            seen |= opt;
        }
    } else {
        return 0;
    }
    f->as_list = (seen & 1) != 0;
    f->partial = (seen & 2) != 0;
    return end;
}

static int route_bad(struct route_form *f, int why)
{
    f->bad = (uint8_t)why;
    f->as_list = f->partial = 0;
    return -1;
}

int jobs_parse_route(const uint8_t *m, size_t len, struct route_form *f)
{
    *f = (struct route_form){0};
    size_t o;
    if (len < 8 || m[2] || m[0] > 1 || !(f->kind = (uint8_t)route_name(m + 8, len - 8, m[0], &o)))
        return 0;
    const uint8_t *b = m + 8;
    size_t n = len - 8;
    int le = m[0];
    int32_t count = (int32_t)qg_ld32o(b + 2, le);
    if (b[1] > KATTR_MAX || (b[6] == KT_CHAR && b[7] > KATTR_MAX))
        return route_bad(f, ROUTE_BAD_LIST);
    if (count != 3 && !(f->kind == ROUTE_ALL && count == 4))
        return route_bad(f, ROUTE_BAD_COUNT);
    /* the group: a symbol atom naming a group (a name a group may have) */
    const uint8_t *name = b + o + 1, *z = o + 1 < n ? memchr(name, 0, n - o - 1) : NULL;
    if (o + 1 >= n || (int8_t)b[o] != -KT_SYM || !z || z == name || z - name >= CFG_NAME_MAX)
        return route_bad(f, ROUTE_BAD_GROUP);
    size_t qoff = (size_t)(z + 1 - b), qend = kvalidate_extent(b, n, qoff, le), end = qend;
    if (!qend) /* truncated, or not a q object: walked and validated as a worker would */
        return route_bad(f, ROUTE_BAD_QUERY);
    if (count == 4 && !(end = route_opts(b, n, qend, le, f)))
        return route_bad(f, ROUTE_BAD_OPTS);
    if (end != n)
        return route_bad(f, ROUTE_BAD_TRAILING);
    f->grp = (uint16_t)(8 + o + 1);
    f->qoff = (uint16_t)(8 + qoff);
    f->tail = (uint32_t)(n - qend);
    return f->kind;
}

const char *jobs_route_why(const struct route_form *f)
{
    switch (f->bad) {
    case ROUTE_OK: return "none";
    case ROUTE_BAD_LIST: return "not a list q reads";
    case ROUTE_BAD_COUNT: return f->kind == ROUTE_ON ? "it takes 3 items" : "it takes 3 or 4 items";
    case ROUTE_BAD_GROUP: return "the group is not a symbol naming a group";
    case ROUTE_BAD_QUERY: return "the query is not a whole q object";
    case ROUTE_BAD_OPTS: return "the 4th item is not `list, `partial or `list`partial";
    default: return "bytes after the last item";
    }
}

const char *jobs_route_usage(const struct route_form *f)
{
    return f->kind == ROUTE_ON ? "(`.qgate.on; `group; query)"
                               : "(`.qgate.all; `group; query) or (`.qgate.all; `group; query; `list, `partial "
                                 "or `list`partial)";
}




static enum gwcmd lookup(const char *name, size_t len)
{
    for (int i = 1; i < GWCMD_N; i++)
        if (strlen(cmd_names[i]) == len && !memcmp(cmd_names[i], name, len))
            return (enum gwcmd)i;
    return GWCMD_UNKNOWN;
}

/* A command's argument, as read. */
struct cmd_arg {
    int kind;            /* GWARG_* */
    int64_t num;
    size_t len;
    char name[GWCMD_ARG_MAX + 1];
};

static int set_name(struct cmd_arg *a, const char *s, size_t n)
{
    if (n > GWCMD_ARG_MAX || memchr(s, 0, n))
        return -1;
    memcpy(a->name, s, n);
    a->name[n] = 0;
    a->len = n;
    a->kind = GWARG_NAME;
    return 0;
}

/* The text between the brackets, a[0..n): nothing, ::, digits, `name or "name". 0, or -1. */
static int text_arg(const char *a, size_t n, struct cmd_arg *x)
{
    if (!n || (n == 2 && a[0] == ':' && a[1] == ':'))
        return 0;
    if (a[0] == '`') { /* a symbol: what q reads as one, up to the bracket */
        for (size_t i = 1; i < n; i++)
            if (a[i] <= ' ' || a[i] > '~' || strchr("`;[]\"()", a[i]))
                return -1;
        return set_name(x, a + 1, n - 1);
    }
    if (a[0] == '"') { /* a string, without escapes */
        if (n < 2 || a[n - 1] != '"' || memchr(a + 1, '"', n - 2) || memchr(a + 1, '\\', n - 2))
            return -1;
        return set_name(x, a + 1, n - 2);
    }
    /* a whole number as q writes one: -? digits, or 0N (null), with a type's letter or none; or
     * a whole float or real (3.0, 3., 3f, 3.0e; 0n null), as the functional form takes one (at
     * 3929a8f .qgate.kill[3.0] was refused, while (`.qgate.kill; 3.0) ran) */
    char t = n > 1 && a[n - 1] && strchr("hijef", a[n - 1]) ? a[n - 1] : 0; /* (a NUL is no type's letter) */
    n -= t != 0;
    x->kind = GWARG_NUM;
    if (n == 2 && a[0] == '0' && (a[1] == 'N' || (a[1] == 'n' && !t))) {
        x->num = GWARG_NULL;
        return 0;
    }
    const char *dot = memchr(a, '.', n);
    if (dot) { /* only zeros after it, and no integral type's letter */
        if ((t && t != 'e' && t != 'f') || dot == a || !isdigit((unsigned char)dot[-1]))
            return -1;
        for (const char *z = dot + 1; z < a + n; z++)
            if (*z != '0')
                return -1;
        n = (size_t)(dot - a);
    }
    int neg = a[0] == '-';
    int64_t v = 0;
    if (n == (size_t)neg)
        return -1;
    for (size_t i = (size_t)neg; i < n; i++) { /* (up to a long's: q reads more digits as a float) */
        if (a[i] < '0' || a[i] > '9' || v > (INT64_MAX - (a[i] - '0')) / 10)
            return -1;
        v = v * 10 + (a[i] - '0');
    }
    if ((dot || t == 'e' || t == 'f') && v > 9007199254740992) /* (a float: within 2^53, as k_arg takes one;
                                                                   * 9223372036854775807.0 is 2^63) */
        return -1;
    x->num = neg ? -v : v;
    return 0;
}

#define GWCMD_BADARG ((enum gwcmd)-1) /* (parse_call's: a known name, an argument it cannot take) */

/* A known command with an argument it cannot take: text (its name) says so in full. */
static enum gwcmd bad_arg(char *text, size_t tlen)
{
    char name[64];
    snprintf(name, sizeof name, "%.60s", text);
    snprintf(text, tlen, "bad command: %s: its argument is none, a whole number, a symbol or a string (of at most %d bytes)",
             name, GWCMD_ARG_MAX);
    return GWCMD_BADARG;
}

/* ".qgate.NAME[]", ".qgate.NAME[::]", ".qgate.NAME[123]", ".qgate.NAME[`x]" or
 * ".qgate.NAME[\"x\"]", spaces allowed around. */
static enum gwcmd parse_text(const char *s, size_t n, char *text, size_t tlen, struct cmd_arg *x)
{
    for (size_t i = 1, quoted = n && s[0] == '"'; i < n; i++) { /* a comment: a space, then / (not in a string) */
        if (s[i] == '"')
            quoted = !quoted;
        else if (!quoted && s[i] == '/' && q_space(s[i - 1])) {
            n = i;
            break;
        }
    }
    while (n && (q_space(s[n - 1]) || s[n - 1] == ';'))
        n--;
    while (n && q_space(*s))
        s++, n--;
    snprintf(text, tlen, "%.*s", (int)(n > 60 ? 60 : n), s);
    if (n < PREFIX_LEN || memcmp(s, PREFIX, PREFIX_LEN))
        return GWCMD_UNKNOWN;
    const char *name = s + PREFIX_LEN, *br = memchr(name, '[', n - PREFIX_LEN);
    /* the name, then juxtaposed an argument, as q applies a function to one (.qgate.pause `rdb,
     * .qgate.kill 12; at 3929a8f an unknown command) */
    size_t word = 0;
    while (word < n - PREFIX_LEN && (isalnum((unsigned char)name[word]) || name[word] == '_'))
        word++;
    const char *ja = name + word;
    while (ja < s + n && q_space(*ja))
        ja++;
    /* (a number after a space: q reads .qgate.kill-3 as .qgate.kill minus 3) */
    if (ja < s + n && (*ja == '`' || *ja == '"' || (ja > name + word && (*ja == '-' || (*ja >= '0' && *ja <= '9'))))) {
        enum gwcmd c = lookup(name, word);
        if (c != GWCMD_UNKNOWN && text_arg(ja, (size_t)(s + n - ja), x))
            return bad_arg(text, tlen);
        return c;
    }
    if (!br || s[n - 1] != ']' || (br > name && q_space(br[-1]))) { /* a command's name alone (q would
                               * show the function), or a space before its bracket (q applies no name
                               * to a bracketed expression list after a space; at 2bf8d01 an unknown
                               * command): said */
        size_t nl = br ? (size_t)(br - name) : n - PREFIX_LEN;
        while (nl && q_space(name[nl - 1]))
            nl--;
        if (lookup(name, nl) == GWCMD_UNKNOWN)
            return GWCMD_UNKNOWN;
        snprintf(text, tlen, "bad command: " PREFIX "%.*s is run as " PREFIX "%.*s[] or (`" PREFIX "%.*s; arg)",
                 (int)nl, name, (int)nl, name, (int)nl, name);
        return GWCMD_BADARG;
    }
    const char *a = br + 1, *e = s + n - 1;
    while (a < e && q_space(*a))
        a++;
    while (e > a && q_space(e[-1]))
        e--;
    enum gwcmd c = lookup(name, (size_t)(br - name));
    if (c != GWCMD_UNKNOWN && text_arg(a, (size_t)(e - a), x))
        return bad_arg(text, tlen);
    return c;
}

/* A functional call's argument: a number (a float only if whole), (::) or () for none, a symbol, or a string. */
static int k_arg(const K x, struct cmd_arg *a)
{
    switch (x->t) { /* (a null of any of them: GWARG_NULL, said as 0N) */
    case -KT_LONG: a->num = x->j == INT64_MIN ? GWARG_NULL : x->j; break;
    case -KT_INT: a->num = x->i == INT32_MIN ? GWARG_NULL : x->i; break;
    case -KT_SHORT: a->num = x->h == INT16_MIN ? GWARG_NULL : x->h; break;
    case -KT_FLOAT: /* node-q sends a JavaScript number as a float: a whole one is an id */
    case -KT_REAL: {
        double d = x->t == -KT_FLOAT ? x->f : x->e;
        if (d != d) { /* 0n */
            a->num = GWARG_NULL;
            break;
        }
        if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
            return -1; /* (whole, and within 2^53, where a double holds every whole number: a long's ids) */
        a->num = (int64_t)d;
        break;
    }
    case KT_UNARY: return x->g ? -1 : 0; /* (::): no argument; another unary primitive (-:, neg) is
                                           * none of a command's arguments (before, it was taken for
                                           * none, and (`.qgate.pause; -:) paused every group: helper round 16) */
    case -KT_SYM: return set_name(a, x->s, strlen(x->s));
    case KT_CHAR: return set_name(a, kC(x), (size_t)x->n); /* node-q sends a name as a string */
    default: return x->t == KT_LIST && x->n == 0 ? 0 : -1;
    }
    a->kind = GWARG_NUM;
    return 0;
}

/* A decoded command: its name and argument (j->result, j->text; x). */
static enum gwcmd parse_call(const K x, char *text, size_t tlen, struct cmd_arg *a)
{
    if (x->t == KT_CHAR)
        return parse_text(kC(x), (size_t)x->n, text, tlen, a);
    if (x->t != KT_LIST || x->n < 1 || x->n > 2)
        return GWCMD_UNKNOWN;
    const K f = kK(x)[0];
    if (f->t != -KT_SYM && f->t != KT_CHAR) /* the name: a symbol, or a string (node-q) */
        return GWCMD_UNKNOWN;
    const char *s = f->t == KT_CHAR ? kC(f) : f->s;
    size_t n = f->t == KT_CHAR ? (size_t)f->n : strlen(f->s);
    snprintf(text, tlen, "%.*s", (int)(n > 60 ? 60 : n), s);
    if (n < PREFIX_LEN || memcmp(s, PREFIX, PREFIX_LEN))
        return GWCMD_UNKNOWN;
    enum gwcmd c = lookup(s + PREFIX_LEN, n - PREFIX_LEN);
    if (c != GWCMD_UNKNOWN && x->n == 2 && k_arg(kK(x)[1], a))
        return bad_arg(text, tlen);
    return c;
}

void job_parse_command(struct job *j)
{
    K x = NULL;
    struct kerr e;
    struct kipc_hdr h;
    const char *why = "a bad header";
    struct job_cmd *o = &job_args(j)->cmd;
    j->result = GWCMD_UNKNOWN;
    o->num = -1;
    o->arg_kind = GWARG_NONE;
    o->said = 0;
    snprintf(j->text, sizeof j->text, "?");
    if (kipc_hdr_parse(j->in, j->in_len, j->in_len, &h, &why) != QG_OK) {
        snprintf(j->text, sizeof j->text, "bad command: %s", why);
        o->said = 1;
        return;
    }
    if (kcodec_decode(j->in + 8, j->in_len - 8, h.le, NULL, &x, &e) != QG_OK) {
        char at[96];
        kcodec_err_text(&e, at, sizeof at);
        snprintf(j->text, sizeof j->text, "bad command: %s", at);
        o->said = 1;
        return;
    }
    struct cmd_arg a = {0};
    j->result = parse_call(x, j->text, sizeof j->text, &a);
    k_free(x);
    if (j->result == (int)GWCMD_BADARG) {
        j->result = GWCMD_UNKNOWN;
        o->said = 1;
        return;
    }
    if (j->result == GWCMD_UNKNOWN)
        return;
    o->arg_kind = a.kind;
    if (a.kind == GWARG_NUM)
        o->num = a.num;
    if (a.kind == GWARG_NAME && (j->out = malloc(a.len + 1))) {
        memcpy(j->out, a.name, a.len + 1);
        j->out_len = a.len;
    } else if (a.kind == GWARG_NAME) {
        j->result = GWCMD_UNKNOWN; /* out of memory: the loop says it does not know it */
    }
}

void job_check_credentials(struct job *j)
{
    const char *c = (const char *)j->in;
    const char *colon = memchr(c, ':', j->in_len);
    size_t ulen = colon ? (size_t)(colon - c) : j->in_len;
    const char *pass = colon ? colon + 1 : c + j->in_len;
    const struct auth_user *u = auth_find(auth_db_of(j->ctx), c, ulen);
    j->result = u && auth_check(u, pass, j->in_len - (size_t)(pass - c));
    if (j->result) {
        job_args(j)->auth = (struct job_auth){.admin = u->admin, .monitor = u->monitor, .max_conns = u->max_conns,
                                              .max_inflight = u->max_inflight};
        snprintf(j->text, sizeof j->text, "%s", u->name);
    }
}

void job_validate_msg(struct job *j)
{
    struct kipc_hdr h;
    const char *why = "bad header";
    j->result = 1;
    if (kipc_hdr_parse(j->in, j->in_len, j->in_len, &h, &why) != QG_OK || h.len != j->in_len) {
        snprintf(j->text, sizeof j->text, "%s", why);
        return;
    }
    const uint8_t *body = j->in + 8;
    size_t n = j->in_len - 8;
    uint8_t *plain = NULL;
    if (h.compressed) {
        size_t len = kzip_uncompressed_len(j->in, j->in_len);
        if (len < 9 || len > (uint64_t)job_args(j)->check.max) {
            snprintf(j->text, sizeof j->text, "compressed message declares %zu bytes", len);
            return;
        }
        if (len > kzip_max_len(j->in_len)) { /* (not allocated: helper round 40b, a 20-byte message
                                               * declaring 2 GB had a reader allocate it) */
            snprintf(j->text, sizeof j->text, "compressed message declares %zu bytes, more than its %zu can make", len,
                     j->in_len);
            return;
        }
        if (!(plain = malloc(len))) {
            snprintf(j->text, sizeof j->text, "out of memory decompressing");
            return;
        }
        if (kzip_decompress(j->in, j->in_len, plain, len, &why) != QG_OK) {
            snprintf(j->text, sizeof j->text, "bad compressed message: %s", why);
            free(plain);
            return;
        }
        body = plain + 8;
        n = len - 8;
    }
    /* a request that names a route is read as one: a form read whole is valid; one that is
     * not is validated to tell a bad route (answered) from a bad message (closed) */
    struct route_form f = {0};
    int rt = h.type != KIPC_RESPONSE && jobs_parse_route(plain ? plain : j->in, n + 8, &f) > 0;
    struct kerr e;
    if (rt || kvalidate_check(body, n, h.le, NULL, &e) == QG_OK)
        j->result = 0;
    else
        kcodec_err_text(&e, j->text, sizeof j->text);
    if (h.type != KIPC_RESPONSE)
        job_args(j)->check.form = f;
    /* a route is taken apart on the loop, and a gateway command (or what starts like one: q
     * compresses only messages over 2000 bytes, so one is a bad command) runs there: each
     * needs the plain bytes, as if it had come plain */
    if (plain && (rt || (h.type != KIPC_RESPONSE && jobs_peek_command(plain, n + 8) != 0))) {
        kipc_hdr_len_write(plain, (uint32_t)(n + 8));
        j->out = plain;
        j->out_len = n + 8;
        return;
    }
    free(plain);
}

void job_resolve(struct job *j)
{
    struct net_target t;
    struct net_addrs *na = calloc(1, sizeof *na);
    j->result = -1;
    if (!na) {
        snprintf(j->text, sizeof j->text, "out of memory");
        return;
    }
    j->out = (uint8_t *)na;
    j->out_len = sizeof *na;
    if (net_parse_target(j->ctx, "localhost", &t)) {
        snprintf(j->text, sizeof j->text, "not host:port, unix://PORT or unix:///path");
        return;
    }
    if (t.kind != NET_TCP) {
        if (net_uds_addr(&t, &na->uds, &na->udslen) == 0)
            j->result = 0;
        else
            snprintf(j->text, sizeof j->text, "no Unix socket (QUDSPATH is set and empty)");
        return;
    }
    struct addrinfo *ai;
    const char *why = "cannot resolve";
    if (net_resolve(t.host, t.port, 0, &ai, &why)) {
        snprintf(j->text, sizeof j->text, "%s", why);
        return;
    }
    memcpy(&na->tcp, ai->ai_addr, QG_MIN((size_t)ai->ai_addrlen, sizeof na->tcp));
    na->tcplen = (socklen_t)QG_MIN((size_t)ai->ai_addrlen, sizeof na->tcp);
    /* local_workers = unix: a worker on this host is tried over q's Unix socket first */
    if (job_args(j)->resolve.local_workers == CFG_LOCAL_UNIX && net_addr_is_local(ai->ai_addr) && net_uds_addr(&t, &na->uds, &na->udslen))
        na->udslen = 0;
    freeaddrinfo(ai);
    j->result = 0;
}

void jobs_reload_free(void *ctx)
{
    struct reload_job *r = ctx;
    if (!r)
        return;
    free(r->cfg);
    auth_unref(r->auth);
    free(r);
}

void job_load_config(struct job *j)
{
    struct reload_job *r = j->ctx;
    r->cfg = malloc(sizeof *r->cfg);
    if (!r->cfg) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return;
    }
    if (config_build(r->cfg, r->path, &r->ov, r->err, sizeof r->err)) {
        free(r->cfg);
        r->cfg = NULL;
        return;
    }
    if (!r->cfg->users_file[0])
        return;
    char err[480];
    struct auth_db *db = auth_load(r->cfg->users_file, err, sizeof err);
    if (!db || !(r->auth = auth_share(db))) {
        snprintf(r->err, sizeof r->err, "users file: %s", db ? "out of memory" : err);
        free(r->cfg);
        r->cfg = NULL;
    }
}

static void encode(struct job *j, K x)
{
    j->out = x ? kcodec_encode_msg(x, KIPC_RESPONSE, &j->out_len) : NULL;
    k_free(x);
}

void job_encode_error(struct job *j) { encode(j, k_err(j->text)); }

/* The message made (out) compressed as q compresses one for a remote peer: over 2000 bytes, to
 * under half; else left as it is. */
static void compress_out(struct job *j)
{
    free(j->in);
    j->in = j->out;
    j->in_len = j->out_len;
    j->out = NULL;
    job_compress_reply(j);
}

void job_encode_command(struct job *j)
{
    const struct job_answer *a = &job_args(j)->answer;
    K x = NULL;
    if (!a->encode) { /* it was done: 1b */
        if ((x = k_atom(-KT_BOOL)))
            x->g = 1;
    } else {
        x = a->encode(j->ctx);
    }
    int cap = a->cap, compress = a->compress;
    encode(j, x);
    if (j->out && cap < 3) { /* an old client: what its capability cannot carry is 'type, as in a
                              * worker's reply (.qgate.stats[]' timestamps at capability 0) */
        j->in = j->out;
        j->in_len = j->out_len;
        j->out = NULL;
        job_args(j)->reply = (struct job_reply){.cap = cap, .max = INT64_MAX, .compress_max = INT64_MAX};
        job_check_reply(j);
    }
    if (j->out && compress) /* a remote client's, as q compresses its replies */
        compress_out(j);
}

/* Types a capability cannot carry: guid below 3, timestamp and timespan at 0. */
static int beyond_cap(uint32_t seen, int cap)
{
    if ((seen & (1u << KT_GUID)) && cap < 3)
        return 1;
    return ((seen & (1u << KT_TIMESTAMP)) || (seen & (1u << KT_TIMESPAN))) && cap < 1;
}

void job_check_reply(struct job *j)
{
    struct kipc_hdr h;
    const char *why;
    uint8_t *plain = j->in;
    size_t len = j->in_len;
    const char *what = job_args(j)->reply.push ? "message" : "reply";
    j->result = 0;
    if (kipc_hdr_parse(j->in, j->in_len, j->in_len, &h, &why) != QG_OK)
        goto pass;
    if (h.compressed) {
        len = kzip_uncompressed_len(j->in, j->in_len);
        if (len > (uint64_t)job_args(j)->reply.compress_max) { /* (its size known only now) */
            if (job_args(j)->reply.plain && job_args(j)->reply.cap >= 3) /* a client on this host: one
                                                                         * over compress_max goes as it is */
                goto pass;
            snprintf(j->text, sizeof j->text, JOB_TOO_LARGE_CAP, what, job_args(j)->reply.cap,
                     (unsigned long long)len, "");
            job_encode_error(j);
            j->result = 1;
            return;
        }
        if (len > (uint64_t)job_args(j)->reply.max) { /* over max_message once decompressed */
            snprintf(j->text, sizeof j->text, "qgate: %s too large (%llu bytes, over max_message)", what,
                     (unsigned long long)len);
            job_encode_error(j);
            j->result = 1;
            return;
        }
        if (len < 9 || len > kzip_max_len(j->in_len) || !(plain = malloc(len)) ||
            kzip_decompress(j->in, j->in_len, plain, len, &why) != QG_OK) {
            free(plain == j->in ? NULL : plain);
            snprintf(j->text, sizeof j->text, "qgate: the worker's compressed %s cannot be decompressed", what);
            job_encode_error(j);
            j->result = 1;
            return;
        }
    }
    uint32_t seen = 0;
    struct kcodec_opts o = {.seen = &seen};
    if (kvalidate_check(plain + 8, len - 8, h.le, &o, NULL) == QG_OK && beyond_cap(seen, job_args(j)->reply.cap)) {
        if (plain != j->in)
            free(plain);
        snprintf(j->text, sizeof j->text, "type");
        job_encode_error(j);
        j->result = 1;
        return;
    }
    if (plain != j->in && (job_args(j)->reply.cap == 0 || job_args(j)->reply.plain)) { /* capability 0 cannot take compressed
                                                         * messages; a client on this host gets none */
        j->out = plain;
        j->out_len = len;
        return;
    }
    if (plain != j->in)
        free(plain);
pass:
    j->out = j->in;
    j->out_len = j->in_len;
    j->in = NULL;
}

void job_compress_reply(struct job *j)
{
    uint8_t *z = j->in_len >= KZIP_MIN_LEN ? malloc(j->in_len / 2) : NULL;
    size_t zl = z ? kzip_compress(j->in, j->in_len, z) : 0;
    if (zl) {
        j->out = z;
        j->out_len = zl;
        return;
    }
    free(z);
    j->out = j->in;
    j->out_len = j->in_len;
    j->in = NULL;
}

void jobs_merge_in_free(void *ctx)
{
    struct merge_in *in = ctx;
    for (int i = 0; in && i < in->n; i++) {
        free(in->part[i].p);
        if (in->names)
            free(in->names[i]);
    }
    if (in)
        free(in->names);
    free(in);
}

/* The compressed replies made plain, in place, once: both ways of merging read plain bytes.
 * 0, or -1 if one cannot be. */
static int make_plain(struct merge_in *in, size_t max)
{
    for (int i = 0; i < in->n; i++) {
        const uint8_t *m = in->part[i].p;
        size_t len = in->part[i].len, n = len >= 8 && m[2] ? kzip_uncompressed_len(m, len) : 0;
        if (len >= 8 && !m[2])
            continue;
        const char *why;
        uint8_t *plain = n >= 9 && n <= max && n <= kzip_max_len(len) ? malloc(n) : NULL;
        if (!plain || kzip_decompress(m, len, plain, n, &why) != QG_OK) {
            free(plain);
            return -1;
        }
        free(in->part[i].p);
        in->part[i].p = plain;
        in->part[i].len = n;
    }
    return 0;
}

/* A worker's (plain) reply decoded, or NULL if unreadable. */
static K decode_reply(const uint8_t *m, size_t len)
{
    struct kipc_hdr h;
    const char *why;
    K x = NULL;
    struct kerr e;
    if (kipc_hdr_parse(m, len, len, &h, &why) != QG_OK || h.len != len ||
        kcodec_decode(m + 8, len - 8, h.le, NULL, &x, &e) != QG_OK)
        return NULL;
    return x;
}

/* The merge on the replies' bytes (kmerge_bytes); NULL if it does not apply. */
static uint8_t *merge_on_bytes(const struct merge_in *in, size_t *len)
{
    size_t n = in->n > 0 ? (size_t)in->n : 1;
    const uint8_t **m = calloc(n, sizeof *m);
    size_t *l = calloc(n, sizeof *l);
    for (int i = 0; m && l && i < in->n; i++) {
        m[i] = in->part[i].p;
        l[i] = in->part[i].len;
    }
    uint8_t *out = m && l ? kmerge_bytes(m, l, in->n, in->as_list, len) : NULL;
    free(l);
    free(m);
    return out;
}

/* The response `workers`result!(`$in->names; x), x the body of the plain response m (len
 * bytes): its bytes are copied after the names, not decoded. NULL on ENOMEM. */
static uint8_t *partial_dict(const struct merge_in *in, const uint8_t *m, size_t len, size_t *out_len)
{
    static const uint8_t keys[] = {KT_DICT, KT_SYM, 0, 2, 0, 0, 0, 'w', 'o', 'r', 'k', 'e', 'r', 's', 0,
                                   'r', 'e', 's', 'u', 'l', 't', 0, KT_LIST, 0, 2, 0, 0, 0};
    size_t names = 6;
    for (int i = 0; i < in->n; i++)
        names += (in->names && in->names[i] ? strlen(in->names[i]) : 0) + 1;
    size_t n = 8 + sizeof keys + names + (len - 8);
    uint8_t *o = malloc(n), *w = o ? o + 8 : NULL;
    if (!o)
        return NULL;
    kipc_hdr_write(o, KIPC_RESPONSE, 0, n);
    memcpy(w, keys, sizeof keys);
    w += sizeof keys;
    *w++ = KT_SYM;
    *w++ = 0;
    qg_st32(w, (uint32_t)in->n);
    w += 4;
    for (int i = 0; i < in->n; i++) {
        const char *s = in->names && in->names[i] ? in->names[i] : "";
        size_t l = strlen(s) + 1;
        memcpy(w, s, l);
        w += l;
    }
    memcpy(w, m + 8, len - 8);
    *out_len = n;
    return o;
}

void job_merge(struct job *j)
{
    struct merge_in *in = j->ctx;
    size_t len = 0, total = 0;
    for (int i = 0; i < in->n; i++) { /* merge_max holds for the bytes the replies stand for, and
                                       * max_message for each: a compressed one is checked at its
                                       * decompressed length (a plain one over it was refused as it came) */
        const uint8_t *p = in->part[i].p;
        size_t l = in->part[i].len;
        int z = l >= 12 && p[2];
        size_t pl = z ? kzip_uncompressed_len(p, l) : l;
        if (z && pl > (uint64_t)job_args(j)->reply.max) {
            snprintf(j->text, sizeof j->text, JOB_TOO_LARGE, (unsigned long long)pl);
            j->result = 2;
            job_encode_error(j);
            return;
        }
        total += pl;
    }
    if (total > (uint64_t)job_args(j)->reply.merge_max) {
        snprintf(j->text, sizeof j->text, "qgate: merge too large (over merge_max, %lld bytes)",
                 (long long)job_args(j)->reply.merge_max);
        j->result = 2;
        job_encode_error(j);
        return;
    }
    int plain = make_plain(in, (size_t)job_args(j)->reply.max) == 0;
    uint8_t *m = plain ? merge_on_bytes(in, &len) : NULL; /* tables and lists: no objects built */
    K x = NULL;
    if (!m && plain) {
        K *parts = calloc((size_t)(in->n ? in->n : 1), sizeof *parts);
        int bad = !parts;
        for (int i = 0; !bad && i < in->n; i++)
            bad = !(parts[i] = decode_reply(in->part[i].p, in->part[i].len));
        x = bad ? NULL : kmerge(parts, in->n, in->as_list);
        for (int i = 0; parts && i < in->n; i++)
            k_free(parts[i]);
        free(parts);
        m = x ? kcodec_encode_msg(x, KIPC_RESPONSE, &len) : NULL;
    }
    k_free(x);
    if (m && in->partial) { /* `workers`result!(`$names; merged), unless merged is an error */
        size_t wl = 0;
        uint8_t *w = m[8] == (uint8_t)KT_ERROR ? NULL : partial_dict(in, m, len, &wl);
        if (w) {
            free(m);
            m = w;
            len = wl;
        } else if (m[8] != (uint8_t)KT_ERROR) {
            free(m);
            m = NULL;
        }
    }
    if (m && len > UINT32_MAX) { /* (merge_max set past 4 GiB): more than a message's 32-bit length holds */
        free(m);
        snprintf(j->text, sizeof j->text, "qgate: merge too large (%zu bytes, over a message's 4 GiB)", len);
        j->result = 2;
        job_encode_error(j);
        return;
    }
    if (!m) {
        snprintf(j->text, sizeof j->text, "qgate: a .qgate.all reply could not be merged");
        j->result = 2;
        job_encode_error(j);
        return;
    }
    if (m[8] == (uint8_t)KT_ERROR) { /* the answer is a q error (a worker's, or raze's): counted so */
        j->result = 1;
        snprintf(j->text, sizeof j->text, "%.*s", (int)strnlen((const char *)m + 9, len - 9), (const char *)m + 9);
    }
    free(j->in);
    j->in = m;
    j->in_len = len;
    const struct job_reply *o = &job_args(j)->reply;
    if (o->cap < 3) { /* an old client: what its capability cannot carry is 'type, the gateway's */
        int merged = j->result; /* (1: the answer is a q error, which job_check_reply passes) */
        job_check_reply(j);
        if (j->result) {
            j->result = 2;
            return;
        }
        j->result = merged;
    } else {
        j->out = j->in;
        j->out_len = j->in_len;
        j->in = NULL;
    }
    if (o->compress && j->out_len <= (size_t)o->compress_max) /* (capability 1 or more: fanout.c) */
        compress_out(j);
}

int jobs_arrival(const uint8_t *m, const struct kipc_hdr *h, size_t check_max, struct jobs_arrival *a, struct kerr *e)
{
    size_t len = (size_t)h->len;
    *a = (struct jobs_arrival){.unchecked = h->compressed || len > check_max};
    /* a peek at the first item's name; a route is read whole only where it is validated here
     * anyway (the reader reads the others, and every compressed one) */
    a->route = !h->compressed && jobs_peek_route(m, len) != 0;
    int read_ok = a->route && !a->unchecked && jobs_parse_route(m, len, &a->form) > 0; /* then it is valid */
    a->cmd = (int8_t)(!a->route ? jobs_peek_command(m, len) : 0); /* decoded on a reader; sync or async */
    if (a->unchecked || read_ok) /* (a command is checked too: a malformed one is a bad message, as q
                                  * answers any, not a bad command) */
        return 0;
    return kvalidate_check(m + 8, len - 8, h->le, NULL, e) == QG_OK ? 0 : -1;
}

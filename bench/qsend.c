/* qsend.c: send q text to a kdb+ endpoint and print each reply, like a minimal q console. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcodec.h"
#include "kfmt.h"
#include "kipc.h"
#include "kzip.h"
#include "qconn.h"
#include "util.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: qsend [-g host:port] [-u user:pass] [--async] [--pipeline|--shut] [--timeout MS] [--raw FILE] [--compress]\n"
            "             TEXT...\n"
            "  sends each TEXT as a char vector (sync unless --async) and prints each reply\n"
            "  in q-like form, one line each; errors print as 'text. --pipeline sends every\n"
            "  message before reading any reply (--shut: then shuts its write side, a half-close); a TEXT starting with \"neg:\" is sent async;\n"
            "  \"on:GROUP:TEXT\" sends (`.qgate.on; `GROUP; \"TEXT\") (\"neg:on:G:T\" async);\n"
            "  \"all:GROUP:TEXT\" (`.qgate.all; `GROUP; \"TEXT\"), \"all-list:G:T\" the same with `list,\n"
            "  \"all-partial:G:T\" with `partial, \"all-list-partial:G:T\" with `list`partial.\n"
            "  \"bytes:FILE\" sends the whole message FILE holds (header included), of the type asked.\n"
            "  \"call:NAME:ARG\" sends (`NAME; ARG), ARG a long if it is digits, else a symbol;\n"
            "  \"call:NAME\" sends (`NAME; ::); \"scall:NAME:ARG\" names NAME with a string, as node-q.\n"
            "  --raw FILE appends every reply's bytes (header included, uncompressed) to FILE.\n"
            "  --wire prints each reply's size as it came on stderr: \"wire: N bytes compressed|plain (M plain)\",\n"
            "  and each async or sync message's too (\"wire: async|sync ...\").\n"
            "  --cap N offers capability N (0 to 3) in the handshake: an old client.\n"
            "  --nest TEXT (once per depth): from inside a sync request it is sent (a callback at depth\n"
            "  d: the d-th --nest), before it answers, it sends TEXT (\"A||B\": each; \"neg:\" async) on\n"
            "  the same handle, as q's .z.pg would, and prints each sync one's reply as \"nested: REPLY\";\n"
            "  an item \"wait:PATH\" sends nothing but waits until PATH exists (a test's go, 30 s at most);\n"
            "  one among the TEXTs does the same between two messages (not with --pipeline); \"serve:PATH\"\n"
            "  too, serving what comes meanwhile (callbacks answered, async messages printed), as a q\n"
            "  client idle at its prompt.\n"
            "  --compress sends each TEXT (and --call's message) compressed as q compresses for a remote\n"
            "  peer, when q would (over 2000 bytes, and under half as long compressed), saying so on\n"
            "  stderr: \"sent: N bytes compressed (M plain)\".\n"
            "  Async messages received are printed as \"async: ...\"; sync requests received\n"
            "  are answered with the string \"qsend got: TEXT\". --read-rate BPS sends the\n"
            "  first TEXT and reads its reply at BPS bytes a second (a slow consumer);\n"
            "  --flood N sends N async copies of the first TEXT in a tight loop, then the rest.\n"
            "  --call N sends (`TEXT; 0; 1; ..; N-1) sync (a call with N long arguments) instead.\n"
            "  --flood-behind N sends the first TEXT sync, N async copies of the second right\n"
            "  behind it without waiting, prints the first's reply, then does the rest.\n"
            "  Exit status 1 when the\n"
            "  connection fails or closes (the reason is printed as 'hop, 'access, 'close).\n");
    exit(2);
}

/* "call:NAME[:ARG]" as (`NAME; ARG) ("scall:": NAME a string), ARG a long if it is digits,
 * else a symbol; no ARG: (::). */
static K call_of(const char *text)
{
    int str = !strncmp(text, "scall:", 6);
    const char *name = text + (str ? 6 : 5), *colon = strchr(name, ':');
    size_t nl = colon ? (size_t)(colon - name) : strlen(name);
    const char *arg = colon ? colon + 1 : NULL;
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)nl, name);
    K l = k_list(2);
    if (!l)
        return NULL;
    kK(l)[0] = str ? k_str(buf, strlen(buf)) : k_sym(buf);
    if (!arg) {
        kK(l)[1] = k_prim(KT_UNARY, 0);
    } else if (arg[0] && strspn(arg, "0123456789") == strlen(arg)) {
        if ((kK(l)[1] = k_atom(-KT_LONG)))
            kK(l)[1]->j = atoll(arg);
    } else {
        kK(l)[1] = k_sym(arg);
    }
    return l;
}

/* TEXT as a char vector message of type (malloc'd, its length in *len), or NULL.
 * "on:GROUP:TEXT" is (`.qgate.on; `GROUP; "TEXT"), a request routed by the gateway. */
static uint8_t *text_msg(const char *text, int type, size_t *len)
{
    if (!strncmp(text, "bytes:", 6)) { /* a whole message, as the file holds it, of type */
        FILE *f = fopen(text + 6, "rb");
        uint8_t *m = NULL;
        long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
        if (n >= 9 && !fseek(f, 0, SEEK_SET) && (m = malloc((size_t)n)) && fread(m, 1, (size_t)n, f) == (size_t)n) {
            m[1] = (uint8_t)type;
            *len = (size_t)n;
        } else {
            fprintf(stderr, "qsend: %s: cannot read a message\n", text + 6);
            free(m);
            m = NULL;
        }
        if (f)
            fclose(f);
        return m;
    }
    if (!strncmp(text, "call:", 5) || !strncmp(text, "scall:", 6)) {
        K c = call_of(text);
        uint8_t *cm = c ? kcodec_encode_msg(c, type, len) : NULL;
        k_free(c);
        return cm;
    }
    /* prefix, name, 4th item: none, `list, `partial, `list`partial */
    static const struct {
        const char *prefix, *name;
        int opts;
    } forms[] = {{"on:", ".qgate.on", 0},          {"all:", ".qgate.all", 0},
                 {"all-list:", ".qgate.all", 1},   {"all-partial:", ".qgate.all", 2},
                 {"all-list-partial:", ".qgate.all", 3}};
    int f = -1;
    for (int i = 0; i < (int)(sizeof forms / sizeof forms[0]) && f < 0; i++)
        if (!strncmp(text, forms[i].prefix, strlen(forms[i].prefix)))
            f = i;
    const char *g0 = f >= 0 ? text + strlen(forms[f].prefix) : NULL, *colon = g0 ? strchr(g0, ':') : NULL;
    K q = colon ? k_list(forms[f].opts ? 4 : 3) : k_str(text, strlen(text));
    if (colon && q) {
        char grp[64];
        snprintf(grp, sizeof grp, "%.*s", (int)(colon - g0), g0);
        kK(q)[0] = k_sym(forms[f].name);
        kK(q)[1] = k_sym(grp);
        kK(q)[2] = k_str(colon + 1, strlen(colon + 1));
        static const char *const both[] = {"list", "partial"};
        if (forms[f].opts)
            kK(q)[3] = forms[f].opts == 3 ? k_symv(2, both) : k_sym(both[forms[f].opts - 1]);
    }
    uint8_t *m = kcodec_encode_msg(q, type, len);
    k_free(q);
    return m;
}

/* --read-rate: send TEXT sync, then read the reply at about bps bytes a second, printing
 * the bytes read so far every second; a slow consumer for fault tests. */
static int slow_read(struct qconn *c, const char *text, long bps)
{
    size_t len;
    uint8_t *m = text_msg(text, KIPC_SYNC, &len);
    if (qconn_send(c, m, len)) {
        free(m);
        return 1;
    }
    free(m);
    uint8_t buf[16384];
    long total = 0;
    for (int tick = 0;; tick++) {
        long want = bps / 10; /* ten sips a second */
        while (want > 0) {
            ssize_t r = read(c->fd, buf, (size_t)(want < (long)sizeof buf ? want : (long)sizeof buf));
            if (r == 0) {
                printf("read %ld then closed\n", total);
                return 0;
            }
            if (r < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    break;
                printf("read %ld then error\n", total);
                return 0;
            }
            total += r;
            want -= r;
        }
        if (tick % 10 == 9) {
            printf("read %ld\n", total);
            fflush(stdout);
        }
        usleep(100000);
    }
}

/* --flood: n async copies of text written as fast as the socket takes them. */
static int do_flood(struct qconn *c, const char *text, long n)
{
    size_t len;
    uint8_t *m = text_msg(text, KIPC_ASYNC, &len);
    enum { BATCH = 1024 };
    uint8_t *batch = malloc(len * BATCH);
    for (int i = 0; i < BATCH; i++)
        memcpy(batch + (size_t)i * len, m, len);
    free(m);
    int rc = 0;
    for (long sent = 0; sent < n && !rc; sent += BATCH) {
        long k = n - sent < BATCH ? n - sent : BATCH;
        rc = qconn_send(c, batch, (size_t)k * len);
    }
    free(batch);
    return rc;
}

static int wire; /* --wire: each message's size on the wire to stderr */

/* --nest TEXT (one per depth): what it sends the gateway from inside a callback before it
 * answers, as a q client's .z.pg calling the same handle: at callback depth d, nests[d]'s
 * messages ("A||B": several), sync ones waited for (printed "nested: REPLY"), "neg:" async. */
#define NEST_MAX 8
static const char *nests[NEST_MAX];
static int nnests, depth, nest_timeout;
static int print_reply(struct qconn *c, int timeout);
static uint8_t *text_msg(const char *text, int type, size_t *len);
static int send_msg(struct qconn *c, const uint8_t *m, size_t len);

/* "wait:PATH": a test's go, until the file is there (at most 30 s); what was printed goes out first */
static void wait_path(const char *path)
{
    fflush(stdout);
    for (int i = 0; i < 3000 && access(path, F_OK); i++)
        poll(NULL, 0, 10);
}

static void send_nested(struct qconn *c)
{
    char *items = strdup(nests[depth]); /* (cut at "||" in place) */
    if (!items)
        return;
    depth++;
    for (char *t = items, *next; t; t = next) {
        if ((next = strstr(t, "||"))) {
            *next = 0;
            next += 2;
        }
        if (!strncmp(t, "wait:", 5)) {
            wait_path(t + 5);
            continue;
        }
        int as = !strncmp(t, "neg:", 4);
        size_t len;
        uint8_t *m = text_msg(as ? t + 4 : t, as ? KIPC_ASYNC : KIPC_SYNC, &len);
        int rc = m ? send_msg(c, m, len) : 1;
        free(m);
        if (rc) {
            printf("'%s\n", qconn_strerror(rc));
            break;
        }
        if (!as && print_reply(c, nest_timeout)) /* (its line says "nested: ") */
            break;
    }
    depth--;
    free(items);
}

static void on_incoming(struct qconn *c);

/* "serve:PATH": until PATH exists (at most 30 s), as a q client idle at its prompt: what comes is
 * served (a callback answered, with what --nest says sent first; an async message printed). 0, or
 * the connection's error. */
static int serve_until(struct qconn *c, const char *path)
{
    fflush(stdout);
    for (int i = 0; i < 3000 && access(path, F_OK); i++) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0)
            continue;
        int rc = qconn_recv(c, 0);
        if (rc) {
            printf("'%s\n", qconn_strerror(rc));
            return rc;
        }
        if (c->hdr.type != KIPC_RESPONSE)
            on_incoming(c);
        else
            printf("'a response nobody asked for\n");
        fflush(stdout);
    }
    return 0;
}

/* A message the other side sent us: print async ones; answer sync ones as a q client would
 * answer with its own .z.pg (here: the text back with a prefix). */
static void on_incoming(struct qconn *c)
{
    K x;
    struct kerr e;
    char out[16384];
    if (wire)
        fprintf(stderr, "wire: %s %zu bytes %s (%zu plain)\n", c->hdr.type == KIPC_ASYNC ? "async" : "sync", c->wire_len,
                c->wire_compressed ? "compressed" : "plain", c->len);
    if (kcodec_decode(c->buf + 8, c->len - 8, c->hdr.le, NULL, &x, &e) != QG_OK) {
        printf("async: 'badmsg\n");
        return;
    }
    kfmt(x, out, sizeof out);
    if (c->hdr.type == KIPC_ASYNC) {
        printf("async: %s\n", out);
    } else {
        if (depth < nnests)
            send_nested(c); /* before it answers, as from inside q's .z.pg */
        static const char got[] = "qsend got: ";
        size_t gl = sizeof got - 1, ol = strlen(out);
        K r = k_vec(KT_CHAR, (int64_t)(gl + (x->t == KT_CHAR ? (size_t)x->n : ol))); /* (all of it, however long) */
        if (r) {
            memcpy(kC(r), got, gl);
            memcpy(kC(r) + gl, x->t == KT_CHAR ? kC(x) : out, x->t == KT_CHAR ? (size_t)x->n : ol);
        }
        size_t len;
        uint8_t *m = kcodec_encode_msg(r, KIPC_RESPONSE, &len);
        k_free(r);
        if (m && qconn_send(c, m, len))
            printf("'close\n");
        free(m);
    }
    k_free(x);
}

/* Wait for the next response (answering or printing what the other side sends meanwhile) and
 * print it. 0, or the qconn error (printed as 'reason). */
static FILE *raw; /* --raw FILE: every reply's bytes, as received (uncompressed), appended */

static int print_reply(struct qconn *c, int timeout)
{
    int rc, nested = depth > 0;
    while (!(rc = qconn_recv(c, timeout)) && c->hdr.type != KIPC_RESPONSE)
        on_incoming(c);
    if (nested)
        printf("nested: ");
    if (rc) {
        printf("'%s\n", qconn_strerror(rc));
        return rc;
    }
    if (wire)
        fprintf(stderr, "wire: %zu bytes %s (%zu plain)\n", c->wire_len, c->wire_compressed ? "compressed" : "plain",
                c->len);
    if (raw && (fwrite(c->buf, 1, c->len, raw) != c->len || fflush(raw)))
        fprintf(stderr, "qsend: --raw: cannot write\n");
    K x;
    struct kerr e;
    if (kcodec_decode(c->buf + 8, c->len - 8, c->hdr.le, NULL, &x, &e) != QG_OK) {
        printf("'badmsg: %s at %zu\n", e.why, e.off);
    } else {
        char out[16384];
        kfmt(x, out, sizeof out);
        printf("%s\n", out);
        k_free(x);
    }
    fflush(stdout);
    return 0;
}

static int compress; /* --compress: messages sent compressed when q would compress them */

/* Send whole message m (kept by the caller), compressed if --compress and q would. */
static int send_msg(struct qconn *c, const uint8_t *m, size_t len)
{
    uint8_t *z = compress && len >= KZIP_MIN_LEN ? malloc(len / 2) : NULL;
    size_t zl = z ? kzip_compress(m, len, z) : 0;
    int rc;
    if (zl) {
        fprintf(stderr, "sent: %zu bytes compressed (%zu plain)\n", zl, len);
        rc = qconn_send(c, z, zl);
    } else {
        rc = qconn_send(c, m, len);
    }
    free(z);
    return rc;
}

int main(int argc, char **argv)
{
    const char *gw = "localhost:8811", *user = NULL;
    int async = 0, timeout = 0, first = 0, pipeline = 0, shut = 0;
    long read_rate = 0, flood = 0, flood_behind = 0, call = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-g") && i + 1 < argc)
            gw = argv[++i];
        else if (!strcmp(argv[i], "-u") && i + 1 < argc)
            user = argv[++i];
        else if (!strcmp(argv[i], "--async"))
            async = 1;
        else if (!strcmp(argv[i], "--pipeline"))
            pipeline = 1;
        else if (!strcmp(argv[i], "--shut"))
            pipeline = shut = 1;
        else if (!strcmp(argv[i], "--read-rate") && i + 1 < argc)
            read_rate = atol(argv[++i]);
        else if (!strcmp(argv[i], "--flood") && i + 1 < argc)
            flood = atol(argv[++i]);
        else if (!strcmp(argv[i], "--flood-behind") && i + 1 < argc)
            flood_behind = atol(argv[++i]);
        else if (!strcmp(argv[i], "--call") && i + 1 < argc)
            call = atol(argv[++i]);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--wire"))
            wire = 1;
        else if (!strcmp(argv[i], "--cap") && i + 1 < argc && atoi(argv[i + 1]) >= 0 && atoi(argv[i + 1]) <= 3)
            hs_capability = (uint8_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compress"))
            compress = 1;
        else if (!strcmp(argv[i], "--nest") && i + 1 < argc && nnests < NEST_MAX)
            nests[nnests++] = argv[++i];
        else if (!strcmp(argv[i], "--raw") && i + 1 < argc) {
            if (!(raw = fopen(argv[++i], "ab"))) {
                perror(argv[i]);
                return 2;
            }
        }
        else if (argv[i][0] == '-' && argv[i][1] == '-')
            usage();
        else {
            first = i;
            break;
        }
    }
    if (!first)
        usage();
    nest_timeout = timeout;
    struct qconn c;
    int rc = qconn_open(&c, gw, user, timeout);
    if (rc) {
        printf("'%s\n", qconn_strerror(rc));
        return 1;
    }
    if (read_rate > 0)
        return slow_read(&c, argv[first], read_rate);
    if (call >= 0) { /* (`name; 0; 1; ...) */
        K l = k_list(call + 1);
        kK(l)[0] = k_sym(argv[first]);
        for (long i = 0; i < call; i++) {
            kK(l)[i + 1] = k_atom(-KT_LONG);
            kK(l)[i + 1]->j = i;
        }
        size_t len;
        uint8_t *m = kcodec_encode_msg(l, KIPC_SYNC, &len);
        k_free(l);
        rc = m ? send_msg(&c, m, len) : 1;
        free(m);
        if (!rc)
            rc = print_reply(&c, timeout);
        else
            printf("'%s\n", qconn_strerror(rc));
        qconn_close(&c);
        return rc ? 1 : 0;
    }
    if (flood_behind > 0) { /* a sync request, and a flood of async messages held behind it */
        if (first + 1 >= argc)
            usage();
        size_t len;
        uint8_t *m = text_msg(argv[first], KIPC_SYNC, &len);
        rc = qconn_send(&c, m, len);
        free(m);
        if (rc || do_flood(&c, argv[first + 1], flood_behind)) {
            printf("'close\n");
            qconn_close(&c);
            return 1;
        }
        printf("flooded %ld\n", flood_behind);
        fflush(stdout);
        if (print_reply(&c, timeout)) {
            qconn_close(&c);
            return 1;
        }
        first += 2;
        if (first >= argc) {
            qconn_close(&c);
            return 0;
        }
    }
    if (flood > 0) {
        if (do_flood(&c, argv[first], flood)) {
            printf("'close\n");
            return 1;
        }
        printf("flooded %ld\n", flood);
        fflush(stdout);
        first++;
    }
    for (int pass = 0; pass < (pipeline ? 2 : 1); pass++) {
        for (int i = first; i < argc; i++) {
            const char *text = argv[i];
            if (!pipeline && !strncmp(text, "wait:", 5)) { /* (between messages, on one connection) */
                wait_path(text + 5);
                continue;
            }
            if (!pipeline && !strncmp(text, "serve:", 6)) { /* ... serving what comes meanwhile */
                if (serve_until(&c, text + 6)) {
                    qconn_close(&c);
                    return 1;
                }
                continue;
            }
            int as = async || !strncmp(text, "neg:", 4);
            if (!strncmp(text, "neg:", 4))
                text += 4;
            if (!pipeline || pass == 0) {
                size_t len;
                uint8_t *m = text_msg(text, as ? KIPC_ASYNC : KIPC_SYNC, &len);
                rc = m ? send_msg(&c, m, len) : 1;
                free(m);
                if (rc) {
                    printf("'%s\n", qconn_strerror(rc));
                    qconn_close(&c);
                    return 1;
                }
                if (pipeline)
                    continue;
            }
            if (shut && i == first && shutdown(c.fd, SHUT_WR)) { /* a half-close: no more sent */
                perror("qsend: shutdown");
                return 1;
            }
            if (as)
                continue;
            if (print_reply(&c, timeout)) {
                qconn_close(&c);
                return 1;
            }
        }
    }
    fflush(stdout);
    qconn_close(&c);
    return 0;
}

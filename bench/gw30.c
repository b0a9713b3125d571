/* gw30.c: a model of q/30gw.q, the -30! deferred-response gateway, for machines without q.
 * It does what that q process does at the cost q pays: one thread; every message it receives
 * is deserialised into K objects (one allocation per object, symbols interned, as q does) and
 * everything it sends is serialised from objects. Requests wait in a FIFO for a free worker,
 * go to it async wrapped in .gw.run, come back async to .gateway.reply, and are answered
 * to the waiting client. Figures measured with it are labelled "gw30 (model)". */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcodec.h"
#include "kipc.h"
#include "kmerge.h"
#include "modes.h"
#include "net.h"
#include "qconn.h"
#include "util.h"

#define MAX_MESSAGE (1ULL << 34)

/* ---- q's symbol table: every symbol interned, never freed ------------------------------ */
static struct {
    const char **slot;
    size_t cap, n;
    char *arena;
    size_t arena_left;
} syms;

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

static const char *intern(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    if (syms.n * 2 >= syms.cap) {
        size_t cap = syms.cap ? syms.cap * 2 : 1 << 16;
        const char **slot = calloc(cap, sizeof *slot);
        if (!slot)
            return NULL;
        for (size_t i = 0; i < syms.cap; i++)
            if (syms.slot[i]) {
                size_t j = hash(syms.slot[i], strlen(syms.slot[i])) & (cap - 1);
                while (slot[j])
                    j = (j + 1) & (cap - 1);
                slot[j] = syms.slot[i];
            }
        free(syms.slot);
        syms.slot = slot;
        syms.cap = cap;
    }
    size_t j = hash(s, n) & (syms.cap - 1);
    while (syms.slot[j]) {
        if (!strncmp(syms.slot[j], s, n) && syms.slot[j][n] == 0)
            return syms.slot[j];
        j = (j + 1) & (syms.cap - 1);
    }
    if (syms.arena_left < n + 1) {
        size_t sz = n + 1 > (1 << 20) ? n + 1 : 1 << 20;
        if (!(syms.arena = malloc(sz)))
            return NULL;
        syms.arena_left = sz;
    }
    char *c = syms.arena;
    memcpy(c, s, n);
    c[n] = 0;
    syms.arena += n + 1;
    syms.arena_left -= n + 1;
    syms.slot[j] = c;
    syms.n++;
    return c;
}

static const struct kcodec_opts qopts = {.intern = intern};

/* ---- connections, workers, pending requests --------------------------------------------- */
enum { LISTENER, CLIENT, WORKER };

struct gconn {
    int kind;
    int fd;
    int ready;
    uint8_t cap;
    int busy;          /* worker in use */
    int widx;          /* worker: its place in --workers */
    struct msgbuf in;
    char peer[64];
    struct gconn *next;
};

struct pending {
    int64_t id;
    struct gconn *client;
    K query;
    struct pending *next;
    /* .gateway.all: sent to each of the first fan workers as it frees, results razed */
    int fan, sent, left;
    K res[16];
};

static struct pending *queue_head, *queue_tail; /* waiting for a free worker, oldest first */
static struct pending *running;                 /* sent to a worker */
static struct gconn *conns;
static int64_t next_id;
static int epfd, quiet, fan_workers = 0;
static struct gconn listener;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gw30: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Send a K object as a message of the given type: serialised here, on the one thread, and
 * written out before anything else happens (q writes a reply synchronously). */
static int send_k(struct gconn *c, K x, int type) { return kmsg_write(c->fd, x, type); }

static void reply_error(struct gconn *c, const char *text)
{
    K e = k_err(text);
    if (e)
        send_k(c, e, KIPC_RESPONSE);
    k_free(e);
}

static struct gconn *free_worker(void)
{
    for (struct gconn *c = conns; c; c = c->next)
        if (c->kind == WORKER && !c->busy)
            return c;
    return NULL;
}

/* neg[w] (.gw.run; id; query) */
static void send_run(struct gconn *w, struct pending *p, int64_t id)
{
    K call = k_list(3);
    if (!call)
        return;
    kK(call)[0] = k_lambda("", QMODE_GW_RUN);
    kK(call)[1] = k_atom(-KT_LONG);
    kK(call)[1]->j = id;
    kK(call)[2] = p->query; /* lent for the send */
    w->busy = 1;
    send_k(w, call, KIPC_ASYNC);
    kK(call)[2] = NULL;
    call->n = 2;
    k_free(call);
}

/* The i-th worker of --workers (fan-out parts go to the first fan_workers, in order), or NULL. */
static struct gconn *nth_worker(int i)
{
    for (struct gconn *c = conns; c; c = c->next)
        if (c->kind == WORKER && c->widx == i)
            return c;
    return NULL;
}

/* .gateway.all at the head of the queue: its parts to each of its workers that is free, in
 * worker order; it leaves the queue when every part is sent. 1 if it still waits. */
static int dispatch_fan(struct pending *p)
{
    struct gconn *w;
    while (p->sent < p->fan && (w = nth_worker(p->sent)) && !w->busy) {
        send_run(w, p, 16 * 1000000000LL + p->id * 16 + p->sent); /* a part: its number in the low bits */
        p->sent++;
    }
    if (p->sent < p->fan)
        return 1;
    queue_head = p->next;
    if (!queue_head)
        queue_tail = NULL;
    p->next = running;
    running = p;
    return 0;
}

/* .gw.dispatch: the oldest waiting request to a free worker, as neg[w] (.gw.run; id; query) */
static void dispatch(void)
{
    struct gconn *w;
    while (queue_head && queue_head->fan) {
        if (dispatch_fan(queue_head))
            return;
    }
    while (queue_head && !queue_head->fan && (w = free_worker())) {
        struct pending *p = queue_head;
        queue_head = p->next;
        if (!queue_head)
            queue_tail = NULL;
        send_run(w, p, p->id);
        p->next = running;
        running = p;
    }
}

/* .gateway.exec[q] (fan 0), .gateway.all[q] (fan: its workers): record, dispatch, defer the
 * reply with -30!(::) */
static void gateway_exec(struct gconn *c, K q, int fan)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p) {
        k_free(q);
        reply_error(c, "wsfull");
        return;
    }
    p->id = ++next_id;
    p->client = c;
    p->query = q;
    p->fan = p->left = fan;
    if (queue_tail)
        queue_tail->next = p;
    else
        queue_head = p;
    queue_tail = p;
    dispatch();
}

/* A fan-out part's result: kept until all are in, then razed on this thread (as the KX
 * example's raze runs in the gateway's q), the first error winning, and sent. */
static void fan_reply(struct gconn *w, int64_t id, K res)
{
    (void)w;
    struct pending **pp = &running, *p;
    while (*pp && (*pp)->id != id / 16)
        pp = &(*pp)->next;
    if (!(p = *pp) || res->t != KT_LIST || res->n != 2)
        return;
    p->res[id % 16] = kK(res)[0]->g ? k_err("fan-out part failed") : kK(res)[1];
    if (!kK(res)[0]->g)
        kK(res)[1] = NULL, res->n = 1; /* kept */
    if (--p->left)
        return;
    *pp = p->next;
    K v = kmerge(p->res, p->fan, 0);
    if (p->client && v)
        send_k(p->client, v, KIPC_RESPONSE);
    k_free(v);
    k_free(p->query);
    free(p);
}

/* .gateway.reply[id; res]: free the worker, -30!(client; isError; result), dispatch */
static void gateway_reply(struct gconn *w, K x)
{
    int64_t id = kK(x)[1]->j;
    K res = kK(x)[2];
    w->busy = 0;
    if (id >= 16 * 1000000000LL) { /* a fan-out part */
        fan_reply(w, id - 16 * 1000000000LL, res);
        dispatch();
        return;
    }
    struct pending **pp = &running;
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    struct pending *p = *pp;
    if (p) {
        *pp = p->next;
        k_free(p->query);
        if (p->client && res->t == KT_LIST && res->n == 2 && kK(res)[0]->t == -KT_BOOL) {
            K v = kK(res)[1];
            if (kK(res)[0]->g) {
                char text[256];
                snprintf(text, sizeof text, "%.*s", v->t == KT_CHAR ? (int)v->n : 4, v->t == KT_CHAR ? kC(v) : "type");
                reply_error(p->client, text);
            } else {
                send_k(p->client, v, KIPC_RESPONSE);
            }
        }
        free(p);
    }
    dispatch();
}

/* A client's message: value x, as 30gw.q's default .z.pg does. */
static void on_client_message(struct gconn *c, int type, K x)
{
    int all = x->t == KT_LIST && x->n == 2 && kname_eq(kK(x)[0], ".gateway.all") && fan_workers > 0;
    if (x->t == KT_LIST && x->n == 2 && (all || kname_eq(kK(x)[0], ".gateway.exec"))) {
        K q = kK(x)[1];
        kK(x)[1] = NULL;
        x->n = 1;
        k_free(x);
        if (type == KIPC_SYNC)
            gateway_exec(c, q, all ? fan_workers : 0);
        else
            k_free(q);
        return;
    }
    if (type == KIPC_SYNC) {
        if (kname_eq(x, ".qgate.ping[]")) {
            K b = k_atom(-KT_BOOL);
            b->g = 1;
            send_k(c, b, KIPC_RESPONSE);
            k_free(b);
        } else if (x->t == KT_LIST && x->n == 2 && kK(x)[0]->t == KT_LAMBDA &&
                   (size_t)kK(kK(x)[0])[0]->n == strlen("{'x}") && !memcmp(kC(kK(kK(x)[0])[0]), "{'x}", 4)) {
            /* throw: the gateway itself evaluates ({'x}; `ERR) */
            K a = kK(x)[1];
            reply_error(c, a->t == -KT_SYM ? a->s : "type");
        } else {
            reply_error(c, "gw30: only .gateway.exec calls, .qgate.ping[] and {'x} are modelled");
        }
    }
    k_free(x);
}

static void on_worker_message(struct gconn *w, K x)
{
    if (x->t == KT_LIST && x->n == 3 && kname_eq(kK(x)[0], ".gateway.reply") && kK(x)[1]->t == -KT_LONG)
        gateway_reply(w, x);
    k_free(x);
}

static void close_conn(struct gconn *c, const char *why)
{
    logf_("%s %s closed: %s", c->kind == WORKER ? "worker" : "client", c->peer, why);
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    /* .z.pc: queued requests of a gone client are dropped; running ones are answered to nobody */
    for (struct pending **pp = &queue_head; *pp;) {
        if ((*pp)->client == c) {
            struct pending *p = *pp;
            *pp = p->next;
            k_free(p->query);
            free(p);
        } else {
            pp = &(*pp)->next;
        }
    }
    queue_tail = NULL;
    for (struct pending *p = queue_head; p; p = p->next)
        queue_tail = p;
    for (struct pending *p = running; p; p = p->next)
        if (p->client == c)
            p->client = NULL;
    for (struct gconn **pp = &conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    free(c->in.p);
    free(c);
}

/* Read what is there; handle every whole message. 0, or -1 if c was closed. */
static int on_readable(struct gconn *c)
{
    if (msgbuf_room(&c->in)) {
        close_conn(c, "out of memory");
        return -1;
    }
    ssize_t r = msgbuf_read(&c->in, c->fd);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close_conn(c, r == 0 ? "EOF" : strerror(errno));
        return -1;
    }
    if (r < 0)
        return 0;
    size_t off = 0;
    if (!c->ready) {
        struct kipc_hs hs;
        qg_status st = kipc_hs_parse(c->in.p, c->in.len, KIPC_HS_MAX_DEFAULT, &hs);
        if (st == QG_AGAIN)
            return 0;
        if (st != QG_OK) {
            close_conn(c, "bad handshake");
            return -1;
        }
        c->cap = kipc_cap_negotiate(hs.cap, KIPC_CAP_MAX);
        net_write_all(c->fd, &c->cap, 1);
        c->ready = 1;
        off = hs.len;
    }
    for (;;) {
        struct kipc_hdr h;
        const char *why;
        qg_status st = msgbuf_next(&c->in, off, MAX_MESSAGE, &h, &why);
        if (st == QG_ERR || st == QG_ENOMEM) {
            close_conn(c, st == QG_ERR ? why : "out of memory");
            return -1;
        }
        if (st == QG_AGAIN)
            break;
        K x;
        struct kerr e;
        if (h.compressed || kcodec_decode(c->in.p + off + 8, (size_t)h.len - 8, h.le, &qopts, &x, &e) != QG_OK) {
            close_conn(c, "badmsg");
            return -1;
        }
        off += (size_t)h.len;
        if (c->kind == WORKER)
            on_worker_message(c, x);
        else
            on_client_message(c, h.type, x);
    }
    msgbuf_consume(&c->in, off);
    return 0;
}

static void add_conn(struct gconn *c)
{
    c->next = conns;
    conns = c;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
}

static void usage(void)
{
    fprintf(stderr, "usage: gw30 -p [host:]port --workers host:port[,host:port...] [--fan-workers N] [--quiet]\n"
                    "  a model of q/30gw.q (the -30! gateway) for machines without q; the first\n"
                    "  line on stdout is \"gw30 listening on HOST:PORT\". --fan-workers N: the\n"
                    "  KX example's fan-out, (.gateway.all; q) to the first N workers, their results\n"
                    "  razed on the one thread, as q's raze runs in that q.\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *at = NULL, *workers = NULL;
    int nworkers = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc)
            at = argv[++i];
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = argv[++i];
        else if (!strcmp(argv[i], "--quiet"))
            quiet = 1;
        else if (!strcmp(argv[i], "--fan-workers") && i + 1 < argc)
            fan_workers = atoi(argv[++i]);
        else
            usage();
    }
    if (fan_workers < 0 || fan_workers > 16)
        usage();
    if (!at || !workers)
        usage();
    signal(SIGPIPE, SIG_IGN);
    nofile_raise(RLIM_INFINITY, NULL); /* q since 4.1 takes as many handles as the OS allows */
    char host[256];
    int port;
    if (net_parse_hostport(at, "0.0.0.0", host, sizeof host, &port))
        usage();
    epfd = epoll_create1(EPOLL_CLOEXEC);
    /* H:hopen each W: the workers, opened once */
    char list[4096];
    snprintf(list, sizeof list, "%s", workers);
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        struct qconn q;
        int rc = qconn_open(&q, a, "gw30:gw30", 5000);
        if (rc) {
            fprintf(stderr, "gw30: cannot open worker %s: %s\n", a, qconn_strerror(rc));
            return 1;
        }
        struct gconn *w = calloc(1, sizeof *w);
        w->kind = WORKER;
        w->fd = q.fd;
        w->ready = 1;
        w->cap = q.cap;
        w->widx = nworkers++;
        snprintf(w->peer, sizeof w->peer, "%s", a);
        add_conn(w);
    }
    int bound;
    int lfd = net_listen_tcp(host, port, 1024, NET_NONBLOCK, &bound);
    if (lfd < 0) {
        fprintf(stderr, "gw30: cannot listen on %s: %s\n", at, strerror(errno));
        return 1;
    }
    listener.kind = LISTENER;
    listener.fd = lfd;
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listener};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev);
    printf("gw30 listening on %s:%d (a model of q/30gw.q)\n", host, bound);
    fflush(stdout);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(epfd, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            struct gconn *c = evs[i].data.ptr;
            if (c->kind == LISTENER) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    continue;
                net_tune(fd);
                struct gconn *nc = calloc(1, sizeof *nc);
                nc->kind = CLIENT;
                nc->fd = fd;
                net_peer_name(fd, nc->peer, sizeof nc->peer);
                add_conn(nc);
                continue;
            }
            /* a connection closed earlier in this batch may still have an event here: only
             * act on connections still in the list */
            int live = 0;
            for (struct gconn *x = conns; x && !live; x = x->next)
                live = x == c;
            if (live)
                on_readable(c);
        }
    }
}

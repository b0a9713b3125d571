/* qfloor.c: the least a gateway that gives each q one request at a time can do, for bench/cpu
 * (issue 22: is qgate's CPU per request at pipeline = 1 above HAProxy's because of qgate, or
 * because of giving each q one request at a time?). One thread, one epoll set: clients'
 * handshakes answered, their messages framed by the header's length and put on one FIFO, each
 * worker connection given the FIFO's head when it is idle, and its response written to that
 * request's client. Nothing else: no timeouts, no auth, no async or callbacks, no limits, no
 * stats; a client that closes with a request out leaves its reply to be dropped. It is a
 * floor to measure against, not a gateway: figures measured with it are labelled "qfloor".
 *
 *   qfloor -p PORT -w HOST:PORT[,HOST:PORT...] [--unix] [--workers-first] [--spin N]
 *
 * --unix reaches each worker on q's Unix socket for its port (@/tmp/kx.PORT), as qgate's
 * local_workers = unix does. --workers-first takes the workers' events of each wake-up before the
 * clients', and writes a worker's next request before the reply it brought (as qgate does): a
 * floor that tries harder not to let a q sleep. --spin N polls the epoll set up to N times without
 * waiting before it sleeps in it: does the floor's own sleeping and waking make the gap? Port 0 picks a free port; the first line on stdout is
 * "qfloor listening on 127.0.0.1:PORT". */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"
#include "qconn.h"

#define MAXW 64

struct out { /* bytes owed to a peer, written when it takes them */
    uint8_t *b;
    size_t len, off, cap;
};

struct peer {
    int fd, worker, shook; /* worker: index + 1 for a worker connection, 0 for a client */
    uint8_t *in;           /* what has been read and not yet framed */
    size_t inlen, incap;
    struct out out;
    uint64_t gen; /* a request remembers its client's generation: a reused slot is not it */
};

struct req {
    struct req *next;
    int client;
    uint64_t gen;
    size_t len;
    uint8_t msg[];
};

static struct peer *peers; /* by descriptor */
static int npeers, epfd, workers_first, spin;
static uint64_t gens;
static struct req *head, *tail;
static struct {
    int fd, busy, client;
    uint64_t gen;
} workers[MAXW];
static int nworkers;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void watch(int fd, uint32_t ev, int op)
{
    struct epoll_event e = {.events = ev, .data.fd = fd};
    if (epoll_ctl(epfd, op, fd, &e) < 0)
        die("epoll_ctl");
}

static int grow(uint8_t **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    uint8_t *n = realloc(*b, c);
    if (!n)
        return -1;
    *b = n;
    *cap = c;
    return 0;
}

static void drop(int fd)
{
    struct peer *p = &peers[fd];
    if (p->worker) {
        fprintf(stderr, "qfloor: worker %d lost\n", p->worker);
        exit(1);
    }
    close(fd);
    free(p->in);
    free(p->out.b);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

/* Write what fd owes, then what is given; keep the rest for EPOLLOUT. */
static void send_to(int fd, const uint8_t *b, size_t n)
{
    struct out *o = &peers[fd].out;
    if (o->len == o->off) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
            drop(fd);
            return;
        }
        if (w < 0)
            w = 0;
        b += w;
        n -= (size_t)w;
        if (!n)
            return;
        o->len = o->off = 0;
        watch(fd, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
    }
    if (grow(&o->b, &o->cap, o->len + n) < 0)
        die("realloc");
    memcpy(o->b + o->len, b, n);
    o->len += n;
}

static void flush(int fd)
{
    struct out *o = &peers[fd].out;
    while (o->off < o->len) {
        ssize_t w = send(fd, o->b + o->off, o->len - o->off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN)
                drop(fd);
            return;
        }
        o->off += (size_t)w;
    }
    o->len = o->off = 0;
    watch(fd, EPOLLIN, EPOLL_CTL_MOD);
}

/* Give idle workers the FIFO's head. */
static void dispatch(void)
{
    for (int i = 0; i < nworkers && head; i++) {
        if (workers[i].busy)
            continue;
        struct req *r = head;
        head = r->next;
        if (!head)
            tail = NULL;
        workers[i].busy = 1;
        workers[i].client = r->client;
        workers[i].gen = r->gen;
        send_to(workers[i].fd, r->msg, r->len);
        free(r);
    }
}

/* A whole message from fd: a client's goes on the FIFO, a worker's response to its client. */
static void on_message(int fd, const uint8_t *m, size_t len)
{
    struct peer *p = &peers[fd];
    if (p->worker) {
        int i = p->worker - 1;
        if (m[1] != 2)
            return; /* a worker's own async message: nowhere to go in the floor */
        workers[i].busy = 0;
        int c = workers[i].client;
        uint64_t gen = workers[i].gen;
        if (workers_first)
            dispatch(); /* its next request before this reply's client: it starts sooner */
        if (peers[c].fd == c && peers[c].gen == gen)
            send_to(c, m, len);
        return;
    }
    struct req *r = malloc(sizeof *r + len);
    if (!r)
        die("malloc");
    r->next = NULL;
    r->client = fd;
    r->gen = p->gen;
    r->len = len;
    memcpy(r->msg, m, len);
    if (tail)
        tail->next = r;
    else
        head = r;
    tail = r;
}

static void on_readable(int fd)
{
    struct peer *p = &peers[fd];
    for (;;) {
        if (grow(&p->in, &p->incap, p->inlen + 16384) < 0)
            die("realloc");
        ssize_t n = recv(fd, p->in + p->inlen, p->incap - p->inlen, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            drop(fd);
            return;
        }
        if (n < 0)
            break;
        p->inlen += (size_t)n;
        if ((size_t)n < 16384)
            break;
    }
    size_t off = 0;
    if (!p->shook) { /* q's handshake: "user:pass" capability NUL, answered with one byte */
        uint8_t *z = memchr(p->in, 0, p->inlen);
        if (!z)
            return;
        uint8_t cap = z > p->in ? z[-1] : 0;
        uint8_t reply = cap > 3 ? 3 : cap;
        p->shook = 1;
        off = (size_t)(z - p->in) + 1;
        send_to(fd, &reply, 1);
        if (peers[fd].fd != fd)
            return;
    }
    while (p->inlen - off >= 8) {
        uint8_t *h = p->in + off;
        uint32_t len = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
        if (len < 8) {
            drop(fd);
            return;
        }
        if (p->inlen - off < len)
            break;
        on_message(fd, h, len);
        off += len;
    }
    memmove(p->in, p->in + off, p->inlen - off);
    p->inlen -= off;
}

static void add_peer(int fd, int worker)
{
    if (fd >= npeers)
        die("too many descriptors");
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    net_tune(fd); /* as qgate's sockets (it fails harmlessly on Unix sockets) */
    peers[fd] = (struct peer){.fd = fd, .worker = worker, .shook = worker != 0, .gen = ++gens};
    watch(fd, EPOLLIN, EPOLL_CTL_ADD);
}

int main(int argc, char **argv)
{
    const char *port = NULL, *list = NULL;
    int uds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc)
            port = argv[++i];
        else if (!strcmp(argv[i], "-w") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--unix"))
            uds = 1;
        else if (!strcmp(argv[i], "--workers-first"))
            workers_first = 1;
        else if (!strcmp(argv[i], "--spin") && i + 1 < argc)
            spin = atoi(argv[++i]);
        else
            port = NULL, list = NULL, i = argc;
    }
    if (!port || !list) {
        fprintf(stderr, "usage: qfloor -p PORT -w HOST:PORT[,HOST:PORT...] [--unix] [--workers-first] [--spin N]\n"
                        "  the least a gateway giving each q one request at a time can do (bench/cpu's floor)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    npeers = 65536;
    peers = calloc((size_t)npeers, sizeof *peers);
    if (!peers)
        die("calloc");
    for (int i = 0; i < npeers; i++)
        peers[i].fd = -1;
    epfd = epoll_create1(0);
    if (epfd < 0)
        die("epoll_create1");
    char *l = strdup(list);
    for (char *s = strtok(l, ","); s; s = strtok(NULL, ",")) {
        if (nworkers == MAXW)
            die("too many workers");
        char addr[300];
        const char *colon = strrchr(s, ':');
        snprintf(addr, sizeof addr, uds && colon ? "unix:%s" : "%s", uds && colon ? colon + 1 : s);
        struct qconn qc;
        if (qconn_open(&qc, addr, "qfloor", 5000) != QCONN_OK) {
            fprintf(stderr, "qfloor: cannot reach %s\n", addr);
            return 1;
        }
        workers[nworkers].fd = qc.fd;
        free(qc.buf);
        add_peer(qc.fd, ++nworkers);
    }
    free(l);
    int bound = 0, ls = net_listen_tcp("127.0.0.1", atoi(port), 1024, NET_NONBLOCK, &bound);
    if (ls < 0)
        die("listen");
    watch(ls, EPOLLIN, EPOLL_CTL_ADD);
    printf("qfloor listening on 127.0.0.1:%d\n", bound);
    fflush(stdout);
    struct epoll_event evs[256];
    for (;;) {
        int n = 0;
        for (int k = 0; k < spin && n == 0; k++)
            n = epoll_wait(epfd, evs, 256, 0);
        if (n == 0)
            n = epoll_wait(epfd, evs, 256, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (workers_first && !peers[fd].worker && i < n - 1) { /* the workers' events first */
                struct epoll_event e = evs[i];
                int j = i + 1;
                while (j < n && (evs[j].data.fd == ls || !peers[evs[j].data.fd].worker))
                    j++;
                if (j < n) {
                    evs[i] = evs[j];
                    evs[j] = e;
                    fd = evs[i].data.fd;
                }
            }
            if (fd == ls) {
                int c;
                while ((c = accept(ls, NULL, NULL)) >= 0)
                    add_peer(c, 0);
                continue;
            }
            if (peers[fd].fd != fd)
                continue;
            if (evs[i].events & EPOLLOUT)
                flush(fd);
            if (peers[fd].fd == fd && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                on_readable(fd);
            dispatch(); /* a worker freed by this event takes the next request at once */
        }
    }
}

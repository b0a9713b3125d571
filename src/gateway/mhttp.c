/* mhttp.c: the metrics page over HTTP on metrics_port: its listener and its connections. A
 * metrics connection is a kind of connection conn.c owns like the others: its table slot, its
 * lists (the flush list, the metrics connections in accept order), its timer and the one close
 * path, and it is freed after the iteration it closed in, never inside it; the page is rendered
 * on the writer pool, its completion naming the connection by (id, generation).
 *
 * What a scraper may do, and what it costs: it sends a request head within MREQ_TIMEOUT_MS (an
 * idle or slow connection holds a place no longer), takes its page within MPAGE_TIMEOUT_MS, and
 * may reset at any point (the page is dropped when it comes back). At most MCONN_MAX connections
 * at once, MCONN_PER_PEER from one address: a new connection over either limit takes the place
 * of one whose reply is out and which waits only for the scraper's close (closed, not counted),
 * else of the oldest one still sending its request (of that address, for the second), which is
 * answered 503, or else of the one whose page its socket has taken no byte of for MSTALL_MS or
 * more, for the longest (a scraper that asks and never reads), closed; so a scrape always gets
 * through however many idle or unread connections hold places. With none to take the place of,
 * the new one is answered 503. Each of these is counted (the
 * refusals metrics_full, metrics_per_peer, metrics_timeout, metrics_out_of_fds). With no
 * descriptor left, the port has one of its own, kept open for it (g->metrics_reserve_fd): it is
 * given up to a scrape, so the page that shows a gateway out of descriptors can still be read,
 * and taken back when a metrics connection closes (its socket closed first, so its descriptor
 * goes to the reserve, not to the q port's next accept). A scrape that finds it taken is met as on
 * the q port: the gateway's reserve descriptor accepts and closes it (conn_accept_loop). */
#include "mhttp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "stream.h"
#include "gw.h"
#include "jobs.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "report.h"
#include "pool.h"

#define MCONN_MAX 32            /* metrics connections at once */
#define MCONN_PER_PEER 8        /* from one address */
#define MREQ_MAX 4096           /* an HTTP request's head */
#define MREQ_TIMEOUT_MS 2000    /* to send it */
#define MPAGE_TIMEOUT_MS 10000  /* to take the page, once asked for */
#define MSTALL_MS 2000          /* a page whose socket takes no byte this long may give way */
enum { MTM_STATE = 0, MTM_STALL = 1 }; /* its timers: request, page or linger; the page's stall mark */

/* MC_LINGER: the reply is out, and what the scraper still sends (the rest of a request answered
 * early: a NUL, a head too long) is read and dropped until it closes (stream_linger_loop: RFC
 * 9112's staged close, as the q port's after a bad message). It gives way at once to a new one. */
enum { MC_READING, MC_WAITING, MC_WRITING, MC_LINGER };

struct mconn {
    struct conn c;       /* first: conn.c owns it */
    uint8_t st;          /* MC_* */
    uint8_t head;        /* asked with HEAD: the page's header alone */
    int64_t moved_ms;    /* writing: when its socket last took a byte of the page (or it began) */
    char peer[64];       /* its address without the port: the per-peer limit */
};

static struct mconn *mconn_of(struct conn *c) { return (struct mconn *)c; }

/* Is c taking its page with its socket having taken no byte of it for MSTALL_MS? */
static int stalled(const struct gw *g, struct conn *c)
{
    return mconn_of(c)->st == MC_WRITING && conn_pending(c) && g->loop.now_ms - mconn_of(c)->moved_ms >= MSTALL_MS;
}

static const struct connops mconn_connops;
static void on_timeout(struct gw *g, struct conn *c);
static void on_stall(struct gw *g, struct conn *c);

/* The reply text (a status, then a short body), the connection closed once it is out. */
static void reply(struct gw *g, struct mconn *m, const char *status, const char *text)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                     "%sConnection: close\r\n\r\n%s",
                     status, strlen(text), !strncmp(status, "405", 3) ? "Allow: GET, HEAD\r\n" : "", text);
    m->st = MC_WRITING;
    conn_set_reading_loop(g, &m->c, 0);
    if (outq_copy(&m->c.out, buf, (size_t)QG_MIN((size_t)n, sizeof buf - 1))) {
        conn_close_loop(g, &m->c, "out of memory");
        return;
    }
    conn_mark_dirty_loop(g, &m->c);
}

/* The request line, whole (in ends past its end of line): METHOD SP target SP HTTP/1.x (RFC
 * 9112 3; at 3929a8f any version, or none, was served: 'GET /metrics HTTP/9.9' got the page).
 * Answered (1) when it is not one, as soon as it has come: a peer that speaks something else
 * waits for no blank line (helper round 40b: at 1bf1093 it was closed, unanswered, 2 s later). */
static int bad_line(struct gw *g, struct mconn *m, const char *in)
{
    const char *eol = in + strcspn(in, "\r\n"), *sp1 = memchr(in, ' ', (size_t)(eol - in));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    /* three parts, one space between each (a space more, in the target or at the end: 400) */
    if (!sp2 || sp1 == in || sp2 == sp1 + 1 || sp2 + 1 == eol || memchr(sp2 + 1, ' ', (size_t)(eol - sp2 - 1))) {
        reply(g, m, "400 Bad Request", "qgate: not an HTTP request line (METHOD /path HTTP/1.1)\n");
        return 1;
    }
    if (eol - sp2 - 1 != 8 || strncmp(sp2 + 1, "HTTP/1.", 7) || sp2[8] < '0' || sp2[8] > '9') {
        reply(g, m, "505 HTTP Version Not Supported", "qgate: HTTP/1.0 or HTTP/1.1 only\n");
        return 1;
    }
    return 0;
}

/* A whole request head: GET (or HEAD) /metrics or / gets the page, made on the writer pool. */
static void request(struct gw *g, struct mconn *m, const char *in)
{
    if (bad_line(g, m, in))
        return;
    int head = !strncmp(in, "HEAD ", 5);
    if (strncmp(in, "GET ", 4) && !head) {
        reply(g, m, "405 Method Not Allowed", "qgate: only GET /metrics\n");
        return;
    }
    const char *path = in + (head ? 5 : 4);
    int absolute = !strncasecmp(path, "http://", 7); /* (RFC 9112 3.2.2: taken too; its path) */
    if (absolute)
        path += 7 + strcspn(path + 7, "/ ?\r\n");
    size_t plen = strcspn(path, " ?\r\n");
    if (!((plen == 8 && !memcmp(path, "/metrics", 8)) || (plen == 1 && path[0] == '/') || (absolute && !plen))) {
        reply(g, m, "404 Not Found", "qgate: the metrics are at /metrics\n");
        return;
    }
    if (!g->mpage_busy) { /* (one made at a time: scrapers, however many, take one writer at most) */
        struct job *j = job_new(job_metrics_page, JK_METRICS);
        if (!j || !(j->ctx = report_totals_loop(g))) {
            job_free(j);
            reply(g, m, "503 Service Unavailable", "qgate: out of memory\n");
            return;
        }
        j->ctx_free = metrics_snap_free;
        conn_submit_loop(g->writers, j, &m->c, 0);
        g->mpage_busy = 1;
    }
    m->st = MC_WAITING;
    m->head = (uint8_t)head;
    conn_set_reading_loop(g, &m->c, 0); /* what it sends now is not read: the page comes, then the close */
    /* the request came in time: the page has as long to be made (a big one, writers busy with
     * large replies) as the scraper has to take it */
    conn_timer_arm_loop(g, &m->c, MTM_STATE, g->loop.now_ms + MPAGE_TIMEOUT_MS, on_timeout);
}

/* Raw input: the request head, once it has all come. */
static int on_bytes(struct gw *g, struct conn *c)
{
    struct mconn *m = mconn_of(c);
    struct inbuf *in = &c->in;
    if (m->st != MC_READING)
        return SS_STOP;
    if (inbuf_reserve(in, inbuf_avail(in) + 1))
        return stream_close(c, "out of memory");
    in->p[in->len] = 0;
    const char *text = (const char *)inbuf_data(in);
    /* empty lines before the request line are passed over (RFC 9112 2.2; at 3929a8f a blank
     * line first was a whole request, answered 405) */
    const char *line = text + strspn(text, "\r\n");
    if (memchr(text, 0, inbuf_avail(in))) /* (no HTTP request holds one: answered, not left to time out) */
        reply(g, m, "400 Bad Request", "qgate: a NUL byte in the request\n");
    else if (strstr(line, "\r\n\r\n") || strstr(line, "\n\n"))
        request(g, m, line);
    else if (strchr(line, '\n') && bad_line(g, m, line))
        ; /* (answered) */
    else if (inbuf_avail(in) >= MREQ_MAX - 1)
        reply(g, m, "431 Request Header Fields Too Large", "qgate: request head too long\n");
    return m->st == MC_READING ? SS_OK : SS_STOP;
}

static void on_event(struct gw *g, struct evsrc *s, uint32_t ev)
{
    struct mconn *m = mconn_of((struct conn *)s);
    if (m->c.closing)
        return;
    if (m->st != MC_READING && m->st != MC_LINGER && (ev & (EPOLLHUP | EPOLLERR))) {
        /* reset while its page is made or sent: epoll says so however its reading is set, on
         * every wait until it is closed (at 127c324 it was not, and the loop spun until the page
         * came); the page, if it comes, is dropped */
        conn_close_loop(g, &m->c, "the scraper has gone");
        return;
    }
    if (ev & EPOLLOUT)
        stream_flush_loop(g, &m->c);
    if (!m->c.closing && m->st == MC_LINGER) { /* read and dropped, until it closes */
        if (stream_lingered_loop(g, &m->c, ev))
            conn_close_loop(g, &m->c, "reply sent");
        return;
    }
    if (!m->c.closing && m->st == MC_READING && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
        stream_read_loop(g, &m->c);
}

static void on_linger_timeout(struct gw *g, struct conn *c)
{
    conn_close_loop(g, c, "reply sent (the scraper kept its side open)");
}

/* Written: all of it out, our side shut (Connection: close); closed once the scraper closes. */
static void on_flushed(struct gw *g, struct conn *c, size_t before, size_t wrote)
{
    (void)before;
    struct mconn *m = mconn_of(c);
    if (wrote) {
        m->moved_ms = g->loop.now_ms;
        if (!conn_timer_armed(c, MTM_STALL) && conn_pending(c)) /* (it had stalled: watched again) */
            conn_timer_arm_loop(g, c, MTM_STALL, g->loop.now_ms + MSTALL_MS, on_stall);
    }
    if (m->st == MC_WRITING && !conn_pending(c)) {
        m->st = MC_LINGER;
        stream_linger_loop(g, c, MTM_STATE, on_linger_timeout);
    }
}

static void on_timeout(struct gw *g, struct conn *c)
{
    struct mconn *m = mconn_of(c);
    if (m->st == MC_WAITING) { /* not the scraper's doing: the writers did not make it in time */
        log_warn(c->name, "metrics connection: the page was not made within %d ms (the writer pool busy): closed",
                 MPAGE_TIMEOUT_MS);
        conn_close_loop(g, c, "timed out");
        return;
    }
    conn_refused_loop(g, REFUSED_METRICS_TIMEOUT, c->name, "metrics connection: %s within %d ms: closed",
                      m->st == MC_READING ? "no request" : "the page not taken", m->st == MC_READING ? MREQ_TIMEOUT_MS
                                                                                                  : MPAGE_TIMEOUT_MS);
    if (m->st == MC_READING && inbuf_avail(&c->in)) { /* a request begun, not ended: told (helper round
                                                        * 40b: at 1bf1093 closed unanswered), then closed */
        reply(g, m, "408 Request Timeout", "qgate: the request did not end in time\n");
        conn_timer_arm_loop(g, c, MTM_STATE, g->loop.now_ms + MPAGE_TIMEOUT_MS, on_timeout); /* (not taken) */
        return;
    }
    conn_close_loop(g, c, "timed out");
}

/* MSTALL_MS after the page began, or after its socket last took a byte: stalled (said once, until
 * it moves again), or look again. */
static void on_stall(struct gw *g, struct conn *c)
{
    struct mconn *m = mconn_of(c);
    if (m->st != MC_WRITING || !conn_pending(c))
        return;
    if (!stalled(g, c)) {
        conn_timer_arm_loop(g, c, MTM_STALL, m->moved_ms + MSTALL_MS, on_stall);
        return;
    }
    log_debug(c->name, "metrics connection: no byte of its page taken for %d ms: it gives way to a new one",
              MSTALL_MS);
}

/* The port's own reserve descriptor, taken back if it was given up and one is free. */
static void reserve_again(struct gw *g)
{
    if (g->metrics_reserve_fd < 0 && g->listen_metrics.fd >= 0)
        g->metrics_reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_close(struct gw *g, struct conn *c, const char *why)
{
    log_debug(c->name, "metrics connection closed: %s", why);
    g->nmconns--;
    conn_drop_socket_loop(g, c); /* its descriptor free first: for the reserve */
    reserve_again(g);
}

static void mconn_free(struct conn *c) { free(mconn_of(c)); }

static const struct connops mconn_connops = {
    .ev = {.on_event = on_event},
    .on_bytes = on_bytes,
    .raw_max = MREQ_MAX - 1,
    .on_close = on_close,
    .on_flushed = on_flushed,
    .free = mconn_free,
};

void mhttp_page_done_loop(struct gw *g, struct job *j)
{
    g->mpage_busy = 0;
    struct shared *page = NULL;
    size_t hlen = 0;
    if (j->out) {
        const uint8_t *e = memmem(j->out, j->out_len, "\r\n\r\n", 4);
        hlen = e ? (size_t)(e - j->out) + 4 : j->out_len;
        page = buf_shared_wrap(j->out, j->out_len); /* (one copy, however many are sent it) */
        j->out = NULL;
    }
    /* every connection waiting gets it: the one it was made for (unless it went meanwhile: reset,
     * timed out), and those that asked while it was made */
    for (struct conn *c = connq_first(&g->metrics_conns), *next; c; c = next) {
        next = connq_next(c);
        struct mconn *m = mconn_of(c);
        if (c->closing || m->st != MC_WAITING)
            continue;
        if (!page) {
            reply(g, m, "503 Service Unavailable", "qgate: out of memory\n");
            continue;
        }
        if (m->head ? outq_copy(&c->out, page->p, hlen) : outq_share(&c->out, page)) {
            conn_close_loop(g, c, "out of memory");
            continue;
        }
        m->st = MC_WRITING;
        m->moved_ms = g->loop.now_ms;
        log_debug(c->name, "metrics page of %zu bytes: sending", m->head ? hlen : page->len);
        conn_mark_dirty_loop(g, c);
        conn_timer_arm_loop(g, c, MTM_STATE, g->loop.now_ms + MPAGE_TIMEOUT_MS, on_timeout);
        conn_timer_arm_loop(g, c, MTM_STALL, g->loop.now_ms + MSTALL_MS, on_stall);
    }
    buf_shared_unref(page);
}

/* 503 on fd, as far as its socket takes it at once (it is closed next either way). */
static void send_503(int fd)
{
    static const char text[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                               "Content-Length: 36\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
                               "qgate: too many metrics connections\n";
    stream_send_now_loop(fd, text, sizeof text - 1);
}

/* One whose reply is out (lingering: see MC_LINGER); else the oldest connection still sending
 * its request (of peer, unless NULL); else, of those taking their page whose socket has taken no byte for MSTALL_MS or more, the one stalled longest (a
 * scraper that asks and never reads: its page stays, with only MPAGE_TIMEOUT_MS to bound it, and
 * 32 of them kept every scrape out); or NULL. One whose socket takes a byte of its page at
 * least every MSTALL_MS never gives way. */
static struct conn *oldest_stuck(struct gw *g, const char *peer)
{
    struct conn *stuck = NULL, *reading = NULL;
    for (struct conn *x = connq_first(&g->metrics_conns); x; x = connq_next(x)) {
        struct mconn *m = mconn_of(x);
        if (peer && strcmp(m->peer, peer))
            continue;
        if (m->st == MC_LINGER)
            return x; /* answered already */
        if (m->st == MC_READING && !reading)
            reading = x;
        else if (stalled(g, x) && (!stuck || m->moved_ms < mconn_of(stuck)->moved_ms))
            stuck = x;
    }
    return reading ? reading : stuck;
}

/* Room for a new connection from peer, over the limit why: the oldest connection still sending
 * its request (peer's own, for the per-address limit) gives way, answered 503. 0, or -1 if
 * none can (the new one is answered 503 instead). Counted either way. */
static int make_room(struct gw *g, int why, const char *peer)
{
    struct conn *old = oldest_stuck(g, why == REFUSED_METRICS_PEER ? peer : NULL);
    if (old && mconn_of(old)->st == MC_LINGER) { /* its reply is out: nothing refused */
        conn_close_loop(g, old, "reply sent (gave way to a new metrics connection)");
        return 0;
    }
    int reading = old && mconn_of(old)->st == MC_READING;
    conn_refused_loop(g, why, old ? old->name : NULL, "metrics connections %s: %s", why == REFUSED_METRICS_PEER
                      ? "from one address at their limit" : "at their limit",
                      !old ? "the new one gets 503" : reading ? "the oldest still sending its request gives way (503)"
                      : "the one whose page waits longest unread gives way");
    if (!old)
        return -1;
    if (old->fd >= 0 && reading) /* (a 503 in the middle of a page would be garbage) */
        send_503(old->fd);
    conn_close_loop(g, old, reading ? "gave way to a new metrics connection (503)"
                                    : "gave way to a new metrics connection (its page not read)");
    return 0;
}

static int from_peer(struct gw *g, const char *peer)
{
    int n = 0;
    for (struct conn *x = connq_first(&g->metrics_conns); x; x = connq_next(x))
        n += !strcmp(mconn_of(x)->peer, peer);
    return n;
}

int mhttp_adopt_loop(struct gw *g, int fd, const char *peer)
{
    if ((from_peer(g, peer) >= MCONN_PER_PEER && make_room(g, REFUSED_METRICS_PEER, peer)) ||
        (g->nmconns >= MCONN_MAX && make_room(g, REFUSED_METRICS_FULL, peer))) {
        send_503(fd);
        close(fd);
        return -1;
    }
    struct mconn *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return -1;
    }
    m->c.fd = -1;
    if (conn_register_loop(g, &m->c, &mconn_connops, CONN_METRICS, fd, EPOLLIN | EPOLLRDHUP)) {
        close(fd);
        free(m);
        return -1;
    }
    snprintf(m->peer, sizeof m->peer, "%s", peer);
    snprintf(m->c.name, sizeof m->c.name, "metrics %s", peer);
    g->nmconns++;
    conn_queue_in_loop(&g->metrics_conns, &m->c);
    conn_timer_arm_loop(g, &m->c, MTM_STATE, g->loop.now_ms + MREQ_TIMEOUT_MS, on_timeout);
    return 0;
}

int mhttp_accepted_loop(struct gw *g, int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl)) { /* reset before it was accepted: gone, */
        close(fd);                                     /* not one more from an address "?" */
        return -1;
    }
    char peer[64];
    net_addr_name((struct sockaddr *)&ss, peer, sizeof peer);
    char *colon = strrchr(peer, ':'); /* its address without its port */
    if (colon && colon != peer)
        *colon = 0;
    return mhttp_adopt_loop(g, fd, peer);
}

static void on_listener(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)ev;
    struct listener *l = (struct listener *)s;
    for (int i = 0; i < 64; i++) {
        int fd = conn_accept_loop(g, l, REFUSED_METRICS_FDS, &g->metrics_accept_log, "metrics accept",
                                  &g->metrics_reserve_fd);
        if (fd < 0)
            return;
        if (mhttp_accepted_loop(g, fd) < 0)
            reserve_again(g); /* refused: its descriptor closed */
    }
    g->loop.work_pending = 1; /* more may wait: next iteration */
}

static const struct evops listener_ops = {.on_event = on_listener};

int mhttp_init(struct gw *g, const struct config *cfg)
{
    g->listen_metrics.fd = -1;
    conn_q_init(&g->metrics_conns);
    if (!cfg->metrics_port)
        return 0;
    const char *bind = cfg->metrics_bind[0] ? cfg->metrics_bind : cfg->bind;
    int fd = net_listen_tcp(bind, cfg->metrics_port, 512, NET_NONBLOCK, NULL);
    if (fd < 0) {
        log_error(NULL, "cannot listen for metrics on %s:%d: %s", bind, cfg->metrics_port,
                  net_listen_why(bind, cfg->metrics_port, errno));
        return -1;
    }
    g->listen_metrics.fd = fd;
    g->listen_metrics.ev.ops = &listener_ops;
    if (loop_watch(g, fd, &g->listen_metrics.ev, EPOLLIN, 0))
        return -1;
    reserve_again(g);
    log_info(NULL, "metrics on http://%s:%d/metrics", bind, cfg->metrics_port);
    return 0;
}

void mhttp_free(struct gw *g)
{
    struct conn *x;
    while ((x = connq_first(&g->metrics_conns)))
        conn_close_loop(g, x, "the gateway stops");
    conn_reap_loop(g);
    conn_listener_close_loop(g, &g->listen_metrics);
    if (g->metrics_reserve_fd >= 0)
        close(g->metrics_reserve_fd);
    g->metrics_reserve_fd = -1;
}

/* test_gateway.c: the loop thread's state machines without processes: clients and workers on
 * socketpairs, driven event by event. Dispatch order and fairness, N+1, reply order, async
 * chasers, stale completions, worker loss, backpressure, splice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stream.h"
#include "client.h"
#include "conn.h"
#include "dispatch.h"
#include "gateway.h"
#include "gw.h"
#include "worker.h"
#include "jobs.h"
#include "kcodec.h"
#include "kzip.h"
#include "kipc.h"
#include "log.h"
#include "mhttp.h"
#include "pool.h"
#include "tutil.h"

static struct gw g;

static int setup(void **state)
{
    (void)state;
    struct config cfg;
    tutil_gw_config(&cfg);
    cfg.splice = 0;
    assert_int_equal(gw_init(&g, &cfg, NULL, NULL, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(g.bad_transitions, 0); /* every worker state change was in worker.c's table */
    gw_free(&g);
    return 0;
}

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

static struct worker *fake_worker(const char *name, int *peer)
{
    int sv[2];
    pair(sv);
    struct worker *w = calloc(1, sizeof *w);
    w->grp = &g.groups[0];
    snprintf(w->addr, sizeof w->addr, "%s", name);
    snprintf(w->c.name, sizeof w->c.name, "w %s", name);
    assert_int_equal(conn_register_loop(&g, &w->c, &worker_connops, CONN_WORKER, sv[0], EPOLLIN), 0);
    w->backoff = 1000;
    STAILQ_INIT(&w->bq);
    STAILQ_INIT(&w->bsent);
    TAILQ_INSERT_TAIL(&w->grp->workers, w, glink);
    w->grp->nworkers++;
    g.loop.nbackends++;
    w->st = WS_HANDSHAKE; /* as if q's handshake had just been done on the socketpair */
    w->c.framed = 1;
    worker_set_state_loop(&g, w, WS_IDLE);
    *peer = sv[1];
    return w;
}

static struct client *fake_client(int *peer)
{
    int sv[2];
    pair(sv);
    struct client *c = calloc(1, sizeof *c);
    TAILQ_INIT(&c->reqs);
    TAILQ_INIT(&c->nested);
    STAILQ_INIT(&c->calls);
    assert_int_equal(conn_register_loop(&g, &c->c, &client_connops, CONN_CLIENT, sv[0], EPOLLIN), 0);
    g.nclients++;
    c->st = CS_READY;
    c->c.framed = 1; /* its handshake done: kdb+ messages */
    c->cap = 3;
    c->local = 1;
    c->grp = &g.groups[0];
    snprintf(c->c.name, sizeof c->c.name, "c%u", c->c.id);
    *peer = sv[1];
    return c;
}

static void send_text(int fd, int type, const char *text)
{
    K x = k_str(text, strlen(text));
    size_t len;
    uint8_t *m = kcodec_encode_msg(x, type, &len);
    k_free(x);
    assert_int_equal(write(fd, m, len), (ssize_t)len);
    free(m);
}

/* Read one whole message from fd (waiting up to 2 s); returns its text (char vector, error
 * as 'text, or "?") in buf, and the message type. -1 if nothing came. */
static int recv_text(int fd, char *buf, size_t len)
{
    uint8_t h[8];
    size_t have = 0;
    while (have < 8) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0)
            return -1;
        ssize_t n = read(fd, h + have, 8 - have);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    size_t total = qg_ld32(h + 4);
    uint8_t *m = malloc(total);
    memcpy(m, h, 8);
    while (have < total) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_true(poll(&p, 1, 2000) > 0);
        ssize_t n = read(fd, m + have, total - have);
        assert_true(n > 0);
        have += (size_t)n;
    }
    K x;
    struct kerr e;
    assert_int_equal(kcodec_decode(m + 8, total - 8, 1, NULL, &x, &e), QG_OK);
    if (x->t == KT_CHAR)
        snprintf(buf, len, "%.*s", (int)x->n, kC(x));
    else if (x->t == KT_ERROR)
        snprintf(buf, len, "'%s", x->s);
    else if (x->t == -KT_BOOL)
        snprintf(buf, len, "%db", x->g);
    else
        snprintf(buf, len, "?");
    int type = m[1];
    k_free(x);
    free(m);
    return type;
}

static int readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 50) > 0;
}

/* One pass of the loop's work, without epoll: the given connections' events, completions,
 * dispatch, flush. */
static uint64_t handled; /* completions handled: one per job submitted */

static void step(void)
{
    stream_backlog_loop(&g);
    handled += (uint64_t)loop_drain_pool_loop(&g, g.readers);
    handled += (uint64_t)loop_drain_pool_loop(&g, g.writers);
    dispatch_all_loop(&g);
    stream_flush_dirty_loop(&g);
    conn_reap_loop(&g);
}

/* What epoll would report for a connection: through its ops, as the loop does. */
static void event(struct conn *c, uint32_t ev) { conn_ops(c)->ev.on_event(&g, &c->ev, ev); }

static void client_in(struct client *c)
{
    event(&c->c, EPOLLIN);
    step();
}

static void worker_in(struct worker *w)
{
    event(&w->c, EPOLLIN);
    step();
}

/* Wait until every job submitted (and every job those submit in turn) has come back and been
 * handled: completions are what is waited for, never a time. */
static void settle_pools(void)
{
    for (int i = 0; i < 100000; i++) {
        step();
        if (handled == pool_jobs_submitted(g.readers) + pool_jobs_submitted(g.writers))
            return;
        struct pollfd p[2] = {{.fd = pool_fd(g.readers), .events = POLLIN}, {.fd = pool_fd(g.writers), .events = POLLIN}};
        poll(p, 2, 100);
    }
    fail_msg("the pools did not finish their jobs");
}

/* The worker side answers the request it was sent with "r:" + the request text. */
static void worker_answer(struct worker *w, int wpeer, char *got, size_t len)
{
    int type = recv_text(wpeer, got, len);
    assert_int_equal(type, KIPC_SYNC);
    char reply[300];
    snprintf(reply, sizeof reply, "r:%s", got);
    send_text(wpeer, KIPC_RESPONSE, reply);
    worker_in(w);
}

static void test_fairness_round_robin(void **state)
{
    (void)state;
    int wp, pa, pb, pc;
    struct worker *w = fake_worker("w1", &wp);
    struct client *a = fake_client(&pa), *b = fake_client(&pb), *c = fake_client(&pc);
    send_text(pa, KIPC_SYNC, "a1");
    send_text(pa, KIPC_SYNC, "a2");
    send_text(pa, KIPC_SYNC, "a3");
    client_in(a);
    send_text(pb, KIPC_SYNC, "b1");
    client_in(b);
    send_text(pc, KIPC_SYNC, "c1");
    client_in(c);
    /* a client that pipelines does not push the others back: a1 b1 c1 a2 a3 */
    const char *want[] = {"a1", "b1", "c1", "a2", "a3"};
    char got[300];
    for (int i = 0; i < 5; i++) {
        worker_answer(w, wp, got, sizeof got);
        assert_string_equal(got, want[i]);
    }
    const char *replies[] = {"r:a1", "r:a2", "r:a3"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
        assert_string_equal(got, replies[i]); /* in the order of the requests */
    }
    assert_int_equal(recv_text(pb, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:b1");
    assert_int_equal(recv_text(pc, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:c1");
    assert_int_equal(w->served, 5);
    assert_int_equal(w->st, WS_IDLE);
    conn_close_loop(&g, &a->c, "test");
    conn_close_loop(&g, &b->c, "test");
    conn_close_loop(&g, &c->c, "test");
    step();
    close(pa), close(pb), close(pc);
    worker_remove_loop(&g, w);
    step();
    close(wp);
}

static void test_n_plus_one(void **state)
{
    (void)state;
    int p1, p2, pa, pb, pc;
    struct worker *w1 = fake_worker("w1", &p1), *w2 = fake_worker("w2", &p2);
    struct client *a = fake_client(&pa), *b = fake_client(&pb), *c = fake_client(&pc);
    send_text(pa, KIPC_SYNC, "slow");
    client_in(a);
    send_text(pb, KIPC_SYNC, "quick");
    client_in(b);
    assert_int_equal(w1->st, WS_BUSY);
    assert_int_equal(w2->st, WS_BUSY);
    send_text(pc, KIPC_SYNC, "third");
    client_in(c);
    assert_int_equal(g.groups[0].queue.n, 1); /* waits for whichever worker frees first */
    /* the worker that got "quick" answers first and takes "third" */
    struct worker *quick = a->w == w1 ? w2 : w1;
    int qpeer = quick == w1 ? p1 : p2, speer = quick == w1 ? p2 : p1;
    char got[300];
    worker_answer(quick, qpeer, got, sizeof got);
    assert_string_equal(got, "quick");
    assert_ptr_equal(c->w, quick);
    worker_answer(quick, qpeer, got, sizeof got);
    assert_string_equal(got, "third");
    assert_int_equal(recv_text(pc, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:third");
    struct worker *slow = quick == w1 ? w2 : w1;
    assert_int_equal(slow->st, WS_BUSY);
    worker_answer(slow, speer, got, sizeof got);
    assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:slow");
    conn_close_loop(&g, &a->c, "test");
    conn_close_loop(&g, &b->c, "test");
    conn_close_loop(&g, &c->c, "test");
    worker_remove_loop(&g, w1);
    worker_remove_loop(&g, w2);
    step();
    close(p1), close(p2), close(pa), close(pb), close(pc);
}

/* A clock that moves on at every read: events of one loop iteration happen at moments of their
 * own, as they do on a real machine. */
static int64_t tick_us;
static int64_t ticking_clock(void *ctx)
{
    (void)ctx;
    return tick_us += 10;
}

/* Two replies read in one iteration are each timed by their own moments (a request's arrival,
 * its sending, its reply's end), not by the iteration's clock: a run read in the same pass as
 * another's is not timed 0 (issue 23: a pipelined worker's p50 showed 0 us). */
static void test_runs_timed_in_one_iteration(void **state)
{
    (void)state;
    int p1, p2, pa, pb;
    struct worker *w1 = fake_worker("w1", &p1), *w2 = fake_worker("w2", &p2);
    struct client *a = fake_client(&pa), *b = fake_client(&pb);
    struct group *grp = &g.groups[0];
    struct hist run0 = grp->run, total0 = grp->total;
    g.loop.clock = ticking_clock; /* step() never reads the iteration's clock: now_us stands still */
    send_text(pa, KIPC_SYNC, "one");
    send_text(pb, KIPC_SYNC, "two");
    event(&a->c, EPOLLIN);
    event(&b->c, EPOLLIN);
    step();
    assert_int_equal(w1->st, WS_BUSY);
    assert_int_equal(w2->st, WS_BUSY);
    char got[300];
    for (int i = 0; i < 2; i++) { /* both workers answer before the gateway reads either */
        int peer = i ? p2 : p1;
        assert_int_equal(recv_text(peer, got, sizeof got), KIPC_SYNC);
        send_text(peer, KIPC_RESPONSE, got);
    }
    event(&w1->c, EPOLLIN);
    event(&w2->c, EPOLLIN);
    step();
    assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
    assert_int_equal(recv_text(pb, got, sizeof got), KIPC_RESPONSE);
    g.loop.clock = NULL;
    for (int i = 0; i < 2; i++) {
        struct worker *w = i ? w2 : w1;
        assert_int_equal(w->lat.n, 1);
        assert_int_equal(w->lat.b[0], 0); /* its run took some time */
    }
    assert_int_equal(grp->run.n - run0.n, 2);
    assert_int_equal(grp->run.b[0] - run0.b[0], 0);
    assert_int_equal(grp->total.n - total0.n, 2);
    assert_int_equal(grp->total.b[0] - total0.b[0], 0);
    conn_close_loop(&g, &a->c, "test");
    conn_close_loop(&g, &b->c, "test");
    worker_remove_loop(&g, w1);
    worker_remove_loop(&g, w2);
    step();
    close(p1), close(p2), close(pa), close(pb);
}

static void test_async_chaser_and_commands(void **state)
{
    (void)state;
    int wp, pa;
    struct worker *w = fake_worker("w1", &wp);
    struct client *a = fake_client(&pa);
    send_text(pa, KIPC_ASYNC, "set x");
    send_text(pa, KIPC_ASYNC, "set y");
    send_text(pa, KIPC_SYNC, ".qgate.ping[]");
    send_text(pa, KIPC_SYNC, "get");
    client_in(a);
    char got[300];
    /* the two async messages go together, followed by the sync "" chaser */
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_ASYNC);
    assert_string_equal(got, "set x");
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_ASYNC);
    assert_string_equal(got, "set y");
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, "");
    assert_int_equal(w->st, WS_BUSY); /* busy until it has run them */
    assert_false(readable(wp));
    send_text(wp, KIPC_RESPONSE, "chaser reply");
    worker_in(w);
    /* the ping is answered by the gateway through the pools, in order, then "get" runs */
    settle_pools();
    worker_answer(w, wp, got, sizeof got);
    assert_string_equal(got, "get");
    assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "1b");
    assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:get");
    assert_false(readable(pa)); /* the chaser's reply was dropped */
    conn_close_loop(&g, &a->c, "test");
    worker_remove_loop(&g, w);
    step();
    close(wp), close(pa);
}

/* async = broadcast: a worker that frees with broadcasts owed from three senders, and a client
 * waiting, sends one owed message (and its chaser) before that client's request, not all three:
 * a waiting request never waits behind more than one owed broadcast per worker per round
 * (0.12.0 sent everything owed first). */
static void test_broadcast_fair(void **state)
{
    (void)state;
    g.groups[0].cfg.async_mode = CFG_ASYNC_BROADCAST;
    int wp, ps, pa[3], pb;
    struct worker *w = fake_worker("w1", &wp);
    struct client *s = fake_client(&ps), *a[3], *b = fake_client(&pb);
    char got[300];
    send_text(ps, KIPC_SYNC, "first");
    client_in(s);
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC); /* w runs it: what follows waits */
    assert_string_equal(got, "first");
    for (int i = 0; i < 3; i++) { /* three senders: a broadcast of each owed by w */
        a[i] = fake_client(&pa[i]);
        char t[16];
        snprintf(t, sizeof t, "a%d", i + 1);
        send_text(pa[i], KIPC_ASYNC, t);
        client_in(a[i]);
    }
    assert_int_equal((int)(STAILQ_FIRST(&w->bq) != NULL), 1);
    send_text(pb, KIPC_SYNC, "b");
    client_in(b);
    send_text(wp, KIPC_RESPONSE, "r:first");
    worker_in(w); /* w frees: one owed broadcast and its chaser, alone (a worker may answer
                   * out of order: b is sent once the chaser's reply is back) */
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_ASYNC);
    assert_string_equal(got, "a1");
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, "");
    assert_false(readable(wp));
    send_text(wp, KIPC_RESPONSE, "chaser reply");
    worker_in(w); /* then b's turn, though a2 and a3 are owed */
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, "b");
    assert_false(readable(wp));
    send_text(wp, KIPC_RESPONSE, "r:b");
    worker_in(w);
    assert_int_equal(recv_text(pb, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:b");
    /* nobody waiting now: the rest go, one sender's run at a time: a2 and its chaser, and a3 only
     * once that chaser is back (what the worker publishes meanwhile is a2's sender's) */
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_ASYNC);
    assert_string_equal(got, "a2");
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    assert_false(readable(wp));
    send_text(wp, KIPC_RESPONSE, "chaser reply");
    worker_in(w);
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_ASYNC);
    assert_string_equal(got, "a3");
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    assert_false(readable(wp));
    send_text(wp, KIPC_RESPONSE, "chaser reply");
    worker_in(w);
    assert_int_equal(w->st, WS_IDLE);
    for (int i = 0; i < 3; i++) {
        conn_close_loop(&g, &a[i]->c, "test");
        close(pa[i]);
    }
    conn_close_loop(&g, &s->c, "test");
    conn_close_loop(&g, &b->c, "test");
    worker_remove_loop(&g, w);
    step();
    g.groups[0].cfg.async_mode = CFG_ASYNC_ONE;
    close(wp), close(ps), close(pb);
}

/* No reply can be made for a gateway command (out of memory): the client is closed, never left
 * waiting for ever (0.12.0 left its request LOCAL: the client hung). */
static void test_command_out_of_memory(void **state)
{
    (void)state;
    int pa;
    struct client *a = fake_client(&pa);
    int before = g.nclients;
    job_new_fail_at = 2; /* the reader's parse job is made; the reply's job is not */
    send_text(pa, KIPC_SYNC, ".qgate.ping[]");
    client_in(a);
    settle_pools();
    job_new_fail_at = 0;
    assert_int_equal(g.nclients, before - 1);
    char b[16];
    assert_true(readable(pa));
    assert_int_equal(read(pa, b, sizeof b), 0); /* closed, without a byte */
    close(pa);
}

/* A connection to the gateway's q port, not yet accepted. */
static int connect_waiting(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&a, sizeof a), 0);
    return cfd;
}

/* accept meets EMFILE with no reserve descriptor to give up (it could not be taken back): the
 * listener stops for a while instead of waking the loop for ever; then it takes the reserve back
 * and accepts again (0.12.0 spun on the level-triggered listener). The connection waiting is
 * served then: not counted as refused. */
static void test_emfile_without_reserve(void **state)
{
    (void)state;
    int cfd = connect_waiting(); /* waits in the backlog */
    close(g.reserve_fd);
    g.reserve_fd = -1; /* as when it could not be taken back */
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int fill[64], nfill = 0, top = dup(0); /* the lowest free descriptors go to fill[], up to the limit */
    low = old;
    low.rlim_cur = (rlim_t)top;
    close(top);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    while (nfill < 64 && (fill[nfill] = dup(0)) >= 0)
        nfill++;
    uint64_t refused = g.refused[REFUSED_NO_FDS].n;
    event((struct conn *)&g.listen_tcp.ev, EPOLLIN); /* the listener's own handler, as the loop calls it */
    assert_int_equal(g.refused[REFUSED_NO_FDS].n, refused);
    assert_int_equal(g.listen_tcp.stopped, 1);
    assert_true(g.listen_tcp.tm.pos != 0);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    int clients = g.nclients;
    for (int i = 0; i < 2000 && (g.listen_tcp.stopped || g.nclients == clients); i++)
        loop_step_loop(&g, 10); /* its timer, then the accept: events, never a time */
    assert_int_equal(g.listen_tcp.stopped, 0);
    assert_true(g.reserve_fd >= 0);
    assert_int_equal(g.nclients, clients + 1); /* the waiting connection taken */
    close(cfd);
}

/* The connection accepted takes the last descriptor: the listener's next accept meets EMFILE
 * with none waiting (Linux takes a descriptor number before it looks). Nothing is refused:
 * nothing counted, the reserve kept, the listener watched (before: a refusal counted and logged
 * for each such turn, and a scrape served on the metrics port's reserve always showed one). */
static void test_emfile_none_waiting(void **state)
{
    (void)state;
    int cfd = connect_waiting(); /* waits in the backlog */
    assert_true(g.reserve_fd >= 0);
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int top = dup(0); /* the lowest free descriptor: the one left under the limit */
    low = old;
    low.rlim_cur = (rlim_t)top + 1;
    close(top);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    uint64_t refused = g.refused[REFUSED_NO_FDS].n;
    int clients = g.nclients;
    event((struct conn *)&g.listen_tcp.ev, EPOLLIN);
    int again = dup(0); /* (none left) */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(again, -1);
    assert_int_equal(g.nclients, clients + 1); /* taken, on the last descriptor */
    assert_int_equal(g.refused[REFUSED_NO_FDS].n, refused);
    assert_int_equal(g.listen_tcp.stopped, 0);
    assert_true(g.reserve_fd >= 0);
    close(cfd);
}

/* A freed id is not handed out again until ID_QUARANTINE others have been freed after it, and
 * then oldest first; a completion for the old (id, generation) never reaches the new owner. */
static void test_stale_completion_dropped(void **state)
{
    (void)state;
    int pa, pb;
    struct client *a = fake_client(&pa);
    uint32_t id = a->c.id, gen = a->c.gen;
    conn_close_loop(&g, &a->c, "gone");
    step();
    close(pa);
    /* the next connections get other ids: the freed one waits its turn */
    struct client *b = NULL;
    int n = 0;
    for (; n < 4000; n++) {
        b = fake_client(&pb);
        if (b->c.id == id)
            break;
        conn_close_loop(&g, &b->c, "churn");
        step();
        close(pb);
    }
    assert_true(n >= 256); /* quarantined for that many connections at least */
    assert_int_equal(b->c.id, id);
    assert_int_not_equal(b->c.gen, gen);
    assert_null(conn_lookup_loop(&g, id, gen));
    /* b's own request 0 waits for a reader; a's old request 0 is answered late */
    send_text(pb, KIPC_SYNC, ".qgate.ping[]");
    client_in(b);
    struct job *j = job_new(NULL, JK_REPLY);
    K e = k_err("stale");
    j->out = kcodec_encode_msg(e, KIPC_RESPONSE, &j->out_len);
    k_free(e);
    j->conn_id = id;
    j->conn_gen = gen;
    j->seq = 0;
    loop_completion_loop(&g, j); /* for (id, old generation): dropped */
    settle_pools();
    char got[300];
    assert_int_equal(recv_text(pb, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "1b"); /* its own answer, not the stale one */
    assert_false(readable(pb));
    conn_close_loop(&g, &b->c, "test");
    step();
    close(pb);
}

/* A metrics connection on a socketpair that has sent a request for the page (HEAD or GET). */
static struct conn *metrics_asking_with(int *peer, const char *req)
{
    int sv[2];
    pair(sv);
    assert_int_equal(mhttp_adopt_loop(&g, sv[0], "peer"), 0);
    struct conn *m = NULL;
    for (struct conn *x = connq_first(&g.metrics_conns); x; x = connq_next(x))
        m = x; /* (the newest is last) */
    assert_non_null(m);
    assert_int_equal(write(sv[1], req, strlen(req)), (ssize_t)strlen(req));
    event(m, EPOLLIN); /* its page goes to a writer */
    assert_false(m->closing);
    assert_false(m->events & EPOLLIN); /* not read while its page is made */
    *peer = sv[1];
    return m;
}

static struct conn *metrics_asking(int *peer) { return metrics_asking_with(peer, "GET /metrics HTTP/1.1\r\n\r\n"); }

/* All peer sends until its end (our FIN), into buf (NUL-terminated); its length. */
static size_t read_to_end(int peer, char *buf, size_t cap)
{
    size_t got = 0;
    ssize_t n;
    while ((n = read(peer, buf + got, cap - 1 - got)) > 0 || (n < 0 && errno == EAGAIN && readable(peer)))
        got += n > 0 ? (size_t)n : 0;
    assert_int_equal(n, 0);
    buf[got] = 0;
    return got;
}

/* Scrapers that ask while a page is being made get that page too: one page made at a time, so
 * scrapers take one writer at most, however many (with 8 scrapers of a 4.5 MB page, commands
 * answered on the writers waited up to 0.8 s); a HEAD gets its header alone. */
static void test_metrics_one_page_at_a_time(void **state)
{
    (void)state;
    uint64_t before = pool_jobs_submitted(g.writers);
    int pa, pb, pc;
    struct conn *a = metrics_asking(&pa);
    struct conn *b = metrics_asking_with(&pb, "HEAD /metrics HTTP/1.1\r\n\r\n");
    struct conn *c = metrics_asking(&pc);
    assert_int_equal(pool_jobs_submitted(g.writers) - before, 1);
    settle_pools();
    static char pa_buf[1 << 20], pb_buf[1 << 16], pc_buf[1 << 20];
    size_t na = read_to_end(pa, pa_buf, sizeof pa_buf), nb = read_to_end(pb, pb_buf, sizeof pb_buf);
    size_t nc = read_to_end(pc, pc_buf, sizeof pc_buf);
    assert_int_equal(na, nc);
    assert_memory_equal(pa_buf, pc_buf, na);
    assert_non_null(strstr(pa_buf, "\r\n\r\n# HELP qgate_")); /* the header, then the page */
    assert_true(nb < na);
    assert_memory_equal(pa_buf, pb_buf, nb);
    assert_non_null(strstr(pb_buf, "\r\n\r\n"));
    assert_string_equal(strstr(pb_buf, "\r\n\r\n"), "\r\n\r\n"); /* nothing after the header */
    /* the next asks for a page of its own */
    close(pa);
    close(pb);
    close(pc);
    event(a, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
    event(b, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
    event(c, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
    int pd;
    struct conn *d = metrics_asking(&pd);
    assert_int_equal(pool_jobs_submitted(g.writers) - before, 2);
    settle_pools();
    close(pd);
    event(d, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
    step();
    assert_int_equal(g.nmconns, 0);
}

/* A scraper that resets while its page is made is closed at that event, not when the page comes
 * (epoll reports the hang-up on every wait meanwhile: at 127c324 the loop spun until then); the
 * page is dropped when it comes. One that reads its page: our side shut after it, what it sends
 * then read and dropped, closed at its close. */
static void test_metrics_scraper_gone(void **state)
{
    (void)state;
    int pa, pb;
    struct conn *a = metrics_asking(&pa);
    close(pa);
    event(a, EPOLLHUP | EPOLLIN | EPOLLRDHUP);
    assert_true(a->closing);
    struct conn *b = metrics_asking(&pb);
    settle_pools(); /* a's page dropped; b's sent */
    assert_int_equal(g.nmconns, 1);
    static char buf[1 << 20];
    assert_true(read_to_end(pb, buf, sizeof buf) > 100); /* the page, then our FIN */
    assert_false(b->closing);
    assert_true(b->events & EPOLLIN);
    assert_int_equal(write(pb, "more", 4), 4);
    event(b, EPOLLIN);
    assert_false(b->closing);
    close(pb);
    event(b, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
    assert_true(b->closing);
    step();
    assert_int_equal(g.nmconns, 0);
    assert_null(connq_first(&g.metrics_conns));
}

/* A TCP connection to a listener of its own, accepted: the accepted end; *cl the other. */
static int tcp_accepted(int *cl, int reset)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 8), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &sl), 0);
    *cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(*cl, (struct sockaddr *)&a, sizeof a), 0);
    if (reset) { /* a reset before the accept (loopback: it has come when close returns) */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        assert_int_equal(setsockopt(*cl, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
        close(*cl);
        *cl = -1;
    }
    int fd = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    assert_true(fd >= 0);
    close(l);
    return fd;
}

/* A metrics connection whose peer reset it before it was accepted has no address: closed, not
 * taken as one more from an address "?" (whose limit a burst of them filled, counted as
 * refusals); a live one is taken under its address. */
static void test_metrics_reset_before_accept(void **state)
{
    (void)state;
    int cl;
    int fd = tcp_accepted(&cl, 1);
    assert_int_equal(mhttp_accepted_loop(&g, fd), -1);
    assert_int_equal(fcntl(fd, F_GETFD), -1); /* closed */
    assert_int_equal(g.nmconns, 0);
    fd = tcp_accepted(&cl, 0);
    assert_int_equal(mhttp_accepted_loop(&g, fd), 0);
    assert_int_equal(g.nmconns, 1);
    struct conn *m = connq_first(&g.metrics_conns);
    assert_string_equal(m->name, "metrics 127.0.0.1");
    close(cl);
    conn_close_loop(&g, m, "test");
    step();
    assert_int_equal(g.nmconns, 0);
}

/* A client closed while it is on the backlog (messages left by frames_budget) and on the flush
 * list is taken off both: nothing reads it after it is freed (ASan would say so). */
static void test_close_leaves_every_list(void **state)
{
    (void)state;
    int pa, wp;
    struct worker *w = fake_worker("w1", &wp);
    struct client *a = fake_client(&pa);
    int64_t fb = g.cfg.frames_budget;
    g.cfg.frames_budget = 1;
    send_text(pa, KIPC_SYNC, "one");
    send_text(pa, KIPC_SYNC, "two");
    send_text(pa, KIPC_SYNC, "three");
    event(&a->c, EPOLLIN); /* one taken, two left: on the backlog */
    assert_true(a->c.in_backlog);
    outq_copy(&a->c.out, "x", 1);
    conn_mark_dirty_loop(&g, &a->c);
    assert_true(a->c.dirty);
    conn_close_loop(&g, &a->c, "admin");
    assert_true(TAILQ_EMPTY(&g.backlog));
    assert_true(TAILQ_EMPTY(&g.dirty));
    assert_int_equal(g.ndirty, 0);
    step(); /* backlog, flush and reap: the freed client is on none of their lists */
    stream_backlog_loop(&g);
    stream_flush_dirty_loop(&g);
    g.cfg.frames_budget = (int)fb;
    close(pa);
    settle_pools();
    worker_remove_loop(&g, w);
    step();
    close(wp);
}

/* Replies the gateway makes itself count against the client's output bound: a client that
 * asks and never reads gets at most client_high_water (and one reply) queued, the rest of its
 * requests wait; once it reads, everything comes, in order. */
static void test_gateway_replies_bounded(void **state)
{
    (void)state;
    int pa;
    struct client *a = fake_client(&pa);
    int small = 4096;
    setsockopt(a->c.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    int64_t hw = g.cfg.client_high_water, lw = g.cfg.client_low_water;
    g.cfg.client_high_water = 2048; /* far below what the replies add up to */
    g.cfg.client_low_water = 512;
    enum { N = 20000 };
    uint8_t *all = NULL;
    size_t len = 0, one;
    K x = k_str(".qgate.ping[]", 13);
    uint8_t *m = kcodec_encode_msg(x, KIPC_SYNC, &one);
    k_free(x);
    all = malloc(one * N);
    for (int i = 0; i < N; i++)
        memcpy(all + (size_t)i * one, m, one);
    free(m);
    len = one * N;
    size_t sent = 0, got = 0, max_out = 0;
    int replies = 0;
    uint8_t buf[65536];
    /* send everything, reading nothing */
    while (sent < len) {
        ssize_t k = write(pa, all + sent, len - sent);
        if (k > 0)
            sent += (size_t)k;
        event(&a->c, EPOLLIN);
        settle_pools();
        max_out = QG_MAX(max_out, a->c.out.bytes);
        if (k <= 0 && a->paused)
            break; /* the gateway stopped reading it: too much held */
    }
    settle_pools();
    max_out = QG_MAX(max_out, a->c.out.bytes);
    assert_true(max_out <= (size_t)g.cfg.client_high_water + 64);
    assert_non_null(client_head(a)); /* the rest wait their turn */
    /* now it reads: every reply comes */
    for (int i = 0; i < 100000 && replies < N; i++) {
        if (sent < len) {
            ssize_t k = write(pa, all + sent, len - sent);
            if (k > 0)
                sent += (size_t)k;
        }
        ssize_t r = read(pa, buf, sizeof buf);
        if (r > 0) {
            got += (size_t)r;
            replies = (int)(got / 10); /* each 1b reply is 10 bytes */
        }
        event(&a->c, EPOLLIN | EPOLLOUT);
        settle_pools();
    }
    assert_int_equal(replies, N);
    g.cfg.client_high_water = hw;
    g.cfg.client_low_water = lw;
    free(all);
    conn_close_loop(&g, &a->c, "test");
    step();
    close(pa);
}

static void test_worker_lost(void **state)
{
    (void)state;
    int wp, pa;
    struct worker *w = fake_worker("w1", &wp);
    struct client *a = fake_client(&pa);
    char got[300];
    /* before any reply byte: the client gets 'qgate: worker ... lost */
    send_text(pa, KIPC_SYNC, "q1");
    client_in(a);
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    close(wp);
    worker_in(w);
    assert_int_equal(w->st, WS_DOWN);
    settle_pools();
    assert_int_equal(recv_text(pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "'qgate: worker w1 lost");
    assert_false(a->c.closing);
    /* mid-reply: the client's connection closes, as if q died */
    struct worker *w2 = fake_worker("w2", &wp);
    send_text(pa, KIPC_SYNC, "q2");
    client_in(a);
    assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
    uint8_t part[20] = {1, 2, 0, 0, 100, 0, 0, 0, 10, 0, 86, 0, 0, 0, 'p', 'a', 'r', 't', '.', '.'};
    assert_int_equal(write(wp, part, sizeof part), (ssize_t)sizeof part);
    worker_in(w2);
    uint32_t id = a->c.id, gen = a->c.gen;
    close(wp);
    worker_in(w2); /* the client is closed and freed here */
    assert_int_equal(w2->st, WS_DOWN);
    assert_null(conn_lookup_loop(&g, id, gen));
    uint8_t seen[64];
    ssize_t n = read(pa, seen, sizeof seen); /* the partial reply, then the close */
    assert_int_equal(n, 20);
    assert_int_equal(read(pa, seen, sizeof seen), 0);
    step();
    close(pa);
    worker_remove_loop(&g, w);
    worker_remove_loop(&g, w2);
    step();
}

/* One worker and one client, for a test with one setting changed (*key = value); and their
 * end, the setting put back. */
struct duo {
    int wp, pa; /* their peers' ends */
    struct worker *w;
    struct client *a;
    int64_t *key, was;
};
static void duo_open(struct duo *d, int64_t *key, int64_t value)
{
    d->key = key;
    d->was = *key;
    *key = value;
    d->w = fake_worker("w1", &d->wp);
    d->a = fake_client(&d->pa);
}
static void duo_close(struct duo *d)
{
    *d->key = d->was;
    conn_close_loop(&g, &d->a->c, "test");
    worker_remove_loop(&g, d->w);
    step();
    close(d->wp), close(d->pa);
}

/* Write all of m (len bytes) into a client's socket, the gateway reading between writes; at
 * most rounds writes that find the socket full (the gateway may have stopped reading). Bytes
 * written. */
static size_t feed(int fd, struct client *c, const uint8_t *m, size_t len, int rounds)
{
    size_t off = 0;
    while (off < len && rounds > 0) {
        ssize_t w = write(fd, m + off, len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        assert_true(w < 0 && errno == EAGAIN);
        client_in(c);
        rounds--;
    }
    client_in(c);
    return off;
}

/* Read and drop what fd holds now. Bytes read. */
static size_t drain_fd(int fd)
{
    uint8_t buf[65536];
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        got += (size_t)n;
    return got;
}

/* pending_max counts a request until its bytes are written to its worker's socket, not only
 * until they are queued for it: a worker that reads nothing holds them, and a big message behind
 * waits for room (before, the worker's queue was counted by nobody: it grew without bound). Once
 * the worker reads them, the waiting message has room. */
static void test_pending_until_written(void **state)
{
    (void)state;
    struct duo d;
    duo_open(&d, &g.cfg.pending_max, 1000000);
    struct worker *w = d.w;
    struct client *a = d.a;
    int wp = d.wp, pa = d.pa;
    K x = k_vec(KT_CHAR, 600000);
    memset(kC(x), 'x', 600000);
    size_t len;
    uint8_t *m = kcodec_encode_msg(x, KIPC_ASYNC, &len);
    k_free(x);
    assert_int_equal(feed(pa, a, m, len, 1000), len); /* the first: read, checked, sent to the worker */
    settle_pools();
    assert_int_equal(w->st, WS_BUSY);
    assert_true(w->c.out.bytes > 0); /* (more than its socket takes) */
    assert_int_equal(buf_pending_bytes, len); /* counted while it waits on the worker's queue */
    size_t part = feed(pa, a, m, len, 50); /* the second waits for room, unread */
    assert_true(part < len);
    assert_true(a->c.waits_room);
    assert_int_equal(buf_pending_bytes, len);
    for (int i = 0; i < 1000 && w->c.out.bytes; i++) { /* the worker reads it all */
        drain_fd(wp);
        event(&w->c, EPOLLOUT);
        step();
    }
    assert_int_equal(w->c.out.bytes, 0);
    assert_int_equal(buf_pending_bytes, 0); /* written: given back */
    assert_true(g.loop.dispatch_pending);
    request_room_loop(&g); /* (the dispatch phase's end) */
    assert_false(a->c.waits_room);
    assert_int_equal(feed(pa, a, m + part, len - part, 1000), len - part); /* the rest of it */
    assert_int_equal(buf_pending_bytes, len); /* (in a's queue: the worker is busy) */
    assert_false(a->c.waits_room);
    free(m);
    duo_close(&d);
}

/* d's client sends request q, and its worker calls it back with cb (.z.w"cb"): the client
 * owes the answer. */
static void called_back(struct duo *d, const char *q, const char *cb)
{
    char got[300];
    send_text(d->pa, KIPC_SYNC, q);
    client_in(d->a);
    assert_int_equal(recv_text(d->wp, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, q);
    send_text(d->wp, KIPC_SYNC, cb);
    worker_in(d->w);
    assert_int_equal(recv_text(d->pa, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, cb);
}

/* d's worker was lost under a nested call of its client: that call's error comes first, then
 * the request's own once the client has answered the callback (left its .z.pg: sooner, it would
 * be taken for the reply of the next call the client makes there); another worker takes its
 * place, for duo_close. */
static void lost_under_nested(struct duo *d)
{
    char got[300];
    settle_pools();
    assert_int_equal(recv_text(d->pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "'qgate: the worker that called back was lost");
    settle_pools();
    assert_false(readable(d->pa)); /* the request's error: held for the answer */
    send_text(d->pa, KIPC_RESPONSE, "answer"); /* (a q client: its .z.pg signalled the error) */
    client_in(d->a);
    settle_pools();
    assert_int_equal(recv_text(d->pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "'qgate: worker w1 lost");
    assert_false(readable(d->pa));
    struct worker *w = d->w;
    d->w = fake_worker("w2", &d->wp);
    worker_remove_loop(&g, w);
}

/* A client that, owing its worker a callback's answer, sends a request (a q client calling the
 * gateway from inside .z.pg) has it run nested on that worker at once, as q runs what comes
 * on the handle it waits on; the worker's next response is its reply, and the run goes on to
 * its own. (Before: the request waited behind the one that called back: nothing reached the
 * worker.) Then the worker's loss under a nested call: an error for it, then the run's. */
static void test_nested_call(void **state)
{
    (void)state;
    struct duo d;
    duo_open(&d, &g.cfg.query_timeout, 0);
    char got[300];
    uint64_t nested = g.nested;
    called_back(&d, "q", "cb");
    send_text(d.pa, KIPC_ASYNC, "a:1"); /* from inside the callback: async, then sync */
    send_text(d.pa, KIPC_SYNC, "n");
    client_in(d.a);
    assert_int_equal(recv_text(d.wp, got, sizeof got), KIPC_ASYNC); /* at once, to the worker in it */
    assert_string_equal(got, "a:1");
    assert_int_equal(recv_text(d.wp, got, sizeof got), KIPC_SYNC);
    assert_string_equal(got, "n");
    assert_int_equal(d.w->run.nested, 1);
    assert_int_equal(g.nested, nested + 2);
    send_text(d.wp, KIPC_RESPONSE, "r:n"); /* its reply: to the client, the run goes on */
    worker_in(d.w);
    assert_int_equal(recv_text(d.pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:n");
    assert_int_equal(d.w->st, WS_BUSY);
    assert_int_equal(d.w->run.phase, WB_CALLED); /* back in the callback */
    send_text(d.pa, KIPC_RESPONSE, "answer");
    client_in(d.a);
    assert_int_equal(recv_text(d.wp, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "answer");
    send_text(d.wp, KIPC_RESPONSE, "r:q");
    worker_in(d.w);
    assert_int_equal(recv_text(d.pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:q");
    assert_int_equal(d.w->st, WS_IDLE);
    assert_int_equal(d.a->ncalls, 0);
    /* the worker lost under a nested call: its error first, then the run's */
    called_back(&d, "q2", "cb2");
    send_text(d.pa, KIPC_SYNC, "n2");
    client_in(d.a);
    assert_int_equal(recv_text(d.wp, got, sizeof got), KIPC_SYNC);
    close(d.wp);
    worker_in(d.w);
    assert_int_equal(d.w->st, WS_DOWN);
    lost_under_nested(&d);
    duo_close(&d);
}

/* x as a whole message of type t, compressed as q compresses it (it must be compressible). */
static uint8_t *zipped(K x, int t, size_t *len)
{
    size_t n;
    uint8_t *m = kcodec_encode_msg(x, t, &n), *z = malloc(n);
    k_free(x);
    *len = kzip_compress(m, n, z);
    assert_true(*len > 0);
    free(m);
    return z;
}

static K text_of_len(const char *head, size_t n)
{
    K s = k_vec(KT_CHAR, (int64_t)n);
    memset(kC(s), ' ', n);
    memcpy(kC(s), head, strlen(head));
    return s;
}

/* What a client sends from inside a callback that a reader checks first (compressed): a route,
 * seen only once inflated, is not run nested but answered at once with an error, as one sent
 * plain is; and a
 * sync one still on the reader when the worker is lost gets its error first, before the
 * request's own (the innermost first). */
static void test_nested_on_a_reader(void **state)
{
    (void)state;
    struct duo d;
    duo_open(&d, &g.cfg.query_timeout, 0);
    char got[300];
    called_back(&d, "q", "cb");
    K r = k_list(3);
    kK(r)[0] = k_sym(".qgate.on");
    kK(r)[1] = k_sym("main");
    kK(r)[2] = text_of_len("routed", 5000);
    size_t len;
    uint8_t *m = zipped(r, KIPC_SYNC, &len);
    assert_int_equal(write(d.pa, m, len), (ssize_t)len);
    free(m);
    client_in(d.a);
    settle_pools();
    step(); /* (the backlog phase: what the client read on meanwhile) */
    assert_false(d.a->c.in_backlog);
    assert_false(readable(d.wp)); /* not to the worker in the callback */
    assert_int_equal(d.w->run.nested, 0);
    settle_pools(); /* answered at once, before the callback's answer: it cannot run inside it */
    assert_int_equal(recv_text(d.pa, got, sizeof got), KIPC_RESPONSE);
    assert_int_equal(strncmp(got, "'qgate: a route cannot run inside a callback", 44), 0);
    send_text(d.pa, KIPC_RESPONSE, "answer");
    client_in(d.a);
    assert_int_equal(recv_text(d.wp, got, sizeof got), KIPC_RESPONSE);
    send_text(d.wp, KIPC_RESPONSE, "r:q");
    worker_in(d.w);
    assert_int_equal(recv_text(d.pa, got, sizeof got), KIPC_RESPONSE);
    assert_string_equal(got, "r:q");
    settle_pools();
    assert_false(readable(d.wp)); /* the route never runs */
    /* a nested sync one on the reader when the worker is lost */
    called_back(&d, "q2", "cb2");
    m = zipped(text_of_len("nested", 5000), KIPC_SYNC, &len);
    assert_int_equal(write(d.pa, m, len), (ssize_t)len);
    free(m);
    event(&d.a->c, EPOLLIN); /* read: to a reader (its completion is handled in a step) */
    assert_true(d.a->c.in_job);
    close(d.wp);
    event(&d.w->c, EPOLLIN); /* the worker lost first */
    assert_int_equal(d.w->st, WS_DOWN);
    assert_true(conn_pending(&d.a->c) > 0); /* its error at once: ahead of the request's (a writer's) */
    lost_under_nested(&d);
    assert_false(d.a->c.in_job);
    duo_close(&d);
}


/* Fire the timers due by now_ms. */
static void run_timers(void)
{
    struct timer *t;
    while ((t = loop_timers_pop_due(&g.loop.timers, g.loop.now_ms)))
        t->fn(&g, t);
}

/* query_timeout measures a worker's silence: while a reader has a message it sent (a publish
 * made fit for an old client), and the gateway reads nothing more from it, the worker is not
 * silent, and its connection is not dropped; once it is read again, its silence counts. */
static void test_no_timeout_in_a_job(void **state)
{
    (void)state;
    struct duo d;
    duo_open(&d, &g.cfg.query_timeout, 1000);
    struct worker *w = d.w;
    send_text(d.pa, KIPC_SYNC, "q");
    client_in(d.a);
    assert_int_equal(w->st, WS_BUSY);
    uint64_t timeouts = g.query_timeouts;
    w->c.in_job = 1; /* (as stream_job_wait_loop leaves it) */
    g.loop.now_ms += 5000;
    run_timers();
    assert_int_equal(g.query_timeouts, timeouts);
    assert_true(w->c.fd >= 0);
    stream_job_done_loop(&g, &w->c);
    g.loop.now_ms += 500;
    run_timers();
    assert_int_equal(g.query_timeouts, timeouts); /* (its silence counts from the job's end) */
    g.loop.now_ms += 5000;
    run_timers();
    assert_int_equal(g.query_timeouts, timeouts + 1);
    duo_close(&d);
}

static void test_backpressure_and_splice(void **state)
{
    (void)state;
    for (int sp = 0; sp <= 1; sp++) {
        g.cfg.splice = sp;
        g.cfg.client_high_water = 65536;
        g.cfg.client_low_water = 16384;
        int wp, pa;
        struct worker *w = fake_worker("w1", &wp);
        struct client *a = fake_client(&pa);
        int small = 16384;
        setsockopt(pa, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        send_text(pa, KIPC_SYNC, "big");
        client_in(a);
        char got[300];
        assert_int_equal(recv_text(wp, got, sizeof got), KIPC_SYNC);
        const size_t body = 4 << 20;
        size_t total = 14 + body, received = 0, fed = 0;
        uint8_t *all = malloc(total);
        /* the worker sends 4 MB; the client reads only when told */
        uint8_t *m = malloc(total);
        kipc_hdr_write(m, KIPC_RESPONSE, 0, total);
        m[8] = KT_CHAR;
        m[9] = 0;
        qg_st32(m + 10, (uint32_t)body);
        for (size_t i = 0; i < body; i++)
            m[14 + i] = (uint8_t)('a' + i % 26);
        int paused_seen = 0;
        for (int round = 0; round < 100000 && received < total; round++) {
            ssize_t n = fed < total ? write(wp, m + fed, total - fed) : 0;
            if (n > 0)
                fed += (size_t)n;
            event(&w->c, EPOLLIN);
            step();
            if (w->c.paused) {
                paused_seen = 1;
                /* while paused, the gateway holds at most high water plus one read (and its
                 * splice pipe) */
                assert_true(a->c.out.bytes <= (size_t)g.cfg.client_high_water + (size_t)g.cfg.chunk_size);
            }
            if (w->c.paused || fed == total) { /* only now does the client read */
                ssize_t r;
                while (received < total && (r = read(pa, all + received, total - received)) > 0)
                    received += (size_t)r;
                event(&a->c, EPOLLOUT);
                step();
            }
        }
        assert_int_equal(received, total);
        assert_memory_equal(all, m, total); /* byte for byte, in order */
        assert_true(paused_seen);
        assert_int_equal(w->st, WS_IDLE);
        free(m);
        free(all);
        conn_close_loop(&g, &a->c, "test");
        worker_remove_loop(&g, w);
        step();
        close(wp), close(pa);
    }
}

static void test_state_names(void **state)
{
    (void)state;
    assert_string_equal(client_state_name(CS_HANDSHAKE), "HANDSHAKE");
    assert_string_equal(client_state_name(CS_READY), "READY");
    assert_string_equal(client_state_name(CS_LINGER), "LINGER");
    assert_string_equal(worker_state_name(WS_DOWN), "DOWN");
    assert_string_equal(worker_state_name(WS_BUSY), "BUSY");
    assert_string_equal(worker_state_name(99), "?");
}

static void test_timers_heap(void **state)
{
    (void)state;
    static struct timer t[500];
    int armed = 0, before = g.loop.timers.n; /* the gateway's own (stats_period) */
    uint64_t seed = 11;
    for (int i = 0; i < 500; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        loop_timer_arm_loop(&g, &t[i], (int64_t)(seed >> 40) % 100000, NULL);
    }
    for (int i = 0; i < 500; i += 3)
        loop_timer_cancel_loop(&g, &t[i]);
    for (int i = 1; i < 500; i += 7) /* re-arming moves a timer, or arms a cancelled one */
        loop_timer_arm_loop(&g, &t[i], 50000, NULL);
    for (int i = 0; i < 500; i++)
        armed += t[i].pos != 0;
    int64_t last = -1;
    int n = 0;
    struct timer *x;
    while ((x = loop_timers_pop_due(&g.loop.timers, INT64_MAX))) {
        assert_true(x->when >= last);
        assert_int_equal(x->pos, 0);
        last = x->when;
        n++;
    }
    assert_int_equal(n, armed + before);
    assert_true(armed > 300 && armed < 400);
    assert_int_equal(loop_timers_next(&g.loop.timers), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fairness_round_robin),
        cmocka_unit_test(test_n_plus_one),
        cmocka_unit_test(test_pending_until_written),
        cmocka_unit_test(test_no_timeout_in_a_job),
        cmocka_unit_test(test_nested_call),
        cmocka_unit_test(test_nested_on_a_reader),
        cmocka_unit_test(test_runs_timed_in_one_iteration),
        cmocka_unit_test(test_async_chaser_and_commands),
        cmocka_unit_test(test_broadcast_fair),
        cmocka_unit_test(test_command_out_of_memory),
        cmocka_unit_test(test_emfile_without_reserve),
        cmocka_unit_test(test_emfile_none_waiting),
        cmocka_unit_test(test_stale_completion_dropped),
        cmocka_unit_test(test_close_leaves_every_list),
        cmocka_unit_test(test_metrics_scraper_gone),
        cmocka_unit_test(test_metrics_one_page_at_a_time),
        cmocka_unit_test(test_metrics_reset_before_accept),
        cmocka_unit_test(test_gateway_replies_bounded),
        cmocka_unit_test(test_worker_lost),
        cmocka_unit_test(test_backpressure_and_splice),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_timers_heap),
    };
    return cmocka_run_group_tests_name("gateway", tests, setup, teardown);
}

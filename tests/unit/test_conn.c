/* test_conn.c: conn.c's lifetime against a fake kind of connection, without clients or workers:
 * closing takes a connection off every list it is on (flush list, backlog, room waiters, a queue,
 * the waiters of another) and cancels its timers before the kind's teardown runs; its waiters are woken; its
 * id and generation no longer find it; its struct is freed only by the reap after the
 * iteration; a close from inside a teardown, or a second close, is a no-op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "gateway.h"
#include "stream.h"
#include "tail.h"
#include "gw.h"
#include "log.h"
#include "tutil.h"

static struct gw g;

static int setup(void **state)
{
    (void)state;
    struct config cfg;
    tutil_gw_config(&cfg);
    assert_int_equal(gw_init(&g, &cfg, NULL, NULL, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gw_free(&g);
    return 0;
}

/* ---- the fake kind -------------------------------------------------------------------------- */

struct fake {
    struct conn c;
    int peer;               /* the socketpair's other end */
    int closes, wakes;      /* on_close and on_wake calls */
    int clean_at_close;     /* on_close found it off every list, its timers cancelled */
    struct fake *close_too; /* on_close closes this one (and itself again) */
};
static int freed;

static void fake_on_close(struct gw *gw, struct conn *c, const char *why)
{
    (void)why;
    struct fake *f = (struct fake *)c;
    f->closes++;
    f->clean_at_close = !c->dirty && !c->in_backlog && !c->waits_room && !c->q && !conn_timer_armed(c, 0) &&
                        !conn_timer_armed(c, 1);
    conn_close_loop(gw, c, "again, from its own teardown");
    if (f->close_too)
        conn_close_loop(gw, &f->close_too->c, "closed by another's teardown");
}

static void fake_on_wake(struct gw *gw, struct conn *c)
{
    (void)gw;
    ((struct fake *)c)->wakes++;
}

static void fake_free(struct conn *c)
{
    struct fake *f = (struct fake *)c;
    close(f->peer);
    free(f);
    freed++;
}

static void on_event(struct gw *gw, struct evsrc *s, uint32_t ev) { (void)gw, (void)s, (void)ev; }
static void never(struct gw *gw, struct conn *c) { (void)gw, (void)c; fail_msg("a cancelled timer fired"); }

static const struct connops fake_ops = {
    .ev = {.on_event = on_event}, .on_close = fake_on_close, .free = fake_free, .on_wake = fake_on_wake};

static struct fake *fake_kind_new(int kind)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    struct fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->peer = sv[1];
    assert_int_equal(conn_register_loop(&g, &f->c, &fake_ops, kind, sv[0], EPOLLIN), 0);
    return f;
}

static struct fake *fake_new(void) { return fake_kind_new(CONN_METRICS); }

/* ---- tests -------------------------------------------------------------------------------- */

static void test_close_leaves_every_list(void **state)
{
    (void)state;
    freed = 0;
    struct fake *a = fake_new(), *b = fake_new(), *w = fake_new();
    struct connq q;
    conn_q_init(&q);
    conn_mark_dirty_loop(&g, &a->c);
    conn_backlog_add_loop(&g, &a->c);
    conn_room_wait_loop(&g, &b->c, 100); /* b waits for room first, then a */
    conn_room_wait_loop(&g, &a->c, 200);
    conn_queue_in_loop(&q, &a->c);
    conn_timer_arm_loop(&g, &a->c, 0, g.loop.now_ms + 10, never);
    conn_timer_arm_loop(&g, &a->c, 1, g.loop.now_ms + 20, never);
    conn_wait_on_loop(&w->c, &a->c); /* w waits for a's output */
    conn_wait_on_loop(&b->c, &w->c); /* and b for w's */
    assert_true(a->c.dirty && a->c.in_backlog && a->c.q == &q);
    uint32_t id = a->c.id, gen = a->c.gen;
    assert_ptr_equal(conn_lookup_loop(&g, id, gen), &a->c);

    conn_close_loop(&g, &a->c, "test");
    assert_int_equal(a->closes, 1);
    assert_true(a->clean_at_close);
    assert_null(connq_first(&q));
    assert_null(conn_backlog_pop_loop(&g));
    assert_ptr_equal(TAILQ_FIRST(&g.room_waiters), &b->c); /* b alone waits for room now */
    assert_null(TAILQ_NEXT(&b->c, room_link));
    assert_int_equal(a->c.fd, -1);
    assert_null(conn_lookup_loop(&g, id, gen));
    assert_int_equal(w->wakes, 1); /* its waiter woken, off a's list */
    assert_null(w->c.q);
    assert_null(connq_first(&a->c.waiters));
    assert_int_equal(b->wakes, 0); /* waiting on w, which is still there */
    assert_ptr_equal(b->c.q, &w->c.waiters);
    conn_close_loop(&g, &a->c, "twice"); /* a no-op */
    assert_int_equal(a->closes, 1);
    assert_int_equal(freed, 0);    /* the struct lives to the end of the iteration */
    conn_reap_loop(&g);
    assert_int_equal(freed, 1);

    conn_close_loop(&g, &w->c, "test"); /* b, waiting on it, is woken */
    assert_int_equal(b->wakes, 1);
    assert_null(b->c.q);
    conn_close_loop(&g, &b->c, "test");
    assert_true(TAILQ_EMPTY(&g.room_waiters));
    conn_reap_loop(&g);
    assert_int_equal(freed, 3);
}

/* A teardown that closes another connection, and itself again: each closes once, both are freed
 * by the reap, and neither before it. */
static void test_close_from_teardown(void **state)
{
    (void)state;
    freed = 0;
    struct fake *a = fake_new(), *b = fake_new();
    a->close_too = b;
    b->close_too = a; /* b's teardown closes a, which is closing: a no-op */
    conn_close_loop(&g, &a->c, "test");
    assert_int_equal(a->closes, 1);
    assert_int_equal(b->closes, 1);
    assert_int_equal(freed, 0);
    conn_reap_loop(&g);
    assert_int_equal(freed, 2);
}

/* A freed id is reused only after a quarantine of others freed (256), the oldest first, with a new
 * generation: a completion naming the old (id, generation) finds nothing, and one naming the new
 * finds the new connection. */
static void test_stale_generation(void **state)
{
    (void)state;
    freed = 0;
    struct fake *a = fake_new();
    uint32_t id = a->c.id, gen = a->c.gen;
    conn_close_loop(&g, &a->c, "test");
    conn_reap_loop(&g);
    struct fake *b = NULL;
    int n = 0;
    for (; n < 1000 && (!b || b->c.id != id); n++) { /* new ones, each closed, until id comes back */
        if (b) {
            conn_close_loop(&g, &b->c, "test");
            conn_reap_loop(&g);
        }
        b = fake_new();
        assert_null(conn_lookup_loop(&g, id, gen));
    }
    assert_int_equal(b->c.id, id);
    assert_true(n > 256); /* not at once: a late completion for it would find another */
    assert_int_not_equal(b->c.gen, gen);
    assert_null(conn_lookup_loop(&g, id, gen));
    assert_ptr_equal(conn_lookup_loop(&g, b->c.id, b->c.gen), &b->c);
    conn_close_loop(&g, &b->c, "test");
    conn_reap_loop(&g);
    assert_int_equal(freed, n + 1);
}

/* The connection of kind CONN_TAIL in the table (one at most), or NULL. */
static struct conn *the_tail(void)
{
    for (uint32_t id = 0; id < g.next_id; id++)
        if (g.tab[id] && g.tab[id]->kind == CONN_TAIL)
            return g.tab[id];
    return NULL;
}

static const struct tail_who who = {.serial = 7, .connected_ms = 1, .user = "u", .peer = "127.0.0.1:5", .group = "main"};

static void tail_event(struct conn *t, uint32_t ev) { conn_ops(t)->ev.on_event(&g, &t->ev, ev); }

/* A client closed with output queued (tail.h): its teardown runs at once, its id goes, and its
 * socket writes every byte queued, in order, then shuts its side; the peer's close ends it. With
 * nothing queued, the close is conn_close_loop's. */
static void test_tail_writes_then_closes(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    freed = 0;
    struct fake *f = fake_kind_new(CONN_CLIENT);
    int peer = f->peer;
    f->peer = dup(peer); /* (its free closes that one; this test reads this one) */
    enum { N = 1 << 20 }; /* more than the socket pair holds */
    struct chunk *ch = chunk_new(N);
    assert_non_null(ch);
    for (size_t i = 0; i < N; i++)
        ch->p[i] = (uint8_t)(i * 7);
    ch->len = N;
    conn_push_whole_loop(&g, &f->c, ch);
    struct chunk *cut = chunk_new(100); /* the cut message's part, streamed: not owed yet */
    assert_non_null(cut);
    memset(cut->p, 'c', 100);
    cut->len = 100;
    outq_push(&f->c.out, cut);
    uint32_t id = f->c.id, gen = f->c.gen;

    tail_close_loop(&g, &f->c, &who, "its stream broke");
    assert_int_equal(f->closes, 1); /* the client's teardown, at once */
    assert_int_equal(f->c.fd, -1);
    assert_null(conn_lookup_loop(&g, id, gen));
    struct conn *t = the_tail();
    assert_non_null(t);
    assert_int_equal(conn_pending(t), N + 100);
    assert_true(t->out_mark == t->out.written + t->out.bytes); /* all of it owed: a drain waits for it */
    uint32_t tid, tgen;
    tail_origin(t, &tid, &tgen);
    assert_true(tid == id && tgen == gen);
    assert_int_equal(g.ntails, 1); /* its max_clients place, and its row (the client it was) */
    assert_ptr_equal(tail_by_serial_loop(&g, 7), t);
    assert_null(tail_by_serial_loop(&g, 8));
    assert_string_equal(tail_who(t)->user, "u");
    assert_string_equal(tail_who(t)->group, "main");
    conn_reap_loop(&g);
    assert_int_equal(freed, 1); /* the client's struct goes; its socket lives on in the tail */

    uint8_t *got = malloc(N + 101);
    size_t have = 0;
    stream_flush_dirty_loop(&g);
    for (int i = 0; i < 100000 && have < N + 100; i++) {
        ssize_t r = read(peer, got + have, N + 101 - have);
        if (r > 0)
            have += (size_t)r;
        else
            tail_event(t, EPOLLOUT); /* (what epoll would say: room again) */
    }
    assert_int_equal(have, N + 100);
    assert_false(conn_owed_unsent(t));
    for (size_t i = N; i < N + 100; i++)
        if (got[i] != 'c')
            fail_msg("byte %zu is not the cut message's", i);
    for (size_t i = 0; i < N; i++)
        if (got[i] != (uint8_t)(i * 7))
            fail_msg("byte %zu is not the one queued", i);
    assert_int_equal(read(peer, got, 1), 0); /* then its FIN */
    free(got);
    assert_ptr_equal(the_tail(), t); /* lingering: the peer's close ends it */
    close(peer);
    tail_event(t, EPOLLIN | EPOLLRDHUP);
    assert_null(the_tail());
    assert_int_equal(g.ntails, 0);
    assert_null(tail_by_serial_loop(&g, 7));
    conn_reap_loop(&g);

    struct fake *e = fake_kind_new(CONN_CLIENT); /* nothing queued: no tail */
    tail_close_loop(&g, &e->c, &who, "its stream broke");
    assert_int_equal(e->closes, 1);
    assert_null(the_tail());
    assert_int_equal(g.tails, 2); /* both counted (cut_streams) */
    conn_reap_loop(&g);
    assert_int_equal(freed, 2);
}

/* A connected TCP pair on loopback, its two ends put in place of *a and *b (the peer's receive
 * buffer small, so that a few hundred KB fill both sides' buffers). */
static void tcp_pair_onto(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), rcv = 4096;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv), 0);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &len), 0);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
    int s = accept(l, NULL, NULL);
    assert_true(s >= 0);
    assert_int_equal(fcntl(s, F_SETFL, O_NONBLOCK), 0);
    assert_true(dup2(s, *a) == *a && dup2(c, *b) == *b);
    close(s);
    close(c);
    close(l);
}

/* Where a connection's output stands: end counts all queued; sent, what the socket took; over
 * TCP, queued what the peer has not acknowledged (SIOCOUTQ), acked the rest; a Unix socket's
 * count is not looked at (it includes the kernel's overhead): acked is what was sent. */
static void test_output_sent(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_kind_new(CONN_CLIENT);
    tcp_pair_onto(&f->c.fd, &f->peer);
    struct stream_sent s = {1, 1, 1, 1};
    stream_sent_loop(&f->c, &s);
    assert_true(s.sent == 0 && s.queued == 0 && s.acked == 0 && s.end == 0);
    enum { N = 4 << 20 };
    struct chunk *ch = chunk_new(N);
    assert_non_null(ch);
    memset(ch->p, 'o', N);
    ch->len = N;
    conn_push_whole_loop(&g, &f->c, ch);
    stream_sent_loop(&f->c, &s);
    assert_true(s.end == N && s.sent == 0);
    stream_flush_dirty_loop(&g);
    stream_sent_loop(&f->c, &s);
    assert_true(s.sent > 0 && s.sent < N && s.end == N); /* more than the buffers hold */
    static char b[1 << 16];
    size_t got = 0;
    int seen_queued = 0;
    for (int i = 0; i < 1000000 && got < N; i++) { /* the peer reads; what is left goes out */
        ssize_t r = read(f->peer, b, sizeof b);
        if (r > 0)
            got += (size_t)r;
        stream_flush_loop(&g, &f->c);
        stream_sent_loop(&f->c, &s);
        assert_true(s.acked + s.queued == s.sent && s.acked >= got && s.end == N);
        seen_queued |= s.sent == N && s.queued > 0 && got < N; /* all written, not all acknowledged */
    }
    assert_int_equal(got, N);
    assert_true(seen_queued);
    stream_sent_loop(&f->c, &s);
    assert_true(s.queued == 0 && s.acked == N && s.sent == N);

    struct fake *u = fake_kind_new(CONN_CLIENT); /* a Unix socket pair: its count not looked at */
    struct chunk *c2 = chunk_new(1000);
    assert_non_null(c2);
    memset(c2->p, 'u', 1000);
    c2->len = 1000;
    conn_push_whole_loop(&g, &u->c, c2);
    stream_flush_dirty_loop(&g);
    stream_sent_loop(&u->c, &s);
    assert_true(s.queued == 0 && s.acked == 1000 && s.end == 1000); /* unread, but not seen so */
}

/* A tail whose peer is gone (it reads nothing, and closed) is closed by the write that fails. */
static void test_tail_peer_gone(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    struct fake *f = fake_kind_new(CONN_CLIENT);
    struct chunk *ch = chunk_new(4096);
    assert_non_null(ch);
    memset(ch->p, 'x', 4096);
    ch->len = 4096;
    conn_push_whole_loop(&g, &f->c, ch);
    close(f->peer);
    f->peer = dup(0);
    tail_close_loop(&g, &f->c, &who, "its stream broke");
    assert_non_null(the_tail());
    stream_flush_dirty_loop(&g);
    assert_null(the_tail());
    conn_reap_loop(&g);
}

/* A tail that the peer takes nothing from is closed once client_stall_timeout has passed since
 * its last byte taken; one made while that was 0 (no bound) gets it when a reload sets it. */
static void test_tail_stall(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    g.cfg.client_stall_timeout = 0;
    struct fake *f = fake_kind_new(CONN_CLIENT);
    int peer = f->peer;
    f->peer = dup(peer);
    struct chunk *ch = chunk_new(1 << 20); /* more than the pair holds: some stays queued */
    assert_non_null(ch);
    memset(ch->p, 'y', 1 << 20);
    ch->len = 1 << 20;
    conn_push_whole_loop(&g, &f->c, ch);
    tail_close_loop(&g, &f->c, &who, "its stream broke");
    struct conn *t = the_tail();
    assert_non_null(t);
    stream_flush_dirty_loop(&g);
    assert_true(conn_pending(t) > 0);
    assert_false(conn_timer_armed(t, 0)); /* no bound */
    g.loop.now_ms += 1000; /* long without a limit: its clock starts at the reload */
    g.cfg.client_stall_timeout = 100;
    tail_timeouts_reloaded_loop(&g);
    assert_true(conn_timer_armed(t, 0));
    g.loop.now_ms += 50;
    t->tm[0].fn(&g, t); /* early: armed again */
    assert_ptr_equal(the_tail(), t);
    assert_true(conn_timer_armed(t, 0));
    g.loop.now_ms += 60;
    t->tm[0].fn(&g, t); /* 110 ms without a byte taken */
    assert_null(the_tail());
    conn_reap_loop(&g);
    close(peer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_close_leaves_every_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_teardown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_writes_then_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_peer_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tail_stall, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

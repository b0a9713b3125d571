/* test_dispatch.c: src/core/dispatch.c alone (issue 22), against a fake client side and a fake
 * worker side (struct frontend_ops, struct backend_ops in g->front, g->back) and bare connections
 * entered on a group's queue and idle list through conn.c, without a loop, sockets, clients or
 * workers. The fakes record each call in one trace, which the tests compare whole:
 *
 *   start(W,C)  start(W,-)    back->start: W runs C's head; W runs what it owes (no client)
 *   broadcast(C)              front->broadcast: C's head goes to every worker up
 *   follow(C)                 back->follow: C's head to a busy worker's free connection
 *   no_worker(C)              front->no_worker
 *   ready(C)  owes(W,F|A)     the questions, traced only when a test asks for them (asks = 1)
 *
 * What the fakes do is what the real sides promise dispatch (dispatch.h): a start takes the worker
 * off the idle list and the client off the queue; a broadcast takes the client off the queue and
 * leaves something owed on every worker up; a follow that took the client (1) takes it off the
 * queue; no_worker answers a sync head (off the queue) and leaves an async one waiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dispatch.h"
#include "gw.h"
#include "log.h"
#include "tutil.h"

static struct gw g;

/* ---- the trace ------------------------------------------------------------------------------ */

static char trace[8192];
static int asks;   /* trace ready() and owes() too */
static int calls;  /* every fake call: a dispatch that never ends fails instead of hanging */

__attribute__((format(printf, 1, 2))) static void rec(const char *fmt, ...)
{
    if (++calls > 1000)
        fail_msg("dispatch does not end: %.200s", trace);
    size_t l = strlen(trace);
    if (l && l < sizeof trace - 1)
        trace[l++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trace + l, sizeof trace - l, fmt, ap);
    va_end(ap);
}

static void trace_reset(void)
{
    trace[0] = 0;
    calls = 0;
}

/* ---- fake connections ------------------------------------------------------------------------- */

struct fake {
    struct conn c;        /* first: dispatch sees the struct conn */
    struct group *grp;
    /* a client */
    int ready;            /* what front->ready says (WAIT_*) */
    int follow_rc;        /* what back->follow says for it (1 takes it) */
    int async;            /* its head is async: no_worker leaves it waiting */
    /* a worker */
    int owes_first;       /* owes what it runs before any client's request (implies owes_any) */
    int owes_any;         /* owes broadcasts */
    int out;              /* out of rotation: idle_first passes it over */
    struct fake *releases; /* its start(W,-) starts this idle worker too (a broadcast released) */
};

#define NFAKES 16
static struct fake cl[NFAKES], wk[NFAKES]; /* clients c1.., workers w1.. (index 0 unused) */
static struct connq busy;  /* workers started: off the idle list */
static struct connq done;  /* clients whose head started or was answered: off the queue */

static struct fake *fk(const struct conn *c) { return (struct fake *)(void *)(uintptr_t)c; }

static struct conn *client(int i, struct group *grp, int ready)
{
    struct fake *f = &cl[i];
    memset(f, 0, sizeof *f);
    snprintf(f->c.name, sizeof f->c.name, "c%d", i);
    f->c.kind = CONN_CLIENT;
    f->grp = grp;
    f->ready = ready;
    f->follow_rc = 1;
    return &f->c;
}

static struct conn *worker(int i, struct group *grp)
{
    struct fake *f = &wk[i];
    memset(f, 0, sizeof *f);
    snprintf(f->c.name, sizeof f->c.name, "w%d", i);
    f->c.kind = CONN_WORKER;
    f->grp = grp;
    return &f->c;
}

/* Onto the group's queue, as request_set_state_loop puts a client entering QUEUED. */
static struct conn *queued(int i, struct group *grp, int ready)
{
    struct conn *c = client(i, grp, ready);
    dispatch_queue_loop(&g, grp, c, (uint64_t)i);
    return c;
}

/* Onto the group's idle list, as worker_set_state_loop puts a worker entering IDLE. */
static struct conn *idle(int i, struct group *grp)
{
    struct conn *w = worker(i, grp);
    conn_queue_in_loop(&grp->idle, w);
    return w;
}

/* The names on a list, in order: "c1 c2". */
static const char *names(const struct connq *q)
{
    static char s[512];
    s[0] = 0;
    for (struct conn *c = connq_first(q); c; c = connq_next(c))
        snprintf(s + strlen(s), sizeof s - strlen(s), "%s%s", s[0] ? " " : "", c->name);
    return s;
}

/* ---- the fake client side ------------------------------------------------------------------- */

static int f_ready(struct gw *gw, struct conn *c)
{
    assert_ptr_equal(gw, &g);
    assert_ptr_equal(c->q, &fk(c)->grp->queue); /* asked only of queued clients */
    if (asks)
        rec("ready(%s)", c->name);
    return fk(c)->ready;
}

static void f_broadcast(struct gw *gw, struct conn *c)
{
    (void)gw;
    rec("broadcast(%s)", c->name);
    assert_int_equal(fk(c)->ready, WAIT_BROADCAST);
    conn_queue_in_loop(&done, c);
    for (int i = 1; i < NFAKES; i++) /* queued on every worker of the group (all up here) */
        if (wk[i].grp == fk(c)->grp) {
            wk[i].owes_any = 1;
            wk[i].c.owes = 1;
        }
}

static void f_no_worker(struct gw *gw, struct conn *c)
{
    (void)gw;
    rec("no_worker(%s)", c->name);
    if (!fk(c)->async)
        conn_queue_in_loop(&done, c);
}

static const struct frontend_ops front = {.ready = f_ready, .broadcast = f_broadcast, .no_worker = f_no_worker};

/* ---- the fake worker side ---------------------------------------------------------------------- */

static void b_start(struct gw *gw, struct conn *w, struct conn *c)
{
    (void)gw;
    struct fake *f = fk(w);
    rec("start(%s,%s)", w->name, c ? c->name : "-");
    assert_ptr_equal(w->q, &f->grp->idle); /* an idle worker */
    if (c) {
        assert_ptr_equal(c->q, &f->grp->queue);
        assert_int_equal(f->owes_first, 0); /* what it runs first ran first */
        assert_int_equal(fk(c)->ready, WAIT_WORKER);
        conn_queue_in_loop(&done, c);
    } else {
        assert_true(f->owes_first || f->owes_any);
    }
    f->owes_first = f->owes_any = 0; /* a start sends what it owes first (run.c) */
    w->owes = 0;
    conn_queue_in_loop(&busy, w);
    if (f->releases && f->releases->c.q == &f->grp->idle) {
        f->releases->owes_first = f->releases->owes_any = 0;
        f->releases->c.owes = 0;
        conn_queue_in_loop(&busy, &f->releases->c);
    }
}

static int b_owes(const struct conn *w, int what)
{
    const struct fake *f = fk(w);
    assert_true(what == OWES_FIRST || what == OWES_ANY);
    if (asks)
        rec("owes(%s,%s)", w->name, what == OWES_FIRST ? "F" : "A");
    return what == OWES_FIRST ? f->owes_first : f->owes_first || f->owes_any;
}

static struct conn *b_idle_first(struct gw *gw, struct group *grp)
{
    (void)gw;
    for (struct conn *w = connq_first(&grp->idle); w; w = connq_next(w))
        if (!fk(w)->out)
            return w;
    return NULL;
}

static int b_follow(struct gw *gw, struct group *grp, struct conn *c)
{
    (void)gw;
    rec("follow(%s)", c->name);
    assert_true(group_pipelines(grp));
    assert_ptr_equal(c->q, &grp->queue);
    assert_int_equal(fk(c)->ready, WAIT_WORKER);
    if (fk(c)->follow_rc == 1)
        conn_queue_in_loop(&done, c);
    return fk(c)->follow_rc;
}

/* dispatch.c uses only these: the others stay NULL, and a call to one crashes the test. A
 * group's mode brings idle_first (and follow when it pipelines). */
static const struct backend_ops back = {.start = b_start, .owes = b_owes};
static const struct group_mode plain_mode = {.name = "plain", .idle_first = b_idle_first};
static const struct group_mode pipelined_mode = {.name = "pipelined", .idle_first = b_idle_first, .follow = b_follow};

/* A worker's connection says whether it owes anything (dispatch asks what only then), as the
 * worker side keeps it: every fake's flag follows its owes_first and owes_any. */
static void sync_owes(void)
{
    for (int i = 1; i < NFAKES; i++)
        wk[i].c.owes = (uint8_t)(wk[i].owes_first || wk[i].owes_any);
}
#define dispatch_run_loop(gw, group) (sync_owes(), dispatch_run_loop(gw, group))
#define dispatch_all_loop(gw) (sync_owes(), dispatch_all_loop(gw))

/* ---- setup -------------------------------------------------------------------------------------- */

static struct group *group(const char *name, const char *users, int pipeline, int pool_mode)
{
    struct group_cfg gc;
    memset(&gc, 0, sizeof gc);
    snprintf(gc.name, sizeof gc.name, "%s", name);
    snprintf(gc.users, sizeof gc.users, "%s", users);
    gc.pipeline = pipeline;
    gc.pool_mode = pool_mode;
    struct group *grp = dispatch_group_add_loop(&g, &gc);
    assert_non_null(grp);
    grp->mode = group_pipelines(grp) ? &pipelined_mode : &plain_mode; /* as run_mode_of chooses */
    return grp;
}

static struct group *grp; /* "main": pipeline 1, pool = request */

static int setup(void **state)
{
    (void)state;
    memset(&g, 0, sizeof g);
    g.groups = calloc(CFG_MAX_GROUPS, sizeof *g.groups);
    assert_non_null(g.groups);
    g.front = &front;
    g.back = &back;
    g.cfg.max_queue = 2;
    log_level = LOG_ERROR;
    memset(cl, 0, sizeof cl);
    memset(wk, 0, sizeof wk);
    conn_q_init(&busy);
    conn_q_init(&done);
    asks = 0;
    trace_reset();
    grp = group("main", "", 1, CFG_POOL_REQUEST);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dispatch_free(&g);
    free(g.groups);
    g.groups = NULL;
    return 0;
}

/* ---- tests --------------------------------------------------------------------------------------- */

/* The worker idle longest (idle_first: the head of the idle list) takes the client waiting longest
 * (the head of the queue), pair after pair, until either runs out; a client queued again goes
 * behind those already waiting, and a worker idle again behind those already idle. */
static void test_round_robin(void **state)
{
    (void)state;
    for (int i = 1; i <= 4; i++)
        queued(i, grp, WAIT_WORKER);
    assert_int_equal(g.loop.dispatch_pending, 1); /* queueing asks for this iteration's dispatch */
    for (int i = 1; i <= 3; i++)
        idle(i, grp);
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w1,c1) start(w2,c2) start(w3,c3)");
    assert_string_equal(names(&grp->queue), "c4");
    assert_string_equal(names(&grp->idle), "");

    /* w2 frees first, then w1; c1's next request queues behind c4 */
    conn_queue_in_loop(&grp->idle, &wk[2].c);
    conn_queue_in_loop(&grp->idle, &wk[1].c);
    dispatch_queue_loop(&g, grp, &cl[1].c, 5);
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w2,c4) start(w1,c1)");
    assert_int_equal(grp->queue.n, 0);

    /* nobody waiting: nothing starts, not even idle_first is needed */
    conn_queue_in_loop(&grp->idle, &wk[3].c);
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "");
    assert_string_equal(names(&grp->idle), "w3");
}

/* A client that may not start now (WAIT_NOT_NOW: its user at max_inflight) is passed over and
 * keeps its place: asked again for each worker, and first when it may start. Nobody ready: nothing
 * starts, every idle worker stays idle. */
static void test_not_now_keeps_place(void **state)
{
    (void)state;
    queued(1, grp, WAIT_NOT_NOW);
    queued(2, grp, WAIT_WORKER);
    queued(3, grp, WAIT_WORKER);
    queued(4, grp, WAIT_NOT_NOW);
    idle(1, grp);
    idle(2, grp);
    idle(3, grp);
    asks = 1;
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "ready(c1) ready(c2) start(w1,c2) " /* nobody owes: nobody asked */
                               "ready(c1) ready(c3) start(w2,c3) "
                               "ready(c1) ready(c4)");
    assert_string_equal(names(&grp->queue), "c1 c4");
    assert_string_equal(names(&grp->idle), "w3");

    asks = 0;
    cl[4].ready = WAIT_WORKER;
    cl[1].ready = WAIT_WORKER;
    idle(4, grp);
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w3,c1) start(w4,c4)");
}

/* A broadcast (WAIT_BROADCAST) takes no worker: it goes to every worker up (front->broadcast), and
 * the idle worker that was found takes the next client; the idle workers left owing it run it
 * after the clients. It waits like the others for a worker in rotation to be idle. */
static void test_broadcast_takes_no_worker(void **state)
{
    (void)state;
    queued(1, grp, WAIT_BROADCAST);
    queued(2, grp, WAIT_WORKER);
    queued(3, grp, WAIT_BROADCAST);
    idle(1, grp);
    worker(2, grp); /* up and busy */
    conn_queue_in_loop(&busy, &wk[2].c);
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "broadcast(c1) start(w1,c2)");
    assert_string_equal(names(&grp->queue), "c3"); /* no worker idle: it waits */
    assert_int_equal(wk[2].owes_any, 1);

    conn_queue_in_loop(&grp->idle, &wk[1].c);
    conn_queue_in_loop(&grp->idle, &wk[2].c);
    trace_reset();
    dispatch_run_loop(&g, grp);
    /* c3 to every worker; then the two idle ones run what they owe (c1's and c3's broadcasts) */
    assert_string_equal(trace, "broadcast(c3) start(w1,-) start(w2,-)");
    assert_int_equal(grp->queue.n, 0);
}

/* What idle workers owe: with clients waiting (and the group not paused), what they run before any
 * client's request (OWES_FIRST) runs first, then the clients take workers, then what the rest owe
 * (OWES_ANY); with nobody waiting, everything owed runs at once. */
static void test_owed_before_and_after(void **state)
{
    (void)state;
    queued(1, grp, WAIT_WORKER);
    queued(2, grp, WAIT_WORKER);
    idle(1, grp);
    wk[1].owes_any = 1; /* sends it itself, before c1's request */
    idle(2, grp);
    wk[2].owes_first = 1;
    idle(3, grp);
    idle(4, grp);
    wk[4].owes_any = 1;
    idle(5, grp);
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w2,-) start(w1,c1) start(w3,c2) start(w4,-)");
    assert_string_equal(names(&grp->idle), "w5");

    /* nobody waiting: OWES_ANY at once (the second pass finds nothing left) */
    conn_queue_in_loop(&grp->idle, &wk[1].c);
    wk[1].owes_any = 1;
    conn_queue_in_loop(&grp->idle, &wk[2].c);
    wk[2].owes_first = 1;
    asks = 1;
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "owes(w1,A) start(w1,-) owes(w2,A) start(w2,-)"); /* w5 owes nothing: not asked */
}

/* A start that takes another idle worker off the list (what it releases starts that one too) does
 * not end the owed run early: it goes on from the head of the idle list, so that a worker owing
 * what runs first is not given a client before it has run it. */
static void test_owed_run_survives_release(void **state)
{
    (void)state;
    queued(1, grp, WAIT_WORKER);
    idle(1, grp);
    idle(2, grp);
    idle(3, grp);
    idle(4, grp);
    wk[1].owes_first = 1;
    wk[1].releases = &wk[2];
    wk[3].owes_first = 1;
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w1,-) start(w3,-) start(w4,c1)");
    assert_string_equal(names(&busy), "w1 w2 w3 w4");

    /* nobody waiting: the same in the run of everything owed */
    conn_queue_in_loop(&grp->idle, &wk[1].c);
    conn_queue_in_loop(&grp->idle, &wk[2].c);
    conn_queue_in_loop(&grp->idle, &wk[3].c);
    wk[1].owes_any = 1;
    wk[2].owes_any = 1;
    wk[3].owes_any = 1;
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w1,-) start(w3,-)");
}

/* A paused group starts nothing new: its idle workers run all they owe (OWES_ANY, even with
 * clients waiting), no client is asked or started or followed; its resume starts them. */
static void test_paused(void **state)
{
    (void)state;
    struct group *p2 = group("p2", "", 2, CFG_POOL_REQUEST);
    for (struct group *x = grp; x; x = x == grp ? p2 : NULL) {
        int base = x == grp ? 0 : 8;
        x->paused = 1;
        queued(base + 1, x, WAIT_WORKER);
        idle(base + 1, x);
        idle(base + 2, x);
        idle(base + 3, x);
        wk[base + 1].owes_first = 1;
        wk[base + 2].owes_any = 1;
    }
    asks = 1;
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "owes(w1,A) start(w1,-) owes(w2,A) start(w2,-)"); /* w3 owes nothing */
    assert_string_equal(names(&grp->queue), "c1");
    assert_string_equal(names(&grp->idle), "w3");

    trace_reset(); /* pipelining: not followed either */
    dispatch_run_loop(&g, p2);
    assert_string_equal(trace, "owes(w9,A) start(w9,-) owes(w10,A) start(w10,-)");
    assert_string_equal(names(&p2->queue), "c9");

    asks = 0;
    grp->paused = 0;
    trace_reset();
    dispatch_run_loop(&g, grp);
    assert_string_equal(trace, "start(w3,c1)");
}

/* follow() (a busy worker's free connection) is tried only in a group that pipelines (pipeline > 1,
 * not pool = session), only for the clients left once no worker in rotation is idle, only for those
 * ready for a worker (not WAIT_NOT_NOW, not a broadcast), in queue order, going on past 0 (not
 * such a request) and stopping at the first -1 (no worker may take it). */
static void test_follow(void **state)
{
    (void)state;
    struct group *pp = group("pp", "", 2, CFG_POOL_REQUEST);
    queued(1, pp, WAIT_WORKER);
    queued(2, pp, WAIT_NOT_NOW);
    queued(3, pp, WAIT_BROADCAST);
    queued(4, pp, WAIT_WORKER);
    cl[4].follow_rc = 0;
    queued(5, pp, WAIT_WORKER);
    queued(6, pp, WAIT_WORKER);
    cl[6].follow_rc = -1;
    queued(7, pp, WAIT_WORKER);
    idle(1, pp);
    idle(2, pp);
    wk[2].out = 1; /* idle, out of rotation: runs only what it owes */
    dispatch_run_loop(&g, pp);
    assert_string_equal(trace, "start(w1,c1) follow(c4) follow(c5) follow(c6)");
    assert_string_equal(names(&pp->queue), "c2 c3 c4 c6 c7");

    /* a worker in rotation idle, and nobody left for it to take: no follow */
    for (int i = 2; i <= 7; i++)
        if (cl[i].c.q == &pp->queue)
            conn_queue_in_loop(&done, &cl[i].c);
    queued(8, pp, WAIT_WORKER);
    idle(3, pp);
    trace_reset();
    dispatch_run_loop(&g, pp);
    assert_string_equal(trace, "start(w3,c8)");

    /* a group that does not pipeline: pipeline 1, or 2 in a session pool */
    struct group *sess = group("sess", "", 2, CFG_POOL_SESSION);
    assert_false(group_pipelines(grp));
    assert_false(group_pipelines(sess));
    assert_true(group_pipelines(pp));
    queued(9, grp, WAIT_WORKER);
    queued(10, sess, WAIT_WORKER);
    trace_reset();
    dispatch_run_loop(&g, grp);
    dispatch_run_loop(&g, sess);
    assert_string_equal(trace, "");
    assert_string_equal(names(&grp->queue), "c9");
    assert_string_equal(names(&sess->queue), "c10");
}

/* Full: max_queue clients waiting already, and no worker idle or the group paused. */
static void test_full(void **state)
{
    (void)state;
    g.cfg.max_queue = 2;
    assert_false(dispatch_full_loop(&g, grp));
    queued(1, grp, WAIT_WORKER);
    assert_false(dispatch_full_loop(&g, grp));
    queued(2, grp, WAIT_WORKER);
    assert_true(dispatch_full_loop(&g, grp));
    queued(3, grp, WAIT_WORKER); /* over it (an async message always waits its turn) */
    assert_true(dispatch_full_loop(&g, grp));
    idle(1, grp);
    assert_false(dispatch_full_loop(&g, grp));
    grp->paused = 1;
    assert_true(dispatch_full_loop(&g, grp));
    grp->paused = 0;
    conn_queue_in_loop(&done, &cl[3].c);
    conn_queue_in_loop(&done, &cl[2].c);
    grp->paused = 1;
    assert_false(dispatch_full_loop(&g, grp)); /* under max_queue: never full */
    g.cfg.max_queue = 1;
    assert_true(dispatch_full_loop(&g, grp));
}

/* No worker up: every queued client is told, in queue order, each once (an async head stays
 * queued); held clients are not (they wait for the resume); a paused group tells nobody. */
static void test_fail_group(void **state)
{
    (void)state;
    queued(1, grp, WAIT_WORKER);
    queued(2, grp, WAIT_WORKER);
    cl[2].async = 1;
    queued(3, grp, WAIT_NOT_NOW);
    queued(4, grp, WAIT_WORKER);
    client(5, grp, WAIT_WORKER);
    dispatch_hold_loop(&g, grp, &cl[5].c, 1);
    dispatch_fail_group_loop(&g, grp);
    assert_string_equal(trace, "no_worker(c1) no_worker(c2) no_worker(c3) no_worker(c4)");
    assert_string_equal(names(&grp->queue), "c2");
    assert_string_equal(names(&grp->held), "c5");

    queued(6, grp, WAIT_WORKER);
    grp->paused = 1;
    trace_reset();
    dispatch_fail_group_loop(&g, grp);
    assert_string_equal(trace, "");
    assert_string_equal(names(&grp->queue), "c2 c6");
}

/* Routing by users lists: a user goes to the first group listing it, else to the first group with
 * no list (else the first group); a group with a list admits exactly those users, one without admits
 * the users no group lists. Names match whole (spaces around them ignored). */
static void test_route_and_admits(void **state)
{
    (void)state;
    dispatch_free(&g); /* without "main" */
    g.ngroups = 0;
    struct group *a = group("a", "alice, bob", 1, 0), *b = group("b", "", 1, 0), *c = group("c", "carol,alice", 1, 0),
                 *d = group("d", "", 1, 0);
    assert_ptr_equal(dispatch_route_loop(&g, "alice"), a);
    assert_ptr_equal(dispatch_route_loop(&g, "bob"), a);
    assert_ptr_equal(dispatch_route_loop(&g, "carol"), c);
    assert_ptr_equal(dispatch_route_loop(&g, "dave"), b);
    assert_ptr_equal(dispatch_route_loop(&g, "al"), b);
    assert_ptr_equal(dispatch_route_loop(&g, ""), b);

    assert_true(dispatch_admits_loop(&g, a, "alice"));
    assert_true(dispatch_admits_loop(&g, a, "bob"));
    assert_false(dispatch_admits_loop(&g, a, "carol"));
    assert_false(dispatch_admits_loop(&g, a, "dave"));
    assert_false(dispatch_admits_loop(&g, a, ""));
    assert_true(dispatch_admits_loop(&g, c, "alice"));
    assert_true(dispatch_admits_loop(&g, c, "carol"));
    assert_true(dispatch_admits_loop(&g, b, "dave"));
    assert_true(dispatch_admits_loop(&g, d, "dave"));
    assert_true(dispatch_admits_loop(&g, b, ""));
    assert_true(dispatch_admits_loop(&g, b, "al"));
    assert_false(dispatch_admits_loop(&g, b, "alice"));
    assert_false(dispatch_admits_loop(&g, d, "carol"));

    /* every group has a list: the unlisted go to the first group, which does not admit them */
    dispatch_free(&g);
    g.ngroups = 0;
    struct group *x = group("x", "u1", 1, 0), *y = group("y", "u2", 1, 0);
    assert_ptr_equal(dispatch_route_loop(&g, "u2"), y);
    assert_ptr_equal(dispatch_route_loop(&g, "zed"), x);
    assert_false(dispatch_admits_loop(&g, x, "zed"));

    assert_ptr_equal(dispatch_group_find_loop(&g, "y"), y);
    assert_null(dispatch_group_find_loop(&g, "a")); /* replaced */
}

/* Groups: up to CFG_MAX_GROUPS, each with empty lists; dispatch_all_loop runs each in turn. Holding
 * a client takes it off the queue and asks for no dispatch. */
static void test_groups_and_all(void **state)
{
    (void)state;
    for (int i = 1; i < CFG_MAX_GROUPS; i++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", i);
        struct group *x = group(name, "", 1, 0);
        assert_int_equal(x->index, i);
        assert_null(connq_first(&x->queue));
        assert_null(connq_first(&x->idle));
    }
    struct group_cfg gc = {.name = "over"};
    assert_null(dispatch_group_add_loop(&g, &gc));
    assert_int_equal(g.ngroups, CFG_MAX_GROUPS);

    struct group *last = dispatch_group_find_loop(&g, "g15"), *g5 = dispatch_group_find_loop(&g, "g5");
    assert_ptr_equal(last, &g.groups[CFG_MAX_GROUPS - 1]);
    assert_ptr_equal(g5, &g.groups[5]);
    queued(1, last, WAIT_WORKER);
    queued(2, grp, WAIT_WORKER);
    queued(3, g5, WAIT_WORKER);
    idle(1, grp);
    idle(2, last);
    idle(3, g5);
    dispatch_all_loop(&g);
    assert_string_equal(trace, "start(w1,c2) start(w3,c3) start(w2,c1)");

    g.loop.dispatch_pending = 0;
    queued(4, grp, WAIT_WORKER);
    assert_int_equal(g.loop.dispatch_pending, 1);
    g.loop.dispatch_pending = 0;
    dispatch_hold_loop(&g, grp, &cl[4].c, 4);
    assert_int_equal(g.loop.dispatch_pending, 0);
    assert_int_equal(g.loop.work_pending, 0);
    assert_string_equal(names(&grp->queue), "");
    assert_string_equal(names(&grp->held), "c4");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_robin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_now_keeps_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_takes_no_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owed_before_and_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owed_run_survives_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_and_admits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_groups_and_all, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

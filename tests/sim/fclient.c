/* fclient.c: the fake q clients: they connect and shake hands (good and bad credentials,
 * every capability, local or remote), queue requests of every kind (to a worker, routed,
 * .qgate.all, the gateway's commands, malformed ones), write and read at any byte, stop
 * reading, close; and they check what arrives (every sync request gets exactly one reply, its
 * own, in order; a gateway error only when the world justifies it; a close only for a reason
 * a client can be told). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "kcodec.h"
#include "kipc.h"
#include "sim_int.h"

const char *const op_names[] = {"echo", "big", "err", "push", "cb", "guid", "slow", "async", "apush", "acb",
                                       "ping", "stats", "clients", "disconnect", "reload", "unknown",
                                       "bigcmd", "badhdr", "badbody", "resp", "all",
                                       "pools", "pause", "resume", "disable", "enable"};

/* ---- the gateway's hooks about clients ---------------------------------------------------- */

struct fclient *fclient_of(uint32_t id, uint32_t gen)
{
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st != FC_FREE && S->cl[i].gid == id && S->cl[i].ggen == gen)
            return &S->cl[i];
    return NULL;
}

struct sent *sent_of_seq(struct fclient *c, uint64_t seq)
{
    for (int i = 0; i < c->sent.n; i++)
        if (c->sent.v[i].seq == (int)seq)
            return &c->sent.v[i];
    return NULL;
}

void hook_lost(void *ctx, uint32_t id, uint32_t gen, uint64_t seq)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    struct sent *s = c ? sent_of_seq(c, seq) : NULL;
    tr("gateway: request %llu of C%d lost with its worker", (unsigned long long)seq, c ? c->cid : -1);
    if (s)
        s->lost = s->abandoned = 1;
    for (int i = 0; s && i < c->sent.n; i++) /* what it sent nested within it went down too */
        if (c->sent.v[i].nested_in == s->seq && !c->sent.v[i].here) /* (the gateway's own: answered) */
            c->sent.v[i].lost = c->sent.v[i].abandoned = 1;
    if (s && s->fan) {
        while (S->fan_given_up.n <= c->cid)
            VEC_PUSH(S->fan_given_up, 0);
        S->fan_given_up.v[c->cid] = 1;
    }
}

/* An async message dropped, unrun, as its group has no worker up: it never runs (checked: no
 * worker of that group is up, and the gateway has said so). */
void hook_dropped(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, const struct group *grp)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    struct sent *s = c ? sent_of_seq(c, seq) : NULL;
    tr("gateway: async message %llu of C%d dropped: no worker of group %s is up", (unsigned long long)seq,
       c ? c->cid : -1, grp->cfg.name);
    if (grp->nup || !grp->unavailable)
        fail("C%d's async message %llu dropped for no worker up, while group %s has %d up%s", c ? c->cid : -1,
             (unsigned long long)seq, grp->cfg.name, grp->nup, grp->unavailable ? "" : " (not unavailable)");
    if (s)
        s->lost = 1;
}

void hook_nested(void *ctx, uint32_t id, uint32_t gen, uint64_t seq, uint64_t head, int here)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    struct sent *s = c ? sent_of_seq(c, seq) : NULL;
    tr("gateway: message %llu of C%d %s, within its %llu", (unsigned long long)seq, c ? c->cid : -1,
       here ? "answered nested by the gateway" : "goes nested to the worker waiting in a callback",
       (unsigned long long)head);
    if (s && (s->type == KIPC_RESPONSE || (!here && s->op >= OP_PING)))
        fail("C%d's %s %llu went nested to a worker: only a message for a worker may", c->cid, op_names[s->op],
             (unsigned long long)seq);
    if (s && here && s->type == KIPC_ASYNC && s->op < OP_PING)
        fail("C%d's async %s %llu answered nested by the gateway: it waits its turn", c->cid, op_names[s->op],
             (unsigned long long)seq);
    S->res->nested_here += here;
    if (s) {
        s->nested_in = (int)head;
        s->here = (uint8_t)here;
    }
}

void hook_closed(void *ctx, uint32_t id, uint32_t gen, const char *why)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    if (c)
        snprintf(c->why, sizeof c->why, "%s", why);
}

void hook_unread(void *ctx, uint32_t id, uint32_t gen, uint64_t next_seq)
{
    (void)ctx;
    struct fclient *c = fclient_of(id, gen);
    tr("gateway: reads nothing more from C%d (from its message %llu on)", c ? c->cid : -1, (unsigned long long)next_seq);
    if (c && c->unread_from < 0)
        c->unread_from = (int)next_seq;
}

/* ---- fake clients ------------------------------------------------------------------------- */

static const struct {
    const char *user, *pass;
    int admin, good;
} creds[] = {
    {"alice", "wonder", 1, 1}, {"bob", "builder", 0, 1}, {"carol", "s3cret", 0, 1}, {"dave", "d", 0, 1},
    {"bea", "b", 0, 1},        {"mallory", "x", 0, 0},   {"alice", "wrong", 0, 0},
};

static int route_of(const char *user)
{
    if (S->ngroups > 1 && (!strcmp(user, "bob") || !strcmp(user, "bea")))
        return S->bc_group;
    return 0;
}

int nopen_clients(void)
{
    int n = 0;
    for (int i = 0; i < MAXC; i++)
        n += S->cl[i].st == FC_HS || S->cl[i].st == FC_READY;
    return n;
}

void client_connect(void)
{
    int slot = -1;
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_FREE) {
            slot = i;
            break;
        }
    if (slot < 0)
        return;
    struct fclient *c = &S->cl[slot];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
        fail("socketpair: %s", strerror(errno));
    set_sndbuf(sv[0]);
    set_sndbuf(sv[1]);
    memset(c, 0, sizeof *c);
    c->cid = S->next_cid++;
    c->unread_from = -1;
    c->hold_seq = -1;
    VEC_PUSH(S->last_seq, -1);
    VEC_PUSH(S->by_cid, c);
    c->fd = sv[1];
    c->local = !(enabled(SIM_EV_REMOTE) && chance(30));
    S->in_gw = 1;
    struct client *gc = client_adopt_loop(&S->g, sv[0], 0, c->local);
    S->in_gw = 0;
    if (!gc)
        fail("client_adopt_loop refused a socket");
    c->gid = gc->c.id;
    c->ggen = gc->c.gen;
    c->serial = gc->serial;
    int k = rnd((int)QG_ARRAY_LEN(creds));
    if (!S->users_file)
        k = rnd(5);
    snprintf(c->user, sizeof c->user, "%s", creds[k].user);
    snprintf(c->pass, sizeof c->pass, "%s", creds[k].pass);
    c->accept = !S->users_file || creds[k].good;
    c->admin = S->users_file && creds[k].admin;
    static const int caps[] = {3, 3, 3, 6, 2, 1, 0};
    c->cap_req = enabled(SIM_EV_OLDCAP) ? caps[rnd(7)] : 3;
    c->group = route_of(c->user);
    VEC_PUSH(S->cid_group, c->group);
    c->st = FC_HS;
    int odd = chance(3); /* (one draw, as before this case was added: the seeds' worlds stay as they were) */
    if (odd && c->cid % 2) { /* an HTTP request (a browser, a WebSocket library) for a handshake */
        c->http = 1;
        c->accept = 0;
        static const char req[] = "GET /?q=1 HTTP/1.1\r\nHost: qgate\r\nUpgrade: websocket\r\n\r\n";
        sb_add(&c->out, req, sizeof req - 1);
    } else if (odd) { /* a handshake q would not accept: over 1 KiB without its NUL */
        c->longhs = 1;
        c->accept = 0;
        uint8_t junk[1100];
        memset(junk, 'x', sizeof junk);
        sb_add(&c->out, junk, sizeof junk);
    } else {
        char hs[128];
        int n = snprintf(hs, sizeof hs, "%s:%s", c->user, c->pass);
        sb_add(&c->out, hs, (size_t)n);
        uint8_t tail[2] = {(uint8_t)c->cap_req, 0}; /* capability 0: old clients send no byte */
        if (c->cap_req)
            sb_add(&c->out, tail, 2);
        else
            sb_add(&c->out, tail + 1, 1);
    }
    tr("C%d connects as %s (the gateway's c%llu, slot %u.%u, cap %d, %s)", c->cid, c->user,
       (unsigned long long)c->serial, c->gid, c->ggen, c->cap_req, c->local ? "local" : "remote");
}

struct fclient *pick_client(int need_ready)
{
    int idx[MAXC], n = 0;
    for (int i = 0; i < MAXC; i++)
        if (S->cl[i].st == FC_READY || (!need_ready && S->cl[i].st == FC_HS))
            idx[n++] = i;
    return n ? &S->cl[idx[rnd(n)]] : NULL;
}

static void add_sent(struct fclient *c, int type, int op, int arg)
{
    struct sent s = {.type = (uint8_t)type, .op = (uint8_t)op, .arg = arg, .end = c->out_base + c->out.len,
                     .seq = type == KIPC_RESPONSE ? -1 : c->nseq++, .grp = c->group, .last_push = -1, .nested_in = -1,
                     .epoch = reset_query_on() ? S->reset_epoch : 0};
    VEC_PUSH(c->sent, s);
    if (type == KIPC_SYNC)
        VEC_PUSH(c->pend, c->sent.n - 1);
}

/* A request for a worker, as text, or (ROUTE) wrapped: (`.qgate.on; `G; text), G its own group
 * (admitted), the other (bob and bea keep to bc, the others to main: refused) or none. The
 * group it may run on, or -1 if the gateway must refuse it. */
static int put_request(struct fclient *c, int type, const char *text)
{
    c->routed = 0;
    if (!enabled(SIM_EV_ROUTE) || !chance(c->hold_seq == c->nseq ? 40 : 15)) {
        put_text(&c->out, type, "%s", text);
        return c->group;
    }
    c->routed = 1; /* (from inside a callback: answered at once, with an error) */
    int r = rnd(10), other = S->ngroups > 1 ? 1 - c->group : -1;
    int to = r < 7 ? c->group : r < 9 && other >= 0 ? other : -1;
    K l = k_list(3);
    kK(l)[0] = chance(50) ? k_sym(".qgate.on") : k_str(".qgate.on", 9);
    kK(l)[1] = k_sym(to < 0 ? "nosuch" : to == S->bc_group ? "bc" : "main");
    kK(l)[2] = k_str(text, strlen(text));
    put_msg(&c->out, type, l);
    return to == c->group ? to : -1;
}

/* What an operator's command is to get (struct sent arg). */
enum { CTL_OK, CTL_ACCESS, CTL_NOTARGET, CTL_MAYBE /* 1b, or no such worker: a reload may be on its way */ };

/* (name; arg), name a symbol or (as node-q names a function) a string; arg NULL: (::). */
static K control_call(const char *name, K arg)
{
    K l = k_list(2);
    kK(l)[0] = chance(50) ? k_sym(name) : k_str(name, strlen(name));
    kK(l)[1] = arg ? arg : k_prim(KT_UNARY, 0);
    return l;
}

/* .qgate.pause/resume[`group] (or every group) and .qgate.disable/enable[`host:port], in one of
 * the forms a q client may send, to c's output. What it is to get (CTL_*). */
static int control_request(struct fclient *c, int op)
{
    static const char *const names[] = {[OP_PAUSE] = ".qgate.pause", [OP_RESUME] = ".qgate.resume",
                                        [OP_DISABLE] = ".qgate.disable", [OP_ENABLE] = ".qgate.enable"};
    char target[64] = "";
    int bad = 0, none = 0;
    if (op == OP_PAUSE || op == OP_RESUME) {
        int r = rnd(10), other = S->ngroups > 1 ? 1 - c->group : c->group;
        none = r >= 7 && r < 9;
        bad = r == 9;
        snprintf(target, sizeof target, "%s", bad ? "nosuch" : (r < 5 ? c->group : other) == S->bc_group ? "bc" : "main");
    } else {
        int k = rnd(S->nw + 1);
        bad = k == S->nw;
        snprintf(target, sizeof target, "%s127.0.0.1:%d", chance(20) ? ":" : "", bad ? 1 : WPORT0 + k);
    }
    int form = rnd(4);
    if (none)
        put_text(&c->out, KIPC_SYNC, "%s[]", names[op]);
    else if (form == 0)
        put_text(&c->out, KIPC_SYNC, "%s[`%s]", names[op], target);
    else if (form == 1)
        put_text(&c->out, KIPC_SYNC, "%s[\"%s\"]", names[op], target);
    else
        put_msg(&c->out, KIPC_SYNC, control_call(names[op], form == 2 ? k_sym(target) : k_str(target, strlen(target))));
    if (!c->admin)
        return CTL_ACCESS;
    return bad ? CTL_NOTARGET : op == OP_DISABLE || op == OP_ENABLE ? CTL_MAYBE : CTL_OK;
}

/* A request for a worker, "q CID SEQ OP ARG" (sync) or "a CID SEQ OP ARG" (async), its argument
 * in *arg: how big a reply, how many pushes, how slow. The group it may run on (put_request). */
static int worker_request(struct fclient *c, int op, int seq, int *arg)
{
    char text[96];
    if (op == OP_ASYNC || op == OP_APUSH || op == OP_ACB) {
        *arg = op == OP_APUSH ? 1 + rnd(3) : 0;
        snprintf(text, sizeof text, "a %d %d %d %d", c->cid, seq, op, *arg);
        return put_request(c, KIPC_ASYNC, text);
    }
    *arg = op == OP_BIG ? 1000 + rnd(enabled(SIM_EV_BIGREPLY) ? 300000 : 3000)
         : op == OP_PUSH ? 1 + rnd(4) : op == OP_SLOW ? 1 + rnd(2000) : 0;
    snprintf(text, sizeof text, "q %d %d %d %d", c->cid, seq, op, *arg);
    return put_request(c, KIPC_SYNC, text);
}

/* (`.qgate.all; `G; "q ..."[; `list]) on c's own group, *arg 1 (merged) or 2 (`list). The group
 * it may run on: none for a session group. */
static int all_request(struct fclient *c, int seq, int *arg)
{
    int as_list = chance(50);
    K l = k_list(3 + as_list);
    char t[96];
    int acts = (enabled(SIM_EV_WPUSH) && chance(25) ? 1 : 0) | (enabled(SIM_EV_CALLBACK) && chance(25) ? 2 : 0);
    snprintf(t, sizeof t, "q %d %d %d %d", c->cid, seq, OP_ALL, acts); /* its workers publish, call back */
    kK(l)[0] = k_sym(".qgate.all");
    kK(l)[1] = k_sym(c->group == S->bc_group ? "bc" : "main");
    kK(l)[2] = k_str(t, strlen(t));
    if (as_list)
        kK(l)[3] = k_sym("list");
    put_msg(&c->out, KIPC_SYNC, l);
    *arg = 1 + as_list;
    /* not for a session group; in a world whose reloads change group main's pool, either (the
     * gateway's reload may come before it reads it, or after) */
    return S->session && !S->pool_flips && c->group != S->bc_group ? -1 : c->group;
}

/* .qgate.disconnect or .qgate.kill of a client the gateway showed, or of one it never did: the
 * client's number (the request's arg). */
static int disconnect_request(struct fclient *c)
{
    struct fclient *v = pick_client(0);
    int arg = v && chance(80) ? (int)v->serial : 5000 + rnd(100);
    if (chance(40)) {
        put_text(&c->out, KIPC_SYNC, ".qgate.disconnect[%d]", arg);
    } else if (chance(50)) {
        put_text(&c->out, KIPC_SYNC, ".qgate.kill[%d]", arg); /* the same command, PgBouncer's name */
    } else {
        K n = k_atom(-KT_LONG);
        n->j = arg;
        put_msg(&c->out, KIPC_SYNC, control_call(".qgate.kill", n));
    }
    return arg;
}

/* One of the gateway's commands (not the operator's pause and disable), in one of the forms a q
 * client may send. Its arg: the client a disconnect names, else 0. */
static int command_request(struct fclient *c, int op)
{
    switch (op) {
    case OP_PING:
        if (chance(50))
            put_text(&c->out, KIPC_SYNC, ".qgate.ping[]");
        else {
            K l = k_list(2);
            kK(l)[0] = k_sym(".qgate.ping");
            kK(l)[1] = k_prim(KT_UNARY, 0);
            put_msg(&c->out, KIPC_SYNC, l);
        }
        break;
    case OP_STATS:
    case OP_CLIENTS:
    case OP_RELOADCMD:
    case OP_UNKNOWN:
        put_text(&c->out, KIPC_SYNC, "%s", op == OP_STATS     ? ".qgate.stats[]"
                                         : op == OP_CLIENTS   ? ".qgate.clients[]"
                                         : op == OP_RELOADCMD ? ".qgate.reload[]"
                                                              : ".qgate.nosuch[]");
        break;
    case OP_DISCONNECT:
        return disconnect_request(c);
    case OP_POOLS:
        if (chance(50))
            put_text(&c->out, KIPC_SYNC, ".qgate.pools[]");
        else
            put_msg(&c->out, KIPC_SYNC, control_call(".qgate.pools", NULL));
        break;
    case OP_BIGCMD: { /* a command with a huge argument list */
        int n = 1000 + rnd(20000);
        K l = k_list(n + 1);
        kK(l)[0] = k_sym(".qgate.ping");
        for (int i = 0; i < n; i++) {
            kK(l)[i + 1] = k_atom(-KT_LONG);
            kK(l)[i + 1]->j = i;
        }
        put_msg(&c->out, KIPC_SYNC, l);
        break;
    }
    default:
        break;
    }
    return 0;
}

/* A whole message of type whose body q would reject (which: one of four kinds). */
static void put_bad_body(struct fclient *c, int type, int which)
{
    uint8_t m[8 + 12] = {1, (uint8_t)type, 0, 0, 20, 0, 0, 0};
    static const uint8_t bodies[][12] = {
        {KT_CHAR, 0, 200, 0, 0, 0, 'x'},                       /* count past the end */
        {77, 0, 0, 0, 0, 0},                                   /* unknown type */
        {KT_SYM, 0, 1, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 'f'}, /* symbol without NUL */
        {KT_LONG, 9, 0, 0, 0, 0},                              /* bad attribute */
    };
    memcpy(m + 8, bodies[which], 12);
    sb_add(&c->out, m, sizeof m);
}

/* A malformed message, request seq: a header q would reject, or a whole message whose body it
 * would. Nothing after it is answered. */
static void bad_request(struct fclient *c, int op, int seq)
{
    if (op == OP_BADHDR) {
        static const uint8_t bad[][8] = {
            {2, 1, 0, 0, 20, 0, 0, 0},  /* byte order 2 */
            {1, 3, 0, 0, 20, 0, 0, 0},  /* type 3 */
            {1, 1, 0, 0, 4, 0, 0, 0},   /* too short */
            {1, 1, 0, 1, 20, 0, 0, 0},  /* byte 3 set: only with capability 6 */
        };
        sb_add(&c->out, bad[rnd(4)], 8);
    } else {
        put_bad_body(c, KIPC_SYNC, rnd(4));
    }
    c->bad = 1;
    c->bad_seq = seq;
}

/* Append one request of kind op to c's output. */
/* May c send the answer to the callback of the message it has just sent (a request, or an async
 * message that calls back) right behind it? Only when no callback but that message's may read it
 * first: nothing else of c's outstanding, no other async message of c's that calls back ever sent
 * (one may still run: q would run the request nested in its callback), not inside a callback
 * itself. */
static int may_answer_ahead(const struct fclient *c)
{
    if (c->hold_seq >= 0 || c->bad || c->half)
        return 0;
    int outstanding = 0, async = c->sent.v[c->sent.n - 1].op == OP_ACB;
    for (int i = c->pend_off; i < c->pend.n; i++)
        outstanding += !c->sent.v[c->pend.v[i]].answered;
    for (int i = 0; i < c->sent.n - 1; i++)
        if (c->sent.v[i].op == OP_ACB || c->sent.v[i].op == OP_ALL)
            return 0;
    return outstanding == !async;
}

static void client_request(struct fclient *c, int op)
{
    if (c->cap < 3 && (op == OP_STATS || op == OP_CLIENTS || op == OP_POOLS))
        op = OP_PING; /* (a table made here is 'type for it, as a guid's reply is: which of the two a
                       * 'type answers, when both are sent nested within a callback, the gateway
                       * answering one and the worker the other, cannot be told) */
    int to = -2; /* the group a request for a worker may run on, -1 none; -2: not one */
    int seq = c->nseq, arg = 0;
    switch (op) {
    case OP_BIG:
    case OP_PUSH:
    case OP_SLOW:
    case OP_ECHO:
    case OP_ERR:
    case OP_GUID:
    case OP_CB:
    case OP_ASYNC:
    case OP_APUSH:
    case OP_ACB:
        to = worker_request(c, op, seq, &arg);
        break;
    case OP_ALL:
        to = all_request(c, seq, &arg);
        break;
    case OP_PAUSE:
    case OP_RESUME:
    case OP_DISABLE:
    case OP_ENABLE:
        arg = control_request(c, op);
        break;
    case OP_BADHDR:
    case OP_BADBODY:
        bad_request(c, op, seq);
        break;
    default:
        arg = command_request(c, op);
        break;
    }
    int type = op == OP_ASYNC || op == OP_APUSH || op == OP_ACB ? KIPC_ASYNC : KIPC_SYNC;
    add_sent(c, type, op, arg);
    if (to != -2) {
        struct sent *x = &c->sent.v[c->sent.n - 1];
        x->grp = to;
        x->fan = (uint8_t)(op == OP_ALL ? arg : 0);
        x->routed = (uint8_t)(op == OP_ALL || c->routed);
        x->lost = to < 0 && type == KIPC_ASYNC; /* refused, with nobody to tell: never runs */
    }
    tr("C%d queues %s %s (seq %d)%s", c->cid, type == KIPC_SYNC ? "sync" : "async", op_names[op], seq,
       to == -1 ? ", routed where it may not go" : "");
    if (op == OP_ASYNC && chance(15)) { /* a gateway command right behind it, async: run by the gateway,
                                         * unanswered; never a worker's (fworker fails what it cannot read) */
        put_text(&c->out, KIPC_ASYNC, ".qgate.ping[]");
        add_sent(c, KIPC_ASYNC, OP_PING, 0);
        c->sent.v[c->sent.n - 1].lost = 1; /* (the gateway's to run: no worker runs it) */
        tr("C%d queues async .qgate.ping[] right behind it (seq %d)", c->cid, c->nseq - 1);
    }
    if ((op == OP_CB || op == OP_ACB) && to >= 0 && enabled(SIM_EV_NEST) &&
        side_chance((uint64_t)c->cid, (uint64_t)seq | (op == OP_ACB ? 1ull << 45 : 0), op == OP_ACB ? 25 : 30) && may_answer_ahead(c)) {
        /* its answer right behind it, before the callback asks: q's worker reads it off the handle
         * when it calls back; "-1": whichever worker that is. Now and then an echo between the two:
         * it runs nested in that callback first, and the gateway holds the answer back from the
         * worker until its reply has come (the worker would pair it with a callback the echo made) */
        int at = c->sent.n - 1; /* (the request's) */
        if (op == OP_ACB)
            S->ahead_async++;
        if (op == OP_CB && side_chance((uint64_t)c->cid, (uint64_t)seq | 1ull << 41, 30)) {
            tr("C%d queues an echo between request %d and its answer", c->cid, seq);
            client_request(c, OP_ECHO);
            S->ahead_between++;
        }
        int bad = op == OP_CB && side_chance((uint64_t)c->cid, (uint64_t)seq | 1ull << 40, 20); /* (not the seed's stream:
                                                                                   * as above) */
        if (bad) { /* malformed: read in its place, it is a bad message there (answered so, after
                    * the request, whose callback the worker is told gets no answer); nothing after */
            put_bad_body(c, KIPC_RESPONSE, (int)(((uint64_t)c->cid * 31 + (uint64_t)seq) % 4));
            add_sent(c, KIPC_SYNC, OP_BADBODY, 0);
            c->bad = 1;
            c->bad_seq = c->nseq - 1;
            S->bad_ahead++;
        } else {
            put_text(&c->out, KIPC_RESPONSE, "r %d %d -1", c->cid, seq);
            add_sent(c, KIPC_RESPONSE, OP_RESP, seq);
        }
        c->sent.v[at].pre = 1;
        S->answered_ahead++;
        tr("C%d answers the callback of request %d before it comes%s", c->cid, seq, bad ? ", malformed" : "");
    }
}

static int pick_op(void)
{
    for (;;) {
        int r = rnd(100);
        if (r < 22)
            return OP_ECHO;
        if (r < 30)
            return enabled(SIM_EV_BIGREPLY) || chance(50) ? OP_BIG : OP_ECHO;
        if (r < 34)
            return OP_ERR;
        if (r < 38 && enabled(SIM_EV_WPUSH))
            return OP_PUSH;
        if (r < 42 && enabled(SIM_EV_CALLBACK))
            return OP_CB;
        if (r < 45)
            return OP_GUID;
        if (r < 50)
            return OP_SLOW;
        if (r < 70 && enabled(SIM_EV_ASYNC))
            return enabled(SIM_EV_CALLBACK) && chance(10)   ? OP_ACB /* (its worker calls it back) */
                   : chance(80) || !enabled(SIM_EV_WPUSH) ? OP_ASYNC
                                                          : OP_APUSH;
        if (r < 80 && enabled(SIM_EV_COMMAND)) {
            static const int cmds[] = {OP_PING, OP_PING, OP_STATS, OP_UNKNOWN, OP_BIGCMD};
            return cmds[rnd(5)];
        }
        if (r < 86 && enabled(SIM_EV_ADMIN)) {
            static const int cmds[] = {OP_CLIENTS, OP_DISCONNECT, OP_RELOADCMD, OP_POOLS};
            int k = rnd(4);
            if (enabled(SIM_EV_PAUSE) && chance(40))
                return chance(50) ? OP_PAUSE : OP_RESUME;
            if (enabled(SIM_EV_DISABLE) && chance(25))
                return chance(50) ? OP_DISABLE : OP_ENABLE;
            return cmds[k];
        }
        if (r < 88 && enabled(SIM_EV_BADMSG))
            return chance(50) ? OP_BADHDR : OP_BADBODY;
        if (r < 91 && enabled(SIM_EV_ROUTE))
            return OP_ALL;
        if (r >= 88)
            return OP_ECHO;
    }
}

void client_send(struct fclient *c, int burst)
{
    if (c->bad || c->we_closed || c->half)
        return;
    for (int i = 0; i < burst && !c->bad; i++)
        client_request(c, pick_op());
}

/* The reply to an operator's command: 1b when it applies (a pause may be told its group was
 * resumed first), else the error its sender or its argument earns. */
static void control_got(struct fclient *c, const struct sent *r, K x)
{
    const char *e = x->t == KT_ERROR ? x->s : NULL;
    int ok = x->t == -KT_BOOL && x->g == 1;
    if (S->ever_session && e && (!strncmp(e, "qgate: worker ", 14) || !strncmp(e, "qgate: timeout (", 16)))
        return; /* its session's worker was lost: the first request owed is told so, whatever it is */
    switch (r->arg) {
    case CTL_ACCESS:
        ok = e && !strncmp(e, "qgate: access (admin only)", 26);
        break;
    case CTL_NOTARGET:
        ok = e && (!strncmp(e, "qgate: no group ", 16) || !strncmp(e, "qgate: no worker ", 17));
        break;
    case CTL_MAYBE:
        ok |= e && !strncmp(e, "qgate: no worker ", 17);
        break;
    default:
        ok |= r->op == OP_PAUSE && e && strstr(e, "was resumed before its pause completed");
        break;
    }
    if (!ok)
        fail("C%d: %s %d (expecting %d) got %s%s", c->cid, op_names[r->op], r->seq, r->arg, e ? "'" : "type ",
             e ? e : "?");
}

/* Is the gateway's error e a valid answer to request r of c? Only when the world's events
 * justify it (a worker lost or out of service, a timeout, a refusal, a bad message, the
 * request itself): NULL if so, else what is wrong. */
static const char *gw_error_unjustified(const struct fclient *c, const struct sent *r, const char *e)
{
    const struct config *cfg = &S->g.cfg;
    /* (a worker that did not answer a handshake in time is out of service: a session's new
     * connection after the clock jumped to that timeout, say) */
    int lost = S->wdeaths || S->g.query_timeouts, out = lost || S->outages || S->g.connect_timeouts;
#define HAS(p) (!strncmp(e, p, strlen(p)))
    if (HAS("qgate: badmsg"))
        return r->op == OP_BADBODY || r->op == OP_BADHDR ? NULL : "a well-formed request";
    if (HAS("qgate: busy: hold_max reached") || HAS("qgate: too large to hold whole"))
        return cfg->hold_max < (1 << 30) && (c->cap < 3 || r->op == OP_ALL) ? NULL
                                                                             : "hold_max 1 GiB, or a reply that may go as it came";
    if (HAS("qgate: busy"))
        return cfg->max_queue < 1000 ? NULL : "max_queue 1000, never reached here";
    if (HAS("qgate: timeout (queued "))
        return cfg->queue_timeout > 0 || S->had_qu ? NULL : "no queue_timeout";
    if (HAS("qgate: timeout (the worker that called back ") || HAS("qgate: the worker that called back was lost"))
        return r->nested_in < 0 || r->here ? "a request that did not run nested on its worker"
               : lost                       ? NULL
                                            : "no worker died or timed out";
    if (HAS("qgate: a route cannot run inside a callback"))
        return r->here && r->routed ? NULL : "not a route sent from inside a callback";
    if (HAS("qgate: a request cannot run inside a .qgate.all's callback"))
        return r->here && !r->routed && r->op < OP_PING ? NULL : "not a request sent from inside a .qgate.all's callback";
    if (HAS("qgate: a request cannot run inside this callback now"))
        return r->here && !r->routed && r->op < OP_PING && lost ? NULL : "a request the worker in the callback could run";
    if (HAS("qgate: timeout ("))
        return S->g.query_timeouts ? NULL : "no query timed out";
    if (HAS("qgate: worker ") && strstr(e, " lost before this .qgate.all's part was sent"))
        return r->op == OP_ALL && out ? NULL : "every worker stayed in service (or not a .qgate.all)"; /* (its
                                   * part owed to a worker whose new connection's handshake timed out:
                                   * out of service; the long simulation, seed 119485) */
    if (HAS("qgate: worker ") && strstr(e, " lost"))
        return lost ? NULL : "no worker died or timed out";
    if (HAS("qgate: worker ") && strstr(e, ": its connection was dropped (the request it ran sent nothing"))
        return r->op == OP_ALL && S->g.query_timeouts ? NULL : "no query timed out (or not a .qgate.all)";
    if (HAS("qgate: no worker of group "))
        return out ? NULL : "every worker stayed in service";
    if (HAS("qgate: group ") && (strstr(e, " workers up") || strstr(e, " workers answered")))
        return r->op == OP_ALL && out ? NULL : "every worker stayed in service (or not a .qgate.all)";
    if (HAS("qgate: no group ") || HAS("qgate: access: group "))
        return r->grp < 0 ? NULL : "a route to a group it may use";
    if (HAS("qgate: access (admin only)"))
        return !c->admin ? NULL : "an admin's command";
    if (HAS("qgate: reply too large for capability "))
        return c->cap < 3 && cfg->compress_max < (1 << 20) ? NULL : "a reply within compress_max";
    if (HAS("qgate: unknown command") || HAS("qgate: bad command"))
        return r->op == OP_UNKNOWN || r->op == OP_BIGCMD ? NULL : "a command it knows";
    if (HAS("qgate: reload failed")) /* (one asked for while another is under way waits for the next) */
        return r->op == OP_RELOADCMD ? NULL : "not a reload";
    if (HAS("qgate: no client "))
        return r->op == OP_DISCONNECT ? NULL : "not a disconnect";
    if (HAS("qgate: .qgate.all does not apply to group "))
        return r->op == OP_ALL && S->ever_session ? NULL : "a .qgate.all on a request pool";
    return "an error the simulation knows no cause for";
#undef HAS
}

/* An async message for c (text s): a worker's timer publish, which only one client may get
 * (tpub_check says which), or a push of c's own request. */
static void client_got_async(struct fclient *c, const char *s)
{
    int cid = -1, id = -1, j = 0;
    if (sscanf(s, "t %d %d", &id, &j) == 2 && id >= 0 && id < S->tpubs.n) { /* a worker's timer */
        struct tpub *t = &S->tpubs.v[id];
        if (t->to >= 0 && t->to != c->cid)
            fail("C%d got publish %d of W%d, which C%d got too", c->cid, id, t->wid, t->to);
        t->to = c->cid;
        tpub_check(t, id);
        tr("C%d got publish %d of W%d's timer", c->cid, id, t->wid);
        return;
    }
    int seq = -1;
    if (sscanf(s, "p %d %d %d", &cid, &seq, &j) != 3 || cid != c->cid)
        fail("C%d got an async message that is not its own: \"%s\"", c->cid, s);
    for (int i = c->sent.n - 1; i >= 0; i--) { /* a worker's pushes come before its reply, in order
                                           * (some dropped: an old client takes no guid) */
        struct sent *r = &c->sent.v[i];
        if (r->seq != seq || r->op != OP_PUSH)
            continue;
        if ((r->answered && !r->abandoned) || j <= r->last_push)
            fail("C%d got push %d of request %d after %s", c->cid, j, seq,
                 r->answered ? "its reply" : "a later push of it");
        r->last_push = j;
        break;
    }
    tr("C%d got push \"%s\"", c->cid, s);
}

static void client_request(struct fclient *c, int op);

/* c answers the callback of its request seq (wid: the worker's id back, which checks that the
 * answer reaches it). */
static void answer_callback(struct fclient *c, const char *answer, int seq)
{
    put_text(&c->out, KIPC_RESPONSE, "%s", answer);
    add_sent(c, KIPC_RESPONSE, OP_RESP, seq);
    tr("C%d answers callback %d", c->cid, seq);
}

/* A sync message for c (text s): a worker's callback for one of c's requests; c answers it, or
 * now and then first calls the gateway on the same handle, as from inside q's .z.pg, holding the
 * answer until that request's reply comes (q runs it nested, on the worker that called back; the
 * gateway runs a command of its own at once, and answers a route, or a request inside a
 * .qgate.all's callback, with an error at once). */
static void client_got_callback(struct fclient *c, const char *s)
{
    static const int nest_ops[] = {OP_ECHO, OP_BIG, OP_ERR, OP_PUSH, OP_CB, OP_GUID, OP_SLOW, OP_PING, OP_STATS, OP_UNKNOWN};
    int cid = -1, seq = -1, wid = -1;
    if (sscanf(s, "c %d %d %d", &cid, &seq, &wid) != 3 || cid != c->cid)
        fail("C%d got a sync request that is not its own: \"%s\"", c->cid, s);
    char answer[64];
    snprintf(answer, sizeof answer, "r %d %d %d", cid, seq, wid);
    struct sent *r = sent_of_seq(c, (uint64_t)seq);
    if (r && r->pre == 1) { /* answered already: the worker has read that answer */
        r->pre = 2;
        S->ahead_read++;
        tr("C%d got the callback of request %d, answered before it came", c->cid, seq);
        return;
    }
    int outstanding = 0; /* (as a q client: it waits in the request that called back, and no other) */
    for (int i = c->pend_off; i < c->pend.n; i++)
        outstanding += !c->sent.v[c->pend.v[i]].answered;
    if (c->hold_seq < 0 && r && (r->op == OP_CB || r->op == OP_ALL) && !r->answered && outstanding == 1 && !c->bad && !c->half &&
        enabled(SIM_EV_NEST) && chance(40)) {
        c->hold_seq = c->nseq;
        snprintf(c->hold, sizeof c->hold, "%s", answer);
        client_request(c, nest_ops[rnd((int)QG_ARRAY_LEN(nest_ops))]);
        tr("C%d, in callback %d, calls the gateway (request %d) before it answers", c->cid, seq, c->hold_seq);
        return;
    }
    answer_callback(c, answer, seq);
}

/* The request a reply (x, text s) answers: the oldest outstanding, unless requests sent nested
 * within it (or before) are outstanding: then one of those. A reply a worker made (its text
 * names its request, or a guid's) or the gateway made in its place (its loss, its timeout, a reply
 * refused) goes to one the gateway sent nested to the worker: the one its text names if it
 * names one, else the one its worker answered first (the worker answers them in its own order,
 * all before the request they ran within); the error of a worker lost (or timed out) in a callback
 * goes to one that went down with it, if one is outstanding (one nested on another worker since,
 * which answered it first, is not what that error answers). Any other the gateway made goes to the
 * oldest of those it answered itself (gateway commands, refusals), which it answers in order. */
static struct sent *reply_target(struct fclient *c, K x, const char *s)
{
    while (c->pend_off < c->pend.n && c->sent.v[c->pend.v[c->pend_off]].answered)
        c->pend_off++;
    if (c->pend_off == c->pend.n)
        fail("C%d got a reply with no request outstanding: \"%s\" (type %d)", c->cid, s, x->t);
    struct sent *r0 = NULL, *named = NULL, *first = NULL, *here = NULL, *down = NULL;
    for (int i = c->pend_off; i < c->pend.n && !r0; i++) {
        struct sent *y = &c->sent.v[c->pend.v[i]];
        if (!y->answered && y->nested_in < 0)
            r0 = y;
    }
    int cid = -1, seq = -1, n = 0;
    const char *t = x->t == KT_ERROR ? x->s : s;
    int parsed = sscanf(t, x->t == KT_ERROR ? "E %d %d" : "R %d %d", &cid, &seq) == 2 ||
                 (x->t == KT_LIST && x->n == 2 && kK(x)[1]->t == KT_CHAR && kK(x)[1]->n < 60 &&
                  sscanf(s, "%*[^\"]\"R %d %d", &cid, &seq) == 2);
#define HAS(p) (x->t == KT_ERROR && !strncmp(x->s, p, strlen(p)))
    int by_worker = parsed || (x->t == KT_LIST && x->n == 2 && kK(x)[0]->t == -KT_GUID) || HAS("qgate: the worker that called back") ||
                    HAS("qgate: timeout (the worker that called back") || HAS("qgate: busy: hold_max") ||
                    HAS("qgate: too large to hold whole") ||
                    HAS("qgate: reply too large") || (x->t == KT_ERROR && !strcmp(x->s, "type")); /* (a guid's,
                                    * for capability < 3: such a client asks the gateway for no table) */
    int loss = HAS("qgate: the worker that called back") || HAS("qgate: timeout (the worker that called back");
#undef HAS
    for (int i = c->pend_off; i < c->pend.n; i++) {
        struct sent *y = &c->sent.v[c->pend.v[i]];
        if (y->answered || y->nested_in < 0 || (r0 && y->nested_in > r0->seq))
            continue;
        n++;
        if (y->here) {
            here = here ? here : y;
            continue;
        }
        if (!first || (y->emitted && (!first->emitted || y->emitted < first->emitted)))
            first = y;
        if (y->lost && !down)
            down = y;
        if (parsed && y->seq == seq)
            named = y;
    }
    if (!n)
        return r0;
    if (parsed && !named)
        fail("C%d got \"%s\" before the replies of the %d request(s) it sent nested within it", c->cid, s, n);
    if (named)
        return named;
    if (loss && down) /* (a loss went to a request another worker had answered: seed 217) */
        return down;
    return (by_worker && first) || !here ? first : here;
}

/* The reply x to c's .qgate.all r: "R cid seq" from each worker (one at least), razed into one
 * string or (`list) in a list. */
static void check_all_reply(const struct fclient *c, const struct sent *r, K x, const char *want)
{
    size_t wl = strlen(want);
    if (r->arg == 2) {
        if (x->t != KT_LIST || x->n < 1)
            fail("C%d: .qgate.all %d with `list wanted a list of replies, got type %d", c->cid, r->seq, x->t);
        for (int64_t i = 0; i < x->n; i++) {
            K y = kK(x)[i];
            if (y->t != KT_CHAR || (size_t)y->n != wl || memcmp(kC(y), want, wl))
                fail("C%d: .qgate.all %d: item %lld is not \"%s\"", c->cid, r->seq, (long long)i, want);
        }
    } else {
        if (x->t != KT_CHAR || x->n < 1 || (size_t)x->n % wl)
            fail("C%d: .qgate.all %d wanted \"%s\" razed, got type %d", c->cid, r->seq, want, x->t);
        for (int64_t i = 0; i < x->n; i += (int64_t)wl)
            if (memcmp(kC(x) + i, want, wl))
                fail("C%d: .qgate.all %d: \"%s\" razed, not at %lld", c->cid, r->seq, want, (long long)i);
    }
}

/* The reply x (text s) to c's request r, not a gateway error: what its op asks the worker or the
 * gateway to answer ("R cid seq", its error, a guid, 1b, a table...). */
static void check_reply(const struct fclient *c, const struct sent *r, K x, const char *s)
{
    const char *op = op_names[r->op];
    char want[64];
    snprintf(want, sizeof want, "R %d %d", c->cid, r->seq);
    size_t wl = strlen(want);
    switch (r->op) {
    case OP_ERR: {
        char e[64];
        snprintf(e, sizeof e, "E %d %d", c->cid, r->seq);
        if (x->t != KT_ERROR || strcmp(x->s, e))
            fail("C%d: request %d wanted '%s, got \"%s\"", c->cid, r->seq, e, x->t == KT_ERROR ? x->s : s);
        return;
    }
    case OP_GUID:
        if (c->cap < 3) {
            if (x->t != KT_ERROR || strcmp(x->s, "type"))
                fail("C%d (capability %d): request %d wanted 'type for a guid", c->cid, c->cap, r->seq);
            return;
        }
        if (x->t != KT_LIST || x->n != 2 || kK(x)[0]->t != -KT_GUID || kK(x)[1]->t != KT_CHAR ||
            (size_t)kK(x)[1]->n != wl || memcmp(kC(kK(x)[1]), want, wl))
            fail("C%d: request %d wanted (guid; \"%s\")", c->cid, r->seq, want);
        return;
    case OP_PING:
    case OP_DISCONNECT:
    case OP_RELOADCMD:
        if (x->t == KT_ERROR || (x->t == -KT_BOOL && x->g == 1))
            return;
        fail("C%d: %s wanted 1b", c->cid, op);
    case OP_STATS:
    case OP_CLIENTS:
    case OP_POOLS:
        if (x->t != KT_TABLE && x->t != KT_ERROR)
            fail("C%d: %s wanted a table, got type %d", c->cid, op, x->t);
        return;
    case OP_UNKNOWN:
    case OP_BIGCMD:
        if (x->t != KT_ERROR)
            fail("C%d: %s wanted an error, got type %d", c->cid, op, x->t);
        return;
    case OP_ALL: /* k >= 1 replies "R cid seq": merged (one string), or their list */
        check_all_reply(c, r, x, want);
        return;
    case OP_BADBODY:
    case OP_BADHDR:
        fail("C%d: a malformed message got an answer other than 'qgate: badmsg", c->cid);
    default:
        if (x->t == KT_ERROR)
            fail("C%d: request %s %d got '%s", c->cid, op, r->seq, x->s);
        if (r->pre == 1 && c->cap >= 3) /* its worker ran it, called back and was answered: the callback
                          * is shown first, even when the answer sent ahead is malformed, or a bad message
                          * comes after it (at fdf37cf it was not; a callback with a guid, which a client
                          * of capability 1 cannot take, is answered 'type by the gateway) */
            fail("C%d: request %s %d, its answer sent ahead, got its reply but never its callback", c->cid, op, r->seq);
        if (x->t != KT_CHAR || (size_t)x->n < wl || memcmp(kC(x), want, wl) ||
            ((size_t)x->n > wl && kC(x)[wl] != ' '))
            fail("C%d: request %s %d wanted \"%s...\", got \"%s\"", c->cid, op, r->seq, want, s);
        if (r->op == OP_BIG && (size_t)x->n != wl + 1 + (size_t)r->arg)
            fail("C%d: big reply of %lld bytes, wanted %zu", c->cid, (long long)x->n, wl + 1 + (size_t)r->arg);
        return;
    }
}

/* A message for client c arrived: it must be for c, in order. */
static void client_got(struct fclient *c, int type, K x, int compressed)
{
    char s[256];
    if (type != KIPC_RESPONSE && x->t == KT_LIST && x->n == 2 && kK(x)[0]->t == -KT_GUID) { /* a push or
                                                         * callback that carries a guid */
        if (c->cap < 3)
            fail("C%d (capability %d) got a %s carrying a guid", c->cid, c->cap, type == KIPC_ASYNC ? "push" : "callback");
        x = kK(x)[1];
    }
    text_of(x, s, sizeof s);
    if (compressed && (c->cap < 1 || (c->local && S->g.cfg.hold_max >= (1 << 30) && S->g.cfg.compress_max >= (1 << 20))))
        /* (past hold_max, or over compress_max once decompressed: as the worker sent it) */
        fail("C%d (%s, capability %d) got a compressed message (type %d: \"%.40s\")", c->cid, c->local ? "local" : "remote",
             c->cap, type, s);
    if (type == KIPC_ASYNC) {
        client_got_async(c, s);
        return;
    }
    if (type == KIPC_SYNC) {
        client_got_callback(c, s);
        return;
    }
    struct sent *r = reply_target(c, x, s);
    r->answered = 1;
    while (c->pend_off < c->pend.n && c->sent.v[c->pend.v[c->pend_off]].answered)
        c->pend_off++; /* (outstanding: from pend_off on) */
    if (r->seq == c->hold_seq) { /* the call it made from inside a callback is answered: so is that */
        ptrdiff_t at = r - c->sent.v;
        c->hold_seq = -1;
        int cbseq = -1;
        sscanf(c->hold, "r %*d %d", &cbseq);
        answer_callback(c, c->hold, cbseq);
        r = &c->sent.v[at]; /* (c->sent may have moved) */
    }
    const char *op = op_names[r->op];
    tr("C%d got the reply to %s %d: %s%s", c->cid, op, r->seq, x->t == KT_ERROR ? "'" : "",
       x->t == KT_ERROR ? x->s : (s[0] ? s : "(value)"));
    if (x->t == KT_ERROR && (!strncmp(x->s, "qgate: timeout (", 16) || !strncmp(x->s, "qgate: worker ", 14) ||
                             !strncmp(x->s, "qgate: the worker that called back", 34)))
        r->abandoned = 1; /* the worker may still run it */

    if (r->op >= OP_PAUSE && r->op <= OP_ENABLE) {
        control_got(c, r, x);
        return;
    }
    if (x->t == KT_ERROR && !strncmp(x->s, "qgate: ", 7)) {
        const char *why = gw_error_unjustified(c, r, x->s);
        if (why)
            fail("C%d got '%s for its %s request %d: nothing in the world justifies it (%s)", c->cid, x->s, op,
                 r->seq, why);
        return;
    }
    check_reply(c, r, x, s);
}

static void client_gone(struct fclient *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->st = FC_DONE;
}

/* The gateway closed c: only for a reason a client can be told about. */
static void client_eof(struct fclient *c)
{
    c->gw_closed = 1;
    const char *why = c->why;
    tr("C%d: closed by the gateway (%s)%s", c->cid, why[0] ? why : "?", c->in.len ? " in the middle of a message" : "");
    int ok = 0;
    if (c->http) { /* its 501 whole, then the close (or the close of a client that never read it) */
        static const char want[] = "HTTP/1.1 501 Not Implemented\r\n", body[] = "\r\n\r\nqgate: this port serves kdb+ IPC";
        if ((!strcmp(why, "closed after an HTTP request") || !why[0]) &&
            (c->in.len < sizeof want - 1 || memcmp(c->in.p, want, sizeof want - 1) ||
             !memmem(c->in.p, c->in.len, body, sizeof body - 1)))
            fail("C%d sent an HTTP request and got %zu bytes: \"%.*s\"", c->cid, c->in.len, (int)QG_MIN(c->in.len, 40u),
                 (const char *)c->in.p);
        if (!strcmp(why, "closed after an HTTP request") || !why[0])
            S->http_501++;
        ok = !strcmp(why, "closed after an HTTP request") || !strcmp(why, "handshake timeout") || !why[0];
    } else if (!c->accept || c->longhs)
        ok = !strcmp(why, "bad credentials ('access)") || !strcmp(why, "handshake too long") ||
             !strcmp(why, "handshake timeout");
    if (!strncmp(why, "handshake timeout", 17) || !strncmp(why, "over max_conns", 14) ||
        !strncmp(why, "disconnected by admin", 21) || !strncmp(why, "stalled", 7))
        ok = 1;
    if (c->bad && (!strcmp(why, "closed after a bad message") || !why[0]))
        ok = 1; /* after 'qgate: badmsg the gateway shuts its side first (linger) */
    if (c->half && !strcmp(why, "client closed the connection")) { /* we shut our side first */
        int lost = S->ever_session && (S->wdeaths || S->g.query_timeouts); /* its session's worker lost: told
                                                                        * once, the rest given up */
        if (c->pend_off < c->pend.n && !c->bad && !lost)
            fail("C%d shut its side and was closed with %d replies still owed", c->cid, c->pend.n - c->pend_off);
        S->half_answered += c->pend_off == c->pend.n;
        ok = 1;
    }
    if (c->half && S->g.query_timeouts &&
        !strncmp(why, "its async messages timed out at the worker after it had left", 60)) {
        if (c->pend_off < c->pend.n) /* (only one owed no reply is closed so) */
            fail("C%d was closed for its async messages' timeout with %d replies owed", c->cid,
                 c->pend.n - c->pend_off);
        for (int i = 0; i < (int)c->sent.n; i++) /* what it sent after them is dropped: never runs */
            if (c->sent.v[i].type == KIPC_ASYNC && !c->sent.v[i].seen)
                c->sent.v[i].lost = 1;
        ok = 1;
    }
    if ((!strcmp(why, "worker lost in the middle of the reply") ||
         !strcmp(why, "worker lost in the middle of a message to it")) &&
        (S->wdeaths || S->g.query_timeouts))
        ok = 1; /* a worker died, or was dropped for a query timeout, while it sent */
    if (S->ever_session && (S->wdeaths || S->g.query_timeouts) &&
        (!strcmp(why, "its session's worker was lost") || !strcmp(why, "its session's worker was lost: closed once told") ||
         !strcmp(why, "closed after a bad message") || !why[0]))
        ok = 1; /* its session's worker died: told (then the gateway shuts its side), or just closed */
    if (!ok)
        fail("C%d was closed by the gateway without a reason it may have: \"%s\"", c->cid, why);
    client_gone(c);
}

void client_read(struct fclient *c, size_t want)
{
    if (c->fd < 0 || c->st == FC_DONE)
        return;
    sb_reserve(&c->in, c->in.len + want);
    ssize_t n = read(c->fd, c->in.p + c->in.len, want);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        client_eof(c);
        return;
    }
    if (n < 0)
        return;
    c->in.len += (size_t)n;
    c->got_bytes += (int)n;
    S->moved += (size_t)n;
    if (c->st == FC_HS && c->http) { /* its 501, read until the close */
        if (c->in.len >= 5 && memcmp(c->in.p, "HTTP/", 5))
            fail("C%d sent an HTTP request and got \"%.*s\"", c->cid, (int)QG_MIN(c->in.len, 40u), (const char *)c->in.p);
        return;
    }
    if (c->st == FC_HS) {
        if (!c->accept)
            fail("C%d with bad credentials (or a bad handshake) got a byte", c->cid);
        c->cap = c->in.p[0];
        int want_cap = c->cap_req < 3 ? c->cap_req : 3;
        if (c->cap != want_cap)
            fail("C%d asked for capability %d and got %d", c->cid, c->cap_req, c->cap);
        sb_drop(&c->in, 1);
        c->st = FC_READY;
        tr("C%d: capability %d", c->cid, c->cap);
    }
    for (;;) {
        int type, comp;
        K x;
        const char *why = "";
        int r = take_msg(&c->in, &type, &x, &comp, &why);
        if (r == 0)
            break;
        if (r < 0)
            fail("C%d cannot read what the gateway sent: %s", c->cid, why);
        client_got(c, type, x, comp);
        k_free(x);
    }
}

void client_write(struct fclient *c, size_t want)
{
    if (c->fd < 0 || c->out_off == c->out.len)
        return;
    sb_send(c->fd, &c->out, &c->out_off, &c->out_base, want);
}

/* A half-close: everything written, c shuts its side and reads on; q answers all it read. */
void client_shut(struct fclient *c)
{
    if (c->fd < 0 || c->st != FC_READY || c->half || c->out_off < c->out.len)
        return;
    tr("C%d shuts its side (%d replies owed)", c->cid, c->pend.n - c->pend_off);
    if (shutdown(c->fd, SHUT_WR))
        fail("C%d: shutdown: %s", c->cid, strerror(errno));
    c->half = 1;
    S->half_closes++;
}

void client_close(struct fclient *c)
{
    tr("C%d closes (%zu bytes unsent)", c->cid, c->out.len - c->out_off);
    c->we_closed = 1;
    client_gone(c);
}


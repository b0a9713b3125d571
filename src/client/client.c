/* client.c: a q client's connection: accept (and EMFILE), q's handshake and credentials,
 * reading, leaving (what it sent still runs), the output bound (client_stall_timeout),
 * teardown, and the users' limits. Its requests are request.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "query.h"
#include "stream.h"
#include "auth.h"
#include "gw.h"
#include "jobs.h"
#include "kipc.h"
#include "log.h"
#include "net.h"
#include "stats.h"
#include "tail.h"

/* What is read from a client whose input ended, to run what it sent before it left. */
#define GONE_DRAIN_MAX ((size_t)64 << 20)

#define ST_NAME(e) #e,
static const char *const state_names[] = {CLIENT_STATES(ST_NAME)};
#undef ST_NAME

const char *client_state_name(int st) { return st >= 0 && st <= CS_CLOSING ? state_names[st] : "?"; }

/* The transitions client.h's diagram allows (CLOSING is the connection's close, not set here). */
#define TO(s) (1u << CS_##s)
static const unsigned allowed[] = {
    [CS_HANDSHAKE] = TO(READY) | TO(AUTH) | TO(LINGER),
    [CS_AUTH] = TO(READY) | TO(GONE),
    [CS_READY] = TO(GONE) | TO(FLUSHING) | TO(LINGER),
    [CS_FLUSHING] = TO(GONE) | TO(LINGER),
    [CS_LINGER] = 0,
    [CS_GONE] = 0,
    [CS_CLOSING] = 0,
};
#undef TO

void client_set_state_loop(struct gw *g, struct client *c, enum client_state st)
{
    if ((allowed[c->st] >> st) & 1) {
        log_debug(c->c.name, "state %s -> %s", client_state_name(c->st), client_state_name(st));
    } else {
        g->bad_transitions++;
        log_error(c->c.name, "state %s -> %s is not in client.c's table", client_state_name(c->st),
                  client_state_name(st));
    }
    int was_ready = c->st == CS_READY;
    c->st = (uint8_t)st;
    if (was_ready && st != CS_READY) /* it answers no callback now: a .qgate.all's part whose callback */
        conn_wake_loop(g, &c->c);     /* waited for an answer it owed goes on (fanout_call_out) */
}

static void update_name(struct client *c)
{
    snprintf(c->c.name, sizeof c->c.name, "c%llu %s%s%s", (unsigned long long)c->serial, c->peer,
             c->user[0] ? " " : "", c->user);
}

static void on_handshake_timeout(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    if (c->refuse) { /* over max_clients, and it sent nothing to be told */
        conn_close_loop(g, &c->c, "over max_clients");
        return;
    }
    conn_refused_loop(g, REFUSED_HANDSHAKE, c->c.name, "handshake not done within %lld ms",
                      (long long)g->cfg.handshake_timeout);
    conn_close_loop(g, &c->c, "handshake timeout");
}

/* ---- accept ------------------------------------------------------------------------------- */

/* Clients over max_clients are kept to be told why after their handshake: the last
 * QG_ARRAY_LEN(g->refusing) of them. A new one takes the place of the oldest, which is closed
 * untold (before, the 65th and later were closed at once without a byte, which q reports as
 * 'access, and 64 connections that sent nothing kept it so for every newcomer: helper round 15). */
static void refusing_add(struct gw *g, struct client *c)
{
    unsigned slot = g->refusing_next++ % QG_ARRAY_LEN(g->refusing);
    struct conn *old = conn_lookup_loop(g, g->refusing[slot].id, g->refusing[slot].gen);
    if (old && old->kind == CONN_CLIENT && client_of(old)->refuse && !old->closing)
        conn_close_loop(g, old, "over max_clients: gave way to a newer connection, untold");
    g->refusing[slot].id = c->c.id;
    g->refusing[slot].gen = c->c.gen;
    c->refuse = 1; /* told why after its handshake */
    g->nrefusing++;
}

static void on_listener(struct gw *g, struct evsrc *s, uint32_t ev)
{
    (void)ev;
    struct listener *l = (struct listener *)s;
    for (int i = 0; i < 64; i++) {
        int fd = conn_accept_loop(g, l, REFUSED_NO_FDS, &g->lim.accept, "accept", NULL);
        if (fd < 0)
            return;
        if (g->draining) {
            conn_refused_loop(g, REFUSED_DRAINING, NULL, "refusing a connection: draining");
            close(fd);
            continue;
        }
        int over = g->nclients + g->ntails - g->nrefusing >= g->cfg.max_clients; /* (a cut client's socket,
                                                                                    * its last output written:
                                                                                    * tail.h) */
        if (over)
            conn_refused_loop(g, REFUSED_TOO_MANY, NULL, "refusing a connection: max_clients (%d) reached",
                              g->cfg.max_clients);
        if (!l->is_uds) {
            net_tune(fd);
            conn_keepalive_loop(g, fd, NULL);
        }
        struct client *c = client_adopt_loop(g, fd, l->is_uds, l->is_uds || net_peer_is_local(fd));
        if (c && over)
            refusing_add(g, c);
        g->accepted++;
    }
}

const struct evops client_listener_ops = {.on_event = on_listener};

struct client *client_adopt_loop(struct gw *g, int fd, int is_uds, int local)
{
    struct client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->c.fd = -1;
    c->local = (uint8_t)local;
    TAILQ_INIT(&c->reqs);
    TAILQ_INIT(&c->nested);
    STAILQ_INIT(&c->calls);
    STAILQ_INIT(&c->unasked);
    if (conn_register_loop(g, &c->c, &client_connops, CONN_CLIENT, fd, EPOLLIN | EPOLLRDHUP)) {
        close(fd);
        free(c);
        return NULL;
    }
    c->serial = ++g->next_serial;
    c->connected_ms = g->loop.now_ms;
    g->nclients++;
    c->from_uds = (uint8_t)is_uds;
    socklen_t fl = sizeof c->from;
    if (is_uds || getpeername(fd, (struct sockaddr *)&c->from, &fl))
        c->from.ss_family = AF_UNIX;
    net_addr_name((struct sockaddr *)&c->from, c->peer, sizeof c->peer);
    c->proxied = g->cfg.proxy_from[0] && net_addr_listed(g->cfg.proxy_from, (struct sockaddr *)&c->from, fl, is_uds);
    update_name(c);
    log_debug(c->c.name, "connected");
    conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, g->loop.now_ms + g->cfg.handshake_timeout, on_handshake_timeout);
    return c;
}

/* ---- handshake and credentials ------------------------------------------------------------- */

/* Accept the client: the capability byte, its group, and on to requests. */
static void finish_handshake(struct gw *g, struct client *c)
{
    if (c->c.fd >= 0 && outq_copy(&c->c.out, &c->cap, 1)) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    conn_mark_owed(&c->c); /* (a drain writes it before the close) */
    conn_mark_dirty_loop(g, &c->c);
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STATE);
    c->grp = dispatch_route_loop(g, c->us ? c->us->name : c->user);
    c->c.framed = 1; /* kdb+ messages from now on */
    client_set_state_loop(g, c, c->eof ? CS_GONE : CS_READY);
    g->handshakes++;
    log_debug(c->c.name, "handshake: capability %d, group %s", c->cap, c->grp->cfg.name);
}

/* Hashing is not the loop's work: a reader checks the credentials; the client waits in AUTH. */
/* A reader checks credentials "user[:password]" (clen bytes) against the users file in force
 * now; the client waits in AUTH. 0, or -1 (closed: out of memory). */
static int submit_check(struct gw *g, struct client *c, const uint8_t *cred, size_t clen)
{
    struct job *j = job_new(job_check_credentials, JK_AUTH);
    if (!j || !(j->in = malloc(clen ? clen : 1))) {
        job_free(j);
        conn_close_loop(g, &c->c, "out of memory");
        return -1;
    }
    memcpy(j->in, cred, clen);
    j->in_len = clen;
    j->ctx = auth_ref(g->auth);
    j->ctx_free = auth_unref;
    conn_submit_loop(g->readers, j, &c->c, 0);
    return 0;
}

static int check_credentials(struct gw *g, struct client *c, const struct kipc_hs *hs)
{
    size_t clen = hs->pass_len ? hs->user_len + 1 + hs->pass_len : hs->user_len;
    if (submit_check(g, c, inbuf_data(&c->c.in), clen))
        return -1;
    inbuf_consume(&c->c.in, hs->len);
    client_set_state_loop(g, c, CS_AUTH);
    conn_set_reading_loop(g, &c->c, 0);
    return 0;
}

/* An HTTP request where a handshake belongs? q reads one (GET, POST and the rest) and hands it to
 * .z.ph, .z.pp or, for a WebSocket upgrade, .z.ws. No q handshake starts so: its bytes before the
 * NUL would be a user name "GET /...", which q too would take for HTTP. */
static const char *http_method(const uint8_t *p, size_t n)
{
    static const char *const methods[] = {"GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "PATCH "};
    for (size_t i = 0; i < QG_ARRAY_LEN(methods); i++) {
        size_t m = strlen(methods[i]);
        if (n >= m && !memcmp(p, methods[i], m))
            return methods[i];
    }
    return NULL;
}

/* The gateway serves q's IPC on this port, not HTTP: the client is told so in HTTP (a browser, a
 * WebSocket library or curl shows it), nothing more is read, and it is closed once that is sent
 * (on_flushed: LINGER, so the answer is not lost to a reset). */
static void refuse_http(struct gw *g, struct client *c, const char *method)
{
    static const char body[] = "qgate: this port serves kdb+ IPC (q's handshake, then q messages), not HTTP or "
                               "WebSocket; Prometheus metrics are on metrics_port\n";
    char text[512];
    int head = !strcmp(method, "HEAD ");
    int n = snprintf(text, sizeof text,
                     "HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     sizeof body - 1, head ? "" : body);
    conn_refused_loop(g, REFUSED_HANDSHAKE, c->c.name, "an HTTP request (%.*s) on the q port: answered 501, closed",
                      (int)strlen(method) - 1, method);
    c->http = 1;
    conn_set_reading_loop(g, &c->c, 0);
    stream_input_drop_loop(&c->c);
    if (outq_copy(&c->c.out, text, (size_t)n)) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    conn_mark_owed(&c->c);
    conn_mark_dirty_loop(g, &c->c);
}

static int do_handshake(struct gw *g, struct client *c)
{
    struct kipc_hs hs;
    const char *method = http_method(inbuf_data(&c->c.in), inbuf_avail(&c->c.in));
    if (method) {
        refuse_http(g, c, method);
        return -1;
    }
    qg_status st = kipc_hs_parse(inbuf_data(&c->c.in), inbuf_avail(&c->c.in), KIPC_HS_MAX_DEFAULT, &hs);
    if (st == QG_AGAIN)
        return 0;
    if (st != QG_OK) {
        conn_refused_loop(g, REFUSED_HANDSHAKE, c->c.name, "handshake longer than %d bytes", KIPC_HS_MAX_DEFAULT);
        conn_close_loop(g, &c->c, "handshake too long");
        return -1;
    }
    snprintf(c->user, sizeof c->user, "%.*s", (int)QG_MIN(hs.user_len, sizeof c->user - 1), hs.user); /* as
        * sent: the log makes its lines printable, the access log escapes its values (before, any byte
        * outside printable ASCII was '?' here, and user=a?b logged two different names alike) */
    update_name(c);
    c->cap = kipc_cap_negotiate(hs.cap, KIPC_CAP_MAX);
    if (c->refuse) { /* over max_clients: its credentials do not matter; its first request is told */
        inbuf_consume(&c->c.in, hs.len);
        finish_handshake(g, c);
        if (!c->c.closing) /* one that sends nothing goes as a slow handshake would */
            conn_timer_arm_loop(g, &c->c, CLIENT_TM_STATE, g->loop.now_ms + g->cfg.handshake_timeout,
                                on_handshake_timeout);
        return 0;
    }
    if (g->auth)
        return check_credentials(g, c, &hs);
    inbuf_consume(&c->c.in, hs.len); /* any credentials are accepted until a users file is set */
    finish_handshake(g, c);
    return 0;
}

static struct ustate *user_state(struct gw *g, const char *name)
{
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link)
        if (!strcmp(u->name, name))
            return u;
    if (!(u = calloc(1, sizeof *u)))
        return NULL;
    snprintf(u->name, sizeof u->name, "%.*s", (int)sizeof u->name - 1, name); /* names fit (AUTH_NAME_MAX) */
    SLIST_INSERT_HEAD(&g->users, u, link);
    return u;
}

void client_users_free(struct gw *g)
{
    while (!SLIST_EMPTY(&g->users)) {
        struct ustate *u = SLIST_FIRST(&g->users);
        SLIST_REMOVE_HEAD(&g->users, link);
        free(u);
    }
}

void client_auth_done_loop(struct gw *g, struct job *j)
{
    struct conn *x = conn_lookup_loop(g, j->conn_id, j->conn_gen);
    struct client *c = x && x->kind == CONN_CLIENT ? client_of(x) : NULL;
    if (!c || c->st != CS_AUTH)
        return;
    if (j->ctx != g->auth) { /* a reload changed the users file meanwhile: the check is made again,
                              * against the file in force (its entry, flags and limits) */
        log_debug(c->c.name, "credentials checked against a users file since replaced: checked again");
        submit_check(g, c, j->in, j->in_len);
        return;
    }
    if (!j->result) {
        conn_refused_loop(g, REFUSED_ACCESS, c->c.name, "access denied: user '%s' from %s", c->user, c->peer);
        conn_close_loop(g, &c->c, "bad credentials ('access)");
        return;
    }
    struct ustate *u = user_state(g, j->text); /* the entry's exact name, not the printable one */
    if (!u) {
        conn_close_loop(g, &c->c, "out of memory");
        return;
    }
    const struct job_auth *a = &job_args(j)->auth; /* the users file as loaded now */
    u->admin = (uint8_t)a->admin;
    u->monitor = (uint8_t)a->monitor;
    u->max_conns = a->max_conns;
    u->max_inflight = a->max_inflight;
    if (u->max_conns > 0 && u->conns >= u->max_conns) {
        conn_refused_loop(g, REFUSED_ACCESS, c->c.name, "user '%s' already has %d connections (max_conns): refused",
                          c->user, u->conns);
        conn_close_loop(g, &c->c, "over max_conns ('access)");
        return;
    }
    u->conns++;
    c->us = u;
    finish_handshake(g, c);
    if (c->c.closing)
        return;
    if (!c->eof)
        conn_set_reading_loop(g, &c->c, 1);
    stream_frame_loop(g, &c->c); /* what it sent after its handshake */
}

void client_users_reloaded_loop(struct gw *g)
{
    const struct auth_db *db = g->auth ? auth_db_of(g->auth) : NULL;
    struct ustate *u;
    SLIST_FOREACH(u, &g->users, link) {
        const struct auth_user *e = db ? auth_find(db, u->name, strlen(u->name)) : NULL;
        if (u->admin && !(e && e->admin))
            log_info(NULL, "reload: user %s is no longer an admin", u->name);
        else if (!u->admin && e && e->admin) /* (its connections' commands from now on: helper round 40c) */
            log_info(NULL, "reload: user %s is an admin now", u->name);
        if (db && !e) { /* gone from the file: its connections stay (new ones are refused), as they
                         * were but for admin rights; its limits kept (at 3929a8f they were lifted,
                         * and nothing said so: helper round 21) */
            if (u->conns)
                log_warn(NULL, "reload: user %s is no longer in the users file: its %d connection%s stay%s until "
                         "closed (.qgate.kill[id] ends one), its limits as they were; new ones are refused",
                         u->name, u->conns, u->conns == 1 ? "" : "s", u->conns == 1 ? "s" : "");
            u->admin = 0;
            continue;
        }
        u->admin = e ? e->admin : 0;
        u->monitor = e ? e->monitor : 0;
        u->max_conns = e ? e->max_conns : 0;
        u->max_inflight = e ? e->max_inflight : 0;
    }
    /* what its users sent and has not run yet: admin rights lost are lost for it too (gained,
     * they apply to what comes from now on; a new monitor's requests sent before run, as it
     * sent them) (helper round 35c: at 041cc8a an admin command queued behind a long query ran
     * as admin after the reload took the right away) */
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        struct client *c = x && x->kind == CONN_CLIENT ? client_of(x) : NULL;
        struct req *r;
        if (!c || !c->us)
            continue;
        TAILQ_FOREACH(r, &c->reqs, link)
            r->admin &= c->us->admin;
    }
}

void client_exit_answers_loop(struct gw *g, const char *why)
{
    int n = 0;
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT || x->closing)
            continue;
        n += client_head(client_of(x)) != NULL;
        request_exit_answers_loop(g, client_of(x), why);
    }
    if (n)
        log_warn(NULL, "exiting (%s): %d clients told 'qgate: exiting for the requests they still had", why, n);
}

void client_regroup_loop(struct gw *g, struct client *c)
{
    if (c->c.closing || !c->grp) /* (still in its handshake: routed when it ends, by the file in force then) */
        return;
    struct group *to = dispatch_route_loop(g, c->us ? c->us->name : c->user);
    if (to == c->grp)
        return;
    if (c->sess) { /* its session's state is on its worker: it stays there until it ends */
        log_warn(c->c.name, "reload: user %s's session stays on group %s until it ends (the file now sends it to %s)",
                 c->us ? c->us->name : c->user, c->grp->cfg.name, to->cfg.name);
        return;
    }
    log_info(c->c.name, "reload: group %s from now on (was %s)", to->cfg.name, c->grp->cfg.name);
    c->grp = to; /* what it sent before runs where it was sent */
}

void client_groups_reloaded_loop(struct gw *g)
{
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_CLIENT)
            client_regroup_loop(g, client_of(x));
    }
}

/* ---- reading, and leaving ------------------------------------------------------------------- */

/* Its output goes nowhere now: the socket goes, and what was for it is drained. */
static void output_gone(struct gw *g, struct client *c)
{
    c->half = 0;
    conn_timer_cancel_loop(g, &c->c, CLIENT_TM_STALL);
    if (c->w)
        g->back->client_gone(g, c->w, c); /* its reply is drained */
    if (c->sess && c->sess != c->w)
        g->back->client_gone(g, c->sess, c); /* and what its session's worker publishes to it */
    conn_drop_socket_loop(g, &c->c); /* the workers waiting for its output go on */
}

/* The client's input ended: it has left. What it sent before still runs, in order: q runs
 * every message it read before it sees the close. After a FIN (fin) the socket stays for the
 * replies, as a client that shut only its side still reads them from q; after a reset or a
 * failed write (or a FIN, then a failed write) it goes, and the replies are dropped. The
 * client goes when its last request has run. */
void client_peer_gone_loop(struct gw *g, struct client *c, int fin, const char *why)
{
    if (c->c.closing)
        return;
    if (c->eof) {
        if (c->half && !fin) { /* it shut its side, then went: nothing more reaches it */
            log_debug(c->c.name, "output ended too (%s): its replies dropped", why);
            output_gone(g, c);
            request_advance_loop(g, c); /* a head held back by its output goes on (then it may close) */
        }
        return;
    }
    if (c->st == CS_HANDSHAKE || c->st == CS_LINGER) {
        conn_close_loop(g, &c->c, why);
        return;
    }
    if (c->c.fd >= 0 && (c->st == CS_READY || c->st == CS_AUTH)) /* what it sent before the close: all of it */
        stream_read_rest_loop(g, &c->c, GONE_DRAIN_MAX);
    log_debug(c->c.name, "input ended (%s): %s (%zu bytes unread)", why,
              client_head(c) || inbuf_avail(&c->c.in) ? "its requests still run" : "nothing held",
              inbuf_avail(&c->c.in));
    c->eof = 1;
    c->paused = 0;
    if (fin && c->c.fd >= 0) { /* reading no more; writing on (the stall clock too) */
        c->half = 1;
        conn_set_reading_loop(g, &c->c, 0);
    } else {
        output_gone(g, c);
    }
    if (c->st == CS_AUTH) /* the credentials check returns first */
        return;
    client_set_state_loop(g, c, CS_GONE);
    stream_frame_loop(g, &c->c); /* what it sent before it left runs */
    if (!c->c.closing) /* its output went with the socket: a head held back by it goes on (framing */
        request_advance_loop(g, c); /* stops short of that when its requests fill client_max_pending) */
    if (!c->c.closing) /* a worker waiting on a callback gets an error, unless an answer it sent came
                        * before the close (framed first; at 83f6b20 one held while a message it sent
                        * nested ran was dropped: helper round 31c) */
        callback_gone_calls_loop(g, c);
}

static void on_gone(struct gw *g, struct conn *x, const char *why) { client_peer_gone_loop(g, client_of(x), 0, why); }

/* ---- what the stream hands it ------------------------------------------------------------ */

/* A PROXY header where one belongs (its source is in proxy_from: the client's address taken from
 * it), or where none may be (any other source): 1 to go on to the handshake, 0 to wait for
 * more, -1 if the client was refused (closed). */
static int proxy_header(struct gw *g, struct client *c)
{
    const uint8_t *p = inbuf_data(&c->c.in);
    size_t n = inbuf_avail(&c->c.in);
    if (!c->proxied) { /* a header from a source not listed: it would claim an address it may not */
        if (!net_proxy_looks(p, n))
            return 1; /* its handshake */
        if (n < (p[0] == 'P' ? 6u : 12u))
            return 0; /* the start of one, so far (v2's has a NUL at byte 5, where a handshake would end) */
        conn_refused_loop(g, REFUSED_PROXY, c->c.name, "a PROXY header from %s, which proxy_from does not list: closed",
                          c->peer);
        conn_close_loop(g, &c->c, "a PROXY header from a source not in proxy_from");
        return -1;
    }
    struct net_proxy px;
    const char *why = "";
    int used = net_proxy_parse(p, n, &px, &why);
    if (used == 0)
        return 0;
    if (used < 0) {
        conn_refused_loop(g, REFUSED_PROXY, c->c.name, "from %s (proxy_from): %s: closed", c->peer, why);
        conn_close_loop(g, &c->c, "no PROXY header from a source in proxy_from");
        return -1;
    }
    inbuf_consume(&c->c.in, (size_t)used);
    c->proxied = 0;
    if (px.local) /* the balancer's own connection (its health check): its address stands */
        return 1;
    char was[64];
    snprintf(was, sizeof was, "%s", c->peer);
    c->from = px.src;
    c->from_uds = 0; /* (a balancer on q's Unix socket: admin_from judges the client's address) */
    net_addr_name((struct sockaddr *)&c->from, c->peer, sizeof c->peer);
    c->local = (uint8_t)net_addr_is_loopback((struct sockaddr *)&c->from); /* compressed for it as for a remote peer */
    update_name(c);
    log_debug(c->c.name, "PROXY header from %s: the client is %s", was, c->peer);
    return 1;
}

/* Raw input: a PROXY header (proxy_from), then its handshake. */
static int on_bytes(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    if (c->st != CS_HANDSHAKE || c->http)
        return SS_STOP;
    int px = proxy_header(g, c);
    if (px <= 0)
        return px == 0 ? SS_OK : SS_STOP;
    if (do_handshake(g, c))
        return SS_STOP;
    return c->st == CS_HANDSHAKE || c->st == CS_READY ? SS_OK : SS_STOP; /* AUTH: a reader checks first */
}

static int on_eof(struct gw *g, struct conn *x, int fin, const char *why)
{
    client_peer_gone_loop(g, client_of(x), fin, why);
    return SS_STOP;
}

static int on_bad(struct gw *g, struct conn *x, const char *why)
{
    struct client *c = client_of(x);
    if (c->bad_ahead) { /* behind a malformed answer it sent ahead: never read, as what is framed
                         * there is dropped (at 4f50da8 its badmsg came too, and first: helper round
                         * 30a); what came before it goes on */
        request_framed_loop(g, x);
        return SS_STOP;
    }
    request_bad_message_loop(g, c, why, -1, NEW_SEQ); /* (its header bad: its type not known) */
    return SS_STOP;
}

static int takes_output(const struct conn *x) { return client_takes_output((const struct client *)x); }

/* Why a lingering client is closed: after a bad message, an HTTP request or its session's worker's
 * loss, or at the end of a drain. */
static const char *linger_why(const struct client *c)
{
    return c->bye         ? "drained: closed"
           : c->refuse    ? "over max_clients"
           : c->http      ? "closed after an HTTP request"
           : c->sess_lost ? "its session's worker was lost: closed once told"
                          : "closed after a bad message";
}

static void on_linger_timeout(struct gw *g, struct conn *x) { conn_close_loop(g, x, linger_why(client_of(x))); }

/* Everything owed was sent after a bad message: shut our side, drain theirs, then close. */
static void linger(struct gw *g, struct client *c)
{
    client_set_state_loop(g, c, CS_LINGER);
    request_room_drop_loop(g, c); /* (what it sends now is read and dropped) */
    stream_linger_loop(g, &c->c, CLIENT_TM_STATE, on_linger_timeout);
}

static void on_event(struct gw *g, struct evsrc *s, uint32_t ev)
{
    struct client *c = client_of((struct conn *)s);
    if (c->c.closing)
        return;
    if (ev & EPOLLOUT)
        stream_flush_loop(g, &c->c);
    if (c->c.closing || c->c.fd < 0)
        return;
    if (c->st == CS_LINGER) { /* what it still sends is read and dropped, until it closes */
        if (stream_lingered_loop(g, &c->c, ev))
            conn_close_loop(g, &c->c, linger_why(c));
        return;
    }
    int reading = (c->st == CS_HANDSHAKE || c->st == CS_READY) && !c->paused && !c->c.waits_room;
    if (reading && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
        stream_read_loop(g, &c->c); /* reads to the end, and notices it */
    else if (ev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) /* not reading: notice it now (a FIN alone, or gone) */
        client_peer_gone_loop(g, c, !(ev & (EPOLLHUP | EPOLLERR)), "client closed the connection");
}

/* ---- the output bound ------------------------------------------------------------------------ */

static void on_stall_timeout(struct gw *g, struct conn *x)
{
    struct client *c = client_of(x);
    if (!c->c.out.bytes && !c->c.piped)
        return;
    if (g->cfg.client_stall_timeout <= 0) /* (a reload lifts it: client_timeouts_reloaded_loop) */
        return;
    int64_t quiet = g->loop.now_ms - c->stall_since;
    if (quiet < g->cfg.client_stall_timeout) {
        conn_timer_arm_loop(g, x, CLIENT_TM_STALL, c->stall_since + g->cfg.client_stall_timeout, on_stall_timeout);
        return;
    }
    conn_refused_loop(g, REFUSED_STALLED, c->c.name,
                      "%zu bytes waiting: accepted none, or stayed over client_high_water, for %lld ms",
                      conn_pending(&c->c), (long long)quiet);
    conn_close_loop(g, &c->c, "stalled: its output accepted no byte, or stayed over client_high_water, for "
                              "client_stall_timeout");
}

/* After a flush: output drained below the low-water mark lets its workers stream again and its
 * next request start; output still waiting starts (or keeps) the stall clock, which starts again
 * only with a byte accepted that leaves it at or under client_high_water (Redis's soft
 * client-output-buffer-limit: a client that reads a little, but stays over it, is closed too), or
 * once it has taken client_high_water bytes since the clock started (a reply held whole, larger
 * than the bound, read on: a .qgate.all's, a decompressed one). */
static void on_flushed(struct gw *g, struct conn *x, size_t before, size_t wrote)
{
    struct client *c = client_of(x);
    size_t now = conn_pending(x);
    if (c->http) { /* its 501 */
        if (!now)
            linger(g, c);
        return;
    }
    if (!x->piped && !c->w)
        conn_pipe_close_loop(x); /* memory follows active connections */
    if (x->out.bytes + x->piped <= (size_t)g->cfg.client_low_water)
        conn_wake_loop(g, x); /* the workers that stopped for its output: each goes on once under it for
                               * itself (a stream: what is ahead of it; a whole message: all of it) */
    if (before > (size_t)g->cfg.client_low_water && now <= (size_t)g->cfg.client_low_water) {
        struct req *h = client_head(c);
        if (h && h->state == RS_WAITING)
            request_advance_loop(g, c); /* it was held back by the output bound */
        else if (c->paused)
            request_check_pending_loop(g, c); /* its reading, if the bound held it (inside a callback) */
        if (x->closing)
            return;
        now = conn_pending(x); /* the advance may have queued replies (a request done at once) */
    }
    if (c->st == CS_FLUSHING && now == 0 && !client_head(c) && !x->streaming) { /* never in a message */
        linger(g, c);
        return;
    }
    if (c->half && now == 0) { /* it shut its side: closed once everything owed is written */
        request_finish_if_gone_loop(g, c);
        if (x->closing)
            return;
    }
    if (!now) {
        conn_timer_cancel_loop(g, x, CLIENT_TM_STALL);
        return;
    }
    if (g->cfg.client_stall_timeout <= 0)
        return;
    int armed = conn_timer_armed(x, CLIENT_TM_STALL);
    size_t hw = (size_t)g->cfg.client_high_water;
    if ((wrote && (now <= hw || now + hw <= c->stall_level)) || !armed) {
        c->stall_since = g->loop.now_ms;
        c->stall_level = now;
    }
    if (!armed)
        conn_timer_arm_loop(g, x, CLIENT_TM_STALL, c->stall_since + g->cfg.client_stall_timeout, on_stall_timeout);
}

void client_timeouts_reloaded_loop(struct gw *g)
{
    int queued = 0, stalling = 0;
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT || x->closing)
            continue;
        struct client *c = client_of(x);
        queued += request_queue_timeout_reloaded_loop(g, c);
        if (!conn_pending(x)) /* no output waiting: no stall clock */
            continue;
        stalling++;
        if (g->cfg.client_stall_timeout <= 0) {
            conn_timer_cancel_loop(g, x, CLIENT_TM_STALL);
            continue;
        }
        if (!conn_timer_armed(x, CLIENT_TM_STALL)) { /* (no limit until now: its clock starts now) */
            c->stall_since = g->loop.now_ms;
            c->stall_level = conn_pending(x);
        }
        conn_timer_arm_loop(g, x, CLIENT_TM_STALL, c->stall_since + g->cfg.client_stall_timeout, on_stall_timeout);
    }
    log_info(NULL, "reload: queue_timeout %lld ms for the %d requests waiting too, client_stall_timeout %lld ms for "
                   "the %d clients whose output waits (0: none)",
             (long long)g->cfg.queue_timeout, queued, (long long)g->cfg.client_stall_timeout, stalling);
}

void client_pause_all_loop(struct gw *g)
{
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_CLIENT && !x->closing) {
            client_of(x)->paused = 1;
            conn_set_reading_loop(g, x, 0);
            request_check_pending_loop(g, client_of(x)); /* read on for a callback's answer it owes */
        }
    }
}

void client_drain_close_loop(struct gw *g, int all)
{
    for (uint32_t id = 0; id < g->tab_cap; id++) {
        struct conn *x = g->tab[id];
        if (!x || x->kind != CONN_CLIENT || x->closing)
            continue;
        struct client *c = client_of(x);
        if (!all && (c->st != CS_READY || client_head(c) || conn_owed_unsent(x) || x->in_backlog || c->ncalls))
            continue; /* (only one with nothing owed: each is shut after its last reply byte, not
                       * once every other's is done (at 3929a8f only an idle session's client was),
                       * so that it may go to another gateway while the slowest query still runs:
                       * helper round 21) */
        if (c->st == CS_LINGER || c->st == CS_GONE)
            continue; /* closing already, or closed when what it sent is done */
        if (c->st != CS_READY && c->st != CS_FLUSHING) {
            conn_close_loop(g, x, "drained: closed"); /* handshake or credentials: nothing owed */
            continue;
        }
        c->bye = 1;
        if (c->st == CS_READY && (conn_pending(x) || x->streaming)) { /* publishes going out, one
                    * half written maybe: none taken after them, and our FIN after their last byte
                    * (the flush's FLUSHING case), not in the middle of one; drain_timeout bounds
                    * the wait (helper round 34c: at 811dec9 a subscriber got half a message, then
                    * the FIN) */
            request_stop_reading_loop(g, c);
            continue;
        }
        linger(g, c); /* our FIN after the last reply byte; what it sent meanwhile is read and dropped */
    }
}

/* ---- teardown --------------------------------------------------------------------------------- */

static void on_close(struct gw *g, struct conn *x, const char *why)
{
    struct client *c = client_of(x);
    int monitor = c->us && c->us->monitor; /* a health check every few seconds: not worth a line each */
    log_at((c->st == CS_READY || c->st == CS_GONE) && !monitor ? LOG_INFO : LOG_DEBUG, x->name, "closed: %s", why);
    if (c->w) {
        g->back->client_gone(g, c->w, c); /* its reply is drained and dropped */
        client_set_worker_loop(c, NULL);
    }
    if (c->sess && c->sess != c->w)
        g->back->client_gone(g, c->sess, c); /* what its session's worker publishes: drained */
    if (c->sess)
        g->back->release(g, c->sess); /* pool = session: its worker is let go */
    if (c->fo)
        g->back->fanout_cancel(g, c->fo); /* .qgate.all: given up */
    if (c->us)
        c->us->conns--;
    c->drop_why = why; /* the reason= of its requests left unanswered */
    request_free_all_loop(g, c);
    c->drop_why = NULL;
    g->nclients--;
    g->nrefusing -= c->refuse;
}

static void client_free(struct conn *x) { free(client_of(x)); }

const struct connops client_connops = {
    .ev = {.on_event = on_event},
    .on_bytes = on_bytes,
    .on_header = request_header_loop,
    .on_message = request_message_loop,
    .on_framed = request_framed_loop,
    .on_bad = on_bad,
    .on_eof = on_eof,
    .takes_output = takes_output,
    .read_size = 16384,
    .raw_max = 16384,
    .budget_frames = 1,
    .on_close = on_close,
    .on_flushed = on_flushed,
    .on_gone = on_gone,
    .free = client_free,
};

struct client *client_lookup_loop(struct gw *g, uint32_t id, uint32_t gen)
{
    struct conn *x = conn_lookup_loop(g, id, gen);
    return x && x->kind == CONN_CLIENT ? client_of(x) : NULL; /* stale: gone, or id reused */
}

struct client *client_of_job_loop(struct gw *g, const struct job *j) { return client_lookup_loop(g, j->conn_id, j->conn_gen); }

struct client *client_by_serial_loop(struct gw *g, uint64_t serial)
{
    for (uint32_t id = 0; id < g->next_id; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_CLIENT && !x->closing && client_of(x)->serial == serial)
            return client_of(x);
    }
    return NULL;
}

/* Who c is, as its .qgate.clients[] row and its tail (if it is cut) name it. */
static void client_who(const struct client *c, struct tail_who *who)
{
    *who = (struct tail_who){.serial = c->serial, .connected_ms = c->connected_ms};
    snprintf(who->user, sizeof who->user, "%s", c->user);
    snprintf(who->peer, sizeof who->peer, "%s", c->peer);
    snprintf(who->group, sizeof who->group, "%s", c->grp ? c->grp->cfg.name : "");
}

void client_cut_loop(struct gw *g, struct client *c, const char *why)
{
    struct tail_who who;
    client_who(c, &who);
    tail_close_loop(g, &c->c, &who, why);
}

/* A .qgate.clients[] row's first columns: who, in state st. */
static void row_who(struct gw *g, struct client_row *r, const struct tail_who *who, int st)
{
    r->id = (int64_t)who->serial;
    snprintf(r->user, sizeof r->user, "%s", who->user);
    snprintf(r->peer, sizeof r->peer, "%s", who->peer);
    snprintf(r->group, sizeof r->group, "%s", who->group);
    qg_copy_lower(r->state, sizeof r->state, client_state_name(st));
    r->connected_ms = gw_wall_ms(g, who->connected_ms);
}

struct clients_snapshot *client_snapshot_loop(struct gw *g)
{
    int rows = g->nclients + g->ntails;
    struct clients_snapshot *s = calloc(1, sizeof *s + (size_t)rows * sizeof s->rows[0]);
    if (!s)
        return NULL;
    for (uint32_t id = 0; id < g->next_id && s->n < rows; id++) {
        struct conn *x = g->tab[id];
        if (x && x->kind == CONN_TAIL && !x->closing) { /* a client cut, its last output still written */
            row_who(g, &s->rows[s->n++], tail_who(x), CS_CLOSING);
            continue;
        }
        if (!x || x->kind != CONN_CLIENT || x->closing)
            continue;
        struct client *c = client_of(x);
        struct client_row *r = &s->rows[s->n++];
        struct tail_who who;
        client_who(c, &who);
        row_who(g, r, &who, c->st);
        struct req *q;
        TAILQ_FOREACH(q, &c->reqs, link)
            r->requests++;
        r->running = c->w != NULL || c->fo != NULL; /* (a .qgate.all's parts: running too, helper
                                                     * round 35c: at 041cc8a shown idle) */
        struct req *h = client_head(c);
        if (r->running && h && h->state == RS_RUNNING) { /* what it runs, where, since when */
            if (c->fo)
                snprintf(r->worker, sizeof r->worker, "every worker of %s", h->grp->cfg.name);
            else
                snprintf(r->worker, sizeof r->worker, "%s", h->wname ? h->wname : "");
            r->since_ms = h->t_run_us ? gw_wall_ms(g, h->t_run_us / 1000) : 0;
            const struct qslot *e = h->key && h->grp->queries ? &h->grp->queries[h->key & (QUERY_SLOTS - 1)] : NULL;
            if (e && e->key == h->key)
                snprintf(r->query, sizeof r->query, "%s", e->text);
            else if (h->qtext) /* (a .qgate.all's; or a query whose slot another has taken) */
                snprintf(r->query, sizeof r->query, "%s", h->qtext);
        }
    }
    return s;
}

/* client.h: the client side: a q client's connection (client.c: accept, handshake, reading,
 * leaving, the output bound), its requests, answered in order (request.c: framing and
 * validation, the FIFO, replies, bad messages), and its answers to workers' callbacks
 * (callback.c). */
#ifndef CLIENT_H
#define CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "conn.h"
#include "dispatch.h"
#include "jobs.h"

struct job;
struct worker;
struct fanout;

/* Client states:
 *   HANDSHAKE --parsed, no users file--> READY
 *   HANDSHAKE --parsed--> AUTH (a reader checks the credentials) --ok--> READY
 *   HANDSHAKE or AUTH --too long, timeout, bad credentials--> CLOSING (no byte sent)
 *   HANDSHAKE --an HTTP request (q would hand it to .z.ph, .z.pp, .z.ws)--> HANDSHAKE with http
 *     set: a 501 queued, nothing more read --sent--> LINGER
 *   READY --input ended (EOF, reset)--> GONE: the requests it sent before still run, in order;
 *     after a reset (or a failed write) the socket is closed and their replies dropped, after
 *     an EOF (half set) the socket stays for the replies, and goes if a write fails --the last
 *     one done (after an EOF, written)--> CLOSING
 *   READY --bad message--> FLUSHING (error queued after the replies owed, nothing more read)
 *     --sent--> LINGER (write side shut, input read and dropped so the error is not lost to a
 *     reset) --EOF or 2 s--> CLOSING
 *   FLUSHING --input ended--> GONE
 *   any --stalled (client_stall_timeout), admin, out of memory--> CLOSING
 * A client in AUTH whose input ends stays in AUTH (eof set) and goes on to GONE or CLOSING when
 * the check returns. */
#define CLIENT_STATES(X) X(HANDSHAKE) X(AUTH) X(READY) X(FLUSHING) X(LINGER) X(GONE) X(CLOSING)
#define ST_ENUM(e) CS_##e,
enum client_state { CLIENT_STATES(ST_ENUM) };
#undef ST_ENUM

/* Request states (a client's FIFO, answered in order; only the head is ever started):
 *   WAITING (behind the head) -> CHECKING (a reader validates its body) -> WAITING
 *   WAITING -> QUEUED (on its group's queue) -> RUNNING (on a worker, or broadcast)
 *   WAITING -> LOCAL (a pool job is making its reply) -> READY (reply bytes held) -> sent
 *   WAITING -> HELD (on its group's held list: the group is paused, and the request is one
 *     that never enters the queue, a session's or a .qgate.all) -> WAITING (resumed)
 * request_set_state_loop is the one setter: QUEUED is being on the group's queue, HELD on its
 * held list. */
#define REQ_STATES(X) X(WAITING) X(CHECKING) X(QUEUED) X(RUNNING) X(LOCAL) X(READY) X(HELD)
#define ST_ENUM(e) RS_##e,
enum req_state { REQ_STATES(ST_ENUM) };
#undef ST_ENUM

struct req {
    TAILQ_ENTRY(req) link;
    TAILQ_ENTRY(req) nlink; /* nested: on its client's nested list */
    uint64_t seq;
    uint8_t type;        /* KIPC_SYNC or KIPC_ASYNC */
    uint8_t state;
    uint8_t close_after; /* close the client once this reply is sent (badmsg) */
    uint8_t unchecked;   /* its body is validated on the reader pool before it may run */
    uint8_t route;       /* its first item names .qgate.on or .qgate.all: routed (query alone is
                          * sent) or refused before it runs, as form says */
    uint8_t routed;      /* it was: its bytes are query's, sent as they are to a worker of grp */
    int8_t cmd;          /* jobs_peek_command of its bytes as they came (a sync request's) ... */
    uint8_t cmd_known;   /* ... if they came plain: compressed ones are peeked at once inflated */
    uint8_t fan;         /* .qgate.all: 1 the replies merged, 2 their list (`list) */
    uint8_t partial;     /* .qgate.all with `partial */
    uint8_t admin;       /* its user's rights when it came (a reload changes them for what comes */
    uint8_t monitor;     /* next, as it does its group; admin, taken away, is gone at once) */
    uint8_t counted;     /* its bytes as they came (in_len) count against pending_max: until
                          * sent to a worker or answered (a flag: a held request's cost is its
                          * size, bounded by client_max_pending) */
    struct route_form form; /* route: the form as read (on arrival, or by the reader that
                          * validated it); form.kind 0 until read */
    struct group *grp;   /* the group it runs on: its client's, or the one it was routed to */
    uint8_t *msg;        /* the request bytes until sent to a worker (they start at off) */
    size_t len;
    uint32_t off;        /* routed: the wrapper's bytes before the query's message */
    struct chunk *reply; /* READY: the reply */
    size_t held;         /* bytes counted against hold_max: a compressed route's, inflated (msg),
                          * then, LOCAL, what its pool job holds (in and out) */
    int64_t t_arrive;    /* ms */
    /* for the access log */
    int64_t t_in_us;     /* arrival */
    int64_t t_run_us;    /* sent to a worker; 0 = never */
    int64_t t_began_us;  /* its run began at the worker (after any run ahead of it there); 0 = unknown */
    uint64_t key;        /* its query's key (query.c), once it ran on a worker; 0 = none */
    char *qtext;         /* access_log_query = text: its query's first bytes (query_text), taken
                          * as it ran (its slot in .qgate.queries[] may be another query's by
                          * its end: helper round 36a), or NULL */
    size_t in_len;       /* its bytes as the client sent them */
    uint64_t reply_len;  /* its reply's bytes as the worker sent them (0: as made here) */
    const char *wname;   /* the worker that ran it (access_name_loop), or NULL */
    char *etext;         /* the text of its error (outcome error or gwerror), or NULL */
    uint8_t outcome;     /* enum alog_outcome, once answered */
    uint8_t nested;      /* sent from inside a callback, not for the worker that called back: a
                          * gateway command run now, or an error; its reply goes as soon as it
                          * is made, ahead of the requests before it (q answers a call nested
                          * within the one it waits in first) */
    uint8_t wait_answer; /* its worker lost while it called the client back: its error goes once
                          * the client has answered that callback (left it, as q sees it) */
    uint8_t local;       /* a route or command seen inflated on a reader (request_nested_local_loop):
                          * the gateway's, never nested to a worker */
    uint8_t wn_wait;     /* nested, a bad message's error: it goes once worker wn_id/wn_gen has sent
                          * the replies to what the client sent it nested before, but for the calls
                          * whose callbacks it came inside (encl: theirs come after it); q answers
                          * them before it reads the bad one */
    uint32_t wn_id, wn_gen;
    uint64_t answers_at; /* nested: c's answers to callbacks before it (struct client): a reply of
                          * its worker's that comes after a later one may be that of a call whose
                          * callback it was sent inside, and waits for it */
    int encl;            /* nested: the calls c had sent nested to the worker that called back
                          * (wn_id/wn_gen) and whose callbacks it was inside when it sent this one
                          * (-1: none): their replies come after this one's (q answers what comes
                          * inside a callback before the call that made it returns) */
};
TAILQ_HEAD(reqlist, req);

/* What a held request costs, counted against client_max_pending: its bytes and its
 * bookkeeping (a flood of tiny async messages is bounded too). */
static inline size_t req_cost(const struct req *r) { return r->len + sizeof(struct req) + 32; }
/* r's bytes counted against pending_max (0: none), taken by what holds them now (the chunk on
 * its worker's queue, which gives them back once written). */
static inline size_t req_count_take(struct req *r)
{
    size_t n = r->counted ? r->in_len : 0;
    r->counted = 0;
    return n;
}

/* A worker's callback (a sync request with .z.w) relayed to a client: its answer, the next
 * response the client sends, goes back to that worker connection, if it is still there and
 * still waiting. Answers match callbacks in order, as q matches them. */
struct call {
    STAILQ_ENTRY(call) link;
    uint32_t w_id, w_gen;
    uint8_t cancelled;   /* the worker was told the answer is not coming: drop it */
    int depth;           /* made by the worker's run itself (0), or by the call c sent it nested
                          * numbered so among those it owes replies to (1, 2, ...): the call whose
                          * reply ends this callback */
};
STAILQ_HEAD(calllist, call);

/* An answer a client sent when no callback was owed (a response nobody asked for yet): on q it
 * waits on the handle behind what the client sent before it, and a callback of the request
 * running there reads it in its place (callback.c). */
struct unasked {
    STAILQ_ENTRY(unasked) link;
    uint8_t *msg;
    size_t len;
    uint64_t after; /* sent after the client's request of this number */
    char *bad;      /* malformed (why, owned): read in its place, it is a bad message there */
};
STAILQ_HEAD(unaskedlist, unasked);

/* A user of the users file: its limits and how much it uses now. Keyed by the exact name of
 * its users-file entry. */
struct ustate {
    SLIST_ENTRY(ustate) link;
    char name[64];
    int conns, inflight;            /* connections open; requests on workers */
    int max_conns, max_inflight;    /* 0 = unlimited */
    uint8_t admin;
    uint8_t monitor;                /* gateway commands only */
};
SLIST_HEAD(ustatelist, ustate);

/* Its timers (struct conn tm[]). */
enum { CLIENT_TM_STATE = 0, /* handshake, then the head's queue timeout, then linger */
       CLIENT_TM_STALL = 1 /* client_stall_timeout while output waits */ };

struct client {
    struct conn c;
    uint8_t st;
    uint8_t cap;         /* negotiated capability */
    uint8_t local;       /* on this host: never compressed */
    uint8_t paused;      /* reading stopped: too many bytes waiting their turn */
    uint16_t advancing;  /* request_advance_loop is walking its FIFO (nested calls counted) */
    uint8_t eof;         /* its input ended: nothing more will be read ... */
    uint8_t half;        /* ... by a FIN, its socket kept: what is owed is still sent (q answers
                          * what it read before it sees the close), then it closes */
    uint8_t bye;         /* lingering at the end of a drain (not after a bad message) */
    uint8_t sess_lost;   /* ... after its session's worker was lost (told so) */
    uint8_t refuse;      /* over max_clients: its first request is answered 'qgate: too many connections */
    uint8_t proxied;     /* its source is in proxy_from: a PROXY header comes before its handshake */
    uint8_t http;        /* it sent an HTTP request for a handshake: answered 501, nothing more read */
    uint8_t from_uds;    /* it came over q's Unix socket */
    struct sockaddr_storage from; /* its source: the socket's peer, or the client a PROXY header names */
    uint64_t serial;     /* its number, shown in logs and .qgate.clients[]; never reused */
    char user[64];       /* as sent, made printable and cut, for logs */
    char peer[64];
    struct ustate *us;   /* with a users file: the user's limits and counts */
    struct group *grp;
    struct reqlist reqs;
    size_t pending;      /* bytes of requests held */
    size_t gathering;    /* bytes counted against pending_max for the message being read */
    uint8_t room_granted; /* its turn for room came: gathering kept for the header it waited with */
    size_t room_mark;    /* while others wait for room: the bytes of its message it had at ... */
    int64_t room_mark_ms; /* ... this time (0: not yet looked at), its pace judged from there */
    uint64_t next_seq;
    int64_t stall_since; /* ms: output has waited (without a byte accepted) since */
    size_t stall_level;  /* ... its bytes waiting then */
    int64_t connected_ms; /* when it was accepted (the loop's clock) */
    const char *drop_why; /* while requests of it are dropped unanswered: why (the access log's reason=) */
    const char *close_why; /* after a FIN: closed with this once what is owed is written, not "client
                            * closed the connection" (fail_request) */
    struct worker *w;    /* worker running the head request */
    struct worker *sess; /* pool = session: the worker given to it, from its first request on */
    struct fanout *fo;   /* .qgate.all: its head running on every worker of a group */
    struct calllist calls; /* callbacks relayed to it, not yet answered, oldest first */
    int ncalls;
    uint64_t answers;    /* answers to callbacks it has sent (nested replies' holds: request.c) */
    struct unaskedlist unasked; /* answers it sent before a callback asked, held (counted in
                          * pending) until its requests before each are done */
    size_t unasked_bytes; /* ... what they count in pending (answers: never a flood of requests) */
    uint8_t cut;         /* a callback of it was told no answer comes as it read no more, or for its
                          * malformed answer: after a bad message a .qgate.all passes no other */
    uint8_t bad_ahead;   /* one of them was malformed (held, or read since): what it sends after
                          * that is dropped unread, as q reads nothing after a bad message */
    uint8_t giving_up;   /* request_check_pending_loop's give-up advances it: not again from there */
    uint8_t gave_up;     /* its workers were told its answers are not coming (over twice
                          * client_max_pending unread): until its calls are gone, a .qgate.all's
                          * part's callback is told so too, not held for an answer it is not read
                          * for */
    struct reqlist nested; /* its requests answered nested by the gateway (req nested), not yet
                          * sent, oldest first: their replies go in order, a reply at the head
                          * after them */
    uint8_t nest_job;    /* a sync message it sent nested is on a reader: 1; 2: its worker was
                          * lost meanwhile, and its error given it (the innermost, first) */
    int lost_nested;     /* calls it made nested on a worker lost since, their errors (lost_why)
                          * not yet given: the innermost, n-th, goes once it owes at most n
                          * callback answers (it has left the callbacks inside that call) */
    const char *lost_why;
};

static inline struct req *client_head(const struct client *c) { return TAILQ_FIRST(&c->reqs); }
/* May a worker's message still be put into its output? (Connected, not closing or lingering.) */
static inline int client_takes_output(const struct client *c)
{
    return (!c->eof || c->half) && !c->c.closing && (c->st == CS_READY || c->st == CS_FLUSHING || c->st == CS_GONE);
}
/* Is nothing more sent to it? (Its input ended with its socket, or with a FIN and nothing owed.) */
static inline int client_output_gone(const struct client *c) { return c->eof && !c->half; }
static inline struct client *client_of(struct conn *c) { return (struct client *)c; }

/* ---- client.c --------------------------------------------------------------------------- */
extern const struct connops client_connops;
extern const struct evops client_listener_ops;
extern const struct frontend_ops client_frontend;
/* Take a connected client socket (from accept, or a test): returns the client, or NULL (fd closed). */
struct client *client_adopt_loop(struct gw *g, int fd, int is_uds, int local);
/* The one setter of a client's state. */
void client_set_state_loop(struct gw *g, struct client *c, enum client_state st);
const char *client_state_name(int st);
/* Its input ended (fin: EOF; else a reset, a failed write): what it sent still runs, in order;
 * the replies go out after an EOF (a half-close), else they are dropped; it is closed when the
 * last one is done (and, after an EOF, written). */
void client_peer_gone_loop(struct gw *g, struct client *c, int fin, const char *why);
/* A reader checked the credentials of a client in AUTH (the job of kind JK_AUTH). */
void client_auth_done_loop(struct gw *g, struct job *j);
/* Does it wait for replies the gateway makes to what it sent nested (inside a callback)? The
 * reply of the request that called back comes after them. */
static inline int client_nested_owed(const struct client *c) { return !TAILQ_EMPTY(&c->nested); }
/* Is its output (queued, piped and held) over client_high_water? Then no new request starts. */
/* Does q's rule compress what goes to c (a remote client of capability 1 or more, compress on)? */
static inline int client_compressed_for(const struct gw *g, const struct client *c)
{
    return g->cfg.compress && !c->local && c->cap >= 1;
}

static inline int client_output_full_loop(const struct gw *g, const struct client *c)
{
    return conn_pending(&c->c) > (size_t)g->cfg.client_high_water;
}
/* The one setter of the worker running c's head request; keeps the user's count. */
static inline void client_set_worker_loop(struct client *c, struct worker *w)
{
    if (c->us && !c->w && w)
        c->us->inflight++;
    else if (c->us && c->w && !w)
        c->us->inflight--;
    c->w = w;
}
/* The client of connection (id, gen), or NULL if it has gone; of pool job j likewise. */
struct client *client_lookup_loop(struct gw *g, uint32_t id, uint32_t gen);
struct client *client_of_job_loop(struct gw *g, const struct job *j);
/* The client with this serial (as shown by .qgate.clients[]), or NULL. */
struct client *client_by_serial_loop(struct gw *g, uint64_t serial);
/* Close c as its stream was cut (a worker lost in the middle of a message to it): what was
 * queued for it ahead of the cut is written first, by a tail that keeps its row (tail.h). */
void client_cut_loop(struct gw *g, struct client *c, const char *why);
/* The .qgate.clients[] snapshot (malloc'd). */
struct clients_snapshot *client_snapshot_loop(struct gw *g);
/* SIGTERM: nothing more is read from any client. */
void client_pause_all_loop(struct gw *g);
/* all: the drain is done (nothing owed): every client's write side is shut after its last
 * reply byte, and what it still sends is read and dropped until it closes (at most 2 s), so
 * that no reset throws away reply bytes the kernel still holds. !all, while the drain waits:
 * each client with nothing owed (nothing of it runs, waits or is to be written, no callback
 * open), the same way: it may go to another gateway while the slowest query still runs, and a
 * session's worker, free then, runs what others' requests wait for. */
void client_drain_close_loop(struct gw *g, int all);
/* The users file changed (a reload): connected users get its admin flags and limits. */
void client_users_reloaded_loop(struct gw *g);
/* After a reload's groups: each connected client goes, for what it sends from now on, to the group
 * the file sends its user to (a group's users changed, or a group added); a session stays on its
 * worker until it ends. What it sent before runs where it was sent. */
void client_groups_reloaded_loop(struct gw *g);
/* c to the group the users file sends its user to now, if that is another (what it sent
 * before runs where it was sent); not while it has a session, whose state is on its worker. */
void client_regroup_loop(struct gw *g, struct client *c);
/* The gateway exits now (why): every client is answered what it still can be
 * (request_exit_answers_loop), then closed. */
void client_exit_answers_loop(struct gw *g, const char *why);
void client_users_free(struct gw *g);

/* Bodies up to this size are validated on the loop as they arrive: walking them costs no more
 * than copying them would (bench-codec, "validate small"); larger or compressed ones are
 * validated on the reader pool before they run. */
#define VALIDATE_ON_LOOP_MAX 16384

/* ---- request.c -------------------------------------------------------------------------- */
/* The one setter of a request's state: QUEUED puts the client on its group's queue, leaving
 * QUEUED takes it off. */
void request_set_state_loop(struct gw *g, struct client *c, struct req *r, enum req_state st);
const char *request_state_name(int st);
void request_free(struct gw *g, struct req *r);
/* The stream's handlers: a whole message (a request, or an answer to a callback); what a read
 * brought has been framed (its requests go on). */
struct kipc_hdr;
int request_message_loop(struct gw *g, struct conn *c, const struct kipc_hdr *h, uint8_t *msg);
int request_framed_loop(struct gw *g, struct conn *c);
/* A message's header has come: room is kept for it under pending_max, or it waits its turn
 * (SS_WAIT). */
int request_header_loop(struct gw *g, struct conn *c, const struct kipc_hdr *h);
/* The dispatch phase's end: clients waiting for room under pending_max whose turn has come
 * read on. */
void request_room_loop(struct gw *g);
/* If c waits for room, and need not (it owes a callback's answer, or holds a session's
 * worker), it reads on. */
void request_room_check_loop(struct gw *g, struct client *c);
/* c reads no more requests (a bad message, a drain's close): its wait for room, and the room
 * kept for the message it was reading, are given up. */
void request_room_drop_loop(struct gw *g, struct client *c);
/* Bytes counted against pending_max (*n: a .qgate.all's) go back, *n zeroed: every worker of
 * the group has the query. */
void request_uncount_loop(struct gw *g, size_t *n);
/* r's bytes went to a worker: no longer counted against pending_max. */
void request_sent_loop(struct gw *g, struct req *r);
/* Start the head request if it is waiting, and send every finished reply at the head; loops
 * (never recurses) over however many requests finish at once. */
void request_advance_loop(struct gw *g, struct client *c);
/* c's head, held by its paused group, goes on as it now would: to the group's queue, unless it
 * is still a session's or a .qgate.all's (held again). For a resume, and for a session ended
 * while its next request was held (a reload made the group a request pool). */
void request_unhold_loop(struct gw *g, struct client *c);
/* c's session has ended and c stays (a reload made its group a request pool): its head request,
 * waiting for or held for the session's worker, goes on as any request of its group (helper
 * round 35a: at 7ebf571 one given to that worker while it ran a broadcast owed from before waited
 * for ever). */
void request_session_ended_loop(struct gw *g, struct client *c);
/* The head request finished (its reply fully relayed or dropped). */
void request_head_done_loop(struct gw *g, struct client *c);
/* Answer request r with the q error text (via the writer pool). */
void request_error_loop(struct gw *g, struct client *c, struct req *r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Completions: a reply made by a pool job (JK_REPLY); a body validated (JK_CHECK). */
void request_reply_done_loop(struct gw *g, struct job *j);
/* A reload has set the timeouts: every client's queued request and waiting output keep to the
 * new ones (queue_timeout from the request's arrival, client_stall_timeout from the stall's
 * start, or from now if it had none; 0 lifts it). */
void client_timeouts_reloaded_loop(struct gw *g);
int request_queue_timeout_reloaded_loop(struct gw *g, struct client *c); /* 1 if c's head waits */
/* ... a worker's reply made fit (JK_WREPLY): the gateway's error in its place is the request's
 * outcome (gwerror) */
void request_wreply_done_loop(struct gw *g, struct job *j);
void request_checked_loop(struct gw *g, struct job *j);
/* c's request seq (the head's, usually), or NULL. */
struct req *request_of_seq_loop(const struct client *c, uint64_t seq);
/* May r, waiting behind an async message its client's worker of grp is given, go with it as it
 * is? An async message for grp that start_head would send there unchanged: not one to check,
 * route, refuse (a monitor's) or run here (a gateway command: helper round 17, an async
 * .qgate.pause right after an async query went to the worker as q text, the group unpaused). */
int request_runs_as_is_loop(const struct req *r, const struct group *grp);
/* Has c a reply to get yet: a sync request queued (or bytes unread), its output not gone? */
int request_owes_reply_loop(const struct client *c);
/* Queue c's reply to request seq (msg owned now). */
void request_reply_loop(struct gw *g, struct client *c, uint64_t seq, uint8_t *msg, size_t len);
/* A header, or a small body, that the gateway cannot accept (a message of type type, KIPC_*,
 * or -1 if not known): its request (number seq, one it was given already, or NEW_SEQ: the next)
 * answers 'qgate: badmsg after the replies owed, then the client is closed; sent from inside a
 * callback and not async, answered as nested calls are. */
#define NEW_SEQ UINT64_MAX
void request_bad_message_loop(struct gw *g, struct client *c, const char *why, int type, uint64_t seq);
/* c's head, whose worker was lost while it called c back, has had its error made: it waits for
 * c's answer to that callback, for query_timeout at most (as the run would have). */
void request_hold_for_answer_loop(struct gw *g, struct client *c);

/* Reading stops past client_max_pending bytes held (unless it owes a callback an answer), and
 * goes on below half of it. */
void request_check_pending_loop(struct gw *g, struct client *c);
/* Refuse a client that has done its handshake: nothing more is read, the q error text is the
 * answer to the request of len bytes it just sent (not taken), then the close. */
void request_refuse_loop(struct gw *g, struct client *c, const char *text, size_t len);
/* Nothing more is read from c (FLUSHING, from READY): what is owed it goes out, then it lingers. */
void request_stop_reading_loop(struct gw *g, struct client *c);
/* The gateway exits with c's requests unanswered (drain_timeout ran out, or a second SIGTERM:
 * why): the replies made go, then each sync request without one is answered 'qgate: exiting
 * (why): ... (it was not run, or no reply came from the worker running it), in order, as far as
 * c's output is not in the middle of a message; what the kernel takes at once is written, and c
 * is closed. */
void request_exit_answers_loop(struct gw *g, struct client *c, const char *why);
/* Take request x out of the FIFO and free it, its end counted (and logged: access.c): it ran
 * or was answered (answered), or never will be. */
void request_remove_loop(struct gw *g, struct client *c, struct req *x, int answered);
/* Drop every request behind r (nothing after it is answered). */
void request_drop_after_loop(struct gw *g, struct client *c, struct req *r);
/* Drop c's requests after number seq that wait their turn (a bad message's, found bad in its
 * place by a reader: q reads nothing after it). */
void request_drop_behind_loop(struct gw *g, struct client *c, uint64_t seq);
/* Drop every request and callback of a client that is closing. */
void request_free_all_loop(struct gw *g, struct client *c);
/* pool = session: its worker went down (text says why; cut: in the middle of a message to
 * it). As if its q had died: the first sync request not yet answered gets text, nothing after
 * it runs, and the client is closed once what it is owed is sent. */
void request_session_lost_loop(struct gw *g, struct client *c, int cut, const char *text);
/* A client whose input ended goes once everything it sent has run. */
void request_finish_if_gone_loop(struct gw *g, struct client *c);

/* ---- callback.c ------------------------------------------------------------------------- */
/* A message c sent while it owed a callback's answer, compressed, that a reader found to be a
 * route or (cmd: 1, msg its plain bytes) a gateway command (seq: its number), as one that came
 * plain is: a route waits its turn as a request (told at once that it cannot run nested, if
 * sync); a command runs then and there, never on the worker (msg owned). */
void request_nested_local_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, uint64_t seq, int cmd);
/* A response from the client: the answer to the oldest callback relayed to it (msg owned).
 * SS_OK, SS_WAIT (a reader checks it first: c reads nothing more until then) or SS_STOP. */
int callback_answer_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len);
/* A sync or async message from c (msg owned; checked: its body validated already), no gateway
 * command nor route: if c owes its answer to the callback of the worker running its request,
 * it runs there, nested, as q runs it on the worker waiting in that callback (SS_OK, SS_WAIT
 * or SS_STOP); otherwise -1, msg untouched. It takes a request number, as requests do. */
int callback_nest_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, int checked);
/* callback_nest_loop for a message c sent before the callback came, queued as request seq. */
int callback_nest_queued_loop(struct gw *g, struct client *c, uint8_t *msg, size_t len, uint64_t seq, int checked);
/* c's worker has called it back: what it sent after the request that runs there, queued behind
 * it, goes nested now, in order, as q in h x reads what came on the handle before the answer: to
 * that worker (one a reader validates first: once it has, c read no more meanwhile), or, a gateway
 * command or a route, answered by the gateway as when sent inside the callback; an async route,
 * or an async message for a broadcast group, waits its turn (no reply: none is overtaken). */
void request_nest_queued_loop(struct gw *g, struct client *c);
/* An answer c sent before any callback asked for it, if one sent before request before (its
 * number; UINT64_MAX: any) is held, and c owes a callback an answer now: it is that answer, as q
 * reads it in its place on the handle. 1 if one was taken (c's state may have changed: SS_OK), -1
 * if taken and c reads no more (SS_STOP), 0 if none, 2 if one waits for a message c sent nested
 * before it to be answered or to call back (what c sent after it waits too). */
int callback_unasked_answer_loop(struct gw *g, struct client *c, uint64_t before);
/* c's held answers sent before its first request not yet done (all, if none) are dropped: q's
 * main loop reads them once those requests are done, nobody asking. */
void callback_unasked_drop_loop(struct gw *g, struct client *c);
/* A message of c numbered seq was found bad: the answers it sent after that one, held, are
 * forgotten (q reads nothing after a bad message). */
void callback_unasked_forget_loop(struct client *c, uint64_t seq);
/* A callback of c's running request qgate answered for it (what it could not be shown): an answer
 * c sent ahead, before any callback asked, goes with it, if none older waits for one. */
void callback_refused_loop(struct client *c);
/* c reads nothing more (gone, or stopped by a bad message): once what it sent is framed and no
 * answer it sent is held, the calls it owes are told no answer comes. */
void callback_gone_calls_loop(struct gw *g, struct client *c);
/* Does an answer c sent ahead wait (callback_unasked_answer_loop's 2)? What it sends meanwhile is
 * held or queued behind it, not answered or nested at once. */
int callback_ahead_waits_loop(struct gw *g, const struct client *c);
/* A reply to a message c sent nested has gone to it: an answer it sent ahead, waiting for that, is
 * read now, and what it sent after goes on. */
void callback_nested_replied_loop(struct gw *g, struct client *c);
/* The number of the request the first answer c holds was sent after (UINT64_MAX: none held). */
uint64_t callback_unasked_after_loop(const struct client *c);
/* May a worker call c back now? While it is ready; or after it shut its side, while it still
 * takes output (q writes the callback to the socket, and reads an answer sent before off the
 * handle; without one, the worker is told at once that none comes). */
int callback_may_call_loop(const struct client *c);
/* May an answer from c still come? While it is ready, or holds one it sent before. */
int callback_answer_may_come_loop(struct gw *g, struct client *c);
/* What the gateway answered c nested goes, in order, as far as it may now. */
void request_nested_flush_loop(struct gw *g, struct client *c);
/* The worker what c sends now would run nested on (callback_nest_loop's), or NULL. */
struct conn *callback_nest_worker_loop(struct gw *g, const struct client *c);
/* The innermost of c's callbacks from worker w still owed (cancelled ones too: those whose worker
 * was told no answer comes): the depth it was made at (struct call), or -1 if none. */
int callback_depth_loop(struct gw *g, const struct client *c, const struct conn *w, int cancelled);
/* Does a reply of what c sent nested to worker w, the depth-th of those it owes (1, 2, ...), wait
 * for what the gateway answers c nested inside that call's callback? (q answers those first.) A
 * reply that comes after c has answered a callback since the gateway took such a message may be
 * that of the call that made the callback: it waits (the depth counts what c sent w and w has not
 * read yet too: at 63c4f19 such a reply went ahead, helper round 28c); a bad message's error,
 * after which c sends nothing, by the depth. */
int request_nested_encloses_loop(const struct client *c, const struct conn *w, int depth);
/* The bytes c sent nested that wait unsent in the output of the worker they run on (0: none). */
size_t callback_nest_unsent_loop(struct gw *g, const struct client *c);
/* Does c owe worker w (NULL: any) the answer to a callback? */
int callback_owes_loop(struct gw *g, const struct client *c, const struct conn *w);
/* The error text to c as the reply to a message it sent nested, ahead of anything else. */
void callback_nested_error_loop(struct gw *g, struct client *c, const char *text);
/* The worker c owes its answer was lost (text: the error): a sync message c sent it nested that
 * a reader still checks gets its error now, before those of the calls around it. */
void callback_nested_lost_loop(struct gw *g, struct client *c, const char *text);
/* ... and the n sync calls c made nested on it get text too: hold (its request, which called back,
 * waits for c's answer), each once c has left the callbacks made inside it (c->lost_nested; at
 * once for a call c waits in), as a reply sooner would be taken for one c makes inside such a
 * callback; else at once. */
void callback_nested_lost_calls_loop(struct gw *g, struct client *c, int n, const char *text, int hold);
/* Those of c's lost calls' errors now due, in order (all, if c answers no more callbacks). */
void callback_lost_release_loop(struct gw *g, struct client *c);
/* Worker w sends c a callback: its answer is expected, and c is read until it comes. 0, or -1
 * on ENOMEM. */
int callback_add_loop(struct gw *g, struct client *c, const struct conn *w, int depth, int later);
/* ... what follows the addition (later: the caller's, once its worker waits in the callback):
 * what c sent before it goes nested, and c's reading is seen to. */
void callback_added_loop(struct gw *g, struct client *c);
/* c will not answer w's callbacks (NULL: anyone's): each such worker is told so. */
void callback_cancel_loop(struct gw *g, struct client *c, const struct conn *w);
/* Does a worker wait for c's answer to a callback? */
int callback_owed_loop(struct gw *g, const struct client *c);
/* c owes answers and sends requests instead, past twice client_max_pending: each worker waiting
 * is answered 'qgate: the client sent ... and no answer, so that what c sent is served (and is
 * bounded); its answers, if they come, are dropped. */
void callback_give_up_loop(struct gw *g, struct client *c);
/* A response to a callback validated by a reader (JK_NESTED). */
void callback_checked_loop(struct gw *g, struct job *j);

#endif

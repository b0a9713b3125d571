/* conn.h: connections: the table (id, generation), their sockets, their output (queued bytes,
 * a splice pipe ahead of them, whole messages held for a message boundary), and every list a
 * connection can be on (the flush list, the backlog, a group's queue or idle list, the closed
 * list) and its timers. conn.c is the one module that enters and leaves those lists, and the
 * one close path takes a connection off all of them before its kind's own teardown. */
#ifndef CONN_H
#define CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "buf.h"
#include "gw.h"
#include "loop.h"

enum conn_kind { CONN_CLIENT = 1, CONN_WORKER, CONN_METRICS, CONN_TAIL /* a closed client's last output (tail.h) */ };

struct conn;
struct kipc_hdr;

/* The message being read on a framed connection (stream.c's): its phase, where it goes, how
 * much of it is still to come, and the first bytes of its body (an error's text). */
enum { RD_BOUNDARY = 0, /* between messages (a header may be partly in the input buffer) */
       RD_WHOLE,        /* gathering a whole message in the input buffer */
       RD_BODY };       /* streaming or dropping a body, its header routed */
enum { SR_WHOLE = 0, SR_STREAM, SR_DROP };
#define STREAM_PEEK 80
struct rdstate {
    uint8_t phase;       /* RD_* */
    uint8_t route;       /* SR_* */
    uint8_t type;        /* its kipc type */
    uint8_t npeek;       /* bytes in peek */
    uint64_t left;       /* RD_BODY: body bytes to come */
    uint64_t len;        /* RD_WHOLE: the length of the message being gathered */
    struct conn *to;     /* SR_STREAM: whose output its bytes go to */
    uint8_t peek[STREAM_PEEK]; /* the first bytes of its body */
};


/* What a kind of connection does on the events the connection layer and the stream see. The
 * stream's handlers return SS_OK, SS_STOP or SS_CLOSE (stream.h). */
struct connops {
    struct evops ev;  /* first: a connection is an event source */
    /* Raw input (a handshake, an HTTP request): what has arrived is in c->in. */
    int (*on_bytes)(struct gw *g, struct conn *c);
    /* Framed input: a message's header has arrived: where it goes (stream_route; whole if the
     * kind says nothing). NULL: every message is taken whole. */
    int (*on_header)(struct gw *g, struct conn *c, const struct kipc_hdr *h);
    /* A whole message (its bytes are the kind's now). SS_STOP: it reads nothing more (what
     * else arrived is dropped). */
    int (*on_message)(struct gw *g, struct conn *c, const struct kipc_hdr *h, uint8_t *msg);
    /* What a read brought (or the backlog held) has been framed: the kind goes on with it.
     * SS_STOP: read no more now. NULL: nothing to do. */
    int (*on_framed)(struct gw *g, struct conn *c);
    /* A message streamed or dropped has ended. */
    int (*on_end)(struct gw *g, struct conn *c);
    /* A header that cannot be taken (why: what is wrong with it). */
    int (*on_bad)(struct gw *g, struct conn *c, const char *why);
    /* The input ended: EOF (fin 1: the peer shut its side, which may still read), or a read
     * failed (fin 0; why). NULL: the connection is closed. */
    int (*on_eof)(struct gw *g, struct conn *c, int fin, const char *why);
    /* It stopped reading until another connection's output drains; it reads again. NULL: nothing. */
    void (*on_pause)(struct gw *g, struct conn *c);
    void (*on_resume)(struct gw *g, struct conn *c);
    /* May others' messages go into its output now? NULL: while it is connected. */
    int (*takes_output)(const struct conn *c);
    size_t read_size;     /* a read between messages */
    size_t raw_max;       /* raw input held at most (more is the kind's on_bytes to refuse) */
    uint8_t own_max;      /* the kind's on_header checks max_message itself (a worker's message
                           * over it is refused to whom it was for, the connection kept) */
    uint8_t budget_frames; /* at most frames_budget whole messages per iteration: the rest wait
                           * on the backlog */
    /* The connection is closing (it is already off every list): the kind's own teardown. */
    void (*on_close)(struct gw *g, struct conn *c, const char *why);
    /* Output was written: before, bytes pending (queued, piped, held) before; wrote, how many
     * went. NULL if the kind does not care. */
    void (*on_flushed)(struct gw *g, struct conn *c, size_t before, size_t wrote);
    /* Writing failed (the peer reset or closed). NULL: the connection is closed. */
    void (*on_gone)(struct gw *g, struct conn *c, const char *why);
    /* Free the struct (after the iteration it closed in). */
    void (*free)(struct conn *c);
    /* The connection it waited on (conn_wait_on_loop) has drained some of its output, or gone:
     * it goes on, or waits again. */
    void (*on_wake)(struct gw *g, struct conn *c);
};

#define CONN_TIMERS 2

/* What a connection's timer runs when it is due. */
typedef void (*conn_timer_fn)(struct gw *g, struct conn *c);
struct conn_timer {
    struct timer t;      /* first: the loop's heap holds it */
    struct conn *c;
    conn_timer_fn fn;
};

struct conn {
    struct evsrc ev;     /* first: epoll's data points here; ev.ops is a struct connops */
    uint8_t kind;        /* enum conn_kind */
    uint8_t closing;     /* being closed, or closed for good (doomed) */
    uint8_t doomed;      /* on the closed list: freed at the end of the iteration */
    uint8_t dirty;       /* on the flush list */
    uint8_t want_out;    /* EPOLLOUT registered */
    uint8_t registered;  /* fd is in an epoll set */
    uint8_t in_backlog;  /* on the backlog */
    uint8_t has_pipe;
    uint8_t streaming;   /* a message to this connection is half written into out: whole ones
                          * from elsewhere wait in held */
    uint8_t framed;      /* its input is kdb+ messages (else raw: a handshake, an HTTP request) */
    uint8_t paused;      /* stopped reading until waits_on's output drains (stream_pause_loop) */
    uint8_t paused_any;  /* ... or until waits_on wakes it, whatever its output (stream_wait_wake_loop) */
    uint8_t owes;        /* a worker: it owes broadcasts or fan-out parts (dispatch asks what, then) */
    uint8_t waits_room;  /* on g->room_waiters: the message whose header it sent waits for room
                          * under pending_max (its header kept in in; it reads nothing) */
    uint8_t in_job;      /* a pool job has a message it read (on_message said SS_WAIT): it reads
                          * and frames nothing more until the job's completion lets it go on
                          * (stream_job_done_loop), so that what follows keeps its order */
    uint32_t id, gen;
    int fd;
    uint32_t epoch;      /* its sockets so far: a close (detach) ends one; what was read on the old
                          * socket is never framed as the next one's (a worker reconnects under
                          * the same struct, even from a handler of its own message) */
    uint32_t events;     /* registered epoll mask */
    struct outq out;
    uint64_t out_mark;   /* out.written once what must reach the peer is written: whole messages
                          * and the replies streamed into out; not what is streamed otherwise (a
                          * worker's publishes), which a drain does not wait for */
    struct outq held;    /* whole messages waiting for the message being streamed to end */
    int pipe_rd, pipe_wr; /* bytes spliced from another socket, ahead of everything in out */
    size_t piped, pipe_cap;
    uint64_t spliced;     /* bytes its socket took from the pipe, all told (out.written: from out) */
    size_t flush_high;   /* output pending before a write its kind has not been told of (a splice's,
                          * sent on from the reading side): the next flush reports from there */
    struct inbuf in;
    struct rdstate rd;   /* the message being read (framed) */
    struct conn *waits_on; /* paused: the connection whose output it waits on (on its waiters) */
    int64_t last_read_ms; /* when its socket last gave bytes */
    int64_t last_write_ms; /* when its socket last took bytes */
    struct conn_timer tm[CONN_TIMERS]; /* what each is for is the kind's (client.h, worker.h) */
    struct connq *q;     /* the queue, idle list or waiters it is on, or NULL */
    struct connq waiters; /* connections that stopped reading until this one's output drains */
    TAILQ_ENTRY(conn) qlink;
    TAILQ_ENTRY(conn) dirty_link;
    TAILQ_ENTRY(conn) backlog_link;
    TAILQ_ENTRY(conn) room_link;
    uint64_t room_need;  /* waits_room: the bytes of that message */
    STAILQ_ENTRY(conn) closed_link;
    char name[160];      /* log prefix */
    char why[256];       /* why a handler asked the stream to close it (stream_close) */
};

STAILQ_HEAD(connslist, conn);

static inline const struct connops *conn_ops(const struct conn *c) { return (const struct connops *)c->ev.ops; }

/* Register a new connection of kind (its id and generation) with epoll (workers in the set
 * served between batches). 0 or -1 (fd left to the caller). */
int conn_register_loop(struct gw *g, struct conn *c, const struct connops *ops, int kind, int fd, uint32_t events);
/* The live connection with this id and generation, or NULL (gone or reused). */
struct conn *conn_lookup_loop(struct gw *g, uint32_t id, uint32_t gen);
void conn_set_events_loop(struct gw *g, struct conn *c, uint32_t events);
/* Reading on or off (EPOLLIN | EPOLLRDHUP). */
void conn_set_reading_loop(struct gw *g, struct conn *c, int on);

/* The lists. Each is entered and left here only (these, and conn.c); entering the dirty, backlog
 * or closed list makes the loop's phase for it due (loop_due_loop). They are in the header
 * because a plain request passes them a dozen times: list operations, no decision. */
static inline void conn_mark_dirty_loop(struct gw *g, struct conn *c) /* output queued: flush this iteration */
{
    if (c->dirty || c->closing || c->fd < 0)
        return;
    c->dirty = 1;
    int w = c->kind == CONN_WORKER; /* the workers' list, flushed first */
    TAILQ_INSERT_TAIL(w ? &g->wdirty : &g->dirty, c, dirty_link);
    g->nwdirty += w;
    g->ndirty++;
    loop_due_loop(g, LOOP_DUE_FLUSH);
}
static inline void conn_unmark_dirty_loop(struct gw *g, struct conn *c)
{
    if (!c->dirty)
        return;
    int w = c->kind == CONN_WORKER;
    TAILQ_REMOVE(w ? &g->wdirty : &g->dirty, c, dirty_link);
    g->nwdirty -= w;
    g->ndirty--;
    c->dirty = 0;
}
static inline void conn_backlog_add_loop(struct gw *g, struct conn *c) /* whole messages left over by a budget */
{
    if (c->in_backlog || c->closing)
        return;
    c->in_backlog = 1;
    TAILQ_INSERT_TAIL(&g->backlog, c, backlog_link);
    loop_due_loop(g, LOOP_DUE_BACKLOG);
}
static inline void conn_backlog_remove_loop(struct gw *g, struct conn *c)
{
    if (!c->in_backlog)
        return;
    TAILQ_REMOVE(&g->backlog, c, backlog_link);
    c->in_backlog = 0;
}
/* Wait, in turn, for room for a message of need bytes (reading stops); and leave that wait. */
static inline void conn_room_wait_loop(struct gw *g, struct conn *c, uint64_t need)
{
    c->room_need = need;
    if (!c->waits_room) {
        c->waits_room = 1;
        TAILQ_INSERT_TAIL(&g->room_waiters, c, room_link);
    }
}
static inline void conn_room_leave_loop(struct gw *g, struct conn *c)
{
    if (!c->waits_room)
        return;
    TAILQ_REMOVE(&g->room_waiters, c, room_link);
    c->waits_room = 0;
}
/* If bytes counted against pending_max were given back since it stood at before (output freed:
 * requests written to their worker, or dropped with its connection), a message waiting for
 * room may fit (the dispatch phase's end sees to it). */
static inline void conn_room_given_loop(struct gw *g, size_t before)
{
    if (buf_pending_bytes < before && !TAILQ_EMPTY(&g->room_waiters))
        g->loop.dispatch_pending = 1;
}
/* Take the backlog's oldest off it, or NULL. */
static inline struct conn *conn_backlog_pop_loop(struct gw *g)
{
    struct conn *c = TAILQ_FIRST(&g->backlog);
    if (c)
        conn_backlog_remove_loop(g, c);
    return c;
}
void conn_q_init(struct connq *q);
static inline void conn_queue_out_loop(struct conn *c) /* off whichever queue or list it is on */
{
    if (!c->q)
        return;
    TAILQ_REMOVE(&c->q->h, c, qlink);
    c->q->n--;
    c->q = NULL;
}
static inline void conn_queue_in_loop(struct connq *q, struct conn *c) /* onto a group's queue or idle list */
{
    if (c->q == q)
        return;
    conn_queue_out_loop(c);
    TAILQ_INSERT_TAIL(&q->h, c, qlink);
    q->n++;
    c->q = q;
}
static inline struct conn *connq_first(const struct connq *q) { return TAILQ_FIRST(&q->h); }
static inline struct conn *connq_next(const struct conn *c) { return TAILQ_NEXT(c, qlink); }

/* Its timers: armed and cancelled here (closing cancels them all). */
void conn_timer_fire_loop(struct gw *g, struct timer *t);
static inline void conn_timer_arm_loop(struct gw *g, struct conn *c, int which, int64_t when_ms, conn_timer_fn fn)
{
    c->tm[which].c = c;
    c->tm[which].fn = fn;
    loop_timer_arm_loop(g, &c->tm[which].t, when_ms, conn_timer_fire_loop);
}
static inline void conn_timer_cancel_loop(struct gw *g, struct conn *c, int which)
{
    if (c->tm[which].t.pos)
        loop_timer_cancel_loop(g, &c->tm[which].t);
}
static inline int conn_timer_armed(const struct conn *c, int which) { return c->tm[which].t.pos != 0; }

/* c stops until target's output drains: on target's waiters, woken (its on_wake) by
 * conn_wake_loop, or when target closes or drops its socket. */
void conn_wait_on_loop(struct conn *c, struct conn *target);
/* Wake every connection waiting on target's output. */
void conn_wake_all_loop(struct gw *g, struct conn *target);
static inline void conn_wake_loop(struct gw *g, struct conn *target)
{
    if (target->waiters.h.tqh_last && connq_first(&target->waiters))
        conn_wake_all_loop(g, target);
}

/* Output. */
/* Bytes waiting: queued, piped and held. */
static inline size_t conn_pending(const struct conn *c) { return c->out.bytes + c->piped + c->held.bytes; }
/* Bytes waiting that must reach the peer (a reply's; see out_mark)? */
static inline int conn_owed_unsent(const struct conn *c) { return c->out.written < c->out_mark || c->piped || c->held.bytes; }
/* What is queued in out now must reach the peer. */
static inline void conn_mark_owed(struct conn *c) { c->out_mark = c->out.written + c->out.bytes; }
/* A whole message from elsewhere: into out, or held while a message is being streamed. */
void conn_push_whole_loop(struct gw *g, struct conn *c, struct chunk *ch);
/* The message being streamed into out has ended: what was held goes out now. */
static inline void conn_stream_end_loop(struct gw *g, struct conn *c)
{
    c->streaming = 0;
    if (!c->held.head)
        return;
    outq_append(&c->out, &c->held); /* in the order they came */
    conn_mark_owed(c);
    conn_mark_dirty_loop(g, c);
}
/* Close its splice pipe (made by the stream when it first splices into it). */
void conn_pipe_close_all_loop(struct conn *c);
static inline void conn_pipe_close_loop(struct conn *c)
{
    if (c->has_pipe)
        conn_pipe_close_all_loop(c);
}
/* (Reading and writing it, and the bound on its output: stream.h.) */

/* Take c's socket out of the connection, unwatched: -1 if it has none; the connection goes on
 * without one (the caller closes it or keeps it). */
int conn_take_socket_loop(struct gw *g, struct conn *c);
/* Close the socket but keep the connection (its id stays valid), dropping its output: a client
 * whose input ended while its requests still run. */
void conn_drop_socket_loop(struct gw *g, struct conn *c);
/* The one teardown path: log why, take it off every list and cancel its timers, run its
 * kind's teardown, release the id; freed (clients) at the end of the iteration. */
void conn_close_loop(struct gw *g, struct conn *c, const char *why);
/* A refusal (enum gw_refusal): counted; logged at warn with prefix who, at most one line a
 * second per kind, the next saying how many went unlogged meanwhile. */
void conn_refused_loop(struct gw *g, int kind, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Its name in .qgate.totals[] and the metrics ("busy", ...). */
const char *conn_refusal_name(int kind);
struct listener;
/* The next connection waiting on listener l (non-blocking, close-on-exec), or -1: none now, or
 * an error. On EMFILE or ENFILE with a connection waiting (Linux fails so whether one waits or
 * not) the reserve descriptor is given up to accept and close one connection at once (its peer
 * sees a close, as when q is out of fds), then taken back, so that the level-triggered listener
 * does not wake the loop for ever; if the reserve could not be taken back, the listener stops
 * for 100 ms and tries again. Each connection closed so is counted as refusal kind (enum
 * gw_refusal); none when none waits. Other errors are logged as "WHAT: reason", through lim.
 * With own (a listener's own reserve, open), that one is given up first to the connection, which
 * is returned and kept: *own is -1 then, for the caller to take back once a descriptor is free. */
struct log_limit;
int conn_accept_loop(struct gw *g, struct listener *l, int kind, struct log_limit *lim, const char *what, int *own);
/* A client's or worker's TCP socket set to find a peer gone without a word, as keepalive_idle,
 * keepalive_interval, keepalive_count and tcp_user_timeout say (net_keepalive); other sockets
 * are left alone. A failure is logged (as who) and the connection kept. */
void conn_keepalive_loop(const struct gw *g, int fd, const char *who);
/* Every client and worker connection set again so (a reload that changed those keys). */
void conn_keepalive_all_loop(struct gw *g);
/* Stop watching and close a listener (teardown, SIGTERM). */
void conn_listener_close_loop(struct gw *g, struct listener *l);
/* Put a connection on the closed list (a worker leaving the configuration). */
void conn_free_later_loop(struct gw *g, struct conn *c);
/* Free the connections closed during this iteration (their kind's free). */
void conn_reap_loop(struct gw *g);

struct pool;
struct job;
/* Send job to pool for connection c's request seq: its completion names (id, generation), so
 * one for a connection that has gone, or whose id was reused, is dropped. */
void conn_submit_loop(struct pool *p, struct job *j, const struct conn *c, uint64_t seq);

#endif

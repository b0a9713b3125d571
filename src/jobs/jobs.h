/* jobs.h: the pure functions the reader and writer pools run, and the kinds of completion. */
#ifndef JOBS_H
#define JOBS_H

#include "config.h"
#include "kcodec.h"
#include "pool.h"

/* What the loop does with a completion (struct job.kind). */
enum job_kind {
    JK_COMMAND = 1, /* reader parsed a gateway command: result is an enum gwcmd */
    JK_REPLY,       /* writer made a reply (out) for request seq of the connection */
    JK_AUTH,        /* reader checked credentials: result 1 = accepted */
    JK_CHECK,       /* reader validated request seq's body (in, handed back): result 0 = ok */
    JK_NESTED,      /* reader validated a client's response to a worker's nested request */
    JK_RESOLVE,     /* reader resolved a worker's address (aux[0] its serial): out = sockaddr */
    JK_RELOAD,      /* reader read the config and users files (ctx: struct reload_job) */
    JK_METRICS,     /* writer made the metrics page for the HTTP connection the job names */
    JK_MERGE,       /* writer merged a .qgate.all's replies (out) for request seq: result 1 the
                     * answer is a q error, 2 the gateway's (its text in text) */
    JK_PUSH,        /* reader made a worker's message other than a reply (a publish, a callback)
                     * fit for its client (the worker connection's job: args' push) */
    JK_WREPLY,      /* reader or writer made a worker's reply (out) fit for request seq of the
                     * connection: result 1, the gateway's error in its place (its text in text) */
};

/* A gateway command is short: longer messages that look like one are refused unread. */
#define GWCMD_MAX_LEN 1024

/* The gateway's commands by name, as a reader parses them (X(NAME, "name")); what each does, and
 * who may run it, is a row of gateway/command.c's table. */
#define GWCMDS(X)                                                                                  \
    X(UNKNOWN, "") X(PING, "ping") X(STATS, "stats") X(CLIENTS, "clients") X(RELOAD, "reload")       \
    X(DISCONNECT, "disconnect") X(TOTALS, "totals") X(POOLS, "pools") X(PAUSE, "pause")               \
    X(RESUME, "resume") X(DISABLE, "disable") X(ENABLE, "enable") X(KILL, "kill") X(SHUTDOWN, "shutdown")      \
    X(QUERIES, "queries")
#define GWCMD_ENUM(e, s) GWCMD_##e,
enum gwcmd { GWCMDS(GWCMD_ENUM) GWCMD_N };
#undef GWCMD_ENUM

/* The longest name a command takes as its argument (a group, a worker's address). */
#define GWCMD_ARG_MAX 400

/* What a command's argument is (job_parse_command's aux[1]). */
enum { GWARG_NONE = 0, GWARG_NUM = 1, GWARG_NAME = 2 };
#define GWARG_NULL INT64_MIN /* a GWARG_NUM that is q's null (0N): said as 0N */

/* Does the whole message m (len bytes, uncompressed) start like a gateway command: a string
 * or a functional call whose name (a symbol, or a string as node-q sends one) starts with
 * ".qgate."? A peek at a few bytes, no decoding: 0 if not (a route, jobs_peek_route, is never
 * one); 1 if it does and has a command's shape (at most GWCMD_MAX_LEN bytes; a call of at most
 * one argument); -1 if it starts like one without that shape (refused unread). */
int jobs_peek_command(const uint8_t *m, size_t len);

/* ---- routing forms: (`.qgate.on; `group; query), (`.qgate.all; `group; query[; opts]) ---- */
enum { ROUTE_ON = 1, ROUTE_ALL = 2 };
/* What is wrong with a form that names .qgate.on or .qgate.all (struct route_form.bad). */
enum { ROUTE_OK = 0, ROUTE_BAD_LIST, ROUTE_BAD_COUNT, ROUTE_BAD_GROUP, ROUTE_BAD_QUERY, ROUTE_BAD_OPTS,
       ROUTE_BAD_TRAILING };

/* A routing form as jobs_parse_route read it. Its offsets are into the whole message, and
 * small: the wrapper before the query, and the options after it, are a few dozen bytes. */
struct route_form {
    uint8_t kind;     /* what the first item names: ROUTE_ON, ROUTE_ALL; 0 neither (not a route) */
    uint8_t bad;      /* ROUTE_OK if it is exactly that form, else what is wrong (ROUTE_BAD_*) */
    uint8_t as_list;  /* .qgate.all with `list: the replies' list */
    uint8_t partial;  /* .qgate.all with `partial */
    uint16_t grp;     /* m[grp]: the group's name, a NUL-terminated symbol (1 to CFG_NAME_MAX-1 bytes) */
    uint16_t qoff;    /* m[qoff, len - tail): the query, one whole q object that validates */
    uint32_t tail;    /* bytes after the query (the options) */
};

/* A peek at whole message m (uncompressed): is it a general list whose first item is the name
 * .qgate.on or .qgate.all (a symbol, or a string as node-q sends a name)? ROUTE_ON, ROUTE_ALL,
 * or 0. Reads the first item only: O(1), for the loop at arrival. */
int jobs_peek_route(const uint8_t *m, size_t len);
/* Read whole message m (uncompressed) as q would decode a routing form, walking every item
 * (the query with kvalidate_extent): a general list of 3 items, or 4 for .qgate.all, that end
 * exactly at the end of the message; the name; the group a symbol atom; the query any q
 * object; .qgate.all's 4th item `list, `partial or a symbol vector of both (`list`partial).
 * Returns f->kind if it is exactly that form (then the whole message is one q would accept),
 * -1 if it names a route but is not one (f->kind, f->bad say what it names and what is wrong;
 * it may also be a message q would not accept), 0 if it names no route. */
int jobs_parse_route(const uint8_t *m, size_t len, struct route_form *f);
/* What each kind of job takes and gives besides its bytes (in, out), its context (ctx), its
 * result and text: one typed struct per kind, in the job's args (job_args). */
/* A worker's reply over max_message (its length, unsigned long long): the client's error. */
#define JOB_TOO_LARGE "qgate: reply too large (%llu bytes, over max_message)"
/* a reply or message (%s) over compress_max for a client of capability %d: its size (%llu), and
 * " compressed" (%s) when only its compressed size is known (it is not decompressed to be refused) */
#define JOB_TOO_LARGE_CAP "qgate: %s too large for capability %d (%llu bytes%s, over compress_max)"
/* A reply that would pass hold_max and cannot go as it came (hold_max, long long). */
#define JOB_HOLD_BUSY "qgate: busy: hold_max reached (%lld bytes held whole)"
#define JOB_HOLD_OVER "qgate: too large to hold whole (%llu bytes, over hold_max, %lld bytes)"

union job_args {
    struct job_check {          /* job_validate_msg (JK_CHECK, JK_NESTED) */
        int64_t max;            /* in: the longest message it may declare (decompressed) */
        struct route_form form; /* out: a request's routing form, as read (kind 0: none) */
        uint32_t w_id, w_gen;   /* JK_NESTED: the worker the answer goes to (the loop's, untouched) */
        uint8_t unasked;        /* JK_NESTED: an answer no callback asked for yet: it may be held */
    } check;
    struct job_auth {           /* job_check_credentials: out, when they match */
        int admin, monitor, max_conns, max_inflight;
    } auth;
    struct job_resolve {        /* job_resolve */
        uint64_t serial;        /* the worker (the loop's, untouched) */
        int local_workers;      /* CFG_LOCAL_*: a worker on this host over its Unix socket */
    } resolve;
    struct job_cmd {            /* job_parse_command: out, the command's argument */
        int arg_kind;           /* GWARG_*: a number (num), a name (in out, NUL-terminated), none */
        int64_t num;
        int said;               /* GWCMD_UNKNOWN: text says why in full (a known name's argument
                                 * it cannot take, a message it cannot decode) */
    } cmd;
    struct job_answer {         /* job_encode_command */
        int cmd;                /* enum gwcmd */
        K (*encode)(const void *snap); /* its table from the loop's snapshot (ctx); NULL: 1b */
        int cap;                /* the client's capability */
        uint8_t compress;       /* compressed as q would for a remote client (1 or more) */
    } answer;
    struct job_reply {          /* job_check_reply, job_compress_reply, job_merge */
        int cap;                /* the client's capability */
        int64_t max;            /* the longest a compressed reply may declare */
        uint8_t plain;          /* check: for this host (never compressed) */
        uint8_t compress;       /* merge: compressed for a remote client ... */
        uint8_t push;           /* check: not a reply but a publish or a callback (its texts say
                                 * "message") */
        int64_t compress_max;   /* ... (merge) up to this many bytes; check: a compressed reply's
                                 * bytes, once decompressed, held whole up to this many */
        int64_t merge_max;      /* merge: the replies' bytes, decompressed, up to this many */
    } reply;
    struct job_push {           /* job_check_reply for a worker's publish or callback, or the reply
                                 * to a message its client sent nested (JK_PUSH) */
        struct job_reply reply; /* first: what job_check_reply reads */
        uint32_t to_id, to_gen; /* the client it goes to (the loop's, untouched) */
        uint64_t held;          /* its bytes counted against hold_max until the loop takes it back */
        uint8_t kind;           /* run.c's: a callback refused: the worker gets out, an error; a
                                 * nested reply refused: the client does */
    } push;
};
_Static_assert(sizeof(union job_args) <= sizeof(((struct job *)0)->args), "a job's args hold every kind's");
static inline union job_args *job_args(struct job *j) { return (union job_args *)(void *)j->args; }
static inline const union job_args *job_args_c(const struct job *j) { return (const union job_args *)(const void *)j->args; }

/* What a request is, read as it arrives (on the loop: a peek at a few bytes, and the whole of a
 * small body walked). */
struct jobs_arrival {
    uint8_t unchecked;        /* compressed, or over check_max: validated on a reader before it runs */
    uint8_t route;            /* its first item names .qgate.on or .qgate.all */
    int8_t cmd;               /* jobs_peek_command of a request that is no route (sync or async) */
    struct route_form form;   /* a route read whole here (a small plain one), else kind 0 */
};
/* Read whole message m (h its header) as it arrives: what it is (a), and, unless it is to be
 * validated on a reader (compressed, or over check_max bytes) or is a route read whole, whether
 * q would accept its body (a command's too, before a reader decodes it): 0, or -1 with e saying
 * why. */
struct kerr;
struct kipc_hdr;
int jobs_arrival(const uint8_t *m, const struct kipc_hdr *h, size_t check_max, struct jobs_arrival *a, struct kerr *e);
/* What is wrong with a form (f->bad), and what its kind takes, for 'qgate: bad route: */
const char *jobs_route_why(const struct route_form *f);
const char *jobs_route_usage(const struct route_form *f);


/* reader: j->in holds the credentials "user:password" a client sent, j->ctx the shared users
 * database: j->result = 1 if they match an entry (plain, MD5 or SHA-1, as q -U), else 0; then
 * aux = {admin, max_conns, max_inflight} of the entry and j->text its exact name. */
void job_check_credentials(struct job *j);
/* reader: is the whole message j->in one q would accept (header, then the body validated,
 * decompressed first if need be, within aux[0] bytes)? result 0, or 1 with the reason in
 * j->text. j->in is left in place for the loop to take back. A request (sync or async) is read
 * as a routing form too (jobs_parse_route), what was found put in aux[1..2] for the loop to
 * take with jobs_route_form_of, and a compressed route that is exactly such a form is handed
 * back decompressed in out (so its offsets are into out); aux[1..2] of a response (a client's
 * answer to a callback) are left as they were. */
void job_validate_msg(struct job *j);
/* reader: where a worker's address (j->ctx, a string) is: result 0 with a struct net_addrs in
 * out, its TCP address when it has a host, its Unix socket when it is unix://... or, with
 * aux[1] CFG_LOCAL_UNIX, when the host is this one; -1 with the reason in text. */
void job_resolve(struct job *j);

/* What a reload reads off the loop: the file and overrides in; a built configuration and the
 * users database (or an error) out. */
struct reload_job {
    char path[1024];
    struct cfg_overrides ov;
    struct config *cfg;         /* out: NULL on error */
    struct auth_shared *auth;   /* out: the users file's database, NULL if none */
    char err[512];
};
/* reader: build the configuration (defaults, file, overrides) and load its users file. */
void job_load_config(struct job *j);
/* Free a reload_job and what it still holds (a job's ctx_free). */
void jobs_reload_free(void *ctx);
/* reader: decode the whole message j->in and name the command (j->result, j->text). Its
 * argument's kind in aux[1] (GWARG_*): a number (.qgate.kill[12], (`.qgate.kill; 12)) in
 * aux[0] (-1 if none); a name (.qgate.pause[`rdb], .qgate.pause["rdb"], (`.qgate.pause;
 * `rdb), (".qgate.pause"; "rdb")) in out, NUL-terminated, out_len its length (at most
 * GWCMD_ARG_MAX). An argument of another type, or in a form it cannot read: GWCMD_UNKNOWN,
 * with text saying so (cmd.said), as for a message it cannot decode. */
void job_parse_command(struct job *j);
/* writer: j->out = a response carrying the q error j->text. */
void job_encode_error(struct job *j);
/* writer: j->out = the response to a gateway command: its table or dictionary, made by the
 * command's encode from the loop's snapshot (ctx), or 1b (no encode: it was done). */
void job_encode_command(struct job *j);
/* reader: j->in is a whole response (or, with reply.push, a publish or callback) for a client of
 * capability reply.cap: decompress it if the client cannot take it compressed (capability 0) or
 * must not (reply.plain: it is on this host; reply.max bounds the size it may declare), or make
 * it the q error 'type if it holds values the client's capability cannot carry (guid below 3,
 * timestamp and timespan at 0), as q does. Walks the message without building it. What it
 * cannot pass on (result 1) is out as a response carrying the error (text its text). */
void job_check_reply(struct job *j);
/* writer: j->out = j->in compressed as q compresses for remote peers, or j->in unchanged. */
void job_compress_reply(struct job *j);

/* .qgate.all: the workers' replies (whole messages, as they sent them) in worker order.
 * partial: answer `workers`result!(`$names; merged), names[0..n) the workers' addresses
 * (malloc'd, as the array is; NULL when not partial). */
struct merge_in {
    int n;
    int as_list;
    int partial;
    char **names;
    struct {
        uint8_t *p;
        size_t len;
    } part[];
};
void jobs_merge_in_free(void *ctx);
/* writer: j->ctx a struct merge_in: j->out = the response to send a client of capability
 * j->arg: the replies merged (kmerge.c: q's raze of them), or their list; when partial, the
 * dictionary `workers`result! of the workers' addresses and that, unless it is an error (a q
 * error among the replies, or raze's own), which is the answer then. Compressed when aux[1]
 * says (under aux[2] bytes), checked for an old client as job_check_reply does. aux[0] bounds
 * what a compressed reply may declare. A reply that cannot be read: the q error saying so. */
void job_merge(struct job *j);

#endif

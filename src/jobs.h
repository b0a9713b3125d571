/* jobs.h: the pure functions the reader and writer pools run, and the kinds of completion. */
#ifndef JOBS_H
#define JOBS_H

#include "pool.h"

/* What the loop does with a completion (struct job.kind). */
enum job_kind {
    JK_COMMAND = 1, /* reader parsed a gateway command: result is an enum gwcmd */
    JK_REPLY,       /* writer made a reply (out) for request seq of the connection */
    JK_AUTH,        /* reader checked credentials: result 1 = accepted */
};

#define GWCMDS(X)                                                                          \
    X(UNKNOWN, "") X(PING, "ping") X(STATS, "stats") X(CLIENTS, "clients") X(RELOAD, "reload") \
    X(DISCONNECT, "disconnect")
#define GWCMD_ENUM(e, s) GWCMD_##e,
enum gwcmd { GWCMDS(GWCMD_ENUM) GWCMD_N };
#undef GWCMD_ENUM

/* Does the message body at p (n bytes) start like a gateway command: a string or a
 * functional call whose name starts with ".qgate."? A peek at a few bytes, no decoding. */
int jobs_peek_command(const uint8_t *body, size_t n);

/* Commands that change state or show other users: for users marked admin only. */
int gwcmd_admin_only(int cmd);

/* reader: j->in holds the credentials "user:password" a client sent, j->ctx the shared users
 * database: j->result = 1 if they match an entry (plain, MD5 or SHA-1, as q -U), else 0; then
 * aux = {admin, max_conns, max_inflight} of the entry. */
void job_check_credentials(struct job *j);
/* reader: decode the whole message j->in and name the command (j->result, j->text); a
 * numeric argument (.qgate.disconnect[12]) goes to aux[0], -1 if none. */
void job_parse_command(struct job *j);
/* writer: j->out = a response carrying the q error j->text. */
void job_encode_error(struct job *j);
/* writer: j->out = the response to command j->arg: ping and the admin actions 1b, stats a table
 * from ctx (struct stats_snapshot), clients a table from ctx (struct clients_snapshot). */
void job_encode_command(struct job *j);
/* reader: j->in is a whole response for a client of capability j->arg (below 3): decompress
 * it if the client cannot (capability 0), or make it the q error 'type if it holds values the
 * client's capability cannot carry (guid below 3, timestamp and timespan at 0), as q does. */
void job_check_reply(struct job *j);
/* writer: j->out = j->in compressed as q compresses for remote peers, or j->in unchanged. */
void job_compress_reply(struct job *j);

#endif

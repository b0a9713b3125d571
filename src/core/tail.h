/* tail.h: what a closed connection was still owed. A client closed because its stream broke
 * (a worker lost in the middle of a message to it) keeps what was queued for it ahead of the
 * break: whole replies and publishes, then the part of the cut message. Its socket leaves it
 * with that output, as a connection of its own kind (CONN_TAIL), and the client's teardown
 * (its requests, its runs, its session) happens at once, as for any close. The tail writes its
 * bytes, shuts its side, reads and drops what the peer still sends until the peer closes (as
 * a linger: a close with bytes unread would reset it, and the peer lose what it had not read),
 * and is closed whatever happens once its output accepted no byte for client_stall_timeout
 * (0: no bound, as for a client), or STREAM_LINGER_MS after its shutdown. The peer sees what a
 * q that died in the middle of a message leaves it: what that q had written, then the close. */
#ifndef TAIL_H
#define TAIL_H

#include "conn.h"

/* The client a tail was: until its socket closes, it keeps that client's row in .qgate.clients[]
 * (state closing), its id for .qgate.kill, and its max_clients place (g->ntails). */
struct tail_who {
    uint64_t serial;       /* the client's id, as .qgate.clients[] showed it */
    int64_t connected_ms;  /* when the client was accepted (the loop's clock) */
    char user[64], peer[64], group[64];
};

/* Close c (a client, who) with why, its queued and piped output written out first, on its socket
 * (held messages, waiting for the cut message's end, are dropped). With no output, or no
 * memory for the tail: conn_close_loop's close. */
void tail_close_loop(struct gw *g, struct conn *c, const struct tail_who *who, const char *why);

/* client_stall_timeout changed (a reload): each tail still writing keeps to the new one (0: none),
 * its clock from its last byte taken (from now, where there was no limit). */
void tail_timeouts_reloaded_loop(struct gw *g);
/* The id and generation of the client a tail was (x of kind CONN_TAIL). */
void tail_origin(const struct conn *x, uint32_t *id, uint32_t *gen);
/* Who that client was (x of kind CONN_TAIL). */
const struct tail_who *tail_who(const struct conn *x);
/* The tail still writing whose client had this serial, or NULL. */
struct conn *tail_by_serial_loop(struct gw *g, uint64_t serial);

#endif

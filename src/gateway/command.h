/* command.h: the gateway's own commands (.qgate.*), one row each with what it does. */
#ifndef COMMAND_H
#define COMMAND_H

#include <stdint.h>

#include "kcodec.h"

struct gw;
struct conn;
struct client;
struct req;
struct job;

struct command {
    const char *name;    /* as .qgate.<name> (jobs.h's GWCMDS parses it) */
    uint8_t admin;       /* admins only: it changes state or shows other users */
    /* What it does on the loop: 1 if it has answered (an error) or will (when done), 0 to be
     * answered from this row. NULL: nothing to do. */
    int (*run)(struct gw *g, struct client *cl, struct req *r, const struct job *j);
    /* Its answer: encode's table from the loop's snapshot (freed with snap_free), made on the
     * writer pool; no encode: 1b. */
    void *(*snapshot)(struct gw *g, int admin); /* admin: the rights its request came with */
    void (*snap_free)(void *snap);
    K (*encode)(const void *snap);
};

/* The row of command id (enum gwcmd), or NULL. */
const struct command *command_row(int id);
/* A reader named the gateway command of a client's head request (JK_COMMAND): check who may
 * run it, do what it says, and have a writer make its answer. */
void command_done_loop(struct gw *g, struct job *j);
/* Answer client cl's request seq with command id's answer (its snapshot's table, or 1b). */
void command_answer_loop(struct gw *g, struct client *cl, uint64_t seq, int id);

#endif

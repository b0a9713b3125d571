/* control.h: the operator's commands from q, as PgBouncer's console has them (control.c):
 * .qgate.pools[], and for admins .qgate.pause[`group] / .qgate.resume[`group],
 * .qgate.disable[`host:port] / .qgate.enable[`host:port], .qgate.kill[id] (and its older name
 * .qgate.disconnect[id]) and .qgate.shutdown[]. */
#ifndef CONTROL_H
#define CONTROL_H

#include "gw.h"

struct client;
struct req;
struct job;
struct group;

/* Run the control command that a reader named (j) for cl's head request r, its sender
 * admitted already: 1 if it is answered (an error, a pause that waits, a client killed),
 * 0 if the usual reply is to be made now (1b, or the .qgate.pools[] table: see
 * control_pools_snapshot_loop), or if j is not a control command. */
/* The commands' runs (command.c's table): 1 if answered (an error, or later), 0 to be answered 1b. */
int control_pause_command_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j);
int control_disable_command_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j);
int control_kill_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j);
int control_shutdown_loop(struct gw *g, struct client *cl, struct req *r, const struct job *j);
/* The dispatch phase of the loop: dispatch_all_loop, then every pause whose groups have no
 * run left on a worker is answered 1b. */
/* Pause grp (on: its workers finish what they run and what they were given, nothing new
 * starts: requests wait in its queue, or held) or resume it (off: the held requests go on,
 * dispatch goes on; pauses still waiting for it are answered with an error). Idempotent. by
 * names who asked, for the log. */
void control_pause_loop(struct gw *g, struct group *grp, int on, const char *by);
/* Disable (on) or enable every worker whose address is addr (as .qgate.stats[] shows it), in
 * every group: how many there are. */
int control_disable_loop(struct gw *g, const char *addr, int on, const char *by);
/* The .qgate.pools[] snapshot (a struct pools_snapshot, malloc'd), or NULL. */
void *control_pools_snapshot_loop(struct gw *g);
/* Teardown: the pauses still waiting. */
/* SIGTERM or .qgate.shutdown[]: stop accepting, read nothing more, and exit once everything
 * received is answered (or drain_timeout has passed). */
void control_drain_loop(struct gw *g);
/* The loop's finished phase: the drain is complete (the clients were shut after their last
 * reply byte, and have gone). */
int control_drained_loop(struct gw *g);

#endif

/* gateway.h: the top of the core: a gateway made from its configuration (gateway.c: the
 * listeners, the pools, the worker groups, the loop's phases and completion handlers, the
 * gateway's own commands, signals and draining) and reloaded from it (reload.c). */
#ifndef GATEWAY_H
#define GATEWAY_H

#include <stdint.h>

#include "gw.h"

struct conn;
struct group_cfg;

/* Set up g from cfg: listen, start the pools, make the groups and their workers. 0 or -1
 * (then gw_free). hooks: NULL in production. */
int gw_init(struct gw *g, const struct config *cfg, const char *config_path, const struct cfg_overrides *ov,
            const struct gw_hooks *hooks);
void gw_free(struct gw *g);
/* A group from its configuration, with its workers (at start, and when a reload adds one). */
struct group *gw_add_group_loop(struct gw *g, const struct group_cfg *gc);
/* SIGTERM: stop accepting, stop reading, and exit once everything received is answered (or
 * drain_timeout passes). */
void gw_drain_loop(struct gw *g);

/* ---- reload.c ----------------------------------------------------------------------------- */
/* Read the configuration again (on the reader pool) and apply it: worker sets, users file, live
 * keys. requester (NULL for SIGHUP) is answered for request seq when it is done. One reload
 * runs at a time; asked for meanwhile, one more follows it. -1 if a client already waits for
 * that one, or out of memory. */
int gw_reload_loop(struct gw *g, struct conn *requester, uint64_t seq);
/* A reload job came back (JK_RELOAD). */
void gw_reload_done_loop(struct gw *g, struct job *j);

#endif

/* gateway.h: the top of the core: a gateway made from its configuration (gateway.c: the
 * listeners, the pools, the worker groups, the loop's phases and completion handlers, the
 * gateway's own commands, signals); reloading is reload.h's, draining control.h's. */
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

#endif

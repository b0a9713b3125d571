/* reload.h: the configuration read again (SIGHUP, .qgate.reload[]) and applied live: worker
 * sets, the users file, the keys that need no restart. */
#ifndef RELOAD_H
#define RELOAD_H

#include <stdint.h>

struct gw;
struct conn;
struct job;
struct group;
struct group_cfg;

/* What a reload logs (at warn) when the file changes a key that needs a restart (CFG_RESTART in
 * config.c's cfg_keys; test_config checks that it names each), followed by the keys changed. */
#define RELOAD_RESTART_WARNING                                                                    \
    "reload: port, bind, unix_socket, reuseport, metrics_port, metrics_bind and thread counts change " \
    "only on restart"

/* A group from its configuration, with its workers (at start, and when a reload adds one). */
struct group *reload_add_group_loop(struct gw *g, const struct group_cfg *gc);

/* Its lists set up (at start), and freed (at exit). */
void reload_init(struct gw *g);
void reload_free(struct gw *g);
/* Read the configuration again (on the reader pool) and apply it: worker sets, users file, live
 * keys. requester (NULL for SIGHUP) is answered for request seq when it is done. One reload
 * runs at a time; asked for meanwhile (by any number of signals and clients), one more follows
 * it, reading the file as it is then, and each client who asked meanwhile is answered when that
 * one is done. -1: out of memory. */
int reload_start_loop(struct gw *g, struct conn *requester, uint64_t seq);
/* A reload job came back (JK_RELOAD). */
void reload_done_loop(struct gw *g, struct job *j);

#endif

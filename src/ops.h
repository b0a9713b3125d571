/* ops.h: what an operator sees of a running gateway: the snapshot behind .qgate.stats[] and
 * .qgate.totals[], the Prometheus metrics served over HTTP on metrics_port (a listener owned
 * by the loop, the page rendered on the writer pool), and the summary line logged every
 * stats_period. */
#ifndef OPS_H
#define OPS_H

struct gw;
struct job;
struct config;

/* Setup: the metrics listener (if metrics_port) and the summary timer. 0, or -1 (logged). */
int ops_init(struct gw *g, const struct config *cfg);
/* Teardown: close the listener and every metrics connection. */
void ops_free(struct gw *g);
/* A reload: the summary's period may have changed (the metrics port takes a restart). */
void ops_reloaded_loop(struct gw *g);
/* The .qgate.stats[] rows (struct stats_snapshot) and the metrics (struct metrics_snap):
 * malloc'd, for a writer job's ctx. */
struct stats_snapshot *ops_stats_snapshot_loop(struct gw *g);
struct metrics_snap *ops_snapshot_loop(struct gw *g);

#endif

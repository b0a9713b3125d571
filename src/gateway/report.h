/* report.h: what an operator sees of a running gateway: the snapshot behind .qgate.stats[] and
 * .qgate.totals[], the Prometheus metrics served over HTTP on metrics_port (a listener owned
 * by the loop, the page rendered on the writer pool), and the summary line logged every
 * stats_period. */
#ifndef REPORT_H
#define REPORT_H

struct gw;
struct job;
struct config;

/* Setup: the metrics listener (if metrics_port) and the summary timer. 0, or -1 (logged). */
int report_init(struct gw *g, const struct config *cfg);
/* Teardown: close the listener and every metrics connection. */
/* A reload: the summary's period may have changed (the metrics port takes a restart). */
void report_reloaded_loop(struct gw *g);
/* The .qgate.stats[] rows (struct stats_snapshot) and the metrics (struct metrics_snap):
 * malloc'd, for a writer job's ctx. */
struct stats_snapshot *report_stats_loop(struct gw *g);
struct metrics_snap *report_totals_loop(struct gw *g);
/* The .qgate.queries[] snapshot: every query a group has learned and run (malloc'd). */
struct queries_snapshot *report_queries_loop(struct gw *g);

#endif

/* access.h: the access log, loop side (access_log = PATH): one record per request as it leaves
 * its client's FIFO, handed in batches to a writer-pool job (alog.c) that formats and writes
 * them; one job at a time, so lines stay in order. Reopened on SIGHUP and SIGUSR1 (logrotate)
 * and when a reload changes the path. */
#ifndef ACCESS_H
#define ACCESS_H

#include <stddef.h>

struct gw;
struct job;
struct client;
struct req;

/* Setup: open cfg.access_log (if set). 0, or -1 with the reason in err. */
int access_init(struct gw *g, char *err, size_t errlen);
/* Teardown: write what is held (waiting for a job out), close the file. */
void access_close(struct gw *g);
/* Request r of client c has ended (answered = it ran or was answered, else the connection
 * closed first): counted by outcome (.qgate.totals[], the metrics), and its record if the log
 * is on. */
void access_req_loop(struct gw *g, const struct client *c, const struct req *r, int answered);
/* Reopen the file at cfg.access_log (now, or when the write out comes back). */
void access_reopen_loop(struct gw *g);
/* A write job came back (JK_ALOG). */
void access_done_loop(struct gw *g, struct job *j);
/* An interned copy of s, kept until teardown (worker names outlive workers in records). */
const char *access_name_loop(struct gw *g, const char *s);

#endif

/* access.h: the access log, loop side (access_log = PATH): one record per request as it leaves
 * its client's FIFO, appended to the bounded queue of the access log's own thread (alog.c), which
 * formats, writes, opens and reopens; the loop never waits for it. Reopened on SIGHUP and SIGUSR1
 * (logrotate) and when a reload changes the path. */
#ifndef ACCESS_H
#define ACCESS_H

#include <stddef.h>

struct gw;
struct client;
struct req;
struct alog_counts;

/* Setup: start the access log's thread and open cfg.access_log (if set), waiting a bounded time
 * for the open (a FIFO nobody reads, a hung mount: it goes on, logged). 0, or -1 with the reason
 * in err. */
int access_init(struct gw *g, char *err, size_t errlen);
/* Teardown: give the thread a bounded time to write what is queued (the rest is dropped,
 * counted and logged), end it, close the file. */
void access_close(struct gw *g);
/* Request r of client c has ended (answered = it ran or was answered, else the connection
 * closed first): counted by outcome (.qgate.totals[], the metrics), and its record if the log
 * is on. */
void access_req_loop(struct gw *g, const struct client *c, const struct req *r, int answered);
/* Have the thread reopen the file at cfg.access_log (or close it: empty). Never waits. */
void access_reopen_loop(struct gw *g);
/* Lines written whole, dropped, and write errors so far. */
void access_counts_loop(struct gw *g, struct alog_counts *c);
/* The heap the access log's record buffers hold (tests/sim's accounting). */
size_t access_bytes_loop(struct gw *g);
/* An interned copy of s, kept until teardown (worker names outlive workers in records). */
const char *access_name_loop(struct gw *g, const char *s);

#endif

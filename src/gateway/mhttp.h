/* mhttp.h: the metrics page over HTTP (metrics_port): its listener and connections, a kind of
 * connection conn.c owns (mhttp.c says what a scraper may do and what it costs). */
#ifndef MHTTP_H
#define MHTTP_H

struct gw;
struct job;
struct config;

/* Setup: the listener, if metrics_port is set. 0, or -1 (logged). */
int mhttp_init(struct gw *g, const struct config *cfg);
/* Teardown: every metrics connection closed, the listener too. */
void mhttp_free(struct gw *g);
/* Take a connected socket (from accept, or a test) as a metrics connection from peer (its
 * address, for the per-address limit): 0, or -1 (answered 503 or closed; fd is taken). */
int mhttp_adopt_loop(struct gw *g, int fd, const char *peer);
/* The same for a socket accepted on the metrics port, from its peer's address; one its peer
 * reset before it was accepted is closed, not counted (-1). */
int mhttp_accepted_loop(struct gw *g, int fd);
/* A page came back from the writer (JK_METRICS). */
void mhttp_page_done_loop(struct gw *g, struct job *j);

#endif

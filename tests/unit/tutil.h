/* tutil.h: helpers shared by the unit tests: hex, golden vectors from real q, a PRNG. */
#ifndef TUTIL_H
#define TUTIL_H

#include <stddef.h>
#include <stdint.h>

struct qvec {
    char *expr;     /* the q expression */
    uint8_t *body;  /* -8! of its value, header removed */
    size_t len;
};

/* Load pairs (expression, hex) from tests/data/qpython/NAME (or $QG_TESTDATA/qpython/NAME),
 * relative to the project root. Returns the count, or -1 if the file is absent (callers fail). */
int tutil_load_vectors(const char *name, struct qvec **out);
void tutil_free_vectors(struct qvec *v, int n);
const char *tutil_testdata_dir(void);

/* Decode hex (either case) into a malloc'd buffer. */
uint8_t *tutil_unhex(const char *hex, size_t *len);

/* xorshift64* PRNG with a fixed seed, so failures repeat. */
uint64_t tutil_rand(uint64_t *s);

/* A gateway's configuration for tests that run its loop on socketpairs: defaults, a free port
 * on 127.0.0.1, no Unix socket, errors only in the log, one group "main" with no workers. */
struct config;
void tutil_gw_config(struct config *cfg);

/* A FIFO nobody writes, at a fresh path made from tmpl ("/tmp/NAME.XXXXXX", changed in place);
 * the caller unlinks it. 0, or -1. */
int tutil_mkfifo(char *tmpl);

#endif

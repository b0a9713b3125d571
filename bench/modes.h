/* modes.h: the requests of q/client.q, by their exact q text, shared by qclient and qworker. */
#ifndef MODES_H
#define MODES_H

#include <stdint.h>

#include "kcodec.h"

#define QMODE_ALL_ROWS (-1)
#define QMODE_BIGARG_ROWS 5120000 /* rows of the bigbig/bigsmall argument table */

struct qmode {
    const char *name;   /* as given on the command line: MODE[:ARG] */
    const char *fn;     /* the lambda's q source, exactly as q/client.q writes it */
    int64_t rows;       /* rows of tbl2 selected; QMODE_ALL_ROWS for all */
    int sleep_ms;       /* slow: the worker sleeps first */
    int exit_per_mille; /* killer: the worker exits with this probability */
    unsigned big_arg : 1;   /* argument is the 5,120,000-row symbol table */
    unsigned oneshot : 1;   /* open, query, close in one call */
    unsigned direct : 1;    /* sent as (fn; `ARG), not through .gateway.exec */
    unsigned throws : 1;    /* the function signals its argument */
    unsigned big_print : 1; /* prints "got :: N in" rather than "got :: N rows in" */
};

/* What q/30gw.q sends a worker to run a request (its .gw.run), exactly as written there: the
 * query under protected evaluation, the result posted back async to .gateway.reply. */
#define QMODE_GW_RUN "{[id;q] neg[.z.w] (`.gateway.reply; id; @[{(0b;value x)}; q; {(1b;x)}])}"

extern const struct qmode qmodes[];
extern const int qmodes_count;

/* The mode named name (the part before any ':'), or NULL. */
const struct qmode *qmode_find(const char *name);
/* The first mode whose function is the q text s[0..len), or NULL. */
const struct qmode *qmode_by_fn(const char *s, size_t len);

/* The request q/client.q sends for mode m: (`.gateway.exec; (fn; arg)) or, for direct modes,
 * (fn; arg). arg: `ARG for throwing modes, the big table for big_arg modes (built from seed),
 * else 0. Returns a K tree, NULL on ENOMEM. */
K qmode_request(const struct qmode *m, const char *arg, uint64_t seed);

/* The bigbig argument: ([] a:QMODE_BIGARG_ROWS?`7), random 7-letter symbols from seed. */
K qmode_big_arg(int64_t rows, uint64_t seed);

#endif

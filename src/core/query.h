/* query.h: what a group learns of each query it runs. A query is its message's bytes, named by
 * a hash (query_key); a group keeps QUERY_SLOTS of them, a newer query taking an older one's
 * slot (the slot is the key's low bits). For each: the slowest of its recent runs and whether
 * it calls its client back (pipelining sends nothing behind a query not learned fast), and its
 * totals for .qgate.queries[] (calls, errors, time waiting for a worker and running, bytes in
 * and out, the first bytes of its text). */
#ifndef QUERY_H
#define QUERY_H

#include <stddef.h>
#include <stdint.h>

struct gw;

#define QUERY_SLOTS 1024
#define QUERY_TEXT 64
/* A query's first bytes are hashed, up to this many (and its length); pipelining learns only
 * queries no longer than this. */
#define QUERY_KEY_MAX 4096

struct qslot {
    uint64_t key;        /* 0: empty */
    uint32_t worst_us;   /* its slowest recent run (decaying): pipelining's measure */
    uint8_t calls_back;  /* it called its client back once: never learned fast */
    uint8_t learned;     /* worst_us holds a run */
    char text[QUERY_TEXT]; /* its first bytes, as text */
    uint64_t calls, errors;
    uint64_t wait_us, run_us; /* summed over its calls */
    uint32_t wait_max_us, run_max_us;
    uint64_t bytes_in, bytes_out;
    int64_t last_ms;     /* when a run of it last ended */
};

/* The key of the query in whole message m (len bytes, header included), never 0; the test hook
 * names it when set (tests/sim). */
uint64_t query_key(const struct gw *g, const uint8_t *m, size_t len);
/* The first bytes of the query in whole message m, as a q user would recognise them, into out
 * (QUERY_TEXT bytes, NUL-terminated): a string's text, a symbol, a call's function, or its type. */
void query_text(char *out, const uint8_t *m, size_t len);
/* The functions below take a group's table of QUERY_SLOTS (struct group queries). */
/* A run of query key (message m) begins: a query new to its slot takes it, its text read from m's
 * first bytes. */
void query_begin_loop(struct qslot *t, uint64_t key, const uint8_t *m, size_t len);
/* A run of message m begins: its key (query_key), its entry begun (query_begin_loop). */
uint64_t query_run_loop(const struct gw *g, struct qslot *t, const uint8_t *m, size_t len);
/* A request of query key has ended: answered with a q error or not, after waiting wait_us for
 * a worker and running run_us (0: it never ran), in_bytes as the client sent it, out_bytes of
 * reply. Nothing if its slot has been taken since. */
void query_end_loop(struct qslot *t, uint64_t key, int error, int64_t wait_us, int64_t run_us, uint64_t in_bytes,
                    uint64_t out_bytes, int64_t now_ms);
/* Pipelining's learning: a run of key took us (INT64_MAX: it timed out or went down: slow for
 * a while); key called its client back. */
void query_learn_loop(struct qslot *t, uint64_t key, int64_t us);
void query_calls_back_loop(struct qslot *t, uint64_t key);
/* The slowest recent run of key's query, in us; -1: not learned, or it calls back. */
int64_t query_learned_us(const struct qslot *t, uint64_t key);
/* Forget the totals of every query (.qgate.queries[`reset]); what pipelining learned stays. */
void query_reset_loop(struct qslot *t);

#endif

/* alog.h: the access log's records and the pool job that writes them. The loop appends one
 * binary record per request (access.c); a writer-pool job turns a batch of them into logfmt
 * lines and writes them to the file: no formatting and no write on the loop. */
#ifndef ALOG_H
#define ALOG_H

#include <stddef.h>
#include <stdint.h>

struct job;

/* How a request ended (the outcome= field). */
#define ALOG_OUTCOMES(X) X(OK, "ok") X(ERROR, "error") X(GWERROR, "gwerror") X(GONE, "gone") X(CLOSED, "closed")
#define ALOG_ENUM(e, s) ALOG_##e,
enum alog_outcome { ALOG_OUTCOMES(ALOG_ENUM) ALOG_NOUTCOMES };
#undef ALOG_ENUM

/* One request, as the loop records it. Strings need not be NUL-terminated past their length;
 * each is cut at 255 bytes. */
struct alog_fields {
    int64_t wall_us;           /* when it ended: µs since the epoch */
    uint64_t client;           /* the client's id (.qgate.clients[]) */
    const char *user, *peer, *group, *worker, *error; /* worker: NULL or "" if none ran it */
    int sync;                  /* 1 sync, 0 async */
    int outcome;               /* enum alog_outcome */
    uint64_t req_bytes, reply_bytes;
    int64_t queued_us, run_us;
};

/* Records waiting to be written (a growing block of bytes). All-zero is empty. */
struct alog_buf {
    uint8_t *p;
    size_t len, cap;
    uint64_t n;                /* records in it */
};

/* Its name in the outcome= field and the metrics ("ok", ...). */
const char *alog_outcome_name(int outcome);

/* Append a record of f. 0, or -1 on ENOMEM. */
int alog_append(struct alog_buf *b, const struct alog_fields *f);
void alog_buf_free(struct alog_buf *b);

/* Format the record at p (of a buffer alog_append filled) as one logfmt line ending in '\n'
 * into out (cap bytes, at least ALOG_LINE_MAX); its length. *rec_len = the record's size. */
#define ALOG_LINE_MAX 8192
size_t alog_format(const uint8_t *p, size_t *rec_len, char *out);

/* Open path for appending (created 0640). The fd, or -1 with the reason in err. */
int alog_open(const char *path, char *err, size_t errlen);

/* writer: j->ctx is a struct alog_buf (owned), j->arg the fd: format every record and write
 * them in order. result 0, or the errno of a failed write (j->text says what); aux[0] = lines
 * written. */
void job_alog_write(struct job *j);
/* Free a struct alog_buf given as a job's ctx. */
void alog_buf_ctx_free(void *ctx);

#endif

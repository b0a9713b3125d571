/* alog.h: the access log's records, their lines, and the thread that writes them. The loop
 * appends one binary record per request (access.c); the access log's own thread turns them into
 * logfmt lines and writes them to the file: no formatting, no open and no write on the loop, and
 * none on the writer pool that serves replies. */
#ifndef ALOG_H
#define ALOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
    const char *reason;        /* outcome closed or gone: why it was not answered (NULL: none said) */
    const char *query;         /* access_log_query: its key or first bytes (NULL: no field) */
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

/* Open path for appending (created 0640), O_NONBLOCK (a FIFO with no reader: ENXIO; one that is
 * full: EAGAIN on write). The fd, or -1 with the reason in err. */
int alog_open(const char *path, char *err, size_t errlen);

/* ---- the writer: a thread of its own -------------------------------------------------------------
 * The loop appends records to a bounded queue (a mutex held for a copy, never for a write: the
 * loop never waits for the thread); the thread takes the queue whole, formats the lines, and
 * opens, writes and closes the file, so a full disk, a FIFO nobody reads or a hung mount stalls
 * this thread only. Counted truly: lines = lines that reached the file whole; dropped = records
 * that did not (the queue full, a failed or cut write, no file open, left at exit); errors =
 * failed writes and opens. A line cut by a failed write is ended with a newline before the next
 * one, so a line is never glued to a fragment. */
struct alog_writer;

struct alog_counts {
    uint64_t lines, dropped, errors;
    uint64_t offered;              /* records put (alog_writer_put) */
    uint64_t queued;               /* ...of which not yet lines or dropped */
    uint64_t held;                 /* ...of which a line cut just before its newline (0 or 1): it
                                    * settles when the next write ends it (queued - held: waiting) */
};

/* Start the thread, no file open yet; at most max_queued bytes of records wait for it. NULL on
 * failure (errno set). */
struct alog_writer *alog_writer_start(size_t max_queued);
/* No thread (tests/sim): nothing is done until alog_writer_pump, which does what the thread
 * would (the reopens asked, the records queued) at once, the file's writes going through wr
 * (as write(2): a short count, or -1 with errno). alog_writer_opened and _stop pump first. */
typedef ssize_t alog_write_fn(void *ctx, int fd, const void *p, size_t len);
struct alog_writer *alog_writer_start_manual(size_t max_queued, alog_write_fn *wr, void *ctx);
void alog_writer_pump(struct alog_writer *w);
/* Ask the thread to (re)open path ("" closes the file: the log off). Records put before this go
 * to the file open before, those put after to the new one; if the new one cannot be opened the
 * old one is kept (logged). announce: log "access log reopened: PATH" / "access log off".
 * Never waits for the thread. */
void alog_writer_reopen(struct alog_writer *w, const char *path, int announce);
/* Setup, before the loop runs: wait up to ms for the open asked last. 0 open, -1 it failed (the
 * reason in err), 1 still opening (its outcome is logged when it comes). */
int alog_writer_opened(struct alog_writer *w, int ms, char *err, size_t errlen);
/* Append a record of f for the thread: 0, or (the queue full, or ENOMEM) the record dropped and
 * the number dropped so far. */
uint64_t alog_writer_put(struct alog_writer *w, const struct alog_fields *f);
void alog_writer_counts(struct alog_writer *w, struct alog_counts *c);
/* The heap its record buffers take (they change only in alog_writer_put; tests/sim). */
size_t alog_writer_bytes(struct alog_writer *w);
/* Stop: give the thread up to ms to write what is queued, then end it (cancelled if stuck in a
 * write or an open), count what was left as dropped (its final counts in *c, if not NULL), close
 * the file and free w. A thread that will not end (a hung mount) is left behind, and w with it. */
void alog_writer_stop(struct alog_writer *w, int ms, struct alog_counts *c);

#endif

/* buf.h: byte buffers: output queues of chunks flushed with writev, and input buffers. */
#ifndef BUF_H
#define BUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

/* A piece of output. Its bytes live inline (data[]) or in a malloc'd block it owns (ext). */
struct chunk {
    struct chunk *next;
    uint8_t *p;     /* first byte */
    size_t len;     /* bytes held */
    size_t off;     /* bytes already written */
    size_t cap;     /* room at p (inline chunks can be appended to) */
    uint8_t *ext;   /* owned external block, or NULL */
    struct shared *sh; /* or a share of a block other chunks send too */
    size_t held;    /* bytes it counts in buf_held_bytes (chunk_wrap_held), given back when freed */
    size_t pending; /* bytes it counts in buf_pending_bytes (a request on its worker's queue: until
                     * written), given back when freed */
    uint8_t data[];
};

/* Bytes several chunks send (a broadcast's or a .qgate.all's message, one chunk on each worker's
 * queue): one copy, freed with the last of its holders. Loop only. */
struct shared {
    size_t refs;
    size_t len;
    uint8_t *p; /* owned */
};
/* A shared block of p's first len bytes (p malloc'd, taken; freed on ENOMEM), held once. */
struct shared *buf_shared_wrap(uint8_t *p, size_t len);
static inline void buf_shared_unref(struct shared *s)
{
    if (s && --s->refs == 0) {
        free(s->p);
        free(s);
    }
}

/* A chunk with room for cap bytes inline; NULL on ENOMEM. */
struct chunk *chunk_new(size_t cap);
/* A chunk owning buf (malloc'd), holding its first len bytes; NULL (and buf freed) on ENOMEM. */
static inline struct chunk *chunk_wrap(uint8_t *buf, size_t len)
{
    struct chunk *c = malloc(sizeof *c);
    if (!c) {
        free(buf);
        return NULL;
    }
    *c = (struct chunk){.p = buf, .len = len, .cap = len, .ext = buf};
    return c;
}
/* Bytes held whole for a client, counted process-wide against the gateway's hold_max: replies
 * collected to change them, made replies waiting their turn or in an output queue (loop only). */
extern size_t buf_held_bytes;
static inline void buf_held_add(size_t n) { buf_held_bytes += n; }
static inline void buf_held_sub(size_t n) { buf_held_bytes -= n; }
/* Bytes of clients' requests read whole, counted process-wide against the gateway's
 * pending_max: a message from its header on (room kept for all of it), until it is sent to a
 * worker or answered (loop only); and of them, those of messages over BUF_PENDING_SMALL (the
 * ones that may wait for room). */
#define BUF_PENDING_SMALL 65536
extern size_t buf_pending_bytes, buf_pending_big;
static inline void buf_pending_add(size_t n)
{
    buf_pending_bytes += n;
    buf_pending_big += n > BUF_PENDING_SMALL ? n : 0;
}
static inline void buf_pending_sub(size_t n)
{
    buf_pending_bytes -= n;
    buf_pending_big -= n > BUF_PENDING_SMALL ? n : 0;
}
/* chunk_wrap, the chunk counted in buf_held_bytes until it is freed. */
static inline struct chunk *chunk_wrap_held(uint8_t *buf, size_t len)
{
    struct chunk *c = chunk_wrap(buf, len);
    if (c) {
        c->held = len;
        buf_held_add(len);
    }
    return c;
}
static inline void chunk_free(struct chunk *c)
{
    if (c) {
        buf_held_sub(c->held);
        buf_pending_sub(c->pending);
        if (c->sh)
            buf_shared_unref(c->sh);
        else
            free(c->ext);
        free(c);
    }
}

/* A FIFO of chunks. Valid all-zero, as the calloc'd connections holding it are: hence head and
 * tail by hand rather than an STAILQ, which must be initialised. */
struct outq {
    struct chunk *head, *tail;
    size_t bytes;     /* unwritten bytes */
    uint64_t written; /* bytes written, all told (written + bytes: all ever queued) */
};

static inline void outq_push(struct outq *q, struct chunk *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->bytes += c->len - c->off;
}
/* Queue s's bytes on q without a copy (a share of s); -1 on ENOMEM. */
int outq_share(struct outq *q, struct shared *s);
/* Move every chunk of src to the end of dst, in order; src is left empty. */
void outq_append(struct outq *dst, struct outq *src);
/* Copy len bytes in, into the tail chunk when it has room. 0, or -1 on ENOMEM. */
int outq_copy(struct outq *q, const void *p, size_t len);
/* (Writing a queue out is stream.c's.) */
void outq_clear(struct outq *q);

/* A contiguous input buffer, allocated lazily and given back when empty. The unread bytes
 * are p[off..len): taking a message moves off, so a read full of small messages is never
 * shifted message by message. */
struct inbuf {
    uint8_t *p;
    size_t off, len, cap;
};

static inline uint8_t *inbuf_data(const struct inbuf *b) { return b->p ? b->p + b->off : b->p; }
static inline size_t inbuf_avail(const struct inbuf *b) { return b->len - b->off; }

/* Make room for at least need unread bytes in total (moving them to the front first), growing
 * geometrically. 0, or -1 on ENOMEM. Reading then goes to p + len. */
int inbuf_reserve(struct inbuf *b, size_t need);
/* The same, growing to no more than most unread bytes (most >= need: what the message being
 * gathered will hold whole). */
int inbuf_reserve_upto(struct inbuf *b, size_t need, size_t most);
/* Remove the first n unread bytes and return them as a malloc'd block (the buffer itself when
 * that is all it holds, or when they are over 64 KiB at its front and what follows is no more
 * than they: so large messages are never copied, and the few bytes of a next message do not keep
 * a large buffer; given back what it has spare past them over 64 KiB). NULL on ENOMEM. */
uint8_t *inbuf_take(struct inbuf *b, size_t n);
/* Drop the first n unread bytes. */
void inbuf_consume(struct inbuf *b, size_t n);
/* Free the storage if the buffer is empty (memory follows active connections). */
void inbuf_release_idle(struct inbuf *b);
void inbuf_free(struct inbuf *b);

#endif

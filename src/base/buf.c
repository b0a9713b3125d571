/* buf.c: output chunk queues (writev) and lazily allocated input buffers. */
#include "buf.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define SMALL_CHUNK 4096

struct chunk *chunk_new(size_t cap)
{
    struct chunk *c = malloc(sizeof *c + cap);
    if (!c)
        return NULL;
    *c = (struct chunk){.p = c->data, .cap = cap};
    return c;
}

void outq_append(struct outq *dst, struct outq *src)
{
    if (!src->head)
        return;
    if (dst->tail)
        dst->tail->next = src->head;
    else
        dst->head = src->head;
    dst->tail = src->tail;
    dst->bytes += src->bytes;
    *src = (struct outq){0};
}

int outq_copy(struct outq *q, const void *p, size_t len)
{
    struct chunk *t = q->tail;
    if (t && !t->ext && !t->sh && t->cap - t->len >= len) {
        memcpy(t->p + t->len, p, len);
        t->len += len;
        q->bytes += len;
        return 0;
    }
    struct chunk *c = chunk_new(len > SMALL_CHUNK ? len : SMALL_CHUNK);
    if (!c)
        return -1;
    memcpy(c->p, p, len);
    c->len = len;
    outq_push(q, c);
    return 0;
}

size_t buf_held_bytes;
size_t buf_pending_bytes, buf_pending_big;

struct shared *buf_shared_wrap(uint8_t *p, size_t len)
{
    struct shared *s = malloc(sizeof *s);
    if (!s) {
        free(p);
        return NULL;
    }
    *s = (struct shared){.refs = 1, .len = len, .p = p};
    return s;
}

int outq_share(struct outq *q, struct shared *s)
{
    struct chunk *c = malloc(sizeof *c);
    if (!c)
        return -1;
    *c = (struct chunk){.p = s->p, .len = s->len, .cap = s->len, .sh = s};
    s->refs++;
    outq_push(q, c);
    return 0;
}

void outq_clear(struct outq *q)
{
    for (struct chunk *c = q->head, *n; c; c = n) {
        n = c->next;
        chunk_free(c);
    }
    *q = (struct outq){0};
}

int inbuf_reserve(struct inbuf *b, size_t need) { return inbuf_reserve_upto(b, need, SIZE_MAX); }

int inbuf_reserve_upto(struct inbuf *b, size_t need, size_t most)
{
    if (b->off && b->off + need > b->cap) { /* move the unread bytes to the front first */
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (need <= b->cap - b->off)
        return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < need)
        cap = cap < (1u << 20) ? cap * 2 : cap + cap / 2;
    if (cap > most)
        cap = most;
    if (cap < need)
        cap = need;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

uint8_t *inbuf_take(struct inbuf *b, size_t n)
{
    uint8_t *m, *r = NULL;
    size_t rest = b->len - b->off - n, rcap = rest > 1024 ? rest : 1024;
    if (b->off == 0 && (rest == 0 || (n > 65536 && rest <= n && (r = malloc(rcap))))) {
        /* the buffer goes with them: all it holds, or a big message with a little of the next
         * behind it, which is copied to a buffer of its own */
        if (r)
            memcpy(r, b->p + n, rest);
        m = b->p;
        if (b->cap - n > 65536) { /* (what growing left spare: not held with the message) */
            uint8_t *q = realloc(m, n ? n : 1);
            m = q ? q : m;
        }
        *b = r ? (struct inbuf){.p = r, .len = rest, .cap = rcap} : (struct inbuf){0};
        return m;
    }
    m = malloc(n);
    if (!m)
        return NULL;
    memcpy(m, b->p + b->off, n);
    inbuf_consume(b, n);
    return m;
}

void inbuf_consume(struct inbuf *b, size_t n)
{
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
}

void inbuf_release_idle(struct inbuf *b)
{
    if (b->len == b->off && b->p)
        inbuf_free(b);
}

void inbuf_free(struct inbuf *b)
{
    free(b->p);
    *b = (struct inbuf){0};
}

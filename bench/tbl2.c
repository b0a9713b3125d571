/* tbl2.c: the seed scenario's table, generated quickly from a fixed seed, kept serialised. */
#include "tbl2.h"

#include <stdlib.h>
#include <string.h>

#include "kcodec.h"
#include "kipc.h"
#include "util.h"

#define CKPT_SHIFT 10

int tbl2_build(struct tbl2 *t, int64_t rows, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->col = malloc((size_t)rows * 16 + 16);
    t->ckpt = malloc(((size_t)(rows >> CKPT_SHIFT) + 2) * sizeof(uint64_t));
    if (!t->col || !t->ckpt) {
        tbl2_free(t);
        return -1;
    }
    uint64_t s = seed ? seed : 42;
    uint8_t *p = t->col;
    for (int64_t r = 0; r < rows; r++) {
        if (!(r & ((1 << CKPT_SHIFT) - 1)))
            t->ckpt[r >> CKPT_SHIFT] = (uint64_t)(p - t->col);
        uint64_t v = xorshift64(&s);
        int len = 8 + (int)((v & 0xffff) * 3 >> 16);
        p[0] = KT_CHAR;
        p[1] = 0;
        qg_st32(p + 2, (uint32_t)len);
        p += 6;
        for (int k = 0; k < len; k += 2) {
            v = xorshift64(&s);
            p[k] = (uint8_t)('a' + ((v & 0xffffffff) * 26 >> 32));
            if (k + 1 < len)
                p[k + 1] = (uint8_t)('a' + ((v >> 32) * 26 >> 32));
        }
        p += len;
    }
    t->col_len = (size_t)(p - t->col);
    return 0;
}

void tbl2_free(struct tbl2 *t)
{
    free(t->col);
    free(t->ckpt);
    memset(t, 0, sizeof *t);
}

size_t tbl2_row_off(const struct tbl2 *t, int64_t k)
{
    if (k >= t->rows)
        return t->col_len;
    if (k <= 0)
        return 0;
    size_t o = t->ckpt[k >> CKPT_SHIFT];
    for (int64_t r = k & ~(int64_t)((1 << CKPT_SHIFT) - 1); r < k; r++)
        o += 6 + qg_ld32(t->col + o + 2);
    return o;
}

size_t tbl2_head(const struct tbl2 *t, int64_t k, uint8_t head[TBL2_HEAD_LEN])
{
    static const uint8_t pre[] = {KT_TABLE, 0, KT_DICT, KT_SYM, 0, 1, 0, 0, 0, 'a', 0,
                                  KT_LIST, 0, 1, 0, 0, 0, KT_LIST, 0};
    _Static_assert(8 + sizeof pre + 4 == TBL2_HEAD_LEN, "tbl2 head layout");
    if (k < 0 || k > t->rows)
        k = t->rows;
    size_t total = TBL2_HEAD_LEN + tbl2_row_off(t, k);
    kipc_hdr_write(head, KIPC_RESPONSE, 0, total);
    memcpy(head + 8, pre, sizeof pre);
    qg_st32(head + 8 + sizeof pre, (uint32_t)k);
    return total;
}

uint8_t *tbl2_message(const struct tbl2 *t, int64_t k, size_t *len)
{
    uint8_t head[TBL2_HEAD_LEN];
    size_t n = tbl2_head(t, k, head);
    uint8_t *m = malloc(n);
    if (!m)
        return NULL;
    memcpy(m, head, TBL2_HEAD_LEN);
    memcpy(m + TBL2_HEAD_LEN, t->col, n - TBL2_HEAD_LEN);
    *len = n;
    return m;
}

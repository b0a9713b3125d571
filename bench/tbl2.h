/* tbl2.h: the seed scenario's table, ([] a:N strings of 8-10 random letters), kept serialised. */
#ifndef TBL2_H
#define TBL2_H

#include <stddef.h>
#include <stdint.h>

#define TBL2_HEAD_LEN 31 /* message header and table preamble before the first row */

struct tbl2 {
    int64_t rows;
    uint8_t *col;     /* the column's items, each a serialised char vector */
    size_t col_len;
    uint64_t *ckpt;   /* offset of every 1024th row */
};

/* Build rows random strings from seed (the same seed gives the same table). 0 or -1. */
int tbl2_build(struct tbl2 *t, int64_t rows, uint64_t seed);
void tbl2_free(struct tbl2 *t);
/* Bytes taken by the first k rows (k clamped to the table). */
size_t tbl2_row_off(const struct tbl2 *t, int64_t k);
/* The 31 bytes before the rows of a response holding the first k rows; returns the total
 * message length. */
size_t tbl2_head(const struct tbl2 *t, int64_t k, uint8_t head[TBL2_HEAD_LEN]);
/* The whole response for the first k rows in one malloc'd buffer. */
uint8_t *tbl2_message(const struct tbl2 *t, int64_t k, size_t *len);

#endif

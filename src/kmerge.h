/* kmerge.h: a fan-out's replies merged into one value (kmerge.c says how). */
#ifndef KMERGE_H
#define KMERGE_H

#include "kcodec.h"

/* Merge p[0..n) (the replies in worker order; consumed: p[i] are NULL after) into one value;
 * as_list: the general list of them, as they are. NULL on ENOMEM. */
K kmerge(K *p, int n, int as_list);

/* The same merge done on the bytes of whole messages m[0..n) (uncompressed responses), with
 * no K object built: when they are all little-endian and their merge is an error, `list, one
 * vector type, tables with the same columns of one type each, or keyed tables so. Returns
 * the malloc'd response message (*out_len bytes), byte for byte what encoding kmerge's value
 * would give; NULL when it does not apply (then decode and kmerge) or on ENOMEM. */
uint8_t *kmerge_bytes(const uint8_t *const *m, const size_t *len, int n, int as_list, size_t *out_len);

#endif

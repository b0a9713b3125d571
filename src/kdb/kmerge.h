/* kmerge.h: a fan-out's replies merged into one value (kmerge.c says how). */
#ifndef KMERGE_H
#define KMERGE_H

#include "kcodec.h"

/* Merge p[0..n) (the replies in worker order; consumed: p[i] are NULL after) into one value:
 * the first q error among them, else q's raze of their list (kmerge.c says how, and where it
 * is q's error: a K error object such as 'mismatch or 'type); as_list: the general list of
 * them, as they are. NULL on ENOMEM. */
K kmerge(K *p, int n, int as_list);

/* The same merge done on the bytes of whole messages m[0..n) (uncompressed responses), with
 * no K object built: when each is one whole little-endian object and their merge is an error,
 * `list, a single reply, vectors and atoms of one type, general lists, or tables with the same
 * columns in the same order, each column of one type (a general list column without an
 * attribute). Returns the malloc'd response message (*out_len bytes), byte for byte what
 * encoding kmerge's value would give; NULL when it does not apply (dictionaries and keyed
 * tables, which upsert; () with other lists; types that differ: then decode and kmerge) or on
 * ENOMEM. */
uint8_t *kmerge_bytes(const uint8_t *const *m, const size_t *len, int n, int as_list, size_t *out_len);

#endif

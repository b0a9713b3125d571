/* kmerge.h: a fan-out's replies merged into one value (kmerge.c says how). */
#ifndef KMERGE_H
#define KMERGE_H

#include "kcodec.h"

/* Merge p[0..n) (the replies in worker order; consumed: p[i] are NULL after) into one value;
 * as_list: the general list of them, as they are. NULL on ENOMEM. */
K kmerge(K *p, int n, int as_list);

#endif

/* kfmt.h: a short q-like text of a K object, for the bench tools and tests. */
#ifndef KFMT_H
#define KFMT_H

#include <stddef.h>

#include "kcodec.h"

/* Write a q-console-like rendering of x into buf (truncated to len, always NUL-terminated).
 * Tables render as "table[N] `c1`c2", each column after " | "; lists and vectors longer
 * than 64 items are elided (".."). */
void kfmt(const K x, char *buf, size_t len);

#endif

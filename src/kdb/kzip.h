/* kzip.h: kdb+ IPC message compression (byte-identical to q) and safe decompression. */
#ifndef KZIP_H
#define KZIP_H

#include "qg.h"

#define KZIP_MIN_LEN 2001 /* q compresses only messages of more than 2000 bytes */

/* Compress the whole message m[0..t) (header included) as q does. out must hold t/2 bytes.
 * Returns the compressed message length (its header has byte 2 = 1 and the compressed
 * length), or 0 when the result would not be under half of t, as q then sends it plain. */
size_t kzip_compress(const uint8_t *m, size_t t, uint8_t *out);

/* The uncompressed total length (header included) that a compressed message c[0..clen)
 * declares, or 0 if clen is too short to hold it. byte order from c[0]. */
size_t kzip_uncompressed_len(const uint8_t *c, size_t clen);

/* The most a compressed message of clen bytes can make, header included: a group of 8 items
 * (a flag byte and 8 back-references of 2 bytes each) makes at most 8 x 257 bytes. One declaring
 * more is not well-formed: refused before its buffer is allocated. 0 if clen is too short. */
size_t kzip_max_len(size_t clen);

/* The first bytes of a compressed message's plain body from the first n bytes of its compressed
 * body (after the 8-byte header): into out, at most cap, as far as they are literals in the
 * stream (its first byte, the type, always is in a well-formed one). How many. */
size_t kzip_peek(const uint8_t *body, size_t n, uint8_t *out, size_t cap);

/* Decompress the whole compressed message c[0..clen) into out[0..n), n being
 * kzip_uncompressed_len(c). The result is the plain message (header byte 2 = 0, length n).
 * Never reads or writes outside the two buffers; QG_ERR with *why on any inconsistency
 * (back-reference to an unset slot or past the end, stream shorter or longer than declared). */
qg_status kzip_decompress(const uint8_t *c, size_t clen, uint8_t *out, size_t n,
                          const char **why) QG_MUSTCHECK;

#endif

/* qg.h: status codes and small helpers shared by every qgate module. */
#ifndef QG_H
#define QG_H

#include <stddef.h>
#include <stdint.h>

/* Result of a fallible operation. QG_AGAIN means "not enough input yet". */
typedef enum {
    QG_OK = 0,
    QG_AGAIN = 1,
    QG_ERR = -1,
    QG_ENOMEM = -2,
} qg_status;

#define QG_MUSTCHECK __attribute__((warn_unused_result))
#define QG_UNUSED(x) ((void)(x))
#define QG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define QG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QG_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Invariant checks: abort in debug and test builds, vanish with NDEBUG. */
#ifdef NDEBUG
#define QG_ASSERT(x) ((void)0)
#else
#include <stdio.h>
#include <stdlib.h>
#define QG_ASSERT(x)                                                                \
    do {                                                                            \
        if (!(x)) {                                                                 \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #x); \
            abort();                                                                \
        }                                                                           \
    } while (0)
#endif

/* Little-endian loads and stores; the wire's default order. */
/* Copy src into dst (len bytes, cut and NUL-terminated), upper-case ASCII letters lowered. */
static inline void qg_copy_lower(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; len && i < len - 1 && src[i]; i++)
        dst[i] = (char)(src[i] >= 'A' && src[i] <= 'Z' ? src[i] + 32 : src[i]);
    if (len)
        dst[i] = 0;
}

static inline uint16_t qg_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t qg_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t qg_ld64(const uint8_t *p) { return qg_ld32(p) | ((uint64_t)qg_ld32(p + 4) << 32); }
static inline void qg_st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void qg_st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void qg_st64(uint8_t *p, uint64_t v) { qg_st32(p, (uint32_t)v); qg_st32(p + 4, (uint32_t)(v >> 32)); }

/* Big-endian loads, for peers that send byte order 0. */
static inline uint32_t qg_ld32be(const uint8_t *p)
{
    return (uint32_t)p[3] | ((uint32_t)p[2] << 8) | ((uint32_t)p[1] << 16) | ((uint32_t)p[0] << 24);
}
/* Load a 32-bit value in the order given by a header's byte 0 (1 = little-endian). */
static inline uint32_t qg_ld32o(const uint8_t *p, int le) { return le ? qg_ld32(p) : qg_ld32be(p); }

#endif

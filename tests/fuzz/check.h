/* check.h: the fuzzers' assertion. A property that fails aborts (libFuzzer keeps the input as a
 * crash file) after naming the fuzzer's file, the line and the expression. */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        if (!(x)) {                                                                       \
            fprintf(stderr, "%s: check failed at line %d: %s\n", __FILE__, __LINE__, #x); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#endif

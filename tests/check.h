/* A counting check for the CI table tests: reports the first 30 failures, keeps going. */
#ifndef CUMUX_TESTS_CHECK_H
#define CUMUX_TESTS_CHECK_H

#include <stdio.h>

static unsigned long checks, failures;

#define CHECK(cond, ...)                                                                               \
    do {                                                                                               \
        checks++;                                                                                      \
        if (!(cond)) {                                                                                 \
            failures++;                                                                                \
            if (failures <= 30) {                                                                      \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
                fprintf(stderr, __VA_ARGS__);                                                          \
                fputc('\n', stderr);                                                                   \
            }                                                                                          \
        }                                                                                              \
    } while (0)

#endif

/* The fake driver's own tests (test_fakecuda.c, test_fake_gpus.c): a check that counts its failures and
 * says where. Each test file defines `static int failures;` before including this. */
#ifndef CUMUX_FAKE_CHECK_H
#define CUMUX_FAKE_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                               \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            printf("FAIL line %d: ", __LINE__);                                                        \
            printf(__VA_ARGS__);                                                                       \
            printf("\n");                                                                              \
            failures++;                                                                                \
        }                                                                                              \
    } while (0)
#define CK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

#endif

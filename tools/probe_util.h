/* What the probes share: a monotonic clock in milliseconds, a CUresult's name, a call that must succeed. */
#ifndef CUMUX_PROBE_UTIL_H
#define CUMUX_PROBE_UTIL_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline const char *ename(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

/* A driver call that must succeed: else the line, the call and its error, and the probe ends. */
#define CK(x)                                                                                          \
    do {                                                                                               \
        CUresult r_ = (x);                                                                             \
        if (r_) {                                                                                      \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #x, ename(r_));                               \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

#endif

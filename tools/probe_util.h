/* What the fault probes share: a monotonic clock in milliseconds and a CUresult's name. */
#ifndef CUMUX_PROBE_UTIL_H
#define CUMUX_PROBE_UTIL_H

#include <cuda.h>
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

#endif

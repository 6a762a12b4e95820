/* Shared bits of the benchmark programs (driver API only). */
#ifndef CUMUX_BENCH_UTIL_H
#define CUMUX_BENCH_UTIL_H

#include <cuda.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BCK(call) bench_check((call), #call, __LINE__)

static inline void bench_check(CUresult r, const char *what, int line)
{
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        cuGetErrorName(r, &name);
        fprintf(stderr, "error: line %d: %s returned %d (%s)\n", line, what, (int)r, name ? name : "?");
        exit(1);
    }
}

static inline uint64_t bench_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Host work of `us` microseconds: the CPU busy, as a library preparing its next call keeps it. */
static inline void bench_busy_us(unsigned us)
{
    uint64_t until = bench_ns(CLOCK_MONOTONIC) + (uint64_t)us * 1000;
    while (bench_ns(CLOCK_MONOTONIC) < until) {
    }
}

static inline CUcontext bench_init(void)
{
    CUdevice dev;
    CUcontext ctx;
    BCK(cuInit(0));
    BCK(cuDeviceGet(&dev, 0));
    BCK(cuDevicePrimaryCtxRetain(&ctx, dev));
    BCK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* A kernel of bench_kernels.cu. Loaded as a module (cuModuleLoadData, cuModuleGetFunction), or with
 * BENCH_LIBRARY=1 as a library (cuLibraryLoadData, cuLibraryGetKernel, cuKernelGetFunction), as the CUDA
 * runtime and NVIDIA's libraries load theirs: under cumux the server then holds a library kernel, which it
 * launches as the kernel or as its function (CUMUX_LAUNCH_FUNCTIONS). */
static inline CUfunction bench_function(const char *name)
{
    static void *img;
    static CUmodule mod;
    static CUlibrary lib;
    const char *e = getenv("BENCH_LIBRARY");
    int library = e && e[0] == '1';
    if (!img) {
        FILE *f = fopen(BENCH_FATBIN, "rb");
        if (!f) {
            fprintf(stderr, "error: open %s: %s\n", BENCH_FATBIN, strerror(errno));
            exit(1);
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        img = malloc(n > 0 ? (size_t)n : 1);
        if (!img || n <= 0 || fread(img, 1, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "error: cannot read %s\n", BENCH_FATBIN);
            exit(1);
        }
        fclose(f);
        if (library)
            BCK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
        else
            BCK(cuModuleLoadData(&mod, img));
    }
    CUfunction fn;
    if (library) {
        CUkernel k;
        BCK(cuLibraryGetKernel(&k, lib, name));
        BCK(cuKernelGetFunction(&fn, k));
    } else {
        BCK(cuModuleGetFunction(&fn, mod, name));
    }
    return fn;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif

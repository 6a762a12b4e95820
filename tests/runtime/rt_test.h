/* Harness of the CUDA runtime suite (tests/runtime): result lines, checked calls, seeded data,
 * comparisons against a CPU reference. Header-only: every program is one .cu file built by nvcc.
 *
 * Output contract (read by run.sh): exactly one of
 *   PASS <name>            exit 0
 *   FAIL <name>: <why>     exit 1
 *   SKIP <name>: <why>     exit 77 (no CUDA GPU on this machine)
 * Lines starting with "info " are notes for the log. */
#ifndef CUMUX_RT_TEST_H
#define CUMUX_RT_TEST_H

#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RT_SKIP_CODE 77

static const char *rt_name = "unnamed";

static inline void rt_begin(const char *name)
{
    rt_name = name;
    /* Line buffering, so that the result line and device printf output land in order in logs. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
}

__attribute__((format(printf, 1, 2), noreturn)) static inline void rt_fail(const char *fmt, ...);
static inline void rt_fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", rt_name, buf);
    fflush(NULL);
    exit(1);
}

__attribute__((noreturn)) static inline void rt_pass(void);
static inline void rt_pass(void)
{
    printf("PASS %s\n", rt_name);
    fflush(NULL);
    exit(0);
}

__attribute__((format(printf, 1, 2))) static inline void rt_info(const char *fmt, ...);
static inline void rt_info(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("info %s: %s\n", rt_name, buf);
}

static inline void rt_check_cuda(cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess)
        rt_fail("%s:%d: %s returned %d (%s: %s)", file, line, what, (int)e, cudaGetErrorName(e),
                cudaGetErrorString(e));
}
#define CK(call) rt_check_cuda((call), #call, __FILE__, __LINE__)
/* After a <<<>>> launch: the launch error (configuration, missing image), not the kernel's outcome. */
#define CK_LAUNCH() rt_check_cuda(cudaGetLastError(), "kernel launch (cudaGetLastError)", __FILE__, __LINE__)

/* The first CUDA call of every program. "No GPU" is only: no driver at all, the toolkit's stub driver,
 * cudaErrorNoDevice, or zero devices. Anything else (under cumux, a missing server shows as an
 * initialization or MPS connection error) is a failure: run.sh knows whether a GPU is present. */
/* The fault programs, after launching their faulting kernel: the launch itself must have gone through,
 * the next synchronize must return `want`; prints `fault: got=<error> expected=<error>` (run.sh collects
 * it) and, as info lines, what the context answers afterwards (the error is sticky); passes or fails. */
__attribute__((noreturn)) static inline void rt_fault_expect(cudaError_t want)
{
    cudaError_t launch = cudaGetLastError();
    if (launch != cudaSuccess)
        rt_fail("the launch itself failed (%s), before the kernel ran", cudaGetErrorName(launch));
    cudaError_t got = cudaDeviceSynchronize();
    /* With GPU coredumps on the driver may let the synchronize after the fault succeed and give the error
     * later (docs/faults.md; a device-side assert's showed seconds later on the H200): allowed only when
     * the caller says dumps are on, asking again every 10 ms for up to 10 s. */
    const char *may_pass = getenv("RT_FAULT_SYNC_MAY_PASS");
    if (got == cudaSuccess && may_pass && !strcmp(may_pass, "1")) {
        rt_info("cudaDeviceSynchronize after the fault: cudaSuccess (coredumps on): asking again");
        const struct timespec pause = {0, 10 * 1000000L};
        for (int i = 0; i < 1000 && got == cudaSuccess; i++) {
            nanosleep(&pause, NULL);
            got = cudaDeviceSynchronize();
        }
    }
    printf("fault: got=%s expected=%s\n", cudaGetErrorName(got), cudaGetErrorName(want));
    fflush(stdout);
    rt_info("cudaGetLastError after: %s", cudaGetErrorName(cudaGetLastError()));
    void *p = NULL;
    rt_info("cudaMalloc after: %s", cudaGetErrorName(cudaMalloc(&p, 16)));
    rt_info("cudaDeviceSynchronize again: %s", cudaGetErrorName(cudaDeviceSynchronize()));
    if (got != want)
        rt_fail("cudaDeviceSynchronize returned %s, expected %s", cudaGetErrorName(got), cudaGetErrorName(want));
    rt_pass();
}

static inline void rt_require_gpu(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary ||
        (e == cudaSuccess && n == 0)) {
        printf("SKIP %s: no CUDA GPU (cudaGetDeviceCount: %s, %d device(s))\n", rt_name, cudaGetErrorName(e), n);
        fflush(NULL);
        exit(RT_SKIP_CODE);
    }
    if (e != cudaSuccess)
        rt_fail("cudaGetDeviceCount returned %d (%s: %s)", (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
    /* No cudaSetDevice here: since CUDA 12 it creates the primary context, and a program may want to set
     * device flags first. Device 0 is the default. */
}

static inline void *rt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        rt_fail("out of host memory (%zu bytes)", n);
    return p;
}

static inline uint64_t rt_now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void rt_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* SM clock cycles for about `ms` milliseconds (for spin kernels that make ordering observable). */
static inline long long rt_cycles_for_ms(double ms)
{
    int dev = 0, khz = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    if (khz <= 0)
        khz = 2000000;
    return (long long)(ms * (double)khz);
}

/* Seeded data: xorshift64*, the same sequence on every machine. */
typedef struct {
    uint64_t s;
} rt_rng;

static inline void rt_rng_seed(rt_rng *r, uint64_t seed)
{
    r->s = seed ? seed * 0x9e3779b97f4a7c15ull : 0x853c49e6748fea9bull;
}

static inline uint64_t rt_rng_next(rt_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [-1, 1), 24 significant bits. */
static inline float rt_rng_float(rt_rng *r)
{
    return (float)((double)(rt_rng_next(r) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static inline void rt_fill_float(float *p, size_t n, uint64_t seed, float scale)
{
    rt_rng r;
    rt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        p[i] = rt_rng_float(&r) * scale;
}

/* Poison: all bits set, a NaN as float and as double, so an output that was never written fails. */
static inline void rt_poison(void *p, size_t bytes)
{
    memset(p, 0xff, bytes);
}

/* got[i] must be within atol + rtol * |want[i]| of want[i]; NaN never passes. */
static inline void rt_expect_close(const char *what, const float *got, const double *want, size_t n, double atol,
                            double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i], w = want[i];
        double tol = atol + rtol * fabs(w);
        if (!(fabs(g - w) <= tol))
            rt_fail("%s: element %zu is %.9g, expected %.9g (tolerance %.3g)", what, i, g, w, tol);
    }
}

/* Exact comparison of floats the GPU must reproduce bit for bit (copies, exact arithmetic). */
static inline void rt_expect_equal_f(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            rt_fail("%s: element %zu is %.9g, expected %.9g", what, i, (double)got[i], (double)want[i]);
}

static inline void rt_expect_bytes(const char *what, const void *got, const void *want, size_t n)
{
    const unsigned char *g = (const unsigned char *)got, *w = (const unsigned char *)want;
    for (size_t i = 0; i < n; i++)
        if (g[i] != w[i])
            rt_fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, g[i], w[i]);
}

/* float <-> bfloat16 bits on the host, round to nearest even (the inputs are finite). */
static inline uint16_t rt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float rt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif

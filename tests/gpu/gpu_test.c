#include "gpu_test.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *gt_name = "unnamed";

void gt_begin(const char *name)
{
    gt_name = name;
    /* Line buffering: output of forked children and the parent interleaves sensibly in logs. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
}

static void skip_no_gpu(int rc)
{
    printf("SKIP %s: no CUDA GPU (cuInit returned %d)\n", gt_name, rc);
    exit(GT_SKIP_CODE);
}

/* 0 when a device is usable, else the cuInit code (or 100, CUDA_ERROR_NO_DEVICE, for no devices). */
static int probe(void)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS)
        return (int)r;
    int n = 0;
    r = cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS)
        return (int)r;
    return n > 0 ? 0 : (int)CUDA_ERROR_NO_DEVICE;
}

void gt_require_gpu(void)
{
    int rc = probe();
    if (rc != 0)
        skip_no_gpu(rc);
}

void gt_require_gpu_in_child(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        gt_fail("fork: %s", strerror(errno));
    if (pid == 0)
        _exit(probe() & 0xff);
    int st = 0;
    if (waitpid(pid, &st, 0) < 0)
        gt_fail("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st))
        gt_fail("GPU probe child died (status 0x%x)", st);
    if (WEXITSTATUS(st) != 0)
        skip_no_gpu(WEXITSTATUS(st));
}

void gt_fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", gt_name, buf);
    fflush(NULL);
    exit(1);
}

void gt_pass(void)
{
    printf("PASS %s\n", gt_name);
    fflush(NULL);
    exit(0);
}

const char *gt_err_name(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "?";
    return s;
}

void gt_check(CUresult r, const char *what, const char *file, int line)
{
    if (r != CUDA_SUCCESS)
        gt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)r, gt_err_name(r));
}

void gt_expect(CUresult got, CUresult want, const char *what, const char *file, int line)
{
    if (got != want)
        gt_fail("%s:%d: %s returned %d (%s), expected %d (%s)", file, line, what, (int)got,
                gt_err_name(got), (int)want, gt_err_name(want));
}

CUcontext gt_primary_ctx(int ordinal, CUdevice *dev_out)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, ordinal));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    if (dev_out)
        *dev_out = dev;
    return ctx;
}

void *gt_read_file(const char *path, size_t *size_out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        gt_fail("open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        gt_fail("seek %s: %s", path, strerror(errno));
    long len = ftell(f);
    if (len <= 0)
        gt_fail("%s is empty or unreadable", path);
    rewind(f);
    char *buf = malloc((size_t)len + 1); /* and a NUL after it: PTX text is read as a C string */
    if (!buf)
        gt_fail("out of host memory");
    buf[len] = 0;
    if (fread(buf, 1, (size_t)len, f) != (size_t)len)
        gt_fail("short read of %s", path);
    fclose(f);
    if (size_out)
        *size_out = (size_t)len;
    return buf;
}

CUmodule gt_module_from_file_data(const char *path)
{
    size_t n;
    void *img = gt_read_file(path, &n);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, img));
    free(img);
    return mod;
}

CUlibrary gt_library_from_file_data(const char *path)
{
    size_t n;
    void *img = gt_read_file(path, &n);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    free(img);
    return lib;
}

CUfunction gt_function(CUmodule mod, const char *name)
{
    CUfunction f;
    CUresult r = cuModuleGetFunction(&f, mod, name);
    if (r != CUDA_SUCCESS)
        gt_fail("cuModuleGetFunction(%s) returned %d (%s)", name, (int)r, gt_err_name(r));
    return f;
}

uint64_t gt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gt_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void gt_sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

long long gt_cycles_for_ms(CUdevice dev, double ms)
{
    int khz = 0;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    if (khz <= 0)
        khz = 2000000; /* attribute missing: assume 2 GHz */
    return (long long)(ms * (double)khz);
}

void gt_rng_seed(gt_rng *r, uint64_t seed)
{
    r->s = seed ? seed : 0x853c49e6748fea9bull;
}

/* xorshift64*: fast, and good enough for test data. */
uint64_t gt_rng_next(gt_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

float gt_rng_float(gt_rng *r)
{
    return (float)((double)(gt_rng_next(r) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

void gt_fill_random(void *p, size_t n, uint64_t seed)
{
    gt_rng r;
    gt_rng_seed(&r, seed);
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = gt_rng_next(&r);
        memcpy(b + i, &v, 8);
    }
    if (i < n) {
        uint64_t v = gt_rng_next(&r);
        memcpy(b + i, &v, n - i);
    }
}

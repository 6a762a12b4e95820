/* A client with a device memory limit (cumux run --memory, CUMUX_MEMORY_LIMIT,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, or the server's CUMUX_DEFAULT_MEMORY_LIMIT): it sees a GPU of that
 * size, every way of getting device memory counts against it, past it the call fails with
 * CUDA_ERROR_OUT_OF_MEMORY, and what it holds is real memory (written and read back).
 * Run by tests/test_mem_limit.sh under cumux; alone it means nothing, so it is no test of the suite.
 *   gpu_mem_limit LIMIT_BYTES                      the checks, then exit
 *   gpu_mem_limit LIMIT_BYTES --then NEW_BYTES    the checks, then holds LIMIT/4, prints "HOLDING", waits
 *                                                 for a line on stdin (meanwhile `cumux set PID --memory
 *                                                 NEW`), and checks the new limit */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define MiB (1ull << 20)

static uint64_t limit;

static void check_info(uint64_t want_total, uint64_t held, const char *when)
{
    size_t free_b = 0, total = 0;
    CK(cuMemGetInfo(&free_b, &total));
    if (total != want_total)
        gt_fail("%s: cuMemGetInfo total %zu bytes, want the limit %llu", when, total, (unsigned long long)want_total);
    if (free_b > want_total - held)
        gt_fail("%s: cuMemGetInfo free %zu bytes, more than the limit %llu less the %llu held", when, free_b,
                (unsigned long long)want_total, (unsigned long long)held);
}

/* The memory is real: a pattern written to it reads back. */
static void check_usable(CUdeviceptr p, size_t bytes)
{
    size_t n = bytes / 4 < 4096 ? bytes / 4 : 4096;
    uint32_t *h = malloc(n * 4);
    if (!h)
        gt_fail("malloc");
    CK(cuMemsetD32(p + bytes - n * 4, 0xC0FFEE11u, n));
    CK(cuMemcpyDtoH(h, p + bytes - n * 4, n * 4));
    for (size_t i = 0; i < n; i++)
        if (h[i] != 0xC0FFEE11u)
            gt_fail("word %zu of the last %zu of a %zu-byte allocation reads 0x%x", i, n, bytes, h[i]);
    free(h);
}

int main(int argc, char **argv)
{
    gt_begin("mem_limit");
    if (argc < 2 || !(limit = strtoull(argv[1], NULL, 10)) || limit % (8 * MiB) || limit < 32 * MiB)
        gt_fail("usage: gpu_mem_limit LIMIT_BYTES (a multiple of 8 MiB, 32 MiB or more) [--then NEW_BYTES]");
    uint64_t then = argc == 4 && !strcmp(argv[2], "--then") ? strtoull(argv[3], NULL, 10) : 0;
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    size_t total = 0;
    CK(cuDeviceTotalMem(&total, dev));
    if (total != limit)
        gt_fail("cuDeviceTotalMem %zu bytes, want the limit %llu", total, (unsigned long long)limit);
    check_info(limit, 0, "at the start");

    /* cuMemAlloc: half, then past what is left. */
    CUdeviceptr half, quarter, p;
    CK(cuMemAlloc(&half, limit / 2));
    check_usable(half, limit / 2);
    EXPECT_RC(cuMemAlloc(&p, limit / 2 + MiB), CUDA_ERROR_OUT_OF_MEMORY);
    check_info(limit, limit / 2, "half held");

    /* Stream-ordered: a quarter, then past what is left. */
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAllocAsync(&quarter, limit / 4, s));
    CK(cuStreamSynchronize(s));
    check_usable(quarter, limit / 4);
    EXPECT_RC(cuMemAllocAsync(&p, limit / 4 + MiB, s), CUDA_ERROR_OUT_OF_MEMORY);
    check_info(limit, limit / 2 + limit / 4, "three quarters held");

    /* Pitched, an array and VMM: each past the quarter left. */
    size_t pitch;
    EXPECT_RC(cuMemAllocPitch(&p, &pitch, (size_t)(limit / 8), 4, 4), CUDA_ERROR_OUT_OF_MEMORY);
    /* Rows of 16384 floats (64 KiB: within any GPU's widest 2-D array): limit / 2 bytes. */
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = 16384, .Height = (size_t)(limit / 2 / 65536), .Format = CU_AD_FORMAT_FLOAT,
                                .NumChannels = 1};
    CUarray arr;
    EXPECT_RC(cuArrayCreate(&arr, &ad), CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t vsize = ((limit / 4 + MiB) + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle vh;
    EXPECT_RC(cuMemCreate(&vh, vsize, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    /* Within what is left, each works and counts. */
    CK(cuMemCreate(&vh, gran, &prop, 0));
    check_info(limit, limit / 2 + limit / 4 + gran, "a VMM allocation more");
    CK(cuMemRelease(vh));
    ad.Height = (size_t)(limit / 8 / 65536); /* limit / 8 bytes */
    CK(cuArrayCreate(&arr, &ad));
    check_info(limit, limit / 2 + limit / 4 + limit / 8, "an array more");
    EXPECT_RC(cuMemAlloc(&p, limit / 8 + MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuArrayDestroy(arr));

    /* Freed, it is all there again: exactly the limit at once. */
    CK(cuMemFreeAsync(quarter, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemFree(half));
    check_info(limit, 0, "all freed");
    CK(cuMemAlloc(&p, limit));
    check_usable(p, limit);
    CK(cuMemFree(p));

    if (then) {
        CUdeviceptr held;
        CK(cuMemAlloc(&held, limit / 4));
        printf("HOLDING\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            gt_fail("no line on stdin");
        /* The new limit applies from now on: what is held stays, what is left is the new limit less it. */
        size_t f, t;
        CK(cuMemGetInfo(&f, &t));
        if (t != then)
            gt_fail("after cumux set: cuMemGetInfo total %zu, want %llu", t, (unsigned long long)then);
        if (then > limit / 4) {
            EXPECT_RC(cuMemAlloc(&p, then - limit / 4 + MiB), CUDA_ERROR_OUT_OF_MEMORY);
            CK(cuMemAlloc(&p, then - limit / 4));
            check_usable(p, then - limit / 4);
            CK(cuMemFree(p));
        } else {
            EXPECT_RC(cuMemAlloc(&p, MiB), CUDA_ERROR_OUT_OF_MEMORY);
        }
        CK(cuMemFree(held));
    }
    CK(cuStreamDestroy(s));
    gt_pass();
}

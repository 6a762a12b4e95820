/* Copies in every direction, sync and async, explicit and unified (cuMemcpy), from pageable and
 * two kinds of pinned memory, sizes 1 B .. 256 MiB, aligned and unaligned: byte-exact round trips
 * host -> dev1 -> dev2 -> host, with the bytes around the destination checked untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define MARGIN 64
#define POISON_HOST 0xA5
#define POISON_DEV 0x5A

enum { HOST_PAGEABLE, HOST_ALLOCHOST, HOST_HOSTALLOC, HOST_KINDS };
static const char *host_kind_name[] = {"pageable", "cuMemAllocHost", "cuMemHostAlloc"};
enum { MODE_SYNC, MODE_ASYNC, MODE_UVA, MODE_UVA_ASYNC, MODES };
static const char *mode_name[] = {"HtoD/DtoD/DtoH", "HtoDAsync/DtoDAsync/DtoHAsync", "cuMemcpy",
                                  "cuMemcpyAsync"};

static const size_t sizes[] = {1, 1000003, 4096, 1u << 20, 64u << 20, 256u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAXSIZE (256u << 20)

static CUdeviceptr hp(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

static void *host_alloc(int kind, size_t n)
{
    void *p = NULL;
    switch (kind) {
    case HOST_PAGEABLE:
        p = malloc(n);
        if (!p)
            gt_fail("malloc(%zu) failed", n);
        memset(p, 0, n); /* touch: pages really exist */
        break;
    case HOST_ALLOCHOST:
        CK(cuMemAllocHost(&p, n));
        break;
    default:
        CK(cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE));
        break;
    }
    return p;
}

static void host_free(int kind, void *p)
{
    if (kind == HOST_PAGEABLE)
        free(p);
    else
        CK(cuMemFreeHost(p));
}

static void round_trip(int mode, CUstream s, const unsigned char *src, unsigned char *dst, CUdeviceptr d1,
                       CUdeviceptr d2, size_t n)
{
    switch (mode) {
    case MODE_SYNC:
        CK(cuMemcpyHtoD(d1, src, n));
        CK(cuMemcpyDtoD(d2, d1, n));
        CK(cuMemcpyDtoH(dst, d2, n));
        break;
    case MODE_ASYNC:
        CK(cuMemcpyHtoDAsync(d1, src, n, s));
        CK(cuMemcpyDtoDAsync(d2, d1, n, s));
        CK(cuMemcpyDtoHAsync(dst, d2, n, s));
        CK(cuStreamSynchronize(s));
        break;
    case MODE_UVA:
        CK(cuMemcpy(d1, hp(src), n));
        CK(cuMemcpy(d2, d1, n));
        CK(cuMemcpy(hp(dst), d2, n));
        break;
    default:
        CK(cuMemcpyAsync(d1, hp(src), n, s));
        CK(cuMemcpyAsync(d2, d1, n, s));
        CK(cuMemcpyAsync(hp(dst), d2, n, s));
        CK(cuStreamSynchronize(s));
        break;
    }
}

int main(void)
{
    gt_begin("memcpy");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    int uva = 0;
    CK(cuDeviceGetAttribute(&uva, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
    if (!uva)
        gt_fail("device reports no unified addressing");

    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d1, d2;
    CK(cuMemAlloc(&d1, MAXSIZE + MARGIN));
    CK(cuMemAlloc(&d2, MAXSIZE + MARGIN));

    int trips = 0;
    for (int kind = 0; kind < HOST_KINDS; kind++) {
        unsigned char *src = host_alloc(kind, MAXSIZE + MARGIN);
        unsigned char *dst = host_alloc(kind, MAXSIZE + MARGIN);
        for (size_t si = 0; si < NSIZES; si++) {
            size_t n = sizes[si];
            gt_fill_random(src, n + MARGIN, 1000 + si * 10 + (size_t)kind);
            for (int mode = 0; mode < MODES; mode++) {
                for (int unaligned = 0; unaligned < 2; unaligned++) {
                    /* Unaligned: odd offsets on every side, each different. */
                    size_t hs = unaligned ? 1 : 0, o1 = unaligned ? 3 : 0, o2 = unaligned ? 5 : 0,
                           hd = unaligned ? 7 : 0;
                    memset(dst, POISON_HOST, n + MARGIN);
                    CK(cuMemsetD8(d1, POISON_DEV, n + MARGIN)); /* stale data must not pass */
                    CK(cuMemsetD8(d2, POISON_DEV, n + MARGIN));
                    /* cuMemsetD8 on device memory may still run when it returns (on the legacy stream), and
                     * s does not wait for the legacy stream: without this the poison may land after the
                     * copies (seen once on an H100 under cumux, a 1-byte pageable cuMemcpyAsync) */
                    CK(cuStreamSynchronize(NULL));
                    round_trip(mode, s, src + hs, dst + hd, d1 + o1, d2 + o2, n);
                    if (memcmp(src + hs, dst + hd, n) != 0) {
                        size_t i = 0;
                        while (src[hs + i] == dst[hd + i])
                            i++;
                        gt_fail("%s, %s, %zu bytes, %s: byte %zu is 0x%02x, expected 0x%02x", host_kind_name[kind],
                                mode_name[mode], n, unaligned ? "unaligned" : "aligned", i, dst[hd + i],
                                src[hs + i]);
                    }
                    for (size_t i = 0; i < n + MARGIN; i++) {
                        if (i == hd)
                            i = hd + n; /* skip the copied range */
                        if (dst[i] != POISON_HOST)
                            gt_fail("%s, %s, %zu bytes: host byte %zu outside the copy changed to 0x%02x",
                                    host_kind_name[kind], mode_name[mode], n, i, dst[i]);
                    }
                    trips++;
                }
            }
        }
        host_free(kind, src);
        host_free(kind, dst);
    }

    /* Device bytes outside the last DtoD range must still hold the device poison. */
    unsigned char edge[MARGIN];
    size_t last = sizes[NSIZES - 1];
    CK(cuMemcpyDtoH(edge, d2 + 5 + last, MARGIN - 5));
    for (size_t i = 0; i < MARGIN - 5; i++)
        if (edge[i] != POISON_DEV)
            gt_fail("device byte past a DtoD copy changed to 0x%02x", edge[i]);

    /* A batch of three copies (pageable to device, device to device, device to pinned) in one call. */
    enum { BATCH = 1 << 20 };
    unsigned char *bsrc = malloc(BATCH), *bdst;
    CK(cuMemAllocHost((void **)&bdst, BATCH));
    gt_fill_random(bsrc, BATCH, 4321);
    memset(bdst, 0, BATCH);
    CUdeviceptr dsts[3] = {d1, d2, (CUdeviceptr)(uintptr_t)bdst}, srcs[3] = {(CUdeviceptr)(uintptr_t)bsrc, d1, d2};
    size_t bsizes[3] = {BATCH, BATCH, BATCH}, idx[1] = {0};
    CUmemcpyAttributes at;
    memset(&at, 0, sizeof at);
    at.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    /* Copies within a batch have no order: the chain is three batches of one. */
    for (int k = 0; k < 3; k++)
        CK(cuMemcpyBatchAsync(&dsts[k], &srcs[k], &bsizes[k], 1, &at, idx, 1, s));
    CK(cuStreamSynchronize(s));
    if (memcmp(bsrc, bdst, BATCH) != 0)
        gt_fail("cuMemcpyBatchAsync: the bytes that came back differ");
    EXPECT_RC(cuMemcpyBatchAsync(dsts, srcs, bsizes, 1, &at, idx, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    free(bsrc);
    CK(cuMemFreeHost(bdst));

    CK(cuMemFree(d1));
    CK(cuMemFree(d2));
    CK(cuStreamDestroy(s));
    printf("memcpy: %d round trips byte-exact\n", trips);
    gt_pass();
}

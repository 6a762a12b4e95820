/* cuMemcpy2D and cuMemcpy2DAsync in every direction: pitched device memory, pageable and pinned host
 * memory, offsets (srcXInBytes/srcY), and the bytes between rows left untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

static void check_rows(const uint8_t *got, size_t gpitch, const uint8_t *want, size_t wpitch, size_t w, size_t h,
                       const char *what)
{
    for (size_t y = 0; y < h; y++)
        if (memcmp(got + y * gpitch, want + y * wpitch, w) != 0)
            gt_fail("%s: row %zu differs", what, y);
}

/* Copy a w x h region from pitched host A to device (pitch dpitch), device to device, then back to host B;
 * check B's rows and that B's padding keeps its poison. */
static void round_trip(size_t w, size_t h, size_t hpitch, size_t dpitch, int pinned, int async, CUstream s, uint64_t seed)
{
    size_t hbytes = hpitch * h;
    uint8_t *a, *b;
    if (pinned) {
        CK(cuMemAllocHost((void **)&a, hbytes));
        CK(cuMemHostAlloc((void **)&b, hbytes, 0));
    } else {
        a = malloc(hbytes);
        b = malloc(hbytes);
        if (!a || !b)
            gt_fail("malloc");
    }
    gt_fill_random(a, hbytes, seed);
    memset(b, 0xA5, hbytes);
    CUdeviceptr d1, d2;
    size_t d2pitch = 0;
    CK(cuMemAlloc(&d1, dpitch * h));
    CK(cuMemAllocPitch(&d2, &d2pitch, w, h, 4));
    if (d2pitch < w)
        gt_fail("cuMemAllocPitch gave pitch %zu < width %zu", d2pitch, w);

    CUDA_MEMCPY2D up = {0}, dd = {0}, down = {0};
    up.srcMemoryType = CU_MEMORYTYPE_HOST, up.srcHost = a, up.srcPitch = hpitch;
    up.dstMemoryType = CU_MEMORYTYPE_DEVICE, up.dstDevice = d1, up.dstPitch = dpitch;
    up.WidthInBytes = w, up.Height = h;
    dd.srcMemoryType = CU_MEMORYTYPE_DEVICE, dd.srcDevice = d1, dd.srcPitch = dpitch;
    dd.dstMemoryType = CU_MEMORYTYPE_UNIFIED, dd.dstDevice = d2, dd.dstPitch = d2pitch;
    dd.WidthInBytes = w, dd.Height = h;
    down.srcMemoryType = CU_MEMORYTYPE_DEVICE, down.srcDevice = d2, down.srcPitch = d2pitch;
    down.dstMemoryType = CU_MEMORYTYPE_HOST, down.dstHost = b, down.dstPitch = hpitch;
    down.WidthInBytes = w, down.Height = h;
    if (async) {
        CK(cuMemcpy2DAsync(&up, s));
        CK(cuMemcpy2DAsync(&dd, s));
        CK(cuMemcpy2DAsync(&down, s));
        CK(cuStreamSynchronize(s));
    } else {
        CK(cuMemcpy2D(&up));
        CK(cuMemcpy2DUnaligned(&dd));
        CK(cuMemcpy2D(&down));
    }
    char what[128];
    snprintf(what, sizeof what, "2-D %zux%zu hpitch %zu dpitch %zu %s %s", w, h, hpitch, dpitch,
             pinned ? "pinned" : "pageable", async ? "async" : "sync");
    check_rows(b, hpitch, a, hpitch, w, h, what);
    for (size_t y = 0; y < h; y++)
        for (size_t x = w; x < hpitch; x++)
            if (b[y * hpitch + x] != 0xA5)
                gt_fail("%s: padding byte %zu of row %zu overwritten", what, x, y);

    /* A sub-rectangle with offsets: rows 3.., columns 5.. of the device copy into the start of b. */
    if (h > 4 && w > 8) {
        memset(b, 0xA5, hbytes);
        CUDA_MEMCPY2D sub = down;
        sub.srcXInBytes = 5, sub.srcY = 3, sub.WidthInBytes = w - 5, sub.Height = h - 3;
        CK(cuMemcpy2D(&sub));
        for (size_t y = 0; y < h - 3; y++)
            if (memcmp(b + y * hpitch, a + (y + 3) * hpitch + 5, w - 5) != 0)
                gt_fail("%s: offset copy row %zu differs", what, y);
    }
    CK(cuMemFree(d1));
    CK(cuMemFree(d2));
    if (pinned) {
        CK(cuMemFreeHost(a));
        CK(cuMemFreeHost(b));
    } else {
        free(a);
        free(b);
    }
}

int main(void)
{
    gt_begin("memcpy2d");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static const size_t shapes[][4] = {
        /* width, height, host pitch, device pitch */
        {1, 1, 1, 1},          {17, 5, 33, 64},      {1000, 300, 1024, 1536},
        {4096, 2100, 4100, 4608}, /* more than one staging slot of rows (8 MiB) */
        {3000, 7, 3000, 3000}, /* contiguous: the 1-D path */
    };
    int n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int pinned = 0; pinned < 2; pinned++)
            for (int async = 0; async < 2; async++, n++)
                round_trip(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], pinned, async, s, 1000u + (unsigned)n);
    /* Errors the driver gives at once: pitch smaller than the width. */
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4096));
    uint8_t host[4096];
    CUDA_MEMCPY2D bad = {0};
    bad.srcMemoryType = CU_MEMORYTYPE_HOST, bad.srcHost = host, bad.srcPitch = 16;
    bad.dstMemoryType = CU_MEMORYTYPE_DEVICE, bad.dstDevice = d, bad.dstPitch = 64;
    bad.WidthInBytes = 32, bad.Height = 4;
    EXPECT_RC(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
    printf("memcpy2d: %d shape/memory/sync combinations checked\n", n);
    gt_pass();
}

/* cuMemsetD8/D16/D32 and their Async forms: every element in range set, every byte around it untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define BUF_BYTES ((size_t)8 << 20)

static const size_t counts[] = {1, 3, 4096, 1000003};
static const size_t offsets[] = {0, 1, 7}; /* in elements */

int main(void)
{
    gt_begin("memset");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);

    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, BUF_BYTES));
    unsigned char *orig = malloc(BUF_BYTES), *back = malloc(BUF_BYTES);
    if (!orig || !back)
        gt_fail("out of host memory");
    gt_fill_random(orig, BUF_BYTES, 4242);
    gt_rng r;
    gt_rng_seed(&r, 99);

    int cases = 0;
    for (int width = 1; width <= 4; width *= 2) {
        for (int async = 0; async < 2; async++) {
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                for (size_t oi = 0; oi < sizeof offsets / sizeof offsets[0]; oi++) {
                    size_t count = counts[ci], off = offsets[oi] * (size_t)width;
                    uint32_t v = (uint32_t)gt_rng_next(&r);
                    if (width == 1)
                        v &= 0xff;
                    else if (width == 2)
                        v &= 0xffff;
                    CK(cuMemcpyHtoD(d, orig, BUF_BYTES));
                    CUdeviceptr p = d + off;
                    if (width == 1)
                        CK(async ? cuMemsetD8Async(p, (unsigned char)v, count, s)
                                 : cuMemsetD8(p, (unsigned char)v, count));
                    else if (width == 2)
                        CK(async ? cuMemsetD16Async(p, (unsigned short)v, count, s)
                                 : cuMemsetD16(p, (unsigned short)v, count));
                    else
                        CK(async ? cuMemsetD32Async(p, v, count, s) : cuMemsetD32(p, v, count));
                    if (async)
                        CK(cuStreamSynchronize(s));
                    memset(back, 0, BUF_BYTES);
                    CK(cuMemcpyDtoH(back, d, BUF_BYTES));

                    size_t end = off + count * (size_t)width;
                    for (size_t i = 0; i < count; i++) {
                        uint32_t got = 0;
                        memcpy(&got, back + off + i * (size_t)width, (size_t)width); /* little-endian */
                        if (got != v)
                            gt_fail("cuMemsetD%d%s(count %zu, offset %zu): element %zu is 0x%x, expected 0x%x",
                                    width * 8, async ? "Async" : "", count, off, i, got, v);
                    }
                    if (memcmp(back, orig, off) != 0 || memcmp(back + end, orig + end, BUF_BYTES - end) != 0)
                        gt_fail("cuMemsetD%d%s(count %zu, offset %zu) changed bytes outside its range", width * 8,
                                async ? "Async" : "", count, off);
                    cases++;
                }
            }
        }
    }

    /* Unified addressing: pinned host memory is set through its host pointer, as XLA clears its buffers. */
    uint32_t *pinned;
    CK(cuMemHostAlloc((void **)&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE));
    for (int i = 0; i < 1024; i++)
        pinned[i] = 0xdeadbeefu;
    CK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)(pinned + 8), 0x12345678u, 1000, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 1024; i++) {
        uint32_t want = i >= 8 && i < 1008 ? 0x12345678u : 0xdeadbeefu;
        if (pinned[i] != want)
            gt_fail("cuMemsetD32Async of pinned host memory: word %d is 0x%x, expected 0x%x", i, pinned[i], want);
    }
    CK(cuMemFreeHost(pinned));
    cases++;

    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
    free(orig);
    free(back);
    printf("memset: %d cases checked\n", cases);
    gt_pass();
}

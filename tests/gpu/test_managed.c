/* Managed memory: the CPU writes through the pointer cuMemAllocManaged gave, a kernel computes on it,
 * the CPU reads the result through the same pointer; prefetch and advice are accepted and reported by
 * cuMemRangeGetAttribute; the pointer says it is managed. Checked against the CPU. */
#include <stdint.h>
#include <stdlib.h>

#include "gpu_test.h"

#define N (1 << 20)

int main(void)
{
    gt_begin("managed");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction vec_add = gt_function(mod, "vec_add");
    CUdeviceptr a, b, c;
    CK(cuMemAllocManaged(&a, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CK(cuMemAllocManaged(&b, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CK(cuMemAllocManaged(&c, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    float *ha = (float *)(uintptr_t)a, *hb = (float *)(uintptr_t)b, *hc = (float *)(uintptr_t)c;
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(3 * i);
        hc[i] = -1.0f;
    }
    int managed = 0;
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
    if (!managed)
        gt_fail("cuPointerGetAttribute(IS_MANAGED) of managed memory is 0");
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev};
    CK(cuMemAdvise_v2(a, N * sizeof(float), CU_MEM_ADVISE_SET_READ_MOSTLY, loc));
    CK(cuMemPrefetchAsync_v2(b, N * sizeof(float), loc, 0, NULL));
    CK(cuCtxSynchronize());
    int read_mostly = -1, prefetched = -3;
    CK(cuMemRangeGetAttribute(&read_mostly, sizeof read_mostly, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, a,
                              N * sizeof(float)));
    CK(cuMemRangeGetAttribute(&prefetched, sizeof prefetched, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, b,
                              N * sizeof(float)));
    if (read_mostly != 1 || prefetched != (int)dev)
        gt_fail("range attributes: read-mostly %d (expected 1), last prefetch %d (expected device %d)", read_mostly,
                prefetched, (int)dev);
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    CK(cuLaunchKernel(vec_add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        if (hc[i] != (float)(4 * i))
            gt_fail("c[%d] = %g read by the CPU, expected %d", i, (double)hc[i], 4 * i);
    /* The CPU writes again, the GPU reads: a copy out of managed memory into device memory. */
    for (int i = 0; i < 1024; i++)
        ha[i] = 7.0f;
    CUdeviceptr d;
    float back[1024];
    CK(cuMemAlloc(&d, sizeof back));
    CK(cuMemcpyDtoD(d, a, sizeof back));
    CK(cuMemcpyDtoH(back, d, sizeof back));
    for (int i = 0; i < 1024; i++)
        if (back[i] != 7.0f)
            gt_fail("the GPU read %g at %d after the CPU wrote 7", (double)back[i], i);
    CK(cuMemFree(d));
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuModuleUnload(mod));
    gt_pass();
}

/* Virtual memory management as PyTorch's expandable segments and JAX use it: a reservation of three
 * granules, two physical allocations mapped into it back to back, access granted, then a memset, a
 * kernel and copies across the seam between the two mappings, checked against the CPU. Also what must
 * be refused: mapping outside a reservation or over a mapping, freeing a reservation that still has
 * mappings, cuMemFree of mapped memory, copies to memory no longer mapped; an allocation released while
 * mapped stays usable until it is unmapped; and what a program leaves mapped at exit is freed. A dma-buf
 * descriptor for a range of device memory (cuMemGetHandleForAddressRange). */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"

int main(void)
{
    gt_begin("vmm");
    gt_require_gpu();
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction vec_add = gt_function(mod, "vec_add");

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    size_t gran = 0, rec = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    if (gran == 0 || (gran & (gran - 1)) || rec < gran)
        gt_fail("granularity %zu, recommended %zu", gran, rec);

    /* Two allocations of one granule each, mapped back to back into a reservation of three. */
    CUmemGenericAllocationHandle h1, h2;
    CK(cuMemCreate(&h1, gran, &prop, 0));
    CK(cuMemCreate(&h2, gran, &prop, 0));
    CUmemAllocationProp got;
    CK(cuMemGetAllocationPropertiesFromHandle(&got, h2));
    if (got.type != prop.type || got.location.id != prop.location.id)
        gt_fail("properties from handle: type %d device %d", (int)got.type, got.location.id);
    CUdeviceptr base;
    CK(cuMemAddressReserve(&base, 3 * gran, 0, 0, 0));
    CK(cuMemMap(base, gran, 0, h1, 0));
    CK(cuMemMap(base + gran, gran, 0, h2, 0));
    /* Refused: over a mapping, outside the reservation; an offset into the allocation is not supported
     * (the driver maps whole allocations: NOT_SUPPORTED on the H200, driver 580). */
    EXPECT_RC(cuMemMap(base, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemMap(base + 3 * gran, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemMap(base + 2 * gran, gran, gran, h2, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    /* One mapping at a time, as PyTorch's expandable segments do: the two still make one span. */
    CK(cuMemSetAccess(base, gran, &acc, 1));
    CK(cuMemSetAccess(base + gran, gran, &acc, 1));

    /* Across the seam: a memset, copies, and a kernel whose b straddles the two mappings. */
    size_t count = gran / sizeof(float) / 2;
    CUdeviceptr a = base;                                   /* [0, gran/2): the first mapping */
    CUdeviceptr b = base + gran - count * sizeof(float) / 2; /* [3/4 gran, 5/4 gran): both */
    CUdeviceptr c = base + gran + gran / 2;                 /* [3/2 gran, 2 gran): the second */
    float *ha = malloc(count * sizeof(float)), *hb = malloc(count * sizeof(float)), *hc = malloc(count * sizeof(float));
    if (!ha || !hb || !hc)
        gt_fail("out of host memory");
    CK(cuMemsetD32(base, 0x3f800000u, 2 * gran / 4)); /* 1.0f everywhere */
    CK(cuMemcpyDtoH(hc, base + gran - 64, 128));
    for (int i = 0; i < 32; i++)
        if (hc[i] != 1.0f)
            gt_fail("memset across the seam: element %d = %g", i, (double)hc[i]);
    for (size_t i = 0; i < count; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(2 * i);
    }
    CK(cuMemcpyHtoD(a, ha, count * sizeof(float)));
    CK(cuMemcpyHtoD(b, hb, count * sizeof(float)));
    int nk = (int)count;
    void *args[] = {&a, &b, &c, &nk};
    CK(cuLaunchKernel(vec_add, (unsigned)((count + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(hc, c, count * sizeof(float)));
    memset(hb, 0, count * sizeof(float));
    CK(cuMemcpyDtoH(hb, b, count * sizeof(float)));
    for (size_t i = 0; i < count; i++) {
        if (hb[i] != (float)(2 * i))
            gt_fail("b[%zu] (across the seam) = %g, expected %g", i, (double)hb[i], (double)(2 * i));
        if (hc[i] != (float)(3 * i))
            gt_fail("c[%zu] = %g, expected %g", i, (double)hc[i], (double)(3 * i));
    }

    /* cuMemFree is not how mapped memory goes; a reservation with mappings cannot be freed. */
    EXPECT_RC(cuMemFree(base), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemAddressFree(base, 3 * gran), CUDA_ERROR_INVALID_VALUE);

    /* The access granted, and the allocation behind an address (one more reference to release). */
    unsigned long long flags = 0;
    CK(cuMemGetAccess(&flags, &acc.location, base + gran + 4096));
    if (flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        gt_fail("cuMemGetAccess: %llu, expected read-write", flags);
    CUmemGenericAllocationHandle again;
    CK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(base + gran + 4096)));
    if (again != h2)
        gt_fail("cuMemRetainAllocationHandle gave %llu, the allocation mapped there is %llu", again, h2);
    CK(cuMemRelease(again));

    /* Released while mapped: still usable until it is unmapped. */
    CK(cuMemRelease(h2));
    CK(cuMemsetD32(base + gran, 0x40000000u, gran / 4)); /* 2.0f */
    CK(cuMemcpyDtoH(hc, base + 2 * gran - 16, 16));
    for (int i = 0; i < 4; i++)
        if (hc[i] != 2.0f)
            gt_fail("released but mapped: element %d = %g", i, (double)hc[i]);

    CK(cuMemUnmap(base, gran));
    CK(cuMemUnmap(base + gran, gran));
    /* Unmapped: no longer memory a copy may name. */
    EXPECT_RC(cuMemcpyDtoH(hc, base, 16), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemRelease(h1));
    CK(cuMemAddressFree(base, 3 * gran));
    /* Left behind on purpose: a mapped, accessible allocation in a reservation of its own. Whoever goes
     * away with these must not leak them (under cumux the server frees them; the fake driver's counts
     * check it in CI). */
    CUmemGenericAllocationHandle h3;
    CUdeviceptr left;
    CK(cuMemCreate(&h3, gran, &prop, 0));
    CK(cuMemAddressReserve(&left, 2 * gran, 0, 0, 0));
    CK(cuMemMap(left + gran, gran, 0, h3, 0));
    CK(cuMemSetAccess(left + gran, gran, &acc, 1));
    CK(cuMemsetD32(left + gran, 7, gran / 4));
    CK(cuCtxSynchronize());

    /* A dma-buf descriptor for a range of ordinary device memory, where the device supports them. */
    int dmabuf = 0;
    CK(cuDeviceGetAttribute(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev));
    CUdeviceptr plain;
    CK(cuMemAlloc(&plain, 2u << 20));
    int fd = -1;
    CUresult dr = cuMemGetHandleForAddressRange(&fd, plain, 2u << 20, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (dmabuf) {
        if (dr != CUDA_SUCCESS || fd < 0 || fcntl(fd, F_GETFD) < 0)
            gt_fail("cuMemGetHandleForAddressRange: %s, descriptor %d", gt_err_name(dr), fd);
        close(fd);
    } else if (dr == CUDA_SUCCESS) {
        gt_fail("a dma-buf descriptor where the device says it has none");
    }
    CK(cuMemFree(plain));
    free(ha);
    free(hb);
    free(hc);
    CK(cuModuleUnload(mod));
    gt_pass();
}

/* Unified addressing: no memory of the program lies where its device memory does, so that a pointer's
 * number alone says which it is (cuMemcpy without a direction, cuPointerGetAttribute). Natively the driver
 * holds its device addresses in the process; under cumux the device addresses are the server's, and the
 * shim must hold them in the program too. Device memory of several kinds; then, for each range, a mapping
 * asked for at exactly its address must not be given there, and host buffers allocated afterwards must
 * neither overlap it nor be taken for device memory by a copy. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpu_test.h"

#define NRANGES 6

static void check_held(CUdeviceptr d, size_t n, const char *what)
{
    void *p = mmap((void *)(uintptr_t)d, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, n);
        if ((CUdeviceptr)(uintptr_t)p == d)
            gt_fail("%s at %#llx: the program could map memory at the same address", what, (unsigned long long)d);
    }
}

int main(void)
{
    gt_begin("uva_disjoint");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d[NRANGES];
    size_t n[NRANGES] = {4096, 1 << 20, 64 << 20, 3 << 20, 0, 0};
    const char *what[NRANGES] = {"cuMemAlloc 4 KiB", "cuMemAlloc 1 MiB", "cuMemAlloc 64 MiB", "cuMemAllocAsync 3 MiB",
                                 "VMM mapping", "VMM mapping, second"};
    CK(cuMemAlloc(&d[0], n[0]));
    CK(cuMemAlloc(&d[1], n[1]));
    CK(cuMemAlloc(&d[2], n[2]));
    CK(cuMemAllocAsync(&d[3], n[3], s));
    CK(cuStreamSynchronize(s));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va, bare;
    CK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    /* A reservation with nothing mapped yet is held too: its mappings must find it free. */
    CK(cuMemAddressReserve(&bare, gran, 0, 0, 0));
    check_held(bare, gran, "a VMM reservation not mapped yet");
    CUmemGenericAllocationHandle h[2];
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int i = 0; i < 2; i++) {
        CK(cuMemCreate(&h[i], gran, &prop, 0));
        CK(cuMemMap(va + i * gran, gran, 0, h[i], 0));
        CK(cuMemSetAccess(va + i * gran, gran, &acc, 1));
        d[4 + i] = va + i * gran;
        n[4 + i] = gran;
    }
    for (int i = 0; i < NRANGES; i++)
        check_held(d[i], n[i], what[i]);
    /* Host buffers made now, large and small, never on device memory, and copied to and from right. */
    for (int k = 0; k < 8; k++) {
        size_t hn = k % 2 ? (size_t)(64 << 20) : (size_t)(4096 * (k + 1));
        unsigned char *hbuf = malloc(hn), *back = malloc(hn);
        if (!hbuf || !back)
            gt_fail("malloc(%zu)", hn);
        uint64_t lo = (uint64_t)(uintptr_t)hbuf, hi = lo + hn;
        for (int i = 0; i < NRANGES; i++)
            if (lo < d[i] + n[i] && d[i] < hi)
                gt_fail("a host buffer of %zu bytes at %#llx overlaps %s at %#llx", hn, (unsigned long long)lo, what[i],
                        (unsigned long long)d[i]);
        size_t cn = hn < n[2] ? hn : n[2];
        gt_fill_random(hbuf, cn, 77 + (uint64_t)k);
        memset(back, 0xA5, cn);
        CK(cuMemcpy(d[2], (CUdeviceptr)(uintptr_t)hbuf, cn)); /* directions from the numbers alone */
        CK(cuMemcpy((CUdeviceptr)(uintptr_t)back, d[2], cn));
        if (memcmp(hbuf, back, cn) != 0)
            gt_fail("round trip of %zu bytes through cuMemcpy (host buffer %#llx) differs", cn, (unsigned long long)lo);
        CUmemorytype t = 0;
        CUresult r = cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)hbuf);
        if (r == CUDA_SUCCESS && t == CU_MEMORYTYPE_DEVICE)
            gt_fail("a malloc'd buffer at %#llx is said to be device memory", (unsigned long long)lo);
        free(hbuf);
        free(back);
    }
    for (int i = 0; i < 2; i++) {
        CK(cuMemUnmap(va + i * gran, gran));
        CK(cuMemRelease(h[i]));
    }
    CK(cuMemAddressFree(va, 2 * gran));
    CK(cuMemAddressFree(bare, gran));
    CK(cuMemFreeAsync(d[3], s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 3; i++)
        CK(cuMemFree(d[i]));
    CK(cuStreamDestroy(s));
    gt_pass();
}

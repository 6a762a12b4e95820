/* Issue 10's containment would keep every client allocation in VMM memory exported as a file descriptor
 * (so that it outlives a faulting worker: probe_fault_vmm_share.c). What does that cost against the pool
 * allocations cumuxd makes today? For 2 MiB, 64 MiB and 1 GiB: the mean time of
 *  - pool: cuMemAllocFromPoolAsync + cuMemFreeAsync on one stream (host time of the two calls; a memset
 *    between them, synchronized every 16, outside the timing);
 *  - vmm: cuMemCreate (POSIX FD handle) + cuMemAddressReserve + cuMemMap + cuMemSetAccess +
 *    cuMemExportToShareableHandle, and back (close, cuMemUnmap, cuMemAddressFree, cuMemRelease);
 *  - vmm into a reserved range: the same without the per-allocation reserve (a sub-allocator reserving one
 *    large range up front);
 * and whether a kernel's memset through each pointer works.
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_vmm_alloc_cost.c -o /tmp/pva -lcuda && /tmp/pva */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "probe_util.h"


int main(void)
{
    CUdevice dev;
    probe_primary_context(&dev);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, dev));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    printf("granularity %zu bytes\n", gran);
    static const size_t sizes[] = {2u << 20, 64u << 20, 1u << 30};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        int reps = n >= (1u << 30) ? 8 : 64;
        double pool_ms = 0;
        for (int i = 0; i < reps; i++) {
            CUdeviceptr p;
            double t0 = now_ms();
            CK(cuMemAllocFromPoolAsync(&p, n, pool, s));
            pool_ms += now_ms() - t0;
            CK(cuMemsetD8Async(p, 1, n, s));
            t0 = now_ms();
            CK(cuMemFreeAsync(p, s));
            pool_ms += now_ms() - t0;
            if (i % 16 == 15)
                CK(cuStreamSynchronize(s));
        }
        CK(cuStreamSynchronize(s));
        pool_ms /= reps;
        /* VMM, a reservation each. */
        double create = 0, release = 0;
        for (int i = 0; i < reps; i++) {
            double t0 = now_ms();
            CUmemGenericAllocationHandle h;
            CUdeviceptr p;
            int fd = -1;
            CK(cuMemCreate(&h, n, &prop, 0));
            CK(cuMemAddressReserve(&p, n, 0, 0, 0));
            CK(cuMemMap(p, n, 0, h, 0));
            CK(cuMemSetAccess(p, n, &acc, 1));
            CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            create += now_ms() - t0;
            CK(cuMemsetD8Async(p, 1, n, s));
            CK(cuStreamSynchronize(s));
            t0 = now_ms();
            close(fd);
            CK(cuMemUnmap(p, n));
            CK(cuMemAddressFree(p, n));
            CK(cuMemRelease(h));
            release += now_ms() - t0;
        }
        /* VMM into one range reserved up front. */
        CUdeviceptr range;
        CK(cuMemAddressReserve(&range, n * 2, 0, 0, 0));
        double create2 = 0, release2 = 0;
        for (int i = 0; i < reps; i++) {
            double t0 = now_ms();
            CUmemGenericAllocationHandle h;
            int fd = -1;
            CUdeviceptr p = range + (i % 2) * n;
            CK(cuMemCreate(&h, n, &prop, 0));
            CK(cuMemMap(p, n, 0, h, 0));
            CK(cuMemSetAccess(p, n, &acc, 1));
            CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            create2 += now_ms() - t0;
            CK(cuMemsetD8Async(p, 1, n, s));
            CK(cuStreamSynchronize(s));
            t0 = now_ms();
            close(fd);
            CK(cuMemUnmap(p, n));
            CK(cuMemRelease(h));
            release2 += now_ms() - t0;
        }
        CK(cuMemAddressFree(range, n * 2));
        printf("%7zu MiB: pool alloc+free %.3f ms; vmm create+reserve+map+access+export %.3f ms, "
               "release %.3f ms; into a reserved range %.3f ms, release %.3f ms\n",
               n >> 20, pool_ms, create / reps, release / reps, create2 / reps, release2 / reps);
    }
    printf("SUMMARY done\n");
    return 0;
}

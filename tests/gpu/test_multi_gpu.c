/* One program on several GPUs: a context, a module, memory, a stream and a kernel on each of the first two
 * (GT_MULTI_GPUS: more), work in flight on all at once, each context synchronized alone; copies between
 * them (cuMemcpyPeer, cuMemcpyPeerAsync, cuMemcpyDtoD across); a stream of one waiting for an event of the
 * other; memory of one freed while the other's context is current; a host function on the second's
 * stream; peer access (a kernel of one GPU on the other's memory) and copies of another GPU's memory on a
 * GPU's own stream; VMM memory and a dma-buf descriptor on GPU 1; a library loaded once running on each GPU with its own globals. Every result against the CPU.
 * Skips where fewer than two GPUs are seen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "gpu_test.h"

#define N (1 << 18)
#define MAX_GPUS 4

struct gpu {
    CUcontext ctx;
    CUdevice dev;
    CUmodule mod;
    CUfunction add;
    CUstream s;
    CUdeviceptr a, b, c;
    float *ha, *hb, *hc;
};

static void on_host(void *p)
{
    *(volatile int *)p = 42;
}

static void check_sum(const struct gpu *g, int k)
{
    for (int i = 0; i < N; i++)
        if (g->hc[i] != g->ha[i] + g->hb[i])
            gt_fail("GPU %d: c[%d] = %g, expected %g", k, i, (double)g->hc[i], (double)(g->ha[i] + g->hb[i]));
}

int main(void)
{
    gt_begin("multi_gpu");
    gt_require_gpu();
    int count = 0;
    CK(cuDeviceGetCount(&count));
    if (count < 2) {
        printf("SKIP multi_gpu: %d GPU seen, two needed\n", count);
        return GT_SKIP_CODE;
    }
    const char *want = getenv("GT_MULTI_GPUS");
    int n = want ? atoi(want) : 2;
    if (n < 2 || n > MAX_GPUS || n > count)
        n = count < 2 ? count : 2;
    size_t bytes = (size_t)N * sizeof(float);
    struct gpu g[MAX_GPUS];
    memset(g, 0, sizeof g);
    for (int k = 0; k < n; k++) {
        g[k].ctx = gt_primary_ctx(k, &g[k].dev);
        CUdevice cur;
        CK(cuCtxGetDevice(&cur));
        if (cur != g[k].dev)
            gt_fail("GPU %d: the current context's device is %d", k, (int)cur);
        g[k].mod = gt_module_from_file_data(GT_FATBIN);
        g[k].add = gt_function(g[k].mod, "vec_add");
        CK(cuStreamCreate(&g[k].s, CU_STREAM_NON_BLOCKING));
        CK(cuMemAlloc(&g[k].a, bytes));
        CK(cuMemAlloc(&g[k].b, bytes));
        CK(cuMemAlloc(&g[k].c, bytes));
        g[k].ha = malloc(bytes);
        g[k].hb = malloc(bytes);
        g[k].hc = malloc(bytes);
        if (!g[k].ha || !g[k].hb || !g[k].hc)
            gt_fail("out of host memory");
        gt_rng r;
        gt_rng_seed(&r, 1000 + (uint64_t)k);
        for (int i = 0; i < N; i++) {
            g[k].ha[i] = gt_rng_float(&r) * 100.0f;
            g[k].hb[i] = gt_rng_float(&r) * 100.0f + (float)k;
        }
        CK(cuMemcpyHtoDAsync(g[k].a, g[k].ha, bytes, g[k].s));
        CK(cuMemcpyHtoDAsync(g[k].b, g[k].hb, bytes, g[k].s));
        CK(cuMemsetD32Async(g[k].c, 0x7fc00001u, N, g[k].s)); /* poison: a NaN the kernel overwrites */
    }
    /* Work on every GPU at once, then each context synchronized on its own. */
    for (int k = 0; k < n; k++) {
        CK(cuCtxSetCurrent(g[k].ctx));
        int nn = N;
        void *args[] = {&g[k].a, &g[k].b, &g[k].c, &nn};
        CK(cuLaunchKernel(g[k].add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, g[k].s, args, NULL));
    }
    for (int k = n - 1; k >= 0; k--) {
        CK(cuCtxSetCurrent(g[k].ctx));
        CK(cuStreamSynchronize(g[k].s));
        CK(cuMemcpyDtoH(g[k].hc, g[k].c, bytes));
        check_sum(&g[k], k);
        size_t free_b = 0, total_b = 0;
        CK(cuMemGetInfo(&free_b, &total_b));
        if (total_b == 0 || free_b > total_b)
            gt_fail("GPU %d: cuMemGetInfo free %zu of %zu", k, free_b, total_b);
    }

    /* GPU 0's sums to GPU 1, three ways, each checked. */
    CK(cuCtxSetCurrent(g[0].ctx));
    CK(cuMemsetD32(g[1].a, 0, N));
    CK(cuMemcpyPeer(g[1].a, g[1].ctx, g[0].c, g[0].ctx, bytes));
    CK(cuCtxSetCurrent(g[1].ctx));
    CK(cuMemcpyDtoH(g[1].hc, g[1].a, bytes));
    if (memcmp(g[1].hc, g[0].hc, bytes))
        gt_fail("cuMemcpyPeer: GPU 1 does not hold GPU 0's sums");
    CK(cuMemsetD32(g[1].b, 0, N));
    CK(cuMemcpyPeerAsync(g[1].b, g[1].ctx, g[0].c, g[0].ctx, bytes, g[1].s));
    CK(cuStreamSynchronize(g[1].s));
    CK(cuMemcpyDtoH(g[1].hc, g[1].b, bytes));
    if (memcmp(g[1].hc, g[0].hc, bytes))
        gt_fail("cuMemcpyPeerAsync: GPU 1 does not hold GPU 0's sums");
    CK(cuCtxSetCurrent(g[0].ctx));
    CK(cuMemcpyDtoD(g[1].c, g[0].a, bytes)); /* unified addresses: GPU 1's memory named from GPU 0 */
    CK(cuCtxSetCurrent(g[1].ctx));
    CK(cuMemcpyDtoH(g[1].hc, g[1].c, bytes));
    if (memcmp(g[1].hc, g[0].ha, bytes))
        gt_fail("cuMemcpyDtoD from GPU 0 to GPU 1: not GPU 0's data");

    /* GPU 1's stream waits for an event GPU 0 recorded after a kernel; then its copy sees the kernel's sums. */
    CK(cuCtxSetCurrent(g[0].ctx));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuMemsetD32Async(g[0].c, 0, N, g[0].s));
    int nn = N;
    void *args[] = {&g[0].b, &g[0].a, &g[0].c, &nn}; /* the same sums, operands swapped */
    CK(cuLaunchKernel(g[0].add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, g[0].s, args, NULL));
    CK(cuEventRecord(ev, g[0].s));
    CK(cuCtxSetCurrent(g[1].ctx));
    CK(cuStreamWaitEvent(g[1].s, ev, 0));
    CK(cuMemcpyPeerAsync(g[1].a, g[1].ctx, g[0].c, g[0].ctx, bytes, g[1].s));
    volatile int flag = 0;
    CK(cuLaunchHostFunc(g[1].s, on_host, (void *)&flag));
    CK(cuStreamSynchronize(g[1].s));
    if (flag != 42)
        gt_fail("a host function on GPU 1's stream did not run before its synchronize returned");
    CK(cuMemcpyDtoH(g[1].hc, g[1].a, bytes));
    if (memcmp(g[1].hc, g[0].hc, bytes))
        gt_fail("after a wait for GPU 0's event: GPU 1 does not hold GPU 0's sums");

    /* Peer access as the server's driver tells it; enabled from GPU 1 to GPU 0, a kernel on GPU 1 reads GPU 0's
     * memory, that allocated before and after; copies on a GPU's own stream of another GPU's memory. */
    int can01 = -1, can10 = -1, rank = -1, access = -1;
    CK(cuDeviceCanAccessPeer(&can01, g[0].dev, g[1].dev));
    CK(cuDeviceCanAccessPeer(&can10, g[1].dev, g[0].dev));
    EXPECT_RC(cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, g[0].dev, g[0].dev),
              CUDA_ERROR_INVALID_DEVICE);
    CK(cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, g[1].dev, g[0].dev));
    CK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, g[1].dev, g[0].dev));
    if (access != can10 || (can01 != 0 && can01 != 1))
        gt_fail("peer access: can 0->1 %d, 1->0 %d, the attribute says %d", can01, can10, access);
    CK(cuCtxSetCurrent(g[1].ctx));
    EXPECT_RC(cuCtxEnablePeerAccess(g[1].ctx, 0), CUDA_ERROR_INVALID_CONTEXT); /* the current one itself */
    EXPECT_RC(cuCtxDisablePeerAccess(g[0].ctx), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    if (!can10) {
        EXPECT_RC(cuCtxEnablePeerAccess(g[0].ctx, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        printf("multi_gpu: GPU 1 cannot reach GPU 0's memory: peer kernels not tried\n");
    } else {
        EXPECT_RC(cuCtxEnablePeerAccess(g[0].ctx, 1), CUDA_ERROR_INVALID_VALUE);
        CK(cuCtxEnablePeerAccess(g[0].ctx, 0));
        EXPECT_RC(cuCtxEnablePeerAccess(g[0].ctx, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        CUdeviceptr late;
        CK(cuCtxSetCurrent(g[0].ctx));
        CK(cuMemAlloc(&late, bytes)); /* after the enabling: reachable too */
        CK(cuMemcpyHtoD(late, g[0].hb, bytes));
        CK(cuCtxSetCurrent(g[1].ctx));
        CK(cuMemsetD32Async(g[1].c, 0x7fc00001u, N, g[1].s));
        int nn1 = N;
        void *pargs[] = {&g[0].a, &late, &g[1].c, &nn1}; /* GPU 0's operands, GPU 1's result */
        CK(cuLaunchKernel(g[1].add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, g[1].s, pargs, NULL));
        CK(cuStreamSynchronize(g[1].s));
        CK(cuMemcpyDtoH(g[1].hc, g[1].c, bytes));
        for (int i = 0; i < N; i++)
            if (g[1].hc[i] != g[0].ha[i] + g[0].hb[i])
                gt_fail("GPU 1's kernel on GPU 0's memory: c[%d] = %g, expected %g", i, (double)g[1].hc[i],
                        (double)(g[0].ha[i] + g[0].hb[i]));
        /* GPU 0's memory written and read on GPU 1's own stream. */
        CK(cuMemcpyHtoDAsync(late, g[1].ha, bytes, g[1].s));
        CK(cuMemcpyDtoDAsync(g[1].b, late, bytes, g[1].s));
        CK(cuStreamSynchronize(g[1].s));
        CK(cuMemcpyDtoH(g[1].hc, g[1].b, bytes));
        if (memcmp(g[1].hc, g[1].ha, bytes))
            gt_fail("GPU 0's memory written and read back on GPU 1's stream: not the data");
        CK(cuCtxDisablePeerAccess(g[0].ctx));
        EXPECT_RC(cuCtxDisablePeerAccess(g[0].ctx), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        /* GPU 0's stream-ordered (pool) memory, there before enabling again, read by GPU 1's kernel. */
        CK(cuCtxSetCurrent(g[0].ctx));
        CUdeviceptr pooled;
        CK(cuMemAllocAsync(&pooled, bytes, g[0].s));
        CK(cuMemcpyHtoDAsync(pooled, g[0].hb, bytes, g[0].s));
        CK(cuStreamSynchronize(g[0].s));
        CK(cuCtxSetCurrent(g[1].ctx));
        CK(cuCtxEnablePeerAccess(g[0].ctx, 0));
        CK(cuMemsetD32Async(g[1].c, 0x7fc00001u, N, g[1].s));
        void *qargs[] = {&g[0].a, &pooled, &g[1].c, &nn1};
        CK(cuLaunchKernel(g[1].add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, g[1].s, qargs, NULL));
        CK(cuStreamSynchronize(g[1].s));
        CK(cuMemcpyDtoH(g[1].hc, g[1].c, bytes));
        for (int i = 0; i < N; i++)
            if (g[1].hc[i] != g[0].ha[i] + g[0].hb[i])
                gt_fail("GPU 1's kernel on GPU 0's pool memory: c[%d] = %g, expected %g", i, (double)g[1].hc[i],
                        (double)(g[0].ha[i] + g[0].hb[i]));
        CK(cuCtxDisablePeerAccess(g[0].ctx));
        CK(cuCtxSetCurrent(g[0].ctx));
        CK(cuMemFreeAsync(pooled, g[0].s)); /* viewed by GPU 1's worker: the view goes first */
        CK(cuStreamSynchronize(g[0].s));
        CK(cuCtxSetCurrent(g[0].ctx));
        CK(cuMemFree(late)); /* viewed by GPU 1's worker: the view goes first */
        CK(cuCtxSetCurrent(g[1].ctx));
        CK(cuCtxSynchronize());
    }

    /* Virtual memory management on GPU 1 (its context current): memory made, reserved, mapped, given access,
     * written and read back; a dma-buf descriptor of GPU 1's memory, where the device has them. */
    CK(cuCtxSetCurrent(g[1].ctx));
    {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = g[1].dev;
        size_t gran = 0;
        CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        size_t vbytes = (bytes + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle vh;
        CUdeviceptr va;
        CK(cuMemCreate(&vh, vbytes, &prop, 0));
        CK(cuMemAddressReserve(&va, vbytes, 0, 0, 0));
        CK(cuMemMap(va, vbytes, 0, vh, 0));
        CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CK(cuMemSetAccess(va, vbytes, &acc, 1));
        int ordinal = -1;
        CK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va));
        if (ordinal != (int)g[1].dev)
            gt_fail("GPU 1's VMM memory is on device %d", ordinal);
        CK(cuMemcpyHtoD(va, g[1].hb, bytes));
        CK(cuMemcpyDtoD(g[1].a, va, bytes));
        CK(cuMemcpyDtoH(g[1].hc, g[1].a, bytes));
        if (memcmp(g[1].hc, g[1].hb, bytes))
            gt_fail("GPU 1's VMM memory: not the data written");
        CK(cuMemUnmap(va, vbytes));
        CK(cuMemAddressFree(va, vbytes));
        CK(cuMemRelease(vh));
        int dmabuf = 0;
        CK(cuDeviceGetAttribute(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, g[1].dev));
        int fd = -1;
        CUresult dr = cuMemGetHandleForAddressRange(&fd, g[1].a, bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
        if (dmabuf && (dr != CUDA_SUCCESS || fd < 0 || fcntl(fd, F_GETFD) < 0))
            gt_fail("a dma-buf descriptor of GPU 1's memory: %s, descriptor %d", gt_err_name(dr), fd);
        if (!dmabuf && dr == CUDA_SUCCESS)
            gt_fail("a dma-buf descriptor where GPU 1 says it has none");
        if (fd >= 0)
            close(fd);
    }

    /* A library loaded once, with GPU 0's context current, as the CUDA runtime loads a program's code: its
     * kernel runs on every GPU, on that GPU's globals, launched as a CUkernel and as the function each
     * context has of it. */
    CK(cuCtxSetCurrent(g[0].ctx));
    CUlibrary lib = gt_library_from_file_data(GT_FATBIN);
    CUkernel table_k;
    CK(cuLibraryGetKernel(&table_k, lib, "table_modify"));
    unsigned *table0 = malloc(GT_TABLE_LEN * sizeof *table0), *table = malloc(GT_TABLE_LEN * sizeof *table);
    if (!table0 || !table)
        gt_fail("out of host memory");
    CUdeviceptr tables[MAX_GPUS];
    for (int k = 0; k < n; k++) {
        CK(cuCtxSetCurrent(g[k].ctx));
        CUdeviceptr bias;
        size_t tsize = 0, bsize = 0;
        CK(cuLibraryGetGlobal(&tables[k], &tsize, lib, "g_table"));
        CK(cuLibraryGetGlobal(&bias, &bsize, lib, "g_bias"));
        if (tsize != GT_TABLE_LEN * sizeof(unsigned) || bsize != sizeof(unsigned))
            gt_fail("GPU %d: the library's globals are %zu and %zu bytes", k, tsize, bsize);
        int ordinal = -1;
        CK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, tables[k]));
        if (ordinal != (int)g[k].dev)
            gt_fail("GPU %d: the library's g_table 0x%llx is on device %d", k, (unsigned long long)tables[k], ordinal);
        for (int j = 0; j < k; j++)
            if (tables[j] == tables[k])
                gt_fail("GPUs %d and %d share one g_table at 0x%llx", j, k, (unsigned long long)tables[k]);
        for (int i = 0; i < GT_TABLE_LEN; i++)
            table0[i] = (unsigned)(i * 7 + k);
        unsigned b = 100u + (unsigned)k;
        CK(cuMemcpyHtoD(tables[k], table0, GT_TABLE_LEN * sizeof *table0));
        CK(cuMemcpyHtoD(bias, &b, sizeof b));
        unsigned add = 10u * (unsigned)k;
        void *targs[] = {&add};
        CK(cuLaunchKernel((CUfunction)table_k, GT_TABLE_LEN / 256, 1, 1, 256, 1, 1, 0, g[k].s, targs, NULL));
        CUfunction here;
        CK(cuKernelGetFunction(&here, table_k));
        CK(cuLaunchKernel(here, GT_TABLE_LEN / 256, 1, 1, 256, 1, 1, 0, g[k].s, targs, NULL));
        CK(cuStreamSynchronize(g[k].s));
        CK(cuMemcpyDtoH(table, tables[k], GT_TABLE_LEN * sizeof *table));
        for (int i = 0; i < GT_TABLE_LEN; i++) {
            unsigned want = (table0[i] * 3u + add + b) * 3u + add + b;
            if (table[i] != want)
                gt_fail("GPU %d: library kernel g_table[%d] = %u, expected %u", k, i, table[i], want);
        }
        CUlibrary back = NULL;
        CK(cuKernelGetLibrary(&back, (CUkernel)here));
        if (back != lib)
            gt_fail("GPU %d: cuKernelGetLibrary of the context's function is not the library", k);
        int threads = 0;
        CK(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, table_k, g[k].dev));
        if (threads < 256)
            gt_fail("GPU %d: the library kernel allows %d threads a block", k, threads);
    }
    CK(cuCtxSetCurrent(g[0].ctx));
    CK(cuLibraryUnload(lib));
    free(table0);
    free(table);

    /* GPU 1's memory freed while GPU 0's context is current; each context's synchronize sees no error. */
    CK(cuCtxSetCurrent(g[0].ctx));
    CK(cuMemFree(g[1].c));
    CK(cuCtxSynchronize());
    CK(cuCtxSetCurrent(g[1].ctx));
    CK(cuCtxSynchronize());
    for (int k = 0; k < n; k++) {
        CK(cuCtxSetCurrent(g[k].ctx));
        CK(cuMemFree(g[k].a));
        CK(cuMemFree(g[k].b));
        if (k != 1)
            CK(cuMemFree(g[k].c));
        CK(cuStreamDestroy(g[k].s));
        CK(cuModuleUnload(g[k].mod));
    }
    CK(cuCtxSetCurrent(g[0].ctx));
    CK(cuEventDestroy(ev));
    printf("multi_gpu: %d GPUs in one program\n", n);
    gt_pass();
}

/* Which memory the driver lets stream memory operations write and wait on, and which instantiation flags
 * cuGraphExecGetFlags reports: cumuxd serves cuMemAlloc from a pool of the client's, and the shim answers
 * cuGraphExecGetFlags itself. Prints one line per case: the result of the operation and of the stream's
 * synchronization. Build: gcc -std=c11 -I/usr/local/cuda/include tools/probe_stream_memops.c -lcuda */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "probe_util.h"

static CUstream st;

static void try_ops(const char *what, CUdeviceptr p)
{
    CUresult w32 = cuStreamWriteValue32(st, p, 1, 0);
    CUresult s1 = cuStreamSynchronize(st);
    CUresult w64 = cuStreamWriteValue64(st, p, 2, 0);
    CUresult s2 = cuStreamSynchronize(st);
    CUresult q32 = cuStreamWaitValue32(st, p, 2, CU_STREAM_WAIT_VALUE_GEQ);
    CUresult s3 = cuStreamSynchronize(st);
    CUstreamBatchMemOpParams b;
    memset(&b, 0, sizeof b);
    b.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    b.writeValue.address = p;
    b.writeValue.value = 3;
    CUresult bw = cuStreamBatchMemOp(st, 1, &b, 0);
    CUresult s4 = cuStreamSynchronize(st);
    printf("%-34s write32 %s/%s write64 %s/%s wait32 %s/%s batch %s/%s\n", what, ename(w32), ename(s1), ename(w64),
           ename(s2), ename(q32), ename(s3), ename(bw), ename(s4));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
    int a = -1, b = -1;
    cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
    cuDeviceGetAttribute(&b, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
    printf("attributes: wait NOR %d, 64-bit ops %d\n", a, b);

    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, 64);
    printf("cuMemAlloc: %s\n", ename(r));
    try_ops("cuMemAlloc", p);

    r = cuMemAllocAsync(&p, 64, st);
    cuStreamSynchronize(st);
    printf("cuMemAllocAsync (default pool): %s\n", ename(r));
    try_ops("default pool", p);

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    r = cuMemPoolCreate(&pool, &props);
    printf("cuMemPoolCreate: %s\n", ename(r));
    r = cuMemAllocFromPoolAsync(&p, 64, pool, st);
    cuStreamSynchronize(st);
    printf("cuMemAllocFromPoolAsync: %s\n", ename(r));
    try_ops("created pool", p);
    CUstream other;
    cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
    r = cuMemAllocFromPoolAsync(&p, 64, pool, other);
    cuStreamSynchronize(other);
    try_ops("created pool, other stream", p);

    /* Instantiation flags as cuGraphExecGetFlags reports them. */
    static const struct {
        unsigned long long f;
        const char *name;
    } flags[] = {{CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, "AUTO_FREE_ON_LAUNCH"},
                 {CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, "UPLOAD"},
                 {CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH, "DEVICE_LAUNCH"},
                 {CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY, "USE_NODE_PRIORITY"},
                 {CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY,
                  "AUTO_FREE|USE_NODE_PRIORITY"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        CUgraph g;
        CUgraphNode n;
        cuGraphCreate(&g, 0);
        CUDA_MEMSET_NODE_PARAMS m = {.dst = p, .value = 1, .elementSize = 4, .width = 4, .height = 1};
        cuGraphAddMemsetNode(&n, g, NULL, 0, &m, ctx);
        CUgraphExec x;
        r = cuGraphInstantiateWithFlags(&x, g, flags[i].f);
        cuuint64_t got = 0;
        CUresult q = r == CUDA_SUCCESS ? cuGraphExecGetFlags(x, &got) : r;
        printf("instantiate %-28s %s, GetFlags %s: %#llx\n", flags[i].name, ename(r), ename(q),
               (unsigned long long)got);
    }
    printf("SUMMARY done\n");
    return 0;
}

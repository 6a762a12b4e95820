/* mempool: stream-ordered allocation. cudaMallocAsync / cudaFreeAsync on created streams and on the
 * legacy default stream, an allocation made on one stream and used and freed on another after an
 * event, the device's default pool with its release-threshold attribute, and an explicit pool
 * (cudaMemPoolCreate, cudaMallocFromPoolAsync, release threshold, usage attributes, cudaMemPoolTrimTo,
 * cudaMemPoolDestroy). Every allocation is written by a kernel and read back. */
#include "rt_test.h"

__global__ void fill(unsigned *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = seed ^ (unsigned)(i * 2654435761u);
}

__global__ void add_one(unsigned *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] += 1u;
}

static void check_fill(const unsigned *h, size_t n, unsigned seed, unsigned plus, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        unsigned w = (seed ^ (unsigned)(i * 2654435761u)) + plus;
        if (h[i] != w)
            rt_fail("%s: element %zu is 0x%08x, expected 0x%08x", what, i, h[i], w);
    }
}

static unsigned long long pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a)
{
    unsigned long long v = 0;
    CK(cudaMemPoolGetAttribute(pool, a, &v));
    return v;
}

int main(void)
{
    rt_begin("mempool");
    rt_require_gpu();
    int dev = 0;
    CK(cudaGetDevice(&dev));
    int supported = 0;
    CK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev));
    if (!supported)
        rt_fail("cudaDevAttrMemoryPoolsSupported is 0");

    const size_t max_n = (size_t)4 << 20; /* 16 MiB of unsigned */
    unsigned *h = NULL;
    CK(cudaMallocHost((void **)&h, max_n * sizeof(unsigned)));
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&s2));

    /* 1. Default pool: many sizes, allocate / fill / copy back / free, all on s1. */
    const size_t sizes[] = {1, 255, 4096, 100003, 1 << 20, max_n};
    for (int round = 0; round < 3; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            unsigned *d = NULL;
            CK(cudaMallocAsync((void **)&d, n * sizeof(unsigned), s1));
            if (!d)
                rt_fail("cudaMallocAsync returned NULL");
            fill<<<128, 256, 0, s1>>>(d, n, 0x1000u * (unsigned)k + (unsigned)round);
            CK_LAUNCH();
            rt_poison(h, n * sizeof(unsigned));
            CK(cudaMemcpyAsync(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s1));
            CK(cudaFreeAsync(d, s1));
            CK(cudaStreamSynchronize(s1));
            check_fill(h, n, 0x1000u * (unsigned)k + (unsigned)round, 0, "default pool");
        }

    /* 2. Allocated on s1, used on s2 after an event, freed on s2. */
    {
        const size_t n = 1 << 20;
        unsigned *d = NULL;
        cudaEvent_t ev;
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        CK(cudaMallocAsync((void **)&d, n * sizeof(unsigned), s1));
        fill<<<64, 256, 0, s1>>>(d, n, 42u);
        CK_LAUNCH();
        CK(cudaEventRecord(ev, s1));
        CK(cudaStreamWaitEvent(s2, ev, 0));
        add_one<<<64, 256, 0, s2>>>(d, n);
        CK_LAUNCH();
        rt_poison(h, n * sizeof(unsigned));
        CK(cudaMemcpyAsync(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s2));
        CK(cudaFreeAsync(d, s2));
        CK(cudaStreamSynchronize(s2));
        check_fill(h, n, 42u, 1u, "cross-stream allocation");
        CK(cudaEventDestroy(ev));
    }

    /* 3. The legacy default stream (0) with a synchronous copy after it. */
    {
        const size_t n = 77777;
        unsigned *d = NULL;
        CK(cudaMallocAsync((void **)&d, n * sizeof(unsigned), 0));
        fill<<<32, 128>>>(d, n, 7u);
        CK_LAUNCH();
        rt_poison(h, n * sizeof(unsigned));
        CK(cudaMemcpy(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CK(cudaFreeAsync(d, 0));
        CK(cudaDeviceSynchronize());
        check_fill(h, n, 7u, 0, "legacy stream allocation");
    }

    /* 4. The default pool's release threshold. */
    cudaMemPool_t defpool;
    CK(cudaDeviceGetDefaultMemPool(&defpool, dev));
    unsigned long long thr = 64ull << 20, thr_orig = pool_attr(defpool, cudaMemPoolAttrReleaseThreshold);
    CK(cudaMemPoolSetAttribute(defpool, cudaMemPoolAttrReleaseThreshold, &thr));
    if (pool_attr(defpool, cudaMemPoolAttrReleaseThreshold) != thr)
        rt_fail("default pool release threshold reads back %llu, set %llu",
                pool_attr(defpool, cudaMemPoolAttrReleaseThreshold), thr);
    cudaMemPool_t cur;
    CK(cudaDeviceGetMemPool(&cur, dev));
    if (cur != defpool)
        rt_fail("cudaDeviceGetMemPool is not the default pool before any cudaDeviceSetMemPool");
    CK(cudaMemPoolSetAttribute(defpool, cudaMemPoolAttrReleaseThreshold, &thr_orig));

    /* 5. An explicit pool. */
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    cudaMemPool_t pool;
    CK(cudaMemPoolCreate(&pool, &props));
    unsigned long long big = ~0ull; /* keep everything: the pool never returns memory at a sync */
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &big));
    if (pool_attr(pool, cudaMemPoolAttrReleaseThreshold) != big)
        rt_fail("pool release threshold did not read back");

    const size_t n = (size_t)2 << 20;
    const size_t bytes = n * sizeof(unsigned);
    unsigned *d1 = NULL, *d2 = NULL;
    CK(cudaMallocFromPoolAsync((void **)&d1, bytes, pool, s1));
    CK(cudaMallocFromPoolAsync((void **)&d2, bytes, pool, s1));
    fill<<<128, 256, 0, s1>>>(d1, n, 0xabcu);
    CK_LAUNCH();
    CK(cudaMemcpyAsync(d2, d1, bytes, cudaMemcpyDeviceToDevice, s1));
    add_one<<<128, 256, 0, s1>>>(d2, n);
    CK_LAUNCH();
    rt_poison(h, bytes);
    CK(cudaMemcpyAsync(h, d2, bytes, cudaMemcpyDeviceToHost, s1));
    CK(cudaStreamSynchronize(s1));
    check_fill(h, n, 0xabcu, 1u, "explicit pool");
    cudaPointerAttributes at;
    CK(cudaPointerGetAttributes(&at, d1));
    if (at.type != cudaMemoryTypeDevice || at.device != dev)
        rt_fail("pool allocation: pointer type %d device %d", (int)at.type, at.device);

    unsigned long long used = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    unsigned long long reserved = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    if (used < 2 * bytes || reserved < used)
        rt_fail("pool with two %zu-byte allocations: used %llu, reserved %llu", bytes, used, reserved);
    CK(cudaFreeAsync(d1, s1));
    CK(cudaFreeAsync(d2, s1));
    CK(cudaStreamSynchronize(s1));
    unsigned long long used_after = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    unsigned long long reserved_after = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    if (used_after != 0)
        rt_fail("pool used memory %llu after freeing everything", used_after);
    if (reserved_after < 2 * bytes)
        rt_fail("pool released memory at a sync despite an unlimited threshold (reserved %llu)", reserved_after);

    /* Reuse from the kept memory, then trim everything away. */
    CK(cudaMallocFromPoolAsync((void **)&d1, bytes, pool, s2));
    fill<<<128, 256, 0, s2>>>(d1, n, 5u);
    CK_LAUNCH();
    rt_poison(h, bytes);
    CK(cudaMemcpyAsync(h, d1, bytes, cudaMemcpyDeviceToHost, s2));
    CK(cudaFreeAsync(d1, s2));
    CK(cudaStreamSynchronize(s2));
    check_fill(h, n, 5u, 0, "explicit pool, reused memory");
    CK(cudaMemPoolTrimTo(pool, 0));
    unsigned long long reserved_trim = pool_attr(pool, cudaMemPoolAttrReservedMemCurrent);
    if (reserved_trim >= reserved_after)
        rt_fail("cudaMemPoolTrimTo(0) with nothing allocated left %llu bytes reserved (before: %llu)", reserved_trim,
                reserved_after);
    unsigned long long high = pool_attr(pool, cudaMemPoolAttrUsedMemHigh);
    if (high < 2 * bytes)
        rt_fail("pool used-memory high watermark %llu below %zu", high, 2 * bytes);
    rt_info("pool: used %llu reserved %llu -> after free used %llu reserved %llu -> trimmed %llu, high %llu", used,
            reserved, used_after, reserved_after, reserved_trim, high);

    /* A zero threshold: memory goes back at the next synchronization. */
    unsigned long long zero = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero));
    CK(cudaMallocFromPoolAsync((void **)&d1, bytes, pool, s1));
    CK(cudaMemsetAsync(d1, 0, bytes, s1));
    CK(cudaFreeAsync(d1, s1));
    CK(cudaStreamSynchronize(s1));
    rt_info("pool with threshold 0: reserved %llu after free + sync",
            pool_attr(pool, cudaMemPoolAttrReservedMemCurrent));

    CK(cudaMemPoolDestroy(pool));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    CK(cudaFreeHost(h));
    rt_pass();
}

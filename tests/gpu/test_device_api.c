/* Device enumeration and attributes, primary and created contexts, pointer attributes, address
 * ranges, function attributes and cuLaunchKernelEx. */
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

static int attr(CUdevice dev, CUdevice_attribute a)
{
    int v = -1;
    CK(cuDeviceGetAttribute(&v, a, dev));
    return v;
}

static void check_devices(void)
{
    int drv = 0, count = 0;
    CK(cuDriverGetVersion(&drv));
    if (drv < 12000)
        gt_fail("driver version %d, expected >= 12000", drv);
    CK(cuDeviceGetCount(&count));
    if (count < 1)
        gt_fail("cuDeviceGetCount gave %d", count);
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        CK(cuDeviceGet(&dev, i));
        char name[256];
        memset(name, 0, sizeof name);
        CK(cuDeviceGetName(name, sizeof name, dev));
        if (!name[0])
            gt_fail("device %d has an empty name", i);
        int major = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        int minor = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        if (major != 9 || minor != 0)
            gt_fail("device %d (%s) has compute capability %d.%d, expected 9.0", i, name, major, minor);
        int sms = attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        if (sms <= 0)
            gt_fail("device %d: %d multiprocessors", i, sms);
        if (attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) != 1024 || attr(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE) != 32)
            gt_fail("device %d: odd max threads per block or warp size", i);
        size_t total = 0;
        CK(cuDeviceTotalMem(&total, dev));
        if (total == 0)
            gt_fail("device %d: total memory 0", i);
        CUuuid uuid;
        memset(&uuid, 0, sizeof uuid);
        CK(cuDeviceGetUuid(&uuid, dev));
        int nonzero = 0;
        for (size_t k = 0; k < sizeof uuid.bytes; k++)
            nonzero |= uuid.bytes[k];
        if (!nonzero)
            gt_fail("device %d: all-zero UUID", i);
        int bus = attr(dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), pdev = attr(dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
        int dom = attr(dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
        if (bus < 0 || pdev < 0 || dom < 0)
            gt_fail("device %d: negative PCI ids", i);
        char busid[64];
        CK(cuDeviceGetPCIBusId(busid, sizeof busid, dev));
        unsigned pd = 0, pb = 0, pdv = 0, pf = 0;
        if (sscanf(busid, "%x:%x:%x.%x", &pd, &pb, &pdv, &pf) != 4 || pd != (unsigned)dom || pb != (unsigned)bus ||
            pdv != (unsigned)pdev)
            gt_fail("device %d: PCI bus id %s does not match attributes %x:%x:%x", i, busid, (unsigned)dom,
                    (unsigned)bus, (unsigned)pdev);
        CUdevice back;
        CK(cuDeviceGetByPCIBusId(&back, busid));
        if (back != dev)
            gt_fail("cuDeviceGetByPCIBusId(%s) gave device %d, expected %d", busid, (int)back, (int)dev);
        printf("device %d: %s, cc %d.%d, %d SMs, %.1f GiB, PCI %s, driver %d\n", i, name, major, minor, sms,
               (double)total / (1024.0 * 1024 * 1024), busid, drv);
    }
}

static CUcontext check_primary(CUdevice dev)
{
    unsigned flags = 0;
    int active = -1;
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    if (active != 0 && active != 1)
        gt_fail("primary context state active=%d", active);
    CUcontext p1, p2;
    CK(cuDevicePrimaryCtxRetain(&p1, dev));
    CK(cuDevicePrimaryCtxRetain(&p2, dev));
    if (!p1 || p1 != p2)
        gt_fail("two retains of the primary context gave different contexts");
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    if (active != 1)
        gt_fail("primary context not active after retain");
    CK(cuDevicePrimaryCtxRelease(dev)); /* one reference stays */
    CK(cuCtxSetCurrent(p1));
    CUcontext cur = NULL;
    CK(cuCtxGetCurrent(&cur));
    if (cur != p1)
        gt_fail("cuCtxGetCurrent is not the primary context just set");
    CUdevice d = -1;
    CK(cuCtxGetDevice(&d));
    if (d != dev)
        gt_fail("cuCtxGetDevice gave %d", (int)d);
    unsigned api = 0;
    CK(cuCtxGetApiVersion(p1, &api));
    if (api == 0)
        gt_fail("cuCtxGetApiVersion gave 0");
    return p1;
}

static void check_created_ctx(CUdevice dev, CUcontext primary)
{
    CUcontext c = NULL, cur = NULL, popped = NULL;
    CK(cuCtxCreate(&c, NULL, 0, dev));
    CK(cuCtxGetCurrent(&cur));
    if (cur != c || c == primary)
        gt_fail("cuCtxCreate did not make a new current context");
    CK(cuCtxPopCurrent(&popped));
    if (popped != c)
        gt_fail("cuCtxPopCurrent returned another context");
    CK(cuCtxGetCurrent(&cur));
    if (cur != primary)
        gt_fail("after pop the current context is not the primary one");
    CK(cuCtxPushCurrent(c));
    CK(cuCtxGetCurrent(&cur));
    if (cur != c)
        gt_fail("cuCtxPushCurrent did not make the context current");
    /* Real work in the created context. */
    unsigned char in[1000], out[1000];
    gt_fill_random(in, sizeof in, 5);
    memset(out, 0, sizeof out);
    CUdeviceptr d;
    CK(cuMemAlloc(&d, sizeof in));
    CK(cuMemcpyHtoD(d, in, sizeof in));
    CK(cuMemcpyDtoH(out, d, sizeof out));
    if (memcmp(in, out, sizeof in) != 0)
        gt_fail("round trip in a created context differs");
    CUcontext owner = NULL;
    CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    if (owner != c)
        gt_fail("CU_POINTER_ATTRIBUTE_CONTEXT is not the created context");
    CK(cuMemFree(d));
    CK(cuCtxPopCurrent(&popped));
    if (popped != c)
        gt_fail("second pop returned another context");
    CK(cuCtxDestroy(c));
    CK(cuCtxGetCurrent(&cur));
    if (cur != primary)
        gt_fail("current context is not the primary one after destroy");
}

static void check_pointers(CUcontext primary)
{
    size_t n = (1 << 20) + 123;
    CUdeviceptr d;
    CK(cuMemAlloc(&d, n));
    unsigned mt = 0;
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    if (mt != CU_MEMORYTYPE_DEVICE)
        gt_fail("device pointer has memory type %u", mt);
    CUcontext owner = NULL;
    CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    if (owner != primary)
        gt_fail("device pointer's context is not the primary context");
    int ordinal = -1;
    CK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    if (ordinal != 0)
        gt_fail("device pointer's ordinal %d", ordinal);
    CUdeviceptr base = 0;
    size_t size = 0;
    CK(cuMemGetAddressRange(&base, &size, d + 4097));
    if (base != d || size < n)
        gt_fail("cuMemGetAddressRange(d+4097) gave base 0x%llx size %zu, expected 0x%llx and >= %zu",
                (unsigned long long)base, size, (unsigned long long)d, n);

    void *h = NULL;
    CK(cuMemAllocHost(&h, 4096));
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
    if (mt != CU_MEMORYTYPE_HOST)
        gt_fail("pinned host pointer has memory type %u", mt);
    void *hp = NULL;
    CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)h + 8));
    if (hp != (char *)h + 8)
        gt_fail("CU_POINTER_ATTRIBUTE_HOST_POINTER gave %p, expected %p", hp, (void *)((char *)h + 8));
    CUdeviceptr dp = 0;
    CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)h));
    if (dp == 0)
        gt_fail("pinned host pointer has no device pointer");
    /* Memory the driver never saw is not a CUDA pointer. */
    static char plain[64];
    EXPECT_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)plain),
              CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFreeHost(h));
    CK(cuMemFree(d));
}

static void check_functions_and_launch_ex(CUdevice dev)
{
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction bounded = gt_function(mod, "bounded256"), vadd = gt_function(mod, "vec_add");
    int v = 0;
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, bounded));
    if (v != 256)
        gt_fail("MAX_THREADS_PER_BLOCK of a __launch_bounds__(256) kernel is %d", v);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, vadd));
    if (v <= 0 || v > 1024)
        gt_fail("MAX_THREADS_PER_BLOCK of vec_add is %d", v);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, vadd));
    if (v <= 0 || v > 255)
        gt_fail("NUM_REGS of vec_add is %d", v);
    int regs = v;
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, vadd)); /* asked again: the same answer */
    if (v != regs)
        gt_fail("NUM_REGS of vec_add: %d, then %d", regs, v);
    /* A set is seen by the next get, a repeated set succeeds again, a refused one changes nothing (the shim
     * answers repeated questions and sets itself: what it answers must be what the driver would). */
    int sets[] = {2048, 2048, 4096, 0};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sets[i]));
        CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, vadd));
        if (v != sets[i])
            gt_fail("MAX_DYNAMIC_SHARED_SIZE_BYTES set to %d reads %d", sets[i], v);
    }
    CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096));
    EXPECT_RC(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30),
              CUDA_ERROR_INVALID_VALUE);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, vadd));
    if (v != 4096)
        gt_fail("MAX_DYNAMIC_SHARED_SIZE_BYTES after a refused set reads %d, not 4096", v);
    CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096)); /* still allowed */
    CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0));
    CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
    /* Occupancy, which the shim also answers itself when asked again: an answer that depends on an
     * attribute changes with it, a repeated question gets the same answer. */
    const size_t big = 100 << 10;
    for (int round = 0; round < 2; round++) {
        /* While no dynamic shared memory is allowed the answer may be 0 blocks or a refusal (the fake
         * driver: 0), never more than once 100 KiB is allowed; asked again after the set, it must not be
         * the answer given before it. */
        int none = -1;
        CUresult rn = cuOccupancyMaxActiveBlocksPerMultiprocessor(&none, vadd, 256, big);
        CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)big));
        int with = 0, again = 0, without = 0;
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&with, vadd, 256, big));
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&again, vadd, 256, big));
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&without, vadd, 256, 0));
        if (with < 1 || with > 2 || again != with || without < with)
            gt_fail("blocks per SM with 100 KiB allowed: %d, again %d, with none asked %d", with, again, without);
        if (rn == CUDA_SUCCESS && (none < 0 || none > with))
            gt_fail("%d blocks per SM with 100 KiB while none was allowed, %d once allowed (round %d)", none, with,
                    round);
        CUlaunchAttribute cl;
        memset(&cl, 0, sizeof cl);
        cl.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        cl.value.clusterDim.x = 2, cl.value.clusterDim.y = 1, cl.value.clusterDim.z = 1;
        CUlaunchConfig q = {.gridDimX = 2, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256, .blockDimY = 1,
                            .blockDimZ = 1, .sharedMemBytes = (unsigned)big, .attrs = &cl, .numAttrs = 1};
        int clusters = 0, clusters_again = 0;
        CK(cuOccupancyMaxActiveClusters(&clusters, vadd, &q));
        CK(cuOccupancyMaxActiveClusters(&clusters_again, vadd, &q));
        int sms = attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        /* At most two blocks of 100 KiB fit an SM (228 KiB on Hopper), whatever carveout the driver picks. */
        if (clusters < 1 || clusters > sms || clusters_again != clusters)
            gt_fail("clusters of 2 blocks of 100 KiB: %d, then %d (%d SMs)", clusters, clusters_again, sms);
        CK(cuFuncSetAttribute(vadd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0));
    }
    CUfunction missing;
    EXPECT_RC(cuModuleGetFunction(&missing, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

    enum { N = 100003 };
    static float a[N], b[N], c[N];
    gt_rng r;
    gt_rng_seed(&r, 2024);
    for (int i = 0; i < N; i++) {
        a[i] = gt_rng_float(&r);
        b[i] = gt_rng_float(&r);
    }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, sizeof a));
    CK(cuMemAlloc(&db, sizeof b));
    CK(cuMemAlloc(&dc, sizeof c));
    CK(cuMemcpyHtoD(da, a, sizeof a));
    CK(cuMemcpyHtoD(db, b, sizeof b));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUcontext sctx = NULL, cur = NULL;
    CUgreenCtx green = (CUgreenCtx)&green;
    CK(cuStreamGetCtx_v2(s, &sctx, &green));
    CK(cuCtxGetCurrent(&cur));
    if (sctx != cur || green != NULL)
        gt_fail("cuStreamGetCtx_v2: context %p (current %p), green context %p", (void *)sctx, (void *)cur, (void *)green);
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    int coop = attr(dev, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
    for (int variant = 0; variant < 3; variant++) {
        CK(cuMemsetD32(dc, 0x7fc00001u, N));
        CUlaunchAttribute at[1];
        memset(at, 0, sizeof at);
        at[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        at[0].value.cooperative = 1;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = (N + 255) / 256;
        cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = 256;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = s;
        /* Variant 1: cooperative (all blocks co-resident: the grid fits easily). */
        cfg.attrs = variant && coop ? at : NULL;
        cfg.numAttrs = variant && coop ? 1 : 0;
        /* Variant 2: the same through cuLaunchCooperativeKernel. */
        if (variant == 2 && coop)
            CK(cuLaunchCooperativeKernel(vadd, cfg.gridDimX, 1, 1, 256, 1, 1, 0, s, args));
        else
            CK(cuLaunchKernelEx(&cfg, vadd, args, NULL));
        CK(cuStreamSynchronize(s));
        memset(c, 0, sizeof c);
        CK(cuMemcpyDtoH(c, dc, sizeof c));
        for (int i = 0; i < N; i++)
            if (c[i] != a[i] + b[i])
                gt_fail("cuLaunchKernelEx variant %d: c[%d] = %g, expected %g", variant, i, (double)c[i],
                        (double)(a[i] + b[i]));
    }
    CK(cuStreamDestroy(s));
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuModuleUnload(mod));
}

/* Settings that have no effect on this GPU still answer as the driver does; a device's pinned pools by
 * location (CUDA 13) are the device's pools. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the bank-size calls: deprecated, still answered */
static void check_settings_and_pools(CUdevice dev)
{
    CK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
    CUsharedconfig sc = (CUsharedconfig)99;
    CK(cuCtxGetSharedMemConfig(&sc));
    if (sc != CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE && sc != CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE &&
        sc != CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        gt_fail("cuCtxGetSharedMemConfig gave %d", (int)sc);
    EXPECT_RC(cuCtxSetSharedMemConfig((CUsharedconfig)7), CUDA_ERROR_INVALID_VALUE);
    CUmemoryPool byd, byl, cur;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CK(cuDeviceGetDefaultMemPool(&byd, dev));
    CK(cuMemGetDefaultMemPool(&byl, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CK(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    if (byl != byd || cur != byd)
        gt_fail("the device's pool by location %p and current %p, by device %p", (void *)byl, (void *)cur, (void *)byd);
    CK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, byd));
}
#pragma GCC diagnostic pop

int main(void)
{
    gt_begin("device_api");
    gt_require_gpu();
    check_devices();
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext primary = check_primary(dev);
    check_created_ctx(dev, primary);
    check_pointers(primary);
    check_functions_and_launch_ex(dev);
    check_settings_and_pools(dev);
    CK(cuDevicePrimaryCtxRelease(dev));
    gt_pass();
}

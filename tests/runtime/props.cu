/* props: cudaGetDeviceProperties and cudaDeviceGetAttribute of every device, printed as stable
 * "prop devN.key=value" lines (run.sh diffs them between native and cumux runs), checked for sanity and
 * for agreement between the two calls. Values that legitimately change from run to run (free memory,
 * limits of a shared context) are printed as "info" lines, which run.sh does not compare. */
#include "rt_test.h"

static int dev_index;

static void kv_ll(const char *key, long long v)
{
    printf("prop dev%d.%s=%lld\n", dev_index, key, v);
}

static void kv_str(const char *key, const char *v)
{
    printf("prop dev%d.%s=%s\n", dev_index, key, v);
}

static void kv_arr(const char *key, const int *v, int n)
{
    printf("prop dev%d.%s=", dev_index, key);
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", v[i]);
    printf("\n");
}

#define P(field) kv_ll(#field, (long long)p.field)
#define PA(field) kv_arr(#field, p.field, (int)(sizeof p.field / sizeof p.field[0]))

static int attr(cudaDeviceAttr a, int dev)
{
    int v = 0;
    CK(cudaDeviceGetAttribute(&v, a, dev));
    return v;
}

static void expect_attr(const char *what, cudaDeviceAttr a, int dev, long long want)
{
    int v = attr(a, dev);
    if ((long long)v != want)
        rt_fail("dev%d: cudaDeviceGetAttribute(%s) = %d but cudaGetDeviceProperties says %lld", dev, what, v, want);
}

int main(void)
{
    rt_begin("props");
    rt_require_gpu();

    int count = 0, drv = 0, rtv = 0;
    CK(cudaGetDeviceCount(&count));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rtv));
    printf("prop device_count=%d\n", count);
    printf("prop driver_version=%d\n", drv);
    printf("prop runtime_version=%d\n", rtv);
    if (drv < rtv)
        rt_fail("driver version %d older than the runtime %d, yet the runtime initialised", drv, rtv);

    for (int d = 0; d < count; d++) {
        dev_index = d;
        cudaDeviceProp p, p2;
        memset(&p, 0, sizeof p);
        memset(&p2, 0, sizeof p2);
        CK(cudaGetDeviceProperties(&p, d));
        CK(cudaGetDeviceProperties(&p2, d));
        if (memcmp(&p, &p2, sizeof p) != 0)
            rt_fail("dev%d: two cudaGetDeviceProperties calls disagree", d);

        char uuid[64];
        const unsigned char *u = (const unsigned char *)p.uuid.bytes;
        snprintf(uuid, sizeof uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        char bus[64] = "";
        CK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, d));

        kv_str("name", p.name);
        kv_str("uuid", uuid);
        kv_str("pci_bus_id_string", bus);
        P(totalGlobalMem);
        P(sharedMemPerBlock);
        P(regsPerBlock);
        P(warpSize);
        P(memPitch);
        P(maxThreadsPerBlock);
        PA(maxThreadsDim);
        PA(maxGridSize);
        P(totalConstMem);
        P(major);
        P(minor);
        P(textureAlignment);
        P(texturePitchAlignment);
        P(multiProcessorCount);
        P(integrated);
        P(canMapHostMemory);
        P(maxTexture1D);
        PA(maxTexture2D);
        PA(maxTexture3D);
        P(surfaceAlignment);
        P(concurrentKernels);
        P(ECCEnabled);
        P(pciBusID);
        P(pciDeviceID);
        P(pciDomainID);
        P(tccDriver);
        P(asyncEngineCount);
        P(unifiedAddressing);
        P(memoryBusWidth);
        P(l2CacheSize);
        P(persistingL2CacheMaxSize);
        P(maxThreadsPerMultiProcessor);
        P(streamPrioritiesSupported);
        P(globalL1CacheSupported);
        P(localL1CacheSupported);
        P(sharedMemPerMultiprocessor);
        P(regsPerMultiprocessor);
        P(managedMemory);
        P(isMultiGpuBoard);
        P(multiGpuBoardGroupID);
        P(hostNativeAtomicSupported);
        P(pageableMemoryAccess);
        P(concurrentManagedAccess);
        P(computePreemptionSupported);
        P(canUseHostPointerForRegisteredMem);
        P(cooperativeLaunch);
        P(sharedMemPerBlockOptin);
        P(pageableMemoryAccessUsesHostPageTables);
        P(directManagedMemAccessFromHost);
        P(maxBlocksPerMultiProcessor);
        P(accessPolicyMaxWindowSize);
        P(reservedSharedMemPerBlock);
        P(hostRegisterSupported);
        P(sparseCudaArraySupported);
        P(hostRegisterReadOnlySupported);
        P(timelineSemaphoreInteropSupported);
        P(memoryPoolsSupported);
        P(gpuDirectRDMASupported);
        P(gpuDirectRDMAFlushWritesOptions);
        P(gpuDirectRDMAWritesOrdering);
        P(memoryPoolSupportedHandleTypes);
        P(deferredMappingCudaArraySupported);
        P(ipcEventSupported);
        P(clusterLaunch);
        P(unifiedFunctionPointers);
        P(deviceNumaConfig);
        P(deviceNumaId);
        P(mpsEnabled);
        P(hostNumaId);
        P(gpuPciDeviceID);
        P(gpuPciSubsystemID);

        /* Attributes that are no longer cudaDeviceProp fields in CUDA 13. */
        int clock_khz = attr(cudaDevAttrClockRate, d);
        kv_ll("attr.clockRate", clock_khz);
        kv_ll("attr.memoryClockRate", attr(cudaDevAttrMemoryClockRate, d));
        kv_ll("attr.computeMode", attr(cudaDevAttrComputeMode, d));
        kv_ll("attr.kernelExecTimeout", attr(cudaDevAttrKernelExecTimeout, d));
        kv_ll("attr.singleToDoublePrecisionPerfRatio", attr(cudaDevAttrSingleToDoublePrecisionPerfRatio, d));
        kv_ll("attr.maxSharedMemoryPerBlockOptin", attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
        kv_ll("attr.computeCapabilityMajor", attr(cudaDevAttrComputeCapabilityMajor, d));
        kv_ll("attr.computeCapabilityMinor", attr(cudaDevAttrComputeCapabilityMinor, d));

        /* Sanity. */
        if (p.name[0] == '\0')
            rt_fail("dev%d: empty name", d);
        if (p.totalGlobalMem < ((size_t)1 << 30))
            rt_fail("dev%d: totalGlobalMem %zu below 1 GiB", d, p.totalGlobalMem);
        if (p.multiProcessorCount <= 0 || p.multiProcessorCount > 4096)
            rt_fail("dev%d: multiProcessorCount %d", d, p.multiProcessorCount);
        if (p.major < 3 || p.major > 20 || p.minor < 0 || p.minor > 9)
            rt_fail("dev%d: compute capability %d.%d", d, p.major, p.minor);
        if (p.warpSize != 32)
            rt_fail("dev%d: warpSize %d", d, p.warpSize);
        if (p.maxThreadsPerBlock < 256 || p.maxThreadsPerBlock > 4096)
            rt_fail("dev%d: maxThreadsPerBlock %d", d, p.maxThreadsPerBlock);
        if (p.sharedMemPerBlock < 16384 || p.sharedMemPerBlockOptin < p.sharedMemPerBlock)
            rt_fail("dev%d: sharedMemPerBlock %zu, opt-in %zu", d, p.sharedMemPerBlock, p.sharedMemPerBlockOptin);
        if (p.l2CacheSize <= 0)
            rt_fail("dev%d: l2CacheSize %d", d, p.l2CacheSize);
        if (clock_khz <= 0)
            rt_fail("dev%d: clock rate %d kHz", d, clock_khz);
        if (p.unifiedAddressing != 1)
            rt_fail("dev%d: unifiedAddressing %d on a 64-bit Linux system", d, p.unifiedAddressing);
        int nonzero = 0;
        for (int i = 0; i < 16; i++)
            nonzero |= u[i];
        if (!nonzero)
            rt_fail("dev%d: all-zero UUID", d);
        unsigned dom = 0, b = 0, dv = 0;
        if (sscanf(bus, "%x:%x:%x", &dom, &b, &dv) != 3 || (int)dom != p.pciDomainID || (int)b != p.pciBusID ||
            (int)dv != p.pciDeviceID)
            rt_fail("dev%d: cudaDeviceGetPCIBusId \"%s\" disagrees with %04x:%02x:%02x", d, bus, p.pciDomainID,
                    p.pciBusID, p.pciDeviceID);
        int back = -1;
        CK(cudaDeviceGetByPCIBusId(&back, bus));
        if (back != d)
            rt_fail("cudaDeviceGetByPCIBusId(%s) = %d, expected %d", bus, back, d);

        /* The attribute path agrees with the properties. */
        expect_attr("MultiProcessorCount", cudaDevAttrMultiProcessorCount, d, p.multiProcessorCount);
        expect_attr("ComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor, d, p.major);
        expect_attr("ComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor, d, p.minor);
        expect_attr("MaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock, d, p.maxThreadsPerBlock);
        expect_attr("L2CacheSize", cudaDevAttrL2CacheSize, d, p.l2CacheSize);
        expect_attr("PciBusId", cudaDevAttrPciBusId, d, p.pciBusID);
        expect_attr("MaxSharedMemoryPerBlock", cudaDevAttrMaxSharedMemoryPerBlock, d, (long long)p.sharedMemPerBlock);
        expect_attr("WarpSize", cudaDevAttrWarpSize, d, p.warpSize);
        expect_attr("UnifiedAddressing", cudaDevAttrUnifiedAddressing, d, p.unifiedAddressing);
        expect_attr("MemoryPoolsSupported", cudaDevAttrMemoryPoolsSupported, d, p.memoryPoolsSupported);

        /* Per-run values: logged, not compared. */
        CK(cudaSetDevice(d));
        size_t free_b = 0, total_b = 0, lim = 0;
        CK(cudaMemGetInfo(&free_b, &total_b));
        rt_info("dev%d: cudaMemGetInfo free=%zu total=%zu", d, free_b, total_b);
        if (total_b == 0 || free_b > total_b || total_b > p.totalGlobalMem)
            rt_fail("dev%d: cudaMemGetInfo free=%zu total=%zu (totalGlobalMem %zu)", d, free_b, total_b,
                    p.totalGlobalMem);
        CK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
        rt_info("dev%d: limit stack=%zu", d, lim);
        CK(cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
        rt_info("dev%d: limit printf fifo=%zu", d, lim);
        CK(cudaDeviceGetLimit(&lim, cudaLimitMallocHeapSize));
        rt_info("dev%d: limit malloc heap=%zu", d, lim);
    }
    CK(cudaSetDevice(0));
    rt_pass();
}

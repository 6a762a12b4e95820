/* Does the way device memory is mapped change how fast kernels use it? (issue 9: ResNet-50 training runs
 * 2-3 % slower under cumux, whose client memory is VMM chunks, one per allocation of 1 MiB or more.)
 * The same kernels over the same amount of memory, allocated each way: one cuMemAlloc; cuMemCreate handles
 * of 2 MiB, 64 MiB, or one for all of it, mapped in one reservation (with and without a POSIX-file-
 * descriptor handle type, as cumux makes them; reservation aligned to 2 MiB or 1 GiB); the default pool.
 * Kernels: random 4-byte reads over all of it (each from another page: the TLB's reach), the same over
 * 256 MiB, and a streaming copy (ms per kernel, the median of 7); then a CUDA graph of 2,000 kernels back
 * to back, each reading 16 KiB, 1 MiB or 4 MiB and writing as much elsewhere (us per kernel).
 *   nvcc -O2 -o /tmp/probe_mapping_speed tools/probe_mapping_speed.cu -lcuda && /tmp/probe_mapping_speed [GiB] */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                             \
    do {                                                                                                  \
        CUresult r_ = (x);                                                                                \
        if (r_ != CUDA_SUCCESS) {                                                                         \
            const char *s_ = "?";                                                                         \
            cuGetErrorName(r_, &s_);                                                                      \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);                                \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

__global__ void gather(const float *a, unsigned long long n, float *out, unsigned reads)
{
    unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long h = t * 0x9E3779B97F4A7C15ull + 1;
    float s = 0;
    for (unsigned i = 0; i < reads; i++) {
        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
        s += a[h % n];
    }
    if (s == 1234.5f) /* never: keeps the reads */
        out[0] = s;
}

__global__ void copy(const float4 *a, float4 *b, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        b[i] = a[i];
}

__global__ void scale(const float *a, float *b, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        b[i] = a[i] * 1.0001f;
}

/* Back to back on one stream, as a training step runs them: 2,000 kernels, each reading 1 MiB and writing
 * 1 MiB elsewhere, moving through the whole buffer. us per kernel (ncu, timing kernels one at a time,
 * saw no kernel slower with PyTorch's VMM allocator: a cost between kernels would show only here). */
static float chain(CUdeviceptr p, size_t bytes, unsigned elems)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    size_t slots = bytes / (elems * 4ull) - 1;
    /* a graph: the CPU's launch rate must not be what is measured */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (unsigned k = 0; k < 2000; k++) {
        size_t i = (k * 7919ull) % slots;
        scale<<<(elems + 255) / 256, 256, 0, s>>>((const float *)(p + i * elems * 4ull),
                                                  (float *)(p + ((i + 1) % slots) * elems * 4ull), elems);
    }
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    float best = 1e30f;
    for (int rep = 0; rep < 4; rep++) {
        cudaEventRecord(e0, s);
        cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep && ms < best)
            best = ms;
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    return best * 1000 / 2000;
}

static int cmpf(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

static void measure(const char *name, CUdeviceptr p, size_t bytes)
{
    float *a = (float *)p, *out = (float *)(p + bytes - 64);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemset(a, 0, bytes);
    float res[3];
    for (int k = 0; k < 3; k++) {
        float t[7];
        for (int i = 0; i < 8; i++) {
            cudaEventRecord(e0);
            if (k == 0)
                gather<<<132 * 16, 256>>>(a, bytes / 4 - 64, out, 64);
            else if (k == 1)
                gather<<<132 * 16, 256>>>(a, (bytes < (256u << 20) ? bytes - 256 : (256u << 20)) / 4, out, 64);
            else
                copy<<<132 * 8, 512>>>((const float4 *)a, (float4 *)(p + bytes / 2), bytes / 2 / 16);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            if (i)
                cudaEventElapsedTime(&t[i - 1], e0, e1);
        }
        qsort(t, 7, sizeof t[0], cmpf);
        res[k] = t[3];
    }
    cudaError_t e = cudaGetLastError();
    float c1 = chain(p, bytes, 1u << 18), c2 = chain(p, bytes, 1u << 12), c3 = chain(p, bytes, 1u << 20);
    printf("MAP %-34s chain_1MiB %7.2f us/kernel  chain_16KiB %6.2f us/kernel  chain_4MiB %6.2f us/kernel\n", name, c1, c2, c3);
    printf("MAP %-34s gather_all %8.3f ms  gather_256M %8.3f ms  copy %8.3f ms (%.0f GB/s)%s%s\n", name, res[0],
           res[1], res[2], bytes / 1e6 / res[2], e ? " error " : "", e ? cudaGetErrorName(e) : "");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void vmm(const char *name, size_t bytes, size_t handle, size_t align, int fd)
{
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (fd)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (!handle)
        handle = bytes;
    CUdeviceptr p;
    CK(cuMemAddressReserve(&p, bytes, align, 0, 0));
    size_t n = bytes / handle;
    CUmemGenericAllocationHandle *h = (CUmemGenericAllocationHandle *)calloc(n, sizeof *h);
    for (size_t i = 0; i < n; i++) {
        CK(cuMemCreate(&h[i], handle, &prop, 0));
        CK(cuMemMap(p + i * handle, handle, 0, h[i], 0));
    }
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(p, bytes, &acc, 1));
    measure(name, p, bytes);
    CK(cuMemUnmap(p, bytes));
    for (size_t i = 0; i < n; i++)
        CK(cuMemRelease(h[i]));
    CK(cuMemAddressFree(p, bytes));
    free(h);
}

int main(int argc, char **argv)
{
    size_t gib = argc > 1 ? strtoul(argv[1], 0, 10) : 8;
    size_t bytes = gib << 30;
    cudaFree(0);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes));
    measure("cuMemAlloc", p, bytes);
    CK(cuMemFree(p));
    vmm("cuMemCreate 2MiB handles", bytes, 2u << 20, 0, 0);
    vmm("cuMemCreate 64MiB handles", bytes, 64u << 20, 0, 0);
    vmm("cuMemCreate 64MiB handles, fd", bytes, 64u << 20, 0, 1);
    vmm("cuMemCreate one handle", bytes, 0, 0, 0);
    vmm("cuMemCreate one handle, fd", bytes, 0, 0, 1);
    vmm("cuMemCreate one handle, 1GiB-aligned", bytes, 0, 1u << 30, 0);
    vmm("cuMemCreate 2MiB handles, 1GiB-aligned", bytes, 2u << 20, 1u << 30, 0);
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, 0));
    CK(cuMemAllocFromPoolAsync(&p, bytes, pool, 0));
    CK(cuStreamSynchronize(0));
    measure("default pool", p, bytes);
    CK(cuMemFreeAsync(p, 0));
    CK(cuStreamSynchronize(0));
    CK(cuMemAlloc(&p, 64u << 20));
    measure("cuMemAlloc 64MiB", p, 64u << 20);
    CK(cuMemFree(p));
    vmm("cuMemCreate 64MiB one handle", 64u << 20, 0, 0, 0);
    vmm("cuMemCreate 64MiB in 2MiB handles", 64u << 20, 2u << 20, 0, 0);
    CK(cuMemAlloc(&p, bytes));
    measure("cuMemAlloc (again)", p, bytes);
    CK(cuMemFree(p));
    return 0;
}

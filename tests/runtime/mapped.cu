/* mapped: host memory the GPU reads and writes directly. cudaSetDeviceFlags(cudaDeviceMapHost) before the
 * context exists; cudaHostAlloc(cudaHostAllocMapped) and a kernel reading and writing through
 * cudaHostGetDevicePointer's pointers (results visible to the host after a sync, no copy);
 * cudaHostGetFlags; cudaHostRegister of malloc'd memory (page-aligned and not) followed by
 * copies to and from it, and a registered-mapped buffer written by a kernel; cudaHostUnregister. */
#include "rt_test.h"

#include <unistd.h>

/* Reads `io` and writes both buffers: out = 2 io + 1, then io = -io. */
__global__ void twice_plus_one(float *io, float *out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = io[i];
        out[i] = v * 2.0f + 1.0f;
        io[i] = -v;
    }
}

__global__ void fill_index(int *p, int n, int base)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = base + i;
}

int main(void)
{
    rt_begin("mapped");
    rt_require_gpu();
    CK(cudaSetDeviceFlags(cudaDeviceMapHost)); /* before the context exists; the default with UVA anyway */

    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    if (!p.canMapHostMemory)
        rt_fail("device reports canMapHostMemory=0");

    /* 1. cudaHostAlloc(Mapped): the kernel reads `in`, writes `out` and writes `in` back, in host memory. */
    const int n = 300001;
    const size_t bytes = (size_t)n * sizeof(float);
    float *in = NULL, *out = NULL;
    CK(cudaHostAlloc((void **)&in, bytes, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&out, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    unsigned int flags = 0;
    CK(cudaHostGetFlags(&flags, in));
    if (!(flags & cudaHostAllocMapped))
        rt_fail("cudaHostGetFlags(in) = 0x%x, cudaHostAllocMapped missing", flags);
    float *orig = (float *)rt_malloc(bytes);
    rt_fill_float(orig, n, 11, 1000.0f);
    memcpy(in, orig, bytes);
    rt_poison(out, bytes);
    float *din = NULL, *dout = NULL;
    CK(cudaHostGetDevicePointer((void **)&din, in, 0));
    CK(cudaHostGetDevicePointer((void **)&dout, out, 0));
    rt_info("host %p -> device %p (%s)", (void *)in, (void *)din, din == in ? "same address, UVA" : "different");
    twice_plus_one<<<64, 256>>>(din, dout, n);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) {
        float w = orig[i] * 2.0f + 1.0f; /* orig*2 is exact: fused or not, one rounding */
        if (memcmp(&out[i], &w, sizeof w) != 0)
            rt_fail("mapped out[%d] = %.9g, expected %.9g", i, (double)out[i], (double)w);
        if (in[i] != -orig[i])
            rt_fail("mapped in[%d] = %.9g after the kernel, expected %.9g", i, (double)in[i], (double)-orig[i]);
    }
    free(orig);

    /* 2. cudaHostRegister of malloc'd memory, page-aligned and not, then copies both ways. */
    long page = sysconf(_SC_PAGESIZE);
    const size_t rb = 5 * 1024 * 1024 + 12;
    void *aligned = NULL;
    if (posix_memalign(&aligned, (size_t)page, rb) != 0)
        rt_fail("posix_memalign failed");
    unsigned char *unaligned_base = (unsigned char *)rt_malloc(rb + 64);
    unsigned char *unaligned = unaligned_base + 13;
    unsigned char *bufs[2] = {(unsigned char *)aligned, unaligned};
    unsigned char *ref = (unsigned char *)rt_malloc(rb);
    unsigned char *dev = NULL;
    CK(cudaMalloc((void **)&dev, rb));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int k = 0; k < 2; k++) {
        unsigned char *h = bufs[k];
        CK(cudaHostRegister(h, rb, cudaHostRegisterDefault));
        cudaPointerAttributes at;
        CK(cudaPointerGetAttributes(&at, h));
        if (at.type != cudaMemoryTypeHost)
            rt_fail("registered buffer %d: pointer type %d, expected host (%d)", k, (int)at.type,
                    (int)cudaMemoryTypeHost);
        rt_rng r;
        rt_rng_seed(&r, 20 + (uint64_t)k);
        for (size_t i = 0; i < rb; i++)
            ref[i] = h[i] = (unsigned char)rt_rng_next(&r);
        CK(cudaMemset(dev, 0, rb));
        CK(cudaMemcpy(dev, h, rb, cudaMemcpyHostToDevice));
        memset(h, 0x5a, rb);
        CK(cudaMemcpy(h, dev, rb, cudaMemcpyDeviceToHost));
        rt_expect_bytes(k ? "registered (unaligned) round trip" : "registered (aligned) round trip", h, ref, rb);
        /* Async, on a non-blocking stream, with an offset. */
        memset(h, 0x33, rb);
        CK(cudaMemcpyAsync(h + 7, dev + 7, rb - 7, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        rt_expect_bytes("registered async D2H", h + 7, ref + 7, rb - 7);
        for (int i = 0; i < 7; i++)
            if (h[i] != 0x33)
                rt_fail("registered async D2H wrote before its destination (byte %d)", i);
        CK(cudaHostUnregister(h));
    }

    /* 3. cudaHostRegisterMapped: a kernel writes the registered malloc'd buffer directly. */
    const int m = (int)(rb / sizeof(int));
    int *hm = (int *)aligned, *dm = NULL;
    CK(cudaHostRegister(hm, (size_t)m * sizeof(int), cudaHostRegisterMapped));
    CK(cudaHostGetDevicePointer((void **)&dm, hm, 0));
    rt_poison(hm, (size_t)m * sizeof(int));
    fill_index<<<128, 256, 0, s>>>(dm, m, 77);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++)
        if (hm[i] != 77 + i)
            rt_fail("registered-mapped [%d] = %d, expected %d", i, hm[i], 77 + i);
    CK(cudaHostUnregister(hm));

    CK(cudaStreamDestroy(s));
    CK(cudaFree(dev));
    CK(cudaFreeHost(in));
    CK(cudaFreeHost(out));
    free(aligned);
    free(unaligned_base);
    free(ref);
    rt_pass();
}

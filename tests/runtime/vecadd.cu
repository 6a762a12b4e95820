/* vecadd: kernels launched with <<<>>> (the runtime registers the fatbin at start-up and, with lazy
 * loading, loads each kernel at its first launch), and cudaMemcpy of every kind: HostToDevice,
 * DeviceToHost, DeviceToDevice, HostToHost and Default, from and to pageable memory (malloc),
 * cudaMallocHost and cudaHostAlloc memory, synchronous and on a stream; cudaPointerGetAttributes of
 * each kind of pointer; cudaMemset. */
#include "rt_test.h"

__global__ void vecadd(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

/* Launched for the first time late in the program: a second lazy load after other work. */
__global__ void scale_add(float *x, float s, float t, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = x[i] * s + t;
}

static void expect_kind(const void *p, cudaMemoryType want, const char *what)
{
    cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    CK(cudaPointerGetAttributes(&at, p));
    if (at.type != want)
        rt_fail("cudaPointerGetAttributes(%s): type %d, expected %d", what, (int)at.type, (int)want);
    if (want == cudaMemoryTypeDevice && at.devicePointer != p)
        rt_fail("cudaPointerGetAttributes(%s): devicePointer %p, expected %p", what, at.devicePointer, p);
    if (want == cudaMemoryTypeHost && at.hostPointer != p)
        rt_fail("cudaPointerGetAttributes(%s): hostPointer %p, expected %p", what, at.hostPointer, p);
}

int main(void)
{
    rt_begin("vecadd");
    rt_require_gpu();

    const int n = (1 << 20) + 3; /* odd: the kernels' tail and the copies' last bytes */
    const size_t bytes = (size_t)n * sizeof(float);
    float *a = (float *)rt_malloc(bytes), *b = (float *)rt_malloc(bytes), *out = (float *)rt_malloc(bytes);
    float *want = (float *)rt_malloc(bytes);
    rt_fill_float(a, n, 1, 100.0f);
    rt_fill_float(b, n, 2, 100.0f);
    for (int i = 0; i < n; i++)
        want[i] = a[i] + b[i]; /* one rounding, as on the GPU */

    float *pin_mh = NULL, *pin_ha = NULL, *pin_port = NULL;
    CK(cudaMallocHost((void **)&pin_mh, bytes));
    CK(cudaHostAlloc((void **)&pin_ha, bytes, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&pin_port, bytes, cudaHostAllocPortable));
    float *da = NULL, *db = NULL, *dc = NULL, *dd = NULL;
    CK(cudaMalloc((void **)&da, bytes));
    CK(cudaMalloc((void **)&db, bytes));
    CK(cudaMalloc((void **)&dc, bytes));
    CK(cudaMalloc((void **)&dd, bytes));

    expect_kind(da, cudaMemoryTypeDevice, "cudaMalloc pointer");
    expect_kind(pin_mh, cudaMemoryTypeHost, "cudaMallocHost pointer");
    expect_kind(pin_ha, cudaMemoryTypeHost, "cudaHostAlloc pointer");
    expect_kind(a, cudaMemoryTypeUnregistered, "malloc pointer");

    /* 1. pageable -> device (HostToDevice), pinned -> device (Default), kernel, device -> pageable. */
    CK(cudaMemset(dc, 0xff, bytes));
    CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    memcpy(pin_ha, b, bytes);
    CK(cudaMemcpy(db, pin_ha, bytes, cudaMemcpyDefault));
    vecadd<<<264, 256>>>(da, db, dc, n);
    CK_LAUNCH();
    rt_poison(out, bytes);
    CK(cudaMemcpy(out, dc, bytes, cudaMemcpyDeviceToHost));
    rt_expect_equal_f("kernel, D2H to pageable", out, want, n);

    /* 2. device -> device (DeviceToDevice), device -> cudaMallocHost (Default). */
    CK(cudaMemset(dd, 0xff, bytes));
    CK(cudaMemcpy(dd, dc, bytes, cudaMemcpyDeviceToDevice));
    rt_poison(pin_mh, bytes);
    CK(cudaMemcpy(pin_mh, dd, bytes, cudaMemcpyDefault));
    rt_expect_equal_f("D2D then D2H (Default) to cudaMallocHost", pin_mh, want, n);

    /* 3. HostToHost and Default between pageable and pinned host buffers. */
    rt_poison(out, bytes);
    CK(cudaMemcpy(out, pin_mh, bytes, cudaMemcpyHostToHost));
    rt_expect_equal_f("H2H pinned -> pageable", out, want, n);
    rt_poison(pin_port, bytes);
    CK(cudaMemcpy(pin_port, out, bytes, cudaMemcpyDefault));
    rt_expect_equal_f("Default pageable -> pinned", pin_port, want, n);

    /* 4. Default with pageable memory on both device directions, and a device -> device Default. */
    CK(cudaMemset(da, 0xff, bytes));
    CK(cudaMemcpy(da, want, bytes, cudaMemcpyDefault));
    CK(cudaMemset(db, 0xff, bytes));
    CK(cudaMemcpy(db, da, bytes, cudaMemcpyDefault));
    rt_poison(out, bytes);
    CK(cudaMemcpy(out, db, bytes, cudaMemcpyDefault));
    rt_expect_equal_f("Default pageable -> device -> device -> pageable", out, want, n);

    /* 5. A stream: async copies from/to pinned and pageable memory around a kernel. */
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    rt_fill_float(a, n, 3, 10.0f);
    rt_fill_float(pin_ha, n, 4, 10.0f);
    for (int i = 0; i < n; i++)
        want[i] = a[i] + pin_ha[i];
    CK(cudaMemsetAsync(dc, 0xff, bytes, s));
    CK(cudaMemcpyAsync(da, a, bytes, cudaMemcpyHostToDevice, s));       /* pageable */
    CK(cudaMemcpyAsync(db, pin_ha, bytes, cudaMemcpyHostToDevice, s));  /* pinned */
    vecadd<<<132, 512, 0, s>>>(da, db, dc, n);
    CK_LAUNCH();
    rt_poison(pin_mh, bytes);
    rt_poison(out, bytes);
    CK(cudaMemcpyAsync(pin_mh, dc, bytes, cudaMemcpyDeviceToHost, s)); /* pinned */
    CK(cudaMemcpyAsync(out, dc, bytes, cudaMemcpyDefault, s));         /* pageable, Default */
    CK(cudaStreamSynchronize(s));
    rt_expect_equal_f("stream: D2H to pinned", pin_mh, want, n);
    rt_expect_equal_f("stream: D2H to pageable (Default)", out, want, n);

    /* 6. Odd sizes and unaligned offsets, synchronous, through pageable memory. */
    unsigned char *hb = (unsigned char *)rt_malloc(bytes), *hr = (unsigned char *)rt_malloc(bytes);
    rt_rng r;
    rt_rng_seed(&r, 5);
    for (size_t i = 0; i < bytes; i++)
        hb[i] = (unsigned char)rt_rng_next(&r);
    const size_t offs[] = {0, 1, 3, 4097};
    const size_t lens[] = {1, 7, 4095, 65537, 3 * 1024 * 1024 + 5};
    for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t o = offs[oi], l = lens[li];
            if (o + l > bytes)
                continue;
            CK(cudaMemset(dd, 0, bytes));
            CK(cudaMemcpy((unsigned char *)dd + o, hb + o, l, cudaMemcpyHostToDevice));
            memset(hr, 0xa5, bytes);
            CK(cudaMemcpy(hr, dd, o + l + (o + l < bytes ? 1 : 0), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < o; i++)
                if (hr[i] != 0)
                    rt_fail("offset %zu len %zu: byte %zu before the copy changed", o, l, i);
            rt_expect_bytes("odd-size copy", hr + o, hb + o, l);
            if (o + l < bytes && hr[o + l] != 0)
                rt_fail("offset %zu len %zu: byte after the copy changed", o, l);
        }

    /* 7. A kernel first launched now (lazy load after other work) on the legacy default stream. */
    CK(cudaMemcpy(dc, want, bytes, cudaMemcpyHostToDevice));
    scale_add<<<100, 128>>>(dc, 2.0f, 0.5f, n);
    CK_LAUNCH();
    rt_poison(out, bytes);
    CK(cudaMemcpy(out, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float w = want[i] * 2.0f + 0.5f; /* may fuse on the GPU: compare with a tolerance */
        if (!(fabsf(out[i] - w) <= 1e-5f * fabsf(w) + 1e-6f))
            rt_fail("scale_add: element %d is %.9g, expected %.9g", i, (double)out[i], (double)w);
    }
    CK(cudaDeviceSynchronize());

    CK(cudaStreamDestroy(s));
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    CK(cudaFree(dd));
    CK(cudaFreeHost(pin_mh));
    CK(cudaFreeHost(pin_ha));
    CK(cudaFreeHost(pin_port));
    free(a);
    free(b);
    free(out);
    free(want);
    free(hb);
    free(hr);
    rt_pass();
}

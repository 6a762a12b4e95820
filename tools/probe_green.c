/* Do green contexts give cumuxd per-client contexts that run concurrently and load modules without
 * waiting for each other's kernels? Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_green.c -o /tmp/pg -lcuda && /tmp/pg build/tests/gpu/gpu_kernels.fatbin */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "probe_util.h"

int main(int argc, char **argv)
{
    (void)argc;
    CUdevice dev;
    CUcontext prim;
    prim = probe_primary_context(&dev);
    char *img = probe_read_file(argv[1]);
    CUdevResource sm;
    CK(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
    printf("SMs: %u\n", sm.sm.smCount);
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, &sm, 1));
    CUgreenCtx g[2];
    CUcontext c[2];
    CUmodule m[2];
    CUfunction f[2];
    CUstream s[2];
    for (int i = 0; i < 2; i++) {
        CK(cuGreenCtxCreate(&g[i], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CK(cuCtxFromGreenCtx(&c[i], g[i]));
        CK(cuCtxSetCurrent(c[i]));
        CK(cuModuleLoadData(&m[i], img));
        CK(cuModuleGetFunction(&f[i], m[i], "spin_flag"));
        CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    }
    int khz;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    long long cycles = (long long)khz * 500;
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    /* 1: concurrency across two green contexts: 16 blocks each, 500 ms each */
    double t0 = now_ms();
    for (int i = 0; i < 2; i++) {
        CK(cuCtxSetCurrent(c[i]));
        CK(cuLaunchKernel(f[i], 16, 1, 1, 128, 1, 1, 0, s[i], args, NULL));
    }
    for (int i = 0; i < 2; i++) {
        CK(cuCtxSetCurrent(c[i]));
        CK(cuStreamSynchronize(s[i]));
    }
    printf("two green ctxs, 500 ms kernel each: %.1f ms total (%s)\n", now_ms() - t0,
           now_ms() - t0 < 750 ? "concurrent" : "serialized");
    /* 2: while green ctx 0 runs a kernel, what waits in green ctx 1? */
    const char *names[] = {"cuModuleLoadData", "cuModuleGetFunction(new)", "cuMemAlloc", "cuMemFree", "cuMemAllocHost",
                           "cuMemFreeHost", "cuModuleUnload", "cuMemHostRegister", "cuMemHostUnregister"};
    static char reg[1 << 20] __attribute__((aligned(4096)));
    for (int t = 0; t < 9; t++) {
        static CUmodule mm;
        static CUdeviceptr d;
        static void *hp;
        CK(cuCtxSetCurrent(c[0]));
        CK(cuLaunchKernel(f[0], 1, 1, 1, 32, 1, 1, 0, s[0], args, NULL));
        CK(cuCtxSetCurrent(c[1]));
        double a = now_ms();
        CUresult r = 0;
        switch (t) {
        case 0: r = cuModuleLoadData(&mm, img); break;
        case 1: { CUmodule m3; CUfunction ff; r = cuModuleLoadData(&m3, img); if (!r) r = cuModuleGetFunction(&ff, m3, "spin_flag"); break; }
        case 2: r = cuMemAlloc(&d, 1 << 20); break;
        case 3: r = cuMemFree(d); break;
        case 4: r = cuMemAllocHost(&hp, 1 << 20); break;
        case 5: r = cuMemFreeHost(hp); break;
        case 6: r = cuModuleUnload(mm); break;
        case 7: r = cuMemHostRegister(reg, sizeof reg, 0); break;
        case 8: r = cuMemHostUnregister(reg); break;
        }
        double dt = now_ms() - a;
        printf("green ctx 1 while ctx 0 spins: %-26s %8.2f ms (r=%d)%s\n", names[t], dt, r, dt > 100 ? " WAITS" : "");
        CK(cuCtxSetCurrent(c[0]));
        CK(cuStreamSynchronize(s[0]));
    }
    /* 3: memory of one green context used by a kernel of the other: copy test */
    CUdeviceptr buf;
    CK(cuCtxSetCurrent(c[0]));
    CK(cuMemAlloc(&buf, 4096));
    CK(cuMemsetD32(buf, 0x1234, 1024));
    CK(cuCtxSetCurrent(c[1]));
    unsigned h[1024];
    CK(cuMemcpyDtoH(h, buf, sizeof h));
    printf("cross green ctx read: %s\n", h[1023] == 0x1234 ? "ok" : "WRONG");
    /* 4: stream-ordered free while the other runs */
    CK(cuCtxSetCurrent(c[0]));
    CK(cuLaunchKernel(f[0], 1, 1, 1, 32, 1, 1, 0, s[0], args, NULL));
    CK(cuCtxSetCurrent(c[1]));
    double a = now_ms();
    CUdeviceptr d2;
    CK(cuMemAllocAsync(&d2, 1 << 20, s[1]));
    CK(cuMemFreeAsync(d2, s[1]));
    CK(cuStreamSynchronize(s[1]));
    printf("green ctx 1 cuMemAllocAsync+FreeAsync+sync while ctx 0 spins: %.2f ms\n", now_ms() - a);
    CK(cuCtxSetCurrent(c[0]));
    CK(cuStreamSynchronize(s[0]));
    /* 5: same in the primary context (no green): async free while a kernel runs */
    CK(cuCtxSetCurrent(prim));
    CUmodule pm; CUfunction pf; CUstream ps, ps2;
    CK(cuModuleLoadData(&pm, img));
    CK(cuModuleGetFunction(&pf, pm, "spin_flag"));
    CK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&ps2, CU_STREAM_NON_BLOCKING));
    CK(cuLaunchKernel(pf, 1, 1, 1, 32, 1, 1, 0, ps, args, NULL));
    a = now_ms();
    CK(cuMemAllocAsync(&d2, 1 << 20, ps2));
    CK(cuMemFreeAsync(d2, ps2));
    CK(cuStreamSynchronize(ps2));
    printf("primary: cuMemAllocAsync+FreeAsync+sync while a kernel spins: %.2f ms\n", now_ms() - a);
    CK(cuStreamSynchronize(ps));
    return 0;
}

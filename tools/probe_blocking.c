/* Which driver calls wait for kernels already running in the same context? cumuxd runs every client in
 * one context, so a call that waits there would make one client wait for another. Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_blocking.c -o /tmp/pb -lcuda && /tmp/pb build/tests/gpu/gpu_kernels.fatbin */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "probe_util.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: probe_blocking FATBIN (with spin_flag)\n");
        return 2;
    }
    CUdevice dev;
    probe_primary_context(&dev);
    char *img = probe_read_file(argv[1]);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, img));
    CUfunction spin;
    CK(cuModuleGetFunction(&spin, mod, "spin_flag"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int khz;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    long long cycles = (long long)khz * 500; /* 500 ms */
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    const char *names[] = {"cuMemHostRegister 32MiB", "cuMemAllocHost 1MiB", "cuModuleLoadData", "cuMemAlloc 1MiB",
                           "cuStreamCreate", "cuEventCreate", "cuMemFree", "cuMemHostUnregister", "cuModuleUnload",
                           "cuMemFreeHost", "cuLibraryLoadData", "cuModuleGetFunction(new mod)", "cuMemAlloc 1GiB"};
    for (int t = 0; t < 13; t++) {
        static char *reg;
        static void *hp;
        static CUmodule m2;
        static CUdeviceptr d;
        static CUlibrary lib;
        if (!reg) {
            reg = aligned_alloc(4096, 32 << 20);
            for (int i = 0; i < (32 << 20); i += 4096)
                reg[i] = 1;
        }
        CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
        double t0 = now_ms();
        CUresult r = 0;
        switch (t) {
        case 0: r = cuMemHostRegister(reg, 32 << 20, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP); break;
        case 1: r = cuMemAllocHost(&hp, 1 << 20); break;
        case 2: r = cuModuleLoadData(&m2, img); break;
        case 3: r = cuMemAlloc(&d, 1 << 20); break;
        case 4: { CUstream s2; r = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING); break; }
        case 5: { CUevent e; r = cuEventCreate(&e, 0); break; }
        case 6: r = cuMemFree(d); break;
        case 7: r = cuMemHostUnregister(reg); break;
        case 8: r = cuModuleUnload(m2); break;
        case 9: r = cuMemFreeHost(hp); break;
        case 10: r = cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0); break;
        case 11: { CUmodule m3; CUfunction f; r = cuModuleLoadData(&m3, img); if (!r) r = cuModuleGetFunction(&f, m3, "spin_flag"); break; }
        case 12: r = cuMemAlloc(&d, 1ull << 30); break;
        }
        double dt = now_ms() - t0;
        printf("%-32s %8.2f ms  (r=%d)%s\n", names[t], dt, r, dt > 100 ? "  <-- WAITS for the running kernel" : "");
        CK(cuStreamSynchronize(s));
    }
    return 0;
}

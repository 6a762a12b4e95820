/* While one thread's load of code waits for a kernel running in the context (tools/probe_blocking.c: it
 * does), can another thread of the same context launch, and does its kernel run? cumuxd runs every client
 * in one context: if a load held the other threads' launches or kernels, one client's start-up would stall
 * every other client, and a benchmark being timed meanwhile (cuDNN's, at every program's start) would
 * count the stall against whichever candidate it was timing. Under MPS each client loads in its own context.
 * Run on a GPU:
 *   gcc -O2 -pthread -I/usr/local/cuda/include tools/probe_load_others.c -o /tmp/plo -lcuda &&
 *   /tmp/plo build/tests/gpu/gpu_kernels.fatbin
 * For each kind of load, from the moment it began (a 500 ms kernel already running on stream 1): how long
 * the load took, how long the other thread's launch call took (20 ms in), and when that thread's 2 ms kernel
 * on stream 2 had ended. A kernel that ended near 22 ms ran beside the load; near 500 ms it waited. */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "probe_util.h"

static CUcontext ctx;
static char *image;
static int kind;
static double t_load_begin, t_load_end;
static CUresult load_result;

static void *loader(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    t_load_begin = now_ms();
    CUmodule m;
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    switch (kind) {
    case 0: load_result = cuModuleLoadData(&m, image); break;
    case 1: load_result = cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0); break;
    case 2: /* a library's kernel looked up and made a function of (lazy loading loads it here) */
        load_result = cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
        if (!load_result)
            load_result = cuLibraryGetKernel(&k, lib, "spin_flag");
        if (!load_result)
            load_result = cuKernelGetFunction(&f, k);
        break;
    case 3: /* a module's function looked up (lazy loading loads it here) */
        load_result = cuModuleLoadData(&m, image);
        if (!load_result)
            load_result = cuModuleGetFunction(&f, m, "spin_flag");
        break;
    }
    t_load_end = now_ms();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: probe_load_others FATBIN (with spin_flag)\n");
        return 2;
    }
    CUdevice dev;
    ctx = probe_primary_context(&dev);
    image = probe_read_file(argv[1]);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, image));
    CUfunction spin;
    CK(cuModuleGetFunction(&spin, mod, "spin_flag"));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent done;
    CK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    int khz;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    long long long_cycles = (long long)khz * 500, short_cycles = (long long)khz * 2;
    void *p0 = NULL;
    int v = 0;
    const char *names[] = {"cuModuleLoadData", "cuLibraryLoadData", "library kernel's first lookup",
                           "module function's first lookup"};
    printf("%-32s %10s %12s %14s\n", "load (500 ms kernel running)", "load ms", "launch ms", "2 ms kernel end");
    for (kind = 0; kind < 4; kind++) {
        void *long_args[] = {&long_cycles, &p0, &v}, *short_args[] = {&short_cycles, &p0, &v};
        CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s1, long_args, NULL));
        usleep(5000); /* the long kernel is running */
        pthread_t t;
        t_load_begin = 0;
        if (pthread_create(&t, NULL, loader, NULL))
            return 1;
        while (!t_load_begin)
            usleep(100);
        usleep(20000);
        double t0 = now_ms();
        CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s2, short_args, NULL));
        CK(cuEventRecord(done, s2));
        double t1 = now_ms();
        CUresult q;
        while ((q = cuEventQuery(done)) == CUDA_ERROR_NOT_READY)
            ;
        double t2 = now_ms();
        pthread_join(t, NULL);
        if (q || load_result)
            printf("%s: event %s, load %s\n", names[kind], ename(q), ename(load_result));
        printf("%-32s %10.2f %12.2f %14.2f%s\n", names[kind], t_load_end - t_load_begin, t1 - t0,
               t2 - t_load_begin, t2 - t_load_begin > 250 ? "  <-- the other thread's kernel waited" : "");
        CK(cuStreamSynchronize(s1));
        CK(cuStreamSynchronize(s2));
    }
    return 0;
}

/* What a standby worker costs and what it saves (issue 10): the time of cuInit and of the primary context,
 * the device memory each adds (nvidia-smi, whole GPU, so run it alone), and whether a smaller stack limit
 * while waiting gives memory back and how long restoring it takes at a takeover.
 *   probe_standby_cost */
#define _POSIX_C_SOURCE 200809L
#include "probe_util.h"
#include <stdio.h>
#include <stdlib.h>

static long gpu_used_mib(void)
{
    FILE *p = popen("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0", "r");
    long v = -1;
    if (p) {
        if (fscanf(p, "%ld", &v) != 1)
            v = -1;
        pclose(p);
    }
    return v;
}


int main(void)
{
    long m0 = gpu_used_mib();
    double t = now_ms();
    CK(cuInit(0));
    double t_init = now_ms() - t;
    long m1 = gpu_used_mib();
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    t = now_ms();
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    double t_ctx = now_ms() - t;
    long m2 = gpu_used_mib();
    size_t stack = 0, heap = 0, fifo = 0;
    CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
    CK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
    CK(cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
    printf("cuInit %.1f ms (GPU memory used %ld -> %ld MiB)\n", t_init, m0, m1);
    printf("primary context %.1f ms (GPU memory used %ld -> %ld MiB: %+ld)\n", t_ctx, m1, m2, m2 - m1);
    printf("limits: stack %zu B, malloc heap %zu B, printf fifo %zu B\n", stack, heap, fifo);
    size_t free_b = 0, total_b = 0;
    CK(cuMemGetInfo(&free_b, &total_b));
    printf("cuMemGetInfo: %zu MiB free of %zu MiB\n", free_b >> 20, total_b >> 20);
    /* Smaller limits while standing by, restored at the takeover. */
    t = now_ms();
    CUresult r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16);
    double t_small = now_ms() - t;
    long m3 = gpu_used_mib();
    printf("stack limit 16 B: %s, %.1f ms (GPU memory used %ld MiB: %+ld)\n", ename(r), t_small, m3, m3 - m2);
    t = now_ms();
    r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack);
    double t_back = now_ms() - t;
    long m4 = gpu_used_mib();
    printf("stack limit back to %zu B: %s, %.1f ms (GPU memory used %ld MiB: %+ld)\n", stack, ename(r), t_back,
           m4, m4 - m3);
    t = now_ms();
    CK(cuDevicePrimaryCtxRelease(dev));
    double t_rel = now_ms() - t;
    long m5 = gpu_used_mib();
    printf("release %.1f ms (GPU memory used %ld MiB)\n", t_rel, m5);
    printf("SUMMARY cuInit %.0f ms, context %.0f ms and %ld MiB; stack 16 B saves %ld MiB, restoring %.1f ms\n",
           t_init, t_ctx, m2 - m1, m2 - m3, t_back);
    return 0;
}

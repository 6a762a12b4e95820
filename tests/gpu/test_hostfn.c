/* Host functions and stream callbacks: they run in this process, in stream order, after the work before
 * them and before the work after them, with their arguments intact. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

struct record {
    int *pinned;        /* written by a copy just before the host function */
    int seen[64];       /* what each call saw */
    int order[64];      /* the order calls ran in */
    int calls;
    pthread_t thread;   /* host functions run on a thread of the process */
};

static struct record rec;

static void CUDA_CB host_fn(void *arg)
{
    int i = (int)(intptr_t)arg;
    rec.seen[i] = *(volatile int *)rec.pinned;
    rec.order[rec.calls++] = i;
    rec.thread = pthread_self();
}

static void CUDA_CB stream_cb(CUstream s, CUresult status, void *arg)
{
    (void)s;
    if (status != CUDA_SUCCESS)
        gt_fail("callback got status %d", (int)status);
    host_fn(arg);
}

int main(void)
{
    gt_begin("hostfn");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction write = gt_function(mod, "write_value"), spin = gt_function(mod, "spin_flag");
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, sizeof(int)));
    CK(cuMemAllocHost((void **)&rec.pinned, sizeof(int)));
    *rec.pinned = -1;
    long long cycles = gt_cycles_for_ms(dev, 20);
    int n = 40;
    for (int i = 0; i < n; i++) {
        /* A slow kernel, then a write of i, then a copy to pinned memory, then the host function: it must
         * see i, which it can only if it ran after the copy. */
        void *sargs[] = {&cycles, &d, &i};
        if (i % 10 == 0)
            CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, sargs, NULL));
        void *wargs[] = {&d, &i};
        CK(cuLaunchKernel(write, 1, 1, 1, 1, 1, 1, 0, s, wargs, NULL));
        CK(cuMemcpyDtoHAsync(rec.pinned, d, sizeof(int), s));
        if (i % 2)
            CK(cuStreamAddCallback(s, stream_cb, (void *)(intptr_t)i, 0));
        else
            CK(cuLaunchHostFunc(s, host_fn, (void *)(intptr_t)i));
    }
    CK(cuStreamSynchronize(s));
    if (rec.calls != n)
        gt_fail("%d host functions ran, expected %d", rec.calls, n);
    for (int i = 0; i < n; i++) {
        if (rec.order[i] != i)
            gt_fail("host function %d ran in place %d", rec.order[i], i);
        if (rec.seen[i] != i)
            gt_fail("host function %d saw %d: it did not run after the work before it", i, rec.seen[i]);
    }
    if (pthread_equal(rec.thread, pthread_self()))
        gt_fail("host functions ran on the calling thread");
    /* On the legacy stream too. */
    rec.calls = 0;
    int v = 77;
    void *wargs[] = {&d, &v};
    CK(cuLaunchKernel(write, 1, 1, 1, 1, 1, 1, 0, NULL, wargs, NULL));
    CK(cuMemcpyDtoHAsync(rec.pinned, d, sizeof(int), NULL));
    CK(cuLaunchHostFunc(NULL, host_fn, (void *)(intptr_t)0));
    CK(cuCtxSynchronize());
    if (rec.calls != 1 || rec.seen[0] != 77)
        gt_fail("host function on the legacy stream: %d calls, saw %d", rec.calls, rec.seen[0]);
    CK(cuMemFreeHost(rec.pinned));
    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
    printf("hostfn: %d host functions and callbacks in order\n", n + 1);
    gt_pass();
}

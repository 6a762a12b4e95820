/* 8 threads of one client share the primary context (cuCtxSetCurrent in each); six use their own
 * streams (blocking and non-blocking), one the per-thread default stream, one the legacy stream;
 * each loops copies + kernel + sync and checks every element. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

#define THREADS 8
#define ITERS 40

typedef struct {
    int id;
    CUcontext ctx;
    CUfunction fn;
    pthread_barrier_t *start;
    char err[512];
} worker;

#define WCK(call)                                                                                            \
    do {                                                                                                     \
        CUresult r_ = (call);                                                                                \
        if (r_ != CUDA_SUCCESS) {                                                                            \
            snprintf(w->err, sizeof w->err, "thread %d: line %d: %s returned %d (%s)", w->id, __LINE__, #call, \
                     (int)r_, gt_err_name(r_));                                                              \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

static const char *stream_kind(int id)
{
    return id == 6 ? "CU_STREAM_PER_THREAD" : id == 7 ? "legacy" : (id & 1) ? "blocking" : "non-blocking";
}

static void *run(void *arg)
{
    worker *w = arg;
    CUstream s = NULL, own = NULL;
    CUdeviceptr din = 0, dout = 0;
    float *hin = NULL, *hout = NULL;
    int n = (1 << 18) + w->id * 1001;
    size_t bytes = (size_t)n * sizeof(float);

    pthread_barrier_wait(w->start);
    WCK(cuCtxSetCurrent(w->ctx));
    CUcontext cur = NULL;
    WCK(cuCtxGetCurrent(&cur));
    if (cur != w->ctx) {
        snprintf(w->err, sizeof w->err, "thread %d: cuCtxGetCurrent gave another context", w->id);
        goto out;
    }
    if (w->id < 6) {
        WCK(cuStreamCreate(&own, (w->id & 1) ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING));
        s = own;
    } else {
        s = w->id == 6 ? CU_STREAM_PER_THREAD : NULL;
    }
    WCK(cuMemAlloc(&din, bytes));
    WCK(cuMemAlloc(&dout, bytes));
    WCK(cuMemAllocHost((void **)&hin, bytes));
    WCK(cuMemAllocHost((void **)&hout, bytes));

    gt_rng r;
    gt_rng_seed(&r, 1000u + (unsigned)w->id);
    for (int it = 0; it < ITERS; it++) {
        /* A power-of-two scale keeps in*a exact, so fused or not the GPU rounds like the CPU. */
        float a = (float)(1 << (it % 4)), b = (float)w->id + 0.25f * (float)it;
        for (int i = 0; i < n; i++) {
            hin[i] = gt_rng_float(&r) * 100.0f;
            hout[i] = -12345.0f;
        }
        WCK(cuMemsetD32Async(dout, 0xffffffffu, (size_t)n, s));
        WCK(cuMemcpyHtoDAsync(din, hin, bytes, s));
        void *args[] = {&din, &dout, &a, &b, &n};
        WCK(cuLaunchKernel(w->fn, 132, 1, 1, 256, 1, 1, 0, s, args, NULL));
        WCK(cuMemcpyDtoHAsync(hout, dout, bytes, s));
        WCK(cuStreamSynchronize(s));
        for (int i = 0; i < n; i++) {
            float want = hin[i] * a + b;
            if (hout[i] != want) {
                snprintf(w->err, sizeof w->err, "thread %d (%s stream), iteration %d: out[%d] = %g, expected %g",
                         w->id, stream_kind(w->id), it, i, (double)hout[i], (double)want);
                goto out;
            }
        }
    }
out:
    if (hin)
        cuMemFreeHost(hin);
    if (hout)
        cuMemFreeHost(hout);
    if (din)
        cuMemFree(din);
    if (dout)
        cuMemFree(dout);
    if (own)
        cuStreamDestroy(own);
    return NULL;
}

int main(void)
{
    gt_begin("multithread");
    gt_require_gpu();
    CUcontext ctx = gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction fn = gt_function(mod, "scale_add");

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        w[i].ctx = ctx;
        w[i].fn = fn;
        w[i].start = &start;
        if (pthread_create(&th[i], NULL, run, &w[i]) != 0)
            gt_fail("pthread_create failed");
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++)
        if (w[i].err[0])
            gt_fail("%s", w[i].err);
    CK(cuCtxSynchronize());
    CK(cuModuleUnload(mod));
    printf("multithread: %d threads x %d iterations checked\n", THREADS, ITERS);
    gt_pass();
}

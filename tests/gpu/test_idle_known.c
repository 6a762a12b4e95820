/* Completion questions on streams found idle before: the shim (shim/stream.c) and cumuxd
 * (srv_stream_known_idle) answer them without a round trip, or without the driver, while nothing of the
 * program's could have queued work since. Every way of giving an idle stream new work must make it busy
 * again. Each case finds the stream idle (synchronize, queries, synchronize), then gives it work held
 * behind a gate (a stream wait on a pinned word the CPU sets), so it is busy until the CPU says; the
 * stream must read busy, and after the gate opens its synchronize (or the context's) must see the work
 * done. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu_test.h"

static CUfunction write_value, copy_flag;
static CUdeviceptr flag, out;
static volatile uint32_t *gate;

static int read_int(CUdeviceptr p)
{
    int v = 0;
    CK(cuMemcpyDtoH(&v, p, sizeof v));
    return v;
}

static void found_idle(CUstream s)
{
    CK(cuStreamSynchronize(s));
    CK(cuStreamQuery(s));
    CK(cuStreamQuery(s));
    CK(cuStreamSynchronize(s));
}

/* The stream's next work waits until the CPU opens the gate. */
static void gated(CUstream s)
{
    *gate = 0;
    CK(cuStreamWaitValue32(s, (CUdeviceptr)(uintptr_t)gate, 1, CU_STREAM_WAIT_VALUE_EQ));
}

static void store(CUstream s, int value)
{
    void *args[] = {&flag, &value};
    CK(cuLaunchKernel(write_value, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

struct work_args {
    CUcontext ctx;
    CUstream s;
    CUresult r;
};

static void *work_from_thread(void *arg)
{
    struct work_args *w = arg;
    w->r = cuCtxSetCurrent(w->ctx);
    if (w->r == CUDA_SUCCESS) {
        *gate = 0;
        w->r = cuStreamWaitValue32(w->s, (CUdeviceptr)(uintptr_t)gate, 1, CU_STREAM_WAIT_VALUE_EQ);
    }
    int value = 6;
    void *args[] = {&flag, &value};
    if (w->r == CUDA_SUCCESS)
        w->r = cuLaunchKernel(write_value, 1, 1, 1, 1, 1, 1, 0, w->s, args, NULL);
    return NULL;
}

static void *open_later(void *arg)
{
    (void)arg;
    gt_sleep_ms(100);
    *gate = 1;
    return NULL;
}

int main(void)
{
    gt_begin("idle_known");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    write_value = gt_function(mod, "write_value");
    copy_flag = gt_function(mod, "copy_flag");
    CK(cuMemAlloc(&flag, sizeof(int)));
    CK(cuMemAlloc(&out, sizeof(int)));
    CK(cuMemHostAlloc((void **)&gate, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    CUstream s, t, b;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_DEFAULT)); /* blocking: waits for the legacy stream */

    /* 1. Work on the idle stream itself. */
    CK(cuMemsetD32(flag, 0, 1));
    found_idle(s);
    gated(s);
    store(s, 1);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    *gate = 1;
    CK(cuStreamSynchronize(s));
    if (read_int(flag) != 1)
        gt_fail("1: after the stream's synchronize its kernel's store is missing (%d)", read_int(flag));
    CK(cuStreamQuery(s));

    /* 2. A wait on another stream's event: the idle stream now waits for t's gated work. */
    CK(cuMemsetD32(flag, 0, 1));
    found_idle(s);
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    gated(t);
    store(t, 2);
    CK(cuEventRecord(ev, t));
    CK(cuStreamWaitEvent(s, ev, 0));
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    *gate = 1;
    CK(cuStreamSynchronize(s));
    if (read_int(flag) != 2)
        gt_fail("2: synchronizing the waiting stream did not wait for the work it waits on (%d)", read_int(flag));

    /* 3. The legacy stream's rule: an idle blocking stream's next kernel waits for the legacy stream. */
    CK(cuMemsetD32(flag, 0, 1));
    CK(cuMemsetD32(out, 0, 1));
    found_idle(b);
    found_idle(CU_STREAM_LEGACY);
    gated(CU_STREAM_LEGACY);
    store(CU_STREAM_LEGACY, 3);
    EXPECT_RC(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    void *fargs[] = {&flag, &out};
    CK(cuLaunchKernel(copy_flag, 1, 1, 1, 1, 1, 1, 0, b, fargs, NULL));
    EXPECT_RC(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    *gate = 1;
    CK(cuStreamSynchronize(b));
    if (read_int(out) != 3)
        gt_fail("3: the blocking stream's kernel ran before the legacy stream's (it read %d)", read_int(out));

    /* 4. The context: found idle, then gated work on one stream; cuCtxSynchronize waits for it. */
    CK(cuMemsetD32(flag, 0, 1));
    CK(cuCtxSynchronize());
    CK(cuCtxSynchronize());
    gated(t);
    store(t, 4);
    pthread_t opener;
    if (pthread_create(&opener, NULL, open_later, NULL) != 0)
        gt_fail("pthread_create");
    CK(cuCtxSynchronize());
    pthread_join(opener, NULL);
    if (read_int(flag) != 4)
        gt_fail("4: cuCtxSynchronize returned before the gated kernel's store (%d)", read_int(flag));

    /* 5. Copies (no kernel) from pageable memory into an idle stream: they too are work. Two of them, and a
     * pause before the question: cumuxd's worker once waited, when idle or at the second copy, for the
     * first copy's staging slot, i.e. for the gate, which only opens after the question's answer. */
    found_idle(s);
    int host = 4, host2 = 5;
    gated(s);
    CK(cuMemcpyHtoDAsync(flag, &host, sizeof host, s));
    CK(cuMemcpyHtoDAsync(flag, &host2, sizeof host2, s));
    gt_sleep_ms(20);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    *gate = 1;
    CK(cuStreamSynchronize(s));
    if (read_int(flag) != 5)
        gt_fail("5: the copy was not done at the stream's synchronize (%d)", read_int(flag));

    /* 6. Work another thread sent, ordered before this thread's question by a join: seen. */
    found_idle(s);
    struct work_args wa = {.s = s};
    CK(cuCtxGetCurrent(&wa.ctx));
    pthread_t other;
    if (pthread_create(&other, NULL, work_from_thread, &wa) != 0)
        gt_fail("pthread_create");
    pthread_join(other, NULL);
    if (wa.r != CUDA_SUCCESS)
        gt_fail("6: the other thread's work failed: %s", gt_err_name(wa.r));
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    *gate = 1;
    CK(cuStreamSynchronize(s));
    if (read_int(flag) != 6)
        gt_fail("6: the other thread's kernel was not done at the synchronize (%d)", read_int(flag));

    /* 7. A stream asked about again and again (cumuxd then writes completion marks behind its work when
     * the worker idles, server/marks.c): a question after a pause says done only once the work is done,
     * as the value the kernel stored shows (read on the legacy stream, which does not wait for s), and a
     * mark behind gated work never says done before the gate opens. */
    for (int i = 0; i < 60; i++) {
        int gate_it = i % 3 == 2;
        if (gate_it)
            gated(s);
        store(s, 100 + i);
        gt_sleep_us(300); /* the worker idles: the mark is written */
        if (gate_it) {
            EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
            *gate = 1;
        }
        CUresult q;
        for (int k = 0; (q = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY && k < 100000; k++)
            gt_sleep_us(10);
        if (q != CUDA_SUCCESS)
            gt_fail("7: round %d: the query returned %s", i, gt_err_name(q));
        if (read_int(flag) != 100 + i)
            gt_fail("7: round %d: the stream said done before its kernel's store (%d)", i, read_int(flag));
        gt_sleep_us(300);
        CK(i % 2 ? cuCtxSynchronize() : cuStreamSynchronize(s)); /* also answered from the mark */
    }

    CK(cuEventDestroy(ev));
    CK(cuMemFreeHost((void *)gate));
    CK(cuMemFree(out));
    CK(cuMemFree(flag));
    gt_pass();
}

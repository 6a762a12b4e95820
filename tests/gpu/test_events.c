/* Cross-stream ordering with events: stream A produces (after a delay), B waits on A's event and
 * transforms; repeated many times with a fresh pattern each time, so a missed wait reads stale data. */
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

#define N (1 << 20)
#define ITERS 200

int main(void)
{
    gt_begin("events");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction fill = gt_function(mod, "fill_pattern"), xf = gt_function(mod, "xform");
    CUfunction spin = gt_function(mod, "spin_flag");

    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUevent ev_ready, ev_done, ev_start, ev_stop;
    CK(cuEventCreate(&ev_ready, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev_done, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev_start, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&ev_stop, CU_EVENT_DEFAULT));

    size_t bytes = (size_t)N * sizeof(unsigned);
    CUdeviceptr dbuf, dout;
    CK(cuMemAlloc(&dbuf, bytes));
    CK(cuMemAlloc(&dout, bytes));
    CK(cuMemsetD32(dbuf, 0xdeadbeefu, N));
    unsigned *host;
    CK(cuMemAllocHost((void **)&host, bytes));

    /* An event never recorded, and one recorded on idle work, are complete. */
    CK(cuEventQuery(ev_ready));

    /* Long enough that a consumer ignoring the event would overtake the producer. */
    long long delay = gt_cycles_for_ms(dev, 0.3);
    int n = N;
    int grid = 264, block = 256;
    for (int it = 0; it < ITERS; it++) {
        unsigned seed = gt_mix((unsigned)it, 7u);
        int timed = it % 50 == 0;
        if (timed)
            CK(cuEventRecord(ev_start, a));
        void *fargs[] = {&dbuf, &seed, &n, &delay};
        CK(cuLaunchKernel(fill, grid, 1, 1, block, 1, 1, 0, a, fargs, NULL));
        CK(cuEventRecord(ev_ready, a));
        if (timed)
            CK(cuEventRecord(ev_stop, a));
        CK(cuStreamWaitEvent(b, ev_ready, 0));
        void *xargs[] = {&dbuf, &dout, &n};
        CK(cuLaunchKernel(xf, grid, 1, 1, block, 1, 1, 0, b, xargs, NULL));
        CK(cuMemcpyDtoHAsync(host, dout, bytes, b));
        CK(cuEventRecord(ev_done, b));
        CUresult q = cuEventQuery(ev_done);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
            gt_fail("cuEventQuery returned %d (%s)", (int)q, gt_err_name(q));
        CK(cuEventSynchronize(ev_done));
        CK(cuEventQuery(ev_done));
        for (int i = 0; i < N; i++) {
            unsigned want = gt_xform(gt_mix((unsigned)i, seed));
            if (host[i] != want)
                gt_fail("iteration %d: out[%d] = 0x%08x, expected 0x%08x (stream B did not wait for A?)", it, i,
                        host[i], want);
        }
        if (timed) {
            CK(cuEventSynchronize(ev_stop));
            float ms = -1;
            CK(cuEventElapsedTime(&ms, ev_start, ev_stop));
            if (!(ms > 0.0f))
                gt_fail("iteration %d: cuEventElapsedTime gave %g ms", it, (double)ms);
        }
        memset(host, 0, bytes);
    }

    /* A 50 ms kernel: its end event is pending right after the launch, complete after the sync. */
    long long cycles = gt_cycles_for_ms(dev, 50);
    CUdeviceptr null_flag = 0;
    int value = 0;
    void *sargs[] = {&cycles, &null_flag, &value};
    CK(cuEventRecord(ev_start, a));
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, a, sargs, NULL));
    CK(cuEventRecord(ev_stop, a));
    EXPECT_RC(cuEventQuery(ev_stop), CUDA_ERROR_NOT_READY);
    CK(cuEventSynchronize(ev_stop));
    CK(cuEventQuery(ev_stop));
    float ms = 0;
    CK(cuEventElapsedTime(&ms, ev_start, ev_stop));
    if (ms < 25.0f || ms > 5000.0f)
        gt_fail("50 ms spin measured %g ms by events", (double)ms);
    printf("events: %d ordered iterations, spin of 50 ms measured %.1f ms\n", ITERS, (double)ms);

    CK(cuMemFreeHost(host));
    CK(cuMemFree(dbuf));
    CK(cuMemFree(dout));
    CK(cuEventDestroy(ev_ready));
    CK(cuEventDestroy(ev_done));
    CK(cuEventDestroy(ev_start));
    CK(cuEventDestroy(ev_stop));
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuModuleUnload(mod));
    gt_pass();
}

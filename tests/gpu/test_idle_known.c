/* Completion questions on streams found idle before (cumuxd answers them without the driver while nothing
 * of the program's could have queued work since: server/stream.c srv_stream_known_idle): every way of
 * giving an idle stream new work must make it busy again. Each case: the stream is found idle twice
 * (query, synchronize), then gets work that spins ~100 ms and then stores a value; the stream must read
 * busy at once, and after its synchronize (or the context's) the value must be there. */
#include <stdio.h>

#include "gpu_test.h"

static CUfunction spin;
static CUdeviceptr flag;
static long long cycles;

static int read_flag(void)
{
    int v = 0;
    CK(cuMemcpyDtoH(&v, flag, sizeof v));
    return v;
}

static void found_idle(CUstream s)
{
    CK(cuStreamSynchronize(s));
    CK(cuStreamQuery(s));
    CK(cuStreamQuery(s));
    CK(cuStreamSynchronize(s));
}

static void spin_on(CUstream s, int value)
{
    void *args[] = {&cycles, &flag, &value};
    CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

int main(void)
{
    gt_begin("idle_known");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    spin = gt_function(mod, "spin_flag");
    cycles = gt_cycles_for_ms(dev, 100);
    CK(cuMemAlloc(&flag, sizeof(int)));
    CUstream s, t, b;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_DEFAULT)); /* blocking: waits for the legacy stream */

    /* 1. A kernel on the idle stream itself. */
    CK(cuMemsetD32(flag, 0, 1));
    found_idle(s);
    spin_on(s, 1);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CK(cuStreamSynchronize(s));
    if (read_flag() != 1)
        gt_fail("1: after the stream's synchronize the kernel's store is missing (%d)", read_flag());
    CK(cuStreamQuery(s));

    /* 2. A wait on another stream's event: the idle stream now waits for t's kernel. */
    CK(cuMemsetD32(flag, 0, 1));
    found_idle(s);
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    spin_on(t, 2);
    CK(cuEventRecord(ev, t));
    CK(cuStreamWaitEvent(s, ev, 0));
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CK(cuStreamSynchronize(s));
    if (read_flag() != 2)
        gt_fail("2: synchronizing the waiting stream did not wait for the kernel it waits on (%d)", read_flag());

    /* 3. The legacy stream's rule: an idle blocking stream's next kernel waits for the legacy stream. */
    CK(cuMemsetD32(flag, 0, 1));
    found_idle(b);
    spin_on(NULL, 3);
    int v = 0;
    void *cargs[] = {&cycles, &flag, &v};
    (void)cargs;
    CUdeviceptr out;
    CK(cuMemAlloc(&out, sizeof(int)));
    CUfunction copy_flag = gt_function(mod, "copy_flag");
    void *fargs[] = {&flag, &out};
    CK(cuLaunchKernel(copy_flag, 1, 1, 1, 1, 1, 1, 0, b, fargs, NULL));
    EXPECT_RC(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    CK(cuStreamSynchronize(b));
    CK(cuMemcpyDtoH(&v, out, sizeof v));
    if (v != 3)
        gt_fail("3: the blocking stream's kernel ran before the legacy stream's (it read %d)", v);

    /* 4. The context: found idle, then a kernel on any stream; cuCtxSynchronize waits for it. */
    CK(cuMemsetD32(flag, 0, 1));
    CK(cuCtxSynchronize());
    CK(cuCtxSynchronize());
    spin_on(t, 4);
    CK(cuCtxSynchronize());
    if (read_flag() != 4)
        gt_fail("4: cuCtxSynchronize returned before the kernel's store (%d)", read_flag());

    /* 5. A copy into an idle stream (no kernel): it too is work. */
    found_idle(s);
    int host = 5;
    spin_on(s, 0); /* keeps the copy queued behind 100 ms of spinning */
    CK(cuMemcpyHtoDAsync(flag, &host, sizeof host, s));
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CK(cuStreamSynchronize(s));
    if (read_flag() != 5)
        gt_fail("5: the copy was not done at the stream's synchronize (%d)", read_flag());

    CK(cuEventDestroy(ev));
    CK(cuMemFree(out));
    CK(cuMemFree(flag));
    gt_pass();
}

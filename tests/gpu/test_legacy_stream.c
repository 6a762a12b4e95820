/* Legacy NULL stream versus blocking and non-blocking streams inside one client:
 * work on the legacy stream waits for blocking streams (and vice versa); a CU_STREAM_NON_BLOCKING
 * stream waits for neither, so its kernel completes while a ~200 ms spin is still running. */
#include <stdio.h>

#include "gpu_test.h"

static CUfunction spin, copy_flag, write_value;
static CUdeviceptr flag, out, out2;

static void launch1(CUfunction f, CUstream s, void **args)
{
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static int read_int(CUdeviceptr p)
{
    int v = 0;
    CK(cuMemcpyDtoH(&v, p, sizeof v));
    return v;
}

/* Spins on `spin_s` then stores `value` in flag; copies the flag out on `follow_s`; a write on `nb`
 * must finish first. Checks the follower saw the flag, i.e. it really waited. */
static void scenario(const char *what, CUstream spin_s, CUstream follow_s, CUstream nb, long long cycles,
                     int value, int check_timing)
{
    CUevent ev_start, ev_spin, ev_follow, ev_nb;
    CK(cuEventCreate(&ev_start, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&ev_spin, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&ev_follow, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&ev_nb, CU_EVENT_DISABLE_TIMING));
    CK(cuMemsetD32(flag, 0, 1));
    CK(cuMemsetD32(out, 0xffffffffu, 1));
    CK(cuMemsetD32(out2, 0xffffffffu, 1));
    CK(cuCtxSynchronize());

    int answer = 42;
    void *sargs[] = {&cycles, &flag, &value};
    void *cargs[] = {&flag, &out};
    void *wargs[] = {&out2, &answer};
    CK(cuEventRecord(ev_start, spin_s));
    launch1(spin, spin_s, sargs);
    CK(cuEventRecord(ev_spin, spin_s));
    launch1(copy_flag, follow_s, cargs);
    CK(cuEventRecord(ev_follow, follow_s));
    launch1(write_value, nb, wargs);
    CK(cuEventRecord(ev_nb, nb));
    uint64_t t0 = gt_now_ns();
    CK(cuEventSynchronize(ev_nb));
    double nb_ms = (double)(gt_now_ns() - t0) / 1e6;

    /* The non-blocking stream's work is done; the spin and what waits on it are not. */
    if (check_timing) {
        EXPECT_RC(cuEventQuery(ev_spin), CUDA_ERROR_NOT_READY);
        EXPECT_RC(cuStreamQuery(spin_s), CUDA_ERROR_NOT_READY);
        EXPECT_RC(cuEventQuery(ev_follow), CUDA_ERROR_NOT_READY);
        EXPECT_RC(cuStreamQuery(follow_s), CUDA_ERROR_NOT_READY);
    }
    CK(cuStreamQuery(nb));

    CK(cuCtxSynchronize());
    CK(cuStreamQuery(spin_s));
    CK(cuStreamQuery(follow_s));
    int got = read_int(out), got2 = read_int(out2);
    if (got != value)
        gt_fail("%s: follower read flag %d, expected %d (it did not wait for the spin)", what, got, value);
    if (got2 != answer)
        gt_fail("%s: non-blocking stream wrote %d, expected %d", what, got2, answer);
    float spin_ms = 0, follow_ms = 0;
    CK(cuEventElapsedTime(&spin_ms, ev_start, ev_spin));
    CK(cuEventElapsedTime(&follow_ms, ev_start, ev_follow));
    if (check_timing && (spin_ms < 100.0f || follow_ms < spin_ms))
        gt_fail("%s: spin took %g ms, follower ended at %g ms (expected >= 100 and after the spin)", what,
                (double)spin_ms, (double)follow_ms);
    printf("%s: spin %.1f ms, follower done at %.1f ms, non-blocking done after %.2f ms\n", what,
           (double)spin_ms, (double)follow_ms, nb_ms);
    CK(cuEventDestroy(ev_start));
    CK(cuEventDestroy(ev_spin));
    CK(cuEventDestroy(ev_follow));
    CK(cuEventDestroy(ev_nb));
}

int main(void)
{
    gt_begin("legacy_stream");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    spin = gt_function(mod, "spin_flag");
    copy_flag = gt_function(mod, "copy_flag");
    write_value = gt_function(mod, "write_value");
    CK(cuMemAlloc(&flag, sizeof(int)));
    CK(cuMemAlloc(&out, sizeof(int)));
    CK(cuMemAlloc(&out2, sizeof(int)));

    CUstream blocking, nonblocking;
    CK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    unsigned fl = 99;
    CK(cuStreamGetFlags(nonblocking, &fl));
    if (fl != CU_STREAM_NON_BLOCKING)
        gt_fail("cuStreamGetFlags(non-blocking) = %u", fl);
    CK(cuStreamGetFlags(blocking, &fl));
    if (fl != CU_STREAM_DEFAULT)
        gt_fail("cuStreamGetFlags(blocking) = %u", fl);

    /* Warm-up: with lazy loading, a kernel's first launch may synchronize; keep that out of the checks. */
    scenario("warm-up (no spin)", blocking, NULL, nonblocking, 0, 1, 0);
    CK(cuCtxSynchronize());

    long long cycles = gt_cycles_for_ms(dev, 200);
    /* Blocking stream spins, legacy stream follows. */
    scenario("blocking -> legacy", blocking, NULL, nonblocking, cycles, 1, 1);
    /* Legacy stream spins, blocking stream follows. */
    scenario("legacy -> blocking", NULL, blocking, nonblocking, cycles, 2, 1);
    /* CU_STREAM_LEGACY is the same stream as NULL. */
    scenario("blocking -> CU_STREAM_LEGACY", blocking, CU_STREAM_LEGACY, nonblocking, cycles, 3, 1);

    CK(cuStreamDestroy(blocking));
    CK(cuStreamDestroy(nonblocking));
    CK(cuMemFree(flag));
    CK(cuMemFree(out));
    CK(cuMemFree(out2));
    CK(cuModuleUnload(mod));
    gt_pass();
}

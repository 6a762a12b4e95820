/* A client for `cumux kill` (tests/test_kill_client.sh); it never ends by itself, so it is not in the
 * native suite.
 *   gpu_hang spin   launches a kernel that never returns (spin_flag for ~2^62 clocks) and waits for it
 *   gpu_hang idle   holds memory and a stream, then waits in host code (its GPU work is all done)
 * It prints "hang: waiting" once it waits. Killed by `cumux kill`, its wait (spin) or its next call (idle)
 * must return CUDA_ERROR_MPS_CLIENT_TERMINATED, and so must every call
 * after; then it prints "hang: terminated as expected" and passes. The idle client makes its next call when
 * it gets SIGUSR1 (or after 60 s). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"

static volatile sig_atomic_t poked;
static void on_usr1(int sig)
{
    (void)sig;
    poked = 1;
}

int main(int argc, char **argv)
{
    bool spin = argc > 1 && !strcmp(argv[1], "spin");
    if (argc < 2 || (!spin && strcmp(argv[1], "idle"))) {
        fprintf(stderr, "usage: gpu_hang spin|idle\n");
        return 2;
    }
    gt_begin(spin ? "hang spin" : "hang idle");
    gt_require_gpu();
    signal(SIGUSR1, on_usr1);
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction f = gt_function(mod, "spin_flag");
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, 1 << 20));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUresult r;
    if (spin) {
        long long cycles = 1ll << 62;
        CUdeviceptr flag = buf;
        int value = 1;
        void *args[] = {&cycles, &flag, &value};
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
        printf("hang: waiting\n");
        fflush(stdout);
        r = cuStreamSynchronize(s);
    } else {
        CK(cuStreamSynchronize(s));
        printf("hang: waiting\n");
        fflush(stdout);
        for (int i = 0; i < 600 && !poked; i++)
            usleep(100000);
        r = cuMemsetD8Async(buf, 0, 1 << 20, s);
        if (r == CUDA_SUCCESS)
            r = cuStreamSynchronize(s);
    }
    if (r != CUDA_ERROR_MPS_CLIENT_TERMINATED)
        gt_fail("the wait returned %d, not CUDA_ERROR_MPS_CLIENT_TERMINATED", (int)r);
    CUdeviceptr p;
    r = cuMemAlloc(&p, 4096);
    if (r != CUDA_ERROR_MPS_CLIENT_TERMINATED)
        gt_fail("a call after the kill returned %d, not CUDA_ERROR_MPS_CLIENT_TERMINATED", (int)r);
    printf("hang: terminated as expected\n");
    gt_pass();
}

/* Probe: does a client whose host function never returns hold up other clients' host functions?
 * Under cumux the server runs each host function's trampoline on the driver's callback thread and waits
 * there until the client's own thread has run the function. This program queues one that sleeps for
 * SECONDS (default 30) and then idles; run another program that uses host functions beside it (e.g.
 * tests/gpu's gpu_hostfn) and see whether it finishes.
 * build: cc -I/usr/local/cuda/include probe_hostfn_block.c -L/usr/local/cuda/lib64/stubs -lcuda
 * usage: probe_hostfn_block [SECONDS] */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

static void CUDA_CB sleepy(void *arg)
{
    unsigned s = *(unsigned *)arg;
    fprintf(stderr, "probe_hostfn_block: host function running, sleeping %u s\n", s);
    sleep(s);
}

int main(int argc, char **argv)
{
    static unsigned seconds;
    seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 30;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "probe_hostfn_block: setup failed\n");
        return 1;
    }
    if (cuLaunchHostFunc(s, sleepy, &seconds) != CUDA_SUCCESS) {
        fprintf(stderr, "probe_hostfn_block: cuLaunchHostFunc failed\n");
        return 1;
    }
    sleep(seconds + 2);
    CUresult r = cuStreamSynchronize(s);
    printf("probe_hostfn_block: stream done after the host function, %d\n", (int)r);
    return r != CUDA_SUCCESS;
}

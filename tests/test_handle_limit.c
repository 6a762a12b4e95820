/* CUMUX_MAX_HANDLES (issue 7, defect 6): a client that creates events without end is refused past the
 * limit with CUDA_ERROR_OUT_OF_MEMORY, and keeps working: a freed handle can be made again, the context
 * synchronizes, everything can be destroyed. Runs as a program under `cumux run` against a cumuxd on the
 * fake driver started with CUMUX_MAX_HANDLES=64 (the wrapper checks the server afterwards: no client
 * left, the fake's counts back to the baseline, no sanitizer report).
 * usage: test_handle_limit MAX_HANDLES */
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>

#define MAX_EVENTS 100000 /* without a limit the loop would not end: stop and fail here */

static CUevent ev[MAX_EVENTS];

int main(int argc, char **argv)
{
    int limit = argc > 1 ? atoi(argv[1]) : 0;
    CUdevice dev;
    CUcontext ctx;
    if (limit <= 0 || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: setup (limit %d)\n", limit);
        return 1;
    }
    int n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < MAX_EVENTS && (r = cuEventCreate(&ev[n], CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS)
        n++;
    int fails = 0;
    if (r != CUDA_ERROR_OUT_OF_MEMORY || n >= limit) {
        fprintf(stderr, "FAIL: %d events made, then %d; expected CUDA_ERROR_OUT_OF_MEMORY before %d\n", n, (int)r,
                limit);
        fails++;
    }
    /* The refused call costs nothing: one handle freed, one can be made. (The shim keeps a destroyed
     * event's record as a tombstone: `again` is a new pointer, ev[] keeps the old one.) */
    static CUevent again;
    if (n > 0) {
        n--;
        if (cuEventDestroy(ev[n]) != CUDA_SUCCESS || cuEventCreate(&again, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
            cuEventDestroy(again) != CUDA_SUCCESS) {
            fprintf(stderr, "FAIL: after a refusal, a freed handle could not be made again\n");
            fails++;
        }
    }
    if (cuEventRecord(ev[0], NULL) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS ||
        cuEventQuery(ev[0]) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: the client does not work after the refusal\n");
        fails++;
    }
    for (int i = 0; i < n; i++)
        if (cuEventDestroy(ev[i]) != CUDA_SUCCESS) {
            fprintf(stderr, "FAIL: cuEventDestroy %d\n", i);
            fails++;
            break;
        }
    if (cuDevicePrimaryCtxRelease(dev) != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL: cuDevicePrimaryCtxRelease\n");
        fails++;
    }
    printf("handle limit %d: %d events made before the refusal, %d failures\n", limit, n + 1, fails);
    return fails ? 1 : 0;
}

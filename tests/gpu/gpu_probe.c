/* Exit 0 when a CUDA GPU is usable, 77 (with a SKIP line) when not: used by run.sh.
 * gpu_probe --stack: also prints the context's stack limit ("stack limit: N bytes"), which the fault tests
 * compare before and after a standby worker takes over (it shrinks the stack while it waits). */
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

int main(int argc, char **argv)
{
    gt_begin("probe");
    gt_require_gpu();
    int n = 0;
    CK(cuDeviceGetCount(&n));
    printf("probe: %d CUDA device(s)\n", n);
    if (argc > 1 && strcmp(argv[1], "--stack") == 0) {
        CUdevice dev;
        CUcontext ctx;
        size_t stack = 0;
        CK(cuDeviceGet(&dev, 0));
        CK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CK(cuCtxSetCurrent(ctx));
        CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
        printf("stack limit: %zu bytes\n", stack);
        CK(cuDevicePrimaryCtxRelease(dev));
    }
    return 0;
}
